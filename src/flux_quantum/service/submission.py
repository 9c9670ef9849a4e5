"""Submitting a program's attempt: from its program read to its vendor task.

An attempt's program file is read and counted first (``programs``; in SELECT, or in SUBMIT
after a restart), its device is chosen (``Selection``), then SUBMIT: the estimate is
reserved in the site's ledger (a refused reservation fails the job and nothing is
created; a ledger that cannot be reached holds the job with no task until it can), the
unit's session is opened with its first task when it asked for one (a later step of a
loop rides its loop's), a program that may share a vendor task with other jobs' waits in
the merge pool (``Merges``) and goes in a merged set, the idempotency token goes to the
eventlog, then the vendor create; its answer hands the task to ``Tracking``. A batch's
programs are submitted in program order. An attempt for a reserved window
(``Attempt.window``) waits in SUBMIT, before its token is recorded, until
``Reservations`` admits it (queued for the admission time, not polled); admitted, its
create carries the window's ARN (the guard ``Reservations.arn`` right before the vendor's
create) and the job is released as soon as the task exists. A window that takes no more
work hands it to ``Outcomes.window_ended``; a create the vendor refuses, to
``Outcomes.failover``. Every blocking call runs in a worker through ``AttemptCalls``,
which retries a failed one by the service's one retry policy. This part never polls a
task, and never releases or fails a job itself: it hands over to ``Tracking``,
``Release`` and ``Outcomes``.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.protocol import events
from flux_quantum.protocol.events import MergeSlot
from flux_quantum.selection.policies import static_candidates
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.charges import Charges
from flux_quantum.service.compiling import Compiling
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import LEDGER_WAIT
from flux_quantum.service.merges import Merges, merge_key
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.programs import DEFAULT_PROGRAM_NAME, ProgramError, read_counted
from flux_quantum.service.release import Release
from flux_quantum.service.reservations import Reservations, WindowClosed
from flux_quantum.service.selection import Selection
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Attempt, Phase, Program, Unit, UnitSession
from flux_quantum.site.ledger import LedgerUnavailable
from flux_quantum.vendors.base import SessionOpening, TaskRef, Vendor
from flux_quantum.vendors.errors import VendorError

# Why a job waits held with no task while the site's ledger cannot be reached (its memo).


class Submission:
    def __init__(
        self,
        ctx: ServiceContext,
        calls: AttemptCalls,
        outcomes: Outcomes,
        release: Release,
        charges: Charges,
        sessions: Sessions,
        selection: Selection,
        reservations: Reservations,
        merges: Merges,
        compiling: Compiling,
    ) -> None:
        self.ctx = ctx
        self.compiling = compiling
        self.calls = calls
        self.outcomes = outcomes
        self.release = release
        self.charges = charges
        self.sessions = sessions
        self.selection = selection
        self.reservations = reservations
        self.merges = merges

    # -- scheduling

    def step(self, unit: Unit, program: Program) -> None:
        """Start the attempt's next blocking call: read its program, choose its device,
        or submit it (SELECT and SUBMIT; a tracked attempt is ``Tracking``'s)."""
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
        """Between calls: a job waiting for its window is stepped sooner when its lead
        grew (the cluster filled up), or at once when it may go in or the window ended."""
        attempt = program.attempt
        if not self._waits_for_window(attempt) or attempt.busy:
            return
        window = attempt.window
        assert window is not None
        decision = self.reservations.decide(
            window, now=now, lead=self.release.window_lead(unit, now)
        )
        if decision.admit or decision.ended:
            attempt.due = 0.0
        elif decision.retry_at is not None and decision.retry_at < attempt.due:
            attempt.due = decision.retry_at

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
        return False

    def _wait_for_ledger(self, unit: Unit, attempt: Attempt, error: Exception) -> None:
        """The ledger cannot be reached: no task without its reservation. The job stays
        held with no task, its memo says why, and the reservation is tried again after
        the retry policy's back-off (never given up; the outage is logged once, by
        ``Charges``)."""
        ctx = self.ctx
        decision = ctx.retry.failed(attempt.retry, retryable=True)
        attempt.due = ctx.clock() + decision.delay
        attempt.hold(f"{LEDGER_WAIT} (next try in {decision.delay:.0f}s)")
        ctx.log(syslog.LOG_DEBUG, f"unit {unit.id}: reservation waits for the ledger: {error}")

    def _start_submit(self, unit: Unit, program: Program) -> None:
        ctx = self.ctx
        attempt = program.attempt
        assert attempt.device is not None and attempt.token is not None
        assert program.text is not None
        if self.compiling.needed(program):
            # Written for the device first: nothing reserved, no token, no task before.
            self.compiling.start(unit, program)
            return
        if self._waits_for_window(attempt) and not self._admitted(unit, program):
            return  # held with no task until admitted into its window
        if attempt.window is None:
            request = unit.request
            allowed = [
                d
                for d in static_candidates(ctx.catalog.devices, request)
                if request.device is None or request.device in (d.name, d.id)
            ]
            batch = self.charges.batch_refusal(unit, allowed)
            if batch is not None:  # a batch that cannot fit spends nothing
                self.outcomes.fail_unit(unit, f"qpu: {batch}")
                return
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
        device, text, shots, token = (
            attempt.device,
            program.sent_text,
            unit.request.shots,
            attempt.token,
        )
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
                            waiting.hold(line.removeprefix("waiting "))
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
                budget = attempt.budget if attempt.budget is not None else unit.request.max_cost
                self.calls.call(
                    unit,
                    program,
                    lambda: self.sessions.open(vendor, device, mode, cost_limit=budget),
                    self._session_opened,
                )
                return
        riding = _riding(unit, device)
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
            if ctx.post_all(unit, submit_record(unit, program)) == 0:
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
            ctx.post_all(member_unit, submit_record(member_unit, member))
            attempt.submit_posted = True
        programs = [(p.sent_text or "", u.request.shots) for u, p in members]
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
            attempt.hold(formed.text)
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
            self._task_exists(
                member_unit, member, replace(task, program=attempt.merge.index), found
            )
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
        self._task_exists(unit, program, task, found)
        ctx.log(syslog.LOG_INFO, f"unit {unit.id}: task {task.task_id} on {attempt.device.name}")
        if attempt.window is not None:
            # Admitted: released at once, whatever release_at says (the task waits
            # QUEUED until the window opens, the job's start-up overlaps that wait).
            self.release.ready(
                unit, attempt, self.reservations.release_reason(unit, attempt.window)
            )

    def _task_exists(self, unit: Unit, program: Program, task: TaskRef, found: bool) -> None:
        """The attempt's create answered with ``task`` (``found``: found again by its
        token, queued since its recorded time): tracked from now, its id noted for the
        ledger, and its ``qpu-task`` recorded."""
        attempt = program.attempt
        queued_at = self.ctx.clock() if attempt.since is None or not found else attempt.since
        attempt.tracked(task, queued_at=queued_at, attached=True)
        self.charges.attach(attempt)
        self.calls.recovered(attempt)
        self.ctx.post_all(unit, task_record(unit, program))


def submit_record(unit: Unit, program: Program) -> events.Submit:
    """The ``qpu-submit`` of the program's attempt: its token, device and the rest,
    recorded BEFORE the vendor hears of the create."""
    attempt = program.attempt
    assert attempt.device is not None and attempt.token is not None
    ridden = _riding(unit, attempt.device)
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
        session=ridden.fingerprint if ridden is not None else None,
        reservation=attempt.window.name if attempt.window is not None else None,
        merge=attempt.merge.to_context() if attempt.merge is not None else None,
    )


def _riding(unit: Unit, device: Device) -> UnitSession | None:
    """The unit's open session if tasks on ``device`` ride it."""
    session = unit.session
    if session is None or not session.open or session.device != device.name:
        return None
    return session


def task_record(unit: Unit, program: Program) -> events.TaskCreated:
    """The ``qpu-task`` of the program's attempt: the task its token created."""
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
