"""Adaptive poll intervals: the interval's shape (long far away, the minimum near the
release point, capped until the drain rate is learned), and a poller learning the drain
rate from a task's moves. The release point itself: test_release_point.py."""

from __future__ import annotations

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.timing.poller import (
    AdaptivePoller,
    FixedPoller,
    PollSchedule,
    next_poll_interval,
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


def test_a_running_task_is_polled_at_the_minimum_with_predict():
    """release_at=predict: while the task runs the next poll is at the minimum, never
    "release now" (its end is the release point proper)."""
    running = at(None, state=TaskState.RUNNING)
    assert next_poll_interval(running, "predict", 10.0) == PollSchedule().min_interval


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
