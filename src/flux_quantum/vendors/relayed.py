"""A released job's task read through the instance owner's handler service
(``qpu_handlers.task``).

A released job needs no vendor credential to read its task (a guest's job on the site's
accounts holds none): the service that created the task reads it for it, once for all
the job's ranks, after checking that the job is the caller's
(``flux_quantum.service.taskread``). This ``Vendor`` polls and fetches results of the
tasks the job was released with that way. Everything else (a task the job created
itself, as a variational loop does, a create, a cancel, a session) is the job's own
business and goes to its own vendor, made from the job's own credentials only when
first needed.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Collection, Sequence
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    SessionOpening,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    Vendor,
    VendorSession,
)
from flux_quantum.vendors.errors import NotSupported, VendorError

# The service process's name beside its supervisor module's (runner.service_name;
# qpu_handlers.py, standard library only, keeps its own copy).
SERVICE_SUFFIX = "-service"


class RelayedVendor(Vendor):
    """Poll and result of job ``jobid``'s released ``tasks`` through the supervisor
    module ``module``; any other call to ``own()``, the job's own vendor."""

    def __init__(
        self,
        handle: Any,
        jobid: int,
        vendor: str,
        module: str = "qpu_handlers",
        *,
        tasks: Collection[str] = (),
        own: Callable[[], Vendor] | None = None,
    ) -> None:
        self.handle = handle
        self.jobid = jobid
        self.name = vendor
        self.module = module
        self.tasks = frozenset(tasks)
        self._own_factory = own
        self._own: Vendor | None = None

    def own(self, verb: str) -> Vendor:
        """The job's own vendor (its own credentials), made once."""
        if self._own is None:
            if self._own_factory is None:
                raise NotSupported(
                    f"{verb} is done by the handler service, not by the job",
                    vendor=self.name,
                    vendor_code="NotSupported",
                    operation=verb,
                )
            self._own = self._own_factory()
        return self._own

    def _relayed(self, task: TaskRef) -> bool:
        return not self.tasks or task.task_id in self.tasks

    def _ask(self, op: str, task: TaskRef) -> dict[str, Any]:
        payload = {"id": self.jobid, "task": task.task_id, "op": op}
        topic = f"{self.module}.task"
        try:
            try:
                return self.handle.rpc(topic, payload).get()
            except OSError as exc:
                if exc.errno != errno.ENOSYS:
                    raise
                # No supervisor module: a service started with `flux quantum service
                # run` answers under its own name.
                topic = f"{self.module}{SERVICE_SUFFIX}.task"
                return self.handle.rpc(topic, payload).get()
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                what = (
                    f"no handler service answers {self.module}.task: start it with "
                    "`flux quantum service start`, or read the vendor with your own "
                    "credentials (flux quantum task --direct)"
                )
            else:
                what = f"the handler service ({topic}): {exc.strerror or exc}"
            raise VendorError(
                f"{op} through {what}" if exc.errno != errno.ENOSYS else f"{op}: {what}",
                vendor=self.name,
                vendor_code=f"errno {exc.errno}",
                operation=op,
                # The service restarting (after a kill, or its instance's restart: no
                # service answers for a moment), or the vendor throttling it: wait it out.
                retryable=exc.errno in (errno.EAGAIN, errno.EIO, errno.ETIMEDOUT, errno.ENOSYS),
            ) from None

    def poll(self, task: TaskRef) -> TaskSnapshot:
        if not self._relayed(task):
            return self.own("poll").poll(task)
        reply = self._ask("poll", task)
        position = reply.get("position")
        return TaskSnapshot(
            task=task,
            state=TaskState(reply["state"]),
            position=position if isinstance(position, int) else None,
            position_capped=bool(reply.get("position_capped")),
            message=reply.get("message"),
            t=float(reply.get("t") or 0.0),
        )

    def result(self, task: TaskRef) -> TaskResult:
        """The counts; ``raw`` holds only the task's times and shots the service relays
        (``{"taskMetadata": {...}}``, as in a Braket result document), never the
        vendor's whole document."""
        if not self._relayed(task):
            return self.own("result").result(task)
        reply = self._ask("result", task)
        counts = reply.get("counts") or {}
        metadata = reply.get("task_metadata")
        return TaskResult(
            task=task,
            counts={str(k): int(v) for k, v in counts.items()},
            raw={"taskMetadata": metadata} if isinstance(metadata, dict) else None,
        )

    def result_of(self, task: TaskRef) -> TaskResult:
        """The job's own result: the service knows the job's place in a merged task and
        answers only that program's counts."""
        if not self._relayed(task):
            return self.own("result").result_of(task)
        return self.result(task)

    def results(self, task: TaskRef) -> list[TaskResult]:
        """A released task's result as the service relays it (the job's own share); a
        task of the job's own, per program from its own vendor."""
        if not self._relayed(task):
            return self.own("results").results(task)
        return [self.result(task)]

    # -- the job's own business

    def probe(self, device: Device) -> DeviceSnapshot:
        return self.own("probe").probe(device)

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        return self.own("submit").submit(
            device, program_text, shots, token, reservation=reservation
        )

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        return self.own("submit_set").submit_set(device, programs, token, reservation=reservation)

    def cancel(self, task: TaskRef) -> None:
        self.own("cancel").cancel(task)

    def attach(self, task_id: str) -> TaskRef:
        return self.own("attach").attach(task_id)

    def reports_positions(self, device: Device) -> bool:
        return self.own("reports_positions").reports_positions(device)

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        return self.own("find_task").find_task(device, token, since=since)

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        return self.own("lookup_task").lookup_task(device, token, since=since)

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        return self.own("open_session").open_session(device, mode, cost_limit=cost_limit)

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        return self.own("submit_in").submit_in(session, device, program_text, shots, token)

    def close_session(self, session: VendorSession) -> None:
        self.own("close_session").close_session(session)

    def session_of(self, task: TaskRef) -> VendorSession | None:
        return self.own("session_of").session_of(task)

    def billed_seconds(self, task: TaskRef) -> float | None:
        return self.own("billed_seconds").billed_seconds(task)

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        return self.own("session_environment").session_environment(session)
