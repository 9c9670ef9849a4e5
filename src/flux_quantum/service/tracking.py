"""Tracking a program's vendor task: polls, queue milestones, ``max_wait``.

An attempt enters TRACK by its own ``Attempt.tracked``: a task created or found again by
``Submission``, or one recorded in the eventlog (``Adoption``: re-attached by its first
poll here). Each tracked attempt is polled when the release rule's answer to its last poll plans
(``Release.polled``: adaptive intervals, from an estimated place when the vendor gives
no position); a merged task is polled once for all the jobs that poll it at about the
same time. A poll's answer goes to ``Charges`` when the task ended, fails the task over
through ``Outcomes`` when it failed or the vendor lost it, keeps the jobs held while the
device is paused, posts a ``qpu-queue`` event at each queue milestone, teaches the
device's drain estimate the task's move, and otherwise goes to ``Release``, which asks
the release rule (``flux_quantum.timing``) once with every fact and acts on its answer. A
window's task (reserved QPU time) polled after a restart releases its jobs at once.
Between polls ``watch`` checks the lead and ``qpu.max_wait``. Every poll runs in a
worker through ``AttemptCalls``. Where the vendor's events are heard (``VendorEvents``),
an event makes a task's poll come at once and the polls between events are a slow safety
net (``VendorEvents.next_poll``). This part never creates a task, and never releases or
fails a job itself: it hands over to ``Release`` and ``Outcomes``.
"""

from __future__ import annotations

import syslog
from dataclasses import replace
from typing import Any

from flux_quantum.protocol import events
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.outcomes import Outcomes, problem_base
from flux_quantum.service.release import Release
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.state import Attempt, Phase, Program, Unit
from flux_quantum.service.vendor_events import VendorEvents
from flux_quantum.vendors.base import DeviceStatus, TaskSnapshot, TaskState, Vendor
from flux_quantum.vendors.errors import NotFound

# Queue positions that earn a qpu-queue event when first reached (not every poll).
MILESTONES: tuple[int, ...] = (100, 10, 1)


class Tracking:
    def __init__(
        self,
        ctx: ServiceContext,
        calls: AttemptCalls,
        outcomes: Outcomes,
        release: Release,
        charges: Charges,
        reservations: Reservations,
        events: VendorEvents,
    ) -> None:
        self.ctx = ctx
        self.calls = calls
        self.outcomes = outcomes
        self.release = release
        self.charges = charges
        self.reservations = reservations
        self.events = events
        # A merged task's last poll, by task id (when, what): its other jobs share it.
        self._polls: dict[str, tuple[float, TaskSnapshot]] = {}
        self._riders: dict[str, list[tuple[Unit, Program, Attempt]]] = {}  # a poll under way

    def step(self, unit: Unit, program: Program) -> None:
        """Poll the attempt's task (TRACK; the other phases are ``Submission``'s)."""
        if not unit.active or program.attempt.busy or program.attempt.phase is not Phase.TRACK:
            return
        self._start_poll(unit, program)

    def watch(self, unit: Unit, program: Program, now: float) -> None:
        """Between polls: the early release of a tracked task (the cluster may have
        filled up, or time passed), then ``max_wait``."""
        attempt = program.attempt
        if unit.active and attempt.phase is Phase.TRACK:
            self.release.check_lead(unit, attempt, now)
        if unit.active and attempt.phase is Phase.TRACK:
            self._check_max_wait(unit, program, now)

    def _start_poll(self, unit: Unit, program: Program) -> None:
        attempt = program.attempt
        assert attempt.task is not None
        task = attempt.task
        vendor = self.calls.vendor(unit, program, task.vendor, "poll")
        if vendor is None:
            return
        if attempt.merge is not None and attempt.attached:
            self._poll_merged(unit, program, vendor)
            return
        if not attempt.attached:
            self.calls.call(unit, program, lambda: vendor.attach_and_poll(task), self._polled)
        else:
            self.calls.call(unit, program, lambda: vendor.poll(task), self._polled)

    def _poll_merged(self, unit: Unit, program: Program, vendor: Vendor) -> None:
        """One poll of a merged task for all its jobs that poll it at about the same
        time: one under way is joined, one within the shortest poll interval reused."""
        attempt = program.attempt
        task = attempt.task
        assert task is not None
        seen = self._polls.get(task.task_id)
        if seen is not None and self.ctx.clock() - seen[0] < self.ctx.schedule.min_interval:
            self._polled(unit, program, attempt, replace(seen[1], task=task), None, shared=True)
            return
        riders = self._riders.get(task.task_id)
        attempt.busy = True
        if riders is not None:
            riders.append((unit, program, attempt))
            return
        self._riders[task.task_id] = [(unit, program, attempt)]

        def done(snap: Any, error: BaseException | None) -> None:
            for rider_unit, rider, rode in self._riders.pop(task.task_id, []):
                rode.busy = False
                self.calls.completed(rider_unit, rider)
                if not rider_unit.active or rider.attempt is not rode or rode.task is None:
                    continue
                mine = None if snap is None else replace(snap, task=rode.task)
                self._polled(rider_unit, rider, rode, mine, error, shared=rode is not attempt)

        self.ctx.workers.submit(lambda: vendor.poll(task), done)

    def _keep_poll(self, now: float, snap: TaskSnapshot) -> None:
        for task_id, (t, _) in list(self._polls.items()):
            if now - t > self.ctx.schedule.min_interval:
                del self._polls[task_id]
        self._polls[snap.task.task_id] = (now, snap)

    def _polled(
        self,
        unit: Unit,
        program: Program,
        attempt: Attempt,
        snap: Any,
        error: Any,
        *,
        shared: bool = False,
    ) -> None:
        ctx = self.ctx
        assert attempt.device is not None
        now = ctx.clock()
        attempt.last_poll = now
        if error is not None:
            if isinstance(error, NotFound):
                record = events.TaskFailed(
                    **problem_base(program, attempt), state="NOT_FOUND", reason=str(error)
                )
                task_id = attempt.task.task_id if attempt.task else "?"
                self.outcomes.task_problem(
                    unit, program, record, f"the vendor does not know task {task_id}"
                )
                return
            self.calls.failed(unit, program, "poll", error)
            return
        if not shared:
            ctx.counters.polls += 1
            if attempt.merge is not None:
                self._keep_poll(now, snap)
        if not attempt.attached:
            attempt.attached = True
            ctx.counters.tasks_attached += 1
            ctx.log(syslog.LOG_INFO, f"unit {unit.id}: re-attached {snap.task.task_id}")
        attempt.seen(snap)
        self.calls.recovered(attempt)
        if snap.terminal:
            self.charges.ended(unit, program, attempt, snap)
        window = attempt.window
        if window is not None:
            # A window's task is polled only after a restart (the job was released
            # when it was created): released at once, unless the window ended first.
            if snap.state in (TaskState.CANCELLED, TaskState.CANCELLING) and snap.t >= window.end:
                self.outcomes.window_ended(
                    unit,
                    window,
                    f"task {snap.task.task_id} was cancelled at the end of {window.label} "
                    f"({snap.state.value}) while the job was held",
                    task=snap.task.task_id,
                )
                return
            if snap.state not in (TaskState.FAILED, TaskState.CANCELLED, TaskState.CANCELLING):
                self.release.ready(unit, attempt, self.reservations.release_reason(unit, window))
                return
        if snap.state in (TaskState.FAILED, TaskState.CANCELLED, TaskState.CANCELLING):
            reason = snap.message or f"the vendor reports {snap.state.value}"
            record = events.TaskFailed(
                **problem_base(program, attempt), state=snap.state.value, reason=reason
            )
            self.outcomes.task_problem(
                unit,
                program,
                record,
                f"task {snap.task.task_id} on {attempt.device.name} {snap.state.value}: {reason}",
            )
            return
        paused = ctx.device_snapshots.get(attempt.device.name)
        if (
            paused is not None
            and paused.status is DeviceStatus.PAUSED
            and snap.state in (TaskState.CREATED, TaskState.QUEUED)
        ):
            # Nothing starts on a paused device: the task keeps its place in the queue
            # and the jobs stay held until the device takes work again.
            attempt.device_paused(
                f"{attempt.device.name} is paused ({paused.reason}); released after it resumes",
                now + ctx.options.device_check_interval,
            )
            return
        self._milestones(unit, program, snap)
        # The task's move teaches the device's drain (tasks on one device teach each
        # other); the rule then judges with what was learned.
        ctx.estimator.observe_position(
            attempt.device.name,
            snap.task.task_id,
            snap.position,
            snap.t,
            capped=snap.position_capped,
        )
        decision = self.release.polled(unit, attempt, now)
        if not decision.release:
            assert decision.next_poll is not None  # a poll's answer plans the next one
            delay = self.events.next_poll(
                attempt, unit.request.release_at, snap, decision.next_poll
            )
            attempt.due = now + delay

    def _milestones(self, unit: Unit, program: Program, snap: TaskSnapshot) -> None:
        attempt = program.attempt
        if snap.position is None or snap.position_capped:
            return
        crossed = [m for m in MILESTONES if snap.position <= m and m not in attempt.milestones]
        if not crossed:
            return
        attempt.milestones.update(crossed)
        record = events.QueueMilestone(
            index=program.index,
            attempt=attempt.number,
            milestone=min(crossed),
            position=snap.position,
            task=snap.task.task_id,
        )
        self.ctx.post_all(unit, record)

    def _check_max_wait(self, unit: Unit, program: Program, now: float) -> None:
        attempt = program.attempt
        limit = unit.request.max_wait
        if limit is None or attempt.queued_at is None or attempt.busy:
            return
        waited = now - attempt.queued_at
        if waited <= limit:
            return
        assert attempt.device is not None
        record = events.MaxWaitExceeded(
            **problem_base(program, attempt), waited=round(waited, 1), max_wait=limit
        )
        self.outcomes.task_problem(
            unit,
            program,
            record,
            f"task on {attempt.device.name} waited {waited:.0f}s > qpu.max_wait {limit:g}s",
        )
