"""Unit tier: the service hears a vendor's task events (``VendorEvents``) on fakes of the
outside world: a scripted vendor whose state changes come on a fake feed, a manual
clock, inline workers. An event only ever makes the service poll the task it names now;
the poll acts. Events for tasks the service does not track are dropped; copies and late
events are harmless; a lost feed falls back to polling, said once, and back."""

from __future__ import annotations

import random
import syslog
from dataclasses import replace

from event_fakes import evented_harness
from service_fakes import FAST, Harness, QueueModel

from flux_quantum.protocol import events
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.errors import NotFound
from flux_quantum.vendors.task_events import DeviceEvent, TaskEvent


def polls_of(h: Harness, task_id: str) -> int:
    return sum(1 for op, what in h.vendor.calls if op == "poll" and what == task_id)


def ended_at(h: Harness, task_id: str) -> float:
    """When the scripted vendor's task ended (its queue: ``ahead`` tasks, then its own)."""
    fake = h.vendor.tasks[task_id]
    return fake.created + (fake.ahead + 1) * fake.service


def released_at(h: Harness, job: int) -> float:
    return next(e.timestamp for e in h.flux.jobs[job].events if e.name == events.RELEASE)


def task_of(h: Harness, job: int) -> str:
    h.until(lambda: h.flux.decoded(job, events.TASK))
    return h.flux.last(job, events.TASK).task


def feed_state(h: Harness) -> dict:
    return h.service.status()["events"]["local"]


def test_a_completed_event_releases_at_once_with_far_fewer_polls():
    plain, evented = Harness(), evented_harness()
    lags, polls = {}, {}
    for name, h in (("plain", plain), ("events", evented)):
        job = h.flux.submit({"device": "local:beta"})
        task = task_of(h, job)
        h.until(lambda h=h, job=job: h.state(job) == "released")
        lags[name] = released_at(h, job) - ended_at(h, task)
        polls[name] = polls_of(h, task)
        assert h.flux.last(job, events.READY).tasks[0]["why"] == "COMPLETED"
    # The event wakes the poll the tick it comes; the polls while RUNNING are gone.
    assert lags["events"] <= 0.5, lags
    assert polls["events"] <= 4 < polls["plain"], polls
    assert feed_state(evented)["state"] == "listening"
    assert feed_state(evented)["counts"]["used"] >= 2  # RUNNING, COMPLETED


def test_an_event_for_a_task_not_tracked_is_dropped_and_never_polled():
    h = evented_harness()
    job = h.flux.submit({"device": "local:beta"})
    task_of(h, job)
    stranger = "arn:aws:braket:us-east-1:999999999999:quantum-task/not-ours"
    h.vendor.feed.inject(TaskEvent("forged-1", stranger, TaskState.COMPLETED))
    h.run(2)
    assert feed_state(h)["counts"]["unknown"] == 1
    assert all(what != stranger for _, what in h.vendor.calls)
    assert h.state(job) == "held"


def test_a_forged_completed_event_is_confirmed_by_one_poll_and_releases_nothing():
    h = evented_harness()
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.run(3)
    before = polls_of(h, task)
    h.vendor.feed.inject(TaskEvent("forged-2", task, TaskState.COMPLETED))
    h.run(1)
    assert polls_of(h, task) == before + 1  # the event woke one poll; the poll said QUEUED
    assert h.state(job) == "held"
    assert not h.flux.decoded(job, events.READY)
    # A forged FAILED event fails nothing either.
    h.vendor.feed.inject(TaskEvent("forged-3", task, TaskState.FAILED))
    h.run(1)
    assert h.state(job) == "held" and not h.flux.decoded(job, events.TASK_FAILED)


def test_copies_and_late_events_are_harmless():
    h = evented_harness()
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.vendor.feed.duplicate = lambda event: True
    h.until(lambda: h.vendor.state_of(h.vendor.tasks[task])[0] is TaskState.RUNNING)
    h.run(1)
    counts = feed_state(h)["counts"]
    assert counts["duplicate"] >= 1
    # A QUEUED event delivered after RUNNING was seen is stale: no poll for it.
    before = polls_of(h, task)
    h.vendor.feed.inject(TaskEvent("late-queued", task, TaskState.QUEUED))
    h.run(1)
    assert polls_of(h, task) == before
    assert feed_state(h)["counts"]["stale"] >= 1
    h.until(lambda: h.state(job) == "released")
    assert [e.name for e in h.flux.jobs[job].events].count(events.RELEASE) == 1


def test_an_event_that_comes_while_a_poll_is_under_way_asks_for_one_more():
    h = evented_harness({"beta": QueueModel(50)})
    h.workers.reverse = True  # the feed's answer is handled before the poll's
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    unit = h.service.units.of_job(job)
    attempt = unit.programs[0].attempt
    h.run(2)
    # The next poll goes out in the tick the RUNNING event comes (busy when it is
    # handled): the event is kept, and the poll's answer (still QUEUED) is followed by
    # another at the shortest interval.
    h.clock.advance(attempt.due - h.clock())
    h.vendor.feed.inject(TaskEvent("racing", task, TaskState.RUNNING))
    before = polls_of(h, task)
    h.step()
    assert polls_of(h, task) == before + 1
    assert attempt.snapshot.state is TaskState.QUEUED
    assert attempt.due - h.clock() <= h.service.ctx.schedule.min_interval


def test_while_heard_a_task_is_polled_only_when_its_end_is_due():
    h = evented_harness(safety_poll=30.0)
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.vendor.feed.lose = lambda event: event.state is TaskState.COMPLETED
    h.until(lambda: h.state(job) == "released", limit=200)
    lag = released_at(h, job) - ended_at(h, task)
    # The COMPLETED event was lost: the poll planned a little after the task's expected
    # end found it (2 x the shortest interval: 1 s), long before the safety interval.
    assert 0 < lag <= 1.5, lag
    assert polls_of(h, task) <= 6


def test_a_feed_that_cannot_be_read_falls_back_to_polls_said_once_and_comes_back():
    h = evented_harness()
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.run(2)
    h.vendor.feed.failing = NotFound(
        "queue is gone", vendor="local", vendor_code="AWS.SimpleQueueService.NonExistentQueue"
    )
    h.run(10)
    warnings = [m for level, m in h.logs if level == syslog.LOG_WARNING and "fake events" in m]
    assert len(warnings) == 1 and "polling local tasks as before" in warnings[0]
    assert "queue is gone" in warnings[0]
    assert feed_state(h)["state"] == "lost"
    h.vendor.feed.failing = None
    h.run(10)
    back = [m for level, m in h.logs if level == syslog.LOG_INFO and "events come again" in m]
    assert len(back) == 1
    assert feed_state(h)["state"] == "listening"
    h.until(lambda: h.state(job) == "released")
    assert released_at(h, job) - ended_at(h, task) <= 0.5


def test_a_silent_feed_while_tasks_are_live_counts_as_lost():
    h = evented_harness(silence=20.0, safety_poll=300.0)
    h.vendor.feed.quiet = True
    h.run(1)
    h.vendor.feed.quiet = False
    h.run(1)  # heard once: listening
    h.vendor.feed.quiet = True
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.run(25)
    warnings = [m for level, m in h.logs if level == syslog.LOG_WARNING]
    assert any("no event for" in m and "task(s) are live" in m for m in warnings), warnings
    # Lost: the task is polled as before and released when done, though no event came.
    h.until(lambda: h.state(job) == "released")
    assert released_at(h, job) - ended_at(h, task) <= 5.0  # poll_max of FAST


def test_a_device_event_makes_its_probe_come_now():
    h = evented_harness(options=replace(FAST, device_check_interval=30.0))
    job = h.flux.submit({"device": "local:beta"})
    task_of(h, job)
    h.run(3)
    probes = h.vendor.count("probe")
    device = h.catalog.get("beta")
    h.vendor.feed.inject(DeviceEvent("device-1", device.id, "OFFLINE"))
    h.run(1)
    assert h.vendor.count("probe") == probes + 1
    assert feed_state(h)["counts"]["probes_asked"] == 1


def test_with_lost_and_copied_events_every_job_is_released_exactly_once():
    h = evented_harness(safety_poll=20.0)
    draws = random.Random(7)
    h.vendor.feed.lose = lambda event: draws.random() < 0.3
    h.vendor.feed.duplicate = lambda event: draws.random() < 0.3
    jobs = [h.flux.submit({"device": f"local:{d}"}) for d in ("alpha", "beta", "solo") * 4]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=1200)
    for job in jobs:
        assert [e.name for e in h.flux.jobs[job].events].count(events.RELEASE) == 1
    assert h.vendor.feed.lost and feed_state(h)["counts"]["duplicate"] >= 1


def test_an_overdue_task_whose_end_event_is_lost_is_polled_backing_off_not_at_the_safety():
    # Its own run takes 40 s where the device's drain says 10: once overdue, polled again
    # after as long as it has run so far, so its lost COMPLETED costs at most about that.
    h = evented_harness({"beta": QueueModel(2, run=40.0)}, safety_poll=600.0)
    job = h.flux.submit({"device": "local:beta"})
    task = task_of(h, job)
    h.vendor.feed.lose = lambda event: event.state is TaskState.COMPLETED
    h.until(lambda: h.state(job) == "released", limit=300)
    fake = h.vendor.tasks[task]
    ended = fake.created + fake.ahead * fake.service + 40.0
    lag = released_at(h, job) - ended
    assert 0 < lag <= 40.0, lag
    assert polls_of(h, task) <= 8
