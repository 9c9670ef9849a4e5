"""What every part of the handler service shares: the world it acts on and what it tracks.

``ServiceContext`` holds the outside world (the Flux side, the vendors, the workers, the
clock, the log), the catalog and options, and the tracked units; and the few verbs every
part uses: post an event to a unit's jobs, hand a blocking call to a worker and get its
answer back on the reactor only if it still matters, get a vendor. It decides nothing.
"""

from __future__ import annotations

import contextlib
import os
import syslog
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flux_quantum import events
from flux_quantum.catalog import Catalog
from flux_quantum.errors import CommandError
from flux_quantum.policy import DrainEstimator
from flux_quantum.service.fluxside import ClusterView, FluxSide
from flux_quantum.service.options import ServiceOptions
from flux_quantum.service.state import Attempt, Counters, Member, Program, Unit, UnitState
from flux_quantum.service.workers import Workers
from flux_quantum.vendors import make_vendor
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    RetryBudget,
    SessionOpening,
    TaskRef,
    Vendor,
    VendorSession,
)

Log = Callable[[int, str], None]
Clock = Callable[[], float]
Handler = Callable[[Unit, Program, Attempt, Any, BaseException | None], None]


class ServiceContext:
    """The state and the outside world shared by the service's parts (reactor thread)."""

    def __init__(
        self,
        flux: FluxSide,
        catalog: Catalog,
        options: ServiceOptions,
        workers: Workers,
        *,
        vendors: Mapping[str, Vendor] | None = None,
        clock: Clock,
        log: Log | None = None,
        userid: int | None = None,
    ) -> None:
        self.flux = flux
        self.catalog = catalog
        self.options = options
        self.workers = workers
        self.clock = clock
        self._log = log or (lambda level, msg: None)
        self._vendors: dict[str, Vendor] = dict(vendors or {})
        # Credentials stay with their owner. The instance owner's service acts on its
        # own jobs and on guests' jobs paid by the site's accounts; a guest's own
        # service (not the instance owner's) only on that guest's qpu.account=user jobs.
        self.userid = os.getuid() if userid is None else userid
        self.instance_owner = True
        # The supervisor module a guest's job reads its task through (taskread).
        self.module_name = "qpu_handlers"
        self.estimator = DrainEstimator()
        self.schedule = options.schedule()
        self.units: dict[int, Unit] = {}
        self.member_unit: dict[int, int] = {}
        self.released_groups: dict[tuple[int, str], Unit] = {}
        self.counters = Counters()
        self.cluster: ClusterView | None = None
        self.rescan = False  # something changed under us: list held jobs at once
        self.last_error: str | None = None
        self.on_cancel: Callable[[TaskRef, str], None] = lambda task, why: None
        # The latest probe of each device (a vendor without positions is estimated from it).
        self.device_snapshots: dict[str, DeviceSnapshot] = {}
        # Set by the sessions part: a unit ended (released, failed, abandoned) and why;
        # a job joined a released unit; a session opened for an attempt gone meanwhile.
        self.unit_ended: Callable[[Unit, UnitState, str], None] = lambda unit, state, why: None
        self.joined_late: Callable[[int, int], None] = lambda unit_id, jobid: None
        self.on_orphan_session: Callable[[VendorSession, str], None] = lambda s, why: None
        self._completed: list[tuple[Unit, Program]] = []

    def take_completed(self) -> list[tuple[Unit, Program]]:
        """The attempts whose worker call completed since the last take (their next
        step may be due now)."""
        done, self._completed = self._completed, []
        return done

    def log(self, level: int, msg: str) -> None:
        with contextlib.suppress(Exception):
            self._log(level, msg)

    def vendor(self, name: str) -> Vendor:
        """The vendor object for ``name`` (made once); ValueError/FluxQuantumError if
        the vendor is unknown or cannot be set up."""
        vendor = self._vendors.get(name)
        if vendor is None:
            environ = dict(os.environ)
            if self.options.emulator_url:
                environ["FLUX_QUANTUM_EMULATOR_URL"] = self.options.emulator_url
            vendor = make_vendor(
                name,
                self.catalog,
                timeout=self.options.vendor_timeout,
                retry=RetryBudget(attempts=3, base_delay=0.5, max_delay=4.0, deadline=20.0),
                environ=environ,
            )
            self._vendors[name] = vendor
        return vendor

    def active_units(self) -> list[Unit]:
        return [u for u in self.units.values() if u.active]

    # -- events

    def post(self, member: Member, record: events.QpuEvent) -> bool:
        """Post one event to one job; False if it could not be posted (the job most
        likely just left: the next scan sorts it out)."""
        return self.post_many([(member, record)]) == 1

    def post_many(self, posts: Sequence[tuple[Member, events.QpuEvent]]) -> int:
        """Post events to jobs in one pipelined exchange with Flux (in order); returns
        how many were posted. One that fails is logged and makes the next tick rescan."""
        if not posts:
            return 0
        items = [(member.id, record.name, record.to_context()) for member, record in posts]
        try:
            outcomes = self.flux.post_events(items)
        except (CommandError, OSError) as exc:
            outcomes = [exc] * len(posts)
        posted = 0
        for (member, record), error in zip(posts, outcomes, strict=True):
            if error is not None:
                self.log(syslog.LOG_DEBUG, f"{member.id}: cannot post {record.name}: {error}")
                self.rescan = True
                continue
            posted += 1
            index, attempt = getattr(record, "index", None), getattr(record, "attempt", None)
            if isinstance(index, int) and isinstance(attempt, int):
                member.facts.add((record.name, index, attempt))
        return posted

    def post_all(self, unit: Unit, record: events.QpuEvent) -> int:
        """Post one event on every job of the unit; returns how many took it."""
        return self.post_many([(member, record) for member in list(unit.jobs.values())])

    # -- blocking calls

    def call(
        self,
        unit: Unit,
        program: Program,
        call: Callable[[], Any],
        handler: Handler,
    ) -> None:
        """Run ``call`` in a worker; ``handler`` gets its answer on the reactor only if
        the attempt is still the program's current one and its unit is still active.
        A task created for an attempt that no longer matters is cancelled."""
        attempt = program.attempt
        attempt.busy = True

        def done(result: Any, error: BaseException | None) -> None:
            attempt.busy = False
            self._completed.append((unit, program))
            if not unit.active or program.attempt is not attempt:
                if isinstance(result, TaskRef):
                    self.on_cancel(result, "its jobs are gone")
                elif isinstance(result, SessionOpening) and result.session is not None:
                    self.on_orphan_session(result.session, "its jobs are gone")
                return
            handler(unit, program, attempt, result, error)

        self.workers.submit(call, done)
