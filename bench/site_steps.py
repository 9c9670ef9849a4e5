"""The adaptive arm of ``bench/site.py``: what each step of a chain decides, and how good
the decisions and their forecasts were.

A step of the adaptive arm decides what follows it as ``flux quantum loop``'s rank 0
does (``flux_quantum.job.forecast.StepForecasts`` on the arm's own instance, then
``flux_quantum.timing.step_plan.plan_step``): ``StepPlanner`` is that, fed by
``bench/site.py``'s application. ``decisions`` then puts every plan beside what
happened, on the day's clock: the vendor wait the plan expected (the loop's last task's)
and the service's expected wait for the task once it existed (its ``qpu_wait`` memo),
against the task's create -> end on the emulator; the wait for nodes the plan forecast,
against the step's release -> allocation (observed only for a step that went to the
queue: a kept step's is the forecast); and the hindsight best (``step_plan.hindsight``)
against the action taken. ``decision_lines`` and ``forecast_lines`` are the report's
tables. Times in the plans are wall seconds (Flux's and the service's clock), shown in
the day's time (x the factor).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from benchlib import percentile

from flux_quantum.job.forecast import FluxReader, StepForecasts
from flux_quantum.job.hold import Hold
from flux_quantum.timing.step_plan import (
    StepAction,
    StepPlan,
    hindsight,
    plan_step,
)


class StepPlanner:
    """What a step decides at the end of its work, read on the arm's instance."""

    def __init__(self, handle: Any, weight: float, cores_per_node: int) -> None:
        self.forecasts = StepForecasts(FluxReader(handle))
        self.weight = weight
        self.cores_per_node = cores_per_node

    def plan(
        self,
        jobid: int,
        previous: int,
        nodes: int,
        limit: float,
        work: float,
        now: float,
        turnaround: float = 0.0,
    ) -> StepPlan:
        """Step job ``jobid`` (exclusive ``nodes``, time limit ``limit``; its work took
        ``work``), whose last task was job ``previous``'s, plans the next step; the
        loop's quickest release -> running so far was ``turnaround``."""
        try:
            facts = self.forecasts.facts(
                jobid=jobid,
                previous=previous,
                nodes=nodes,
                cores=nodes * self.cores_per_node,
                exclusive=True,
                duration=limit,
                weight=self.weight,
                work=work,
                now=now,
                turnaround=turnaround,
            )
        except OSError as exc:
            why = f"give back: the cluster's queue could not be read ({exc})"
            return StepPlan(StepAction.GIVE_BACK, why, self.weight)
        return plan_step(facts, self.weight)

    def vendor_left(self, jobid: int) -> float | None:
        return self.forecasts.vendor_left(jobid)


@dataclass
class Holding:
    """A step keeping its nodes (``host``, a JobRecord) for its successor (``carrier``);
    ``checked``: when the service's forecast was last read (wall)."""

    host: Any
    carrier: Any
    hold: Hold
    checked: float = -math.inf
    vendor_left: float | None = None


# --- the decisions against what happened --------------------------------------------------


@dataclass
class Decision:
    """One plan and what happened, in the day's seconds."""

    device: str
    nodes: int
    action: str
    outcome: str  # in place | gave up | released
    node_fc: float | None
    vendor_fc: float | None
    vendor_source: str
    vendor_actual: float | None  # the plan -> the task's end
    node_actual: float | None  # release -> allocation (None: never went to the queue)
    service_fc: float | None = None  # the service's first expected wait for the task
    service_actual: float | None = None  # that forecast's time -> the task's end
    idle: float = 0.0  # node-seconds this iteration's nodes waited for its result
    delay: float = 0.0  # seconds its result waited for nodes
    best: str = ""
    agrees: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def decisions(
    records: Iterable[Any], origin: float, factor: float, weight: float
) -> list[Decision]:
    """Every adaptive step's plan beside what happened (``records``: the arm's
    JobRecords; a step's ``plan`` was made by the step before it)."""
    out = []

    def em(t: float) -> float:
        return (t - origin) * factor

    for r in records:
        plan = r.plan
        if not plan:
            continue
        decided = plan["t"]
        ended = r.timeline[3]  # the task's end, the day's seconds
        vendor_actual = None if ended is None else ended - em(decided)
        node_actual = None
        delay = 0.0
        ev = r.events
        if "alloc" in ev and "qpu-release" in ev:
            entered = max(ev["qpu-release"], ev.get("depend", 0.0))
            node_actual = (ev["alloc"] - entered) * factor
            if ended is not None:
                delay = max(0.0, em(ev["alloc"]) - ended)
        outcome = r.hold[2] if r.hold else "released"
        idle = 0.0
        if r.hold:
            start, stop, _ = r.hold
            idle = r.nodes * (stop - start) * factor
        idle += sum(r.nodes * (b - a) * factor for a, b, _ in r.idle)
        service_fc = service_actual = None
        if r.service_wait is not None and ended is not None:
            at, seconds = r.service_wait
            service_fc, service_actual = seconds * factor, ended - em(at)
        best = agrees = None
        if vendor_actual is not None:
            c = node_actual if node_actual is not None else (plan["node_wait"] or 0.0) * factor
            h = hindsight(vendor_actual, c, weight)
            best, agrees = h.best.value, h.agrees(StepAction(plan["action"]))
        out.append(
            Decision(
                device=r.device,
                nodes=r.nodes,
                action=plan["action"],
                outcome=outcome,
                node_fc=None if plan["node_wait"] is None else plan["node_wait"] * factor,
                vendor_fc=None if plan["vendor_wait"] is None else plan["vendor_wait"] * factor,
                vendor_source=plan["vendor_source"],
                vendor_actual=vendor_actual,
                node_actual=node_actual,
                service_fc=service_fc,
                service_actual=service_actual,
                idle=idle,
                delay=delay,
                best=best or "",
                agrees=bool(agrees) if agrees is not None else True,
            )
        )
    return out


def _minutes(seconds: float) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds / 60:.1f}m"


def _errors(pairs: list[tuple[float, float]]) -> str:
    """Forecast errors (actual - forecast): n, median, p10/p90, median absolute."""
    errors = [a - f for f, a in pairs]
    if not errors:
        return "n 0"
    absolute = statistics.median(abs(e) for e in errors)
    return (
        f"n {len(errors):>3}  median {_minutes(statistics.median(errors)):>7}  p10 "
        f"{_minutes(percentile(errors, 0.1)):>7}  p90 {_minutes(percentile(errors, 0.9)):>7}"
        f"  |err| median {_minutes(absolute):>6}"
    )


def decision_lines(arm: str, rows: list[Decision]) -> list[str]:
    """How the arm's steps decided, against the hindsight best."""
    if not rows:
        return []
    lines = [f"decisions of {arm}'s steps (the plan for each later step, made by the one before)"]
    for action in ("keep", "early", "give-back"):
        mine = [d for d in rows if d.action == action]
        if not mine:
            continue
        outcomes = {o: sum(1 for d in mine if d.outcome == o) for o in ("in place", "gave up")}
        said = ", ".join(f"{n} {o}" for o, n in outcomes.items() if n)
        lines.append(
            f"  {action:<9} {len(mine):>3}{f' ({said})' if said else '':<24} agree with hindsight "
            f"{sum(d.agrees for d in mine):>3}; idle {sum(d.idle for d in mine) / 3600:6.1f} "
            f"node-h, results waiting for nodes {sum(d.delay for d in mine) / 3600:5.2f} h"
        )
    agree = sum(d.agrees for d in rows)
    lines.append(
        f"  all       {len(rows):>3}, agree with hindsight {agree} ({agree / len(rows):.0%})"
    )
    return lines


def forecast_lines(rows: list[Decision]) -> list[str]:
    """The forecasts' errors (actual - forecast, the day's minutes)."""
    if not rows:
        return []
    nodes = [
        (d.node_fc, d.node_actual)
        for d in rows
        if d.node_fc is not None and d.node_actual is not None
    ]
    lines = ["forecast errors (actual - forecast, the day's time)"]
    lines.append(f"  wait for nodes (plan; steps that went to the queue)  {_errors(nodes)}")
    for device in sorted({d.device for d in rows}):
        mine = [d for d in rows if d.device == device]
        prior = [
            (d.vendor_fc, d.vendor_actual)
            for d in mine
            if d.vendor_fc is not None and d.vendor_actual is not None
        ]
        service = [
            (d.service_fc, d.service_actual)
            for d in mine
            if d.service_fc is not None and d.service_actual is not None
        ]
        lines.append(f"  {device:<7} vendor, last task's wait  {_errors(prior)}")
        lines.append(f"  {device:<7} vendor, service's         {_errors(service)}")
    return lines
