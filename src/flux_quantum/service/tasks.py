"""The vendor task lifecycle of one program's attempt: read, select, submit, track.

Each attempt goes SELECT (read and count the program file, probe the candidate devices
the job's owner may use, let the policy choose among those whose task fits the site's
quotas, respecting device slots and older jobs waiting for the same device) -> SUBMIT
(the estimate is reserved in the site's ledger, the idempotency token goes to the
eventlog, then the vendor create; a refused reservation fails the job and nothing is
created) -> TRACK (adaptive polls of the task; queue milestones; the release point or
``max_wait``; a task that ends is settled) -> READY (handed to ``Release``). Every blocking call runs in a worker. A failed call is
retried with back-off: a retryable vendor error (throttling, an outage) as long as it
lasts, anything else (a refused call, a bug, a broken setup) at most ``error_limit``
times in a row before the job fails with the error's text. This part never releases or
fails a job itself: it hands over to ``Release`` and ``Outcomes``.
"""

from __future__ import annotations

import os
import syslog
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from flux_quantum import events
from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.policy import Explanation, NoDeviceError, select_device
from flux_quantum.poller import (
    RELEASE_DONE,
    RELEASE_PREDICT,
    AdaptivePoller,
    release_reached,
    tasks_to_release,
)
from flux_quantum.qasm import ProgramCounts, count_program
from flux_quantum.request import QpuRequest
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.outcomes import Outcomes, problem_base
from flux_quantum.service.release import Release
from flux_quantum.service.state import Attempt, Phase, Program, Unit, UnitSession
from flux_quantum.vendors import probe_devices
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskSnapshot,
    TaskState,
)
from flux_quantum.vendors.errors import NotFound, VendorError

# Queue positions that earn a qpu-queue event when first reached (not every poll).
MILESTONES: tuple[int, ...] = (100, 10, 1)

# Submitted when a request names no program: a Bell pair, enough to prove the path works.
DEFAULT_PROGRAM_NAME = "bell"
DEFAULT_PROGRAM = """OPENQASM 3.0;
bit[2] c;
qubit[2] q;
h q[0];
cnot q[0], q[1];
c = measure q;
"""

MAX_PROGRAM_BYTES = 1 << 20


class ProgramError(FluxQuantumError):
    """A job's qpu.program file cannot be read; the message names the file."""


def read_program(cwd: str | None, path: str | None, owner: int | None = None) -> str:
    """The OpenQASM text of ``path`` (relative to the job's cwd); the default circuit
    when no program was given. Runs in a worker: the file may sit on slow storage.

    ``owner``: a guest's job, whose file the service reads with its own (the instance
    owner's) rights: only a file that guest owns, so that no job can send the
    service's own files (keys, credentials) to a vendor as its "program"."""
    if path is None:
        return DEFAULT_PROGRAM
    full = Path(path) if os.path.isabs(path) or not cwd else Path(cwd) / path
    try:
        with open(full, "rb") as f:
            st = os.fstat(f.fileno())
            if owner is not None and st.st_uid != owner:
                raise ProgramError(
                    f"qpu.program {path!r}: {full} belongs to uid {st.st_uid}, not to the "
                    f"job's user (uid {owner}): the site's service only reads a program "
                    "file the job's user owns"
                )
            data = f.read(MAX_PROGRAM_BYTES + 1)
    except OSError as exc:
        raise ProgramError(
            f"qpu.program {path!r}: cannot read {full} ({exc.strerror or exc})"
        ) from None
    if len(data) > MAX_PROGRAM_BYTES:
        raise ProgramError(f"qpu.program {path!r}: larger than {MAX_PROGRAM_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProgramError(f"qpu.program {path!r}: not UTF-8 text") from None


def read_counted(
    cwd: str | None, path: str | None, owner: int | None = None
) -> tuple[str, ProgramCounts]:
    """The program's text and its gate counts (max-fidelity, min_fidelity), in a worker."""
    text = read_program(cwd, path, owner)
    return text, count_program(text)


def compact_explanation(
    explanation: Explanation, limit: int = 6, site: Collection[str] = ()
) -> dict[str, Any]:
    """The policy's explanation, short enough for an eventlog entry: the eligible devices
    first, then those the ``site`` policy dropped (a job's owner wants to know why those
    were left out), then the rest."""
    order = {True: 0, False: 2}
    shown = sorted(
        explanation.candidates,
        key=lambda c: 1 if not c.eligible and c.device in site else order[c.eligible],
    )
    rows = []
    for c in shown[:limit]:
        rows.append(
            {
                "device": c.device,
                "status": c.status,
                "queue": c.queue_depth,
                "wait": None if c.expected_wait is None else round(c.expected_wait, 1),
                "cost": round(c.cost, 4),
                "verdict": c.reason,
            }
        )
        if c.success is not None:  # the figure max-fidelity and min_fidelity used
            rows[-1]["success"] = round(c.success, 4)
    out: dict[str, Any] = {
        "policy": explanation.policy,
        "order": explanation.order,
        "chosen": explanation.chosen,
        "candidates": rows,
    }
    if len(explanation.candidates) > limit:
        out["more"] = len(explanation.candidates) - limit
    return out


class Tasks:
    def __init__(
        self,
        ctx: ServiceContext,
        face: Face,
        outcomes: Outcomes,
        release: Release,
        charges: Charges,
    ) -> None:
        self.ctx = ctx
        self.face = face
        self.outcomes = outcomes
        self.release = release
        self.charges = charges

    # -- scheduling

    def step(self, unit: Unit, program: Program) -> None:
        """Start the attempt's next blocking call, whatever its phase needs."""
        attempt = program.attempt
        if not unit.active or attempt.busy:
            return
        if attempt.phase in (Phase.SELECT, Phase.SUBMIT) and program.text is None:
            path, cwd = program.path, unit.cwd
            owner = unit.userid if unit.userid != self.ctx.userid else None
            self.ctx.call(unit, program, lambda: read_counted(cwd, path, owner), self._loaded)
        elif attempt.phase is Phase.SELECT:
            self._start_select(unit, program)
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
        """Between calls: max_wait and the early release of a tracked task."""
        attempt = program.attempt
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
            self._failed_call(unit, program, "read program", error)
            return
        program.text, program.counts = loaded
        attempt.due = 0.0

    # -- errors

    def _failed_call(
        self, unit: Unit, program: Program, operation: str, error: BaseException
    ) -> None:
        """A call failed. A retryable vendor error is retried for as long as it lasts;
        anything else at most ``error_limit`` times in a row, then the job fails with
        the error's text (a refused poll, a bug, a broken setup never passes by itself,
        and a tick loop must never hammer it)."""
        ctx = self.ctx
        attempt = program.attempt
        attempt.errors += 1
        delay = ctx.options.backoff(attempt.errors)
        attempt.due = ctx.clock() + delay
        if isinstance(error, VendorError):
            ctx.counters.vendor_errors += 1
            code, text = error.vendor_code, str(error)
        else:
            ctx.counters.unexpected_errors += 1
            code, text = type(error).__name__, f"{type(error).__name__}: {error}"
        limited = not (isinstance(error, VendorError) and error.retryable)
        if limited:
            attempt.unexpected += 1
            if attempt.unexpected >= ctx.options.error_limit:
                ctx.last_error = f"unit {unit.id}: {operation}: {text}"
                self.outcomes.fail_unit(
                    unit,
                    f"qpu: {operation} failed {attempt.unexpected} times in a row, giving up: "
                    f"{text}",
                )
                return
        first = not attempt.retry_posted
        if first:
            attempt.retry_posted = True
            record = events.Retry(
                index=program.index,
                operation=operation,
                code=code,
                message=text,
                retry_in=round(delay, 1),
                attempt=attempt.number,
            )
            ctx.post_all(unit, record)
        attempt.holding = f"{operation} failed ({code}: {text}); next try in {delay:g}s"
        self.face.update_memos(unit)
        # Said once per attempt and failure, not at every retry.
        level = syslog.LOG_WARNING if first else syslog.LOG_DEBUG
        ctx.log(level, f"unit {unit.id}: {operation}: {text}; retry in {delay:g}s")

    def _recovered(self, attempt: Attempt) -> None:
        attempt.errors = 0
        attempt.unexpected = 0
        attempt.retry_posted = False
        attempt.holding = None

    def _vendor(self, unit: Unit, program: Program, name: str, operation: str) -> Any:
        """The vendor object, or None after routing the failure (unknown vendor: fail;
        anything else, e.g. a broken profile: the bounded retry)."""
        try:
            return self.ctx.vendor(name)
        except (ValueError, FluxQuantumError) as exc:
            self.outcomes.fail_unit(unit, f"qpu: cannot reach vendor {name}: {exc}")
        except Exception as exc:
            self._failed_call(unit, program, operation, exc)
        return None

    # -- select

    def request_for(self, unit: Unit, attempt: Attempt) -> QpuRequest:
        """The request as a fail-over sees it: a named device is no longer required
        (its replacement is chosen by min-wait), and ``class`` may be forced."""
        request = unit.request
        if attempt.number == 0 or request.failover == "fail":
            return request
        changes: dict[str, Any] = {}
        if request.device is not None:
            changes.update(device=None, policy="min-wait")
        if attempt.device_class is not None:
            changes["device_class"] = attempt.device_class
        return replace(request, **changes) if changes else request

    def _pool(self, attempt: Attempt) -> list[Device]:
        return [d for d in self.ctx.catalog.devices if d.name not in attempt.exclude]

    def _in_flight(self, unit: Unit) -> dict[str, int]:
        """Tasks this service watches per device, other units' only: a batch's own
        tasks never block each other (or it could never be released)."""
        counts: dict[str, int] = {}
        for other in self.ctx.active_units():
            if other is unit:
                continue
            for attempt in other.attempts():
                if attempt.device is not None and attempt.phase in (
                    Phase.SUBMIT,
                    Phase.TRACK,
                    Phase.READY,
                ):
                    counts[attempt.device.name] = counts.get(attempt.device.name, 0) + 1
        return counts

    def _start_select(self, unit: Unit, program: Program) -> None:
        from flux_quantum.policy import static_candidates

        attempt = program.attempt
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        # Devices the job's owner may not use are never probed.
        refused = self.charges.not_allowed(unit, pool)
        candidates = static_candidates([d for d in pool if d.name not in refused], request)
        vendors = {}
        for device in candidates:
            vendor = self._vendor(unit, program, device.vendor, "select")
            if vendor is None:
                return
            vendors[device.vendor] = vendor
        timeout = self.ctx.options.probe_timeout

        def probe() -> dict[str, DeviceSnapshot]:
            return probe_devices(candidates, vendors, timeout=timeout)

        self.ctx.call(unit, program, probe, self._selected)

    def _selected(
        self, unit: Unit, program: Program, attempt: Attempt, snapshots: Any, error: Any
    ) -> None:
        ctx = self.ctx
        if error is not None:
            self._failed_call(unit, program, "select", error)
            return
        for snapshot in snapshots.values():
            if snapshot.status is DeviceStatus.UNREACHABLE:
                ctx.counters.vendor_errors += 1  # what qpu-wait will say
            ctx.estimator.observe(snapshot)
            ctx.device_snapshots[snapshot.device] = snapshot
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        in_flight = self._in_flight(unit)
        excluded = self.charges.excluded(unit, program, attempt, pool)
        try:
            selection = select_device(
                pool,
                snapshots,
                request,
                estimator=ctx.estimator,
                in_flight=in_flight,
                program=program.counts,
                excluded=excluded,
            )
        except NoDeviceError as exc:
            self._no_device(unit, program, exc, snapshots, in_flight, request, excluded)
            return
        chosen = selection.device
        older = self._older_waiters(unit, chosen)
        if older >= chosen.slots - in_flight.get(chosen.name, 0):
            # First come, first served: older jobs waiting for this device's slots
            # take them first.
            self._wait(
                unit, program, f"all {chosen.slots} slot(s) of {chosen.name} in use or promised"
            )
            return
        attempt.device = chosen
        attempt.wait_posted = None
        attempt.holding = None
        attempt.errors = 0
        chosen_snapshot = snapshots.get(chosen.name)
        attempt.ahead = chosen_snapshot.queue_depth if chosen_snapshot is not None else None
        record = events.Select(
            index=program.index,
            attempt=attempt.number,
            device=chosen.name,
            explanation=compact_explanation(selection.explanation, site=excluded),
        )
        ctx.post_all(unit, record)
        attempt.token = events.task_token(unit.id, unit.t_submit, program.index, attempt.number)
        attempt.submit_posted = False
        attempt.phase = Phase.SUBMIT
        attempt.due = 0.0
        self.face.update_memos(unit)

    def _no_device(
        self,
        unit: Unit,
        program: Program,
        exc: NoDeviceError,
        snapshots: Mapping[str, DeviceSnapshot],
        in_flight: Mapping[str, int],
        request: QpuRequest,
        excluded: Mapping[str, str],
    ) -> None:
        """Wait when the obstacle passes by itself (a vendor that did not answer, all
        slots busy); fail over or fail when it does not (offline, out of window, too
        long a queue for max_wait, nothing that matches, nothing the site allows)."""
        from flux_quantum.policy import static_reason

        attempt = program.attempt
        transient = []
        for device in self._pool(attempt):
            if static_reason(device, request) is not None or device.name in excluded:
                continue
            snapshot = snapshots.get(device.name)
            if snapshot is not None and snapshot.status is DeviceStatus.UNREACHABLE:
                transient.append(f"{device.name} did not answer ({snapshot.reason})")
            elif (
                snapshot is not None
                and snapshot.available
                and in_flight.get(device.name, 0) >= device.slots
            ):
                transient.append(f"all {device.slots} slot(s) of {device.name} in use")
        if transient:
            self._wait(unit, program, "; ".join(transient))
            return
        forced = request.device is not None or (
            unit.request.failover == "simulator" and request.device_class != "simulator"
        )
        if (
            unit.request.failover != "fail"
            and forced
            and attempt.number + 1 < self.ctx.options.max_tasks
        ):
            self.outcomes.failover(unit, program, request.device, str(exc))
            return
        self.outcomes.fail_unit(unit, f"qpu: {exc}")

    def _wait(self, unit: Unit, program: Program, reason: str) -> None:
        """No device for this task now, for a reason that passes: try again later."""
        attempt = program.attempt
        attempt.errors += 1
        delay = self.ctx.options.backoff(attempt.errors)
        if attempt.wait_posted != reason:
            attempt.wait_posted = reason
            record = events.Wait(index=program.index, reason=reason, retry_in=round(delay, 1))
            self.ctx.post_all(unit, record)
        attempt.due = self.ctx.clock() + delay
        attempt.holding = f"{reason}; next try in {delay:g}s"
        self.face.update_memos(unit)

    def _older_waiters(self, unit: Unit, device: Device) -> int:
        """Older units still choosing a device that can only be this one."""
        count = 0
        for other in self.ctx.active_units():
            if other is unit:
                continue
            if (other.t_submit, other.id) >= (unit.t_submit, unit.id):
                continue
            if other.request.device not in (device.name, device.id):
                continue
            count += sum(1 for a in other.attempts() if a.phase is Phase.SELECT)
        return count

    # -- submit

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

    def _start_submit(self, unit: Unit, program: Program) -> None:
        ctx = self.ctx
        attempt = program.attempt
        assert attempt.device is not None and attempt.token is not None
        assert program.text is not None
        refusal = self.charges.reserve(unit, program, attempt)
        if refusal is not None:
            # Reserved before the create (and before any session), or not created at all.
            self.outcomes.fail_unit(unit, f"qpu: {refusal}")
            return
        device, text, shots, token = attempt.device, program.text, unit.request.shots, attempt.token
        vendor = self._vendor(unit, program, device.vendor, "create")
        if vendor is None:
            return
        if unit.request.session is not None and unit.session is None and not attempt.submit_posted:
            # The first task of a unit that asked for a session opens it, then rides it;
            # the unit's other programs wait for it.
            if program.index != 0 and not unit.programs[0].attempt.submit_posted:
                attempt.due = ctx.clock() + ctx.options.tick
                return
            mode = unit.request.session
            ctx.call(unit, program, lambda: vendor.open_session(device, mode), self._session_opened)
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
        riding = self._riding(unit, device)
        session = riding.handle if riding is not None else None
        look, since = attempt.look_first, attempt.since or unit.t_submit
        found: list[TaskRef] = []

        def create() -> TaskRef:
            if look:
                # Recorded by an earlier service, maybe created: a vendor whose create is
                # not idempotent (IBM) is asked first; Braket's answers None and its
                # create with the same token returns the same task.
                task = vendor.find_task(device, token, since=since)
                if task is not None:
                    found.append(task)
                    return task
            if session is not None:
                return vendor.submit_in(session, device, text, shots, token)
            return vendor.submit(device, text, shots, token)

        def created(unit: Unit, program: Program, attempt: Attempt, task: Any, error: Any) -> None:
            self._created(unit, program, attempt, task, error, found=bool(found))

        ctx.call(unit, program, create, created)

    def _session_opened(
        self, unit: Unit, program: Program, attempt: Attempt, opening: Any, error: Any
    ) -> None:
        """Record the session (or why the tasks run as single jobs), then submit."""
        ctx = self.ctx
        assert attempt.device is not None and unit.request.session is not None
        device = attempt.device
        if error is not None:
            if not isinstance(error, VendorError) or error.retryable:
                self._failed_call(unit, program, "open session", error)
                return
            # Refused for good (an account without sessions): the task still runs.
            opening = SessionOpening(
                unit.request.session,
                "job",
                None,
                f"{device.vendor} refused a {unit.request.session} session on {device.name} "
                f"({error.vendor_code}: {error}); tasks run as single jobs",
            )
        self._recovered(attempt)
        session = opening.session
        unit.session = UnitSession(
            device=device.name,
            vendor=device.vendor,
            requested=opening.requested,
            mode=opening.mode,
            fingerprint=session.fingerprint if session is not None else None,
            handle=session,
        )
        record = events.Session(
            device=device.name,
            requested=opening.requested,
            mode=opening.mode,
            fingerprint=unit.session.fingerprint,
            reason=opening.reason,
        )
        ctx.post_all(unit, record)
        if session is not None:
            ctx.counters.sessions_opened += 1
            self.face.mark_session(unit)
            ctx.log(
                syslog.LOG_INFO,
                f"unit {unit.id}: {opening.mode} session {session.fingerprint} on {device.name}",
            )
        elif opening.reason:
            ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: {opening.reason}")
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
            self._failed_call(unit, program, "create", error)
            return
        if found:
            ctx.counters.tasks_found += 1
            ctx.log(syslog.LOG_INFO, f"unit {unit.id}: found task {task.task_id} again by token")
        else:
            ctx.counters.tasks_created += 1
        attempt.task = task
        attempt.look_first = False
        attempt.queued_at = ctx.clock() if attempt.since is None or not found else attempt.since
        self.charges.attach(attempt)
        self._recovered(attempt)
        attempt.phase = Phase.TRACK
        attempt.poller = AdaptivePoller(
            attempt.device, unit.request.release_at, estimator=ctx.estimator, schedule=ctx.schedule
        )
        attempt.due = 0.0
        ctx.post_all(unit, self.task_record(unit, program))
        self.face.update_memos(unit)
        ctx.log(syslog.LOG_INFO, f"unit {unit.id}: task {task.task_id} on {attempt.device.name}")

    # -- track

    def _start_poll(self, unit: Unit, program: Program) -> None:
        attempt = program.attempt
        assert attempt.task is not None
        task = attempt.task
        vendor = self._vendor(unit, program, task.vendor, "poll")
        if vendor is None:
            return
        if not attempt.attached:
            self.ctx.call(unit, program, lambda: vendor.attach_and_poll(task), self._polled)
        else:
            self.ctx.call(unit, program, lambda: vendor.poll(task), self._polled)

    def _polled(
        self, unit: Unit, program: Program, attempt: Attempt, snap: Any, error: Any
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
            self._failed_call(unit, program, "poll", error)
            return
        ctx.counters.polls += 1
        if not attempt.attached:
            attempt.attached = True
            ctx.counters.tasks_attached += 1
            ctx.log(syslog.LOG_INFO, f"unit {unit.id}: re-attached {snap.task.task_id}")
        attempt.snapshot = snap
        self._recovered(attempt)
        if snap.terminal:
            self.charges.ended(unit, program, attempt, snap)
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
        if self._unpositioned(attempt) and snap.state in (TaskState.CREATED, TaskState.QUEUED):
            # The vendor gives no place in its queue (IBM): the release point is judged
            # from the device's pending count, the time since the create and the drain.
            wait = self.release.unpositioned(unit, attempt, snap, now)
            if wait is not None and not self.release.lead_reached(unit, attempt, now):
                # The estimate rests on the pending count, re-read every device check:
                # poll at least that often, so a wrong drain prior cannot overshoot.
                ceiling = min(ctx.schedule.max_interval, ctx.options.device_check_interval)
                attempt.due = now + min(wait, ceiling)
            self.face.update_memos(unit)
            return
        delay = attempt.poller.observe(snap)
        drain = ctx.estimator.estimate(attempt.device).seconds_per_task
        remaining = tasks_to_release(snap, unit.request.release_at)
        attempt.expected_wait = None if remaining is None else remaining * drain
        if snap.state is TaskState.RUNNING:
            attempt.running_seen = attempt.running_seen or snap.t
            if unit.request.release_at in (RELEASE_PREDICT, RELEASE_DONE):
                # Its own run is under way: what is left of one service time.
                attempt.expected_wait = max(0.0, drain - (snap.t - attempt.running_seen))
        self._milestones(unit, program, snap)
        if release_reached(snap, unit.request.release_at):
            where = (
                snap.state.value
                if snap.state not in (TaskState.CREATED, TaskState.QUEUED)
                else f"position {snap.position} <= release_at {unit.request.release_at}"
            )
            self.release.ready(unit, attempt, where)
        elif not self.release.lead_reached(unit, attempt, now):
            attempt.due = now + min(delay, ctx.schedule.max_interval)
        self.face.update_memos(unit)

    def _unpositioned(self, attempt: Attempt) -> bool:
        """Whether the attempt's vendor reports no queue positions on its device."""
        if attempt.device is None:
            return False
        try:
            vendor = self.ctx.vendor(attempt.device.vendor)
        except Exception:
            return False
        return not vendor.reports_positions(attempt.device)

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


def programs_of(request: QpuRequest) -> Sequence[str | None]:
    """The program paths of a request; one default-circuit program when it names none."""
    return request.program or (None,)
