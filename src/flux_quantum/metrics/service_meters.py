"""``ServiceMeters``: the handler service's hooks (the shape of
``flux_quantum.service.meters.Meters``, which the service checks) when metrics are on.

On the reactor thread it counts what only a moment knows: tasks that ended and why, the
release lag of released jobs (from the moment their task reached its release point to
their release) and how long jobs were held; and every ``interval`` seconds it takes a
``ServiceSnapshot`` of the service's state and publishes it for the exporter's threads
by replacing one reference (never a record another thread is reading). Between two
snapshots it adds the nodes and cores the held jobs ask for times the time passed: the
node-seconds held jobs waited, measured. Vendor calls are wrapped by ``VendorCalls``.
It never blocks, never calls Flux or a vendor, and labels nothing with a job, a task or
a user.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from flux_quantum.metrics.snapshot import ServiceSnapshot, take_snapshot
from flux_quantum.metrics.vendor_calls import VendorCalls
from flux_quantum.vendors.base import Vendor

# Release lag: the service's reaction after a poll saw the release point, tens of
# milliseconds, seconds when it waits for a unit's other tasks.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Holds: seconds to days.
HOLD_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)
SNAPSHOT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


class ServiceMeters:
    """The metrics the service's parts feed, and the snapshot they publish."""

    def __init__(
        self,
        registry: CollectorRegistry,
        interval: float,
        *,
        clock: Callable[[], float] = time.time,
        thread_time: Callable[[], float] = time.thread_time,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._thread_time = thread_time
        self.latest: ServiceSnapshot | None = None  # replaced whole, read by other threads
        self._due = 0.0
        self.vendor_calls = VendorCalls(registry, clock)
        self.tasks_ended = Counter(
            "flux_qpu_tasks_ended",
            "Vendor tasks the service stopped tracking, by outcome: released (its jobs "
            "were), task_failed, device_unavailable, max_wait (a fail-over or the job's "
            "failure), cancelled (its jobs failed or left).",
            ("vendor", "device", "outcome"),
            registry=registry,
        )
        self.release_lag = Histogram(
            "flux_qpu_release_lag_seconds",
            "Released jobs: from the poll that saw their task at its release point to "
            "their release.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.held = Histogram(
            "flux_qpu_hold_duration_seconds",
            "Jobs that left the service: how long they were held (from when their unit's "
            "task could be created: its submission, or its other dependencies' end), by "
            "outcome.",
            ("outcome",),
            buckets=HOLD_BUCKETS,
            registry=registry,
        )
        self.snapshot_cost = Histogram(
            "flux_qpu_metrics_snapshot_duration_seconds",
            "CPU time the service's reactor spent taking a metrics snapshot.",
            buckets=SNAPSHOT_BUCKETS,
            registry=registry,
        )

    # -- the hooks (reactor thread)

    def vendor(self, name: str, vendor: Vendor) -> Vendor:
        return self.vendor_calls.wrap(name, vendor)

    def task_ended(self, attempt: Any, outcome: str) -> None:
        device = attempt.device
        if device is None or attempt.task is None:
            return
        label = outcome.removeprefix("qpu-").replace("-", "_")
        self.tasks_ended.labels(device.vendor, device.name, label).inc()

    def unit_ended(self, unit: Any, state: Any) -> None:
        """``unit`` ended in ``state`` (``UnitState``: released, failed, abandoned)."""
        released = state == "released"
        for attempt in unit.attempts():
            device = attempt.device
            if device is None or attempt.task is None:
                continue
            if released:
                self.tasks_ended.labels(device.vendor, device.name, "released").inc()
            elif attempt.live_task() is not None:
                self.tasks_ended.labels(device.vendor, device.name, "cancelled").inc()
        now = unit.released_at
        jobs = len(unit.released_jobs) if released else len(unit.jobs)
        if released and now is not None:
            ready = [a.ready_at for a in unit.attempts() if a.ready_at is not None]
            if ready:
                lag = max(0.0, now - max(ready))
                for _ in range(jobs):
                    self.release_lag.observe(lag)
        end = now if now is not None else self._clock()
        for _ in range(jobs):
            self.held.labels(state.value).observe(max(0.0, end - unit.ready_at))

    def tick(self, service: Any, now: float) -> None:
        """Every ``interval``: a snapshot of the service, published for the exporter,
        with the node- and core-seconds held since the last one added."""
        if now < self._due:
            return
        self._due = now + self.interval
        t0 = self._thread_time()
        snapshot = take_snapshot(service, now)
        previous = self.latest
        if previous is not None:
            dt = max(0.0, now - previous.t)
            snapshot = dataclasses.replace(
                snapshot,
                node_seconds=previous.node_seconds + previous.held_nodes * dt,
                core_seconds=previous.core_seconds + previous.held_cores * dt,
            )
        cost = self._thread_time() - t0
        self.snapshot_cost.observe(cost)
        self.latest = dataclasses.replace(snapshot, build_seconds=cost)
