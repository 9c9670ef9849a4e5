"""Held jobs whose quantum task waits for their other Flux dependencies.

A held job may wait for more than its task: a classical step that writes its program
(``--dependency=afterok:PREP``), a ``begin-time``, another plugin's hold. The plugin lists
each held job with its other unresolved dependencies; this module owns the rule that says
which of them hold the job's task (``holding``) and what a job shows while they do (its
``qpu_state`` memo, ``waiting for dependency ...``). Adoption asks it which listed jobs
are ready: a job that waits is not adopted, so nothing reads its program, chooses a
device, reserves money or creates a task before its inputs are there, and a job whose
dependency can never be satisfied ends (Flux raises its exception) with nothing spent.

The rule: every other dependency holds the task, except

- flux-accounting's limits (``LIMITS``: max running jobs, max resources, ...). A limit is
  not an input (nothing it waits for changes the program), and flux-accounting releases a
  held job on the understanding that it goes on to run: one still held by ``qpu`` when
  its limit lifts is not counted against the limit, so another job of the user could
  take its place. The task starts while the limit holds, and the limit stays the job's
  last hold (docs/workflows.md says more);
- a variational loop's step (``qpu.loop``): its ``afterany`` on the step before orders
  its nodes, not its inputs (its program was written before it was submitted, and the
  step before keeps its nodes waiting for this task's result);
- a follower (``--dependency=qpu:JOBID``) creates no task: it waits as long as the job it
  follows does.

It never talks to a vendor and never decides when a job is released.
"""

from __future__ import annotations

import syslog
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol.jobspec import STATE_MEMO

if TYPE_CHECKING:
    from flux_quantum.service.context import ServiceContext

# flux-accounting's limit holds (mf_priority.so, src/plugins/accounting.hpp).
LIMITS = frozenset(
    {
        "max-running-jobs-user-limit",
        "max-resources-user-limit",
        "max-sched-jobs-user-limit",
        "max-run-jobs-queue",
        "max-resources-queue",
        "max-sched-jobs-queue-limit",
        "max-sched-nodes-queue-limit",
        "max-sched-cores-queue-limit",
    }
)


def holding(job: HeldJob, held: Mapping[int, HeldJob]) -> tuple[str, ...] | None:
    """The dependencies that hold the job's task now: () when none does, None while the
    plugin has not read them yet (just after it was loaded). ``held``: the listed held
    jobs by id (a follower waits for the job it follows)."""
    if job.follow is not None:
        leader = held.get(job.follow)
        return () if leader is None or leader.follow is not None else holding(leader, held)
    if isinstance(job.request, Mapping) and job.request.get("loop"):
        return ()
    if job.dependencies is None:
        return None
    return tuple(d for d in job.dependencies if d not in LIMITS)


def waiting_text(job: HeldJob, holds: tuple[str, ...] | None) -> str:
    """What a waiting job's ``qpu_state`` says."""
    if holds is None:
        return "waiting for its dependencies to be read"
    if job.follow is not None:
        return f"waiting for the job it follows: {', '.join(holds)}"
    if len(holds) == 1:
        return f"waiting for dependency {holds[0]}"
    return f"waiting for dependencies {', '.join(holds)}"


@dataclass(frozen=True)
class Opened:
    """A job seen waiting whose dependencies no longer hold its task: when the service
    saw that, and what it had waited for."""

    at: float
    after: tuple[str, ...]


class Waiting:
    """The held jobs the service saw waiting (not adopted), what each shows, and those
    that opened since and are not adopted yet."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self._shown: dict[int, str] = {}  # waiting job -> its qpu_state
        self._holds: dict[int, tuple[str, ...]] = {}  # waiting job -> what held it
        self._opened: dict[int, Opened] = {}

    @property
    def count(self) -> int:
        return len(self._shown)

    def waits(self, jobid: int) -> bool:
        return jobid in self._shown

    def sort(self, untracked: Sequence[HeldJob], held: Sequence[HeldJob]) -> list[HeldJob]:
        """The jobs of ``untracked`` whose task may be created now, in order; the others
        wait and show why (a memo, sent when it changes). ``held``: every listed job."""
        by_id = {job.id: job for job in held}
        ready: list[HeldJob] = []
        memos: list[tuple[int, Mapping[str, Any]]] = []
        now = self.ctx.clock()
        for job in untracked:
            holds = holding(job, by_id)
            if holds == ():
                ready.append(job)
                if job.id in self._shown:
                    del self._shown[job.id]
                    self._opened[job.id] = Opened(now, self._holds.pop(job.id, ()))
                continue
            text = waiting_text(job, holds)
            if job.id not in self._shown:
                self._log(f"{job.id}: {text}: its task is not created yet")
            if holds:
                self._holds[job.id] = holds
            if self._shown.get(job.id) != text:
                self._shown[job.id] = text
                memos.append((job.id, {STATE_MEMO: text}))
        self._forget({job.id for job in untracked})
        if memos:
            for (jobid, _memo), error in zip(memos, self.ctx.flux.memos(memos), strict=True):
                if error is not None:
                    self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: memo failed: {error}")
        return ready

    def opened(self, jobid: int) -> Opened | None:
        """The job's opening, once (adoption records it with the job)."""
        return self._opened.pop(jobid, None)

    def _forget(self, listed: set[int]) -> None:
        """Jobs no longer listed and not yet adopted: a waiting job that left ended in
        DEPEND (a dependency that can never be satisfied, a cancel) with no task."""
        for jobid in [j for j in self._shown if j not in listed]:
            holds = self._holds.pop(jobid, ())
            del self._shown[jobid]
            waited = f" while waiting for {', '.join(holds)}" if holds else ""
            self._log(f"{jobid}: ended{waited}: no task was created")
        for jobid in [j for j in self._opened if j not in listed]:
            del self._opened[jobid]

    def _log(self, text: str) -> None:
        self.ctx.log(syslog.LOG_INFO, text)
