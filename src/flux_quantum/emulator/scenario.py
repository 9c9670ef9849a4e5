"""What every vendor side's scenario describes alike: a device's queue, price and downtime.

This module owns the immutable pieces the Braket (``braket.scenario``), IBM, IQM and Pasqal
scenarios share: ``ScenarioError`` (every mistake in any scenario), a device's background
load (``QueueSpec``), price (``Cost``), availability windows and offline periods, the fields
and call selection every side's fault has (``BaseFault``), and ``DeviceQueueSpec``, a
device as the shared queue model (``queue.DeviceQueue``) is built from on a side whose
devices are not Braket's. It must never know a vendor's fields, routes or defaults (those
are each side's ``scenario``), and never touch the network, a clock or emulator state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flux_quantum.errors import FluxQuantumError

DISTRIBUTIONS = ("fixed", "exponential", "uniform")


class ScenarioError(FluxQuantumError, ValueError):
    """A scenario file or dict is invalid; the message names the file, device and field."""


@dataclass(frozen=True)
class Cost:
    """A device's price: ``price`` dollars per ``unit``, plus ``task_price`` per task (QPUs)."""

    price: float
    unit: str
    task_price: float = 0.0


@dataclass(frozen=True)
class QueueSpec:
    """Background load of one device, as a FIFO single-server queue.

    ``depth`` tasks are waiting at t=0 while one more is already running (when depth > 0);
    background tasks arrive as a Poisson process of ``arrival_rate`` tasks/s; every task (ours
    too) is served for ``service_time`` seconds drawn from ``distribution`` (seeded), plus
    ``shot_time`` seconds per shot for our tasks.
    """

    depth: int = 0
    arrival_rate: float = 0.0
    service_time: float = 1.0
    distribution: str = "fixed"
    shot_time: float = 0.0
    cancel_latency: float = 0.0


@dataclass(frozen=True)
class Availability:
    """Windows ``[start, end)`` in emulated seconds, repeating every ``period`` (0 = once)."""

    windows: tuple[tuple[float, float], ...]
    period: float = 0.0


@dataclass(frozen=True)
class OfflinePeriod:
    """The device is OFFLINE with ``reason`` during ``[start, end)``; creates fail with
    DeviceOfflineException unless ``accept_tasks`` (then they queue until it is back)."""

    start: float
    end: float
    reason: str = "MAINTENANCE"
    accept_tasks: bool = False


@dataclass(frozen=True)
class BaseFault:
    """What an injected fault of every vendor side has: the operations it hits (none: all),
    its vendor-neutral effects and which of the matching calls it selects.

    ``message`` replaces the error's text; ``delay`` answers after that many real seconds;
    ``reset`` closes the connection without an answer; ``after_commit`` applies the call
    first. Selection counts the matching calls (1-based): ``calls`` lists them, ``first``
    takes the first N, ``after`` those after the Nth, ``every`` each Nth, ``rate`` a seeded
    fraction (the call's draw below it); ``start``/``end`` bound emulated time. A side whose
    scenario does not read a field leaves it at its default (no effect, every call).
    """

    operations: tuple[str, ...] = ()
    message: str | None = None
    delay: float = 0.0
    reset: bool = False
    after_commit: bool = False
    calls: tuple[int, ...] = ()
    first: int | None = None
    after: int | None = None
    every: int | None = None
    rate: float | None = None
    start: float | None = None
    end: float | None = None

    def selects(self, n: int, now: float, draw: float = 0.0) -> bool:
        """Whether the ``n``-th matching call (1-based), at emulated time ``now``, is hit;
        ``draw`` is the call's seeded uniform draw in [0, 1), compared with ``rate``."""
        if self.start is not None and now < self.start:
            return False
        if self.end is not None and now >= self.end:
            return False
        rules = (
            not self.calls or n in self.calls,
            self.first is None or n <= self.first,
            self.after is None or n > self.after,
            self.every is None or n % self.every == 0,
            self.rate is None or draw < self.rate,
        )
        return all(rules)


@dataclass(frozen=True)
class JobFault(BaseFault):
    """A fault of a job-API side (``side.JobSide``): an HTTP error answered in the vendor's
    shape (``status``), a delay, a reset connection, or a job created that later fails
    with ``fail_job``; on the calls for one ``device`` (None: any)."""

    device: str | None = None
    status: int | None = None
    fail_job: str | None = None


@dataclass(frozen=True)
class DeviceQueueSpec:
    """A device as the shared queue model reads it (``queue.QueuedDevice``) on the IBM, IQM
    and Pasqal sides: its key (``arn``: seeds the queue's draws), name, background load,
    status and the periods it starts no work. Braket's ``DeviceSpec`` has these fields itself.
    """

    arn: str
    name: str
    queue: QueueSpec
    status: str = "ONLINE"
    status_reason: str | None = None
    availability: Availability | None = None
    offline: tuple[OfflinePeriod, ...] = ()

    @classmethod
    def waiting_during(
        cls,
        key: str,
        name: str,
        queue: QueueSpec,
        periods: Sequence[tuple[float, float]],
        down: bool = False,
    ) -> DeviceQueueSpec:
        """A device that starts no work during ``periods`` (``[start, end)``; work sent then
        waits), or none at all when ``down`` (offline for maintenance the whole run)."""
        return cls(
            arn=key,
            name=name,
            queue=queue,
            status="OFFLINE" if down else "ONLINE",
            status_reason="MAINTENANCE" if down else None,
            offline=tuple(
                OfflinePeriod(start, end, "MAINTENANCE", accept_tasks=True)
                for start, end in periods
            ),
        )
