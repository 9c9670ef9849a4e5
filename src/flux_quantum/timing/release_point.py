"""The release rule: whether a quantum task is at its release point, and why.

A held job is released when its task reaches the release point its request names
(``qpu.release_at``): a queue position (``N``: released at position <= N, or RUNNING), the
task RUNNING (``running``), or the task ended (``done``; ``predict``: the same, but the
service releases earlier by time, when the expected wait for the result falls below the
jobs' start-up time). It may also be released before that when waiting longer would waste
nothing: the job's cores will take at least as long to free up as the task takes to reach
its release point (the classical lead). For a vendor that gives no queue position (IBM)
the place is estimated from the device's pending count (``estimate_backlog``). This module
decides only: the facts come in (a snapshot, the drain, the estimates, the start-up and
the classical wait, each in seconds on one clock), a ``ReleaseDecision`` with its
explanation goes out. ``flux_quantum.timing.release`` puts these rules together into the
one decision the service asks for. It never calls a vendor, never reads a clock and never
releases anything (``flux_quantum.service.release`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from flux_quantum.protocol.request import RELEASE_DONE, RELEASE_PREDICT, RELEASE_RUNNING
from flux_quantum.vendors.base import TaskSnapshot, TaskState

AT_END = (RELEASE_PREDICT, RELEASE_DONE)  # release points at the task's end
_WAITING = (TaskState.CREATED, TaskState.QUEUED)


@dataclass(frozen=True)
class ReleaseDecision:
    """Whether the task is at its release point (``release``), and why (``reason``).

    ``expected_wait``: the seconds until the release point (with ``predict`` and ``done``,
    until the result) as this decision saw them; None when unknown. ``estimated_position``:
    the estimated place of a task with no vendor-given position. ``estimated``: the
    decision rests on an estimate, not on the task's state. ``next_poll``: after a poll,
    the seconds before the next one as the adaptive plan has it (``decide_release``);
    None when the decision planned no poll.
    """

    release: bool
    reason: str
    estimated: bool = False
    expected_wait: float | None = None
    estimated_position: int | None = None
    next_poll: float | None = None


# --- a task with a vendor-given queue position ----------------------------------------------


def release_reached(snapshot: TaskSnapshot, release_at: int | str) -> bool:
    """Whether the task is at its release point (or past it: running or finished)."""
    if release_at in AT_END:
        return snapshot.state not in (*_WAITING, TaskState.RUNNING)
    if snapshot.state not in _WAITING:
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
    if release_at in AT_END:
        if snapshot.state is TaskState.RUNNING:
            return 1
        return None if snapshot.position is None else snapshot.position + 1
    if snapshot.position is None:
        return None
    target = 0 if release_at == RELEASE_RUNNING else int(release_at)
    return max(0, snapshot.position - target)


def positioned_release(
    snapshot: TaskSnapshot,
    release_at: int | str,
    seconds_per_task: float,
    running_since: float | None = None,
) -> ReleaseDecision:
    """Apply ``release_at`` to a task whose vendor gives its queue position; the expected
    wait is the tasks still to start before the release point times the device's drain
    (``seconds_per_task``). A task RUNNING since ``running_since`` (first seen so) whose
    release point is its end has what is left of one service time to go."""
    remaining = tasks_to_release(snapshot, release_at)
    wait = None if remaining is None else remaining * seconds_per_task
    state = snapshot.state
    if state is TaskState.RUNNING and release_at in AT_END:
        since = snapshot.t if running_since is None else running_since
        wait = max(0.0, seconds_per_task - (snapshot.t - since))
    if release_reached(snapshot, release_at):
        where = (
            state.value
            if state not in _WAITING
            else f"position {snapshot.position} <= release_at {release_at}"
        )
        return ReleaseDecision(True, where, expected_wait=wait)
    if state not in _WAITING or release_at == RELEASE_RUNNING or release_at in AT_END:
        why = f"task is {state.value}; release_at={release_at} waits"
    else:
        shown = "unknown" if snapshot.position is None else str(snapshot.position)
        if snapshot.position_capped:
            shown = f">{shown}"
        why = f"position {shown} > release_at {release_at}"
    return ReleaseDecision(False, why, expected_wait=wait)


# --- released early by time -------------------------------------------------------------------


def lead_release(
    release_at: int | str,
    expected_wait: float,
    waited: float,
    *,
    classical: float | None,
    startup: float,
    limit_share: float = 1.0,
) -> ReleaseDecision:
    """Release before the release point when waiting longer would waste nothing.

    ``expected_wait`` was estimated ``waited`` seconds ago; ``classical``: the seconds
    before the job's cores can free up (None: unknown), with running jobs assumed to run
    ``limit_share`` of their time limits; ``startup``: the time released jobs take to
    start, used with ``release_at=predict`` only. Released when the task reaches its
    release point no later than the cores free up, or, with ``predict``, when the result
    comes no later than the jobs would start."""
    startup = startup if release_at == RELEASE_PREDICT else 0.0
    if not classical and not startup:
        return ReleaseDecision(False, "no lead: the cores are free or their wait is unknown")
    vendor = max(0.0, expected_wait - waited)
    if classical and vendor <= classical:
        return ReleaseDecision(
            True,
            f"classical lead: expected queue wait {vendor:.0f}s <= {classical:.0f}s "
            f"before the job's cores can free up (running jobs run >= {limit_share:.0%} "
            "of their time limits)",
            estimated=True,
        )
    if startup and vendor <= startup:
        return ReleaseDecision(
            True,
            f"predicted: expected wait for the result {vendor:.2f}s <= job start-up {startup:.2f}s",
            estimated=True,
        )
    return ReleaseDecision(False, f"expected wait {vendor:.0f}s is longer than the lead")


# --- a task without a queue position (IBM) ----------------------------------------------------
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
    if snapshot.state not in _WAITING:
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
class Backlog:
    """What the place of a task with no vendor-given position is estimated from: the
    backend's pending count seen just before its create (``ahead_at_create``), when it
    was created, and the pending count of the latest probe (None: none since the create)."""

    ahead_at_create: int | None
    created_t: float
    pending_now: int | None

    def estimate(self, snapshot: TaskSnapshot, seconds_per_task: float) -> BacklogEstimate:
        """The task's place at ``seconds_per_task`` (``estimate_backlog``)."""
        return estimate_backlog(
            snapshot,
            ahead_at_create=self.ahead_at_create,
            created_t=self.created_t,
            pending_now=self.pending_now,
            seconds_per_task=seconds_per_task,
        )


def unpositioned_release(
    snapshot: TaskSnapshot,
    release_at: int | str,
    estimate: BacklogEstimate,
    startup: float = 0.0,
) -> ReleaseDecision:
    """Apply ``release_at`` to a task whose place is only estimated (see above; pure);
    ``startup`` counts with ``predict`` only. The expected wait is the estimate's: until
    the result with ``predict`` and ``done``, until the start otherwise."""
    release, reason, estimated = _unpositioned(snapshot, release_at, estimate, startup)
    wait = estimate.result_wait if release_at in AT_END else estimate.wait
    return ReleaseDecision(release, reason, estimated, wait, estimate.position)


def _unpositioned(
    snapshot: TaskSnapshot, release_at: int | str, estimate: BacklogEstimate, startup: float
) -> tuple[bool, str, bool]:
    state = snapshot.state
    if state not in (*_WAITING, TaskState.RUNNING):
        return True, f"task is {state.value}", False
    if release_at == RELEASE_DONE:
        return False, f"task is {state.value}; release_at=done waits", False
    if release_at == RELEASE_PREDICT:
        left = estimate.result_wait
        if left is not None and left <= startup:
            why = (
                f"predicted: expected wait for the result {left:.1f}s <= job start-up "
                f"{startup:.1f}s ({estimate.why})"
            )
            return True, why, True
        shown = "unknown" if left is None else f"{left:.1f}s"
        return False, f"expected wait for the result {shown}", False
    if state is TaskState.RUNNING:
        return True, "task is RUNNING", False
    if release_at == RELEASE_RUNNING:
        return False, f"task is {state.value}; release_at=running waits", False
    target = int(release_at)
    if estimate.position is not None and estimate.position <= target:
        why = f"estimated position {estimate.position} <= release_at {target} ({estimate.why})"
        return True, why, True
    shown = "unknown" if estimate.position is None else str(estimate.position)
    return False, f"estimated position {shown} > release_at {target}", False
