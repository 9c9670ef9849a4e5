"""When and how held jobs are released: the release rule's facts gathered and its answer
acted on, the release call.

A program's attempt becomes READY when its task reaches the request's release point
(``qpu.release_at``: a queue position, RUNNING, or ended), or earlier when waiting longer
would waste nothing: the job's cores will take at least as long to free up as the task
takes to reach its release point (the classical lead), with ``release_at=predict`` the
expected wait for the result is below the time released jobs take to start (measured by
``StartupMeter``), or a variational loop's step that carries its loop's time weight has
its result no farther than the forecast wait for its nodes (the queue of the cluster
view), so that they arrive with it. The rule is ``flux_quantum.timing``'s, asked once
(``decide_release``): this part gathers all its facts at once, at a poll (``polled``) or
between polls (``check_lead``): the snapshot, the device's pace, what the place of a task
whose vendor gives no position is estimated from, the start-up, the wait for the unit's
cores, a step's forecast wait for nodes (what it reads of a cluster view is kept for that
view); and it does what the answer says. When every program of a unit is READY its jobs are released through
the plugin, one of them with the QPU slot vertices its tasks occupy when the devices are
in Fluxion's graph. A job admitted into a reserved window (Braket Direct) is released as
soon as its task exists, whatever its ``release_at`` (``Submission``), with the window in
its release record; how long before its window it is admitted is ``window_lead``. This
part never calls a vendor.
"""

from __future__ import annotations

import syslog
from collections.abc import Mapping
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import SITE_ACCOUNT, ReleasedWindow, ReleaseInfo
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.fluxside import ClusterView
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import Attempt, Member, Phase, Unit, UnitState
from flux_quantum.timing import (
    AT_END,
    Backlog,
    NodeWait,
    Pace,
    PollFacts,
    ReleaseDecision,
    ReleaseFacts,
    Standing,
    StepLead,
    decide_release,
    forecast_node_wait,
    lead_quantile,
    step_of,
)
from flux_quantum.vendors.base import TaskSnapshot, TaskState


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

    # -- the release rule

    def ready(self, unit: Unit, attempt: Attempt, reason: str) -> None:
        """The attempt reached its release point; release the unit if all did."""
        attempt.ready(reason, self.ctx.clock())
        if attempt.device is not None and attempt.task is not None:
            self.ctx.estimator.forget_task(attempt.device.name, attempt.task.task_id)
        self.maybe_release(unit)

    def polled(self, unit: Unit, attempt: Attempt, now: float) -> ReleaseDecision:
        """A poll saw ``attempt.snapshot``: the rule judges it with every fact at once.
        The attempt's expected wait and estimated place follow the answer, and it is
        READY if the answer releases it; the answer also says when to poll next."""
        decision = self._decide(unit, attempt, now, self._poll_facts(attempt))
        attempt.judged(decision.expected_wait, decision.estimated_position)
        if decision.release:
            self.ready(unit, attempt, decision.reason)
        return decision

    def check_lead(self, unit: Unit, attempt: Attempt, now: float) -> None:
        """Between polls: the cluster may have filled up, or time passed (the leads)."""
        if attempt.busy or attempt.snapshot is None:
            return
        decision = self._decide(unit, attempt, now, None)
        if decision.release:
            self.ready(unit, attempt, decision.reason)

    def _decide(
        self, unit: Unit, attempt: Attempt, now: float, poll: PollFacts | None
    ) -> ReleaseDecision:
        """The facts of the attempt's task at ``now``, gathered once, and the rule's
        answer (``flux_quantum.timing.decide_release``)."""
        snap, cluster = attempt.snapshot, self.ctx.cluster
        assert snap is not None
        return decide_release(
            ReleaseFacts(
                release_at=unit.request.release_at,
                now=now,
                standing=Standing(snap.t, attempt.expected_wait, attempt.estimated_position),
                poll=poll,
                startup=self.startup.estimate(),
                classical=self._classical_wait(unit, cluster, now) if cluster else None,
                limit_share=cluster.limit_share if cluster else 1.0,
                step=self._step_lead(unit, cluster) if cluster else None,
            )
        )

    def _poll_facts(self, attempt: Attempt) -> PollFacts:
        """What the poll that just answered brings: its snapshot, the device's pace, and
        what a task whose vendor gives no position is placed by (``_backlog``)."""
        snap, device = attempt.snapshot, attempt.device
        assert snap is not None and device is not None
        return PollFacts(
            snap,
            Pace.of(self.ctx.estimator, device),
            running_since=attempt.running_seen,
            backlog=self._backlog(attempt, snap),
            schedule=self.ctx.schedule,
            # An estimated place rests on the pending count, read again every device
            # check: polled at least that often, so a wrong drain prior cannot overshoot.
            recheck=self.ctx.options.device_check_interval,
        )

    def _backlog(self, attempt: Attempt, snap: TaskSnapshot) -> Backlog | None:
        """What the place of a queued task is estimated from when its vendor reports no
        queue positions on its device (IBM), or None: the pending count seen before the
        create, when it was created, and the latest probe's count if taken since."""
        if attempt.device is None or snap.state not in (TaskState.CREATED, TaskState.QUEUED):
            return None
        try:
            vendor = self.ctx.vendor(attempt.device.vendor)
        except Exception:
            return None
        if vendor.reports_positions(attempt.device):
            return None
        probe = self.ctx.device_snapshots.get(attempt.device.name)
        created = attempt.queued_at if attempt.queued_at is not None else attempt.since
        return Backlog(
            ahead_at_create=attempt.ahead,
            created_t=created if created is not None else snap.t,
            pending_now=probe.queue_depth
            if probe is not None and probe.t >= (created or 0)
            else None,
        )

    def _step_lead(self, unit: Unit, cluster: ClusterView) -> StepLead | None:
        """A loop's step with a time weight (``user.qpu_time_weight``, set by the loop)
        released by its result: the weight and the forecast wait for its nodes at the
        weight's quantile (``step_plan.lead_quantile``); None for any other job, or
        without a view of the queue."""
        if cluster.queue is None or unit.request.loop is None or not unit.jobs:
            return None
        if unit.request.release_at not in AT_END:
            return None
        self._view(cluster)
        if unit.id not in self._steps:
            self._steps[unit.id] = step_of(next(iter(unit.jobs.values())).jobspec)
        step = self._steps[unit.id]
        if step is None:
            return None
        weight, duration = step
        cores = self._unit_cores(unit, cluster)
        key = (cores, duration, weight)
        wait = self._node_waits.get(key)
        if wait is None:
            quantile = lead_quantile(weight)
            wait = forecast_node_wait(cluster.queue, cores, duration, quantile=quantile)
            self._node_waits[key] = wait
        return StepLead(weight, wait)

    def window_lead(self, unit: Unit, now: float) -> float:
        """How long before its reserved window a job waiting for one goes in: the
        learned start-up of released jobs (as ``release_at=predict`` uses it) plus the
        expected wait for the unit's cores (the classical lead; none when unknown)."""
        cluster = self.ctx.cluster
        classical = self._classical_wait(unit, cluster, now) if cluster is not None else None
        return self.startup.estimate() + (classical or 0.0)

    def _classical_wait(self, unit: Unit, cluster: ClusterView, now: float) -> float | None:
        """The seconds before the unit's cores can free up (None: never, as far as the
        view tells), read once per view and size."""
        cores = self._unit_cores(unit, cluster)
        free_at = self._free_at[1]
        if cores not in free_at:
            free_at[cores] = cluster.free_at(cores)
        at = free_at[cores]
        return None if at is None else max(0.0, at - now)

    def _unit_cores(self, unit: Unit, cluster: ClusterView) -> int:
        """The cores of the unit's jobs, counted once per view."""
        self._view(cluster)
        cores = self._cores.get(unit.id)
        if cores is None:
            cores = self._cores[unit.id] = sum(
                cluster.cores_for(m.size) for m in unit.jobs.values()
            )
        return cores

    def _view(self, cluster: ClusterView) -> None:
        """A new cluster view: what was read of the last one is forgotten."""
        if self._free_at[0] is not cluster:
            self._free_at = (cluster, {})
            self._cores, self._steps, self._node_waits = {}, {}, {}

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
