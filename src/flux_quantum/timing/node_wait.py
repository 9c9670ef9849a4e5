"""The wait for nodes: when a job of a given size and time limit would start if it
entered the cluster's queue now, forecast from one snapshot of the queue.

A ``ClusterQueue`` is what Fluxion and job-list said at one moment: the cores free and
in all, the running jobs (their start and time limit), the jobs pending ahead (their
size, limit, priority, and the start Fluxion reserved for them where it gives one: its
EASY policy reserves for the first pending job only, ``annotations.sched.t_estimate``),
and the share of their time limits that recently finished jobs ran. ``forecast_node_wait``
plays the queue forward as conservative backfilling would: each running job ends at a
quantile of that share of its limit (all of it until enough jobs finished to learn
from), each job ahead starts at Fluxion's reservation when it has one, else at the
earliest time its cores are free for as long, and the job asked about takes the first
hole that fits it. A released qpu job is scheduled at the top priority (the quantum
plugin's ``release-priority``), so only jobs of that priority are ahead of a step.
This module forecasts only: it never calls Flux, never reads a clock, never decides.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The priority Flux gives a released qpu job unless the site changed it.
RELEASE_PRIORITY = 4294967295
# Finished jobs needed before their shares of their limits are trusted over the limits.
MIN_SHARES = 10
# What a snapshot reads of job-list (``ClusterQueue.from_flux``), and how many jobs: the
# pending jobs of the highest priorities (a step is released at the top one) and the
# recently finished jobs whose shares of their limits are learned from.
RUNNING_ATTRS = ("ncores", "t_run", "expiration")
PENDING_ATTRS = ("ncores", "duration", "priority", "annotations")
FINISHED_ATTRS = ("t_run", "t_cleanup", "expiration")
PENDING_JOBS = 256
FINISHED_JOBS = 200


def job_list_request(states: int, attrs: Iterable[str], max_entries: int = 0) -> dict[str, Any]:
    """The ``job-list.list`` payload for jobs in ``states`` (a Flux state mask)."""
    return {
        "max_entries": max_entries,
        "attrs": list(attrs),
        "since": 0.0,
        "constraint": {"states": [states]},
    }


@dataclass(frozen=True)
class RunningJob:
    """A running job: its cores, when it started and when its time limit ends it
    (``expiration`` 0: no limit), and its id (0: not known)."""

    cores: int
    t_run: float
    expiration: float = 0.0
    jobid: int = 0

    def end(self, queue: ClusterQueue, quantile: float) -> float:
        """When it ends, at the ``quantile`` of the shares of their limits that finished
        jobs which ran as long as it has so far ran (never before ``queue.t``)."""
        now = queue.t
        if self.expiration <= 0 or not math.isfinite(self.expiration):
            return math.inf
        if not 0 < self.t_run < self.expiration:
            return max(now, self.expiration)
        limit = self.expiration - self.t_run
        share = queue.share(quantile, ran=max(0.0, now - self.t_run) / limit)
        return max(now, self.t_run + share * limit)


@dataclass(frozen=True)
class PendingJob:
    """A job waiting in the scheduler's queue: cores, time limit (0: none), priority, and
    the start Fluxion reserved for it (None: it gives none)."""

    cores: int
    duration: float
    priority: int
    t_estimate: float | None = None


@dataclass(frozen=True)
class ClusterQueue:
    """The cluster's queue at ``t``: cores in all and free, running and pending jobs
    (pending in the scheduler's order, highest priority first), and ``shares``: run time
    over time limit of recently finished jobs."""

    t: float
    total_cores: int
    free_cores: int
    cores_per_node: int = 1
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    shares: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shares", tuple(sorted(self.shares)))

    def share(self, quantile: float, ran: float = 0.0) -> float:
        """The ``quantile`` of the shares of their limits that finished jobs ran, of
        those that ran at least ``ran`` of theirs (a running job's share so far); 1.0
        (to the limit, as Fluxion plans) until ``MIN_SHARES`` are known, or when none
        ran that long."""
        if len(self.shares) < MIN_SHARES:
            return 1.0
        first = bisect.bisect_left(self.shares, ran)
        left = len(self.shares) - first
        if left <= 0:
            return 1.0
        q = min(1.0, max(0.0, quantile))
        return self.shares[first + min(left - 1, int(q * (left - 1)))]

    def cores_for(self, nodes: int, cores: int) -> int:
        """The cores a job of ``nodes`` whole nodes (0: none asked) or ``cores`` takes."""
        return max(cores, nodes * max(1, self.cores_per_node), 1)

    @classmethod
    def from_flux(
        cls,
        status: Mapping[str, Any],
        running: Iterable[Mapping[str, Any]],
        pending: Iterable[Mapping[str, Any]],
        finished: Iterable[Mapping[str, Any]],
        t: float,
    ) -> ClusterQueue:
        """From ``sched.resource-status`` and job-list's running jobs (``ncores``,
        ``t_run``, ``expiration``), pending jobs (``ncores``, ``duration``, ``priority``,
        ``annotations``) and finished jobs (``t_run``, ``t_cleanup``, ``expiration``)."""
        total, per_node = resource_cores(status.get("all"))
        busy, _ = resource_cores(status.get("allocated"))
        down, _ = resource_cores(status.get("down"))
        run = tuple(
            RunningJob(
                int(j.get("ncores") or 1),
                float(j.get("t_run") or 0.0),
                float(j.get("expiration") or 0.0),
                int(j.get("id") or 0),
            )
            for j in running
        )
        waiting = []
        for j in pending:
            sched = (j.get("annotations") or {}).get("sched") or {}
            estimate = sched.get("t_estimate") if isinstance(sched, Mapping) else None
            waiting.append(
                PendingJob(
                    int(j.get("ncores") or 1),
                    float(j.get("duration") or 0.0),
                    int(j.get("priority") or 0),
                    float(estimate) if isinstance(estimate, int | float) else None,
                )
            )
        return cls(
            t=t,
            total_cores=total,
            free_cores=max(0, total - busy - down),
            cores_per_node=per_node or 1,
            running=run,
            pending=tuple(waiting),
            shares=tuple(finished_shares(finished)),
        )


def finished_shares(finished: Iterable[Mapping[str, Any]]) -> list[float]:
    """Run time / time limit of finished jobs that ran with a limit (job-list's
    ``t_run``, ``t_cleanup``, ``expiration``), each at most 1."""
    shares = []
    for job in finished:
        t_run = float(job.get("t_run") or 0.0)
        end = float(job.get("t_cleanup") or 0.0)
        expiration = float(job.get("expiration") or 0.0)
        if t_run > 0 and end >= t_run and expiration > t_run:
            shares.append(min(1.0, (end - t_run) / (expiration - t_run)))
    return shares


def resource_cores(rset: Any) -> tuple[int, int]:
    """Cores in an R (``R_lite``), and the most on one node."""
    if not isinstance(rset, Mapping):
        return 0, 0
    total = per_node = 0
    for entry in rset.get("execution", {}).get("R_lite", []):
        ranks = _idset_count(entry.get("rank", ""))
        n = _idset_count(entry.get("children", {}).get("core", ""))
        total += ranks * n
        per_node = max(per_node, n)
    return total, per_node


def _idset_count(text: Any) -> int:
    """Members of an RFC 22 idset ("0-3,7")."""
    count = 0
    for part in str(text).strip("[]").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            count += int(hi or lo) - int(lo) + 1
        except ValueError:
            return 0
    return count


# --- the forecast --------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeWait:
    """A forecast wait for nodes: ``seconds`` from the snapshot (None: no forecast, a job
    without a time limit holds the cores), with running jobs trusted for ``share`` of
    their limits (the ``quantile`` of finished jobs'), ``ahead`` jobs of at least its
    priority before it, ``reserved`` of them placed at Fluxion's reservation."""

    seconds: float | None
    quantile: float
    share: float
    ahead: int = 0
    reserved: int = 0

    def describe(self) -> str:
        """One phrase for a reason: '12m (running jobs at 40% of their limits, 1 job
        ahead at Fluxion's reservation)'."""
        if self.seconds is None:
            return "unknown (a job without a time limit holds the cores)"
        if self.seconds <= 0:
            return "0s (free now)"
        how = f"running jobs at {self.share:.0%} of their limits"
        if self.ahead:
            how += f", {self.ahead} job{'s' if self.ahead > 1 else ''} ahead"
            if self.reserved:
                how += f" ({self.reserved} at Fluxion's reservation)"
        return f"{duration_text(self.seconds)} ({how})"


def forecast_node_wait(
    queue: ClusterQueue,
    cores: int,
    duration: float,
    *,
    quantile: float = 0.5,
    priority: int = RELEASE_PRIORITY,
    instead_of: int = 0,
) -> NodeWait:
    """When a job of ``cores`` and time limit ``duration`` (0: none) entering the queue
    at ``queue.t`` with ``priority`` would start, in seconds from then; running and
    queued jobs run the ``quantile`` share of their limits (``ClusterQueue.share``).

    ``instead_of``: a running job (a loop's step) that gives its cores back now to come
    back later at ``priority``: the queue's work of a lower priority that fits takes
    them at once (in the queue's order) and runs its share of its limit, and the
    forecast is made from there."""
    share = queue.share(quantile)
    now = queue.t
    profile = _Profile(now, queue.free_cores)
    given_back = False
    for job in queue.running:
        if instead_of and job.jobid == instead_of:
            profile.add(now, job.cores)
            given_back = True
        else:
            profile.add(job.end(queue, quantile), job.cores)
    if given_back:
        for waiting in queue.pending:
            length = share * waiting.duration if waiting.duration > 0 else math.inf
            if waiting.priority < priority and profile.earliest(waiting.cores, length) == now:
                profile.take(now, length, waiting.cores)
    ahead = [j for j in queue.pending if j.priority >= priority]
    reserved = 0
    start: float | None
    for waiting in ahead:
        length = share * waiting.duration if waiting.duration > 0 else math.inf
        if waiting.t_estimate is not None and math.isfinite(waiting.t_estimate):
            start = max(now, waiting.t_estimate)
            reserved += 1
        else:
            start = profile.earliest(waiting.cores, length)
        if start is None or not math.isfinite(start):
            continue  # never fits, or only after a job without a limit: leave it out
        profile.take(start, length, waiting.cores)
    length = share * duration if duration > 0 else math.inf
    start = profile.earliest(cores, length)
    seconds = None if start is None or not math.isfinite(start) else max(0.0, start - now)
    return NodeWait(seconds, quantile, share, len(ahead), reserved)


class _Profile:
    """Free cores over time from ``t0``: a step function kept as its changes."""

    def __init__(self, t0: float, free: int) -> None:
        self.t0 = t0
        self.base = free
        self.changes: dict[float, int] = {}

    def add(self, at: float, cores: int) -> None:
        if math.isfinite(at):
            self.changes[at] = self.changes.get(at, 0) + cores

    def take(self, start: float, length: float, cores: int) -> None:
        self.changes[start] = self.changes.get(start, 0) - cores
        if math.isfinite(start + length):
            self.add(start + length, cores)

    def _steps(self) -> tuple[list[float], list[int]]:
        times = [self.t0]
        free = [self.base]
        for at in sorted(self.changes):
            delta = self.changes[at]
            if at <= self.t0:
                free[0] += delta
            else:
                times.append(at)
                free.append(free[-1] + delta)
        return times, free

    def earliest(self, cores: int, length: float) -> float | None:
        """The first time ``cores`` are free for ``length`` seconds (None: never)."""
        times, free = self._steps()
        i = 0
        n = len(times)
        while i < n:
            if free[i] < cores:
                i += 1
                continue
            start, j = times[i], i
            while j < n and times[j] < start + length:
                if free[j] < cores:
                    break
                j += 1
            else:
                return start
            i = j + 1
        return None


def duration_text(seconds: float) -> str:
    """'45s', '12m', '2.5h'."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
