"""When to ask a vendor again about a queued task: adaptive poll intervals.

A held job is released when its task reaches the release point (queue position <=
``release_at``, or RUNNING; ``done``: when the task has ended, so its result is there
when the job starts; ``predict``: the same, but the service releases earlier by time,
when the expected wait for the result falls below the jobs' start-up time). Polling every second costs one vendor call per second per
task; polling rarely releases late. This module owns the trade-off: the next interval
is a fraction of the earliest plausible time to the release point (tasks still to be
served before it, times the learned drain time per task), clamped, and it shrinks to
``min_interval`` once only the task now running stands between us and the release
point. It decides delays only: it never calls a vendor, never sleeps and never reads a
clock (times come in with the snapshots).

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
from flux_quantum.selection.policies import DrainEstimator
from flux_quantum.vendors.base import TaskSnapshot, TaskState

RELEASE_RUNNING = "running"
RELEASE_PREDICT = "predict"
RELEASE_DONE = "done"
_AT_END = (RELEASE_PREDICT, RELEASE_DONE)


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


def release_reached(snapshot: TaskSnapshot, release_at: int | str) -> bool:
    """Whether the task is at its release point (or past it: running or finished)."""
    if release_at in _AT_END:
        return snapshot.state not in (TaskState.CREATED, TaskState.QUEUED, TaskState.RUNNING)
    if snapshot.state not in (TaskState.CREATED, TaskState.QUEUED):
        return True
    if release_at == RELEASE_RUNNING or snapshot.position is None:
        return False
    return not snapshot.position_capped and snapshot.position <= int(release_at)


def tasks_to_release(snapshot: TaskSnapshot, release_at: int | str) -> int | None:
    """Tasks that must start before the release point; None when the position is unknown.

    With Braket's positions (1 = next to run) a task at position ``p`` is released at
    ``release_at`` after ``p - release_at`` starts, or when RUNNING after ``p``.
    A capped position (``>2000``) counts as its lower bound. With ``predict`` the task's
    own run counts too (its end is what the jobs wait for): 1 while it runs. So with
    ``done``.
    """
    if release_reached(snapshot, release_at):
        return 0
    if release_at in _AT_END:
        if snapshot.state is TaskState.RUNNING:
            return 1
        return None if snapshot.position is None else snapshot.position + 1
    if snapshot.position is None:
        return None
    target = 0 if release_at == RELEASE_RUNNING else int(release_at)
    return max(0, snapshot.position - target)


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
        drain = self.estimator.estimate(self.device, polling=True)
        seconds = drain.seconds_per_task
        configured = self.estimator.estimate(self.device, polling=True, learned=False)
        if configured.source == "catalog":
            # Polling early costs a call, polling late costs idle nodes: plan with the
            # faster of what was learned and what the site says. A device that stood
            # still for a while (a window, maintenance) teaches a slow rate that
            # would otherwise overshoot the release point once it moves again.
            seconds = min(seconds, configured.seconds_per_task)
        return next_poll_interval(
            snapshot,
            self.release_at,
            seconds,
            self.schedule,
            learned=drain.source == "learned",
        )


class FixedPoller:
    """The baseline: poll every ``interval`` seconds until the release point."""

    def __init__(self, interval: float = 1.0, release_at: int | str = 1) -> None:
        self.interval = interval
        self.release_at = release_at

    def observe(self, snapshot: TaskSnapshot) -> float:
        return 0.0 if release_reached(snapshot, self.release_at) else self.interval


# --- release without a queue position (IBM) ----------------------------------------------
#
# IBM reports a backend's pending jobs but never a job's place among them. The service
# records how many jobs were pending on the backend when it created the task (``ahead``:
# they were there first) and keeps probing the backend; the decider below turns that, the
# time since the create and the learned drain (seconds per job) into an estimated place,
# and applies each ``release_at``:
#
# - ``N`` (an integer): released once the task RUNS or ends (exact), or once its estimated
#   place is <= N (estimated: ``ahead`` minus the jobs the drain rate says were served
#   since the create, never more than the backend's pending jobs now minus ours).
# - ``running``: released once the task RUNS or ends; no estimate is used.
# - ``predict``: released once the estimated wait for the result (jobs ahead plus our own
#   run, times the drain) is <= the jobs' start-up time, or once the task has ended.
# - ``done``: released once the task has ended; no estimate is used.
#
# The estimate assumes jobs ahead are served first. IBM's scheduler is fair-share across
# instances, so a busy instance's job may wait longer than its place says; the service's
# ``predict`` and ``N`` releases are therefore early by at most that error, ``running`` and
# ``done`` never are.


@dataclass(frozen=True)
class BacklogEstimate:
    """Where a task with no vendor-given position stands, estimated.

    ``ahead``: jobs still ahead of it (None: nothing to estimate from); ``position``:
    ``ahead`` rounded down plus one (1 = next to run); ``wait``: seconds until it starts;
    ``result_wait``: seconds until its result; ``why`` says how, for the eventlog.
    """

    ahead: float | None
    position: int | None
    wait: float | None
    result_wait: float | None
    why: str


def estimate_backlog(
    snapshot: TaskSnapshot,
    *,
    ahead_at_create: int | None,
    created_t: float,
    pending_now: int | None,
    seconds_per_task: float,
) -> BacklogEstimate:
    """Estimate ``snapshot``'s place from its backend's pending jobs (pure).

    ``ahead_at_create`` is the backend's pending count seen just before the create,
    ``pending_now`` its count now (ours included while it is queued); ``created_t`` and
    ``snapshot.t`` are on one clock.
    """
    if seconds_per_task <= 0:
        raise ValueError(f"seconds_per_task must be > 0, got {seconds_per_task}")
    if snapshot.state not in (TaskState.CREATED, TaskState.QUEUED):
        running = snapshot.state is TaskState.RUNNING
        left = seconds_per_task if running else 0.0
        return BacklogEstimate(0.0, None, 0.0, left, f"task is {snapshot.state.value}")
    served = max(0.0, snapshot.t - created_t) / seconds_per_task
    ahead = None if ahead_at_create is None else max(0.0, ahead_at_create - served)
    why = (
        f"{ahead_at_create} pending at create - {served:.1f} served since "
        f"({seconds_per_task:g}s per job)"
        if ahead_at_create is not None
        else ""
    )
    if pending_now is not None:
        bound = float(max(0, pending_now - 1))  # the pending count includes our job
        if ahead is None or bound < ahead:
            ahead = bound
            why = f"{pending_now} pending now, ours among them"
    if ahead is None:
        return BacklogEstimate(None, None, None, None, "no pending count to estimate from")
    wait = ahead * seconds_per_task
    return BacklogEstimate(
        ahead, int(ahead) + 1, wait, wait + seconds_per_task, f"~{ahead:.1f} ahead: {why}"
    )


@dataclass(frozen=True)
class UnpositionedRelease:
    """The release decision for a task with no vendor-given position, and why."""

    release: bool
    reason: str
    estimated: bool = False  # the decision rests on the estimate, not on the task's state


def unpositioned_release(
    snapshot: TaskSnapshot,
    release_at: int | str,
    estimate: BacklogEstimate,
    startup: float = 0.0,
) -> UnpositionedRelease:
    """Apply ``release_at`` to a task whose place is only estimated (see above; pure)."""
    state = snapshot.state
    ended = state not in (TaskState.CREATED, TaskState.QUEUED, TaskState.RUNNING)
    if ended:
        return UnpositionedRelease(True, f"task is {state.value}")
    if release_at == RELEASE_DONE:
        return UnpositionedRelease(False, f"task is {state.value}; release_at=done waits")
    if release_at == RELEASE_PREDICT:
        left = estimate.result_wait
        if left is not None and left <= startup:
            return UnpositionedRelease(
                True,
                f"predicted: expected wait for the result {left:.1f}s <= job start-up "
                f"{startup:.1f}s ({estimate.why})",
                estimated=True,
            )
        shown = "unknown" if left is None else f"{left:.1f}s"
        return UnpositionedRelease(False, f"expected wait for the result {shown}")
    if state is TaskState.RUNNING:
        return UnpositionedRelease(True, "task is RUNNING")
    if release_at == RELEASE_RUNNING:
        return UnpositionedRelease(False, f"task is {state.value}; release_at=running waits")
    target = int(release_at)
    if estimate.position is not None and estimate.position <= target:
        return UnpositionedRelease(
            True,
            f"estimated position {estimate.position} <= release_at {target} ({estimate.why})",
            estimated=True,
        )
    shown = "unknown" if estimate.position is None else str(estimate.position)
    return UnpositionedRelease(False, f"estimated position {shown} > release_at {target}")


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
    if release_at in _AT_END:
        remaining = estimate.position + 1
    elif release_at == RELEASE_RUNNING:
        remaining = estimate.position
    else:
        remaining = max(0, estimate.position - int(release_at))
    earliest = max(0, remaining - 1) * seconds_per_task
    return min(schedule.max_interval, max(schedule.min_interval, schedule.safety * earliest))
