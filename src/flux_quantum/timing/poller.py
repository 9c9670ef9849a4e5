"""When to ask a vendor again about a queued task: adaptive poll intervals.

A held job is released when its task reaches its release point (the rule:
``flux_quantum.timing.release_point``). Polling every second costs one vendor call per
second per task; polling rarely releases late. This module owns the trade-off: the next
interval is a fraction of the earliest plausible time to the release point (tasks still to
be served before it, times the device's drain time per task, ``Pace``), clamped, and it
shrinks to ``min_interval`` once only the task now running stands between us and the
release point. A task whose vendor gives no queue position (IBM) is planned the same way
from its estimated place. The service plans through ``flux_quantum.timing.release``
(``decide_release`` answers with the next poll); ``AdaptivePoller`` is the same plan for
one task that learns the drain itself (the benchmarks' poller). It decides delays only:
it never decides a release, never calls a vendor, never sleeps and never reads a clock
(times come in with the snapshots).

Why the earliest plausible time: a queue position moves when a task ahead starts; the
task running now may end at any moment, so with ``d`` tasks to go at least ``d - 1``
whole service times remain. Polling again after ``safety`` of that (0.5: service times
may run at half their mean) lands before the release point unless the device suddenly
drains more than twice as fast as it did so far, so the release lag stays within the
``min_interval`` a fixed poll would give, at a small fraction of its calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from flux_quantum.catalog import Device
from flux_quantum.protocol.request import RELEASE_RUNNING
from flux_quantum.selection.policies import DrainEstimator
from flux_quantum.timing.release_point import (
    AT_END,
    Backlog,
    BacklogEstimate,
    release_reached,
    tasks_to_release,
)
from flux_quantum.vendors.base import TaskSnapshot


@dataclass(frozen=True)
class PollSchedule:
    """Bounds of the adaptive interval, in seconds.

    ``cold_max_interval`` caps the interval until the drain rate has been learned from
    at least one observed move of the task's position, so a wrong prior cannot make
    the first wait long.
    """

    min_interval: float = 1.0
    max_interval: float = 300.0
    cold_max_interval: float = 30.0
    safety: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.min_interval <= self.cold_max_interval <= self.max_interval:
            raise ValueError(
                "PollSchedule needs 0 < min_interval <= cold_max_interval <= max_interval"
            )
        if not 0 < self.safety <= 1:
            raise ValueError(f"PollSchedule.safety must be in (0, 1], got {self.safety}")


@dataclass(frozen=True)
class Pace:
    """A device's drain, in seconds per task, as the release rule and the poll plan read
    it (``DrainEstimator.estimate``): ``seconds_per_task`` judges the release (learned
    from position moves, else from pending counts, else the catalog or the prior);
    ``polling`` plans polls (position moves only, else the catalog or the prior),
    ``learned`` from moves or not; ``catalog``: the site's figure (None: it gives none).

    Polling early costs a call, polling late costs idle nodes: polls are planned with the
    faster of what was learned and what the site says. A device that stood still for a
    while (a window, maintenance) teaches a slow rate that would otherwise overshoot the
    release point once it moves again."""

    seconds_per_task: float
    polling: float
    learned: bool = False
    catalog: float | None = None

    @classmethod
    def of(cls, estimator: DrainEstimator, device: Device) -> Pace:
        """What ``estimator`` says of ``device`` now."""
        polling = estimator.estimate(device, polling=True)
        configured = estimator.estimate(device, polling=True, learned=False)
        return cls(
            estimator.estimate(device).seconds_per_task,
            polling.seconds_per_task,
            learned=polling.source == "learned",
            catalog=configured.seconds_per_task if configured.source == "catalog" else None,
        )

    @property
    def positioned(self) -> float:
        """The pace polls of a task with a queue position are planned at."""
        return self.polling if self.catalog is None else min(self.polling, self.catalog)

    @property
    def unpositioned(self) -> float:
        """The pace polls of a task with an estimated place are planned at. The drain
        learned from pending counts is a lower bound of the pace (other users' jobs
        arrive as ours are served, so a saturated backend's count hardly falls): right
        for the place shown and the release, but polls planned with it come late, up to
        ``max_interval`` after a short run that is never seen RUNNING."""
        return min(self.seconds_per_task, self.polling)


def next_poll_interval(
    snapshot: TaskSnapshot,
    release_at: int | str,
    seconds_per_task: float | None,
    schedule: PollSchedule = PollSchedule(),
    learned: bool = True,
) -> float:
    """Seconds to wait before polling ``snapshot``'s task again (0: release now)."""
    remaining = tasks_to_release(snapshot, release_at)
    if remaining == 0:
        return 0.0
    if remaining is None or seconds_per_task is None:
        return schedule.min_interval  # nothing to predict from: behave like a fixed poll
    earliest = (remaining - 1) * seconds_per_task  # the running task may end right away
    ceiling = schedule.max_interval if learned else schedule.cold_max_interval
    return min(ceiling, max(schedule.min_interval, schedule.safety * earliest))


def positioned_poll_interval(
    snapshot: TaskSnapshot,
    release_at: int | str,
    pace: Pace,
    schedule: PollSchedule = PollSchedule(),
) -> float:
    """Seconds before polling again a task whose vendor gives its queue position, at
    the device's ``pace`` (capped until the drain was learned from moves)."""
    return next_poll_interval(snapshot, release_at, pace.positioned, schedule, pace.learned)


class AdaptivePoller:
    """Plans the polls of one task: feed each snapshot, get the delay to the next poll.

    Learns the device's drain rate from the task's own position moves through the
    shared ``DrainEstimator`` (so tasks on one device teach each other).
    """

    def __init__(
        self,
        device: Device,
        release_at: int | str = 1,
        *,
        estimator: DrainEstimator | None = None,
        schedule: PollSchedule = PollSchedule(),
    ) -> None:
        self.device = device
        self.release_at = release_at
        self.estimator = estimator or DrainEstimator()
        self.schedule = schedule

    def observe(self, snapshot: TaskSnapshot) -> float:
        """Record ``snapshot`` and return the seconds to wait before the next poll."""
        self.estimator.observe_position(
            self.device.name,
            snapshot.task.task_id,
            snapshot.position,
            snapshot.t,
            capped=snapshot.position_capped,
        )
        if release_reached(snapshot, self.release_at):
            self.estimator.forget_task(self.device.name, snapshot.task.task_id)
            return 0.0
        pace = Pace.of(self.estimator, self.device)
        return positioned_poll_interval(snapshot, self.release_at, pace, self.schedule)

    def observe_unpositioned(self, snapshot: TaskSnapshot, backlog: Backlog) -> float:
        """The seconds to wait before polling again a queued task whose vendor gives no
        queue position: planned from its place estimated from ``backlog``."""
        pace = Pace.of(self.estimator, self.device)
        return unpositioned_poll(snapshot, backlog, self.release_at, pace, self.schedule)


class FixedPoller:
    """The baseline: poll every ``interval`` seconds until the release point."""

    def __init__(self, interval: float = 1.0, release_at: int | str = 1) -> None:
        self.interval = interval
        self.release_at = release_at

    def observe(self, snapshot: TaskSnapshot) -> float:
        return 0.0 if release_reached(snapshot, self.release_at) else self.interval


# --- a task without a queue position (IBM): planned from its estimated place ----------


def unpositioned_poll_interval(
    estimate: BacklogEstimate,
    release_at: int | str,
    seconds_per_task: float,
    schedule: PollSchedule = PollSchedule(),
) -> float:
    """Seconds before polling again a task whose place is estimated: the same shape as
    ``next_poll_interval`` (a fraction of the earliest plausible time to the release
    point), counted from the estimate; the minimum when nothing is known."""
    if estimate.position is None:
        return schedule.min_interval
    if release_at in AT_END:
        remaining = estimate.position + 1
    elif release_at == RELEASE_RUNNING:
        remaining = estimate.position
    else:
        remaining = max(0, estimate.position - int(release_at))
    earliest = max(0, remaining - 1) * seconds_per_task
    return min(schedule.max_interval, max(schedule.min_interval, schedule.safety * earliest))


def unpositioned_poll(
    snapshot: TaskSnapshot,
    backlog: Backlog,
    release_at: int | str,
    pace: Pace,
    schedule: PollSchedule = PollSchedule(),
) -> float:
    """Seconds before polling again a queued task with no vendor-given position: its
    place estimated from ``backlog`` at the device's pace for polls
    (``Pace.unpositioned``), then ``unpositioned_poll_interval``."""
    seconds = pace.unpositioned
    planned = backlog.estimate(snapshot, seconds)
    return unpositioned_poll_interval(planned, release_at, seconds, schedule)
