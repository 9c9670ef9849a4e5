"""Unit tier: one vendor session for the steps of a variational loop (``qpu.loop`` with
``qpu.session``), on the service's fakes (Flux in memory, an IBM-like vendor with
sessions, a manual clock). Each step is a unit of its own: the first step's task opens
the session, a later step's task on the same device rides it, and it is closed
``loop_linger`` after the loop's last job and unit are gone, also across a restart."""

from __future__ import annotations

import json

from service_fakes import CATALOG, FAST, Harness, QueueModel

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events

LINGER = FAST.loop_linger  # the default: 5 s


def step(loop: str = "l1", device: str = "ibm:fez", **more) -> dict:
    return {"device": device, "session": "dedicated", "loop": loop, **more}


def session_id(h: Harness) -> str:
    [found] = h.ibm.sessions
    return found


def task_of(h: Harness, jobid: int) -> str:
    return h.flux.last(jobid, events.TASK).task


def two_steps(h: Harness) -> tuple[int, int]:
    """The first step released (it runs), the second held with its task in the session."""
    first = h.flux.submit(step())
    h.until(lambda: h.state(first) == "released")
    second = h.flux.submit(step())
    h.until(lambda: h.flux.decoded(second, events.TASK))
    return first, second


def released_and_ended_after(h: Harness, jobid: int, then=None) -> None:
    """The step is released, runs (``then`` submits the next step), and ends."""
    h.until(lambda: h.state(jobid) == "released")
    if then is not None:
        then()
    h.flux.finish(jobid)


def test_two_steps_ride_one_session_closed_a_linger_after_the_last_ended():
    h = Harness()
    first = h.flux.submit(step())
    h.until(lambda: h.state(first) == "released")
    opened = h.flux.last(first, events.SESSION)
    assert (opened.loop, opened.joined, opened.mode) == ("l1", None, "dedicated")
    h.flux.finish(first)  # the first step ended; its successor is not held yet
    h.run(LINGER / 2)
    second = h.flux.submit(step())
    h.until(lambda: h.flux.decoded(second, events.TASK))
    joined = h.flux.last(second, events.SESSION)
    assert (joined.fingerprint, joined.joined, joined.loop) == (opened.fingerprint, first, "l1")
    assert h.flux.last(second, events.SUBMIT).session == opened.fingerprint
    assert h.flux.jobs[second].annotations["qpu_session"] == f"dedicated {opened.fingerprint}"
    sid = session_id(h)
    assert h.ibm.sessions[sid]["jobs"] == [task_of(h, first), task_of(h, second)]
    assert sid not in json.dumps([e.to_dict() for e in h.flux.jobs[second].events])
    h.until(lambda: h.state(second) == "released")
    h.run(3 * LINGER)
    assert h.ibm.open_sessions() == [sid]  # the second step runs
    h.flux.finish(second)
    ended = h.clock()
    h.until(lambda: not h.ibm.open_sessions())
    assert h.clock() - ended >= LINGER
    counters = h.service.counters
    assert (counters.sessions_opened, counters.sessions_joined) == (1, 1)
    assert counters.sessions_closed == 1 and h.ibm.count("close_session") == 1
    assert h.ibm.count("open_session") == 1
    assert not h.service.sessions.leases


def test_a_step_that_comes_after_the_linger_opens_a_new_session():
    h = Harness()
    first = h.flux.submit(step())
    released_and_ended_after(h, first)
    h.until(lambda: not h.ibm.open_sessions())
    second = h.flux.submit(step())
    h.until(lambda: h.flux.decoded(second, events.TASK))
    assert h.ibm.count("open_session") == 2 and len(h.ibm.open_sessions()) == 1
    assert h.flux.last(second, events.SESSION).joined is None


def test_another_device_or_another_users_loop_opens_its_own_session():
    torino = (
        "  - {name: torino, vendor: ibm, id: ibm_torino, class: qpu, qubits: 133, slots: 4,\n"
        "     price: {per_minute: 96}, properties: {drain_seconds_per_task: 10}}\n"
    )
    h = Harness(catalog=parse_catalog(CATALOG + torino), queues={"torino": QueueModel(3)})
    first = h.flux.submit(step())
    other_device = h.flux.submit(step(device="ibm:torino"))
    other_user = h.flux.submit(step(), userid=2000)
    same = h.flux.submit(step(release_at="running"))
    jobs = (first, other_device, other_user, same)
    h.until(lambda: all(h.flux.decoded(j, events.TASK) for j in jobs))
    fingerprints = [h.flux.last(j, events.SESSION).fingerprint for j in jobs]
    assert len(set(fingerprints[:3])) == 3 and fingerprints[3] == fingerprints[0]
    assert h.ibm.count("open_session") == 3
    assert h.flux.last(other_device, events.SESSION).joined is None
    assert h.flux.last(same, events.SESSION).joined == first


def test_cancelling_the_loops_held_step_closes_its_session_at_once():
    h = Harness()
    held = h.flux.submit(step())
    h.until(lambda: h.flux.decoded(held, events.TASK))
    h.flux.cancel(held)
    took = h.until(lambda: not h.ibm.open_sessions())
    assert took < LINGER  # nothing of the loop is left: no linger
    assert h.ibm.count("cancel") == 1 and h.service.counters.sessions_closed == 1


def test_a_held_step_cancelled_while_the_previous_runs_keeps_the_session_for_it():
    h = Harness()
    first, second = two_steps(h)
    h.flux.cancel(second)
    h.run(3 * LINGER)
    assert len(h.ibm.open_sessions()) == 1  # the first step still runs
    h.flux.finish(first)
    h.until(lambda: not h.ibm.open_sessions())
    assert h.service.counters.sessions_closed == 1


def test_a_failed_step_closes_the_session_only_when_no_other_job_needs_it():
    h = Harness()
    first, second = two_steps(h)
    h.ibm.tasks[task_of(h, second)].failed = "calibration drifted"
    h.until(lambda: h.state(second) == "failed")
    assert not h.flux.decoded(second, events.SESSION_CLOSED)  # not closed: not said
    h.run(3 * LINGER)
    assert len(h.ibm.open_sessions()) == 1
    h.flux.finish(first)
    h.until(lambda: not h.ibm.open_sessions())
    # The last step of the loop fails: closed at once, and its eventlog says so.
    third = h.flux.submit(step())
    h.until(lambda: h.flux.decoded(third, events.TASK))
    assert h.flux.last(third, events.SESSION).joined is None
    h.ibm.tasks[task_of(h, third)].failed = "calibration drifted"
    h.until(lambda: h.state(third) == "failed")
    closed = h.flux.last(third, events.SESSION_CLOSED)
    assert "calibration drifted" in closed.reason
    h.until(lambda: not h.ibm.open_sessions())
    assert h.service.counters.sessions_closed == 2


def test_a_step_adopted_after_a_restart_rides_the_session_read_back_through_its_task():
    """kill -9 while the first step runs: the successor finds the loop's session from
    the first step's memo and eventlog, and the next step, submitted then, rides it."""
    h = Harness()
    first = h.flux.submit(step())
    h.until(lambda: h.state(first) == "released")
    sid = session_id(h)
    h2 = h.restart()
    h2.run(2.0)
    second = h2.flux.submit(step())
    h2.flux.finish(first)
    h2.until(lambda: h2.flux.decoded(second, events.TASK))
    assert h2.ibm.count("open_session") == 1 and h2.ibm.count("session_of") == 1
    assert h2.ibm.sessions[sid]["jobs"] == [task_of(h2, first), task_of(h2, second)]
    assert h2.flux.last(second, events.SESSION).joined == first
    h2.until(lambda: h2.state(second) == "released")
    h2.run(3 * LINGER)
    assert h2.ibm.open_sessions() == [sid]
    h2.flux.finish(second)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.service.counters.sessions_closed == 1 and h2.ibm.count("close_session") == 1


def test_a_restart_while_a_step_is_held_keeps_one_session_for_it_and_the_running_one():
    """kill -9 with the second step held in the session and the first still running:
    the held step's unit and the running job are gathered on one lease; the first
    ending does not close it, the held step's end (after a third step joined) does."""
    h = Harness()
    first, second = two_steps(h)
    sid = session_id(h)
    h2 = h.restart()
    h2.run(2.0)
    assert len(h2.service.sessions.leases) == 1
    [lease] = h2.service.sessions.leases.values()
    assert lease.jobs == {first} and lease.loop == (1000, "l1")
    h2.flux.finish(first)
    h2.run(3 * LINGER)
    assert h2.ibm.open_sessions() == [sid]  # the second step is held for it
    released_and_ended_after(h2, second, then=lambda: h2.flux.submit(step()))
    third = max(h2.flux.jobs)
    h2.until(lambda: h2.flux.decoded(third, events.TASK))
    assert h2.ibm.count("open_session") == 1
    assert h2.flux.last(third, events.SESSION).joined == first  # the unit that opened it
    assert h2.ibm.sessions[sid]["jobs"][-1] == task_of(h2, third)
    released_and_ended_after(h2, third)
    h2.until(lambda: not h2.ibm.open_sessions())
    assert h2.ibm.count("close_session") == 1 and h2.ibm.count("session_of") == 1


def test_a_loops_session_whose_steps_all_ended_while_the_service_was_down_is_closed():
    h = Harness()
    first = h.flux.submit(step())
    released_and_ended_after(h, first)
    h2 = h.restart()  # the first check finds it, with no job alive and no step held
    took = h2.until(lambda: not h2.ibm.open_sessions())
    assert LINGER <= took < 2 * LINGER
    assert h2.ibm.count("session_of") == 0  # its id was kept: no read-back
    assert h2.service.counters.sessions_closed == 1
