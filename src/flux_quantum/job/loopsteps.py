"""A loop's steps in Flux: submit one, cancel the loop, see where it is.

``flux_quantum.job.loop`` owns the loop's directory, journal and decisions; this module
is where they meet Flux. ``submit_step`` turns step k of a spec into a held qpu job
(``attributes.system.qpu`` with the loop's program k, ``user.qpu_loop``,
``user.qpu_iteration`` and the loop's time weight ``user.qpu_time_weight``, job name
``ID.k``; waiting for the job of step k-1 to end when that one keeps its nodes for it).
The step job's command is ``flux_quantum.job.steprun``. ``cancel`` marks the loop
cancelled under the loop's lock, then cancels its live jobs, so that no step can submit a
successor after a cancel. ``reconcile`` ends, in the journal, a loop whose current step
job ended without running (its task failed, it was cancelled from outside, its time ran
out), with that job's reason. ``describe`` is what ``flux quantum loop status`` shows,
each step's plan and what happened with it included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    ENV_DEVICE,
    ENV_JOB,
    ENV_TASK,
    ENV_VARS,
    ENV_VENDOR,
    JobTask,
    current_task,
    encode_jobid,
)
from flux_quantum.job.forecast import task_wait
from flux_quantum.job.loop import (
    CANCELLED,
    FAILED,
    ITERATION_ATTRIBUTE,
    LOOP_ATTRIBUTE,
    LOOP_VARIABLES,
    Ended,
    LoopDir,
    LoopHistory,
    LoopSpec,
    Submitted,
    default_root,
)
from flux_quantum.protocol import events
from flux_quantum.timing.step_plan import WEIGHT_ATTRIBUTE, WeightSettings

# How long rank 0 waits, at the step's end, for its task's settled cost.
COST_WAIT = 10.0
STEP_SUBCOMMAND = ("flux", "quantum", "loop", "step")
# Job-specific variables a step's successor must not inherit.
_JOB_PREFIXES = ("FLUX_JOB_", "FLUX_TASK_", "FLUX_SHELL_", "FLUX_KVS_NAMESPACE", "PMI_")


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a step job gets: the submitter's, without what belongs to the
    job it was submitted from (its id, rank, task and the loop variables)."""
    drop = set(ENV_VARS) | set(LOOP_VARIABLES) | {ENV_JOB}
    return {k: v for k, v in environ.items() if k not in drop and not k.startswith(_JOB_PREFIXES)}


def step_duration(time_limit: str | None) -> float:
    """A step's time limit in seconds (0: none); CommandError when it is not valid."""
    import flux.util

    if not time_limit:
        return 0.0
    try:
        return float(flux.util.parse_fsd(time_limit))
    except ValueError:
        raise CommandError(
            f"time limit {time_limit!r} is not valid: use Flux Standard Duration, e.g. 30s, 10m, 2h"
        ) from None


def step_jobspec(
    loop: LoopDir,
    iteration: int,
    device: str | None,
    budget: float | None,
    environ: Mapping[str, str],
    after: int | None = None,
) -> Any:
    """The jobspec of step ``iteration`` (a flux ``JobspecV1``); ``after``: the job of
    the step before, which keeps its nodes for this one: it waits for its end."""
    import flux.job

    spec = loop.spec
    res = spec.resources
    command = [*STEP_SUBCOMMAND, str(loop.path), str(iteration), "--", *spec.command]
    jobspec = flux.job.JobspecV1.from_command(
        command,
        num_tasks=res.ntasks,
        cores_per_task=res.cores,
        gpus_per_task=res.gpus or None,
        num_nodes=res.nodes,
        cwd=spec.cwd,
        environment=step_environment(environ),
    )
    if res.time_limit:
        jobspec.duration = step_duration(res.time_limit)
    jobspec.setattr("system.job.name", f"{spec.id}.{iteration}")
    jobspec.setattr(f"user.{LOOP_ATTRIBUTE}", spec.id)
    jobspec.setattr(f"user.{ITERATION_ATTRIBUTE}", iteration)
    if spec.weight > 0:  # the service releases the step by its wait for nodes
        jobspec.setattr(f"user.{WEIGHT_ATTRIBUTE}", spec.weight)
    if after is not None:
        jobspec.setattr("system.dependencies", [{"scheme": "afterany", "value": str(after)}])
    jobspec.setattr(
        "system.qpu", spec.step_request(iteration, loop.program(iteration), device, budget)
    )
    if res.queue:
        jobspec.setattr("system.queue", res.queue)
    if res.bank:
        jobspec.setattr("system.bank", res.bank)
    return jobspec


def submit_step(
    handle: Any,
    loop: LoopDir,
    iteration: int,
    device: str | None,
    budget: float | None,
    environ: Mapping[str, str],
    after: int | None = None,
) -> Submitted:
    """Submit step ``iteration`` (call under the loop's lock) and journal it; ``after``:
    the job it waits for (``step_jobspec``)."""
    import flux.job

    jobspec = step_jobspec(loop, iteration, device, budget, environ, after)
    try:
        jobid = int(flux.job.submit(handle, jobspec))
    except OSError as exc:
        raise CommandError(f"step {iteration} of loop {loop.id} was refused: {exc}") from None
    # Memos, so that flux jobs shows them: {user.qpu_loop} {user.qpu_iteration}.
    memo = {LOOP_ATTRIBUTE: loop.id, ITERATION_ATTRIBUTE: iteration}
    with contextlib.suppress(OSError):
        handle.rpc("job-manager.memo", {"id": jobid, "volatile": False, "memo": memo}).get()
    record = Submitted(iteration, jobid, device, budget)
    loop.append(record)
    return record


@dataclass(frozen=True)
class StepOrder:
    """A step to submit: its iteration, the device it asks for (None: the loop's
    request), what is left of the budget, and the job it waits for (``after``: the step
    before, keeping its nodes for it)."""

    iteration: int
    device: str | None = None
    budget: float | None = None
    after: int | None = None


class FluxStepJobs:
    """What a step's rank 0 does to the loop's jobs in Flux, on one handle: submit the
    next step, read a step's task and its cost, cancel a step that never ran."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def submit(self, loop: LoopDir, order: StepOrder, environ: Mapping[str, str]) -> Submitted:
        return submit_step(
            self.handle, loop, order.iteration, order.device, order.budget, environ, order.after
        )

    def task(self, jobid: int) -> JobTask | None:
        """The task the step's job was released with, as its jobspec says; None if
        unread."""
        if not jobid:
            return None
        try:
            return current_task(jobid, handle=self.handle)
        except (CommandError, OSError):
            return None

    def cost(self, jobid: int) -> float | None:
        return task_cost(self.handle, jobid)

    def cancel(self, jobid: int, reason: str) -> None:
        import flux.job

        with contextlib.suppress(OSError):
            flux.job.cancel(self.handle, jobid, reason)


# --- what a step did -----------------------------------------------------------------------


def task_facts(job: JobTask | None, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The device (``VENDOR:NAME``) and the id of a step's task: from the released job
    (``job``, read from its jobspec), else from the job-shell plugin's variables
    (``FLUX_QPU_*``: only where the site loads that plugin)."""
    if job is not None:
        return _qualified(job.vendor, job.device), job.task_id
    return _qualified(env.get(ENV_VENDOR), env.get(ENV_DEVICE)), env.get(ENV_TASK) or None


def _qualified(vendor: str | None, device: str | None) -> str | None:
    if not device:
        return None
    return f"{vendor}:{device}" if vendor and ":" not in device else device


def task_cost(handle: Any, jobid: int, wait: float = COST_WAIT) -> float | None:
    """What the job's tasks cost, from its ``qpu-cost`` events; waits up to ``wait``
    seconds (on the eventlog, not by polling it) for the settlement of a task that
    ended. None: not settled yet."""
    watch_events(handle, jobid, lambda event: event.name == events.COST, wait)
    try:
        entries = events.parse_eventlog(_eventlog(handle, jobid))
    except OSError:
        return None
    costs = [r for r in map(events.decode, entries) if isinstance(r, events.Cost)]
    return sum(c.cost for c in costs) if costs else None


def _eventlog(handle: Any, jobid: int) -> str:
    import flux.job

    return flux.job.job_kvs_lookup(handle, jobid, keys=["eventlog"], decode=False)["eventlog"]


def watch_events(
    handle: Any, jobid: int, stop: Callable[[Any], bool], timeout: float | None
) -> bool:
    """Watch the job's eventlog (what it holds, then what comes) until ``stop(event)``:
    True; False when the eventlog ends first, it cannot be read or ``timeout`` seconds
    (None: no limit) passed."""
    import flux.job

    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        watcher = flux.job.event_watch_async(handle, jobid)
    except OSError:
        return False
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                watcher.wait_for(-1.0 if remaining is None else remaining)
            except OSError:
                continue  # timed out: the deadline check says so
            try:
                event = watcher.get_event()
            except OSError:
                return False
            if event is None:
                return False
            if stop(event):
                return True
    finally:
        with contextlib.suppress(OSError):
            watcher.cancel()


# --- cancel, reconcile, status ------------------------------------------------------------------


@dataclass(frozen=True)
class StepJob:
    """A step job as Flux sees it."""

    jobid: int
    state: str
    result: str | None = None
    note: str | None = None
    returncode: int | None = None

    @property
    def active(self) -> bool:
        return self.state != "INACTIVE"


def job_states(handle: Any, jobids: Sequence[int]) -> dict[int, StepJob]:
    import flux.job

    found: dict[int, StepJob] = {}
    for jobid in jobids:
        try:
            # job-list knows no "returncode": JobInfo computes it from "waitstatus" (an
            # unknown attribute fails the whole lookup, and the job looked unknown).
            info = flux.job.job_list_id(
                handle,
                jobid,
                attrs=["state", "result", "waitstatus", "exception_note", "exception_occurred"],
            ).get_jobinfo()
        except OSError:
            continue
        note = info.exception.note if info.exception.occurred else None
        rc = info.returncode if isinstance(info.returncode, int) else None
        found[jobid] = StepJob(jobid, info.state, info.result or None, note or None, rc)
    return found


def reconcile(handle: Any, loop: LoopDir) -> LoopHistory:
    """The loop's history, ending it in the journal when its current step job ended
    without saying so (it never ran, or died before its rank 0 could journal)."""
    history = loop.history()
    if history.ended is not None or not history.submitted:
        return history
    k = history.iteration
    if k in history.steps:
        return history
    jobid = history.submitted[k]
    job = job_states(handle, [jobid]).get(jobid)
    if job is None or job.active:
        return history
    with loop.locked():
        history = loop.history()
        if history.ended is None and k not in history.steps:
            ran = "ran but " if k in history.started else ""
            why = job.note or (job.result or "ended").lower()
            loop.append(Ended(k, FAILED, f"step {k} (job {encode_jobid(jobid)}) {ran}ended: {why}"))
            history = loop.history()
    return history


def cancel(handle: Any, loop: LoopDir, reason: str = "loop cancelled") -> list[int]:
    """End the loop: journal it, then cancel its live steps (a held step's task is
    cancelled by the service). The jobs cancelled."""
    import flux.job

    with loop.locked():
        history = loop.history()
        if history.ended is not None and history.ended.outcome != CANCELLED:
            raise CommandError(
                f"loop {loop.id} already ended ({history.ended.outcome}): nothing to cancel"
            )
        if history.ended is None:
            loop.append(Ended(max(history.iteration, 0), CANCELLED, reason))
        live = history.live_jobs()
        states = job_states(handle, live)
        cancelled = []
        for jobid in live:
            job = states.get(jobid)
            if job is not None and not job.active:
                continue
            with contextlib.suppress(OSError):
                flux.job.cancel(handle, jobid, reason)
                cancelled.append(jobid)
    return cancelled


# --- the loop as a whole: submit, wait, describe -------------------------------------------------


def site_weights(handle: Any) -> WeightSettings:
    """The instance's ``[quantum.loops]`` (the defaults when it has none, or when the
    configuration cannot be read); CommandError when it is not valid."""
    try:
        config = handle.rpc("config.get").get()
    except OSError:
        return WeightSettings()
    quantum = config.get("quantum") if isinstance(config, dict) else None
    table = quantum.get("loops") if isinstance(quantum, dict) else None
    try:
        return WeightSettings.from_config(table)
    except ValueError as exc:
        raise CommandError(f"the instance's configuration: {exc}") from None


def submit_loop(
    handle: Any,
    spec: LoopSpec,
    program_text: str,
    directory: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[LoopDir, Submitted]:
    """Create the loop's directory (``directory``, else under ``default_root``, where a
    link to it is kept either way) and submit its first step. The loop's time weight is
    the one it asks for, else the site's (``site_weights``). Nothing is kept when the
    step is refused."""
    env = os.environ if environ is None else environ
    try:
        spec = replace(spec, time_weight=site_weights(handle).weight(spec.time_weight))
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    root = default_root(env)
    link = root / spec.id
    if link.exists() or link.is_symlink():
        raise CommandError(f"a loop named {spec.id} exists ({link}); choose another name")
    path = Path(directory).absolute() if directory is not None else link
    loop = LoopDir.create(path, spec, program_text)
    try:
        if path != link:
            root.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
        with loop.locked():
            submitted = submit_step(handle, loop, 0, None, spec.max_cost, env)
    except (CommandError, OSError) as exc:
        # Nothing half-done: no step runs, so nothing of the loop is kept.
        with contextlib.suppress(OSError):
            if link.is_symlink():
                link.unlink()
        shutil.rmtree(path, ignore_errors=True)
        raise CommandError(str(exc)) from None
    return loop, submitted


def wait_loop(handle: Any, loop: LoopDir, timeout: float | None = None) -> Ended:
    """Wait until the loop ended (each step's ``clean`` event, then the journal); its end.
    CommandError (exit code 2) after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    unfollowed = None  # a step whose eventlog ended without 'clean', or could not be read
    while True:
        history = reconcile(handle, loop)
        if history.ended is not None:
            return history.ended
        if not history.submitted:
            raise CommandError(f"loop {loop.id} has no step")
        remaining = None if deadline is None else deadline - time.monotonic()
        jobid = history.submitted[history.iteration]
        # The step ended ('clean'): its rank 0 journaled what follows before it did.
        ended = watch_events(handle, jobid, lambda event: event.name == "clean", remaining)
        if ended:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            raise CommandError(f"loop {loop.id}: still going after {timeout:g} s", 2)
        if unfollowed == jobid:
            raise CommandError(f"loop {loop.id}: cannot follow step job {encode_jobid(jobid)}")
        unfollowed = jobid


def step_waits(entries: Any) -> dict[str, Any]:
    """What a step's job waited for, from its eventlog: ``task``, its task's create ->
    result in seconds (None when it was released before its result, or is not yet);
    ``released``, why the service released it; ``nodes``, release -> allocation in
    seconds (None: no allocation: it ran in place, or has not started)."""
    log = events.parse_eventlog(entries)
    release = events.first(log, events.RELEASE)
    depend = events.first(log, "depend")
    alloc = events.first(log, "alloc")
    ready = events.last(log, events.READY)
    whys = [str(t.get("why") or "") for t in (ready.context.get("tasks") if ready else None) or []]
    nodes = None
    if alloc is not None and release is not None:
        start = max(release.timestamp, depend.timestamp if depend else 0.0)
        nodes = round(max(0.0, alloc.timestamp - start), 3)
    wait = task_wait(entries)
    return {
        "task": None if wait is None else round(wait, 3),
        "released": whys[0] if whys else None,
        "nodes": nodes,
    }


def _eventlog_or_none(handle: Any, jobid: int) -> str | None:
    try:
        return _eventlog(handle, jobid)
    except (OSError, KeyError):
        return None


def describe(handle: Any, loop: LoopDir, waits: bool = False) -> dict[str, Any]:
    """The loop as ``flux quantum loop status`` shows it (``--json`` prints this); each
    step with its plan (what the step before it decided, and why) and its hold; with
    ``waits``, what each step waited for, read from its job's eventlog
    (``step_waits``)."""
    history = reconcile(handle, loop)
    job_state = None
    if history.ended is None and history.submitted:
        jobid = history.submitted[history.iteration]
        job = job_states(handle, [jobid]).get(jobid)
        job_state = job.state if job else None
    best = history.best
    k = history.iteration
    if history.ended is not None:
        state = history.ended.outcome
    elif k < 0:
        state = "new"
    elif k in history.started:
        state = "running"
    elif history.holding(k) and job_state in ("DEPEND", None):
        state = "kept"  # held for its task, the step before keeping the nodes for it
    elif job_state in ("DEPEND", None):
        state = "held"
    elif job_state in ("PRIORITY", "SCHED"):
        state = "starting"
    else:
        state = job_state.lower()
    spec = loop.spec

    def step(i: int, jobid: int) -> dict[str, Any]:
        s = history.steps.get(i)
        plan, hold = history.plans.get(i), history.holds.get(i)
        out: dict[str, Any] = {
            "iteration": i,
            "job": encode_jobid(jobid),
            "ran_in": encode_jobid(history.ran_in[i]) if i in history.ran_in else None,
            "device": s.device if s else None,
            "task": s.task if s else None,
            "value": s.value if s else None,
            "cost": s.cost if s else None,
            "rc": s.rc if s else None,
            "plan": {**plan.step_plan().to_dict(), "by": encode_jobid(plan.jobid)}
            if plan
            else None,
            "hold": {"held": hold.held, "outcome": hold.outcome, "reason": hold.reason}
            if hold
            else None,
        }
        if waits:
            out["waits"] = step_waits(_eventlog_or_none(handle, jobid))
        return out

    return {
        "id": spec.id,
        "directory": str(loop.path),
        "iteration": k,
        "max_iterations": spec.max_iterations,
        "state": state,
        "device": history.device or str(spec.request.get("device", "any")),
        "best": best[0] if best else None,
        "best_iteration": best[1] if best else None,
        "goal": spec.goal,
        "spent": round(history.spent, 6),
        "max_cost": spec.max_cost,
        "unsettled": history.unsettled,
        "job": encode_jobid(history.submitted[k]) if k >= 0 else None,
        "outcome": history.ended.outcome if history.ended else None,
        "reason": history.ended.reason if history.ended else None,
        "moves": [
            {"iteration": m.iteration, "from": m.previous, "to": m.device} for m in history.moves
        ],
        "steps": [step(i, j) for i, j in sorted(history.submitted.items())],
    }
