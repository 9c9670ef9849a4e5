"""The release rule for a task with a queue position: release detection, the distance to
the release point, the decision with its expected wait and why, and the early release by
time (the classical lead, predict's start-up). Pure deciders, no vendor. The rule for a
task without a position (IBM): test_ibm_release.py."""

from __future__ import annotations

import pytest

from flux_quantum.timing.release_point import (
    lead_release,
    positioned_release,
    release_reached,
    tasks_to_release,
)
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState

TASK = TaskRef("local", "qpu", "arn:aws:braket:us-east-1:1:quantum-task/a")


def at(position, t=0.0, state=TaskState.QUEUED, capped=False) -> TaskSnapshot:
    return TaskSnapshot(TASK, state, position, capped, None, t)


def test_release_point():
    assert release_reached(at(1), 1) and release_reached(at(3), 3)
    assert not release_reached(at(2), 1)
    assert not release_reached(at(2000, capped=True), 2000)  # only a lower bound
    assert release_reached(at(None, state=TaskState.RUNNING), 1)
    assert release_reached(at(None, state=TaskState.FAILED), 5)
    assert not release_reached(at(1), "running")
    assert release_reached(at(None, state=TaskState.RUNNING), "running")
    assert tasks_to_release(at(10), 1) == 9
    assert tasks_to_release(at(10), "running") == 10
    assert tasks_to_release(at(None), 1) is None
    assert tasks_to_release(at(2000, capped=True), 1) == 1999


def test_predict_counts_the_tasks_own_run():
    """release_at=predict: the release point proper is the task's end (the service
    releases earlier by time); its own run counts as one more task to wait for."""
    running = at(None, state=TaskState.RUNNING)
    assert not release_reached(running, "predict") and not release_reached(at(1), "predict")
    assert release_reached(at(None, state=TaskState.COMPLETED), "predict")
    assert tasks_to_release(at(3), "predict") == 4
    assert tasks_to_release(running, "predict") == 1
    assert tasks_to_release(at(None), "predict") is None
    # done: the same release point, and no early release by time (the service's part).
    assert not release_reached(running, "done") and tasks_to_release(at(3), "done") == 4
    assert release_reached(at(None, state=TaskState.COMPLETED), "done")


def test_the_decision_says_where_the_task_is_and_how_long_it_has_to_go():
    reached = positioned_release(at(1, t=5.0), 1, 10.0)
    assert reached.release and reached.reason == "position 1 <= release_at 1"
    assert reached.expected_wait == 0.0
    running = positioned_release(at(None, t=5.0, state=TaskState.RUNNING), "running", 10.0)
    assert running.release and running.reason == "RUNNING"
    far = positioned_release(at(5), 1, 10.0)
    assert not far.release and far.expected_wait == pytest.approx(40.0)
    assert far.reason == "position 5 > release_at 1"
    unknown = positioned_release(at(None), 1, 10.0)
    assert not unknown.release and unknown.expected_wait is None


def test_a_running_task_whose_release_point_is_its_end_has_what_is_left_of_its_run():
    running = at(None, t=104.0, state=TaskState.RUNNING)
    decision = positioned_release(running, "predict", 10.0, running_since=100.0)
    assert not decision.release and decision.expected_wait == pytest.approx(6.0)
    late = positioned_release(running, "done", 10.0, running_since=90.0)
    assert not late.release and late.expected_wait == 0.0
    first_seen = positioned_release(running, "predict", 10.0)  # first seen RUNNING now
    assert first_seen.expected_wait == pytest.approx(10.0)
    assert positioned_release(at(None, state=TaskState.COMPLETED), "done", 10.0).release


def test_the_classical_lead_releases_when_the_cores_free_up_no_sooner():
    # 100 s expected, estimated 30 s ago: 70 s to go; the cores free up in 80 s.
    lead = lead_release(1, 100.0, 30.0, classical=80.0, startup=5.0, limit_share=0.5)
    assert lead.release and lead.reason.startswith("classical lead: expected queue wait 70s")
    assert "50% of their time limits" in lead.reason
    assert not lead_release(1, 100.0, 10.0, classical=80.0, startup=5.0).release
    # Free cores (or an unknown wait) give no lead; start-up counts with predict only.
    assert not lead_release(1, 0.0, 0.0, classical=0.0, startup=100.0).release
    assert not lead_release(1, 0.0, 0.0, classical=None, startup=100.0).release


def test_predict_releases_when_the_result_comes_before_the_jobs_start():
    assert not lead_release("predict", 12.0, 0.0, classical=None, startup=10.0).release
    decision = lead_release("predict", 12.0, 3.0, classical=None, startup=10.0)
    assert decision.release
    assert decision.reason == "predicted: expected wait for the result 9.00s <= job start-up 10.00s"
