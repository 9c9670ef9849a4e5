"""Reserved QPU time (Braket Direct) in the handler service: who waits for which window,
who is in it, and the one guard before a task is created with a window's ARN.

A job that names a window (``qpu.reservation=NAME``), or that the policy routes into one
(``route``), has its attempt chosen on the window's device with the window set
(``Attempt.window``). It then stays held with no task until it is *admitted*
(``admission``, deciding with ``flux_quantum.site.reservations.admission``): the window opens
within the job's lead (the learned start-up of released jobs plus the wait for its
cores, given by ``Release.window_lead``), fewer than the window's ``jobs`` jobs are in it,
and a task created now can still run before the end. Admitted, its task is created with
the window's ARN (``arn``, the guard: never on another device, never when less than one
task's time is left) and the job is released at once. A window that takes no more work
applies the job's end rule (``end_rule``: on-demand or fail; ``Outcomes.window_ended``).

This part owns the bookkeeping of every window: the units waiting for it and why, the
units admitted and not yet released, the jobs released into it that have not ended
(their places: watched with job-list as ``Sessions`` watches released jobs, and found
again after a restart through their persistent memo ``qpu_reservation``), and which end
was said to which unit. It books the windows in the site's ledger when the service
starts (``SitePolicy.book_windows``) and answers the ``reservations`` section of
``status`` (tasks and QPU time: the ledger's, which outlives a restart). It never calls
a vendor, never creates, releases or fails anything: ``Submission``, ``Tracking``,
``Release`` and ``Outcomes`` do, asking it.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.jobspec import RESERVATION_MEMO
from flux_quantum.selection.policies import Explanation
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.state import Unit, UnitState
from flux_quantum.site import reservations
from flux_quantum.site.access import Requester
from flux_quantum.site.policy import SitePolicy


class WindowClosed(Exception):
    """The guard refused a create with a window's ARN: the window is over (or has less
    than one task's time left), or the device is not the window's."""


@dataclass
class Admitted:
    """A unit admitted into ``window`` (its task created, or being created, with the
    ARN), for ``reason``; it holds places until its jobs are released."""

    window: str
    reason: str


def ended_note(window: reservations.Reservation, now: float, task_seconds: float) -> str:
    """The sentence a job fails with when its window ended before its task ran."""
    if now >= window.end:
        return (
            f"qpu: {window.label} ended at {reservations.iso(window.end)} before the job's task ran"
        )
    return (
        f"qpu: {window.label} ends at {reservations.iso(window.end)}, too soon for the job's "
        f"task (~{reservations.format_seconds(task_seconds)}): it did not run in it"
    )


class Reservations:
    def __init__(self, ctx: ServiceContext, site: SitePolicy | None) -> None:
        self.ctx = ctx
        self.site = site
        # The site's windows (no site policy: none).
        self.book = site.reservations if site is not None else reservations.ReservationBook()
        # Units whose attempt is for a window, not admitted yet: (window, why it waits).
        self._waiting: dict[int, tuple[str, str | None]] = {}
        self._admitted: dict[int, Admitted] = {}
        self._running: dict[int, tuple[str, int]] = {}  # released job -> (window, userid)
        self._marked: set[int] = set()  # jobs whose persistent memo names their window
        self._said_end: set[tuple[int, str]] = set()  # (unit, window) told it ended
        self._booked = False
        self._book_failed = False  # said once
        self._recovered = False
        self._due = 0.0

    @property
    def enabled(self) -> bool:
        return len(self.book) > 0

    # -- what a window takes

    def task_seconds(self, window: reservations.Reservation) -> float:
        """Expected seconds of one task on the window's device: learned drain, else the
        catalog's ``drain_seconds_per_task``."""
        device = self.ctx.catalog.get(window.device)
        if device is None:
            return 0.0
        return self.ctx.estimator.estimate(device).seconds_per_task

    def ended(self, window: reservations.Reservation, now: float) -> bool:
        """Whether the window takes no more work: over, or less than one task left."""
        return now + self.task_seconds(window) >= window.end

    def end_rule(self, unit: Unit, window: reservations.Reservation) -> str:
        """What becomes of the unit when its window ended before its task ran: the job's
        ``qpu.reservation_end``, else the window's ``on_end`` for a job that named it; a
        job the policy routed there never asked for the window, so it goes on demand."""
        if unit.request.reservation_end is not None:
            return unit.request.reservation_end
        if unit.request.named_reservation is None:
            return reservations.ON_DEMAND
        return window.on_end

    def fell_back(self, unit: Unit) -> reservations.Reservation | None:
        """The window the unit was told ended (its later attempts go to that window's
        device, in the public queue), or None."""
        for unit_id, name in self._said_end:
            if unit_id == unit.id:
                return self.book.named(name)
        return None

    # -- choosing

    def named(
        self, unit: Unit, requester: Callable[[], Requester | None]
    ) -> reservations.Reservation:
        """The window the unit's request names, checked: ``LookupError`` with the sentence
        the job fails with (unknown name, a user or bank it is not for, a request that
        names another device). ``requester``: who asks (asked once the name is known)."""
        name = unit.request.named_reservation
        assert name is not None
        window = self.book.lookup(name)
        who = requester()
        if who is None or window.may_use(who) is not True:
            described = who.describe() if who is not None else f"user {unit.userid}"
            raise LookupError(
                f"{window.label} is for {window.describe_who()}; {described} may not use it"
            )
        wanted = unit.request.device
        device = self.ctx.catalog.get(window.device)
        names = (window.device, device.id) if device is not None else (window.device,)
        if wanted is not None and wanted not in names:
            raise LookupError(
                f"{window.label} is on device {window.device}; the request names device {wanted}"
            )
        if device is None:
            raise LookupError(f"{window.label} is on device {window.device}, not in the catalog")
        return window

    def routable(self, unit: Unit, device: Device) -> bool:
        """Whether the policy may route the unit into a window: the site has windows open
        to routing, the job named none and did not refuse them (``qpu.reservation=none``),
        it is one program without a session, and it would run on a QPU its vendor
        reserves (``windows_on``)."""
        request = unit.request
        if request.reservation is not None or request.session is not None:
            return False
        if len(unit.programs) != 1 or device.device_class != "qpu":
            return False
        if reservations.windows_on(device.vendor, device.id) is None:
            return False
        return any(w.route for w in self.book)

    def route(
        self, unit: Unit, requester: Requester, explanation: Explanation, now: float
    ) -> reservations.Route:
        """Route the unit into a window among the devices the policy found eligible,
        when one opens sooner than the public queue would serve the job (or within its
        ``route_within``); the route's reason says which, or why none. The public queue
        is the one the job would go to: a window's device's own, or the device the
        policy chose when that one serves it sooner."""
        eligible = [c for c in explanation.candidates if c.eligible]
        chosen = next((c.expected_wait for c in eligible if c.device == explanation.chosen), None)
        public: dict[str, float | None] = {}
        for candidate in eligible:
            own = candidate.expected_wait
            public[candidate.device] = (
                chosen if chosen is not None and (own is None or chosen < own) else own
            )
        task_seconds = {window.device: self.task_seconds(window) for window in self.book}
        return reservations.route(
            self.book,
            now=now,
            requester=requester,
            devices=[c.device for c in eligible],
            public_wait=public,
            max_wait=unit.request.max_wait,
            waiting={w.name: len(self.waiting_jobs(w)) for w in self.book},
            task_seconds=task_seconds,
        )

    # -- admission

    def waits(self, unit: Unit, window: reservations.Reservation | None) -> None:
        """The unit's attempt was chosen for ``window``: it waits for its admission
        (None: for the public queue, waiting for no window)."""
        if window is None:
            self._waiting.pop(unit.id, None)
        elif unit.id not in self._admitted:
            self._waiting[unit.id] = (window.name, None)

    def admission(
        self, unit: Unit, window: reservations.Reservation, *, now: float, lead: float
    ) -> reservations.Admission:
        """May the unit go into ``window`` now? Admitted, it holds places until its jobs
        are released and have ended; not, why it waits is kept for its memo."""
        admitted = self._admitted.get(unit.id)
        if admitted is not None and admitted.window == window.name:
            return reservations.Admission(True, admitted.reason)
        decision = self.decide(window, now=now, lead=lead)
        self._mark(unit, window.name)
        if decision.admit:
            self._waiting.pop(unit.id, None)
            self._admitted[unit.id] = Admitted(window.name, decision.reason)
            self.ctx.counters.window_admitted += 1
            self.ctx.log(syslog.LOG_INFO, f"unit {unit.id}: admitted: {decision.reason}")
        elif not decision.ended:
            self._waiting[unit.id] = (window.name, decision.reason)
            unit.changed()  # its memo says why it waits
        return decision

    def decide(
        self, window: reservations.Reservation, *, now: float, lead: float
    ) -> reservations.Admission:
        """What ``admission`` would answer a waiting unit now, deciding nothing."""
        return reservations.admission(
            window,
            now=now,
            lead=lead,
            active=self.active(window),
            task_seconds=self.task_seconds(window),
        )

    def waiting_reason(self, unit: Unit) -> str | None:
        """What the unit's memo says while it waits for its window."""
        name, reason = self._waiting.get(unit.id, (None, None))
        if reason is None:
            return None
        return f"waiting for reservation {name}: {reason}"

    def release_reason(self, unit: Unit, window: reservations.Reservation) -> str:
        """Why a unit admitted into ``window`` is released (its ``qpu-ready`` says it)."""
        admitted = self._admitted.get(unit.id)
        reason = (admitted.reason if admitted is not None else None) or (
            f"admitted into {window.label}"
        )
        return f"admitted: {reason}"

    def arn(
        self,
        window: reservations.Reservation,
        device: Device,
        *,
        now: float,
        task_seconds: float,
    ) -> str:
        """The one guard before a create with a window's ARN (called in the worker, right
        before the vendor's create, with the time then): the ARN, or ``WindowClosed``
        when the device is not the window's or a task created now could not run before
        the window's end. Reads nothing that changes: safe off the reactor thread."""
        if device.name != window.device:
            raise WindowClosed(
                f"{window.label} is on device {window.device}, not {device.name}: no task "
                "is created there with its ARN"
            )
        if now + max(task_seconds, 0.0) >= window.end:
            when = "ended" if now >= window.end else "ends"
            raise WindowClosed(
                f"{window.label} {when} at {reservations.iso(window.end)}: no task is created "
                "with its ARN any more"
            )
        return window.arn

    def first_end(self, unit: Unit, window: reservations.Reservation) -> bool:
        """True the first time the unit is told its window ended (the event once)."""
        key = (unit.id, window.name)
        if key in self._said_end:
            return False
        self._said_end.add(key)
        self.ctx.counters.window_ended += 1
        return True

    def left(self, unit: Unit) -> None:
        """The unit waits for no window and holds no place any more (its window ended):
        its jobs' memo no longer names the window."""
        self._waiting.pop(unit.id, None)
        self._admitted.pop(unit.id, None)
        marked = [jobid for jobid in unit.jobs if jobid in self._marked]
        for jobid in marked:
            self._marked.discard(jobid)
            try:
                self.ctx.flux.annotate(jobid, {RESERVATION_MEMO: None})
            except OSError as exc:
                self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: reservation memo failed: {exc}")

    def _mark(self, unit: Unit, name: str) -> None:
        """The persistent memo ``qpu_reservation`` on the unit's jobs, once."""
        for jobid in list(unit.jobs):
            if jobid in self._marked:
                continue
            try:
                self.ctx.flux.annotate(jobid, {RESERVATION_MEMO: name})
            except OSError as exc:
                self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: reservation memo failed: {exc}")
                continue
            self._marked.add(jobid)

    # -- what the other parts tell it

    def unit_ended(self, unit: Unit, state: UnitState) -> None:
        """The unit was released (its jobs hold its window's places until they end),
        failed or abandoned (its places free up: the next waiting job may go in)."""
        self._waiting.pop(unit.id, None)
        self._said_end = {key for key in self._said_end if key[0] != unit.id}
        admitted = self._admitted.pop(unit.id, None)
        jobs = [*unit.released_jobs, *unit.jobs]
        if admitted is not None and state is UnitState.RELEASED:
            for jobid in jobs:
                self._running[jobid] = (admitted.window, unit.userid)
            return
        self._marked.difference_update(jobs)
        if admitted is not None:
            self._wake(admitted.window)

    def recovered(self, unit: Unit, ended: Iterable[str]) -> None:
        """A unit adopted after a restart: an attempt whose token was recorded with a
        window was admitted into it (its task is re-attached and the job released); the
        windows its eventlog says ended are not said again."""
        for name in ended:
            self._said_end.add((unit.id, name))
        for program in unit.programs:
            attempt = program.attempt
            window = attempt.window
            if window is None or attempt.token is None:
                continue
            self._admitted[unit.id] = Admitted(
                window.name, f"admitted into {window.label} before the service restarted"
            )
            self._marked.update(unit.jobs)

    # -- counts

    def waiting_units(self, window: reservations.Reservation) -> list[Unit]:
        """Active units whose attempt is for ``window`` and not admitted yet."""
        out = []
        for unit_id, (name, _) in self._waiting.items():
            unit = self.ctx.units.get(unit_id)
            if name == window.name and unit is not None and unit.active:
                out.append(unit)
        return out

    def waiting_jobs(self, window: reservations.Reservation) -> list[int]:
        return sorted(j for u in self.waiting_units(window) for j in u.jobs)

    def active_jobs(self, window: reservations.Reservation) -> list[int]:
        """Jobs of the window admitted and not ended: the admitted units' held jobs and
        the jobs released into it that have not ended."""
        jobs = {
            jobid
            for unit_id, admitted in self._admitted.items()
            if admitted.window == window.name
            for jobid in self._unit_jobs(unit_id)
        }
        jobs.update(j for j, (name, _) in self._running.items() if name == window.name)
        return sorted(jobs)

    def _unit_jobs(self, unit_id: int) -> list[int]:
        unit = self.ctx.units.get(unit_id)
        return list(unit.jobs) if unit is not None else []

    def active(self, window: reservations.Reservation) -> int:
        return len(self.active_jobs(window))

    # -- the watch

    def check(self, now: float) -> None:
        """Book the windows in the ledger once; once, find the jobs released into a
        window before a restart; every scan interval, free the places of the released
        jobs that ended and wake the jobs waiting for those windows."""
        if not self.enabled:
            return
        if now < self._due:
            return
        self._due = now + self.ctx.options.scan_interval
        if not self._booked and self.site is not None:
            try:
                self.site.book_windows(now)
                self._booked = True
            except FluxQuantumError as exc:  # tried again at the next scan interval
                level = syslog.LOG_DEBUG if self._book_failed else syslog.LOG_WARNING
                self._book_failed = True
                self.ctx.log(level, f"reservations: windows not booked in the ledger yet: {exc}")
        if not self._recovered:
            self._recover()
        # A past window's places no longer matter.
        for jobid, (name, _) in list(self._running.items()):
            window = self.book.named(name)
            if window is None or window.state(now) == reservations.PAST:
                del self._running[jobid]
        if not self._running:
            return
        try:
            alive = self.ctx.flux.alive(set(self._running))
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"reservations: job states unavailable: {exc}")
            return
        freed = {name for jobid, (name, _) in self._running.items() if jobid not in alive}
        self._marked.difference_update(j for j in self._running if j not in alive)
        self._running = {j: w for j, w in self._running.items() if j in alive}
        for name in freed:
            self._wake(name)

    def _recover(self) -> None:
        """The jobs released into a window that have not ended (their memo names it),
        found once after the service started: they hold their window's places."""
        ctx = self.ctx
        try:
            found = ctx.flux.reservation_jobs()
        except Exception as exc:
            ctx.log(syslog.LOG_WARNING, f"reservations: cannot list the jobs in windows: {exc}")
            return
        self._recovered = True
        count = 0
        for jobid, (name, userid) in found.items():
            if ctx.units.tracks(jobid) or self.book.named(name) is None:
                continue
            self._running[jobid] = (name, userid)
            self._marked.add(jobid)
            count += 1
        if count:
            ctx.log(syslog.LOG_INFO, f"reservations: {count} released job(s) in windows")

    def _wake(self, name: str) -> None:
        """A place of window ``name`` freed up: its waiting jobs ask again now (the next
        full pass queues them)."""
        for unit_id, (waits_for, _) in self._waiting.items():
            unit = self.ctx.units.get(unit_id)
            if waits_for != name or unit is None:
                continue
            for attempt in unit.attempts():
                window = attempt.window
                if window is not None and window.name == name and not attempt.submit_posted:
                    attempt.due = 0.0

    # -- status

    def status(self, now: float, userid: int | None = None) -> list[dict[str, Any]]:
        """Each window: state, times, who waits for it and who is in it (a guest sees
        only their own jobs), the tasks created in it and its QPU time used (the
        ledger's), its utilisation and its cost."""
        out = []
        for window in self.book:
            waiting = self.waiting_units(window)
            waiting_ids = sorted(
                j for u in waiting if userid is None or u.userid == userid for j in u.jobs
            )
            active = self.active_jobs(window)
            if userid is not None:
                active = [j for j in active if self._userid_of(j) == userid]
            tasks, used = self._use(window)
            out.append(
                {
                    "name": window.name,
                    "device": window.device,
                    "state": window.state(now),
                    "start_at": reservations.iso(window.start),
                    "end_at": reservations.iso(window.end),
                    "start": window.start,
                    "end": window.end,
                    "waiting": waiting_ids,
                    "active": active,
                    "jobs": window.jobs,
                    "tasks": tasks,
                    "used_seconds": None if used is None else round(used, 1),
                    "utilisation": None
                    if used is None or window.duration <= 0
                    else round(used / window.duration, 4),
                    "cost": window.cost,
                }
            )
        return out

    def _use(self, window: reservations.Reservation) -> tuple[int | None, float | None]:
        """Tasks created in the window and its QPU seconds used, as the ledger has them
        (a task counts from its reservation before the create, its QPU time once it is
        settled); None when the ledger cannot say."""
        if self.site is None:
            return None, None
        try:
            tasks, seconds, _share = self.site.window_use(window)
        except FluxQuantumError as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"reservations: ledger unavailable: {exc}")
            return None, None
        return tasks, seconds

    def _userid_of(self, jobid: int) -> int | None:
        running = self._running.get(jobid)
        if running is not None:
            return running[1]
        unit = self.ctx.units.of_job(jobid)
        return unit.userid if unit is not None else None
