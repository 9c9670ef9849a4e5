"""Adaptive poll intervals: release detection, distance to the release point, the
interval's shape (long far away, the minimum near the release point, capped until the
drain rate is learned), and a poller learning the drain rate from a task's moves."""

from __future__ import annotations

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.selection.poller import (
    AdaptivePoller,
    FixedPoller,
    PollSchedule,
    next_poll_interval,
    release_reached,
    tasks_to_release,
)
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState

DEVICE = parse_catalog(
    """
devices:
  - {name: qpu, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/acme/q",
     class: qpu, qubits: 5, price: {per_task: 0.3}}
""",
    "t.yaml",
).get("qpu")
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
    # While it runs the next poll is at the minimum, never "release now".
    assert next_poll_interval(running, "predict", 10.0) == PollSchedule().min_interval
    # done: the same release point, and no early release by time (the service's part).
    assert not release_reached(running, "done") and tasks_to_release(at(3), "done") == 4
    assert release_reached(at(None, state=TaskState.COMPLETED), "done")


def test_interval_shape():
    schedule = PollSchedule(min_interval=1, max_interval=300, cold_max_interval=30)
    # 100 to go at 10 s each: at least 99 whole services remain; poll after half of that.
    assert next_poll_interval(at(101), 1, 10.0, schedule) == pytest.approx(300)  # clamped
    assert next_poll_interval(at(41), 1, 10.0, schedule) == pytest.approx(195)
    assert next_poll_interval(at(41), 1, 10.0, schedule, learned=False) == 30
    assert next_poll_interval(at(3), 1, 10.0, schedule) == pytest.approx(5)
    # One task to go: it may end any moment, so poll at the minimum.
    assert next_poll_interval(at(2), 1, 10.0, schedule) == 1
    assert next_poll_interval(at(1), 1, 10.0, schedule) == 0
    assert next_poll_interval(at(None), 1, 10.0, schedule) == 1  # unknown position
    with pytest.raises(ValueError):
        PollSchedule(min_interval=0)


def test_adaptive_poller_learns_and_spends_few_calls():
    # A queue serving one task every 10 s; the poller starts from the class prior (60 s).
    poller = AdaptivePoller(DEVICE, 1)
    t, calls, delays = 0.0, 0, []
    start_position = 101
    while True:
        position = max(1, start_position - int(t // 10))
        delay = poller.observe(at(position, t))
        calls += 1
        if delay == 0:
            break
        delays.append(delay)
        t += delay
    release = (start_position - 1) * 10.0  # position 1 reached at t = 1000
    assert release <= t < release + 1.0  # detected within one minimum interval
    assert delays[0] == 30  # capped until the rate is learned
    assert max(delays) > 100  # then long waits far from the release point
    assert delays[-1] == 1  # and the minimum near it
    assert calls <= 25  # a fixed 1 s poll would make 1000
    assert poller.estimator.estimate(DEVICE).seconds_per_task == pytest.approx(10, rel=0.2)


def test_a_stalled_queue_does_not_make_the_poller_late():
    """A device that stood still for 1000 s (a maintenance window) then moves teaches
    a slow rate; the poller still plans with the catalog's 10 s per task, the faster."""
    device = parse_catalog(
        """
devices:
  - {name: qpu, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/acme/q",
     class: qpu, qubits: 5, price: {per_task: 0.3},
     properties: {drain_seconds_per_task: 10}}
""",
        "t.yaml",
    ).get("qpu")
    poller = AdaptivePoller(device, 1, schedule=PollSchedule(max_interval=3000))
    poller.observe(at(30, 0.0))
    poller.observe(at(30, 1000.0))  # stalled
    delay = poller.observe(at(29, 1001.0))
    assert poller.estimator.estimate(device).seconds_per_task > 500  # what it learned
    assert delay == pytest.approx(0.5 * 27 * 10)  # planned at the catalog's pace


def test_fixed_poller():
    poller = FixedPoller(2.0, release_at=1)
    assert poller.observe(at(5)) == 2.0
    assert poller.observe(at(1)) == 0.0
