"""The vendor task lifecycle of one program's attempt: read, select, submit, track.

Each attempt goes SELECT (its program file read and counted, ``programs``; a device
chosen, ``Selection``) -> SUBMIT (the estimate is reserved in the site's ledger, the
unit's session opened with its first task when it asked for one, the idempotency token
goes to the eventlog, then the vendor create; a refused reservation fails the job and
nothing is created) -> TRACK (adaptive polls of the task; queue milestones; the release
point or ``max_wait``; a task that ends is settled) -> READY (handed to ``Release``).
An attempt for a reserved window (``Attempt.window``) waits in SUBMIT, before its token
is recorded, until ``Reservations`` admits it (queued for the admission time, not polled);
admitted, its create carries the window's ARN (the guard ``Reservations.arn`` right before
the vendor's create) and the job is released as soon as the task exists. A window that
takes no more work hands it to ``Outcomes.window_ended``. Every blocking call runs in a
worker through ``AttemptCalls``, which retries a failed one by the service's one retry
policy. This part never releases or fails a job itself:
it hands over to ``Release`` and ``Outcomes``.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.protocol import events
from flux_quantum.protocol.events import MergeSlot
from flux_quantum.selection.poller import AdaptivePoller
from flux_quantum.selection.release_point import Backlog
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.merges import Merges, merge_key
from flux_quantum.service.outcomes import Outcomes, problem_base
from flux_quantum.service.programs import DEFAULT_PROGRAM_NAME, ProgramError, read_counted
from flux_quantum.service.release import Release
from flux_quantum.service.reservations import Reservations, WindowClosed
from flux_quantum.service.selection import Selection
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Attempt, Phase, Program, Unit, UnitSession
from flux_quantum.site.ledger import LedgerUnavailable
from flux_quantum.vendors.base import (
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskSnapshot,
    TaskState,
    Vendor,
)
from flux_quantum.vendors.errors import NotFound, VendorError

# Queue positions that earn a qpu-queue event when first reached (not every poll).
MILESTONES: tuple[int, ...] = (100, 10, 1)

# Why a job waits held with no task while the site's ledger cannot be reached (its memo).
LEDGER_WAIT = "the site's ledger is unavailable: no task is created before its reservation"


class Tasks:
    def __init__(
        self,
        ctx: ServiceContext,
        calls: AttemptCalls,
        face: Face,
        outcomes: Outcomes,
        release: Release,
        charges: Charges,
        sessions: Sessions,
        selection: Selection,
        reservations: Reservations,
        merges: Merges,
    ) -> None:
        self.ctx = ctx
        self.calls = calls
        self.face = face
        self.outcomes = outcomes
        self.release = release
        self.charges = charges
        self.sessions = sessions
        self.selection = selection
        self.reservations = reservations
        self.merges = merges
        # A merged task's last poll, by task id (when, what): its other jobs share it.
        self._polls: dict[str, tuple[float, TaskSnapshot]] = {}
        self._riders: dict[str, list[tuple[Unit, Program, Attempt]]] = {}  # a poll under way

    # -- scheduling

    def step(self, unit: Unit, program: Program) -> None:
        """Start the attempt's next blocking call, whatever its phase needs."""
        attempt = program.attempt
        if not unit.active or attempt.busy:
            return
        if attempt.phase in (Phase.SELECT, Phase.SUBMIT) and program.text is None:
            path, cwd = program.path, unit.cwd
            owner = unit.userid if unit.userid != self.ctx.userid else None
            devices = self.ctx.catalog.devices
            self.calls.call(
                unit, program, lambda: read_counted(cwd, path, owner, devices), self._loaded
            )
        elif attempt.phase is Phase.SELECT:
            self.selection.start(unit, program)
        elif attempt.phase is Phase.SUBMIT:
            # A batch's tasks are submitted in program order (its eventlog reads in
            # that order), whichever device choice came back first: an earlier program
            # chosen in the same moment goes first; one still choosing is waited for.
            for earlier in unit.programs[: program.index]:
                if not self._submitted_before(unit, earlier):
                    return
            self._start_submit(unit, program)
        elif attempt.phase is Phase.TRACK:
            self._start_poll(unit, program)

    def _submitted_before(self, unit: Unit, earlier: Program) -> bool:
        """Whether ``earlier`` (a program before the one to submit) has recorded its
        qpu-submit, starting its submit first when it is due now."""
        attempt = earlier.attempt
        if attempt.phase is Phase.SELECT:
            return False
        if attempt.phase is not Phase.SUBMIT or attempt.submit_posted:
            return True
        if not attempt.busy and attempt.due <= self.ctx.clock():
            self.step(unit, earlier)
        return unit.active and earlier.attempt.submit_posted

    def watch(self, unit: Unit, program: Program, now: float) -> None:
        """Between calls: max_wait and the early release of a tracked task; a job waiting
        for its window is stepped sooner when its lead grew (the cluster filled up)."""
        attempt = program.attempt
        if self._waits_for_window(attempt) and not attempt.busy:
            window = attempt.window
            assert window is not None
            decision = self.reservations.decide(
                window, now=now, lead=self.release.window_lead(unit, now)
            )
            if decision.admit or decision.ended:
                attempt.due = 0.0
            elif decision.retry_at is not None and decision.retry_at < attempt.due:
                attempt.due = decision.retry_at
            return
        if unit.active and attempt.phase is Phase.TRACK:
            self.release.check_lead(unit, attempt, now)
        if unit.active and attempt.phase is Phase.TRACK:
            self._check_max_wait(unit, program, now)

    def _loaded(
        self, unit: Unit, program: Program, attempt: Attempt, loaded: Any, error: Any
    ) -> None:
        if isinstance(error, ProgramError):
            self.outcomes.fail_unit(unit, f"qpu: {error}")
            return
        if error is not None:
            self.calls.failed(unit, program, "read program", error)
            return
        program.text, program.counts, program.unfit = loaded
        attempt.due = 0.0

    # -- errors

    def submit_record(self, unit: Unit, program: Program) -> events.Submit:
        attempt = program.attempt
        assert attempt.device is not None and attempt.token is not None
        return events.Submit(
            unit=unit.id,
            index=program.index,
            attempt=attempt.number,
            token=attempt.token,
            device=attempt.device.name,
            vendor=attempt.device.vendor,
            shots=unit.request.shots,
            program=program.path,
            default_program=(
                f"{DEFAULT_PROGRAM_NAME} (the request names no program)"
                if program.path is None
                else None
            ),
            exclude=tuple(sorted(attempt.exclude)),
            device_class=attempt.device_class,
            since=attempt.since,
            ahead=attempt.ahead,
            session=self._riding(unit, attempt.device).fingerprint
            if self._riding(unit, attempt.device)
            else None,
            reservation=attempt.window.name if attempt.window is not None else None,
            merge=attempt.merge.to_context() if attempt.merge is not None else None,
        )

    @staticmethod
    def _riding(unit: Unit, device: Device) -> UnitSession | None:
        """The unit's open session if tasks on ``device`` ride it."""
        session = unit.session
        if session is None or not session.open or session.device != device.name:
            return None
        return session

    def task_record(self, unit: Unit, program: Program) -> events.TaskCreated:
        attempt = program.attempt
        assert attempt.task is not None and attempt.token is not None
        return events.TaskCreated(
            unit=unit.id,
            index=program.index,
            attempt=attempt.number,
            token=attempt.token,
            task=attempt.task.task_id,
            device=attempt.device.name if attempt.device else None,
        )

    @staticmethod
    def _waits_for_window(attempt: Attempt) -> bool:
        """Whether the attempt is for a window and not admitted yet (no token recorded)."""
        return (
            attempt.window is not None
            and attempt.phase is Phase.SUBMIT
            and not attempt.submit_posted
        )

    def _admitted(self, unit: Unit, program: Program) -> bool:
        """Whether the unit goes into its attempt's window now. Not yet: the attempt is
        due when the answer may change (the admission time, or the time the window
        stops taking work; a freed place wakes it sooner), and its memo says why; the
        window took no more work: the end rule applies."""
        ctx = self.ctx
        attempt = program.attempt
        window = attempt.window
        assert window is not None
        now = ctx.clock()
        decision = self.reservations.admission(
            unit, window, now=now, lead=self.release.window_lead(unit, now)
        )
        if decision.admit:
            return True
        if decision.ended:
            self.outcomes.window_ended(unit, window, decision.reason)
            return False
        stops = window.end - self.reservations.task_seconds(window)
        attempt.due = stops if decision.retry_at is None else min(decision.retry_at, stops)
        self.face.update_memos(unit)
        return False

    def _wait_for_ledger(self, unit: Unit, attempt: Attempt, error: Exception) -> None:
        """The ledger cannot be reached: no task without its reservation. The job stays
        held with no task, its memo says why, and the reservation is tried again after
        the retry policy's back-off (never given up; the outage is logged once, by
        ``Charges``)."""
        ctx = self.ctx
        decision = ctx.retry.failed(attempt.retry, retryable=True)
        attempt.due = ctx.clock() + decision.delay
        attempt.retry.holding = f"{LEDGER_WAIT} (next try in {decision.delay:.0f}s)"
        ctx.log(syslog.LOG_DEBUG, f"unit {unit.id}: reservation waits for the ledger: {error}")
        self.face.update_memos(unit)

    def _start_submit(self, unit: Unit, program: Program) -> None:
        ctx = self.ctx
        attempt = program.attempt
        assert attempt.device is not None and attempt.token is not None
        assert program.text is not None
        if self._waits_for_window(attempt) and not self._admitted(unit, program):
            return  # held with no task until admitted into its window
        try:
            refusal = self.charges.reserve(unit, program, attempt)
        except LedgerUnavailable as exc:
            self._wait_for_ledger(unit, attempt, exc)
            return
        if attempt.retry.holding is not None and attempt.retry.holding.startswith(LEDGER_WAIT):
            attempt.retry.clear()  # the ledger is back
        if refusal is not None:
            # Reserved before the create (and before any session), or not created at all.
            self.outcomes.fail_unit(unit, f"qpu: {refusal}")
            return
        device, text, shots, token = attempt.device, program.text, unit.request.shots, attempt.token
        vendor = self.calls.vendor(unit, program, device.vendor, "create")
        if vendor is None:
            return
        if attempt.merge is not None:
            # Recorded as a member of a merged task: the one create for all of them.
            self._create_set_again(unit, program, vendor)
            return
        if not attempt.submit_posted and self.merges.alone_reason(unit, program) is None:
            offer = self.merges.offer(unit, program, ctx.clock())
            if not offer.send:
                # Waits in the pool, no token recorded yet; its memo says until when.
                attempt.due = offer.due if offer.due is not None else ctx.clock() + 1.0
                for member, line in offer.waiting or ((unit, offer.text),):
                    for waiting in member.attempts():
                        if waiting.pooled:
                            waiting.retry.holding = line.removeprefix("waiting ")
                    self.face.update_memos(member)
                return
            attempt.retry.holding = None
            if len(offer.members) > 1:
                self._submit_set(offer.members, vendor)
                return
        if unit.request.session is not None and unit.session is None and not attempt.submit_posted:
            # The first task of a unit that asked for a session opens it, then rides it;
            # the unit's other programs wait for it. A later step of a loop rides the
            # session its loop has open on the device instead.
            if program.index != 0 and not unit.programs[0].attempt.submit_posted:
                attempt.due = ctx.clock() + ctx.options.tick
                return
            if not self.sessions.ride(unit, device):
                if self.sessions.opening(unit, device):
                    # Another step of the loop is opening one there: ride that one.
                    attempt.due = ctx.clock() + ctx.options.tick
                    return
                mode = unit.request.session
                self.calls.call(
                    unit,
                    program,
                    lambda: self.sessions.open(vendor, device, mode),
                    self._session_opened,
                )
                return
        riding = self._riding(unit, device)
        rode = self.sessions.rode(unit) if riding is not None and riding.handle is None else None
        if rode is not None:
            # After a restart the session's id is known to the vendor only: read it back
            # through a task that rode it before this task rides it too.
            self.calls.call(unit, program, lambda: vendor.session_of(rode), self._session_found)
            return
        if not attempt.submit_posted:
            # The token goes to the eventlog BEFORE the vendor hears of it, with the time
            # before the create: a service that dies after the create finds the task again
            # by its token (Braket: the same clientToken; IBM: find_task since that time).
            attempt.since = ctx.clock()
            if ctx.post_all(unit, self.submit_record(unit, program)) == 0:
                attempt.due = ctx.clock() + ctx.options.scan_interval
                return
            attempt.submit_posted = True
        session = riding.handle if riding is not None else None
        look, since = attempt.look_first, attempt.since or unit.t_submit
        found: list[TaskRef] = []
        window, clock, booked = attempt.window, ctx.clock, self.reservations
        task_seconds = booked.task_seconds(window) if window is not None else 0.0

        def make() -> TaskRef:
            if window is not None:
                # The one guard, right before the create: never an ARN on another
                # device, nor once the window has less than one task's time left.
                arn = booked.arn(window, device, now=clock(), task_seconds=task_seconds)
                return vendor.submit(device, text, shots, token, reservation=arn)
            if session is not None:
                return vendor.submit_in(session, device, text, shots, token)
            return vendor.submit(device, text, shots, token)

        def create() -> TaskRef:
            return _found_or_made(
                vendor, device, token, look=look, since=since, found=found, make=make
            )

        def created(unit: Unit, program: Program, attempt: Attempt, task: Any, error: Any) -> None:
            self._created(unit, program, attempt, task, error, found=bool(found))

        attempt.creating_now()
        self.calls.call(unit, program, create, created)

    # -- merged tasks

    def _submit_set(self, members: Sequence[tuple[Unit, Program]], vendor: Vendor) -> None:
        """Record every member's place in the merged task (its ``qpu-submit`` with the
        slot, BEFORE the vendor hears of it), then create the task once for all."""
        ctx = self.ctx
        tokens = [p.attempt.token or "" for _, p in members]
        key = merge_key(tokens)
        shots = tuple(u.request.shots for u, _ in members)
        since = ctx.clock()
        for index, (member_unit, member) in enumerate(members):
            attempt = member.attempt
            attempt.merge = MergeSlot(key, index, shots)
            attempt.since = since
            attempt.retry.holding = None
            # A job gone meanwhile keeps its place: the layout is what was recorded.
            ctx.post_all(member_unit, self.submit_record(member_unit, member))
            attempt.submit_posted = True
        programs = [(p.text or "", u.request.shots) for u, p in members]
        self.merges.sent(key, members, programs)
        ctx.counters.tasks_merged += 1
        ctx.counters.jobs_merged += len(members)
        self._create_set(members, key, vendor, look=False, since=since)

    def _create_set_again(self, unit: Unit, program: Program, vendor: Vendor) -> None:
        """A recorded member is due again (its create failed and is retried, or a
        restart found its token): the set's create, for every member still waiting."""
        ctx = self.ctx
        attempt = program.attempt
        assert attempt.merge is not None
        key = attempt.merge.key
        formed = self.merges.again(unit, program, ctx.clock())
        if formed is None:
            return
        if not formed.members:
            attempt.due = formed.due if formed.due is not None else ctx.clock() + 1.0
            attempt.retry.holding = formed.text
            self.face.update_memos(unit)
            return
        look = any(p.attempt.look_first for _, p in formed.members)
        since = min(
            (p.attempt.since for _, p in formed.members if p.attempt.since is not None),
            default=unit.t_submit,
        )
        self._create_set(formed.members, key, vendor, look=look, since=since)

    def _create_set(
        self,
        members: Sequence[tuple[Unit, Program]],
        key: str,
        vendor: Vendor,
        *,
        look: bool,
        since: float,
    ) -> None:
        device = members[0][1].attempt.device
        assert device is not None
        programs = self.merges.programs(key)
        assert programs is not None
        found: list[TaskRef] = []

        def create() -> TaskRef:
            return _found_or_made(
                vendor,
                device,
                key,
                look=look,
                since=since,
                found=found,
                make=lambda: vendor.submit_set(device, programs, key),
            )

        def created(alive: list[tuple[Unit, Program]], task: Any, error: Any) -> None:
            self._set_created(alive, key, task, error, found=bool(found))

        for _, member in members:
            member.attempt.creating_now()
        self.calls.call_many(members, create, created)

    def _set_created(
        self,
        alive: list[tuple[Unit, Program]],
        key: str,
        task: Any,
        error: Any,
        *,
        found: bool,
    ) -> None:
        ctx = self.ctx
        if error is not None:
            if isinstance(error, VendorError) and not error.retryable:
                # Refused (over the device's own limits, say): each job tries alone.
                self.merges.forget(key)
                for member_unit, member in alive:
                    attempt = member.attempt
                    assert attempt.device is not None
                    name = attempt.device.name
                    record = events.SubmitFailed(
                        index=member.index,
                        attempt=attempt.number,
                        device=name,
                        reason=str(error),
                        code=error.vendor_code,
                    )
                    ctx.post_all(member_unit, record)
                    attempt.alone = f"{name} refused its merged task ({error.vendor_code})"
                    self.outcomes.next_attempt(
                        member_unit,
                        member,
                        None,
                        f"{name} refused the merged task: {error} [{error.vendor_code}]; "
                        "the job's program goes alone",
                        "alone",
                    )
                    self.face.update_memos(member_unit)
                return
            for member_unit, member in alive:
                member.attempt.look_first = True
                self.calls.failed(member_unit, member, "create merged task", error)
            return
        self.merges.forget(key)
        if found:
            ctx.counters.tasks_found += 1
        else:
            ctx.counters.tasks_created += 1
        for member_unit, member in alive:
            attempt = member.attempt
            assert attempt.merge is not None
            ref = replace(task, program=attempt.merge.index)
            queued_at = ctx.clock() if attempt.since is None or not found else attempt.since
            self.start_tracking(member_unit, attempt, ref, queued_at=queued_at, attached=True)
            self.charges.attach(attempt)
            self.calls.recovered(attempt)
            ctx.post_all(member_unit, self.task_record(member_unit, member))
            self.face.update_memos(member_unit)
        device = alive[0][1].attempt.device
        ctx.log(
            syslog.LOG_INFO,
            f"task {task.task_id} on {device.name if device else '?'}: "
            f"{len(alive)} jobs' programs in one task",
        )

    def _session_opened(
        self, unit: Unit, program: Program, attempt: Attempt, opening: Any, error: Any
    ) -> None:
        """Record the session (or why the tasks run as single jobs), then submit."""
        assert attempt.device is not None and unit.request.session is not None
        device = attempt.device
        if error is not None:
            if not isinstance(error, VendorError) or error.retryable:
                self.calls.failed(unit, program, "open session", error)
                return
            # Refused for good (an account without sessions): the task still runs.
            opening = SessionOpening(
                unit.request.session,
                "job",
                None,
                f"{device.vendor} refused a {unit.request.session} session on {device.name} "
                f"({error.vendor_code}: {error}); tasks run as single jobs",
            )
        self.calls.recovered(attempt)
        self.sessions.opened(unit, device, opening)
        attempt.due = 0.0

    def _session_found(
        self, unit: Unit, program: Program, attempt: Attempt, found: Any, error: Any
    ) -> None:
        """The session read back through a task that rode it: ridden, or gone."""
        if error is not None:
            self.calls.failed(unit, program, "find session", error)
            return
        self.calls.recovered(attempt)
        self.sessions.found(unit, found)
        attempt.due = 0.0

    def _created(
        self,
        unit: Unit,
        program: Program,
        attempt: Attempt,
        task: Any,
        error: Any,
        found: bool = False,
    ) -> None:
        ctx = self.ctx
        assert attempt.device is not None
        if isinstance(error, WindowClosed) and attempt.window is not None:
            self.outcomes.window_ended(unit, attempt.window, str(error))
            return
        if error is not None:
            if isinstance(error, VendorError) and not error.retryable:
                record = events.SubmitFailed(
                    index=program.index,
                    attempt=attempt.number,
                    device=attempt.device.name,
                    reason=str(error),
                    code=error.vendor_code,
                )
                ctx.post_all(unit, record)
                self.outcomes.failover(
                    unit,
                    program,
                    attempt.device.name,
                    f"{attempt.device.name} refused the task: {error} [{error.vendor_code}]",
                )
                return
            # The create may have landed before the error (a lost answer): look first.
            attempt.look_first = True
            self.calls.failed(unit, program, "create", error)
            return
        if found:
            ctx.counters.tasks_found += 1
            ctx.log(syslog.LOG_INFO, f"unit {unit.id}: found task {task.task_id} again by token")
        else:
            ctx.counters.tasks_created += 1
        queued_at = ctx.clock() if attempt.since is None or not found else attempt.since
        self.start_tracking(unit, attempt, task, queued_at=queued_at, attached=True)
        self.charges.attach(attempt)
        self.calls.recovered(attempt)
        ctx.post_all(unit, self.task_record(unit, program))
        self.face.update_memos(unit)
        ctx.log(syslog.LOG_INFO, f"unit {unit.id}: task {task.task_id} on {attempt.device.name}")
        if attempt.window is not None:
            # Admitted: released at once, whatever release_at says (the task waits
            # QUEUED until the window opens, the job's start-up overlaps that wait).
            self.release.ready(unit, attempt, self._admission_reason(unit, attempt))

    # -- track

    def start_tracking(
        self,
        unit: Unit,
        attempt: Attempt,
        task: TaskRef,
        *,
        queued_at: float | None,
        attached: bool,
    ) -> None:
        """The one way into TRACK: a task created or found now, or one recorded in the
        eventlog (adoption: ``attached`` False until its first poll)."""
        assert attempt.device is not None
        poller = AdaptivePoller(
            attempt.device,
            unit.request.release_at,
            estimator=self.ctx.estimator,
            schedule=self.ctx.schedule,
        )
        attempt.tracked(task, poller, queued_at=queued_at, attached=attached)

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
        assert attempt.device is not None and attempt.poller is not None
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
        attempt.snapshot = snap
        self.calls.recovered(attempt)
        if snap.state is TaskState.RUNNING:
            attempt.running_seen = attempt.running_seen or snap.t
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
                self.release.ready(unit, attempt, self._admission_reason(unit, attempt))
                self.face.update_memos(unit)
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
            attempt.expected_wait = None
            attempt.due = now + ctx.options.device_check_interval
            self.face.update_memos(
                unit,
                f"waiting: {attempt.device.name} is paused ({paused.reason}); released "
                "after it resumes",
            )
            return
        backlog = self._backlog(attempt, snap)
        if backlog is None:
            delay = min(attempt.poller.observe(snap), ctx.schedule.max_interval)
            self._milestones(unit, program, snap)
        else:
            # The vendor gives no place in its queue (IBM): the release point is judged
            # from the device's pending count, the time since the create and the drain.
            # The estimate rests on the pending count, re-read every device check: poll
            # at least that often, so a wrong drain prior cannot overshoot.
            ceiling = min(ctx.schedule.max_interval, ctx.options.device_check_interval)
            delay = min(attempt.poller.observe_unpositioned(snap, backlog), ceiling)
        if not self.release.polled(unit, attempt, snap, now, backlog):
            attempt.due = now + delay
        self.face.update_memos(unit)

    def _admission_reason(self, unit: Unit, attempt: Attempt) -> str:
        """Why the job is released: its admission into its window."""
        assert attempt.window is not None
        reason = self.reservations.admitted_reason(unit) or f"admitted into {attempt.window.label}"
        return f"admitted: {reason}"

    def _backlog(self, attempt: Attempt, snap: TaskSnapshot) -> Backlog | None:
        """What the place of a queued task is estimated from when its vendor reports no
        queue positions on its device (IBM), or None: the pending count seen before the
        create, when it was created, and the latest probe's count if taken since."""
        if attempt.device is None or snap.state not in (TaskState.CREATED, TaskState.QUEUED):
            return None
        try:
            vendor = self.ctx.vendor(attempt.device.vendor)
        except Exception:
            return None
        if vendor.reports_positions(attempt.device):
            return None
        probe = self.ctx.device_snapshots.get(attempt.device.name)
        created = attempt.queued_at if attempt.queued_at is not None else attempt.since
        return Backlog(
            ahead_at_create=attempt.ahead,
            created_t=created if created is not None else snap.t,
            pending_now=probe.queue_depth
            if probe is not None and probe.t >= (created or 0)
            else None,
        )

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


def _found_or_made(
    vendor: Vendor,
    device: Device,
    token: str,
    *,
    look: bool,
    since: float,
    found: list[TaskRef],
    make: Callable[[], TaskRef],
) -> TaskRef:
    """The create of a task (``make``), in a worker. ``look``: the token was recorded by
    an earlier service and the task maybe created: a vendor whose create is not
    idempotent (IBM) is asked first (a task found goes to ``found``); Braket's answers
    None and its create with the same token returns the same task."""
    if look:
        task = vendor.find_task(device, token, since=since)
        if task is not None:
            found.append(task)
            return task
    return make()
