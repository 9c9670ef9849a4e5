"""Flux tier: what follows a loop's step, decided by each step on a real instance.

The world of the loop tests (``loop_world.World``: a real instance of two cores, the real
service, the emulator's Braket side at ``SPEED`` times the wall clock); the loop's steps
ask for one core, another user's job holds the other one, and a job queued while step 0
works would take the core step 0 gives back, so the forecast wait for a step's nodes
(that job's time limit: no job has finished yet to learn shares from) is known. Each step
plans the next one with the default time weight (0.25: keep while the result is due
within a fifth of the wait for nodes), or its own:

- a step keeps its nodes across a short vendor wait and runs the next iteration in
  place, when getting nodes back would cost far more (the queued job would hold the
  core for an hour);
- a step gives its nodes back and its successor is released early, when the next
  result is far against what the loop's own time weight (0.01) lets it hold its nodes
  for (the previous task waited behind another user's long task).

Each iteration has one task at the emulator, and ``flux quantum loop status`` says the
plan and why.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from loop_setup import PROGRAM
from loop_world import LONG_SHOTS, World
from qpu_setup import event_time

pytestmark = pytest.mark.flux


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.inst.run(["flux", "cancel", "--all", "--quiet"], check=False)
    w.close()
    assert w.inst.stop() == 0, w.inst.broker_log()


def other_job(world: World, limit: str) -> str:
    """Another user's job on the other core, running until its time limit."""
    jobid = world.inst.run(["flux", "submit", "-n1", "-t", limit, "sleep", "3600"]).stdout.strip()
    world.wait_event(jobid, "start", timeout=60)
    return jobid


def queued(world: World, limit: str) -> str:
    """A job of one core and time limit ``limit``, queued (past its priority) behind the
    cores the other job and step 0 hold."""
    jobid = world.inst.run(["flux", "submit", "-n1", "-t", limit, "sleep", "3600"]).stdout.strip()
    world.wait_event(jobid, "priority", timeout=60)
    return jobid


def long_task(world: World, device: str, token: str) -> str:
    """Another user's long task on ``device`` (1000 s of device time), by its token."""
    task = world.vendor.submit(world.devices.get(device), PROGRAM, LONG_SHOTS, token)
    return task.task_id


def steps_text(world: World, name: str) -> str:
    return world.loop("status", "--steps", name).stdout


def test_a_step_keeps_its_nodes_across_a_short_wait_and_runs_the_next_iteration_in_place(
    world: World,
) -> None:
    other_job(world, "1h")
    gate = world.inst.workdir / "go"
    loop = world.submit_loop(
        "kept", "--qpu=local:q-loop", "--max-iterations=2", "-n1", "-t", "10m",
        command=world.gated_step(gate),
    )  # fmt: skip
    # Once step 0 runs, and before it plans step 1, a job of an hour queues for the core
    # it would give back.
    world.wait_event(world.step_job(loop, 0), "start", timeout=60)
    queued(world, "1h")
    gate.touch()
    done = world.wait_loop(loop)
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(world.loop("status", "--json", "--steps", loop).stdout)
    first, second = status["steps"]
    plan = second["plan"]
    assert plan["action"] == "keep" and plan["by"] == first["job"]
    assert plan["reason"].startswith("keep: the next result is expected in")
    assert plan["node_wait"] > 3000  # the other job's hour
    assert second["hold"]["outcome"] == "in place"
    assert second["ran_in"] == first["job"]
    # iteration 1 ran program 1 (X|0>) on its own task, read through its own step job
    assert [s["value"] for s in status["steps"]] == [0.0, 1.0]
    tasks = [s["task"] for s in status["steps"]]
    assert world.emu.task_arns() == tasks and len(set(tasks)) == 2
    assert world.context(second["job"], "qpu-task")["task"] == tasks[1]
    # step 1's job waited for step 0's, never got a node, and was cancelled after
    # iteration 1 ran in place
    names = world.names(second["job"])
    assert "alloc" not in names
    note = world.context(second["job"], "exception")["note"]
    assert note == f"iteration 1 of loop kept ran in place in job {int_id(world, first['job'])}"
    assert second["waits"]["nodes"] is None
    # step 0's job held its nodes until task 1 had ended, then ran iteration 1
    ended = world.ended_at(tasks[1])
    assert event_time(world, first["job"], "finish") > ended
    text = steps_text(world, loop)
    assert "keep" in text and "in place" in text and f"{second['job']} (in {first['job']})" in text


def test_a_step_gives_its_nodes_back_and_its_successor_is_released_early(world: World) -> None:
    first_blocker = world.blocker("q-hold")  # task 0 waits 50 s of wall time behind it
    other_job(world, "1h")
    # The loop's own weight: a second of its time is worth a hundredth of a second of
    # idle nodes, so it holds them for a result due within 1 % of the wait for nodes
    # (36 s of the hour), and task 0 took longer.
    gate = world.inst.workdir / "go"
    loop = world.submit_loop(
        "early", "--qpu=local:q-hold", "--max-iterations=2", "-n1", "-t", "10m",
        "--time-weight=0.01", command=world.gated_step(gate),
    )  # fmt: skip
    first = world.step_job(loop, 0)
    world.wait_event(first, "start", timeout=120)
    # Once step 0 runs, and before it plans step 1: task 1 will wait behind another long
    # task (the service expects about 100 s: two tasks at the drain it learned from task
    # 0's wait), and a job of 150 s queues for the core step 0 gives back: step 1's
    # nodes come later.
    second_blocker = long_task(world, "q-hold", "other-again")
    queued(world, "150s")
    gate.touch()
    done = world.wait_loop(loop, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(world.loop("status", "--json", "--steps", loop).stdout)
    first, second = status["steps"]
    plan = second["plan"]
    assert plan["action"] == "early", plan
    assert plan["reason"].startswith("release early: the next step enters the queue when its")
    assert plan["vendor_source"] == "previous task" and plan["vendor_wait"] > 30
    assert second["hold"] is None and second["ran_in"] is None
    # the service released step 1 by its wait for nodes, before its task had ended
    released = world.context(second["job"], "qpu-ready")["tasks"][0]["why"]
    assert released.startswith("node lead: expected wait for the result"), released
    assert second["waits"]["released"] == released and second["waits"]["task"] is None
    tasks = [s["task"] for s in status["steps"]]
    assert world.emu.task_arns() == [first_blocker, tasks[0], second_blocker, tasks[1]]
    assert event_time(world, second["job"], "qpu-release") < world.ended_at(tasks[1])
    assert "alloc" in world.names(second["job"]) and second["waits"]["nodes"] > 0
    assert [s["value"] for s in status["steps"]] == [0.0, 1.0]
    text = steps_text(world, loop)
    assert "early" in text and "release early" in text


def int_id(world: World, jobid: str) -> int:
    out = world.inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout
    return int(out.strip())
