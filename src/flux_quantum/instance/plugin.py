"""The one place that talks to the ``quantum`` jobtap plugin.

Wraps the plugin's ``job-manager.quantum.*`` services (list, release, fail,
event, events, records) and ``flux jobtap query``, and knows where the installed plugin and
ingest validator live.  It never decides anything: policy and timing belong
to the handlers.  Flux is imported lazily so that everything else in the
package works on a machine without Flux.
"""

from __future__ import annotations

import builtins
import errno
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError

SERVICE = "job-manager.quantum"
PLUGIN_NAME = "quantum.so"


@dataclass(frozen=True)
class HeldJob:
    """A job the plugin is holding in DEPEND until its quantum task is ready."""

    id: int
    userid: int
    request: Any  # attributes.system.qpu; None for a follower
    t_submit: float
    follow: int | None = None  # --dependency=qpu:JOBID: the job whose task it rides
    # Its other unresolved Flux dependencies (after*, begin-time, other plugins'), as
    # the job-manager describes them; None while the plugin has not read them yet (just
    # after it was loaded). Which of them hold its task is the handlers' policy.
    dependencies: tuple[str, ...] | None = ()

    def held_for(self, now: float | None = None) -> float:
        """Seconds since the job was submitted (and so held)."""
        return max(0.0, (time.time() if now is None else now) - self.t_submit)


def _package_dir() -> Path:
    return Path(str(resources.files("flux_quantum")))


def plugin_path() -> Path:
    """Absolute path of the built plugin, or CommandError saying why there is none."""
    jobtap = _package_dir() / "jobtap"
    path = jobtap / PLUGIN_NAME
    if path.is_file():
        return path.resolve()
    status = jobtap / "BUILD-STATUS"
    reason = (
        status.read_text().strip()
        if status.is_file()
        else "this copy of flux-quantum was not installed with pip"
    )
    raise CommandError(
        f"the quantum jobtap plugin is not built ({reason}); install flux-core, "
        "then reinstall flux-quantum"
    )


def validator_path() -> Path:
    """Absolute path of the ingest validator plugin file."""
    return (_package_dir() / "validator.py").resolve()


def _dependencies(entry: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A list entry's other dependencies: absent (none), a list, or null (not read yet)."""
    if "dependencies" not in entry:
        return ()
    names = entry["dependencies"]
    if names is None:
        return None
    return tuple(sorted(str(name) for name in names))


def _job_ids(ids: int | Iterable[int]) -> dict[str, Any]:
    if isinstance(ids, int):
        return {"id": ids}
    id_list = [int(i) for i in ids]
    if not id_list:
        raise ValueError("no job ids given")
    return {"ids": id_list}


class PluginClient:
    """RPC client of the quantum plugin's services on one Flux handle."""

    def __init__(self, handle: Any = None) -> None:
        if handle is None:
            import flux

            handle = flux.Flux()
        self.handle = handle

    def _rpc(self, method: str, payload: Mapping[str, Any]) -> Any:
        try:
            return self.handle.rpc(f"{SERVICE}.{method}", dict(payload)).get()
        except OSError as exc:
            raise _plugin_error(method, exc) from exc

    def list(self) -> list[HeldJob]:
        """Held jobs the caller may see (a guest sees only their own)."""
        jobs, _ = self.list_since(None)
        assert jobs is not None
        return jobs

    def list_since(
        self, generation: int | None, known: Mapping[int, HeldJob] | None = None
    ) -> tuple[builtins.list[HeldJob] | None, int | None]:
        """Held jobs and the held set's generation; (None, generation) when the set has
        not moved since ``generation``. Jobs in ``known`` (by id) are reused as they are
        (a held job's request, submit time and leader never change; its dependencies
        are compared). A plugin without generations always answers with the jobs and
        None."""
        payload = {} if generation is None else {"generation": generation}
        resp = self._rpc("list", payload)
        current = resp.get("generation")
        if resp.get("unchanged"):
            return None, current
        known = known or {}
        jobs = []
        for j in resp["jobs"]:
            job = known.get(j["id"])
            dependencies = _dependencies(j)
            if job is None or job.dependencies != dependencies:
                job = HeldJob(
                    int(j["id"]),
                    int(j["userid"]),
                    j.get("request"),
                    float(j["t_submit"]),
                    int(j["follow"]) if j.get("follow") else None,
                    dependencies,
                )
            jobs.append(job)
        return jobs, current

    def release(
        self,
        ids: int | Iterable[int],
        task: str | None = None,
        device: str | None = None,
        info: Mapping[str, Any] | None = None,
        resources: builtins.list[Any] | None = None,
    ) -> builtins.list[int]:
        """Release held jobs: record task/device in the jobspec, drop the dependency.

        RESOURCES, if given, replaces the jobs' jobspec resources (e.g. to add
        the QPU vertex their task occupies) before they reach the scheduler.
        """
        payload = _job_ids(ids)
        if resources is not None:
            payload["resources"] = list(resources)
        if task is not None:
            payload["task"] = task
        if device is not None:
            payload["device"] = device
        if info is not None:
            payload["info"] = dict(info)
        return [int(i) for i in self._rpc("release", payload)["released"]]

    def fail(self, ids: int | Iterable[int], note: str) -> builtins.list[int]:
        """End held jobs with a fatal ``qpu`` exception carrying NOTE."""
        payload = _job_ids(ids)
        payload["note"] = note
        return [int(i) for i in self._rpc("fail", payload)["failed"]]

    def post_event(self, jobid: int, name: str, context: Mapping[str, Any] | None = None) -> None:
        """Record a ``qpu-*`` milestone in a held job's eventlog."""
        error = self.post_events([(jobid, name, context)])[0]
        if error is not None:
            raise error

    EVENTS_CHUNK = 256  # events per ``events`` request

    def post_events(
        self, items: Iterable[tuple[int, str, Mapping[str, Any] | None]]
    ) -> builtins.list[CommandError | None]:
        """``post_event`` of many events: up to 256 in one ``events`` request, the
        requests pipelined (every one sent before the first answer is read), so 10,000
        events cost some forty messages and about one round trip. Events to one job are
        recorded in the order given. One outcome per item, in order: None when it was
        recorded, else the error. A plugin without ``events`` (an older build still
        loaded) gets one ``event`` request per item."""
        from flux_quantum.instance.rpc import RpcError, pipelined

        payloads = []
        for jobid, name, context in items:
            payload: dict[str, Any] = {"id": jobid, "name": name}
            if context is not None:
                payload["context"] = dict(context)
            payloads.append(payload)
        chunks = [
            payloads[i : i + self.EVENTS_CHUNK] for i in range(0, len(payloads), self.EVENTS_CHUNK)
        ]
        answers = pipelined(self.handle, [(f"{SERVICE}.events", {"events": c}) for c in chunks])
        out: list[CommandError | None] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, OSError) and answer.errno == errno.ENOSYS:
                answer = {"errors": self._post_one_by_one(chunk)}
            if isinstance(answer, OSError):
                out += [_plugin_error("event", answer)] * len(chunk)
                continue
            errors = answer.get("errors") if isinstance(answer, Mapping) else None
            if not isinstance(errors, list) or len(errors) != len(chunk):
                out += [
                    CommandError("event: the plugin's answer does not match the request")
                ] * len(chunk)
                continue
            for error in errors:
                if error is None or isinstance(error, CommandError):
                    out.append(error)
                else:
                    number = int(error.get("errno", errno.EIO))
                    out.append(_plugin_error("event", RpcError(number, error.get("error", ""))))
        return out

    def _post_one_by_one(
        self, payloads: builtins.list[dict[str, Any]]
    ) -> builtins.list[CommandError | None]:
        from flux_quantum.instance.rpc import pipelined

        return [
            _plugin_error("event", answer) if isinstance(answer, OSError) else None
            for answer in pipelined(self.handle, [(f"{SERVICE}.event", p) for p in payloads])
        ]

    RECORDS_CHUNK = 1000  # job ids per ``records`` request

    def records(self, ids: Sequence[int]) -> dict[int, tuple[dict[str, Any], builtins.list[Any]]]:
        """The current jobspec and the qpu-* eventlog entries of the held jobs among
        ``ids`` whose history the plugin saw from their submission, by id, in a few
        pipelined requests. A job it leaves out (held before the plugin was loaded,
        not held, not the caller's) must be looked up in its eventlog; a plugin
        without ``records`` (an older build still loaded) leaves out every job."""
        from flux_quantum.instance.rpc import pipelined

        ids = list(ids)
        requests = [
            (f"{SERVICE}.records", {"ids": ids[i : i + self.RECORDS_CHUNK]})
            for i in range(0, len(ids), self.RECORDS_CHUNK)
        ]
        out: dict[int, tuple[dict[str, Any], list[Any]]] = {}
        for answer in pipelined(self.handle, requests):
            if not isinstance(answer, Mapping):
                continue  # an error: those jobs are looked up one by one
            for entry in answer.get("jobs") or ():
                out[int(entry["id"])] = (entry.get("jobspec") or {}, entry.get("events") or [])
        return out

    def query(self) -> dict[str, Any]:
        """Counters and configuration, as ``flux jobtap query quantum.so`` shows them."""
        try:
            return self.handle.rpc("job-manager.jobtap-query", {"name": PLUGIN_NAME}).get()
        except OSError as exc:
            raise _plugin_error("query", exc) from exc


class PluginNotLoaded(CommandError):
    """The instance has no quantum jobtap plugin (its services answer ENOSYS)."""


def _plugin_error(method: str, exc: OSError) -> CommandError:
    if exc.errno == errno.ENOSYS:
        return PluginNotLoaded(
            "the quantum jobtap plugin is not loaded in this instance "
            "(flux jobtap load $(flux quantum plugin-path))"
        )
    return CommandError(f"{method}: {exc.strerror or exc}")
