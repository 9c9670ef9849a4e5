"""The one entry point of the release rule (``flux_quantum.timing.decide_release``): the
facts of one task in, the decision with its reason out, the rules in their order (the
release point, then the classical lead or predict's start-up, then a loop step's node
lead), a poll's plan for the next one, and between polls the last standing. Pure: no
vendor, no clock. The rules alone: test_release_point.py, test_ibm_release.py,
test_poller.py, test_step_plan.py."""

from __future__ import annotations

import pytest

from flux_quantum.timing import (
    Backlog,
    NodeWait,
    Pace,
    PollFacts,
    PollSchedule,
    ReleaseFacts,
    Standing,
    StepLead,
    decide_release,
)
from flux_quantum.timing.poller import next_poll_interval
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState

TASK = TaskRef("local", "qpu", "arn:aws:braket:us-east-1:1:quantum-task/a")
SCHEDULE = PollSchedule(min_interval=1, max_interval=300, cold_max_interval=30)
LEARNED = Pace(10.0, 10.0, learned=True)  # 10 s per task, learned from moves


def at(position, t=100.0, state=TaskState.QUEUED) -> TaskSnapshot:
    return TaskSnapshot(TASK, state, position, False, None, t)


def polled(snap: TaskSnapshot, now: float | None = None, **facts) -> ReleaseFacts:
    """The facts of a poll that just saw ``snap`` (a task with a queue position)."""
    poll = PollFacts(snap, facts.pop("pace", LEARNED), schedule=SCHEDULE, **facts.pop("poll", {}))
    standing = facts.pop("standing", Standing(0.0))
    return ReleaseFacts(
        facts.pop("release_at", 1), snap.t if now is None else now, standing, poll, **facts
    )


def test_a_task_at_its_release_point_is_released_and_says_where_it_is():
    decision = decide_release(polled(at(1)))
    assert decision.release and decision.reason == "position 1 <= release_at 1"
    assert decision.expected_wait == 0.0 and decision.next_poll == 0.0
    assert not decision.estimated


def test_a_queued_task_is_judged_and_its_next_poll_planned():
    decision = decide_release(polled(at(41)))
    assert not decision.release
    assert decision.expected_wait == pytest.approx(400.0)
    assert decision.next_poll == next_poll_interval(at(41), 1, 10.0, SCHEDULE)
    assert decision.reason.startswith("position 41 > release_at 1; no lead")
    # Not learned yet: the first waits are capped; a catalog figure faster than what
    # was learned plans the polls.
    cold = decide_release(polled(at(41), pace=Pace(10.0, 10.0)))
    assert cold.next_poll == 30
    catalog = decide_release(polled(at(41), pace=Pace(100.0, 100.0, True, catalog=10.0)))
    assert catalog.next_poll == pytest.approx(195.0)
    assert catalog.expected_wait == pytest.approx(4000.0)  # judged at the release's drain


def test_the_classical_lead_releases_at_a_poll_when_the_point_does_not():
    decision = decide_release(polled(at(8), classical=80.0, limit_share=0.5))
    assert decision.release and decision.estimated
    assert decision.reason.startswith("classical lead: expected queue wait 70s <= 80s")
    assert decision.expected_wait == pytest.approx(70.0)  # what the jobs' memo shows


def test_between_polls_the_last_standing_counts_down_to_the_lead():
    standing = Standing(100.0, expected_wait=70.0, estimated_position=4)
    early = ReleaseFacts(1, 105.0, standing, classical=60.0)
    decision = decide_release(early)
    assert not decision.release and decision.next_poll is None
    assert (decision.expected_wait, decision.estimated_position) == (70.0, 4)  # unchanged
    assert decision.reason == "expected wait 65s is longer than the lead"
    later = decide_release(ReleaseFacts(1, 111.0, standing, classical=60.0))
    assert later.release and "expected queue wait 59s <= 60s" in later.reason
    # Nothing to count down from: no lead at all.
    unknown = ReleaseFacts(1, 500.0, Standing(100.0), classical=1e9, startup=1e9)
    assert not decide_release(unknown).release


def test_predict_releases_by_the_start_up_and_the_task_runs_out_its_time():
    running = at(None, t=100.0, state=TaskState.RUNNING)
    facts = polled(running, release_at="predict", startup=5.0, poll={"running_since": 94.0})
    decision = decide_release(facts)
    assert decision.release and decision.reason.startswith("predicted: expected wait for")
    assert decision.expected_wait == pytest.approx(4.0)
    assert decision.next_poll == SCHEDULE.min_interval
    # The same start-up does nothing for release_at=done.
    done = decide_release(polled(running, release_at="done", startup=5.0))
    assert not done.release


def test_a_loop_step_is_released_by_its_node_lead_when_the_classical_one_gives_none():
    step = StepLead(3.0, NodeWait(600.0, 0.75, 0.5, ahead=1))
    running = at(None, state=TaskState.RUNNING)  # first seen RUNNING: one run (10 s) to go
    decision = decide_release(polled(running, release_at="done", step=step))
    assert decision.release and decision.estimated
    assert decision.reason.startswith("node lead: expected wait for the result 10s <= ")
    assert decision.expected_wait == pytest.approx(10.0)
    # Position 99 with done: 100 runs (1000 s) to go, past the 600 s wait for nodes.
    queued = decide_release(polled(at(99), release_at="done", step=step))
    assert not queued.release and queued.expected_wait == pytest.approx(1000.0)
    assert queued.reason.endswith("expected wait for the result 17m > forecast wait for nodes 10m")
    # The classical lead comes first.
    both = decide_release(polled(at(99), release_at="done", step=step, classical=2000.0))
    assert both.release and both.reason.startswith("classical lead")


def test_a_task_without_a_position_is_placed_by_its_backlog():
    backlog = Backlog(ahead_at_create=10, created_t=0.0, pending_now=None)
    snap = at(None, t=95.0)  # 9.5 of the 10 ahead served at 10 s each
    facts = polled(snap, poll={"backlog": backlog, "recheck": 20.0})
    decision = decide_release(facts)
    assert decision.release and decision.estimated and decision.estimated_position == 1
    assert decision.reason.startswith("estimated position 1 <= release_at 1")
    far = decide_release(polled(at(None, t=10.0), poll={"backlog": backlog, "recheck": 20.0}))
    assert not far.release and far.estimated_position == 10
    assert far.next_poll == 20.0  # the pending count is read again that often
    # A task with a position keeps the place last estimated (an IBM task now running).
    standing = Standing(50.0, 35.0, estimated_position=4)
    running = decide_release(polled(at(None, state=TaskState.RUNNING), standing=standing))
    assert running.release and running.estimated_position == 4
