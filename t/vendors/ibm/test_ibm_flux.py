"""Flux tier: IBM Quantum through the handler service on a real instance, the real qrmi
client against the project's emulator (its IBM side, on a ManualClock the tests
advance). A site's set-up: ``vendor: ibm`` devices reached through QRMI's own settings
(``<backend>_QRMI_IBM_QCS_*``) in the instance's environment; ``local`` twins (the
emulator's URL) where a test needs the emulator's short create settle time.

Stories: a job held while its IBM job is pending and released at the estimated front of
the queue (IBM gives no position), its consumer reading counts; a session opened with the
first task, ridden by the job's own later task (``flux quantum task --session-env``),
closed when the job ends, also when the service was killed -9 or stopped meanwhile; a
kill -9 between the recorded create and its answer, after which the job is found again
and never created twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from ibm_setup import Ibm

pytestmark = pytest.mark.flux


@pytest.fixture(scope="module")
def ibm(tmp_path_factory) -> Iterator[Ibm]:
    world = Ibm(tmp_path_factory.mktemp("ibm"))
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


@pytest.fixture
def service(ibm: Ibm) -> Iterator[Ibm]:
    ibm.start_service()
    yield ibm
    ibm.inst.quantum("service", "stop", check=False)


def test_held_while_pending_released_at_the_estimated_front_consumer_reads_counts(service):
    ibm = service
    jobid = ibm.submit(
        "--setattr=qpu.device=ibm:held",
        "--setattr=qpu.release_at=1",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        "flux",
        "quantum",
        "task",
        "--wait",
        "--json",
    )
    ibm.inst.wait_event(jobid, "qpu-task", timeout=40)
    submit = ibm.context(jobid, "qpu-submit")
    assert submit["ahead"] == 3 and submit["since"] <= ibm.events(jobid)[-1]["timestamp"]
    # IBM gives no position: the service shows its estimate (3 were pending before it)
    # and holds the job while the emulated queue stands still.
    position = ibm.until(lambda: ibm.memo(jobid).get("qpu_position"))
    assert position >= 3
    time.sleep(2.5)  # several polls and device probes (poll-max=2, device-check=1)
    assert ibm.inst.state(jobid) == "DEPEND" and "qpu-release" not in ibm.names(jobid)
    ibm.clock.advance(30)  # the three ahead are served: ours is the only one pending
    ibm.inst.wait_event(jobid, "qpu-release", timeout=30)
    why = ibm.context(jobid, "qpu-ready")["tasks"][0]["why"]
    assert why.startswith("estimated position 1 <= release_at 1"), why
    ibm.clock.advance(30)
    ibm.inst.wait_event(jobid, "clean", timeout=60)
    out = json.loads(ibm.inst.run(["flux", "job", "attach", jobid]).stdout)
    assert out["task"] == ibm.context(jobid, "qpu-task")["task"]
    assert sum(out["counts"].values()) == 100 and set(out["counts"]) <= {"00", "11"}
    assert len(ibm.emu.ibm.job_ids("ibm_held")) == 1


def test_session_ridden_by_the_jobs_own_task_and_closed_when_it_ends(service):
    ibm = service
    stop = ibm.inst.workdir / "stop-ride"
    consumer = (
        'eval "$(flux quantum task --session-env)" && '
        f"python3 ride.py && while [ ! -e {stop} ]; do sleep 0.1; done"
    )
    jobid = ibm.submit(
        *(f"--env={k}={v}" for k, v in ibm.secrets.items()),  # its own key: it calls IBM
        "--setattr=qpu.device=ibm:ride",
        "--setattr=qpu.session=dedicated",
        "--setattr=qpu.release_at=running",
        "--setattr=qpu.program=bell.qasm",
        "sh",
        "-c",
        consumer,
    )
    ibm.inst.wait_event(jobid, "qpu-release", timeout=40)
    opened = ibm.context(jobid, "qpu-session")
    assert (opened["requested"], opened["mode"]) == ("dedicated", "dedicated")
    [session_id] = ibm.emu.ibm.session_ids()
    assert session_id not in json.dumps(ibm.events(jobid))  # the id is a secret
    first = ibm.context(jobid, "qpu-task")["task"]
    ibm.until(lambda: len(ibm.emu.ibm.job_ids("ibm_ride")) == 2)
    later = [j for j in ibm.emu.ibm.job_ids("ibm_ride") if j != first]
    assert ibm.context(jobid, "qpu-submit")["session"] == opened["fingerprint"]
    assert ibm.emu.ibm.session_jobs(session_id) == [first, *later]  # both ride it
    assert ibm.emu.call_count("CreateSession") == 1
    time.sleep(1.0)  # several session checks while the job runs
    assert not ibm.closed(session_id)
    stop.touch()
    ibm.inst.wait_event(jobid, "clean", timeout=30)
    ibm.until(lambda: ibm.closed(session_id))
    assert ibm.status()["counters"]["sessions_closed"] >= 1


def test_session_closed_after_the_service_was_killed_while_the_job_ran(service):
    ibm = service
    stop = ibm.inst.workdir / "stop-kill"
    jobid = ibm.submit(
        "--setattr=qpu.device=ibm:kill",
        "--setattr=qpu.session=batch",
        "--setattr=qpu.release_at=running",
        "sh",
        "-c",
        f"while [ ! -e {stop} ]; do sleep 0.1; done",
    )
    ibm.inst.wait_event(jobid, "qpu-release", timeout=40)
    assert ibm.memo(jobid)["qpu_session"].startswith("batch ")
    session_id = ibm.until(lambda: [s for s in ibm.emu.ibm.session_ids() if not ibm.closed(s)])[0]
    ibm.kill_service()
    time.sleep(1.0)
    assert not ibm.closed(session_id)  # the job still runs: its session stays
    stop.touch()
    ibm.inst.wait_event(jobid, "clean", timeout=30)
    ibm.until(lambda: ibm.closed(session_id))
    assert len(ibm.emu.ibm.job_ids("ibm_kill")) == 1  # re-attached, not created again


def test_session_of_a_job_that_ended_while_the_service_was_down_is_closed(service):
    ibm = service
    stop = ibm.inst.workdir / "stop-down"
    jobid = ibm.submit(
        "--setattr=qpu.device=ibm:down",
        "--setattr=qpu.session=dedicated",
        "--setattr=qpu.release_at=running",
        "sh",
        "-c",
        f"while [ ! -e {stop} ]; do sleep 0.1; done",
    )
    ibm.inst.wait_event(jobid, "qpu-release", timeout=40)
    before = set(ibm.emu.ibm.session_ids())
    [session_id] = [s for s in before if not ibm.closed(s)]
    ibm.inst.quantum("service", "stop")
    stop.touch()
    ibm.inst.wait_event(jobid, "clean", timeout=30)
    time.sleep(0.5)
    assert not ibm.closed(session_id)
    ibm.start_service()  # finds the ended job by its qpu_session memo and closes it
    ibm.until(lambda: ibm.closed(session_id))


def test_a_cancelled_held_job_closes_its_session(service):
    ibm = service
    jobid = ibm.submit(
        "--setattr=qpu.device=ibm:cancel",
        "--setattr=qpu.session=dedicated",
        "true",
        at_front=False,  # release_at=done: held until the emulated clock moves
    )
    ibm.inst.wait_event(jobid, "qpu-task", timeout=40)
    ibm.inst.wait_event(jobid, "qpu-session", timeout=10)
    open_ids = [s for s in ibm.emu.ibm.session_ids() if not ibm.closed(s)]
    assert len(open_ids) == 1
    ibm.inst.run(["flux", "cancel", jobid])
    ibm.until(lambda: ibm.closed(open_ids[0]))
    task = ibm.context(jobid, "qpu-task")["task"]
    ibm.until(lambda: ibm.emu.call_count("CancelJob", target=task) >= 1)


def test_killed_between_the_recorded_create_and_its_answer_the_job_is_found_not_created_twice(
    service,
):
    ibm = service
    jobid = ibm.submit(
        "--setattr=qpu.device=local:local-find", "--setattr=qpu.release_at=running", "true"
    )
    ibm.inst.wait_event(jobid, "qpu-submit", timeout=40)
    ibm.until(lambda: ibm.emu.ibm.job_ids("ibm_find"))  # landed; its answer is held
    assert "qpu-task" not in ibm.names(jobid)
    ibm.kill_service()
    ibm.inst.wait_event(jobid, "qpu-task", timeout=40)
    [created] = ibm.emu.ibm.job_ids("ibm_find")
    assert ibm.context(jobid, "qpu-task")["task"] == created
    counters = ibm.status()["counters"]
    assert counters["tasks_found"] == 1 and counters["tasks_created"] == 0
    ibm.clock.advance(20)
    ibm.inst.wait_event(jobid, "clean", timeout=40)
    assert ibm.emu.ibm.job_ids("ibm_find") == [created]
