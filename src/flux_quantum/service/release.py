"""When and how held jobs are released: the release point applied, the release call.

A program's attempt becomes READY when its task reaches the request's release point
(``qpu.release_at``: a queue position, RUNNING, or ended), or earlier when waiting longer
would waste nothing: the job's cores will take at least as long to free up as the task
takes to reach its release point (the classical lead), or, with ``release_at=predict``,
the expected wait for the result is below the time released jobs take to start (measured
by ``StartupMeter``). The rule itself is ``flux_quantum.selection.release_point``: this
part gives it the facts (the last snapshot, the drain, the start-up, the wait for the
unit's cores) and does what it decides. A variational loop's step that carries its
loop's time weight (``flux_quantum.selection.step_plan``) is also released once its
result is no farther than the forecast wait for its nodes (the queue of the cluster
view, ``node_wait``), so that they arrive with the result. When every program of a unit is READY its jobs are
released through the plugin, one of them with the QPU slot vertices its tasks occupy when
the devices are in Fluxion's graph. A job admitted into a reserved window (Braket Direct)
is released as soon as its task exists, whatever its ``release_at`` (``Submission``), with the
window in its release record; how long before its window it is admitted is
``window_lead``. This part never calls a vendor.
"""

from __future__ import annotations

import syslog
from collections.abc import Mapping
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import SITE_ACCOUNT, ReleasedWindow, ReleaseInfo
from flux_quantum.selection.node_wait import NodeWait, forecast_node_wait
from flux_quantum.selection.release_point import (
    AT_END,
    Backlog,
    ReleaseDecision,
    lead_release,
    positioned_release,
    unpositioned_release,
)
from flux_quantum.selection.step_plan import lead_quantile, node_lead_release, step_of
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.fluxside import ClusterView
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Attempt, Member, Phase, Unit, UnitState
from flux_quantum.vendors.base import TaskSnapshot


class StartupMeter:
    """How long released jobs take to start: the lead ``release_at=predict`` releases by.

    The service notes when it released a job and later reads the job's ``t_run`` from
    job-list; the estimate is the 90th percentile of the last ``keep`` samples, or
    ``default`` until ``min_samples`` are in. Only the start, not the program's own
    start-up: the idle time the lead hides is from the job's start to its result.
    """

    def __init__(self, default: float, keep: int = 20, min_samples: int = 3) -> None:
        self.default = default
        self.keep = keep
        self.min_samples = min_samples
        self.samples: list[float] = []
        self.pending: dict[int, float] = {}

    def released(self, jobid: int, t: float) -> None:
        self.pending[jobid] = t

    def started(self, jobid: int, t_run: float) -> None:
        t_release = self.pending.pop(jobid, None)
        if t_release is not None and t_run > 0:
            self.samples = [*self.samples, max(0.0, t_run - t_release)][-self.keep :]

    def forget_older_than(self, t: float) -> None:
        self.pending = {j: r for j, r in self.pending.items() if r >= t}

    def estimate(self) -> float:
        if len(self.samples) < self.min_samples:
            return self.default
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


class Release:
    def __init__(
        self, ctx: ServiceContext, face: Face, outcomes: Outcomes, sessions: Sessions
    ) -> None:
        self.ctx = ctx
        self.face = face
        self.outcomes = outcomes
        self.sessions = sessions
        self.startup = StartupMeter(ctx.options.startup_default)
        self._startup_due = 0.0
        # free_at of the current cluster view by cores: one walk of the running jobs per
        # size asked, not per unit (a thousand units mostly ask for the same sizes).
        self._free_at: tuple[ClusterView | None, dict[int, float | None]] = (None, {})
        # Cores of each unit's jobs, counted once per cluster view (every
        # cluster_interval): a member joining or leaving shows at the next view.
        self._cores: dict[int, int] = {}
        # A loop step's time weight and time limit, read once per cluster view (None:
        # not a weighted step), and the forecast waits for nodes of that view.
        self._steps: dict[int, tuple[float, float] | None] = {}
        self._node_waits: dict[tuple[int, float, float], NodeWait] = {}

    # -- the release point

    def ready(self, unit: Unit, attempt: Attempt, reason: str) -> None:
        """The attempt reached its release point; release the unit if all did."""
        attempt.ready(reason, self.ctx.clock())
        if attempt.device is not None and attempt.task is not None:
            self.ctx.estimator.forget_task(attempt.device.name, attempt.task.task_id)
        self.maybe_release(unit)

    def polled(
        self, unit: Unit, attempt: Attempt, snap: TaskSnapshot, now: float, backlog: Backlog | None
    ) -> bool:
        """A poll saw ``snap``: the attempt's expected wait (and estimated place) is
        updated, and it is READY if it reached its release point or its lead (the rule:
        ``flux_quantum.selection.release_point``). ``backlog``: what the place of a
        queued task whose vendor gives no position is estimated from (IBM: the pending
        count seen before the create, the time since, the latest probe's count); None for
        a task with a position. Returns whether it is READY."""
        assert attempt.device is not None
        release_at = unit.request.release_at
        drain = self.ctx.estimator.estimate(attempt.device).seconds_per_task
        if backlog is None:
            decision = positioned_release(snap, release_at, drain, attempt.running_seen)
        else:
            estimate = backlog.estimate(snap, drain)
            decision = unpositioned_release(snap, release_at, estimate, self.startup.estimate())
            attempt.estimated_position = decision.estimated_position
        attempt.expected_wait = decision.expected_wait
        if decision.release:
            self.ready(unit, attempt, decision.reason)
            return True
        return self.lead_reached(unit, attempt, now)

    def lead_reached(self, unit: Unit, attempt: Attempt, now: float) -> bool:
        """Release early when waiting longer would waste nothing (``lead_release``): the
        classical resources will take at least as long to free up as the quantum task
        takes to reach its release point, or, with ``release_at=predict``, the expected
        wait for the result is below the time released jobs take to start."""
        cluster, snap = self.ctx.cluster, attempt.snapshot
        if snap is None or attempt.expected_wait is None:
            return False
        decision = lead_release(
            unit.request.release_at,
            attempt.expected_wait,
            now - snap.t,
            classical=self._classical_wait(unit, cluster, now) if cluster else None,
            startup=self.startup.estimate(),
            limit_share=cluster.limit_share if cluster else 1.0,
        )
        if not decision.release and cluster is not None:
            vendor_left = max(0.0, attempt.expected_wait - (now - snap.t))
            decision = self._step_lead(unit, cluster, vendor_left) or decision
        if not decision.release:
            return False
        self.ready(unit, attempt, decision.reason)
        return True

    def _step_lead(
        self, unit: Unit, cluster: ClusterView, vendor_left: float
    ) -> ReleaseDecision | None:
        """A loop's step with a time weight (``user.qpu_time_weight``, set by the loop)
        waiting for its result: released once the result is no farther than the
        forecast wait for its nodes (``step_plan.node_lead_release``); None for any
        other job, or without a view of the queue."""
        if cluster.queue is None or unit.request.loop is None or not unit.jobs:
            return None
        if unit.request.release_at not in AT_END:
            return None
        self._classical_wait(unit, cluster, cluster.t)  # a new view resets the caches
        if unit.id not in self._steps:
            self._steps[unit.id] = step_of(next(iter(unit.jobs.values())).jobspec)
        step = self._steps[unit.id]
        if step is None:
            return None
        weight, duration = step
        cores = self._cores[unit.id]
        key = (cores, duration, weight)
        wait = self._node_waits.get(key)
        if wait is None:
            quantile = lead_quantile(weight)
            wait = forecast_node_wait(cluster.queue, cores, duration, quantile=quantile)
            self._node_waits[key] = wait
        return node_lead_release(vendor_left, wait, weight)

    def window_lead(self, unit: Unit, now: float) -> float:
        """How long before its reserved window a job waiting for one goes in: the
        learned start-up of released jobs (as ``release_at=predict`` uses it) plus the
        expected wait for the unit's cores (the classical lead; none when unknown)."""
        cluster = self.ctx.cluster
        classical = self._classical_wait(unit, cluster, now) if cluster is not None else None
        return self.startup.estimate() + (classical or 0.0)

    def check_lead(self, unit: Unit, attempt: Attempt, now: float) -> None:
        """Between polls: the cluster may have filled up, or time passed."""
        if not attempt.busy and attempt.snapshot is not None:
            self.lead_reached(unit, attempt, now)

    def _classical_wait(self, unit: Unit, cluster: ClusterView, now: float) -> float | None:
        view, free_at = self._free_at
        if view is not cluster:
            free_at = {}
            self._free_at = (cluster, free_at)
            self._cores = {}
            self._steps = {}
            self._node_waits = {}
        cores = self._cores.get(unit.id)
        if cores is None:
            cores = self._cores[unit.id] = self._unit_cores(unit, cluster)
        if cores not in free_at:
            free_at[cores] = cluster.free_at(cores)
        at = free_at[cores]
        return None if at is None else max(0.0, at - now)

    @staticmethod
    def _unit_cores(unit: Unit, cluster: ClusterView) -> int:
        return sum(cluster.cores_for(m.size) for m in unit.jobs.values())

    # -- the release

    def maybe_release(self, unit: Unit) -> None:
        """Release the unit's jobs once every program is READY."""
        ctx = self.ctx
        if not unit.active or not unit.jobs:
            return
        attempts = unit.attempts()
        if not all(a.phase is Phase.READY for a in attempts):
            return
        first = attempts[0]
        assert first.task is not None and first.device is not None
        info = ReleaseInfo(
            vendor=first.device.vendor,
            device_id=first.device.id,
            region=first.device.region,
            tasks=tuple(a.task.task_id for a in attempts if a.task is not None),
            devices=tuple(a.device.name for a in attempts if a.device is not None),
            # In a merged task, the job reads its own program's result only.
            programs=tuple(
                a.merge.index if a.merge is not None else -1 for a in attempts if a.task is not None
            ),
            catalog=ctx.catalog.path,
            # Every rank of the job reads its task through the service, which asks the
            # vendor once per task (flux_quantum.service.taskread): the job needs no
            # credentials of its own. A guest's own service registers no endpoint.
            read_via=ctx.module_name,
            # A guest's job on the site's accounts: it has no credentials of its own.
            account=SITE_ACCOUNT if unit.userid != ctx.userid else None,
            # Admitted into a reserved window: the job's own tasks on the device carry
            # its ARN while it lasts (the shell plugin exports it).
            reservation=ReleasedWindow(first.window.name, first.window.arn, first.window.end)
            if first.window is not None
            else None,
        ).to_dict()
        reasons = tuple(
            {
                "index": p.index,
                "task": p.attempt.task.task_id if p.attempt.task else None,
                "why": p.attempt.ready_reason,
            }
            for p in unit.programs
        )
        record = events.Ready(index=0, attempt=first.number, tasks=reasons)
        ctx.post_many(
            [
                (member, record)
                for member in list(unit.jobs.values())
                if (events.READY, 0, first.number) not in member.facts
            ]
        )
        task, device = first.task.task_id, first.device.name
        for ids, resources in self._release_calls(unit):
            try:
                ctx.flux.release(ids, task=task, device=device, info=info, resources=resources)
            except (CommandError, OSError) as exc:
                # All-or-nothing per call: a job left since the scan; rescan, retry.
                ctx.log(syslog.LOG_INFO, f"unit {unit.id}: release deferred: {exc}")
                ctx.request_rescan()
                return
            unit.release = {"task": task, "device": device, "info": info}
            self.startup.released(ids[0], ctx.clock())
            self.face.released(unit, ids)
            unit.released_jobs.extend(ids)
            for jobid in ids:
                ctx.units.job_left(jobid)
            ctx.counters.released += len(ids)
        unit.released_at = ctx.clock()
        ctx.log(syslog.LOG_INFO, f"unit {unit.id}: released")
        self.outcomes.finish(unit, UnitState.RELEASED)

    def _release_calls(self, unit: Unit) -> list[tuple[list[int], list[Any] | None]]:
        """Who is released in which plugin call. When the tasks' devices are vertices in
        Fluxion's graph, one job of the unit (its first) also asks for their qpu slots,
        so its allocation records the QPUs (R.scheduling) and Fluxion arbitrates them;
        the jobs that only read the same task do not."""
        ids = sorted(unit.jobs)
        devices = [a.device.name for a in unit.attempts() if a.device is not None]
        try:
            in_graph = bool(devices) and set(devices) <= self.ctx.flux.graph_devices()
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"graph lookup failed: {exc}")
            in_graph = False
        if not in_graph:
            return [(ids, None)]
        holder = unit.id if unit.id in unit.jobs else ids[0]
        try:
            resources = self.ctx.flux.qpu_resources(unit.jobs[holder].jobspec, devices)
        except Exception as exc:
            self.ctx.log(syslog.LOG_WARNING, f"unit {unit.id}: released without QPU vertex: {exc}")
            return [(ids, None)]
        others = [i for i in ids if i != holder]
        return ([(others, None)] if others else []) + [([holder], resources)]

    def release_late(
        self, job: HeldJob, unit_id: int, release: Mapping[str, Any], via: str
    ) -> None:
        """Release a job that joined after its unit was released: same task, at once."""
        member = Member(job.id, job.userid)
        self.ctx.post(member, events.Join(unit=unit_id, via=via, late=True))
        try:
            self.ctx.flux.release(
                [job.id], task=release["task"], device=release["device"], info=release["info"]
            )
            self.ctx.counters.released += 1
            self.sessions.joined_late(unit_id, job.id)
        except (CommandError, OSError) as exc:
            self.ctx.log(syslog.LOG_WARNING, f"{job.id}: late release failed: {exc}")

    # -- measuring start-up

    def measure_startup(self, now: float) -> None:
        """Read the start of a few recently released jobs (one RPC each, once a second)."""
        if not self.startup.pending or now < self._startup_due:
            return
        self._startup_due = now + 1.0
        self.startup.forget_older_than(now - 600.0)
        ids = list(self.startup.pending)[:8]
        try:
            times = self.ctx.flux.start_times(ids)
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"start times unavailable: {exc}")
            return
        for jobid in ids:
            if jobid not in times:
                self.startup.pending.pop(jobid, None)
            elif times[jobid] > 0:
                self.startup.started(jobid, times[jobid])
