"""What every part of the handler service shares: the world it acts on and what it tracks.

``ServiceContext`` holds the outside world (the Flux side, the vendors, the workers, the
clock, the log), the catalog, the options and who the service runs as, all given at
construction; the tracked units (``Units``, which keeps its own indexes); the counters;
the hooks of the site's metrics (``Meters``); and the few verbs every part uses: post an
event to a unit's jobs, get a vendor, ask for a rescan, note an error. It decides nothing.
"""

from __future__ import annotations

import contextlib
import os
import syslog
import time
from collections.abc import Callable, Mapping, Sequence

from flux_quantum.catalog import Catalog
from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.selection.policies import DrainEstimator
from flux_quantum.service.fluxside import ClusterView, FluxSide
from flux_quantum.service.meters import Meters, NoMeters
from flux_quantum.service.options import ServiceOptions
from flux_quantum.service.retry import RetryPolicy
from flux_quantum.service.state import Counters, Member, Unit
from flux_quantum.service.units import Units
from flux_quantum.service.workers import Workers
from flux_quantum.vendors.base import DeviceSnapshot, RetryBudget, Vendor
from flux_quantum.vendors.factory import make_vendor

Log = Callable[[int, str], None]
Clock = Callable[[], float]
# The supervisor module a released job reads its task through (taskread).
MODULE_NAME = "qpu_handlers"


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
        monotonic: Clock = time.monotonic,
        log: Log | None = None,
        userid: int | None = None,
        instance_owner: bool = True,
        module_name: str | None = MODULE_NAME,
        meters: Meters | None = None,
    ) -> None:
        self.flux = flux
        self.catalog = catalog
        self.options = options
        self.workers = workers
        self.clock = clock
        # Deadlines of calls in workers (a probe of many devices) are timed on it.
        self.monotonic = monotonic
        self._log = log or (lambda level, msg: None)
        # What the site's monitoring hears of (``[quantum.metrics]``; none by default).
        self.meters: Meters = meters or NoMeters()
        self._vendors: dict[str, Vendor] = {
            name: self.meters.vendor(name, vendor) for name, vendor in (vendors or {}).items()
        }
        # Credentials stay with their owner. The instance owner's service acts on its
        # own jobs and on guests' jobs paid by the site's accounts; a guest's own
        # service (not the instance owner's) only on that guest's qpu.account=user jobs.
        self.userid = os.getuid() if userid is None else userid
        self.instance_owner = instance_owner
        # The supervisor module released jobs read their tasks through (taskread);
        # None: this service answers no such read (a guest's own service).
        self.module_name = module_name if instance_owner else None
        self.estimator = DrainEstimator()
        self.schedule = options.schedule()
        # The one retry policy of every loop that calls a vendor, Flux or the ledger.
        self.retry: RetryPolicy = options.retry_policy()
        self.units = Units()
        self.counters = Counters()
        self.cluster: ClusterView | None = None
        self._rescan = False  # something changed under us: list held jobs at once
        self.last_error: str | None = None
        # The latest probe of each device (a vendor without positions is estimated from it).
        self.device_snapshots: dict[str, DeviceSnapshot] = {}

    @property
    def rescan_requested(self) -> bool:
        return self._rescan

    def request_rescan(self) -> None:
        """Something changed under us (a job left, a call found it gone): list the held
        jobs at the next tick."""
        self._rescan = True

    def rescanning(self) -> None:
        """A scan starts: the request is served."""
        self._rescan = False

    def note_error(self, text: str) -> None:
        """The last unexpected error, for ``status``."""
        self.last_error = text

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
            vendor = self._vendors[name] = self.meters.vendor(name, vendor)
        return vendor

    def active_units(self) -> list[Unit]:
        return self.units.active()

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
                self._rescan = True
                continue
            posted += 1
            index, attempt = getattr(record, "index", None), getattr(record, "attempt", None)
            if isinstance(index, int) and isinstance(attempt, int):
                member.facts.add((record.name, index, attempt))
        return posted

    def post_all(self, unit: Unit, record: events.QpuEvent) -> int:
        """Post one event on every job of the unit; returns how many took it."""
        return self.post_many([(member, record) for member in list(unit.jobs.values())])
