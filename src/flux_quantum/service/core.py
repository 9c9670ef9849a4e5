"""``QuantumService``: the handler service's parts put together, driven by ``tick()``.

It owns the order in which the parts run and the queue of what is due when: ``tick()``
(every ``options.tick`` seconds) scans for held jobs when due, runs a full pass of the
time-only checks every ``scan_interval``, steps the attempts whose time came
(``DueQueue``), and runs the periodic parts, each fenced on its own (one that raises is
said once; the others go on): cluster view, event feeds, device probes, settlements,
cancels, sessions, start-up measurements, and last the site's metrics (``Meters``: a
snapshot of the state for the exporter's thread, when one is due). ``completions()``
hands finished worker calls back to their part, and ``step_soon()`` (after completions,
and when a step falls due before the next tick) queues those attempts and steps what is
due. The records mark whose memo changed as they change (``Unit.changed``); the memos
are sent here, once per unit, after the steps, after the completions and at the end of a
tick (``Face.refresh``). All run on the reactor thread and never block. The parts, each
given its collaborators here:

- ``adoption``: discovery of held jobs, adoption and recovery from eventlogs
- ``submission``: an attempt's program read, its device chosen (``selection``), its
  reservation, session, merged set and create; ``tracking``: its task's polls,
  milestones and ``max_wait``; each step goes to the one its attempt's phase is with;
  ``attempts`` runs an attempt's calls in workers and retries them by the one ``retry``
  policy
- ``outcomes``: fail-over, fail, finish; ``cancels``: the one way to cancel a task
- ``lookups``: creates left without an answer, looked up by their token before their
  reservation is released (their task cancelled and settled)
- ``release``: the release rule's facts gathered once and its answer acted on
  (``flux_quantum.timing`` decides), and the release call
- ``devices``: device status and the Fluxion graph following it
- ``events``: the vendors' event feeds (Braket's through the site's queue), one read at
  a time each: an event makes its task's poll come now, never acts itself
- ``face``: memos (of the units marked changed, sent here) and status
- ``sessions``: vendor sessions recorded, kept while a job may use them, always closed
- ``charges``: the site's policy (access, the reservation before a create, the
  settlement when a task ends)
- ``reservations``: reserved QPU time (Braket Direct): who waits for which window, who is
  in it, the one guard before a create with a window's ARN
- ``merges``: the pool of programs waiting to share one vendor task with other jobs'
  (``[quantum.merge]``), and the merged tasks recorded but not created yet
- ``units``: the tracked units and their indexes (in the shared ``context``)
"""

from __future__ import annotations

import syslog
import time
from collections.abc import Callable, Mapping
from typing import Any

from flux_quantum.catalog import Catalog
from flux_quantum.compiler import CompilePool
from flux_quantum.service.adoption import Adoption
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.cancels import Cancels
from flux_quantum.service.charges import Charges
from flux_quantum.service.compiling import Compiling
from flux_quantum.service.context import MODULE_NAME, Clock, Log, ServiceContext
from flux_quantum.service.devices import Devices
from flux_quantum.service.due import DueQueue
from flux_quantum.service.face import Face
from flux_quantum.service.fluxside import FluxSide, JobRecord
from flux_quantum.service.lookups import Lookups
from flux_quantum.service.merges import Merges
from flux_quantum.service.meters import Meters
from flux_quantum.service.options import ServiceOptions
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.release import Release
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.selection import Selection
from flux_quantum.service.sessionkeys import SessionKeys
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Counters, Phase, Program, Unit
from flux_quantum.service.submission import Submission
from flux_quantum.service.tracking import Tracking
from flux_quantum.service.units import Units
from flux_quantum.service.vendor_events import VendorEvents
from flux_quantum.service.workers import Submit, Workers
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.base import Vendor


class QuantumService:
    """The handlers' logic on one Flux side, catalog, set of workers and clock."""

    def __init__(
        self,
        flux: FluxSide,
        catalog: Catalog,
        options: ServiceOptions,
        workers: Workers,
        *,
        vendors: Mapping[str, Vendor] | None = None,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
        log: Log | None = None,
        userid: int | None = None,
        site: SitePolicy | None = None,
        instance_owner: bool = True,
        module_name: str | None = MODULE_NAME,
        session_keys: SessionKeys | None = None,
        meters: Meters | None = None,
        compiler: CompilePool | None = None,
        compile_lane: Submit | None = None,
    ) -> None:
        ctx = self.ctx = ServiceContext(
            flux,
            catalog,
            options,
            workers,
            vendors=vendors,
            clock=clock,
            monotonic=monotonic,
            log=log,
            userid=userid,
            instance_owner=instance_owner,
            module_name=module_name,
            meters=meters,
        )
        # Each part gets its collaborators here, in an order where each exists first.
        self.reservations = Reservations(ctx, site)
        self.face = Face(ctx, self.reservations)
        self.sessions = Sessions(ctx, self.face, session_keys or SessionKeys())
        self.cancels = Cancels(ctx)
        self.charges = Charges(ctx, site, self.reservations, self.cancels)
        self.lookups = Lookups(ctx, self.charges, self.cancels)
        self.outcomes = Outcomes(
            ctx, self.face, self.lookups, self.cancels, self.sessions, self.reservations
        )
        self.calls = AttemptCalls(
            ctx,
            workers,
            self.outcomes,
            self.cancels,
            self.lookups,
            orphan=self.sessions.orphan,
        )
        self.release = Release(ctx, self.face, self.outcomes, self.sessions)
        self.merges = Merges(ctx, site.merge if site is not None else None, self.charges.requester)
        self.compiling = Compiling(ctx, self.calls, self.outcomes, compiler, compile_lane)
        self.selection = Selection(
            ctx,
            self.calls,
            self.outcomes,
            self.charges,
            self.reservations,
            self.merges,
            self.compiling,
        )
        self.devices = Devices(ctx, self.outcomes)
        self.events = VendorEvents(ctx, self.calls, self.devices.probe_soon)
        self.tracking = Tracking(
            ctx,
            self.calls,
            self.outcomes,
            self.release,
            self.charges,
            self.reservations,
            self.events,
        )
        self.submission = Submission(
            ctx,
            self.calls,
            self.outcomes,
            self.release,
            self.charges,
            self.sessions,
            self.selection,
            self.reservations,
            self.merges,
            self.compiling,
        )
        self.adoption = Adoption(
            ctx,
            self.outcomes,
            self.release,
            self.charges,
            self.lookups,
            self.sessions,
            self.reservations,
        )
        self.due = DueQueue(retry_after=options.tick)
        self.started = clock()
        self._scan_due = 0.0
        self._cluster_due = 0.0
        self._watch_due = 0.0
        self._lead_due = 0.0
        self._need_cluster = False
        # The periodic parts that failed, with what they said (said once, not per tick).
        self._failing: dict[str, str] = {}

    # -- what the runner asks

    @property
    def counters(self) -> Counters:
        return self.ctx.counters

    @property
    def units(self) -> Units:
        return self.ctx.units

    @property
    def catalog(self) -> Catalog:
        return self.ctx.catalog

    @property
    def next_due(self) -> float:
        """When the soonest queued step (a poll, a retry) is due: the runner wakes for it
        rather than at the next periodic tick, so a poll is never late by a tick."""
        return self.due.next_due()

    def now(self) -> float:
        return self.ctx.clock()

    def record(self, jobid: int) -> JobRecord | None:
        """A job's record as Flux has it (a task read checks the caller against it)."""
        return self.ctx.flux.records([jobid]).get(jobid)

    def vendor(self, name: str) -> Vendor:
        return self.ctx.vendor(name)

    def note_error(self, text: str) -> None:
        self.ctx.note_error(text)

    # -- the tick

    def tick(self) -> None:
        """Do whatever is due: scan for jobs, step the attempts due, run the periodic
        parts.

        Every ``scan_interval`` (and after a scan) a full pass runs the checks only time
        moves between polls (the classical lead and ``max_wait``, at most every
        ``cluster_interval``, the pace of the cluster view they compare with), retries a
        release a failed call left pending, and queues every attempt afresh. Between
        full passes only the attempts due come out of the queue (``DueQueue``), not
        1,000 units five times a second. Each periodic part is fenced: one that raises
        is said once and the others go on."""
        ctx = self.ctx
        now = ctx.clock()
        scanned = False
        if now >= self._scan_due or ctx.rescan_requested:
            self._scan_due = now + ctx.options.scan_interval
            self._fenced("scan", self.adoption.scan)
            scanned = True
        if scanned or now >= self._watch_due:
            self._fenced("full pass", self._full_pass, now)
        self._fenced("steps", self.step_soon)
        if self._need_cluster and now >= self._cluster_due:
            self._cluster_due = now + ctx.options.cluster_interval
            try:
                ctx.cluster = ctx.flux.cluster(now)
            except Exception as exc:
                ctx.cluster = None
                ctx.log(syslog.LOG_DEBUG, f"cluster view unavailable: {exc}")
        self._fenced("events", self.events.check, now)
        self._fenced("devices", self.devices.check, now)
        self._fenced("charges", self.charges.check, now)
        self._fenced("lookups", self.lookups.check, now)
        self._fenced("cancels", self.cancels.retry, now)
        self._fenced("groups", self.outcomes.expire_groups, now)
        self._fenced("sessions", self.sessions.check, now)
        self._fenced("reservations", self.reservations.check, now)
        self._fenced("start-up", self.release.measure_startup, now)
        self._fenced("memos", self.face.refresh)
        self._fenced("metrics", ctx.meters.tick, self, now)

    def _fenced(self, part: str, call: Callable[..., None], *args: Any) -> None:
        """Run one part; an exception is noted and logged once per part and message (the
        same failure at every tick is not said again), and the next parts still run."""
        try:
            call(*args)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            self.ctx.note_error(f"{part}: {text}")
            if self._failing.get(part) != text:
                self._failing[part] = text
                self.ctx.log(syslog.LOG_ERR, f"{part} failed: {text}")
            return
        if part in self._failing:
            del self._failing[part]
            self.ctx.log(syslog.LOG_INFO, f"{part} works again")

    def _full_pass(self, now: float) -> None:
        ctx = self.ctx
        self.calls.take_completed()  # this pass queues every attempt
        self._watch_due = now + ctx.options.scan_interval
        lead = now >= self._lead_due
        if lead:
            self._lead_due = now + max(ctx.options.scan_interval, ctx.options.cluster_interval)
        need_cluster = False
        queued: list[tuple[Unit, Program]] = []
        for unit in ctx.units:
            for program in unit.programs:
                if not unit.active:
                    break
                attempt = program.attempt
                waits = attempt.window is not None and attempt.phase is Phase.SUBMIT
                if attempt.phase is Phase.TRACK or waits:
                    # The lead (the classical one, or a window's) compares with the
                    # cluster view.
                    need_cluster = True
                    if lead:
                        self._watch(unit, program, now)
                        if not unit.active:
                            break
                queued.append((unit, program))
            if unit.programs and all(p.attempt.phase is Phase.READY for p in unit.programs):
                self.release.maybe_release(unit)
        self.face.pending(u for u in ctx.units if u.memo_pending and u.active)
        self._need_cluster = need_cluster
        self.due.reset(queued)

    def step_soon(self) -> None:
        """Between ticks: queue the attempts whose vendor call just completed (a create
        after a selection), then step whatever is due now."""
        for unit, program in self.calls.take_completed():
            self.due.push(unit, program)
        self._step_due(self.ctx.clock())

    def _step_due(self, now: float) -> None:
        for unit, program in self.due.pop_due(now):
            if not unit.active:
                continue
            self._step(unit, program)
            self.due.push(unit, program, now)
        self._fenced("memos", self.face.refresh)  # the units the steps changed, once each

    def _step(self, unit: Unit, program: Program) -> None:
        """Start the attempt's next blocking call, by the part its phase is with: a task
        to poll is ``tracking``'s; reading, choosing and submitting, ``submission``'s."""
        if program.attempt.phase is Phase.TRACK:
            self.tracking.step(unit, program)
        else:
            self.submission.step(unit, program)

    def _watch(self, unit: Unit, program: Program, now: float) -> None:
        """The checks only time moves between calls, by phase: a tracked task's lead and
        ``max_wait``; a job waiting for its reserved window, its admission."""
        if program.attempt.phase is Phase.TRACK:
            self.tracking.watch(unit, program, now)
        else:
            self.submission.watch(unit, program, now)

    def completions(self) -> None:
        """Run finished worker calls' handlers (reactor thread), then send the memos of
        the units they changed, once each."""
        for done, result, error in self.ctx.workers.drain():
            try:
                done(result, error)
            except Exception as exc:  # one bad completion must not stop the others
                self.ctx.note_error(f"{type(exc).__name__}: {exc}")
                self.ctx.log(syslog.LOG_ERR, f"completion failed: {self.ctx.last_error}")
        self._fenced("memos", self.face.refresh)

    def status(self, userid: int | None = None) -> dict[str, Any]:
        """What the service tracks now (a guest's view: ``userid``'s units only)."""
        ctx = self.ctx
        units = self.face.units(userid)
        out: dict[str, Any] = {
            "uptime": round(ctx.clock() - self.started, 1),
            "catalog": ctx.catalog.path,
            "units": units,
            "jobs": sum(len(u["jobs"]) for u in units),
        }
        # The site's reserved windows (a guest sees only their own jobs in them).
        out["reservations"] = self.reservations.status(ctx.clock(), userid)
        # The devices probed and how many jobs wait on each (everyone's: a count), and
        # the units that ended lately (a guest's own only): ``flux quantum top``.
        held: dict[str, int] = {}
        for unit in ctx.units:
            _, _, device = self.face.held(unit)
            if device is not None:
                held[device] = held.get(device, 0) + len(unit.jobs)
        out["devices"] = [
            {**row, "held": held.get(row["device"], 0)} for row in self.devices.rows()
        ]
        out["recent"] = self.face.recent(userid)
        merge = self.merges.status()
        if merge is not None:
            out["merge"] = merge
        feeds = self.events.status()
        if feeds is not None and userid is None:
            out["events"] = feeds
        if userid is None:
            out.update(
                # Sessions kept for released jobs still running or a loop's steps, or
                # being closed.
                sessions_open=len(self.sessions.leases),
                # Creates left without an answer, being looked up by their token.
                looking_up=self.lookups.pending,
                counters=ctx.counters.__dict__.copy(),
                workers={"busy": ctx.workers.busy, "queued": ctx.workers.queued},
                startup={
                    "estimate": round(self.release.startup.estimate(), 3),
                    "samples": len(self.release.startup.samples),
                },
                options=ctx.options.to_dict(),
                last_error=ctx.last_error,
            )
            site = self.charges.site
            if site is not None:
                charges = self.charges
                out["ledger"] = {
                    "path": str(site.ledger.path),
                    "backend": site.ledger.backend,
                    "cluster": site.ledger.cluster,
                    "currency": site.ledger.currency,
                    "settling": len(charges.watching) + len(charges.backlog),
                    # Reachable, or why not since when; the writes waiting for it; how
                    # many times a reservation was put off (its job held with no task).
                    "unavailable": charges.outage,
                    "unavailable_for": None
                    if charges.outage_since is None
                    else round(ctx.clock() - charges.outage_since, 1),
                    "backlog": len(charges.backlog),
                    "reservations_put_off": charges.held_for_ledger,
                }
        return out
