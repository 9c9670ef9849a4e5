"""Unit tier: the handler service's decisions, end to end through ``QuantumService`` on
fakes of the outside world (Flux in memory, a scripted vendor, a manual clock, inline
workers). No Flux, no threads, no sleeping: minutes of vendor queue run in milliseconds.
The flux tier keeps the same stories on real brokers."""

from __future__ import annotations

import math
import syslog

from service_fakes import FAST, Harness, QueueModel

from flux_quantum.protocol import events
from flux_quantum.service import ServiceOptions
from flux_quantum.service.fluxside import ClusterView
from flux_quantum.service.state import Phase
from flux_quantum.vendors.base import DeviceStatus
from flux_quantum.vendors.errors import VendorThrottled


def at_front(device: str, **more) -> dict:
    return {"device": f"local:{device}", "release_at": 1, **more}


def test_single_job_token_recorded_before_create_released_at_its_release_point():
    h = Harness()
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    # The token was in the eventlog before the vendor heard of it.
    journal = h.flux.journal
    submit_event = journal.index(("event", (job, events.SUBMIT)))
    create = next(
        i for i, (kind, what) in enumerate(journal) if kind == "vendor" and what[0] == "submit"
    )
    assert submit_event < create
    submit = h.flux.last(job, events.SUBMIT)
    task = h.flux.last(job, events.TASK)
    assert submit.token == task.token == events.task_token(job, h.flux.jobs[job].t_submit, 0, 0)
    assert h.vendor.count("submit") == 1
    released = h.flux.jobs[job].release
    assert released["task"] == task.task and released["device"] == "alpha"
    ready = h.flux.last(job, events.READY)
    assert ready.tasks[0]["why"] == "position 1 <= release_at 1"
    # Milestones 100, 10 and 1 were each recorded once; memos followed the queue.
    assert [r.milestone for r in h.flux.decoded(job, events.QUEUE)] == [10, 1]
    assert h.flux.jobs[job].memo["qpu_state"] == "released"


def test_default_release_waits_until_the_task_is_done():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha"})
    h.until(
        lambda: (
            (unit := h.service.units.get(job)) is not None
            and unit.programs[0].attempt.snapshot is not None
        )
    )
    took = h.until(lambda: h.state(job) == "released")
    assert h.flux.last(job, events.READY).tasks[0]["why"] == "COMPLETED"
    assert took >= 30  # three tasks ahead and its own, 10 s each


def test_failed_task_fails_over_with_a_new_token_and_the_device_excluded():
    h = Harness()
    job = h.flux.submit(at_front("alpha", failover="next"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    first = h.flux.last(job, events.TASK)
    h.vendor.tasks[first.task].failed = "calibration drifted"
    h.until(lambda: h.state(job) == "released")
    failed = h.flux.last(job, events.TASK_FAILED)
    assert failed.state == "FAILED" and failed.reason == "calibration drifted"
    failover = h.flux.last(job, events.FAILOVER)
    assert (failover.attempt, failover.failed, failover.exclude) == (1, "alpha", ("alpha",))
    second = h.flux.last(job, events.TASK)
    assert second.attempt == 1 and second.token != first.token and second.task != first.task
    assert h.flux.jobs[job].release["task"] == second.task
    assert h.flux.jobs[job].release["device"] != "alpha"
    assert h.vendor.count("submit") == 2
    assert h.vendor.count("cancel") == 0  # a failed task is not cancelled


def test_failover_fail_fails_the_job_with_the_vendors_reason():
    h = Harness()
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.vendor.tasks[h.flux.last(job, events.TASK).task].failed = "device error 17"
    h.until(lambda: h.state(job) == "failed")
    note = h.flux.jobs[job].note
    assert "device error 17" in note and "qpu.failover=fail" in note
    assert not len(h.service.units)


def test_max_wait_cancels_the_stranded_task_then_fails_over_to_a_simulator():
    # The queue looks short (the catalog's drain: 10 s a task) but serves slowly.
    h = Harness({"alpha": QueueModel(3, service=100.0)})
    job = h.flux.submit(at_front("alpha", max_wait="60s", failover="simulator"))
    h.until(lambda: h.state(job) == "released")
    waited = h.flux.last(job, events.MAX_WAIT)
    assert waited.max_wait == 60 and waited.waited > 60
    assert waited.action == "cancel the stranded task"
    assert h.vendor.count("cancel") == 1
    assert h.flux.last(job, events.FAILOVER).device_class == "simulator"
    assert h.flux.jobs[job].release["device"] == "sim"


def test_busy_cluster_releases_early_by_the_classical_lead():
    h = Harness({"alpha": QueueModel(6)})
    # Every core is busy for the next 90 s; the task needs ~50 s to reach position 1.
    h.flux.cluster_view = ClusterView(
        t=h.clock(), cores_per_node=1, free_cores=0, releases=((h.clock() + 90, 8),)
    )
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    why = h.flux.last(job, events.READY).tasks[0]["why"]
    assert why.startswith("classical lead")
    task = h.vendor.tasks[h.flux.jobs[job].release["task"]]
    state, position = h.vendor.state_of(task)
    assert position is not None and position > 1  # released while its task still waits


def test_predict_releases_when_the_wait_for_the_result_is_below_start_up():
    options = ServiceOptions(**{**FAST.__dict__, "startup_default": 8.0})
    h = Harness({"alpha": QueueModel(0, service=20.0)}, options=options)
    job = h.flux.submit({"device": "local:alpha", "release_at": "predict"})
    h.until(lambda: h.state(job) == "released")
    why = h.flux.last(job, events.READY).tasks[0]["why"]
    assert why.startswith("predicted: expected wait for the result")
    task = h.vendor.tasks[h.flux.jobs[job].release["task"]]
    state, _ = h.vendor.state_of(task)
    assert state.value == "RUNNING"  # the result is ~8 s away, not there yet


def test_a_new_service_recovers_from_the_eventlogs_and_never_creates_twice():
    h = Harness({"alpha": QueueModel(20), "beta": QueueModel(20)})
    a = h.flux.submit(at_front("alpha"))
    b = h.flux.submit(at_front("beta"))
    h.until(lambda: h.flux.decoded(a, events.TASK) and h.flux.decoded(b, events.TASK))
    h.run(5)
    assert h.vendor.count("submit") == 2
    h2 = h.restart()  # the first service is gone: kill -9, nothing kept
    h2.until(lambda: h2.state(a) == "released" and h2.state(b) == "released")
    assert h2.vendor.count("submit") == 2
    assert h2.vendor.count("attach") == 2
    assert h2.service.counters.tasks_attached == 2
    for job in (a, b):
        assert h2.flux.jobs[job].release["task"] == h2.flux.last(job, events.TASK).task
        assert len(h2.flux.decoded(job, events.SUBMIT)) == 1  # the new service posts no duplicate
        assert [r.milestone for r in h2.flux.decoded(job, events.QUEUE)] == [100, 10, 1]


def test_adopting_a_full_queue_posts_its_events_in_one_exchange():
    """A service that starts on held jobs (a restart, with new jobs the old service never
    saw) sends their events and memos to Flux in one pipelined exchange each, not a
    round trip per job, and still gives every job what it lacks."""
    h = Harness({"alpha": QueueModel(30), "beta": QueueModel(30)})
    groups = [[h.flux.submit(at_front("alpha", group=f"g{g}")) for _ in range(3)] for g in range(4)]
    leaders = [h.flux.submit(at_front("beta")) for _ in range(4)]
    units = groups + [
        [ld, h.flux.submit(None, follow=ld), h.flux.submit(None, follow=ld)] for ld in leaders
    ]
    jobs = [j for unit in units for j in unit]
    h.until(lambda: all(h.flux.decoded(j, events.TASK) for j in jobs))
    assert h.vendor.count("submit") == 8
    # Submitted while no service runs: a group member and a follower it must join.
    joiner = h.flux.submit(at_front("alpha", group="g0"))
    follower = h.flux.submit(None, follow=leaders[0])
    h2 = h.restart()
    mark = len(h.flux.journal)
    h2.service.adoption.scan()
    exchanges = [(kind, n) for kind, n in h.flux.journal[mark:] if kind in ("post_events", "memos")]
    # Two joins, each new job's qpu-submit and qpu-task; the memos come with each unit's
    # first poll, not in the adoption.
    assert exchanges == [("post_events", 6)]
    assert h2.service.units.job_count == 26
    h2.run(2)
    assert all(h.flux.jobs[j].memo.get("qpu_task") for j in (joiner, follower))
    for job, unit in ((joiner, groups[0]), (follower, units[4])):
        assert h.flux.last(job, events.JOIN).via in ("group", "follow")
        assert h.flux.last(job, events.TASK).task == h.flux.last(unit[0], events.TASK).task
    everyone = [*jobs, joiner, follower]
    h2.until(lambda: all(h2.state(j) == "released" for j in everyone), limit=3000)
    assert h2.vendor.count("submit") == 8


def test_queue_memos_move_at_most_every_two_seconds_and_the_release_at_once():
    """A unit of 5 jobs polled every half second: its memos follow the queue every 2 s
    at most (not 5 memos per poll), and the release is shown at once."""
    options = ServiceOptions(**{**FAST.__dict__, "poll_max": 0.5, "poll_cold_max": 0.5})
    h = Harness({"alpha": QueueModel(40, service=1.0)}, options=options)
    jobs = [h.flux.submit(at_front("alpha", group="five")) for _ in range(5)]
    h.until(lambda: all(h.flux.decoded(j, events.TASK) for j in jobs))
    mark = len(h.flux.journal)
    polls = h.vendor.count("poll")
    took = h.until(lambda: all(h.state(j) == "released" for j in jobs))
    assert h.vendor.count("poll") - polls >= 2 * took - 4  # polled every 0.5 s
    sent = sum(n for kind, n in h.flux.journal[mark:] if kind == "memos")
    assert sent <= 5 * (took / 2 + 2), (sent, took)
    assert {h.flux.jobs[j].memo["qpu_state"] for j in jobs} == {"released"}


def test_a_units_memo_is_sent_once_per_step_however_many_changes_marked_it():
    """A unit's records only mark that its memo changed; the core sends it when the step
    is over, once, with the last state a change gave it, and not again until something
    changes."""
    h = Harness({"alpha": QueueModel(40)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: events.TASK in h.flux.names(job))
    unit = h.service.units.of_job(job)
    face = h.service.face

    def sent() -> list:
        return [e for e in h.flux.journal[mark:] if e[0] == "memos"]

    mark = len(h.flux.journal)
    unit.changed("waiting: first")
    unit.programs[0].attempt.tell(None)
    unit.changed("fail-over: last")
    assert sent() == []  # nothing goes out while the step runs
    face.refresh()
    assert sent() == [("memos", 1)]
    assert h.flux.jobs[job].memo["qpu_state"] == "fail-over: last"
    face.refresh()
    assert sent() == [("memos", 1)]  # nothing changed since
    # Its next poll shows the queue again.
    assert h.until(lambda: h.flux.jobs[job].memo["qpu_state"] == "QUEUED", limit=10.0) > 0


def test_between_ticks_only_what_completed_or_is_due_is_stepped():
    """step_soon (the runner's wake after a vendor call, or for a poll due before the
    next tick) takes the create right after the selection completed, and leaves the
    other units alone."""
    h = Harness({"alpha": QueueModel(10), "beta": QueueModel(10)})
    ours = h.flux.submit(at_front("alpha"))
    others = [h.flux.submit(at_front("beta")) for _ in range(3)]
    h.run(5)  # every unit has its task and is tracked
    assert all(h.flux.decoded(j, events.TASK) for j in [ours, *others])
    late = h.flux.submit(at_front("alpha"))
    h.clock.advance(1.0)
    h.service.tick()  # the scan adopts it and its first step starts (a worker call)
    assert not h.flux.decoded(late, events.TASK)
    polls = h.vendor.count("poll")
    for _ in range(6):  # no tick, no time: read, select, create follow one another
        h.service.completions()
        h.service.step_soon()
    assert h.flux.decoded(late, events.TASK)
    assert h.vendor.count("poll") <= polls + 1  # its own first poll at most
    assert h.service.next_due > h.clock()


def test_a_held_back_queue_memo_is_shown_within_the_interval_and_a_scan():
    """The queue stops moving right after a memo was held back: the last position is
    still shown within 2 s (the interval) and one scan, without another poll."""
    h = Harness({"alpha": QueueModel(40, service=1.0)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.jobs[job].memo.get("qpu_position") is not None)
    unit = h.service.units.get(job)
    assert unit is not None
    h.until(lambda: unit.memo_pending, limit=60)
    attempt = unit.programs[0].attempt
    attempt.due = math.inf  # as if the poller had planned its next poll far ahead
    h.run(2.0 + FAST.scan_interval + 0.25)
    assert not attempt.busy and attempt.due == math.inf  # no poll since
    assert h.flux.jobs[job].memo["qpu_position"] == attempt.snapshot.position
    assert not unit.memo_pending


def test_a_recorded_token_without_a_task_gets_the_same_task_back():
    """The service died between the vendor's create and recording qpu-task: its
    successor creates again with the recorded token and gets the same task."""
    h = Harness()
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.SUBMIT))
    token = h.flux.last(job, events.SUBMIT).token
    assert token in h.vendor.by_token  # the create happened...
    h.flux.jobs[job].events = [e for e in h.flux.jobs[job].events if e.name != events.TASK]
    h2 = h.restart()  # ...but qpu-task never reached the eventlog
    h2.until(lambda: h2.state(job) == "released")
    assert len(h2.vendor.tasks) == 1
    assert h2.flux.jobs[job].release["task"] == h2.vendor.by_token[token]
    assert events.SELECT not in [e.name for e in h2.flux.jobs[job].events[-6:]]


def test_one_slot_device_takes_one_task_at_a_time_oldest_first():
    h = Harness({"solo": QueueModel(4)})
    jobs = [h.flux.submit(at_front("solo")) for _ in range(3)]
    h.until(lambda: h.flux.decoded(jobs[0], events.TASK))
    h.run(2)
    for job in jobs[1:]:
        assert "slot(s) of solo in use" in h.flux.last(job, events.WAIT).reason
    assert h.vendor.count("submit") == 1
    h.until(lambda: all(h.state(j) == "released" for j in jobs))
    created = [h.flux.last(j, events.TASK).task for j in jobs]
    assert created == sorted(created, key=lambda t: int(t.rsplit("/", 1)[1]))  # submit order
    # Never two tasks in flight: each was created after the one before was released.
    stamps = {}
    for j in jobs:
        evs = h.flux.jobs[j].events
        stamps[j] = (
            next(e.timestamp for e in evs if e.name == events.TASK),
            next(e.timestamp for e in evs if e.name == events.RELEASE),
        )
    assert stamps[jobs[1]][0] >= stamps[jobs[0]][1] and stamps[jobs[2]][0] >= stamps[jobs[1]][1]


def test_batch_is_released_only_when_every_program_is_ready(tmp_path):
    for name in ("a.qasm", "b.qasm"):
        (tmp_path / name).write_text("OPENQASM 3.0;\nqubit[1] q;\n")
    h = Harness({"alpha": QueueModel(1), "beta": QueueModel(8)})
    job = h.flux.submit(
        {"vendor": "local", "policy": "min-cost", "program": ["a.qasm", "b.qasm"], "release_at": 1},
        cwd=str(tmp_path),
    )
    h.until(lambda: len(h.flux.decoded(job, events.TASK)) == 2)
    tasks = h.flux.decoded(job, events.TASK)
    assert [t.index for t in tasks] == [0, 1]
    h.until(lambda: h.state(job) == "released")
    ready = h.flux.last(job, events.READY)
    assert len(ready.tasks) == 2
    assert h.flux.jobs[job].release["info"]["tasks"] == [t.task for t in tasks]


def test_a_batchs_memo_says_how_many_of_its_tasks_are_ready(tmp_path):
    """A cut's subexperiments are a batch: its held job shows how far it is."""
    for name in ("a.qasm", "b.qasm"):
        (tmp_path / name).write_text("OPENQASM 3.0;\nqubit[1] q;\n")
    h = Harness({"alpha": QueueModel(2)})
    job = h.flux.submit(
        {"device": "local:alpha", "program": ["a.qasm", "b.qasm"]}, cwd=str(tmp_path)
    )
    h.until(lambda: h.flux.jobs[job].memo.get("qpu_state") == "QUEUED (0/2 ready)")
    unit = h.service.ctx.units.of_job(job)
    unit.programs[0].attempt.phase = Phase.READY  # as its task ended first
    assert h.service.face.memo_of(unit)["qpu_state"] == "QUEUED (1/2 ready)"
    h.until(lambda: h.state(job) == "released")


def test_batch_tasks_are_submitted_in_program_order_whatever_order_choices_complete(tmp_path):
    """Both device choices come back in one drain, the second program's first (worker
    threads finish in any order): the first program's qpu-submit is still recorded,
    and its task created, first (its qpu-task follows whichever create ends first)."""
    for name in ("a.qasm", "b.qasm"):
        (tmp_path / name).write_text("OPENQASM 3.0;\nqubit[1] q;\n")
    h = Harness()
    job = h.flux.submit(
        {"device": "local:alpha", "program": ["a.qasm", "b.qasm"], "release_at": 1},
        cwd=str(tmp_path),
    )
    h.service.tick()  # adopted; both programs are read by workers
    for i in range(6):  # the runner's wake: completions, then what they made due
        h.workers.reverse = i == 1  # the choices (the second drain) come back reversed
        h.service.completions()
        h.service.step_soon()
    submits = h.flux.decoded(job, events.SUBMIT)
    assert [s.index for s in submits] == [0, 1]
    assert [s.program for s in submits] == ["a.qasm", "b.qasm"]
    creates = [what[1] for kind, what in h.flux.journal if kind == "vendor" and what[0] == "submit"]
    assert creates == [s.token for s in submits]


def test_group_members_ride_one_task_and_a_late_member_is_released_at_once():
    h = Harness()
    first = h.flux.submit(at_front("alpha", group="scan"))
    second = h.flux.submit(at_front("alpha", group="scan"))
    follower = h.flux.submit(None, follow=first)
    h.until(lambda: all(h.state(j) == "released" for j in (first, second, follower)))
    assert h.vendor.count("submit") == 1
    tasks = {h.flux.jobs[j].release["task"] for j in (first, second, follower)}
    assert len(tasks) == 1
    assert h.flux.last(second, events.JOIN).via == "group"
    assert h.flux.last(follower, events.JOIN).via == "follow"
    late = h.flux.submit(at_front("alpha", group="scan"))
    h.until(lambda: h.state(late) == "released")
    assert h.flux.last(late, events.JOIN).late is True
    assert h.flux.jobs[late].release["task"] in tasks
    assert h.vendor.count("submit") == 1


def test_partial_release_a_member_gone_defers_and_the_rest_is_released():
    h = Harness({"alpha": QueueModel(3)})
    first = h.flux.submit(at_front("alpha", group="pair"))
    second = h.flux.submit(at_front("alpha", group="pair"))
    h.until(lambda: h.flux.decoded(second, events.JOIN))
    # The second job is cancelled between the service's last scan and its release.
    h.flux.before_release = lambda ids: second in ids and h.flux.cancel(second)
    h.until(lambda: h.state(first) == "released")
    assert h.state(second) == "cancelled"
    assert any("release deferred" in msg for _, msg in h.logs)
    assert h.vendor.count("cancel") == 0  # the task is still read by the first job


def test_every_job_gone_cancels_the_task():
    h = Harness({"alpha": QueueModel(20)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.flux.cancel(job)
    h.until(lambda: h.vendor.count("cancel") == 1)
    assert not len(h.service.units)


def test_device_offline_while_waiting_cancels_and_fails_over():
    h = Harness({"alpha": QueueModel(50)})
    job = h.flux.submit(at_front("alpha", failover="next"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.vendor.queues["alpha"].status = DeviceStatus.OFFLINE
    h.vendor.queues["alpha"].reason = "MAINTENANCE"
    h.until(lambda: h.state(job) == "released")
    gone = h.flux.last(job, events.DEVICE_UNAVAILABLE)
    assert gone.status == "OFFLINE (MAINTENANCE)" and gone.action == "cancel the stranded task"
    assert h.vendor.count("cancel") == 1
    assert h.flux.jobs[job].release["device"] != "alpha"


def test_throttling_is_retried_with_backoff_and_said_once():
    h = Harness()
    h.vendor.fail(
        "submit", VendorThrottled("slow down", vendor="local", vendor_code="Throttling"), 4
    )
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    retries = h.flux.decoded(job, events.RETRY)
    assert len(retries) == 1 and retries[0].code == "Throttling"
    assert h.vendor.count("submit") == 5
    warnings = [m for level, m in h.logs if level == syslog.LOG_WARNING and "create" in m]
    assert len(warnings) == 1


def test_an_error_that_is_not_a_vendor_error_backs_off_and_fails_the_job():
    """The bug the fakes showed: a vendor call raising something else (a mistyped
    profile, a bug) was retried on every tick without back-off."""
    h = Harness()
    h.vendor.fail("submit", KeyError("profile 'prod' not found"), times=100)
    job = h.flux.submit(at_front("alpha"))
    h.run(10)
    assert h.vendor.count("submit") < 6  # back-off, not a create per tick (48 in 10 s)
    h.until(lambda: h.state(job) == "failed")
    creates = h.vendor.count("submit")
    assert creates == FAST.error_limit
    note = h.flux.jobs[job].note
    assert "create failed 5 times in a row" in note and "profile 'prod' not found" in note
    retry = h.flux.last(job, events.RETRY)
    assert retry.code == "KeyError" and "profile 'prod' not found" in retry.message
    assert h.service.counters.unexpected_errors == creates
    errors = [m for level, m in h.logs if level <= syslog.LOG_WARNING and "KeyError" in m]
    assert len(errors) == 1


def test_a_request_that_does_not_parse_fails_at_once():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha", "shots": -3})
    h.until(lambda: h.state(job) == "failed")
    assert "qpu.shots" in h.flux.jobs[job].note
    assert h.vendor.count("submit") == 0


def test_listing_held_jobs_failing_is_said_once_and_recovers():
    h = Harness()
    h.flux.list_error = OSError(5, "job-manager is reloading")
    h.run(10)
    said = [m for _, m in h.logs if "cannot list held jobs" in m]
    assert len(said) == 1
    h.flux.list_error = None
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    assert any("listed again after" in m for _, m in h.logs)


def test_status_shows_a_guest_only_their_own_units():
    h = Harness({"alpha": QueueModel(20)})
    mine = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(mine, events.TASK))
    status = h.service.status()
    assert [u["unit"] for u in status["units"]] == [mine] and "counters" in status
    guest = h.service.status(userid=4242)
    assert guest["units"] == [] and "counters" not in guest and "options" not in guest


def test_a_poll_is_stepped_when_it_is_due_not_at_the_next_full_pass():
    """Between full passes the queue of what is due when drives the steps: the runner
    wakes for the soonest (``next_due``) and steps it then, however far the next full
    pass is."""
    h = Harness({"alpha": QueueModel(10)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    svc = h.service
    unit = svc.units.get(job)
    assert unit is not None
    attempt = unit.programs[0].attempt
    h.until(lambda: not attempt.busy and attempt.due > h.clock(), limit=5)
    polls = h.vendor.count("poll")
    assert svc.next_due == attempt.due
    h.clock.advance(attempt.due - h.clock())  # the wake, before any tick
    svc.step_soon()
    svc.completions()
    assert h.vendor.count("poll") == polls + 1
    # The completed poll is queued again for its own next due time.
    svc.step_soon()
    assert not attempt.busy and svc.next_due == attempt.due > h.clock()
