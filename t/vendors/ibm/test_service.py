"""Unit tier: IBM through the handler service, on fakes of the outside world (Flux in
memory, an IBM-like vendor on a manual clock: no queue position, a pending count, a
create that is not idempotent, sessions). The service's own code runs unchanged: the
unpositioned release point, since/ahead in qpu-submit, recovery by find_task without a
second create, and sessions opened, kept while a job may use them and always closed,
also across a restart."""

from __future__ import annotations

import dataclasses
import json

from service_fakes import CATALOG, FAST, Harness, QueueModel

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.service.sessionkeys import SessionKeys
from flux_quantum.site.policy import SitePolicy

FEZ = "ibm:fez"


def ibm(**more) -> dict:
    return {"device": FEZ, **more}


def everything_posted(h: Harness) -> str:
    return json.dumps([e.to_dict() for j in h.flux.jobs.values() for e in j.events])


# --- the release point without a queue position ---------------------------------------------


def test_submit_records_since_and_ahead_before_the_create():
    h = Harness()
    job = h.flux.submit(ibm(release_at="running"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    submit = h.flux.last(job, events.SUBMIT)
    assert submit.ahead == 3  # the pending count the select probe saw
    created_at = next(e.timestamp for e in h.flux.jobs[job].events if e.name == events.TASK)
    assert submit.since is not None and submit.since <= created_at
    journal = h.flux.journal
    recorded = journal.index(("event", (job, events.SUBMIT)))
    created = journal.index(("vendor", ("submit", submit.token)))
    assert recorded < created


def test_release_at_n_releases_at_the_estimated_front_while_still_queued():
    h = Harness()
    job = h.flux.submit(ibm(release_at=1))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    task = h.flux.last(job, events.TASK).task
    h.run(2.0)
    assert h.state(job) == "held"
    assert h.flux.jobs[job].memo["qpu_position"] >= 3  # estimated, shown while held
    h.until(lambda: h.state(job) == "released")
    why = h.flux.last(job, events.READY).tasks[0]["why"]
    assert why.startswith("estimated position 1 <= release_at 1"), why
    state, _ = h.ibm.state_of(h.ibm.tasks[task])
    assert state.value == "QUEUED"  # released by the estimate, before it ran
    assert h.ibm.count("submit") == 1 and h.ibm.count("find") == 0


def test_release_at_running_and_done_wait_for_the_tasks_state():
    h = Harness()
    running = h.flux.submit(ibm(release_at="running"))
    done = h.flux.submit(ibm())
    h.until(lambda: h.state(running) == "released")
    assert h.flux.last(running, events.READY).tasks[0]["why"] == "RUNNING"
    assert h.state(done) == "held"
    h.until(lambda: h.state(done) == "released")
    assert h.flux.last(done, events.READY).tasks[0]["why"] == "COMPLETED"


def test_predict_releases_when_the_estimated_result_wait_is_below_start_up():
    h = Harness(options=dataclasses.replace(FAST, startup_default=25.0))
    job = h.flux.submit(ibm(release_at="predict"))
    h.until(lambda: h.state(job) == "released")
    why = h.flux.last(job, events.READY).tasks[0]["why"]
    assert why.startswith("predicted: expected wait for the result"), why
    task = h.flux.last(job, events.TASK).task
    assert h.ibm.state_of(h.ibm.tasks[task])[0].value in ("QUEUED", "RUNNING")


# --- recovery without a second create --------------------------------------------------------


def test_a_lost_create_answer_is_found_again_not_created_twice():
    h = Harness()
    h.ibm.lose_answers = 1
    job = h.flux.submit(ibm(release_at="running"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    assert h.ibm.count("submit") == 1 and h.ibm.count("find") == 1
    assert h.flux.last(job, events.TASK).task == next(iter(h.ibm.tasks))
    assert h.flux.last(job, events.RETRY).operation == "create"
    assert h.service.counters.tasks_found == 1


def test_a_restart_after_the_create_finds_the_task_by_its_token():
    """The service recorded qpu-submit, the create landed, and the service died before
    it heard the job id: its successor finds the job (find_task since the recorded
    time) and never creates a second one."""
    h = Harness()
    h.ibm.lose_answers = 1
    job = h.flux.submit(ibm(release_at="running"))
    h.until(lambda: h.ibm.count("submit") == 1)
    assert not h.flux.decoded(job, events.TASK)
    h2 = h.restart()
    h2.until(lambda: h2.flux.decoded(job, events.TASK))
    assert h2.ibm.count("submit") == 1 and h2.ibm.count("find") == 1
    assert h2.service.counters.tasks_found == 1 and h2.service.counters.tasks_created == 0
    h2.until(lambda: h2.state(job) == "released")
    assert h2.flux.jobs[job].release["task"] == next(iter(h2.ibm.tasks))


def test_a_restart_with_the_task_recorded_reattaches_and_keeps_the_estimate():
    h = Harness()
    job = h.flux.submit(ibm(release_at=1))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h2 = h.restart()
    h2.until(lambda: h2.state(job) == "released")
    assert h2.ibm.count("submit") == 1 and h2.ibm.count("find") == 0
    unit_why = h2.flux.last(job, events.READY).tasks[0]["why"]
    assert "pending" in unit_why  # the recorded ahead, or the probe's pending count


# --- sessions ----------------------------------------------------------------------------------


def test_a_session_is_recorded_ridden_kept_while_the_job_runs_then_closed():
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    h.until(lambda: h.state(job) == "released")
    opened = h.flux.last(job, events.SESSION)
    assert (opened.requested, opened.mode, opened.reason) == ("dedicated", "dedicated", None)
    [session_id] = h.ibm.sessions
    task = h.flux.last(job, events.TASK).task
    assert h.ibm.sessions[session_id]["jobs"] == [task]
    assert h.flux.last(job, events.SUBMIT).session == opened.fingerprint
    assert h.flux.jobs[job].annotations["qpu_session"] == f"dedicated {opened.fingerprint}"
    assert session_id not in everything_posted(h)  # the id is a secret
    h.run(10.0)
    assert h.ibm.open_sessions() == [session_id]  # the job runs: its own tasks may ride it
    h.flux.finish(job)
    h.until(lambda: not h.ibm.open_sessions())
    assert h.service.counters.sessions_closed == 1 and h.ibm.count("close_session") == 1


def test_a_session_is_given_the_jobs_budget_as_its_cost_limit(tmp_path):
    # No site policy: the job's qpu.max_cost; without one, no limit.
    h = Harness()
    capped = h.flux.submit(ibm(release_at="running", session="dedicated", max_cost=7.5))
    h.until(lambda: h.state(capped) == "released")
    free = h.flux.submit(ibm(release_at="running", session="batch"))
    h.until(lambda: h.state(free) == "released")
    assert h.ibm.cost_limits == [7.5, None]
    # A spend quota with less left than the cap: what the quota has left.
    ledger = {"path": str(tmp_path / "ledger.db")}
    quota = {"limits": [{"user": "*", "period": "day", "spend": 5.0}]}
    h = Harness(site=SitePolicy.from_config({"ledger": ledger, "quota": quota}))
    job = h.flux.submit(ibm(release_at="running", session="dedicated", max_cost=7.5))
    h.until(lambda: h.state(job) == "released")
    assert h.ibm.cost_limits == [5.0]


def test_a_cancelled_held_job_closes_its_session():
    h = Harness()
    job = h.flux.submit(ibm(session="batch"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    assert h.ibm.open_sessions()
    h.flux.cancel(job)
    h.until(lambda: not h.ibm.open_sessions())
    assert h.ibm.count("cancel") == 1  # its task too


def test_a_failed_job_records_the_close_and_closes_its_session():
    h = Harness()
    job = h.flux.submit(ibm(session="dedicated"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.ibm.tasks[h.flux.last(job, events.TASK).task].failed = "calibration drifted"
    h.until(lambda: h.state(job) == "failed")
    closed = h.flux.last(job, events.SESSION_CLOSED)
    assert closed.fingerprint == h.flux.last(job, events.SESSION).fingerprint
    assert "calibration drifted" in closed.reason
    h.until(lambda: not h.ibm.open_sessions())


def test_the_open_plan_falls_back_to_batch_with_one_line():
    h = Harness()
    h.ibm.open_plan = True
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    h.until(lambda: h.state(job) == "released")
    opened = h.flux.last(job, events.SESSION)
    assert (opened.requested, opened.mode) == ("dedicated", "batch")
    assert "1352" in opened.reason and "batch" in opened.reason


def test_a_vendor_without_sessions_runs_single_jobs_and_says_so():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha", "release_at": 1, "session": "batch"})
    h.until(lambda: h.state(job) == "released")
    opened = h.flux.last(job, events.SESSION)
    assert opened.mode == "job" and opened.fingerprint is None
    assert "has no sessions" in opened.reason


def test_after_a_restart_a_released_jobs_session_is_closed_when_it_ends():
    """kill -9 after the release: the successor finds the session from the job's
    persistent memo and eventlog, its id in the kept session keys, and closes it once
    the job has ended; the key goes with the close."""
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    h.until(lambda: h.state(job) == "released")
    assert len(h.keys.kept()) == 1
    h2 = h.restart()
    h2.run(5.0)
    assert h2.ibm.open_sessions()  # the job still runs
    h2.flux.finish(job)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.ibm.count("session_of") == 0 and h2.service.counters.sessions_closed == 1
    assert not h2.keys.kept()
    h3 = h2.restart()  # the job's memo still names the session: read back, not re-closed
    h3.run(3.0)
    assert h3.ibm.count("session_of") == 1 and h3.ibm.count("close_session") == 1
    assert h3.service.counters.sessions_closed == 0


def test_without_its_key_a_session_is_read_back_through_a_task_that_rode_it():
    """A successor without the kept keys (another directory, an older service) reads
    the session's id back through the job's task (session_of) to close it."""
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    h.until(lambda: h.state(job) == "released")
    h2 = Harness(
        flux=h.flux,
        vendor=h.vendor,
        clock=h.clock,
        catalog=h.catalog,
        ibm=h.ibm,
        session_keys=SessionKeys(),
    )
    h2.flux.finish(job)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.ibm.count("session_of") == 1 and h2.service.counters.sessions_closed == 1


def test_a_session_opened_just_before_a_kill_is_ridden_after_the_restart():
    """kill -9 after the open was recorded (qpu-session) but before the first task rode
    it: no task can give its id back, the kept key does; the task rides it and the
    session is closed when the job ends (a campaign of bench/faults.py found it left
    open)."""
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    while not h.flux.decoded(job, events.SESSION):  # stopped right after qpu-session
        h.service.tick()
        h.service.completions()
        h.clock.advance(0.25)
    assert h.ibm.count("submit") == 0
    [session_id] = h.ibm.sessions
    h2 = h.restart()
    h2.until(lambda: h2.state(job) == "released")
    task = h2.flux.last(job, events.TASK).task
    assert h2.ibm.sessions[session_id]["jobs"] == [task]  # rode the kept session
    assert len(h2.ibm.sessions) == 1  # no second session opened
    h2.flux.finish(job)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert not h2.keys.kept()


def test_a_session_no_job_recorded_is_closed_after_the_restart():
    """kill -9 between the vendor's open and qpu-session: no eventlog names the
    session; the successor closes the kept one and the job opens its own."""
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="dedicated"))
    while True:  # the reactor's loop, stopped right after the open was sent
        h.service.tick()
        if h.ibm.count("open_session") == 1:
            break  # the call ran; its answer waits for completions()
        h.service.completions()
        h.clock.advance(0.25)
    assert not h.flux.decoded(job, events.SESSION)
    [first] = h.ibm.sessions
    h2 = h.restart()
    h2.until(lambda: h2.state(job) == "released")
    assert first not in h2.ibm.open_sessions()
    assert len(h2.ibm.sessions) == 2  # the job's own, opened by the successor
    h2.flux.finish(job)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert not h2.keys.kept()


def test_after_a_restart_a_session_whose_job_ended_meanwhile_is_closed():
    h = Harness()
    job = h.flux.submit(ibm(release_at="running", session="batch"))
    h.until(lambda: h.state(job) == "released")
    h.flux.finish(job)  # while no service runs
    h2 = Harness(flux=h.flux, vendor=h.vendor, clock=h.clock, catalog=h.catalog, ibm=h.ibm)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.service.counters.sessions_closed == 1


def test_after_a_restart_a_held_units_session_is_closed_on_cancel():
    h = Harness()
    job = h.flux.submit(ibm(session="dedicated"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h2 = h.restart()
    h2.run(2.0)
    assert h2.ibm.count("submit") == 1 and h2.ibm.open_sessions()
    h2.flux.cancel(job)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.ibm.count("session_of") == 0  # its id was kept: no read-back


def test_a_session_opened_for_jobs_gone_meanwhile_is_closed():
    h = Harness()
    job = h.flux.submit(ibm(session="dedicated"))
    while True:  # the reactor's loop, stopped right after the open was sent
        h.service.tick()
        if h.ibm.count("open_session") == 1:
            break  # the call ran; its answer waits for completions()
        h.service.completions()
        h.clock.advance(0.25)
    h.flux.cancel(job)
    h.until(lambda: not h.ibm.open_sessions())
    assert h.ibm.count("submit") == 0


def test_the_unpositioned_estimate_is_not_used_for_a_vendor_with_positions():
    h = Harness(queues={"alpha": QueueModel(3)})
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: h.state(job) == "released")
    assert h.flux.last(job, events.READY).tasks[0]["why"] == "position 1 <= release_at 1"


def test_a_saturated_backend_is_polled_at_the_sites_pace_not_the_pending_counts():
    # A saturated backend's pending count hardly falls (other users' jobs arrive as ours
    # are served), so the drain learned from it is a lower bound of the pace, ten times
    # too slow here. Polls planned with it would come at poll_max, and a task whose own
    # run is short is never seen RUNNING: its end would be noticed up to poll_max late.
    slow = dataclasses.replace(
        FAST, poll_cold_max=120.0, poll_max=120.0, device_check_interval=120.0
    )
    catalog = parse_catalog(
        CATALOG.replace(
            "price: {per_minute: 96}, properties: {drain_seconds_per_task: 10}",
            "price: {per_minute: 96}, properties: {drain_seconds_per_task: 1}",
        )
    )
    saturated = QueueModel(300, service=1.0, refill=0.9, run=0.25)
    h = Harness(queues={"fez": saturated}, options=slow, catalog=catalog)
    job = h.flux.submit(ibm())
    h.until(lambda: h.flux.decoded(job, events.TASK))
    fake = h.ibm.tasks[h.flux.last(job, events.TASK).task]
    h.until(lambda: h.state(job) == "released", limit=900.0)
    assert h.flux.last(job, events.READY).tasks[0]["why"] == "COMPLETED"
    fez = catalog.get("fez")
    assert fez is not None
    drain = h.service.ctx.estimator.estimate(fez)
    assert drain.source == "learned" and drain.seconds_per_task > 5.0  # the lower bound
    ended = fake.created + fake.ahead * fake.service + saturated.run
    assert h.clock() - ended <= 2 * slow.poll_min + 0.25  # a couple of polls, one step


def test_a_session_closed_after_its_job_ended_is_not_found_again_after_a_restart():
    """A session closed once its released job ended leaves no event (the job can take
    none): its key is gone, so a restarted service neither looks for it nor warns that it
    cannot be found (bench/faults.py saw a false warning at every restart)."""
    h = Harness()
    job = h.flux.submit(ibm(release_at=0, session="dedicated"))
    while not h.flux.decoded(job, events.SESSION):  # the session, before any task
        h.service.tick()
        h.service.completions()
        h.clock.advance(0.25)
    h.flux.cancel(job)  # left while held, before a task rode its session
    h.until(lambda: not h.ibm.open_sessions())
    assert not h.keys.kept()
    h2 = h.restart()
    h2.run(3.0)
    assert not [m for _, m in h2.logs if "cannot be found" in m or "left open" in m]
    assert h2.ibm.count("close_session") == 1
