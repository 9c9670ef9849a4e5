"""The release rule for a task with no queue position (IBM): the backlog estimate from the
pending count at create, the time since and the drain; what each release_at means; the
poll interval it gives. Pure deciders, no vendor."""

from __future__ import annotations

import pytest

from flux_quantum.timing.poller import PollSchedule, unpositioned_poll_interval
from flux_quantum.timing.release_point import (
    BacklogEstimate,
    estimate_backlog,
    unpositioned_release,
)
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState

TASK = TaskRef("ibm", "fez", "d0abcdefghij01234567")


def snap(t: float, state: TaskState = TaskState.QUEUED) -> TaskSnapshot:
    return TaskSnapshot(TASK, state, None, False, None, t)


def estimate(
    t: float,
    ahead: int | None = 10,
    pending: int | None = None,
    spt: float = 10.0,
    state: TaskState = TaskState.QUEUED,
):
    return estimate_backlog(
        snap(t, state),
        ahead_at_create=ahead,
        created_t=100.0,
        pending_now=pending,
        seconds_per_task=spt,
    )


def test_the_estimate_drains_the_jobs_that_were_ahead():
    at_create = estimate(100.0)
    assert at_create.ahead == 10 and at_create.position == 11
    assert at_create.wait == pytest.approx(100.0) and at_create.result_wait == pytest.approx(110)
    later = estimate(155.0)  # 5.5 jobs served
    assert later.ahead == pytest.approx(4.5) and later.position == 5
    assert "10 pending at create" in later.why
    drained = estimate(1000.0)  # more time than the backlog needs: next, never negative
    assert drained.ahead == 0 and drained.position == 1 and drained.wait == 0


def test_the_pending_count_now_bounds_the_estimate():
    # The backend emptied faster than the drain said: 3 pending, ours among them.
    bounded = estimate(110.0, pending=3)
    assert bounded.ahead == 2 and bounded.position == 3
    assert "3 pending now" in bounded.why
    # No count at create (a restart lost it): the count now alone.
    only_now = estimate(110.0, ahead=None, pending=8)
    assert only_now.ahead == 7
    nothing = estimate(110.0, ahead=None, pending=None)
    assert nothing.position is None and nothing.result_wait is None


def test_running_and_ended_tasks_need_no_estimate():
    running = estimate(200.0, pending=40, state=TaskState.RUNNING)
    assert running.ahead == 0 and running.result_wait == 10.0
    done = estimate(200.0, pending=40, state=TaskState.COMPLETED)
    assert done.result_wait == 0.0
    with pytest.raises(ValueError):
        estimate_backlog(
            snap(1.0), ahead_at_create=1, created_t=0.0, pending_now=1, seconds_per_task=0
        )


def test_release_at_n_uses_the_estimate_then_the_state():
    far, near = estimate(100.0), estimate(185.0)  # positions 11 and 2
    assert not unpositioned_release(snap(100.0), 1, far).release
    decision = unpositioned_release(snap(185.0), 2, near)
    assert decision.release and decision.estimated
    assert "estimated position 2 <= release_at 2" in decision.reason
    assert not unpositioned_release(snap(185.0), 1, near).release
    running = unpositioned_release(snap(190.0, TaskState.RUNNING), 1, far)
    assert running.release and not running.estimated
    unknown = BacklogEstimate(None, None, None, None, "nothing")
    assert not unpositioned_release(snap(100.0), 5, unknown).release


def test_release_at_running_and_done_ignore_the_estimate():
    front = estimate(1000.0)  # position 1 by the estimate
    assert not unpositioned_release(snap(1000.0), "running", front).release
    assert unpositioned_release(snap(1000.0, TaskState.RUNNING), "running", front).release
    assert not unpositioned_release(snap(1000.0, TaskState.RUNNING), "done", front).release
    done = unpositioned_release(snap(1000.0, TaskState.COMPLETED), "done", front)
    assert done.release and done.reason == "task is COMPLETED"
    # A failed task is past every release point: the service fails it over first.
    assert unpositioned_release(snap(1.0, TaskState.FAILED), "running", front).release


def test_release_at_predict_compares_the_result_wait_with_start_up():
    near = estimate(185.0)  # 1.5 ahead: result in 15 + 10 = 25 s
    assert near.result_wait == pytest.approx(25.0)
    assert not unpositioned_release(snap(185.0), "predict", near, startup=20.0).release
    decision = unpositioned_release(snap(185.0), "predict", near, startup=30.0)
    assert (
        decision.release and decision.estimated and "25.0s <= job start-up 30.0s" in decision.reason
    )
    running = estimate(200.0, state=TaskState.RUNNING)
    assert unpositioned_release(snap(200.0, TaskState.RUNNING), "predict", running, 12.0).release
    unknown = BacklogEstimate(None, None, None, None, "nothing")
    assert not unpositioned_release(snap(1.0), "predict", unknown, startup=1e9).release


def test_poll_interval_follows_the_estimate():
    schedule = PollSchedule(min_interval=1, max_interval=300, cold_max_interval=30)
    far = estimate(100.0)  # position 11 at 10 s per job
    assert unpositioned_poll_interval(far, 1, 10.0, schedule) == pytest.approx(45.0)
    assert unpositioned_poll_interval(far, "running", 10.0, schedule) == pytest.approx(50.0)
    assert unpositioned_poll_interval(far, "done", 10.0, schedule) == pytest.approx(55.0)
    near = estimate(185.0)  # position 2
    assert unpositioned_poll_interval(near, 1, 10.0, schedule) == 1
    unknown = BacklogEstimate(None, None, None, None, "nothing")
    assert unpositioned_poll_interval(unknown, 1, 10.0, schedule) == 1
