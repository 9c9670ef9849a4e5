"""Flux tier: variational loops (``flux quantum loop``) on real instances, driven with the
CLI as a user drives them: ``loop submit``, ``status --json``, ``wait`` and ``cancel``;
the step commands are small shell or Python scripts. The handler service is the real one
(``service start``), the vendors the emulator's Braket and IBM sides (the real SDK and the
real qrmi client), whose time runs ``SPEED`` times faster than the wall clock, so a loop
runs by itself and the tests wait for its events (``loop wait``, ``flux job
wait-event``, the emulator's own state). The site's ledger is on, so every task's
settled cost reaches its step's eventlog and the loop's journal.

Each test gets a world of its own (an emulator, an instance with QRMI's settings for the
service, the service), so counts at the emulator are the test's own. A task that must
stay queued waits behind another user's long task (``World.blocker``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loop_world import TASK_COST, World
from qpu_setup import event_time

from flux_quantum.vendors.base import TaskState

pytestmark = pytest.mark.flux


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()
    assert w.inst.stop() == 0, w.inst.broker_log()


def test_a_loop_runs_its_iterations_as_held_steps_one_task_each(world: World) -> None:
    loop = world.submit_loop("vqe", "--qpu=local:q-loop", "--max-iterations=4")
    done = world.wait_loop(loop)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vqe: max-iterations after iteration 3: 4 iterations done" in done.stdout
    status = world.loop_status(loop)
    assert (status["state"], status["iteration"], status["device"]) == (
        "max-iterations",
        3,
        "local:q-loop",
    )
    steps = status["steps"]
    assert [s["iteration"] for s in steps] == [0, 1, 2, 3]
    # iteration k ran program k: |0>, X|0>, |0>, X|0> (each step wrote the next one)
    assert [s["value"] for s in steps] == [0.0, 1.0, 0.0, 1.0]
    assert [s["rc"] for s in steps] == [0, 0, 0, 0]
    assert [s["cost"] for s in steps] == [pytest.approx(TASK_COST)] * 4
    assert status["spent"] == pytest.approx(4 * TASK_COST) and status["unsettled"] == 0
    assert (status["best"], status["best_iteration"]) == (0.0, 0)
    state = json.loads((Path(status["directory"]) / "state.json").read_text())
    assert state == {"values": [0.0, 1.0, 0.0, 1.0]}
    # one step job per iteration, named and marked as flux jobs shows them
    rows = world.step_rows(loop)
    assert [r[1:] for r in rows] == [[f"vqe.{k}", "vqe", str(k)] for k in range(4)]
    assert [r[0] for r in rows] == [s["job"] for s in steps]
    # exactly one task per iteration at the emulator: the steps' own, in order
    tasks = [s["task"] for s in steps]
    assert world.emu.task_arns() == tasks and len(set(tasks)) == 4
    for step in steps:
        job, task = step["job"], step["task"]
        assert world.context(job, "qpu-task")["task"] == task
        assert world.jobspec_qpu(job)["loop"] == "vqe"
        # held in DEPEND with no node while its task waited: it left DEPEND, and got
        # its allocation, only after the emulator had ended the task
        ended = world.ended_at(task)
        assert event_time(world, job, "qpu-task") < ended
        assert event_time(world, job, "depend") >= ended
        assert event_time(world, job, "alloc") >= ended
        assert world.context(job, "qpu-ready")["tasks"][0]["why"] == "COMPLETED"


def test_the_service_killed_mid_loop_each_iteration_gets_exactly_one_task(world: World) -> None:
    loop = world.submit_loop(
        "killed", "--qpu=local:q-kill", "--max-iterations=4", command=("sh", "step.sh")
    )
    # kill -9 while step 1 is held with its task created (2 s of wall time to run) ...
    first = world.step_job(loop, 1)
    world.wait_event(first, "qpu-task", timeout=60)
    killed_held = time.time()
    world.kill_service()
    # ... and just after step 2 has submitted step 3
    world.wait_event(world.step_job(loop, 2), "finish", timeout=60)
    world.kill_service()
    done = world.wait_loop(loop)
    assert done.returncode == 0, done.stdout + done.stderr
    assert event_time(world, first, "qpu-release") > killed_held
    status = world.loop_status(loop)
    steps = status["steps"]
    assert [s["iteration"] for s in steps] == [0, 1, 2, 3]
    assert [s["value"] for s in steps] == [0.0, 1.0, 2.0, 3.0]  # no iteration twice
    tasks = [s["task"] for s in steps]
    assert world.emu.task_arns() == tasks and len(set(tasks)) == 4
    # each step created its task once, with one token, never retried under another
    creates = [c for c in world.emu.calls if c.operation == "CreateQuantumTask"]
    assert sorted({c.task for c in creates}) == sorted(tasks)
    for step in steps:
        tokens = {
            e["context"]["token"] for e in world.events(step["job"]) if e["name"] == "qpu-submit"
        }
        assert len(tokens) == 1, (step, tokens)
    assert len(world.step_rows(loop)) == 4
    supervisor = world.status()["supervisor"]
    assert supervisor["restarts"] == 2 and supervisor["last_exit"] == "killed by SIGKILL"


def test_a_loop_cancelled_while_a_later_step_is_held_cancels_its_task(world: World) -> None:
    loop = world.submit_loop("stopped", "--qpu=local:q-hold", command=("sh", "step.sh"))
    first = world.step_job(loop, 0)
    world.wait_event(first, "qpu-task", timeout=60)
    other = world.blocker("q-hold")  # runs after step 0's task, for 50 s of wall time
    held = world.step_job(loop, 1)
    world.wait_event(held, "qpu-task", timeout=60)
    task = world.context(held, "qpu-task")["task"]
    assert world.task_state(task) is TaskState.QUEUED
    assert world.loop_status(loop)["state"] == "held"
    world.loop("cancel", "-m", "enough of this", loop)
    world.wait_event(held, "clean", timeout=60)
    assert world.context(held, "exception")["note"] == "enough of this"
    assert "alloc" not in world.names(held)
    world.until(lambda: world.task_state(task) is TaskState.CANCELLED)
    assert world.emu.call_count("CancelQuantumTask", target=task) == 1
    assert world.task_state(other) is TaskState.RUNNING  # only the loop's task
    status = world.loop_status(loop)
    assert (status["state"], status["iteration"], status["reason"]) == (
        "cancelled",
        1,
        "enough of this",
    )
    done = world.wait_loop(loop)
    assert done.returncode == 1 and "stopped: cancelled after iteration 1" in done.stdout
    assert [r[1] for r in world.step_rows(loop)] == ["stopped.0", "stopped.1"]
    assert [s["iteration"] for s in status["steps"]] == [0, 1]
    assert len(world.emu.task_arns()) == 3  # step 0's, step 1's and the other user's


def test_a_step_that_exits_non_zero_ends_the_loop_failed(world: World) -> None:
    loop = world.submit_loop("exits", "--qpu=local:q-loop", command=("sh", "step.sh", "1"))
    done = world.wait_loop(loop)
    assert done.returncode == 1, done.stdout + done.stderr
    status = world.loop_status(loop)
    job = status["steps"][1]["job"]
    assert status["state"] == "failed"
    assert status["reason"] == f"step 1 (job {job}) exited 3"
    assert f"exits: failed after iteration 1: step 1 (job {job}) exited 3" in done.stdout
    assert [r[1] for r in world.step_rows(loop)] == ["exits.0", "exits.1"]
    assert len(world.emu.task_arns()) == 2


def test_a_step_whose_task_fails_at_the_vendor_ends_the_loop_failed(world: World) -> None:
    loop = world.submit_loop("broken", "--qpu=local:q-fail", command=("sh", "step.sh"))
    done = world.wait_loop(loop)
    assert done.returncode == 1, done.stdout + done.stderr
    status = world.loop_status(loop)
    job = status["steps"][1]["job"]
    note = world.context(job, "exception")["note"]
    assert "calibration drifted" in note
    assert status["reason"] == f"step 1 (job {job}) ended: {note}"
    assert "alloc" not in world.names(job)  # it never ran
    assert [r[1] for r in world.step_rows(loop)] == ["broken.0", "broken.1"]
    [_, failed] = world.emu.task_arns()
    assert world.task_state(failed) is TaskState.FAILED


def test_later_steps_are_pinned_to_the_device_the_first_chose(world: World) -> None:
    loop = world.submit_loop(
        "pinned",
        "--qpu=local:any",
        "--policy=min-wait",
        "--setattr=qpu.min_qubits=30",  # q-pina or q-pinb
        "--max-iterations=3",
        command=("sh", "step.sh"),
    )
    first = world.step_job(loop, 0)
    world.wait_event(first, "qpu-task", timeout=60)
    chosen = world.context(first, "qpu-select")["explanation"]["chosen"]
    assert chosen in ("q-pina", "q-pinb")
    # the chosen device gets busy: min-wait alone would now choose the other one
    other = world.blocker(chosen)
    done = world.wait_loop(loop, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    status = world.loop_status(loop)
    assert status["device"] == f"local:{chosen}"
    assert [s["device"] for s in status["steps"]] == [f"local:{chosen}"] * 3
    asked = [world.jobspec_qpu(s["job"]) for s in status["steps"]]
    assert asked[0]["device"] == "local:any" and asked[0]["policy"] == "min-wait"
    for later in asked[1:]:
        assert later["device"] == f"local:{chosen}" and "policy" not in later
    arn = world.devices.get(chosen).id
    for step in status["steps"]:
        assert world.context(step["job"], "qpu-task")["device"] == chosen
    creates = [c for c in world.emu.calls if c.operation == "CreateQuantumTask"]
    assert {c.target for c in creates if c.task != other} == {arn}


def test_a_session_loop_rides_one_session_closed_after_the_loop(world: World) -> None:
    loop = world.submit_loop(
        "sess", "--qpu=ibm:kingston", "--session=dedicated", "--max-iterations=3",
        command=("sh", "step.sh"),
    )  # fmt: skip
    done = world.wait_loop(loop)
    assert done.returncode == 0, done.stdout + done.stderr
    status = world.loop_status(loop)
    tasks = [s["task"] for s in status["steps"]]
    [session] = world.emu.ibm.session_ids()
    assert world.emu.ibm.session_jobs(session) == tasks and len(set(tasks)) == 3
    assert world.emu.ibm.job_ids("ibm_kingston") == tasks
    opened = world.context(status["steps"][0]["job"], "qpu-session")
    assert (opened["mode"], opened["loop"]) == ("dedicated", "sess")
    for step in status["steps"][1:]:
        joined = world.context(step["job"], "qpu-session")
        assert joined["fingerprint"] == opened["fingerprint"] and "joined" in joined
    world.until(lambda: world.closed(session), timeout=60)
    # told to close (no more jobs) only after the last step ended
    closing = [
        c.t
        for c in world.emu.calls
        if c.target == session and c.operation in ("UpdateSession", "CloseSession")
    ]
    assert closing and world.clock.wall(min(closing)) >= event_time(world, status["job"], "finish")
    counters = world.status()["counters"]
    assert (counters["sessions_opened"], counters["sessions_joined"]) == (1, 2)
    assert world.emu.call_count("CreateSession") == 1


def test_a_cancelled_session_loop_closes_the_session_its_steps_rode(world: World) -> None:
    gate = world.inst.workdir / "go"
    loop = world.submit_loop(
        "sess-cancel", "--qpu=ibm:kingston", "--session=dedicated",
        command=("sh", "gated.sh", str(gate)),
    )  # fmt: skip
    first = world.step_job(loop, 0)
    world.wait_event(first, "qpu-task", timeout=60)
    other = world.blocker("kingston")
    world.wait_event(first, "start", timeout=60)  # step 0's task is done
    # Once nothing of the session ran for IBM's interactive TTL, the backend serves the
    # other user's job: step 1's job then waits behind it.
    world.until(lambda: world.task_state(other) is TaskState.RUNNING, timeout=60)
    gate.touch()
    held = world.step_job(loop, 1)
    world.wait_event(held, "qpu-task", timeout=60)
    task = world.context(held, "qpu-task")["task"]
    assert world.task_state(task) is TaskState.QUEUED
    [session] = world.emu.ibm.session_ids()
    assert world.emu.ibm.session_jobs(session) == [world.context(first, "qpu-task")["task"], task]
    assert not world.closed(session)
    world.loop("cancel", loop)
    world.wait_event(held, "clean", timeout=60)
    assert "alloc" not in world.names(held)
    world.until(lambda: world.closed(session), timeout=60)
    world.until(lambda: world.task_state(task) is TaskState.CANCELLED)
    assert world.task_state(other) is TaskState.RUNNING
    status = world.loop_status(loop)
    assert (status["state"], status["iteration"]) == ("cancelled", 1)
    assert status["reason"] == "loop cancelled by its user"
    assert [r[1] for r in world.step_rows(loop)] == ["sess-cancel.0", "sess-cancel.1"]
    assert world.emu.call_count("CreateSession") == 1


def test_max_cost_ends_the_loop_when_its_budget_is_spent(world: World) -> None:
    # Two tasks exactly: the loop ends 'budget' after step 1, before submitting step 2.
    exact = world.submit_loop(
        "budget", "--qpu=local:q-cost", f"--max-cost={2 * TASK_COST}", command=("sh", "step.sh")
    )
    # Two tasks and a half: the $0.20 left would not pay a third task like the second,
    # so the loop ends 'budget' too, and no step is submitted for the service to refuse.
    short = world.submit_loop(
        "short", "--qpu=local:q-cost", f"--max-cost={2.5 * TASK_COST}", command=("sh", "step.sh")
    )
    done = world.wait_loop(exact)
    assert done.returncode == 1, done.stdout + done.stderr
    status = world.loop_status(exact)
    assert status["state"] == "budget" and status["spent"] == pytest.approx(2 * TASK_COST)
    assert status["reason"] == "spent 0.80 of max-cost 0.80"
    assert [r[1] for r in world.step_rows(exact)] == ["budget.0", "budget.1"]
    budgets = [world.jobspec_qpu(s["job"])["max_cost"] for s in status["steps"]]
    assert budgets == [pytest.approx(0.8), pytest.approx(0.4)]
    done = world.wait_loop(short)
    assert done.returncode == 1, done.stdout + done.stderr
    status = world.loop_status(short)
    assert status["state"] == "budget", status
    assert "the 0.20 left would not pay another task like step 1's (0.40)" in status["reason"]
    assert [r[1] for r in world.step_rows(short)] == ["short.0", "short.1"]
    # two tasks for each loop
    assert len(world.emu.task_arns()) == 4
