"""A step job's command: run the step, then decide what follows it, and do it.

``flux quantum loop step DIR K -- COMMAND`` is the command of step K's job. Every rank
runs COMMAND with the loop's variables; rank 0 then journals what the step did and, under
the loop's lock, ends the loop or plans step K+1 (``flux_quantum.timing.step_plan``:
keep the nodes, release early, or give them back; the forecasts are read from Flux by
``flux_quantum.job.forecast``), journals the plan and submits step K+1. With a keep it
then holds its nodes (``flux_quantum.job.hold``) until step K+1's result is there, and
runs iteration K+1 in place, in this job, with ``FLUX_QPU_JOB`` naming step K+1's job
(whose task it reads) and the task's ``FLUX_QPU_*`` variables; after it journaled that
iteration it cancels step K+1's job, which never ran (it waits for this job to end,
``afterany``, so it never asks for nodes meanwhile); if this job dies first, step K+1
goes on by itself. The other ranks follow rank 0 through the journal: they run COMMAND
again for each iteration run in place. A hold that gives up ends the job: step K+1 then
goes on as a step released early. It never runs an iteration the journal already has.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import ENV_JOB, JobTask
from flux_quantum.job.forecast import FluxReader, StepForecasts
from flux_quantum.job.hold import Hold, HoldOutcome, HoldState
from flux_quantum.job.loop import (
    DIR_VARIABLE,
    FAILED,
    ITERATION_VARIABLE,
    KEEP,
    NEXT_PROGRAM_VARIABLE,
    VALUE_VARIABLE,
    Ended,
    Held,
    LoopDir,
    Planned,
    Started,
    Stepped,
    Submitted,
    decide,
)
from flux_quantum.job.loopsteps import FluxStepJobs, StepOrder, step_duration, task_facts
from flux_quantum.timing.node_wait import NodeWait
from flux_quantum.timing.step_plan import (
    StepAction,
    StepFacts,
    StepPlan,
    VendorForecast,
    plan_step,
)

HOLD_POLL = 1.0  # seconds between looks at the next step's result while holding
FOLLOW_POLL = 0.2  # seconds between the other ranks' looks at the journal


def iteration_environment(
    loop: LoopDir, iteration: int, environ: Mapping[str, str], extra: Mapping[str, str] = {}
) -> dict[str, str]:
    """The environment of COMMAND for ``iteration``: the loop's variables over
    ``environ``, then ``extra`` (an iteration run in place: its step's task)."""
    env = dict(environ)
    env[DIR_VARIABLE] = str(loop.path)
    env[ITERATION_VARIABLE] = str(iteration)
    env[NEXT_PROGRAM_VARIABLE] = str(loop.program(iteration + 1))
    env[VALUE_VARIABLE] = str(loop.value_file(iteration))
    env.update(extra)
    return env


def in_place_environment(task: JobTask | None, carrier: int) -> dict[str, str]:
    """What an iteration run in place reads its task by: the step's job and its task."""
    return {ENV_JOB: str(carrier), **(task.environment() if task is not None else {})}


def run_step(loop: LoopDir, iteration: int, command: Sequence[str]) -> int:
    """Run COMMAND as step ``iteration``; on rank 0, then go on (``StepRunner``)."""
    if not command:
        raise CommandError("loop step: no command after '--'")
    env = dict(os.environ)
    if env.get("FLUX_TASK_RANK", "0") != "0":
        if loop.spec.weight <= 0:  # this job never runs another iteration
            os.execvpe(command[0], list(command), iteration_environment(loop, iteration, env))
        return follow(loop, iteration, command, env)
    import flux
    import flux.job

    handle = flux.Flux()
    jobid = int(flux.job.JobID(env["FLUX_JOB_ID"])) if env.get("FLUX_JOB_ID") else 0
    jobs = FluxStepJobs(handle)
    runner = StepRunner(loop, jobid, command, env, jobs, StepForecasts(FluxReader(handle)))
    return runner.run(iteration)


def follow(
    loop: LoopDir,
    iteration: int,
    command: Sequence[str],
    env: Mapping[str, str],
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """A rank other than 0: run COMMAND for ``iteration``, then again for each
    iteration rank 0 runs in place in this job, until the journal says this job is done
    with the loop."""
    import flux
    import flux.job

    jobid = int(flux.job.JobID(env["FLUX_JOB_ID"])) if env.get("FLUX_JOB_ID") else 0
    k = iteration
    extra: dict[str, str] = {}
    while True:
        rc = subprocess.call(list(command), env=iteration_environment(loop, k, env, extra))
        while True:
            history = loop.history()
            if history.ran_in.get(k + 1) == jobid:
                break
            plan, hold = history.plans.get(k + 1), history.holds.get(k + 1)
            done = history.ended is not None or (plan is not None and plan.action != KEEP)
            if done or hold is not None:
                return rc
            sleep(FOLLOW_POLL)
        carrier = history.submitted[k + 1]
        task = FluxStepJobs(flux.Flux()).task(carrier)
        k, extra = k + 1, in_place_environment(task, carrier)


class StepJobs(Protocol):
    """What rank 0 does to the loop's jobs (``FluxStepJobs``; the unit tier's fakes)."""

    def submit(self, loop: LoopDir, order: StepOrder, environ: Mapping[str, str]) -> Submitted:
        """Submit the step ``order`` says, journaled."""
        ...

    def task(self, jobid: int) -> JobTask | None:
        """The task a step's job was released with (None: not known)."""
        ...

    def cost(self, jobid: int) -> float | None:
        """What a step's task cost, once settled (None: not yet)."""
        ...

    def cancel(self, jobid: int, reason: str) -> None: ...


class StepRunner:
    """Rank 0 of step job ``jobid``: runs its iteration, and any it runs in place after
    it; ``jobs`` and ``forecasts`` are how it meets Flux, ``clock`` and ``sleep`` time."""

    def __init__(
        self,
        loop: LoopDir,
        jobid: int,
        command: Sequence[str],
        env: Mapping[str, str],
        jobs: StepJobs,
        forecasts: StepForecasts,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.jobs = jobs
        self.loop = loop
        self.jobid = jobid
        self.command = list(command)
        self.env = dict(env)
        self.forecasts = forecasts
        self.clock = clock
        self.sleep = sleep
        self.refused = False  # Flux refused a step: the loop failed

    def run(self, iteration: int) -> int:
        k, carrier = iteration, None
        extra: dict[str, str] = {}
        while True:
            outcome = self._iteration(k, extra)
            if outcome is None:
                return 0  # it ran in place in the job before: nothing to do
            rc, work = outcome
            going_on, decision = self._stepped(k, rc, carrier)
            if carrier is not None:
                self._cancel_carrier(k, carrier)
            if not going_on:
                return rc
            plan = self._plan(k, carrier, work)
            successor = self._submit(k + 1, plan, decision.next_device, decision.budget)
            if successor is None:  # cancelled meanwhile, or refused (the loop failed)
                return (rc or 1) if self.refused else rc
            if plan.action is not StepAction.KEEP:
                return rc
            held = self._hold(k + 1, plan, successor)
            if held.state is not HoldState.IN_PLACE:
                return rc
            carrier = successor
            extra = in_place_environment(self.jobs.task(carrier), carrier)
            k += 1

    # -- one iteration

    def _iteration(self, k: int, extra: Mapping[str, str]) -> tuple[int, float] | None:
        """Journal that this job runs iteration ``k`` and run COMMAND: its exit code and
        how long it took; None when the journal has the iteration done already."""
        loop = self.loop
        turnaround = None if extra else self.forecasts.turnaround(self.jobid)
        with loop.locked():
            history = loop.history()
            if k in history.steps:
                return None
            if history.ended is None:
                loop.append(Started(k, self.jobid, turnaround))
        for stale in (loop.program(k + 1), loop.step_file(k), loop.value_file(k)):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        env = iteration_environment(loop, k, self.env, extra)
        started = time.monotonic()
        try:
            rc = subprocess.call(self.command, env=env)
        except OSError as exc:
            print(
                f"flux-quantum: ERROR: loop step: cannot run {self.command[0]}: {exc}",
                file=sys.stderr,
            )
            rc = 127
        return rc, time.monotonic() - started

    def _stepped(self, k: int, rc: int, carrier: int | None) -> tuple[bool, Any]:
        """Journal what iteration ``k`` did and what follows (the loop's ``decide``):
        whether a next step is to be submitted, and the decision."""
        loop = self.loop
        task_job = carrier if carrier is not None else self.jobid
        shell = self.env if carrier is None else {}
        device, task = task_facts(self.jobs.task(task_job), shell)
        cost = self.jobs.cost(task_job) if task else None
        stepped = Stepped(k, self.jobid, rc, device, task, cost)
        with loop.locked():
            history = loop.history()
            decision = decide(loop.spec, history, stepped, loop.report(k))
            records: list[Any] = [decision.stepped]
            if decision.moved is not None:
                records.append(decision.moved)
                print(
                    f"flux-quantum: loop {loop.id}: step {k}'s task failed over from "
                    f"{decision.moved.previous} to {decision.moved.device}; the loop goes on "
                    "there",
                    file=sys.stderr,
                )
            if decision.ended is not None:
                records.append(decision.ended)
            loop.append(*records)
        going_on = (
            history.ended is None and decision.ended is None and k + 1 not in history.submitted
        )
        return going_on, decision

    def _cancel_carrier(self, k: int, carrier: int) -> None:
        """Step ``k``'s own job never ran (the iteration ran here): cancel it."""
        reason = f"iteration {k} of loop {self.loop.id} ran in place in job {self.jobid}"
        self.jobs.cancel(carrier, reason)

    # -- what follows

    def _plan(self, k: int, carrier: int | None, work: float) -> StepPlan:
        """Keep, release early or give back, from the forecasts read now."""
        spec = self.loop.spec
        weight = spec.weight
        if weight <= 0:
            return plan_step(StepFacts(NodeWait(None, 0.0, 1.0), VendorForecast(None)), weight)
        res = spec.resources
        try:
            facts = self.forecasts.facts(
                jobid=self.jobid,
                previous=carrier if carrier is not None else self.jobid,
                nodes=res.nodes or 0,
                cores=res.ntasks * res.cores,
                exclusive=bool(res.nodes),
                duration=step_duration(res.time_limit),
                weight=weight,
                work=work,
                now=self.clock(),
                turnaround=self.loop.history().turnaround,
            )
        except OSError as exc:
            why = f"give back: the cluster's queue could not be read ({exc})"
            return StepPlan(StepAction.GIVE_BACK, why, weight)
        return plan_step(facts, weight)

    def _submit(
        self, k: int, plan: StepPlan, device: str | None, budget: float | None
    ) -> int | None:
        """Journal the plan and submit step ``k`` (waiting for this job when it keeps its
        nodes for it): its job, or None when the loop ended (a cancel) or Flux refused."""
        loop = self.loop
        host = self.jobid if plan.action is StepAction.KEEP else None
        with loop.locked():
            history = loop.history()
            if history.ended is not None or k in history.submitted:
                return None
            loop.append(Planned.of(k, self.jobid, plan))
            try:
                order = StepOrder(k, device, budget, after=host)
                submitted = self.jobs.submit(loop, order, self.env)
            except CommandError as exc:
                loop.append(Ended(k - 1, FAILED, str(exc)))
                print(f"flux-quantum: ERROR: {exc}", file=sys.stderr)
                self.refused = True
                return None
        print(f"flux-quantum: loop {loop.id}: step {k}: {plan.reason}", file=sys.stderr)
        return submitted.jobid

    def _hold(self, k: int, plan: StepPlan, carrier: int) -> HoldOutcome:
        """Hold the nodes for step ``k``'s result (a keep); journal how it ended."""
        hold = Hold(plan, self.jobid, carrier, self.clock())
        while True:
            ready = self.forecasts.result(carrier)
            if ready is None or self.loop.history().ended is not None:
                outcome = HoldOutcome(
                    HoldState.GAVE_UP,
                    self.clock() - hold.since,
                    f"stopped holding: step {k}'s job ended or the loop did",
                )
                break
            left = None if ready else self.forecasts.vendor_left(carrier)
            outcome = hold.check(self.clock(), result_ready=ready, vendor_left=left)
            if outcome.state is not HoldState.HOLDING:
                break
            self.sleep(HOLD_POLL)
        with self.loop.locked():
            self.loop.append(
                Held(k, self.jobid, round(outcome.held, 3), outcome.state.value, outcome.reason)
            )
        print(f"flux-quantum: loop {self.loop.id}: step {k}: {outcome.reason}", file=sys.stderr)
        return outcome
