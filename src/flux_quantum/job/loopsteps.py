"""A loop's steps in Flux: submit one, run one, cancel the loop, see where it is.

``flux_quantum.job.loop`` owns the loop's directory, journal and decisions; this module
is where they meet Flux. ``submit_step`` turns step k of a spec into a held qpu job
(``attributes.system.qpu`` with the loop's program k, ``user.qpu_loop`` and
``user.qpu_iteration``, job name ``ID.k``). ``run_step`` is the step job's command
(``flux quantum loop step DIR K -- COMMAND``): every rank runs COMMAND; rank 0 then
journals what the step did and, under the loop's lock, submits step k+1 or ends the
loop. ``cancel`` marks the loop cancelled under the same lock, then cancels its live
jobs, so that no step can submit a successor after a cancel. ``reconcile`` ends, in the
journal, a loop whose current step job ended without running (its task failed, it was
cancelled from outside, its time ran out), with that job's reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    ENV_DEVICE,
    ENV_TASK,
    ENV_VARS,
    ENV_VENDOR,
    JobTask,
    current_task,
    encode_jobid,
)
from flux_quantum.job.loop import (
    CANCELLED,
    DIR_VARIABLE,
    FAILED,
    ITERATION_ATTRIBUTE,
    ITERATION_VARIABLE,
    LOOP_ATTRIBUTE,
    LOOP_VARIABLES,
    NEXT_PROGRAM_VARIABLE,
    VALUE_VARIABLE,
    Ended,
    LoopDir,
    LoopHistory,
    LoopSpec,
    Started,
    Stepped,
    Submitted,
    decide,
    default_root,
)
from flux_quantum.protocol import events

# How long rank 0 waits, at the step's end, for its task's settled cost.
COST_WAIT = 10.0
STEP_SUBCOMMAND = ("flux", "quantum", "loop", "step")
# Job-specific variables a step's successor must not inherit.
_JOB_PREFIXES = ("FLUX_JOB_", "FLUX_TASK_", "FLUX_SHELL_", "FLUX_KVS_NAMESPACE", "PMI_")


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a step job gets: the submitter's, without what belongs to the
    job it was submitted from (its id, rank, task and the loop variables)."""
    drop = set(ENV_VARS) | set(LOOP_VARIABLES)
    return {k: v for k, v in environ.items() if k not in drop and not k.startswith(_JOB_PREFIXES)}


def step_jobspec(
    loop: LoopDir,
    iteration: int,
    device: str | None,
    budget: float | None,
    environ: Mapping[str, str],
) -> Any:
    """The jobspec of step ``iteration`` (a flux ``JobspecV1``)."""
    import flux.job
    import flux.util

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
        try:
            jobspec.duration = flux.util.parse_fsd(res.time_limit)
        except ValueError:
            raise CommandError(
                f"time limit {res.time_limit!r} is not valid: use Flux Standard Duration, "
                "e.g. 30s, 10m, 2h"
            ) from None
    jobspec.setattr("system.job.name", f"{spec.id}.{iteration}")
    jobspec.setattr(f"user.{LOOP_ATTRIBUTE}", spec.id)
    jobspec.setattr(f"user.{ITERATION_ATTRIBUTE}", iteration)
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
) -> Submitted:
    """Submit step ``iteration`` (call under the loop's lock) and journal it."""
    import flux.job

    jobspec = step_jobspec(loop, iteration, device, budget, environ)
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


# --- the step job's command ------------------------------------------------------------------


def run_step(loop: LoopDir, iteration: int, command: Sequence[str]) -> int:
    """Run COMMAND as step ``iteration``; on rank 0, then go on to the next step."""
    env = dict(os.environ)
    env[DIR_VARIABLE] = str(loop.path)
    env[ITERATION_VARIABLE] = str(iteration)
    env[NEXT_PROGRAM_VARIABLE] = str(loop.program(iteration + 1))
    env[VALUE_VARIABLE] = str(loop.value_file(iteration))
    if not command:
        raise CommandError("loop step: no command after '--'")
    if env.get("FLUX_TASK_RANK", "0") != "0":
        os.execvpe(command[0], list(command), env)
    import flux
    import flux.job

    handle = flux.Flux()
    jobid = int(flux.job.JobID(env["FLUX_JOB_ID"])) if env.get("FLUX_JOB_ID") else 0
    with loop.locked():
        if loop.history().ended is None:
            loop.append(Started(iteration, jobid))
    for stale in (
        loop.program(iteration + 1),
        loop.step_file(iteration),
        loop.value_file(iteration),
    ):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    try:
        rc = subprocess.call(list(command), env=env)
    except OSError as exc:
        print(f"flux-quantum: ERROR: loop step: cannot run {command[0]}: {exc}", file=sys.stderr)
        rc = 127
    device, task = task_facts(_released_task(handle, jobid), env)
    cost = task_cost(handle, jobid) if task else None
    stepped = Stepped(iteration, jobid, rc, device, task, cost)
    with loop.locked():
        history = loop.history()
        decision = decide(loop.spec, history, stepped, loop.report(iteration))
        records: list[Any] = [decision.stepped]
        if decision.moved is not None:
            records.append(decision.moved)
            print(
                f"flux-quantum: loop {loop.id}: step {iteration}'s task failed over from "
                f"{decision.moved.previous} to {decision.moved.device}; the loop goes on there",
                file=sys.stderr,
            )
        if decision.ended is not None:
            records.append(decision.ended)
        loop.append(*records)
        if (
            history.ended is None
            and decision.ended is None
            and iteration + 1 not in history.submitted
        ):
            try:
                submit_step(handle, loop, iteration + 1, decision.next_device, decision.budget, env)
            except CommandError as exc:
                loop.append(Ended(iteration, FAILED, str(exc)))
                print(f"flux-quantum: ERROR: {exc}", file=sys.stderr)
                return rc or 1
    return rc


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


def _released_task(handle: Any, jobid: int) -> JobTask | None:
    """The task the step's job was released with, as its jobspec says; None if unread."""
    if not jobid:
        return None
    try:
        return current_task(jobid, handle=handle)
    except (CommandError, OSError):
        return None


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


def submit_loop(
    handle: Any,
    spec: LoopSpec,
    program_text: str,
    directory: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[LoopDir, Submitted]:
    """Create the loop's directory (``directory``, else under ``default_root``, where a
    link to it is kept either way) and submit its first step. Nothing is kept when the
    step is refused."""
    env = os.environ if environ is None else environ
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


def describe(handle: Any, loop: LoopDir) -> dict[str, Any]:
    """The loop as ``flux quantum loop status`` shows it (``--json`` prints this)."""
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
    elif job_state in ("DEPEND", None):
        state = "held"
    elif job_state in ("PRIORITY", "SCHED"):
        state = "starting"
    else:
        state = job_state.lower()
    spec = loop.spec

    def step(i: int, jobid: int) -> dict[str, Any]:
        s = history.steps.get(i)
        return {
            "iteration": i,
            "job": encode_jobid(jobid),
            "device": s.device if s else None,
            "task": s.task if s else None,
            "value": s.value if s else None,
            "cost": s.cost if s else None,
            "rc": s.rc if s else None,
        }

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
