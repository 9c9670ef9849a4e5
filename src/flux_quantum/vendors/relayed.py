"""A task read through the site's handler service (``qpu_handlers.task``).

A guest's job on the site's accounts holds no vendor credential: the service that
created its task reads it for it, after checking that the job is the caller's
(``flux_quantum.service.taskread``). This ``Vendor`` polls and fetches results that way;
every other verb is the service's alone.
"""

from __future__ import annotations

from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot, TaskState, Vendor
from flux_quantum.vendors.errors import NotSupported, VendorError


class RelayedVendor(Vendor):
    """Poll and result of one job's tasks, through the supervisor module ``module``."""

    def __init__(self, handle: Any, jobid: int, vendor: str, module: str = "qpu_handlers"):
        self.handle = handle
        self.jobid = jobid
        self.name = vendor
        self.module = module

    def _ask(self, op: str, task: TaskRef) -> dict[str, Any]:
        payload = {"id": self.jobid, "task": task.task_id, "op": op}
        try:
            return self.handle.rpc(f"{self.module}.task", payload).get()
        except OSError as exc:
            raise VendorError(
                f"{op} of task {task.task_id} through the site's handler service "
                f"({self.module}.task): {exc.strerror or exc}",
                vendor=self.name,
                vendor_code=f"errno {exc.errno}",
                operation=op,
                # The service restarting, or the vendor throttling it: wait it out.
                retryable=exc.errno in (11, 5, 110),
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
        counts = self._ask("result", task).get("counts") or {}
        return TaskResult(task=task, counts={str(k): int(v) for k, v in counts.items()})

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
