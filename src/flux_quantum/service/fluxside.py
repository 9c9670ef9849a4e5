"""The Flux side of the handler service: everything it asks of Flux, on one handle.

``FluxJobs`` is the one adapter between the service and a Flux instance (the plugin's
held-job list, release and fail; job-info lookups; events and memos; Fluxion's QPU
vertices; the cluster's free cores); ``FluxSide`` is the shape the service relies on, so
the unit tier drives the service with an in-memory fake instead. The records it returns
(``JobRecord``, ``JobSize``, ``ClusterView``) are plain data. It runs on the reactor
thread only and never talks to a vendor.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from flux_quantum.errors import CommandError, FluxQuantumError
from flux_quantum.instance.plugin import HeldJob, PluginClient
from flux_quantum.instance.rpc import pipelined
from flux_quantum.protocol.events import COST, Event, first, parse_eventlog
from flux_quantum.protocol.jobspec import RESERVATION_MEMO, SESSION_MEMO
from flux_quantum.timing.node_wait import (
    FINISHED_JOBS,
    PENDING_ATTRS,
    PENDING_JOBS,
    ClusterQueue,
    finished_shares,
    job_list_request,
    resource_cores,
)

# Events the service may post to a job it has released (its task ends later).
AFTER_RELEASE = frozenset({COST})

# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSize:
    """Classical resources a job asks for (from its jobspec)."""

    nodes: int = 0
    cores: int = 0
    exclusive_nodes: bool = False


@dataclass(frozen=True)
class JobRecord:
    """What Flux says about one job when the service adopts it (or looks after it)."""

    id: int
    events: tuple[Event, ...] = ()
    system: Mapping[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    size: JobSize = JobSize()
    jobspec: Mapping[str, Any] = field(default_factory=dict)

    def has_event(self, name: str) -> bool:
        return any(event.name == name for event in self.events)

    def submit_time(self) -> float | None:
        event = first(self.events, "submit")
        return event.timestamp or None if event else None

    def submitter(self) -> int | None:
        """The job's userid, from its ``submit`` event."""
        event = first(self.events, "submit")
        userid = event.context.get("userid") if event else None
        return userid if isinstance(userid, int) else None

    @classmethod
    def from_lookup(
        cls, jobid: int, eventlog: Any, jobspec: Any, *, qpu_only: bool = False
    ) -> JobRecord:
        """A record from job-info's ``eventlog`` and (current) ``jobspec`` values;
        ``qpu_only``: keep only the ``qpu-*`` events (all an adoption reads)."""
        if isinstance(jobspec, str):
            jobspec = json.loads(jobspec)
        jobspec = jobspec if isinstance(jobspec, Mapping) else {}
        attributes = jobspec.get("attributes")
        system = attributes.get("system", {}) if isinstance(attributes, Mapping) else {}
        system = system if isinstance(system, Mapping) else {}
        if qpu_only and isinstance(eventlog, list):
            eventlog = [
                e
                for e in eventlog
                if isinstance(e, Mapping) and str(e.get("name")).startswith("qpu-")
            ]
        return cls(
            id=jobid,
            events=tuple(parse_eventlog(eventlog)),
            system=system,
            cwd=system.get("cwd"),
            size=_size_of(jobspec.get("resources")),
            jobspec=jobspec,
        )


# The last resources counted and their size: the jobs of one unit (or one user's
# batch) ask for the same, and 10,000 adopted at once need not be walked one by one.
_last_size: tuple[Any, JobSize] = (None, JobSize())


def _size_of(resources: Any) -> JobSize:
    global _last_size
    last, size = _last_size
    if resources is not None and resources == last:
        return size
    size = jobspec_size(resources)
    _last_size = (resources, size)
    return size


def jobspec_size(resources: Any) -> JobSize:
    """Nodes and cores a jobspec's resources ask for (counts' minimums)."""
    nodes = cores = 0
    exclusive = False

    def count_of(entry: Mapping[str, Any]) -> int:
        count = entry.get("count", 1)
        if isinstance(count, Mapping):
            count = count.get("min", 1)
        return int(count) if isinstance(count, int) and count > 0 else 1

    def walk(entries: Any, mult: int) -> None:
        nonlocal nodes, cores, exclusive
        if not isinstance(entries, list):
            return
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            n = mult * count_of(entry)
            if entry.get("type") == "node":
                nodes += n
                exclusive = exclusive or bool(entry.get("exclusive"))
            elif entry.get("type") == "core":
                cores += n
            walk(entry.get("with"), n)

    walk(resources, 1)
    return JobSize(nodes=nodes, cores=cores, exclusive_nodes=exclusive)


# The classical lead trusts a running job to run at least this quantile of the share of
# its time limit that finished jobs used, learned from this many of them at least.
LEAD_QUANTILE = 0.1
LEAD_MIN_SAMPLES = 10


def limit_share(finished: Iterable[Mapping[str, Any]]) -> float:
    """The share of its time limit a job runs at least, learned from finished jobs
    (job-list's ``t_run``, ``t_cleanup``, ``expiration``): the ``LEAD_QUANTILE`` of
    their run time / time limit; 0.0 (a running job may end at any moment) until
    ``LEAD_MIN_SAMPLES`` jobs that ran with a limit are known.

    Users' limits are upper bounds, often 1-3x the real run time: trusting them would
    release held jobs onto nodes that free up long before their task is ready."""
    shares = finished_shares(finished)
    if len(shares) < LEAD_MIN_SAMPLES:
        return 0.0
    shares.sort()
    return shares[int(LEAD_QUANTILE * (len(shares) - 1))]


@dataclass(frozen=True)
class ClusterView:
    """The instance's classical resources at time ``t``, as the scheduler sees them.

    ``releases`` lists running jobs as (soonest expected end, cores), soonest first: a
    job's start plus ``limit_share`` of its time limit (``limit_share``); ``inf`` means
    the job has no time limit.
    """

    t: float
    cores_per_node: int
    free_cores: int
    releases: tuple[tuple[float, int], ...] = ()
    limit_share: float = 1.0
    # The queue as a loop's step forecasts its wait for nodes by (None: not read).
    queue: ClusterQueue | None = None

    def cores_for(self, size: JobSize) -> int:
        if size.exclusive_nodes or (size.nodes and not size.cores):
            return max(size.cores, size.nodes * max(1, self.cores_per_node))
        return max(1, size.cores)

    def free_at(self, cores: int) -> float | None:
        """When ``cores`` cores are free at the soonest (-inf: now), as ``wait_for``."""
        available = self.free_cores
        if cores <= available:
            return -math.inf
        for expiration, freed in self.releases:
            if not math.isfinite(expiration):
                return None
            available += freed
            if available >= cores:
                return expiration
        return None

    def wait_for(self, cores: int, now: float) -> float | None:
        """Seconds until ``cores`` cores are free at the soonest, as running jobs end no
        sooner than ``limit_share`` of their limits; 0 when they are free now, None when
        no limit says when."""
        at = self.free_at(cores)
        return None if at is None else max(0.0, at - now)

    @classmethod
    def from_flux(
        cls,
        status: Mapping[str, Any],
        running: Sequence[Mapping[str, Any]],
        t: float,
        share: float = 1.0,
        queue: ClusterQueue | None = None,
    ) -> ClusterView:
        """From ``sched.resource-status`` and job-list's running jobs (``expiration``,
        ``ncores`` and ``t_run``), each expected to run ``share`` of its limit at least."""

        total, per_node = resource_cores(status.get("all"))
        busy, _ = resource_cores(status.get("allocated"))
        down, _ = resource_cores(status.get("down"))
        releases = []
        for job in running:
            expiration = float(job.get("expiration") or 0.0)
            t_run = float(job.get("t_run") or 0.0)
            if expiration <= 0:
                end = math.inf
            elif 0 < t_run < expiration:
                end = t_run + share * (expiration - t_run)
            else:
                end = expiration
            releases.append((end, int(job.get("ncores", 1))))
        releases.sort()
        return cls(
            t=t,
            cores_per_node=per_node,
            free_cores=max(0, total - busy - down),
            releases=tuple(releases),
            limit_share=share,
            queue=queue,
        )


def _lookup(jobid: int) -> tuple[str, dict[str, Any]]:
    """job-info's lookup of a job's eventlog and current jobspec (from the KVS)."""
    import flux.constants

    flags = flux.constants.FLUX_JOB_LOOKUP_CURRENT
    return ("job-info.lookup", {"id": jobid, "keys": ["eventlog", "jobspec"], "flags": flags})


# --- the interface ------------------------------------------------------------------------


class FluxSide(Protocol):
    """What the service asks of Flux. Every method runs on the reactor thread; errors
    are ``OSError`` (an RPC failed) or ``CommandError`` (the plugin said no)."""

    def held(self) -> list[HeldJob]:
        """The held jobs; may return the same list object as the call before when
        nothing moved (the caller then skips its comparison)."""
        ...

    def record(self, jobid: int) -> JobRecord | None: ...

    def records(self, ids: Sequence[int]) -> dict[int, JobRecord | None]: ...

    def held_records(self, ids: Sequence[int]) -> dict[int, JobRecord | None]: ...

    def post_event(self, jobid: int, name: str, context: Mapping[str, Any]) -> None: ...

    def post_events(
        self, items: Sequence[tuple[int, str, Mapping[str, Any]]]
    ) -> list[Exception | None]: ...

    def memo(self, jobid: int, memo: Mapping[str, Any]) -> None: ...

    def memos(self, items: Sequence[tuple[int, Mapping[str, Any]]]) -> list[Exception | None]: ...

    def annotate(self, jobid: int, memo: Mapping[str, Any]) -> None: ...

    def alive(self, ids: Iterable[int]) -> set[int]: ...

    def session_jobs(self, userid: int, since: float) -> list[int]: ...

    def reservation_jobs(self) -> dict[int, tuple[str, int]]: ...

    def release(
        self,
        ids: list[int],
        task: str,
        device: str,
        info: Mapping[str, Any],
        resources: list[Any] | None = None,
    ) -> list[int]: ...

    def fail(self, ids: list[int], note: str) -> list[int]: ...

    def graph_devices(self) -> frozenset[str]: ...

    def qpu_resources(self, jobspec: Mapping[str, Any], devices: list[str]) -> list[Any]: ...

    def set_device_up(self, device: str, up: bool, slots: int | None = None) -> None: ...

    def start_times(self, ids: Iterable[int]) -> dict[int, float]: ...

    def cluster(self, now: float) -> ClusterView: ...


class FluxJobs:
    """``FluxSide`` on a real Flux handle."""

    GRAPH_CACHE_SECONDS = 10.0
    SHARE_CACHE_SECONDS = 60.0
    SHARE_JOBS = FINISHED_JOBS

    def __init__(self, handle: Any, lead_share: float = 0.0) -> None:
        """``lead_share``: the share of its time limit a running job is trusted to run
        at least (the classical lead); 0 learns it from the instance's finished jobs."""
        self.handle = handle
        self.plugin = PluginClient(handle)
        self.lead_share = lead_share
        self._graph: tuple[float, frozenset[str]] = (-math.inf, frozenset())
        self._share: tuple[float, float] = (-math.inf, 0.0)
        self._finished: list[dict[str, Any]] = []  # the last SHARE_JOBS finished jobs
        self._held: tuple[int | None, list[HeldJob]] = (None, [])
        self._held_by_id: dict[int, HeldJob] = {}

    def held(self) -> list[HeldJob]:
        """The plugin's held jobs; the very same list object as last time when the held
        set has not moved (one small RPC, however many jobs are held)."""
        jobs, generation = self.plugin.list_since(self._held[0], self._held_by_id)
        if jobs is None:
            return self._held[1]
        self._held = (generation, jobs)
        self._held_by_id = {job.id: job for job in jobs}
        return jobs

    def record(self, jobid: int) -> JobRecord | None:
        """Eventlog and current jobspec of a job, active or not (job-info); None if
        Flux does not know it. Raises the lookup's other errors."""
        rsp = pipelined(self.handle, [_lookup(jobid)])[0]
        if isinstance(rsp, OSError):
            if rsp.errno in (errno.ENOENT, errno.EPERM):
                return None
            raise rsp
        return JobRecord.from_lookup(jobid, rsp.get("eventlog"), rsp.get("jobspec"))

    def held_records(self, ids: Sequence[int]) -> dict[int, JobRecord | None]:
        """``records`` of held jobs for their adoption, where only their jobspec and
        qpu-* events matter: those the plugin saw from their submission come from its
        ``records`` (a thousand jobs a message, no eventlog read), the others from
        ``records``."""
        out: dict[int, JobRecord | None] = {}
        for jobid, (jobspec, entries) in self.plugin.records(ids).items():
            out[jobid] = JobRecord.from_lookup(jobid, entries, jobspec)
        out.update(self.records([jobid for jobid in ids if jobid not in out], qpu_only=True))
        return out

    def records(self, ids: Sequence[int], *, qpu_only: bool = False) -> dict[int, JobRecord | None]:
        """``record`` of many jobs (``qpu_only``: their ``qpu-*`` events only), pipelined (all of a batch sent, then all read): a
        service adopting thousands of held jobs after a restart waits for one round
        trip per batch, not per job. Held jobs are active, so the job-manager has their
        eventlog and current jobspec in memory (``job-manager.getattr``, the owner or
        the job's user): no KVS read, about 5x faster than job-info's lookup, which is
        the fallback for a job the job-manager does not answer for. A job Flux does not
        know maps to None; one whose lookup failed otherwise is left out (the caller
        tries again later)."""
        out: dict[int, JobRecord | None] = {}
        retry: list[int] = []
        ids = list(ids)
        if not ids:
            return out
        requests = [
            ("job-manager.getattr", {"id": jobid, "attrs": ["jobspec", "eventlog"]})
            for jobid in ids
        ]
        for jobid, rsp in zip(ids, pipelined(self.handle, requests), strict=True):
            if isinstance(rsp, OSError) or not isinstance(rsp, Mapping):
                retry.append(jobid)
                continue
            out[jobid] = JobRecord.from_lookup(
                jobid, rsp.get("eventlog"), rsp.get("jobspec"), qpu_only=qpu_only
            )
        out.update(self._lookups(retry))
        return out

    def _lookups(self, ids: Sequence[int]) -> dict[int, JobRecord | None]:
        """``records`` through job-info (the KVS), pipelined the same way."""
        out: dict[int, JobRecord | None] = {}
        requests = [_lookup(jobid) for jobid in ids]
        for jobid, rsp in zip(ids, pipelined(self.handle, requests), strict=True):
            if isinstance(rsp, OSError):
                if rsp.errno in (errno.ENOENT, errno.EPERM):
                    out[jobid] = None
                continue
            if isinstance(rsp, Mapping):
                out[jobid] = JobRecord.from_lookup(jobid, rsp.get("eventlog"), rsp.get("jobspec"))
        return out

    def post_event(self, jobid: int, name: str, context: Mapping[str, Any]) -> None:
        """One event, as ``post_events``; raises its error."""
        error = self.post_events([(jobid, name, context)])[0]
        if error is not None:
            raise error

    def post_events(
        self, items: Sequence[tuple[int, str, Mapping[str, Any]]]
    ) -> list[Exception | None]:
        """Events through the plugin, which takes events for held jobs only, pipelined
        (``fluxrpc.pipelined``): a unit of many jobs, or thousands adopted at once,
        costs a round trip per batch. An event that may come after the release
        (``qpu-cost``) goes to a released job through the job-manager, which only the
        instance owner may call. One outcome per item (None: posted)."""
        out: list[Exception | None] = list(self.plugin.post_events(items))
        # Those that may come after the release, to released jobs: as ``post_event``.
        late = [
            i
            for i, (error, item) in enumerate(zip(out, items, strict=True))
            if isinstance(error, CommandError) and item[1] in AFTER_RELEASE
        ]
        requests = [
            (
                "job-manager.post-event.post",
                {"id": items[i][0], "name": items[i][1], "context": dict(items[i][2])},
            )
            for i in late
        ]
        for i, rsp in zip(late, pipelined(self.handle, requests), strict=True):
            out[i] = rsp if isinstance(rsp, OSError) else None
        return out

    def memo(self, jobid: int, memo: Mapping[str, Any]) -> None:
        """One volatile memo, as ``memos``; raises its error."""
        error = self.memos([(jobid, memo)])[0]
        if error is not None:
            raise error

    def memos(self, items: Sequence[tuple[int, Mapping[str, Any]]]) -> list[Exception | None]:
        """Volatile memos to many jobs, pipelined as ``post_events``."""
        requests = [
            ("job-manager.memo", {"id": jobid, "volatile": True, "memo": dict(memo)})
            for jobid, memo in items
        ]
        return [
            rsp if isinstance(rsp, OSError) else None for rsp in pipelined(self.handle, requests)
        ]

    def annotate(self, jobid: int, memo: Mapping[str, Any]) -> None:
        """A persistent memo (an eventlog ``memo`` event, kept by job-list after the job
        ends), unlike ``memo``'s volatile ones."""
        self.handle.rpc("job-manager.memo", {"id": jobid, "memo": dict(memo)}).get()

    def alive(self, ids: Iterable[int]) -> set[int]:
        """The jobs among ``ids`` that have not ended yet (not INACTIVE)."""
        import flux.constants

        futures = [
            (jobid, self.handle.rpc("job-list.list-id", {"id": jobid, "attrs": ["state"]}))
            for jobid in ids
        ]
        out = set()
        for jobid, future in futures:
            try:
                state = future.get().get("job", {}).get("state")
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EPERM):
                    continue
                out.add(jobid)  # not sure: keep it alive, ask again later
                continue
            if state != flux.constants.FLUX_JOB_STATE_INACTIVE:
                out.add(jobid)
        return out

    def session_jobs(self, userid: int, since: float) -> list[int]:
        """``userid``'s jobs, active or ended after ``since``, whose persistent memo names
        a vendor session (``qpu_session``): one job-list RPC."""
        payload = {
            "max_entries": 0,
            "attrs": ["annotations"],
            "since": since,
            "constraint": {"userid": [userid]},
        }
        jobs = self.handle.rpc("job-list.list", payload).get().get("jobs", [])
        return [
            int(job["id"])
            for job in jobs
            if ((job.get("annotations") or {}).get("user") or {}).get(SESSION_MEMO)
        ]

    def reservation_jobs(self) -> dict[int, tuple[str, int]]:
        """The jobs released and not ended (waiting for nodes, running, cleaning up) whose
        persistent memo names a reserved window, with the window and their userid: one
        job-list RPC."""
        import flux.constants

        payload = {
            "max_entries": 0,
            "attrs": ["annotations", "userid"],
            "since": 0.0,
            "constraint": {
                "states": [
                    flux.constants.FLUX_JOB_STATE_PRIORITY,
                    flux.constants.FLUX_JOB_STATE_SCHED,
                    flux.constants.FLUX_JOB_STATE_RUN,
                    flux.constants.FLUX_JOB_STATE_CLEANUP,
                ]
            },
        }
        jobs = self.handle.rpc("job-list.list", payload).get().get("jobs", [])
        out = {}
        for job in jobs:
            name = ((job.get("annotations") or {}).get("user") or {}).get(RESERVATION_MEMO)
            if isinstance(name, str) and name:
                out[int(job["id"])] = (name, int(job.get("userid", -1)))
        return out

    def release(
        self,
        ids: list[int],
        task: str,
        device: str,
        info: Mapping[str, Any],
        resources: list[Any] | None = None,
    ) -> list[int]:
        return self.plugin.release(ids, task=task, device=device, info=info, resources=resources)

    def fail(self, ids: list[int], note: str) -> list[int]:
        return self.plugin.fail(ids, note)

    def graph_devices(self) -> frozenset[str]:
        """Devices that have qpu vertices in Fluxion's graph (``flux quantum graph
        load``); empty when there are none or no Fluxion. Cached for a few seconds."""
        t, devices = self._graph
        if time.monotonic() - t < self.GRAPH_CACHE_SECONDS:
            return devices
        from flux_quantum.instance import graph

        try:
            devices = frozenset(v.device for v in graph.find_qpus(self.handle))
        except (FluxQuantumError, OSError, KeyError, ValueError):
            devices = frozenset()
        self._graph = (time.monotonic(), devices)
        return devices

    def qpu_resources(self, jobspec: Mapping[str, Any], devices: list[str]) -> list[Any]:
        """The job's resources plus one slot vertex per task's device, checked with
        Fluxion (a request it can never satisfy would kill the job after its task ran)."""
        from flux_quantum.instance import graph

        resources = graph.qpu_resources(jobspec.get("resources") or [], devices)
        graph.check_satisfiable(self.handle, {**jobspec, "resources": resources})
        return resources

    def set_device_up(self, device: str, up: bool, slots: int | None = None) -> None:
        from flux_quantum.instance import graph

        graph.set_device_status(self.handle, device, up, slots)

    def start_times(self, ids: Iterable[int]) -> dict[int, float]:
        """``t_run`` of jobs that started (0.0: not yet); jobs Flux lost are left out."""
        times = {}
        for jobid in ids:
            try:
                job = self.handle.rpc("job-list.list-id", {"id": jobid, "attrs": ["t_run"]}).get()
            except OSError:
                continue
            times[jobid] = float(job.get("job", {}).get("t_run") or 0.0)
        return times

    def cluster(self, now: float) -> ClusterView:
        import flux.constants

        status = self.handle.rpc("sched.resource-status", {}).get()
        payload = {
            "max_entries": 0,
            "attrs": ["expiration", "ncores", "t_run"],
            "since": 0.0,
            "constraint": {"states": [flux.constants.FLUX_JOB_STATE_RUNNING]},
        }
        running = self.handle.rpc("job-list.list", payload).get().get("jobs", [])
        share = self._limit_share()
        queue = None
        with contextlib.suppress(OSError):  # the top pending jobs: what is ahead of a step
            queue = ClusterQueue.from_flux(status, running, self._pending(), self._finished, now)
        return ClusterView.from_flux(status, running, now, share, queue)

    def _pending(self) -> list[dict[str, Any]]:
        import flux.constants

        states = flux.constants.FLUX_JOB_STATE_PRIORITY | flux.constants.FLUX_JOB_STATE_SCHED
        payload = job_list_request(states, PENDING_ATTRS, PENDING_JOBS)
        return self.handle.rpc("job-list.list", payload).get().get("jobs", [])

    def _limit_share(self) -> float:
        """``lead_share``, or learned from the last ``SHARE_JOBS`` finished jobs (one
        job-list RPC a minute)."""
        import flux.constants

        t, share = self._share
        if time.monotonic() - t < self.SHARE_CACHE_SECONDS:
            return self.lead_share or share
        payload = {
            "max_entries": self.SHARE_JOBS,
            "attrs": ["t_run", "t_cleanup", "expiration"],
            "constraint": {"states": [flux.constants.FLUX_JOB_STATE_INACTIVE]},
        }
        try:
            self._finished = self.handle.rpc("job-list.list", payload).get().get("jobs", [])
            share = limit_share(self._finished)
        except OSError:
            share = 0.0
        self._share = (time.monotonic(), share)
        return self.lead_share or share
