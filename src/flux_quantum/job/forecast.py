"""What a loop's step reads to plan what follows it: the cluster's queue, the service's
expected wait for a held step's task, a running job's time left, how long a task of the
loop waited for its result, and whether a held step's result is there.

``StepForecasts`` puts what a ``StepReader`` reads (``FluxReader``: a Flux handle; the
unit tier gives its fakes) together into the ``StepFacts`` the decider
(``flux_quantum.timing.step_plan``) is fed, and into what a hold is checked by. It
only reads: it never submits, releases or cancels a job, and never calls a vendor itself
(the service's forecast is the held job's ``qpu_wait`` memo; a task's end is read
through the service).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import HeldMemo
from flux_quantum.timing.node_wait import (
    FINISHED_ATTRS,
    FINISHED_JOBS,
    PENDING_ATTRS,
    PENDING_JOBS,
    RUNNING_ATTRS,
    ClusterQueue,
    forecast_node_wait,
    job_list_request,
)
from flux_quantum.timing.step_plan import StepFacts, VendorForecast, lead_quantile

# Why a task's job was released before its result: the wait up to it is not the task's.
EARLY_REASONS = ("classical lead", "predicted", "node lead")


def read_cluster_queue(handle: Any, now: float) -> ClusterQueue:
    """The cluster's queue now: resources, running, pending and recently finished jobs
    (four RPCs; OSError when one fails)."""
    import flux.constants as fc

    def jobs(states: int, attrs: tuple[str, ...], most: int = 0) -> list[dict[str, Any]]:
        payload = job_list_request(states, attrs, most)
        return handle.rpc("job-list.list", payload).get().get("jobs", [])

    status = handle.rpc("sched.resource-status", {}).get()
    running = jobs(fc.FLUX_JOB_STATE_RUNNING, RUNNING_ATTRS)
    pending = jobs(
        fc.FLUX_JOB_STATE_PRIORITY | fc.FLUX_JOB_STATE_SCHED, PENDING_ATTRS, PENDING_JOBS
    )
    finished = jobs(fc.FLUX_JOB_STATE_INACTIVE, FINISHED_ATTRS, FINISHED_JOBS)
    return ClusterQueue.from_flux(status, running, pending, finished, now)


def task_wait(entries: Any) -> float | None:
    """How long a step's task took from its create to its result, from the step job's
    eventlog (``qpu-task`` -> ``qpu-ready``); None when the job was released before its
    result (a lead), or the eventlog does not say."""
    log = events.parse_eventlog(entries)
    created = events.first(log, events.TASK)
    ready = events.first(log, events.READY)
    if created is None or ready is None:
        return None
    whys = [str(t.get("why") or "") for t in ready.context.get("tasks") or []]
    if any(why.startswith(EARLY_REASONS) for why in whys):
        return None
    return max(0.0, ready.timestamp - created.timestamp)


def step_turnaround(entries: Any) -> float | None:
    """A released step's release (or its leaving DEPEND, when later) -> running, from
    its eventlog; None when it was not released, or is not running yet."""
    log = events.parse_eventlog(entries)
    release, depend = events.first(log, events.RELEASE), events.first(log, "depend")
    start = events.first(log, "start")
    if release is None or start is None:
        return None
    entered = max(release.timestamp, depend.timestamp if depend else 0.0)
    return max(0.0, start.timestamp - entered)


def previous_wait(entries: Any) -> float | None:
    """What the loop's last task says of the next one's wait: its create -> result
    (``task_wait``), or, for a step released before its result, its create -> the step's
    allocation, which the early release aimed at the result; None when neither is known."""
    exact = task_wait(entries)
    if exact is not None:
        return exact
    log = events.parse_eventlog(entries)
    created, alloc = events.first(log, events.TASK), events.first(log, "alloc")
    if created is None or alloc is None:
        return None
    return max(0.0, alloc.timestamp - created.timestamp)


def job_eventlog(handle: Any, jobid: int) -> str | None:
    import flux.job

    with contextlib.suppress(OSError, KeyError):
        return flux.job.job_kvs_lookup(handle, jobid, keys=["eventlog"], decode=False)["eventlog"]
    return None


class StepReader(Protocol):
    """What the forecasts read of Flux (``FluxReader``; the unit tier's fakes too)."""

    def queue(self, now: float) -> ClusterQueue: ...

    def eventlog(self, jobid: int) -> Any:
        """The job's eventlog (entries, or job-info's text; None: unread)."""
        ...

    def memo(self, jobid: int) -> Mapping[str, Any]:
        """The job's user annotations (the service's memos of a held job)."""
        ...

    def expiration(self, jobid: int) -> float:
        """When the job's time limit ends it (0: no limit, or unknown)."""
        ...

    def task_ended(self, jobid: int) -> bool:
        """Whether a released job's task has ended, as the service reads it."""
        ...


class FluxReader:
    """``StepReader`` on a Flux handle."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def queue(self, now: float) -> ClusterQueue:
        return read_cluster_queue(self.handle, now)

    def eventlog(self, jobid: int) -> Any:
        return job_eventlog(self.handle, jobid)

    def _job(self, jobid: int, attrs: list[str]) -> dict[str, Any]:
        try:
            answer = self.handle.rpc("job-list.list-id", {"id": jobid, "attrs": attrs}).get()
        except OSError:
            return {}
        return answer.get("job", {}) if isinstance(answer, dict) else {}

    def memo(self, jobid: int) -> Mapping[str, Any]:
        return (self._job(jobid, ["annotations"]).get("annotations") or {}).get("user") or {}

    def expiration(self, jobid: int) -> float:
        return float(self._job(jobid, ["expiration"]).get("expiration") or 0.0)

    def task_ended(self, jobid: int) -> bool:
        from flux_quantum.job.consumer import current_task, open_vendor
        from flux_quantum.vendors.errors import VendorError

        try:
            task = current_task(jobid, handle=self.handle)
            return open_vendor(task).poll(task.ref()).terminal
        except (CommandError, OSError, VendorError):
            return False


class StepForecasts:
    """The facts of one step's plan and of its hold, read through a ``StepReader``."""

    def __init__(self, reader: StepReader) -> None:
        self.reader = reader

    def facts(
        self,
        *,
        jobid: int,
        previous: int | None,
        nodes: int,
        cores: int,
        exclusive: bool,
        duration: float,
        weight: float,
        work: float | None,
        now: float,
        turnaround: float = 0.0,
    ) -> StepFacts:
        """What step ``jobid`` plans the next step by: the forecast wait for the next
        step's nodes (``nodes`` whole nodes when ``exclusive``, else ``cores``; time
        limit ``duration``; at the weight's quantile; step ``jobid``'s own nodes given
        back and taken by the queue's waiting work that fits), the wait for its result as the
        loop's last task (of job ``previous``) took (``previous_wait``), one
        iteration's ``work`` and the
        time left in step ``jobid``'s limit, and the loop's quickest ``turnaround``.
        OSError when the queue cannot be read."""
        queue = self.reader.queue(now)
        need = queue.cores_for(nodes, cores) if exclusive else max(cores, nodes)
        quantile = lead_quantile(weight)
        node = forecast_node_wait(queue, need, duration, quantile=quantile, instead_of=jobid)
        vendor = VendorForecast(None)
        if previous is not None:
            seconds = previous_wait(self.reader.eventlog(previous) or ())
            if seconds is not None:
                vendor = VendorForecast(seconds, "previous task")
        expiration = self.reader.expiration(jobid)
        left = max(0.0, expiration - now) if expiration > 0 else None
        return StepFacts(node, vendor, work, left, turnaround)

    def turnaround(self, jobid: int) -> float | None:
        """Step job ``jobid``'s release -> running (``step_turnaround``)."""
        return step_turnaround(self.reader.eventlog(jobid) or ())

    def vendor_left(self, jobid: int) -> float | None:
        """The service's expected wait for held step ``jobid``'s result (its
        ``qpu_wait`` memo); 0 once it is ready or released; None while it says nothing."""
        memo = HeldMemo.decode(self.reader.memo(jobid))
        if memo.state in ("ready", "released"):
            return 0.0
        return None if memo.wait is None else float(memo.wait)

    def result(self, jobid: int) -> bool | None:
        """Whether held step ``jobid``'s task has its result: True once the job was
        released at its result, or released before it (a lead) and the task has ended;
        None when the job ended without a release (its task failed, it was cancelled)."""
        log = events.parse_eventlog(self.reader.eventlog(jobid) or ())
        if events.first(log, events.RELEASE) is None:
            return None if any(events.ends_hold(e) for e in log) else False
        if task_wait(log) is not None:
            return True
        return self.reader.task_ended(jobid)
