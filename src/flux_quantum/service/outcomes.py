"""How a unit's story ends, or a program's attempt does: fail-over, fail, finish, cancel.

A task that failed, waited past ``qpu.max_wait`` or lost its device is recorded in the
eventlog, cancelled if it may still run (it is billed), and followed by a new attempt
(``qpu.failover``) or by the failure of every job of the unit with a reason that says
what happened. A job whose reserved window (Braket Direct) ended before its task ran in
it is told so (``qpu-reservation-ended``) and follows its end rule: a new attempt in the
device's public queue, or the failure of the job. A unit that every job left has its
tasks cancelled (``Cancels``: retried while the vendor cannot take them). Every attempt it
leaves behind goes to ``Lookups``: its reservation released when its create never went
out, its task watched until it is settled, a create without an answer looked up by its
token first. This part never releases a job and never chooses a device: it only ends
things and says why.
"""

from __future__ import annotations

import contextlib
import syslog
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.service.cancels import Cancels
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.lookups import Lookups
from flux_quantum.service.reservations import Reservations, ended_note
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Attempt, Phase, Program, Unit, UnitState
from flux_quantum.site import reservations


class Outcomes:
    def __init__(
        self,
        ctx: ServiceContext,
        face: Face,
        lookups: Lookups,
        cancels: Cancels,
        sessions: Sessions,
        reservations: Reservations,
    ) -> None:
        self.ctx = ctx
        self.face = face
        self.lookups = lookups
        self.cancels = cancels
        self.sessions = sessions
        self.reservations = reservations

    # -- a program's attempt

    def task_problem(
        self, unit: Unit, program: Program, record: events.TaskProblem, what: str
    ) -> None:
        """Record what happened to a waiting task, cancel it if it may still run, then
        fail over or fail as the request says."""
        attempt = program.attempt
        assert attempt.device is not None
        task = attempt.live_task()
        stranded = task is not None and not isinstance(record, events.TaskFailed)
        if stranded:
            record = _with(record, action="cancel the stranded task")
        self.ctx.post_all(unit, record)
        if stranded and task is not None:
            self.cancels.cancel(task, what, unit=unit)
            attempt.cancelled = True
        self.ctx.meters.task_ended(attempt, record.name)
        self.failover(unit, program, attempt.device.name, what)

    def failover(self, unit: Unit, program: Program, failed: str | None, what: str) -> None:
        """Start the program's next attempt, away from ``failed``; or fail the unit when
        the request says ``failover=fail`` or the program used up ``max_tasks``."""
        mode = unit.request.failover
        attempt = program.attempt
        if mode == "fail":
            self.fail_unit(unit, f"qpu: {what}; qpu.failover=fail, so the job fails")
            return
        if attempt.number + 1 >= self.ctx.options.max_tasks:
            self.fail_unit(
                unit, f"qpu: {what}; gave up after {attempt.number + 1} task(s) for this program"
            )
            return
        self.ctx.counters.failovers += 1
        device_class = "simulator" if mode == "simulator" else None
        shown = f"fail-over: {what}"
        self.next_attempt(unit, program, failed, what, mode, device_class, shown=shown)
        self.ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: fail-over ({mode}) after: {what}")

    def next_attempt(
        self,
        unit: Unit,
        program: Program,
        failed: str | None,
        what: str,
        mode: str,
        device_class: str | None = None,
        *,
        shown: str | None = None,
    ) -> None:
        """The program's next attempt (a new token), recorded (``qpu-failover`` with
        ``mode``); the one it replaces goes to ``Charges``. ``shown``: what the jobs'
        memo says instead of the new attempt's state (a fail-over), until it changes."""
        attempt = program.attempt
        self.lookups.leave(unit, program, attempt, list(unit.jobs))
        following = program.follow(failed, device_class, shown)
        record = events.Failover(
            index=program.index,
            attempt=following.number,
            reason=what,
            mode=mode,
            failed=failed,
            exclude=tuple(sorted(following.exclude)),
            device_class=following.device_class,
        )
        self.ctx.post_all(unit, record)

    # -- a reserved window

    def window_ended(
        self, unit: Unit, window: reservations.Reservation, reason: str, *, task: str | None = None
    ) -> None:
        """The unit's window takes no more work (over, or too little left for a task)
        before its task ran in it: say so once (``qpu-reservation-ended``), then follow
        the job's end rule. ``on-demand``: every program that was for the window gets a
        new attempt on the public queue (a new token, never the window's ARN again);
        ``fail``: the job fails. Called at selection too, with no attempt in the window
        yet: then only the event, and the selection goes on (on-demand) or the job fails."""
        ctx = self.ctx
        now = ctx.clock()
        rule = self.reservations.end_rule(unit, window)
        programs = [
            p
            for p in unit.programs
            if p.attempt.window is not None and p.attempt.window.name == window.name
        ]
        first = programs[0] if programs else None
        if self.reservations.first_end(unit, window):
            record = events.ReservationEnded(
                reservation=window.name,
                end=window.end,
                action=rule,
                index=first.index if first is not None else None,
                attempt=first.attempt.number if first is not None else None,
                task=task,
                reason=reason,
            )
            ctx.post_all(unit, record)
            ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: {reason}; {rule}")
        self.reservations.left(unit)
        note = ended_note(window, now, self.reservations.task_seconds(window))
        if rule == reservations.FAIL:
            self.fail_unit(unit, note)
            return
        for program in programs:
            live = program.attempt.live_task()
            if live is not None:
                # Braket cancels it at the end; nobody will read it.
                self.cancels.cancel(live, f"{window.label} ended before it ran")
                program.attempt.cancelled = True
            self.next_attempt(
                unit,
                program,
                None,
                f"{note.removeprefix('qpu: ')}; the task goes to the public queue",
                reservations.ON_DEMAND,
            )

    # -- a unit

    def fail_unit(self, unit: Unit, note: str) -> None:
        """Cancel the unit's live tasks and fail every job with ``note``."""
        for attempt in unit.attempts():
            task = attempt.live_task()
            if task is not None:
                self.cancels.cancel(task, "its jobs failed", unit=unit)
        self.sessions.unit_ended(unit, UnitState.FAILED, note)  # before its jobs leave
        ids = list(unit.jobs)
        if ids:
            self.fail_ids(ids, note)
        self.ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: failed: {note}")
        self.finish(unit, UnitState.FAILED, note)

    def fail_ids(self, ids: list[int], note: str) -> None:
        try:
            self.ctx.counters.failed += len(self.ctx.flux.fail(ids, note))
        except (CommandError, OSError):
            # All-or-nothing over ids: fail the ones still held one by one.
            for jobid in ids:
                with contextlib.suppress(CommandError, OSError):
                    self.ctx.counters.failed += len(self.ctx.flux.fail([jobid], note))

    def abandon(self, unit: Unit) -> None:
        """Every job of the unit left before its release: cancel its tasks (they are
        billed and nobody will read them)."""
        for attempt in unit.attempts():
            task = attempt.live_task()
            if task is not None:
                self.cancels.cancel(task, "every job riding it is gone", unit=unit)
        self.finish(unit, UnitState.ABANDONED)

    def finish(self, unit: Unit, state: UnitState, note: str | None = None) -> None:
        """Stop tracking the unit; a released qpu.group stays joinable for a while.
        ``note``: why it failed (shown among the recent outcomes)."""
        ctx = self.ctx
        why = {UnitState.ABANDONED: "every job riding it is gone"}.get(state, state.value)
        riders = [*unit.jobs, *unit.released_jobs]
        self.face.ended(unit, state, note)
        ctx.meters.unit_ended(unit, state)
        ctx.units.end(unit, state)
        self.sessions.unit_ended(unit, state, why)
        self.reservations.unit_ended(unit, state)
        for program in unit.programs:
            attempt = program.attempt
            self.lookups.leave(unit, program, attempt, riders)
            attempt.ended()
            if attempt.task is not None and attempt.device is not None:
                ctx.estimator.forget_task(attempt.device.name, attempt.task.task_id)
        # A device slot may have freed up: selections waiting for one try again now.
        for other in ctx.units:
            for attempt in other.attempts():
                if attempt.phase is Phase.SELECT and attempt.wait_posted:
                    attempt.due = 0.0

    def expire_groups(self, now: float) -> None:
        self.ctx.units.expire_groups(now, self.ctx.options.group_linger)


def _with(record: events.TaskProblem, **changes: Any) -> events.TaskProblem:
    from dataclasses import replace

    return replace(record, **changes)


def problem_base(program: Program, attempt: Attempt) -> dict[str, Any]:
    """The fields every TaskProblem record of this attempt carries."""
    assert attempt.device is not None
    return {
        "index": program.index,
        "attempt": attempt.number,
        "device": attempt.device.name,
        "task": attempt.task.task_id if attempt.task else None,
    }
