"""The service's one way to cancel a vendor task: in a worker, retried while the vendor
cannot take it, never while another active unit still waits for the task.

Every part that ends something hands its task here (a fail-over, a failed or abandoned
unit, a reserved window that ended, a create that landed for jobs gone meanwhile, a
task found by its token after its jobs left): one cancel per task reaches the vendor,
retried through the service's ``RetryPolicy`` (at most ``CANCEL_TRIES`` retryable
failures, one other) and then left to the vendor with a warning. A task the vendor does
not know (``NotFound``) needs no cancel. A merged task that another active unit's
programs ride is left running. This part never settles, releases or fails anything.
"""

from __future__ import annotations

import syslog
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.retry import Retries
from flux_quantum.service.state import Phase, Unit
from flux_quantum.vendors.base import TaskRef
from flux_quantum.vendors.errors import NotFound

CANCEL_TRIES = 5  # retryable failures of a cancel before it is left to the vendor


@dataclass
class PendingCancel:
    """A cancel the vendor could not take yet: tried again when ``due``."""

    task: TaskRef
    why: str
    due: float = 0.0
    retry: Retries = field(default_factory=Retries)


class Cancels:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self._pending: list[PendingCancel] = []

    def cancel(self, task: TaskRef, why: str, *, unit: Unit | None = None) -> None:
        """Cancel ``task`` (``why``: for the log), retried while the vendor cannot take
        it; a merged task that another active unit than ``unit`` still needs is left to
        run (the others' programs are in it)."""
        if task.program is not None and self.needed(task, unit):
            self.ctx.log(
                syslog.LOG_INFO,
                f"task {task.task_id} left running ({why}): other jobs' programs are in it",
            )
            return
        self._send(PendingCancel(task, why))

    def needed(self, task: TaskRef, unit: Unit | None) -> bool:
        """Whether an active unit other than ``unit`` still waits for ``task``."""
        for other in self.ctx.active_units():
            if other is unit:
                continue
            for attempt in other.attempts():
                if (
                    attempt.task is not None
                    and attempt.task.task_id == task.task_id
                    and attempt.phase is not Phase.DONE
                    and not attempt.cancelled
                ):
                    return True
        return False

    def _send(self, pending: PendingCancel) -> None:
        ctx = self.ctx
        task = pending.task
        try:
            vendor = ctx.vendor(task.vendor)
        except (ValueError, FluxQuantumError) as exc:
            ctx.log(syslog.LOG_WARNING, f"cannot cancel task {task.task_id}: {exc}")
            return

        def done(result: Any, error: BaseException | None) -> None:
            if error is None:
                ctx.counters.tasks_cancelled += 1
                ctx.log(syslog.LOG_INFO, f"cancelled task {task.task_id} ({pending.why})")
                return
            if isinstance(error, NotFound):
                ctx.log(
                    syslog.LOG_INFO, f"task {task.task_id} is not known to the vendor: no cancel"
                )
                return
            decision = ctx.retry.failed_call(
                pending.retry, error, retryable_limit=CANCEL_TRIES, other_limit=1
            )
            if decision.give_up:
                ctx.log(syslog.LOG_WARNING, f"cannot cancel task {task.task_id}: {error}")
                return
            pending.due = ctx.clock() + decision.delay
            self._pending.append(pending)
            level = syslog.LOG_INFO if decision.first else syslog.LOG_DEBUG
            ctx.log(level, f"cannot cancel task {task.task_id} yet, will retry: {error}")

        ctx.workers.submit(lambda: vendor.cancel(task), done)

    def retry(self, now: float) -> None:
        """Send again the cancels whose time came."""
        due = [c for c in self._pending if c.due <= now]
        self._pending = [c for c in self._pending if c.due > now]
        for pending in due:
            self._send(pending)

    @property
    def pending(self) -> int:
        return len(self._pending)
