"""When a tracked task has its held jobs released: the one entry point of the rule.

The service gathers what it knows of one tracked task at one moment into
``ReleaseFacts``, and ``decide_release`` answers with a ``ReleaseDecision``: release now
or not, and why; the expected wait and the estimated place the jobs' memo shows; and,
after a poll, when to poll again (``poller``). The rules it puts together, in this order
(the first that releases says why):

1. at a poll, the release point (``release_point``): a task whose vendor gives its queue
   position is judged by its position or state against ``qpu.release_at``
   (``positioned_release``); one whose vendor gives none (IBM) by its place estimated
   from the device's pending counts (``unpositioned_release``, with ``predict``'s
   start-up);
2. the early release by time (``lead_release``): the job's cores take at least as long
   to free up as the task takes to reach its release point (the classical lead), or,
   with ``release_at=predict``, the result comes before released jobs would start;
3. a loop's step that carries its loop's time weight (``step_plan.node_lead_release``):
   released once its result is no farther than the forecast wait for its nodes, so that
   they arrive with the result.

Between polls (``ReleaseFacts.poll`` None) nothing new is known of the task: its standing
is the last poll's, and only the leads, which time moves, are looked at again. Every
figure comes in with the facts, in seconds on one clock. This module decides only: it
never calls a vendor or Flux, never sleeps, never reads the clock and never releases
anything (``flux_quantum.service.release`` gathers the facts and acts on the answer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from flux_quantum.timing.node_wait import NodeWait
from flux_quantum.timing.poller import (
    Pace,
    PollSchedule,
    positioned_poll_interval,
    unpositioned_poll,
)
from flux_quantum.timing.release_point import (
    Backlog,
    ReleaseDecision,
    lead_release,
    positioned_release,
    unpositioned_release,
)
from flux_quantum.timing.step_plan import node_lead_release
from flux_quantum.vendors.base import TaskSnapshot


@dataclass(frozen=True)
class Standing:
    """The task's way to its release point as last judged, at ``t`` (the time of the
    snapshot it was judged from): the seconds still to go (to the result with ``predict``
    and ``done``; None: unknown), and the estimated place of a task whose vendor gives
    none (IBM; the last estimate is kept once the task runs)."""

    t: float
    expected_wait: float | None = None
    estimated_position: int | None = None


@dataclass(frozen=True)
class PollFacts:
    """What a poll that just answered brings: the task's ``snapshot``, the device's
    ``pace``, when the task was first seen RUNNING, and, for a vendor that gives no queue
    positions, what its place is estimated from (``backlog``; None: the vendor gives
    positions). The next poll is planned on ``schedule``, and that of a task with an
    estimated place comes at least every ``recheck`` seconds (its estimate rests on the
    device's pending count, read again that often)."""

    snapshot: TaskSnapshot
    pace: Pace
    running_since: float | None = None
    backlog: Backlog | None = None
    schedule: PollSchedule = PollSchedule()
    recheck: float = math.inf


@dataclass(frozen=True)
class StepLead:
    """A loop's step waiting for its result: the loop's time weight and the forecast
    wait for the step's nodes (at the weight's quantile, ``step_plan.lead_quantile``)."""

    weight: float
    node_wait: NodeWait


@dataclass(frozen=True)
class ReleaseFacts:
    """All the release rule looks at for one task at ``now``: the request's
    ``release_at``; the task's ``standing`` as last judged; what a ``poll`` just brought
    (None: between polls); ``startup``, the time released jobs take to start (counted with
    ``predict`` only); ``classical``, the seconds before the job's cores can free up (None:
    unknown), with running jobs trusted for ``limit_share`` of their time limits; and
    ``step``, a loop step's node lead (None: not a weighted step, or no view of the
    cluster's queue)."""

    release_at: int | str
    now: float
    standing: Standing
    poll: PollFacts | None = None
    startup: float = 0.0
    classical: float | None = None
    limit_share: float = 1.0
    step: StepLead | None = None


def decide_release(facts: ReleaseFacts) -> ReleaseDecision:
    """Release now or not, and why; what the jobs show; when to poll next (after a
    poll). See the module's text for the rules and their order. Pure."""
    poll, standing = facts.poll, facts.standing
    next_poll: float | None = None
    waits = ""
    if poll is not None:
        point = _release_point(poll, facts.release_at, facts.startup)
        place = standing.estimated_position if poll.backlog is None else point.estimated_position
        standing = Standing(poll.snapshot.t, point.expected_wait, place)
        next_poll = _next_poll(poll, facts.release_at)
        if point.release:
            return replace(point, estimated_position=place, next_poll=next_poll)
        waits = f"{point.reason}; "
    lead = _lead(facts, standing)
    return ReleaseDecision(
        lead.release,
        lead.reason if lead.release else waits + lead.reason,
        lead.estimated,
        standing.expected_wait,
        standing.estimated_position,
        next_poll,
    )


def _release_point(poll: PollFacts, release_at: int | str, startup: float) -> ReleaseDecision:
    """Whether the polled task is at its release point: by its queue position, or by
    its place estimated from the backlog."""
    snap, drain = poll.snapshot, poll.pace.seconds_per_task
    if poll.backlog is None:
        return positioned_release(snap, release_at, drain, poll.running_since)
    return unpositioned_release(snap, release_at, poll.backlog.estimate(snap, drain), startup)


def _next_poll(poll: PollFacts, release_at: int | str) -> float:
    """The adaptive plan's delay before the next poll."""
    if poll.backlog is None:
        return positioned_poll_interval(poll.snapshot, release_at, poll.pace, poll.schedule)
    planned = unpositioned_poll(poll.snapshot, poll.backlog, release_at, poll.pace, poll.schedule)
    return min(planned, poll.schedule.max_interval, poll.recheck)


def _lead(facts: ReleaseFacts, standing: Standing) -> ReleaseDecision:
    """The early release by time: the classical lead or predict's start-up, then a
    loop step's node lead."""
    if standing.expected_wait is None:
        return ReleaseDecision(False, "no lead: the expected wait is unknown")
    waited = facts.now - standing.t
    lead = lead_release(
        facts.release_at,
        standing.expected_wait,
        waited,
        classical=facts.classical,
        startup=facts.startup,
        limit_share=facts.limit_share,
    )
    if lead.release or facts.step is None:
        return lead
    left = max(0.0, standing.expected_wait - waited)
    return node_lead_release(left, facts.step.node_wait, facts.step.weight)
