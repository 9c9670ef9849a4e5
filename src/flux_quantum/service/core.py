"""``QuantumService``: the handler service's parts put together, driven by ``tick()``.

It owns nothing of its own but the order in which the parts run: ``tick()`` (every
``options.tick`` seconds) scans for held jobs when due, lets each tracked attempt take
its next step, releases ready units, looks at the cluster's free cores, probes devices,
retries cancels and measures job start-up; ``completions()`` hands finished worker
calls back to their part, and ``step_soon()`` (after completions, and when a step falls
due before the next tick) steps only those attempts. All run on the reactor thread and
never block. The parts:

- ``adoption``: discovery of held jobs, adoption and recovery from eventlogs
- ``tasks``: the vendor task lifecycle (select, submit, track)
- ``outcomes``: fail-over, fail, finish, cancel
- ``release``: release decisions and the release call
- ``devices``: device status and the Fluxion graph following it
- ``face``: memos and status
- ``sessions``: vendor sessions kept while a job may use them, always closed
- ``charges``: the site's policy (access, the reservation before a create, the
  settlement when a task ends)
"""

from __future__ import annotations

import math
import syslog
import time
from collections.abc import Mapping
from typing import Any

from flux_quantum.catalog import Catalog
from flux_quantum.service.adoption import Adoption
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import Clock, Log, ServiceContext
from flux_quantum.service.devices import Devices
from flux_quantum.service.face import Face
from flux_quantum.service.fluxside import FluxSide
from flux_quantum.service.options import ServiceOptions
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.release import Release
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Phase, Program, Unit
from flux_quantum.service.tasks import Tasks
from flux_quantum.service.workers import Workers
from flux_quantum.site_policy import SitePolicy
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
        log: Log | None = None,
        userid: int | None = None,
        site: SitePolicy | None = None,
        instance_owner: bool = True,
    ) -> None:
        self.ctx = ServiceContext(
            flux, catalog, options, workers, vendors=vendors, clock=clock, log=log, userid=userid
        )
        self.ctx.instance_owner = instance_owner
        self.face = Face(self.ctx)
        self.sessions = Sessions(self.ctx)
        self.charges = Charges(self.ctx, site)
        self.outcomes = Outcomes(self.ctx, self.face, self.charges)
        self.release = Release(self.ctx, self.face, self.outcomes)
        self.tasks = Tasks(self.ctx, self.face, self.outcomes, self.release, self.charges)
        self.adoption = Adoption(
            self.ctx, self.face, self.outcomes, self.release, self.tasks, self.charges
        )
        self.devices = Devices(self.ctx, self.outcomes)
        self.started = clock()
        self._scan_due = 0.0
        self._cluster_due = 0.0
        self._watch_due = 0.0
        self._lead_due = 0.0
        self._need_cluster = False
        # The soonest step due after this tick (a poll, a retry): the runner wakes for
        # it rather than at the next periodic tick, so a poll is never late by a tick.
        self.next_due = math.inf
        self._soon: list[tuple[Unit, Program]] = []

    @property
    def counters(self):  # noqa: ANN201 - a Counters record
        return self.ctx.counters

    def tick(self) -> None:
        """Do whatever is due: scan for jobs, start vendor calls, release ready units.

        Every ``scan_interval`` (and after a scan) a full pass looks at every tracked
        attempt: it steps those due, runs the checks only time moves between polls
        (the classical lead and ``max_wait``, at most every ``cluster_interval``, the
        pace of the cluster view they compare with), retries a release a failed call
        left pending, and notes every attempt due before the next full pass. The ticks
        in between step only those and the attempts whose vendor call completed
        (``step_soon``), not 1,000 units five times a second."""
        ctx = self.ctx
        now = ctx.clock()
        scanned = False
        if now >= self._scan_due or ctx.rescan:
            self._scan_due = now + ctx.options.scan_interval
            self.adoption.scan()
            scanned = True
        if scanned or now >= self._watch_due:
            self._full_pass(now)
        else:
            self.step_soon()
        if self._need_cluster and now >= self._cluster_due:
            self._cluster_due = now + ctx.options.cluster_interval
            try:
                ctx.cluster = ctx.flux.cluster(now)
            except Exception as exc:
                ctx.cluster = None
                ctx.log(syslog.LOG_DEBUG, f"cluster view unavailable: {exc}")
        self.devices.check(now)
        self.charges.check(now)
        self.outcomes.retry_cancels(now)
        self.outcomes.expire_groups(now)
        self.sessions.check(now)
        self.release.measure_startup(now)

    def _full_pass(self, now: float) -> None:
        ctx = self.ctx
        ctx.take_completed()  # this pass looks at every attempt
        self._watch_due = now + ctx.options.scan_interval
        lead = now >= self._lead_due
        if lead:
            self._lead_due = now + max(ctx.options.scan_interval, ctx.options.cluster_interval)
        need_cluster = False
        soon: list[tuple[Unit, Program]] = []
        horizon = self._horizon()
        for unit in list(ctx.units.values()):
            for program in unit.programs:
                if not unit.active:
                    break
                attempt = program.attempt
                if attempt.phase is Phase.TRACK:
                    need_cluster = True
                    if lead:
                        self.tasks.watch(unit, program, now)
                        if not unit.active:
                            break
                self._step_due(unit, program, now, horizon, soon)
            if unit.programs and all(p.attempt.phase is Phase.READY for p in unit.programs):
                self.release.maybe_release(unit)
        self.face.pending(u for u in ctx.units.values() if u.memo_pending and u.active)
        self._need_cluster = need_cluster
        self._soon = soon
        self._next_due(now)

    def step_soon(self) -> None:
        """Between full passes: step only the attempts due before the next one (the
        runner wakes for the first of them), those whose vendor call just completed (a
        create after a selection) and those that found nothing to start yet (a batch's
        program waiting for the one before it), not every tracked unit: with 1,000
        units and polls completing several times a second, a full pass each time would
        cost more than the polls."""
        ctx = self.ctx
        now = ctx.clock()
        pending = self._soon + ctx.take_completed()
        self._soon = []
        seen: set[int] = set()
        horizon = self._horizon()
        for unit, program in pending:
            if id(program) in seen or not unit.active:
                continue
            seen.add(id(program))
            self._step_due(unit, program, now, horizon, self._soon)
        self._next_due(now)

    def _step_due(
        self,
        unit: Unit,
        program: Program,
        now: float,
        horizon: float,
        soon: list[tuple[Unit, Program]],
    ) -> None:
        """Step the attempt if it is due; note it in ``soon`` if its next step comes
        before ``horizon`` (or found nothing to start yet)."""
        attempt = program.attempt
        if not attempt.busy and attempt.due <= now:
            self.tasks.step(unit, program)
            attempt = program.attempt
        if unit.active and not attempt.busy and attempt.due < horizon:
            soon.append((unit, program))

    def _horizon(self) -> float:
        """Steps due before this are noted for the ticks until the next full pass:
        that pass runs at the first tick after ``_watch_due``, up to a tick later."""
        return self._watch_due + self.ctx.options.tick

    def _next_due(self, now: float) -> None:
        """The soonest future step (one that found nothing to start is tried again at
        the next tick, not at once: the runner must not spin on it)."""
        self.next_due = min(
            (due for _, p in self._soon if (due := p.attempt.due) > now), default=math.inf
        )

    def completions(self) -> None:
        """Run finished worker calls' handlers (reactor thread)."""
        for done, result, error in self.ctx.workers.drain():
            try:
                done(result, error)
            except Exception as exc:  # one bad completion must not stop the others
                self.ctx.last_error = f"{type(exc).__name__}: {exc}"
                self.ctx.log(syslog.LOG_ERR, f"completion failed: {self.ctx.last_error}")

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
        if userid is None:
            # Sessions kept for released jobs still running, or being closed.
            out["sessions_open"] = len(self.sessions.leases)
        if userid is None:
            out.update(
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
                out["ledger"] = {
                    "path": str(site.ledger.path),
                    "currency": site.ledger.currency,
                    "settling": len(self.charges.watching),
                }
        return out
