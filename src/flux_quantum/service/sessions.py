"""Vendor sessions of units (``qpu.session``): recorded when opened, kept open while a
job may use them, and always closed.

A unit that asked for a session gets one with its first task (``submission`` asks the
vendor and hands over what it gave: ``opened``). This part
closes it when the last job that could use it is gone: at once when the unit fails (the
held jobs get ``qpu-session-closed`` first) or every job left while held (cancelled), and
for a released unit once its last job has ended (INACTIVE), so a variational job's own
later tasks ride it until then. A leaked session is billed, so it also finds, after a
service restart, the sessions a predecessor left open: the jobs whose persistent memo names
a session (``FluxSide.session_jobs``) are read back from their eventlogs (``qpu-session``
and a task that rode it), and the session id from the vendor through that task
(``Vendor.session_of``), or from the service's own owner-only ``SessionKeys`` when no task
rode it yet: the id is kept there (``open``, in the worker that opened it) before the
session is recorded anywhere, so a service killed right after the open still closes it
after its restart, and it never goes to an eventlog, a memo or a log. A close the vendor
could not take is retried. This part never calls a vendor on the reactor thread, and
never releases or fails a job.

The steps of a variational loop (``qpu.loop``, one unit each) share one session per user,
loop and device: the first step's task opens it, and it is leased at once; a later step
rides it (``ride``: its own ``qpu-session`` says which unit it ``joined``), also after a
restart (``restored``, ``recover``: the id is read back through a task that rode it,
``found``). It stays open while any job of the loop is alive or any unit of the loop is
tracked, and is closed ``loop_linger`` after the last is gone: the next step is submitted
by the previous one before it ends, so it is adopted within that time. A step that fails
or is cancelled closes it at once only when no other step needs it.
"""

from __future__ import annotations

import contextlib
import syslog
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol import events
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.retry import Retries
from flux_quantum.service.sessionkeys import SessionKeys
from flux_quantum.service.state import Phase, Unit, UnitSession, UnitState
from flux_quantum.vendors.base import SessionOpening, TaskRef, Vendor, VendorSession

CLOSE_TRIES = 5  # retryable failures of a close before the vendor's time limit is left to end it


@dataclass
class Lease:
    """A session to keep while any of ``jobs`` runs, then close. ``task`` rode it: after a
    restart it is how the session is found again. ``unit`` opened it; ``units`` rode it.
    A loop's session (``loop``: its user and name) is leased from its opening on, and
    also kept while a unit of the loop is tracked; ``idle_since``: since when nothing of
    the loop has needed it."""

    session: UnitSession
    task: TaskRef | None
    unit: int
    jobs: set[int] = field(default_factory=set)
    loop: tuple[int, str] | None = None
    units: set[int] = field(default_factory=set)
    idle_since: float | None = None
    closing: bool = False
    busy: bool = False
    due: float = 0.0
    retry: Retries = field(default_factory=Retries)
    why: str = ""

    def __post_init__(self) -> None:
        self.units.add(self.unit)


def task_on(unit: Unit, device: str) -> TaskRef | None:
    """A task of the unit on ``device`` (one that rode its session)."""
    for program in unit.programs:
        task = program.attempt.task
        if task is not None and task.device == device:
            return task
    return None


class Sessions:
    def __init__(self, ctx: ServiceContext, face: Face, keys: SessionKeys) -> None:
        self.ctx = ctx
        self.face = face
        self.keys = keys
        self.leases: dict[str, Lease] = {}  # by the session's fingerprint
        self._recovered = False
        self._due = 0.0

    # -- in a vendor worker

    def open(
        self, vendor: Vendor, device: Device, mode: str, *, cost_limit: float | None = None
    ) -> SessionOpening:
        """Open a session on ``device`` and keep its id before anything records it (a
        worker's call). ``cost_limit``: what the job may still spend (its ``qpu.max_cost``,
        a loop's budget left, its tightest quota), for a vendor that enforces it. A
        session whose id cannot be kept is closed at once, and the tasks run as single
        jobs."""
        opening = vendor.open_session(device, mode, cost_limit=cost_limit)
        session = opening.session
        if session is None:
            return opening
        try:
            self.keys.keep(session)
        except OSError as exc:
            with contextlib.suppress(Exception):
                vendor.close_session(session)
            return SessionOpening(
                opening.requested,
                "job",
                None,
                f"the service cannot keep the {session.mode} session's id "
                f"({exc.strerror or exc}), so it closed it; tasks run as single jobs",
            )
        return opening

    # -- what the other parts tell it (Tasks, Outcomes, Release, AttemptCalls)

    def opened(self, unit: Unit, device: Device, opening: SessionOpening) -> None:
        """The unit's first task asked for a session on ``device``: record what the
        vendor gave (a session, or why the tasks run as single jobs) on the unit, in its
        jobs' eventlogs and in a persistent memo that outlives a restart."""
        ctx = self.ctx
        session = opening.session
        unit.session = UnitSession(
            device=device.name,
            vendor=device.vendor,
            requested=opening.requested,
            mode=opening.mode,
            fingerprint=session.fingerprint if session is not None else None,
            handle=session,
        )
        loop = unit.request.loop
        record = events.Session(
            device=device.name,
            requested=opening.requested,
            mode=opening.mode,
            fingerprint=unit.session.fingerprint,
            reason=opening.reason,
            loop=loop,
        )
        ctx.post_all(unit, record)
        if session is not None:
            ctx.counters.sessions_opened += 1
            self.face.mark_session(unit)
            if loop is not None:
                # The loop's later steps find it here and ride it.
                lease = Lease(unit.session, None, unit.id, loop=(unit.userid, loop))
                self.leases[session.fingerprint] = lease
            ctx.log(
                syslog.LOG_INFO,
                f"unit {unit.id}: {opening.mode} session {session.fingerprint} on {device.name}",
            )
        elif opening.reason:
            ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: {opening.reason}")

    def ride(self, unit: Unit, device: Device) -> bool:
        """A step of a loop that asked for a session joins the one its loop has open on
        ``device``, recorded as ``opened`` records one (``joined``: the unit that opened
        it). False when the loop has none there: the unit opens its own."""
        loop = unit.request.loop
        lease = self._loop_lease(unit.userid, loop, device.name) if loop is not None else None
        if lease is None or unit.request.session is None:
            return False
        session = lease.session
        assert session.fingerprint is not None
        unit.session = session
        lease.units.add(unit.id)
        lease.idle_since = None
        record = events.Session(
            device=device.name,
            requested=unit.request.session,
            mode=session.mode,
            fingerprint=session.fingerprint,
            loop=loop,
            joined=lease.unit,
        )
        self.ctx.post_all(unit, record)
        self.ctx.counters.sessions_joined += 1
        self.face.mark_session(unit)
        self.ctx.log(
            syslog.LOG_INFO,
            f"unit {unit.id}: rides loop {loop}'s {session.mode} session {session.fingerprint} "
            f"on {device.name} (opened by unit {lease.unit})",
        )
        return True

    def opening(self, unit: Unit, device: Device) -> bool:
        """Whether another step of the unit's loop is opening a session on ``device``
        now (its vendor call under way): the unit rides that one once it is open."""
        loop = unit.request.loop
        if loop is None:
            return False
        for other in self._steps().get((unit.userid, loop), []):
            if other is unit or other.session is not None:
                continue
            for program in other.programs:
                attempt = program.attempt
                if (
                    attempt.busy
                    and attempt.phase is Phase.SUBMIT
                    and not attempt.submit_posted
                    and program.text is not None  # read: the call under way is the open
                    and attempt.device is not None
                    and attempt.device.name == device.name
                ):
                    return True
        return False

    def restored(self, unit: Unit, opener: int | None) -> None:
        """A unit of a loop adopted after a restart, whose eventlog names its session
        (``opener``: the unit it joined, if it did not open it): it shares the session
        the service knows already (``recover`` found it, or an earlier step restored
        it), else the session is leased from it."""
        session, loop = unit.session, unit.request.loop
        if loop is None or session is None or not session.open:
            return
        assert session.fingerprint is not None
        lease = self.leases.get(session.fingerprint)
        if lease is None:
            task = task_on(unit, session.device)
            first = unit.id if opener is None else opener
            lease = Lease(session, task, first, loop=(unit.userid, loop))
            self.leases[session.fingerprint] = lease
        elif lease.closing:
            unit.session = None  # being closed: a later task of the unit opens another
            return
        unit.session = lease.session
        lease.units.add(unit.id)
        lease.task = lease.task or task_on(unit, session.device)
        lease.idle_since = None

    def rode(self, unit: Unit) -> TaskRef | None:
        """A task that rode the unit's session (after a restart, the session's id is read
        back through it before the unit's next task rides it)."""
        session = unit.session
        if session is None:
            return None
        lease = self.leases.get(session.fingerprint) if session.fingerprint else None
        if lease is not None and lease.task is not None:
            return lease.task
        task = task_on(unit, session.device)
        if task is None and session.handle is None:
            # No task rode it yet (its opener was killed before the first): the id kept.
            session.handle = self.keys.get(session.fingerprint)
        return task

    def found(self, unit: Unit, found: VendorSession | None) -> None:
        """What the vendor said of the unit's session, read back through a task that rode
        it: its id for the next task, or that it takes no more work (recorded; the
        unit's next task opens another)."""
        session = unit.session
        if session is None or session.fingerprint is None:
            return
        if found is not None and not found.closed and found.fingerprint == session.fingerprint:
            session.handle = found
            return
        why = "the vendor no longer takes work in it"
        self._say_closed(unit, session, why)
        session.closing = True
        lease = self.leases.get(session.fingerprint)
        if lease is not None:
            self._forget(lease)
        unit.session = None
        self.ctx.log(syslog.LOG_NOTICE, f"unit {unit.id}: session {session.fingerprint}: {why}")

    def unit_ended(self, unit: Unit, state: UnitState, why: str) -> None:
        """A unit was released (keep its session while its jobs run), failed or abandoned
        (close it now, unless another step of its loop needs it). Called again for the
        same unit: nothing more happens."""
        session = unit.session
        if session is None or not session.open or session.fingerprint is None:
            return
        lease = self.leases.get(session.fingerprint)
        if lease is not None and lease.loop is not None and lease.session is session:
            if not self._step_ends_it(lease, unit, state):
                return
        else:
            lease = Lease(session, task_on(unit, session.device), unit.id)
            if state is UnitState.RELEASED:
                lease.jobs = set(unit.released_jobs) | set(unit.jobs)
                lease.due = self.ctx.clock() + self.ctx.options.scan_interval
                self.leases[session.fingerprint] = lease
                return
        if state is UnitState.FAILED:
            # The jobs are still held: the last moment their eventlogs can say so.
            self._say_closed(unit, session, why)
        self.close(lease, why)

    def _step_ends_it(self, lease: Lease, unit: Unit, state: UnitState) -> bool:
        """A unit of a loop ended: released, its jobs keep the loop's session; failed or
        abandoned, whether the session is to be closed now (no other step needs it)."""
        ids = set(unit.jobs) | set(unit.released_jobs)
        if state is UnitState.RELEASED:
            lease.jobs |= ids
            lease.due = max(lease.due, self.ctx.clock() + self.ctx.options.scan_interval)
            return False
        if unit.id not in lease.units:
            return False  # told already (a failed unit is told again when it is finished)
        lease.units.discard(unit.id)
        lease.jobs -= ids
        if not self._needed(lease, but=unit):
            return True
        assert lease.loop is not None
        self.ctx.log(
            syslog.LOG_INFO,
            f"unit {unit.id} {state.value}: loop {lease.loop[1]}'s session "
            f"{lease.session.fingerprint} stays for its other steps",
        )
        return False

    def _say_closed(self, unit: Unit, session: UnitSession, why: str) -> None:
        """``qpu-session-closed`` on the unit's jobs."""
        assert session.fingerprint is not None
        record = events.SessionClosed(
            device=session.device, fingerprint=session.fingerprint, reason=why
        )
        self.ctx.post_all(unit, record)

    def joined_late(self, unit_id: int, jobid: int) -> None:
        """A job released on a released unit's task may use its session too."""
        for lease in self.leases.values():
            if unit_id in lease.units and not lease.closing:
                lease.jobs.add(jobid)

    # -- a loop's steps

    def _loop_lease(self, userid: int, loop: str, device: str) -> Lease | None:
        """The open session of ``userid``'s loop ``loop`` on ``device``."""
        for lease in self.leases.values():
            session = lease.session
            if lease.loop == (userid, loop) and session.device == device and session.open:
                return lease
        return None

    def _steps(self) -> dict[tuple[int, str], list[Unit]]:
        """The tracked units of loops, by user and loop."""
        steps: dict[tuple[int, str], list[Unit]] = {}
        for unit in self.ctx.units.active():
            if unit.request.loop is not None and unit.request.session is not None:
                steps.setdefault((unit.userid, unit.request.loop), []).append(unit)
        return steps

    @staticmethod
    def _may_ride(unit: Unit, lease: Lease) -> bool:
        """Whether a tracked unit of the lease's loop rides its session, or may: it has
        none yet and no device other than the session's is asked for or chosen."""
        if unit.session is not None:
            return unit.session is lease.session
        device = lease.session.device
        return unit.request.device in (None, device) and all(
            a.device is None or a.device.name == device for a in unit.attempts()
        )

    def _needed(self, lease: Lease, but: Unit) -> bool:
        """Whether a loop's session is still needed by a unit other than ``but`` or by a
        job that is alive (not known: needed, and the watch decides later)."""
        assert lease.loop is not None
        units = self._steps().get(lease.loop, [])
        if any(u is not but and self._may_ride(u, lease) for u in units):
            return True
        if not lease.jobs:
            return False
        try:
            lease.jobs &= self.ctx.flux.alive(lease.jobs)
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"sessions: job states unavailable: {exc}")
            return True
        return bool(lease.jobs)

    def _linger(self) -> float:
        options = self.ctx.options
        return max(options.loop_linger, options.scan_interval)

    def orphan(self, session: VendorSession, why: str) -> None:
        """A session opened for an attempt that no longer matters: close it."""
        unit_session = UnitSession(
            session.device, session.vendor, session.mode, session.mode, session.fingerprint, session
        )
        self.close(Lease(unit_session, None, 0), why)

    # -- the watch

    def check(self, now: float) -> None:
        """Close the sessions whose last job ended; retry closes; once, find the sessions
        a predecessor left open."""
        if now < self._due:
            return
        self._due = now + self.ctx.options.scan_interval
        if not self._recovered:
            self.recover(now)
        for lease in list(self.leases.values()):
            if lease.closing and not lease.busy and lease.due <= now:
                self.close(lease, lease.why)
        watched = [w for w in self.leases.values() if not w.closing and w.due <= now]
        ids = set().union(*(lease.jobs for lease in watched)) if watched else set()
        if not watched:
            return
        try:
            alive = self.ctx.flux.alive(ids) if ids else set()
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"sessions: job states unavailable: {exc}")
            return
        steps = self._steps() if any(lease.loop for lease in watched) else {}
        for lease in watched:
            lease.jobs &= alive
            if lease.loop is None:
                if not lease.jobs:
                    self.close(lease, "its last job ended")
                continue
            units = steps.get(lease.loop, [])
            if lease.jobs or any(self._may_ride(u, lease) for u in units):
                lease.idle_since = None
                continue
            if lease.idle_since is None:
                lease.idle_since = now
            if now - lease.idle_since >= self._linger():
                self.close(lease, f"loop {lease.loop[1]} has no job or step left")

    def recover(self, now: float) -> None:
        """Sessions recorded in the eventlogs of jobs this service does not hold: keep
        those whose jobs still run, close the others."""
        ctx = self.ctx
        try:
            ids = ctx.flux.session_jobs(ctx.userid, now - ctx.options.session_ttl)
            ids = [i for i in ids if not ctx.units.tracks(i)]
            records = ctx.flux.records(ids) if ids else {}
            alive = ctx.flux.alive(ids) if ids else set()
        except Exception as exc:
            ctx.log(syslog.LOG_WARNING, f"sessions: cannot look for open sessions: {exc}")
            return
        self._recovered = True
        # A loop's session restored with a held step (``restored``) also gathers the
        # loop's other jobs; any other session known already is left as it is.
        shared = {
            fp: lease for fp, lease in self.leases.items() if lease.loop and not lease.closing
        }
        known = (
            set(self.leases) | {u.session.fingerprint for u in ctx.units if u.session is not None}
        ) - set(shared)
        found: dict[str, Lease] = {}
        recorded_here: set[str] = set()
        for jobid, record in records.items():
            if record is None:
                continue
            history = events.replay(record.events)
            recorded = history.session
            if recorded is not None and recorded.fingerprint and not history.session_closed:
                recorded_here.add(recorded.fingerprint)  # a key left for it is not an orphan
            if recorded is None or recorded.fingerprint is None or history.session_closed:
                continue
            if recorded.fingerprint in known:
                continue
            if jobid in alive and not history.released:
                continue  # still held: its unit is adopted with its session
            device = ctx.catalog.get(recorded.device)
            if device is None:
                ctx.log(syslog.LOG_WARNING, f"sessions: device {recorded.device} unknown")
                continue
            task_id = next(
                (p.task for p in history.programs.values() if p.task and p.device == device.name),
                None,
            )
            lease = found.get(recorded.fingerprint) or shared.get(recorded.fingerprint)
            if lease is None:
                session = UnitSession(
                    device.name,
                    device.vendor,
                    recorded.requested,
                    recorded.mode,
                    recorded.fingerprint,
                )
                loop = None
                if recorded.loop is not None:
                    loop = (record.submitter() or ctx.userid, recorded.loop)
                opener = next(u for u in (recorded.joined, history.unit, jobid) if u is not None)
                lease = found[recorded.fingerprint] = Lease(session, None, opener, loop=loop)
            if lease.task is None and task_id is not None:
                lease.task = TaskRef(device.vendor, device.name, task_id)
            if jobid in alive:
                lease.jobs.add(jobid)
        for fingerprint, lease in list(found.items()):
            if not lease.jobs and lease.task is None and self.keys.get(fingerprint) is None:
                # Nothing can find it, and nothing needs to: its key goes only once the
                # vendor closed it (a close after its jobs ended leaves no event).
                del found[fingerprint]
                continue
            self.leases[fingerprint] = lease
            if not lease.jobs and lease.loop is None:
                # A loop's is kept for its held steps, or closed after the linger (check).
                self.close(lease, "its jobs ended while the service was down")
        known |= recorded_here | set(self.leases)
        known |= {u.session.fingerprint for u in ctx.units if u.session is not None}
        unrecorded = [s for fp, s in self.keys.left().items() if fp not in known]
        for opened in unrecorded:
            # Opened by a predecessor killed before any job recorded it: nothing needs it.
            self.orphan(opened, "no job recorded it before the service stopped")
        if found or unrecorded:
            ctx.log(
                syslog.LOG_INFO,
                f"sessions: found {len(found) + len(unrecorded)} session(s) left open",
            )

    # -- the close

    def close(self, lease: Lease, why: str) -> None:
        """Close the lease's session in a worker (read back from its task when this
        service never held its id); a retryable failure is tried again later."""
        ctx = self.ctx
        session = lease.session
        session.closing = True
        lease.closing, lease.why = True, why
        if session.fingerprint is not None:
            self.leases[session.fingerprint] = lease
        try:
            vendor = ctx.vendor(session.vendor)
        except (ValueError, FluxQuantumError) as exc:
            ctx.log(syslog.LOG_WARNING, f"session {session.fingerprint}: no vendor: {exc}")
            self._forget(lease)
            return
        handle = session.handle or self.keys.get(session.fingerprint)
        task = lease.task
        lease.busy = True

        def call() -> VendorSession | None:
            found = handle if handle is not None else (vendor.session_of(task) if task else None)
            if found is not None and not found.closed:  # closed before a restart: done
                vendor.close_session(found)
            return found

        def done(result: Any, error: BaseException | None) -> None:
            lease.busy = False
            what = f"{session.mode} session {session.fingerprint} on {session.device}"
            if error is None:
                self._forget(lease)
                self.keys.drop(session.fingerprint)
                if result is None:
                    ctx.log(
                        syslog.LOG_WARNING,
                        f"{what}: no task rode it, so it cannot be found to close; the vendor "
                        "ends it after its time limit",
                    )
                    return
                if result.closed:
                    ctx.log(syslog.LOG_DEBUG, f"{what} was closed already")
                    return
                ctx.counters.sessions_closed += 1
                ctx.log(syslog.LOG_INFO, f"closed {what} ({why})")
                return
            decision = ctx.retry.failed_call(
                lease.retry, error, retryable_limit=CLOSE_TRIES, other_limit=1
            )
            if not decision.give_up:
                lease.due = ctx.clock() + decision.delay
                level = syslog.LOG_INFO if decision.first else syslog.LOG_DEBUG
                ctx.log(level, f"cannot close {what} yet, will retry: {error}")
                return
            code = getattr(error, "vendor_code", type(error).__name__)
            ctx.log(
                syslog.LOG_WARNING,
                f"cannot close {what} ({code}): {error}; the vendor ends it after its time limit",
            )
            self._forget(lease)

        ctx.workers.submit(call, done)

    def _forget(self, lease: Lease) -> None:
        fingerprint = lease.session.fingerprint
        if fingerprint is not None and self.leases.get(fingerprint) is lease:
            del self.leases[fingerprint]
