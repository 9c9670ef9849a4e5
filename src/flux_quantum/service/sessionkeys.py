"""The ids of the vendor sessions this service opened and has not closed yet, kept where
only the service's user can read them, so that a service killed between opening a
session and its first task can still close it after a restart.

A session id is a secret (whoever holds it adds work billed to the account): it never
goes to an eventlog, a memo or a log line. ``Sessions`` finds a session again through a
task that rode it (``Vendor.session_of``); a session no task rode yet (the service was
killed right after the vendor opened it) can only be found here. One file per session,
named by its fingerprint, written 0600 into a 0700 directory (atomically: a file is whole
or absent) before the service records the session anywhere else, and removed once the
vendor has closed it.

Where (``directory_for``): the instance's ``statedir`` for the instance owner's service,
else its ``rundir`` (both the instance's own, so two instances never close each other's
sessions); a guest's own service keeps them under ``$XDG_STATE_HOME/flux-quantum``, in a
directory named after the instance's URI. ``SessionKeys(None)`` keeps them in memory only
(tests). Reading trusts nothing: a file that is not a session record is skipped and said
once. It never calls a vendor and never decides when a session is closed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flux_quantum.vendors.base import VendorSession

SUBDIR = "flux-quantum"
DIRNAME = "sessions"
_NAME = re.compile(r"^[0-9a-f]{12}\.json$")


def directory_for(
    *,
    owner: bool,
    statedir: str | None,
    rundir: str | None,
    uri: str,
    env: Mapping[str, str] = os.environ,
) -> Path | None:
    """Where this service keeps its session keys (None: nowhere usable, memory only)."""
    if owner and (statedir or rundir):
        return Path(statedir or rundir or "") / SUBDIR / DIRNAME
    home = env.get("HOME")
    state = env.get("XDG_STATE_HOME") or (str(Path(home) / ".local" / "state") if home else None)
    if state is None:
        return None
    key = hashlib.sha256(uri.encode()).hexdigest()[:12]
    return Path(state) / SUBDIR / DIRNAME / key


class SessionKeys:
    """The open sessions' ids, by fingerprint. Thread-safe: ``keep`` runs in the vendor
    worker that opened the session, the rest on the reactor. Without a directory they
    are kept in memory, where ``survivor()`` (a restarted service, in tests) finds them."""

    def __init__(
        self,
        directory: Path | None = None,
        log: Callable[[str], None] | None = None,
        *,
        _memory: dict[str, VendorSession] | None = None,
    ) -> None:
        self.directory = directory
        self._log = log
        self._lock = threading.Lock()
        self._mine: dict[str, VendorSession] = {}  # opened by this process
        self._memory = {} if _memory is None else _memory  # the store without a directory
        self._said: set[str] = set()

    def survivor(self) -> SessionKeys:
        """The same store as a restarted service sees it: nothing opened by it yet."""
        return SessionKeys(self.directory, self._log, _memory=self._memory)

    def keep(self, session: VendorSession) -> None:
        """Remember ``session`` before anything else records it (raises OSError when it
        cannot be written: the caller then closes the session at once)."""
        with self._lock:
            if self.directory is None:
                self._memory[session.fingerprint] = session
            else:
                self._write(session)
            self._mine[session.fingerprint] = session

    def get(self, fingerprint: str | None) -> VendorSession | None:
        """The session with this fingerprint, if this service (or its predecessor) kept it."""
        if fingerprint is None:
            return None
        with self._lock:
            if fingerprint in self._mine:
                return self._mine[fingerprint]
        return self.kept().get(fingerprint)

    def drop(self, fingerprint: str | None) -> None:
        """The session is closed (or the vendor no longer knows it): forget its id."""
        if fingerprint is None:
            return
        with self._lock:
            self._mine.pop(fingerprint, None)
            self._memory.pop(fingerprint, None)
            if self.directory is not None:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / f"{fingerprint}.json").unlink()

    def left(self) -> dict[str, VendorSession]:
        """The sessions a predecessor kept and nobody closed (not opened by this process)."""
        with self._lock:
            mine = set(self._mine)
        return {fp: s for fp, s in self.kept().items() if fp not in mine}

    def kept(self) -> dict[str, VendorSession]:
        """Every session kept, by this process or a predecessor."""
        with self._lock:
            found = {**self._memory, **self._mine}
            if self.directory is None:
                return found
            try:
                names = sorted(os.listdir(self.directory))
            except FileNotFoundError:
                return found
            except OSError as exc:
                self._say(f"session keys: cannot read {self.directory}: {exc.strerror}")
                return found
            for name in names:
                if not _NAME.match(name) or name[:12] in found:
                    continue
                session = self._read(self.directory / name)
                if session is not None and session.fingerprint == name[:12]:
                    found[name[:12]] = session
                elif session is not None:
                    self._say(f"session keys: {name} does not hold the session it is named for")
            return found

    def _write(self, session: VendorSession) -> None:
        assert self.directory is not None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.directory.stat().st_mode & 0o077:
            self.directory.chmod(0o700)
        record = {
            "vendor": session.vendor,
            "device": session.device,
            "mode": session.mode,
            "session_id": session.session_id,
        }
        path = self.directory / f"{session.fingerprint}.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(record).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _read(self, path: Path) -> VendorSession | None:
        try:
            data: Any = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            self._say(f"session keys: {path.name} is not readable JSON ({exc}); skipped")
            return None
        fields = ("vendor", "device", "mode", "session_id")
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) and data[k] for k in fields
        ):
            self._say(f"session keys: {path.name} is not a session record; skipped")
            return None
        return VendorSession(data["vendor"], data["device"], data["mode"], data["session_id"])

    def _say(self, text: str) -> None:
        if text in self._said:
            return
        self._said.add(text)
        if self._log is not None:
            self._log(text)
