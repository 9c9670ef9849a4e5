"""A task read through the instance owner's handler service (``qpu_handlers.task``).

A released job needs no vendor credential (a guest's job on the site's accounts holds
none): the service that created its task reads it for it, once for all the job's ranks,
after checking that the job is the caller's (``flux_quantum.service.taskread``). This
``Vendor`` polls and fetches results that way; every other verb is the service's alone.
"""

from __future__ import annotations

import errno
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot, TaskState, Vendor
from flux_quantum.vendors.errors import NotSupported, VendorError

# The service process's name beside its supervisor module's (runner.service_name;
# qpu_handlers.py, standard library only, keeps its own copy).
SERVICE_SUFFIX = "-service"


class RelayedVendor(Vendor):
    """Poll and result of one job's tasks, through the supervisor module ``module``."""

    def __init__(self, handle: Any, jobid: int, vendor: str, module: str = "qpu_handlers"):
        self.handle = handle
        self.jobid = jobid
        self.name = vendor
        self.module = module

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
            hint = ""
            if exc.errno == errno.ENOSYS:
                hint = (
                    " (no handler service runs: start it with `flux quantum service "
                    "start`, or read the vendor with your own credentials: flux quantum "
                    "task --direct)"
                )
            raise VendorError(
                f"{op} of task {task.task_id} through the handler service "
                f"({topic}): {exc.strerror or exc}{hint}",
                vendor=self.name,
                vendor_code=f"errno {exc.errno}",
                operation=op,
                # The service restarting, or the vendor throttling it: wait it out.
                retryable=exc.errno in (errno.EAGAIN, errno.EIO, errno.ETIMEDOUT),
            ) from None

    def poll(self, task: TaskRef) -> TaskSnapshot:
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
        reply = self._ask("result", task)
        counts = reply.get("counts") or {}
        metadata = reply.get("task_metadata")
        return TaskResult(
            task=task,
            counts={str(k): int(v) for k, v in counts.items()},
            raw={"taskMetadata": metadata} if isinstance(metadata, dict) else None,
        )

    def _not_here(self, verb: str) -> NotSupported:
        return NotSupported(
            f"{verb} is done by the site's handler service, not by the job",
            vendor=self.name,
            vendor_code="NotSupported",
            operation=verb,
        )

    def probe(self, device: Device) -> Any:
        raise self._not_here("probe")

    def submit(self, device: Device, program_text: str, shots: int, token: str) -> TaskRef:
        raise self._not_here("submit")

    def cancel(self, task: TaskRef) -> None:
        raise self._not_here("cancel")

    def attach(self, task_id: str) -> TaskRef:
        raise self._not_here("attach")
