"""A real, throwaway PostgreSQL server for the tests and benches (t/, bench/ledger.py):
``initdb`` in a temporary directory, ``postgres`` on a free loopback port with its unix
socket in that directory, run as an unprivileged user (PostgreSQL refuses root: as
``nobody`` through ``setpriv`` when the tests run as root, else as the tests' user),
ready once psycopg connects (polled, never a fixed sleep), stopped with ``pg_ctl stop -m
fast``. ``missing()`` says in one sentence what is not installed, for a module-level
``pytest.skip``.

The server lets the superuser ``postgres`` in with a password over TCP; each ledger
database (:meth:`PgServer.database`) is owned by the role ``fq`` (password ``fq-secret``),
which is what a service connects as, its password in a credentials file.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

START_TIMEOUT = 60.0
SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "pg-admin-secret"
ROLE = "fq"
ROLE_PASSWORD = "fq-secret"
UNPRIVILEGED = ("nobody", "nogroup")


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> str | None:
    """What this machine lacks to run a PostgreSQL server for the tests, or None."""
    lacking = []
    if pg_bin() is None:
        lacking.append("PostgreSQL's server (initdb, pg_ctl: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        lacking.append("psycopg (pip install 'flux-quantum[postgresql]')")
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        lacking.append("setpriv (util-linux), to run PostgreSQL as nobody")
    if not lacking:
        return None
    return "PostgreSQL ledger tests SKIPPED: not installed: " + "; ".join(lacking)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One server: ``start()``, ``stop()``, ``restart()``, ``database()``."""

    def __init__(self) -> None:
        bindir = pg_bin()
        assert bindir is not None, missing()
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="fq-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.prefix: list[str] = []
        self._databases = 0
        self._initdb()

    # -- running as the unprivileged user

    def _own(self) -> None:
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam(UNPRIVILEGED[0])
        for path in (self.root, *self.root.rglob("*")):
            os.chown(path, user.pw_uid, user.pw_gid)
        self.prefix = [
            "setpriv",
            f"--reuid={UNPRIVILEGED[0]}",
            f"--regid={UNPRIVILEGED[1]}",
            "--clear-groups",
        ]

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        proc = subprocess.run(
            [*self.prefix, *cmd], capture_output=True, text=True, env=env, cwd=self.root,
            check=False, timeout=START_TIMEOUT,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout}")
        return proc

    def _initdb(self) -> None:
        self.sockets.mkdir()
        pwfile = self.root / "pwfile"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        self.root.chmod(0o700)
        self._own()
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
            f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        pwfile.unlink()
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.sockets}'\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\nmax_connections = 60\n"
            )

    # -- life

    def start(self) -> PgServer:
        self._run(str(self.bindir / "pg_ctl"), "start", "-W", "-D", str(self.data),
                  "-l", str(self.log))  # fmt: skip
        self.wait()
        return self

    def wait(self, timeout: float = START_TIMEOUT) -> None:
        """Until the server accepts a connection (polled with psycopg)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.admin_url(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    log = self.log.read_text() if self.log.exists() else ""
                    raise RuntimeError(f"PostgreSQL did not start: {exc}\n{log[-2000:]}") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "stop", "-m", "fast", "-w", "-D",
                  str(self.data), check=False)  # fmt: skip

    def restart(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "restart", "-m", "fast", "-W", "-D",
                  str(self.data), "-l", str(self.log))  # fmt: skip
        self.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases

    def admin_url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        """What ``[quantum.ledger] url`` says: no password."""
        return f"postgresql://127.0.0.1:{self.port}/{database}?user={ROLE}"

    def admin(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.admin_url(database), autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def database(self) -> str:
        """A new empty database owned by the role ``fq``; its name."""
        if self._databases == 0:
            with contextlib.suppress(Exception):
                self.admin(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{ROLE_PASSWORD}'")
        self._databases += 1
        name = f"ledger{self._databases}"
        self.admin(f"CREATE DATABASE {name} OWNER {ROLE}")
        return name


def credentials_file(directory: Path, password: str = ROLE_PASSWORD) -> Path:
    """A credentials file as the service wants it: the password, mode 0600."""
    path = directory / "ledger-password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return path
