"""Vendor sessions of units (``qpu.session``): recorded when opened, kept open while a
job may use them, and always closed.

A unit that asked for a session gets one with its first task (``tasks`` asks the vendor
and hands over what it gave: ``opened``). This part
closes it when the last job that could use it is gone: at once when the unit fails (the
held jobs get ``qpu-session-closed`` first) or every job left while held (cancelled), and
for a released unit once its last job has ended (INACTIVE), so a variational job's own
later tasks ride it until then. A leaked session is billed, so it also finds, after a
service restart, the sessions a predecessor left open: the jobs whose persistent memo names
a session (``FluxSide.session_jobs``) are read back from their eventlogs (``qpu-session``
and a task that rode it), and the session id from the vendor through that task
(``Vendor.session_of``): flux-quantum never records a session id. A close the vendor could
not take is retried. This part never asks a vendor to open a session, never calls a vendor on the reactor
thread, and never releases or fails a job.
"""

from __future__ import annotations

import syslog
from dataclasses import dataclass, field
from typing import Any

from flux_quantum import events
from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.retry import Retries
from flux_quantum.service.state import Unit, UnitSession, UnitState
from flux_quantum.vendors.base import SessionOpening, TaskRef, VendorSession

CLOSE_TRIES = 5  # retryable failures of a close before the vendor's time limit is left to end it


@dataclass
class Lease:
    """A session to keep while any of ``jobs`` runs, then close. ``task`` rode it: after a
    restart it is how the session is found again."""

    session: UnitSession
    task: TaskRef | None
    unit: int
    jobs: set[int] = field(default_factory=set)
    closing: bool = False
    busy: bool = False
    due: float = 0.0
    retry: Retries = field(default_factory=Retries)
    why: str = ""


def task_on(unit: Unit, device: str) -> TaskRef | None:
    """A task of the unit on ``device`` (one that rode its session)."""
    for program in unit.programs:
        task = program.attempt.task
        if task is not None and task.device == device:
            return task
    return None


class Sessions:
    def __init__(self, ctx: ServiceContext, face: Face) -> None:
        self.ctx = ctx
        self.face = face
        self.leases: dict[str, Lease] = {}  # by the session's fingerprint
        self._recovered = False
        self._due = 0.0

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

    def unit_ended(self, unit: Unit, state: UnitState, why: str) -> None:
        """A unit was released (keep its session while its jobs run), failed or abandoned
        (close it now). Called again for the same unit: nothing more happens."""
        session = unit.session
        if session is None or not session.open or session.fingerprint is None:
            return
        lease = Lease(session, task_on(unit, session.device), unit.id)
        if state is UnitState.RELEASED:
            lease.jobs = set(unit.released_jobs) | set(unit.jobs)
            lease.due = self.ctx.clock() + self.ctx.options.scan_interval
            self.leases[session.fingerprint] = lease
            return
        if state is UnitState.FAILED:
            # The jobs are still held: the last moment their eventlogs can say so.
            record = events.SessionClosed(
                device=session.device, fingerprint=session.fingerprint, reason=why
            )
            self.ctx.post_all(unit, record)
        self.close(lease, why)

    def joined_late(self, unit_id: int, jobid: int) -> None:
        """A job released on a released unit's task may use its session too."""
        for lease in self.leases.values():
            if lease.unit == unit_id and not lease.closing:
                lease.jobs.add(jobid)

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
        for lease in watched:
            lease.jobs &= alive
            if not lease.jobs:
                self.close(lease, "its last job ended")

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
        known = set(self.leases) | {
            u.session.fingerprint for u in ctx.units if u.session is not None
        }
        found: dict[str, Lease] = {}
        for jobid, record in records.items():
            if record is None:
                continue
            history = events.replay(record.events)
            recorded = history.session
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
            lease = found.get(recorded.fingerprint)
            if lease is None:
                session = UnitSession(
                    device.name,
                    device.vendor,
                    recorded.requested,
                    recorded.mode,
                    recorded.fingerprint,
                )
                lease = found[recorded.fingerprint] = Lease(
                    session, None, history.unit if history.unit is not None else jobid
                )
            if lease.task is None and task_id is not None:
                lease.task = TaskRef(device.vendor, device.name, task_id)
            if jobid in alive:
                lease.jobs.add(jobid)
        for fingerprint, lease in found.items():
            self.leases[fingerprint] = lease
            if not lease.jobs:
                self.close(lease, "its jobs ended while the service was down")
        if found:
            ctx.log(syslog.LOG_INFO, f"sessions: found {len(found)} session(s) left open")

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
        handle, task = session.handle, lease.task
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
