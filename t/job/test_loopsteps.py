"""Unit tier: what follows a loop's step, decided and done, on the service's fakes.

The step's rank 0 (``StepRunner``, the real one) runs on a ``Harness``: Flux in memory,
a scripted vendor, a manual clock that its holds advance (the service ticks meanwhile).
``HarnessLoop`` is how the runner meets that world (``StepJobs``: submit a step as a held
job, read its task, cancel it; ``StepReader``: the cluster's queue, a job's eventlog,
memos and limit, a task's end). The cluster is a view the test sets: a queue whose
running jobs end when the test says, so the forecast wait for nodes is known; the vendor
queue gives the wait for a result. Each test covers one decision and what the service
and the step do with it:

- keep: the wait for nodes is long and the next result near: step 0 keeps its nodes,
  step 1's task is created by the service for step 1's held job (one task per
  iteration), and iteration 1 runs in place in step 0's job, which then cancels step 1's;
- release early: the next result is far: step 0 gives its nodes back at once, and the
  service releases step 1 the forecast wait for nodes before its result;
- give back: the nodes are free: step 0 ends, step 1 is released at its result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from service_fakes import Harness, QueueModel

from flux_quantum.job.consumer import ENV_JOB, ENV_TASK, JobTask, job_task_from_jobspec
from flux_quantum.job.forecast import StepForecasts
from flux_quantum.job.loop import LoopDir, LoopSpec, Resources, Submitted
from flux_quantum.job.loopsteps import StepOrder
from flux_quantum.job.steprun import StepRunner
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import Released, ReleaseInfo
from flux_quantum.service.fluxside import ClusterView
from flux_quantum.timing.node_wait import ClusterQueue, RunningJob
from flux_quantum.timing.step_plan import WEIGHT_ATTRIBUTE
from flux_quantum.vendors.base import TaskState

PROGRAM = "OPENQASM 3;\nqubit[1] q;\nbit[1] c;\nc[0] = measure q[0];\n"
WEIGHT = 3.0  # keep while the result is due within 3/4 of the wait for nodes
LIMIT = 3600.0  # each step's time limit
# The step command: program k+1 = program k, and what it saw in its environment.
COMMAND = (
    sys.executable,
    "-c",
    "import json, os, shutil\n"
    "d, k = os.environ['FLUX_QPU_LOOP_DIR'], os.environ['FLUX_QPU_ITERATION']\n"
    "shutil.copy(f'{d}/programs/{k}.qasm', os.environ['FLUX_QPU_NEXT_PROGRAM'])\n"
    "seen = {v: os.environ.get(v) for v in ('FLUX_QPU_JOB', 'FLUX_QPU_TASK')}\n"
    "open(f'{d}/seen.{k}.json', 'w').write(json.dumps(seen))\n",
)


class HarnessLoop:
    """``StepJobs`` and ``StepReader`` on a Harness: a step is a held job of the fake
    Flux with the loop's request and time weight, its time limit ``LIMIT``."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.after: dict[int, int] = {}  # a step -> the job it waits for (afterany)
        self.cancelled: dict[int, str] = {}
        self.expirations: dict[int, float] = {}

    # -- StepJobs

    def submit(self, loop: LoopDir, order: StepOrder, environ: Any) -> Submitted:
        iteration = order.iteration
        request = loop.spec.step_request(iteration, loop.program(iteration), order.device, None)
        jobid = self.h.flux.submit(request)
        attributes = self.h.flux.jobs[jobid].jobspec["attributes"]
        attributes["system"]["duration"] = LIMIT
        attributes["user"] = {WEIGHT_ATTRIBUTE: loop.spec.weight}
        if order.after is not None:
            self.after[jobid] = order.after
        record = Submitted(iteration, jobid, order.device, order.budget)
        loop.append(record)
        return record

    def task(self, jobid: int) -> JobTask | None:
        fake = self.h.flux.jobs[jobid]
        if fake.release is None:
            return None
        info = ReleaseInfo.decode(fake.release["info"])
        system = {**fake.jobspec["attributes"]["system"]}
        system.update(Released(fake.release["task"], fake.release["device"], info).to_system())
        return job_task_from_jobspec(jobid, {"attributes": {"system": system}})

    def cost(self, jobid: int) -> float | None:
        return None

    def cancel(self, jobid: int, reason: str) -> None:
        self.cancelled[jobid] = reason
        self.h.flux.cancel(jobid)

    # -- StepReader

    def queue(self, now: float) -> ClusterQueue:
        view = self.h.flux.cluster_view
        if view is None or view.queue is None:
            raise OSError("no scheduler")
        return view.queue

    def eventlog(self, jobid: int) -> Any:
        return self.h.flux.jobs[jobid].events

    def memo(self, jobid: int) -> dict[str, Any]:
        return self.h.flux.jobs[jobid].memo

    def expiration(self, jobid: int) -> float:
        return self.expirations.get(jobid, 0.0)

    def task_ended(self, jobid: int) -> bool:
        task = self.task(jobid)
        if task is None:
            return False
        state, _ = self.h.vendor.state_of(self.h.vendor.tasks[task.task_id])
        return state in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED)


def cluster(h: Harness, free: int, nodes_in: float | None = None) -> None:
    """The cluster as the service and the step see it: 16 cores, ``free`` of them free,
    the others freed by a running job ending ``nodes_in`` seconds from now. No ends in
    the classical lead's view: only the steps' own rule releases early."""
    now = h.clock()
    running = () if nodes_in is None else (RunningJob(16 - free, now - 60.0, now + nodes_in),)
    queue = ClusterQueue(now, 16, free, 4, running)
    h.flux.cluster_view = ClusterView(t=now, cores_per_node=4, free_cores=free, queue=queue)


def start(tmp_path: Path, h: Harness) -> tuple[LoopDir, HarnessLoop, StepRunner, int]:
    """A loop of two iterations on ``alpha``, step 0 released at its result (the
    cluster free meanwhile) and running: its runner (whose sleeps run the service on
    the manual clock). The test then sets the cluster step 0 ends in."""
    spec = LoopSpec(
        id="vqe",
        request={"device": "alpha", "shots": 10},
        command=COMMAND,
        resources=Resources(nodes=1, time_limit="1h"),
        max_iterations=2,
        time_weight=WEIGHT,
    )
    loop = LoopDir.create(tmp_path / "vqe", spec, PROGRAM)
    cluster(h, free=16)
    world = HarnessLoop(h)
    first = world.submit(loop, StepOrder(0), {}).jobid
    h.until(lambda: h.state(first) == "released", limit=3000, dt=1.0)
    world.expirations[first] = h.clock() + LIMIT
    runner = StepRunner(
        loop,
        first,
        COMMAND,
        {},
        world,
        StepForecasts(world),
        clock=h.clock,
        sleep=lambda dt: h.run(dt, dt=0.5),
    )
    return loop, world, runner, first


def seen(loop: LoopDir, k: int) -> dict[str, Any]:
    return json.loads((loop.path / f"seen.{k}.json").read_text())


def ready_why(h: Harness, jobid: int) -> str:
    return h.flux.last(jobid, events.READY).tasks[0]["why"]


def test_keep_holds_the_nodes_through_a_short_wait_and_runs_the_next_iteration_in_place(
    tmp_path: Path,
) -> None:
    h = Harness({"alpha": QueueModel(3, service=10.0)})  # a result ~40 s after its create
    loop, world, runner, first = start(tmp_path, h)
    cluster(h, free=0, nodes_in=1200.0)  # nodes back in 20 min
    assert runner.run(0) == 0
    history = loop.history()
    carrier = history.submitted[1]
    plan = history.plans[1].step_plan()
    assert plan.action.value == "keep" and plan.node_wait == pytest.approx(1200.0)
    assert plan.bound == pytest.approx(900.0)  # 3/4 of the wait for nodes
    assert plan.vendor_source == "previous task" and plan.vendor_wait < 60.0
    assert plan.reason.startswith("keep: the next result is expected in")
    assert world.after[carrier] == first  # step 1 waits for step 0's job
    # held until step 1's task was done, then iteration 1 ran here
    hold = history.holds[1]
    assert hold.outcome == "in place" and hold.jobid == first
    task = world.task(carrier)
    assert task is not None
    ended = h.vendor.tasks[task.task_id]
    assert hold.held == pytest.approx(ended.created + 4 * 10.0 - (h.clock() - hold.held), abs=3)
    # the service released step 1 by its wait for nodes, which step 1 spent waiting for
    # step 0's job (afterany); step 0 held on until the task had ended
    assert ready_why(h, carrier).startswith("node lead:")
    assert h.vendor.state_of(ended)[0] is TaskState.COMPLETED
    assert history.ran_in == {1: first} and history.steps[1].jobid == first
    assert seen(loop, 1) == {ENV_JOB: str(carrier), ENV_TASK: task.task_id}
    assert seen(loop, 0) == {ENV_JOB: None, ENV_TASK: None}
    # step 1's own job never ran: cancelled, after its iteration was journaled
    assert h.state(carrier) == "cancelled"
    assert world.cancelled[carrier] == f"iteration 1 of loop vqe ran in place in job {first}"
    assert history.ended is not None and history.ended.outcome == "max-iterations"
    # one task per iteration
    assert h.vendor.count("submit") == 2 and len(h.vendor.tasks) == 2


def test_release_early_gives_the_nodes_back_and_the_service_releases_by_the_wait_for_nodes(
    tmp_path: Path,
) -> None:
    h = Harness({"alpha": QueueModel(60, service=10.0)})  # a result ~10 min after its create
    loop, world, runner, first = start(tmp_path, h)
    cluster(h, free=0, nodes_in=300.0)  # nodes back in 5 min
    t_end = h.clock()
    assert runner.run(0) == 0
    assert h.clock() == t_end  # no hold: step 0's job ends at once
    history = loop.history()
    carrier = history.submitted[1]
    plan = history.plans[1].step_plan()
    assert plan.action.value == "early" and 1 not in history.holds
    assert plan.reason.startswith("release early: the next step enters the queue when its")
    assert world.after == {}
    h.until(lambda: h.state(carrier) == "released", limit=3000, dt=1.0)
    released = h.clock()
    why = ready_why(h, carrier)
    assert why.startswith("node lead: expected wait for the result")
    assert "<= forecast wait for nodes 5m" in why
    task = world.task(carrier)
    assert task is not None
    fake = h.vendor.tasks[task.task_id]
    result_at = fake.created + (fake.ahead + 1) * fake.service
    # released about the wait for nodes before its result, not at it
    assert result_at - released == pytest.approx(300.0, abs=20.0)
    assert h.vendor.count("submit") == 2


def test_give_back_when_the_nodes_are_free_and_the_step_is_released_at_its_result(
    tmp_path: Path,
) -> None:
    h = Harness({"alpha": QueueModel(3, service=10.0)})
    loop, world, runner, first = start(tmp_path, h)
    t_end = h.clock()
    assert runner.run(0) == 0
    assert h.clock() == t_end
    history = loop.history()
    carrier = history.submitted[1]
    plan = history.plans[1].step_plan()
    assert plan.action.value == "give-back"
    assert plan.reason == "give back: nodes are free now: the next step gets them at its result"
    assert 1 not in history.holds and world.after == {}
    h.until(lambda: h.state(carrier) == "released", limit=600, dt=1.0)
    assert ready_why(h, carrier) == "COMPLETED"
    task = world.task(carrier)
    assert task is not None and h.vendor.state_of(h.vendor.tasks[task.task_id])[0] is (
        TaskState.COMPLETED
    )
