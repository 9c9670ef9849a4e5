"""What a loop does after each step: keep the step's nodes for the next result, release
the next step early, or give the nodes back; and the rule the service releases an early
step by.

Step k of a loop has its nodes; step k+1's task is about to wait in the vendor's queue
for V seconds, and step k+1's job, once released, would wait C seconds for nodes. The
loop's **time weight** w says what one second of the loop's time to result is worth in
seconds of idle nodes (per node). Keeping the nodes through the wait costs V of idle
and no delay; giving them back and entering step k+1 into the queue as early as its
result allows costs w x max(0, C - V) of delay (its nodes arrive C after it enters the
queue, and it cannot enter before step k ends) and no idle. So:

- **keep** when V <= B, the hold bound B = w / (1 + w) x C: the break-even of the two
  (ski rental: rent while renting costs less than buying). The step holds its nodes for
  at most B; if the result has not come by then (or the service's forecast says it will
  not), it gives them back (``keep_holding``), so a wrong forecast costs at most B of
  idle before the loop falls back to the release below.
- **release early** otherwise: the nodes go back now, and the service enters step k+1
  into the queue once the expected wait for its result falls to the forecast wait for
  its nodes (``node_lead_release``), so the nodes arrive when the result does. The
  forecast of the wait for nodes is the w / (1 + w) quantile (running jobs trusted for
  that quantile of the share of their limits finished jobs ran): releasing by a higher
  quantile costs idle when nodes come sooner, by a lower one delay when they come later,
  and that quantile balances the two at the weight (the newsvendor's critical ratio).
- **give back** when there is nothing to gain: the nodes are free now (the forecast wait
  is 0) and the result not due within w / (1 + w) of a step's turnaround, the wait
  cannot be forecast, or w is 0 (never hold a node idle): step k+1 is released at its
  result.

Getting the nodes back costs a step's turnaround too (release -> running: the
scheduler, the job's start), the quickest the loop has seen: C counts it.

C comes from ``flux_quantum.timing.node_wait``; V from the service's expected wait for
step k+1's task (the device's drain times its place), else the loop's last task's wait
on the device. A keep also needs room in step k's time limit for the hold and one more
iteration's work. This module decides only: facts in, a ``StepPlan`` with its reason out;
it never calls Flux or a vendor and never reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flux_quantum.timing.node_wait import NodeWait, duration_text
from flux_quantum.timing.release_point import ReleaseDecision

# Seconds of idle nodes one second of a loop's time to result is worth (per node), unless
# the loop or the site says otherwise: a step holds its nodes for a result due within a
# fifth of the wait for nodes, and is released early by the 20 % quantile of that wait.
# On a site's day (bench/site.py, 512 nodes, 20 % hybrid) weights of 0.5 and more held
# tens of node-hours idle for no time to result the noise between runs shows, 0.15-0.3
# about 2. And the most a loop may ask for unless the site says otherwise.
DEFAULT_WEIGHT = 0.25
MAX_WEIGHT = 100.0
# Room kept in a step's time limit beyond the hold and the next iteration's work.
LIMIT_MARGIN = 1.2
# Where a loop's step carries its time weight for the service: attributes.user.<this>.
WEIGHT_ATTRIBUTE = "qpu_time_weight"


class StepAction(StrEnum):
    KEEP = "keep"
    EARLY = "early"
    GIVE_BACK = "give-back"


def check_weight(value: object, name: str = "time weight") -> float:
    """A time weight: a finite number >= 0; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class WeightSettings:
    """The site's word on loops' time weights (``[quantum.loops]``): the weight of a
    loop that asks for none (``time-weight``) and the most one may ask for
    (``max-time-weight``)."""

    default: float = DEFAULT_WEIGHT
    maximum: float = MAX_WEIGHT

    @classmethod
    def from_config(cls, table: Any) -> WeightSettings:
        """From ``[quantum.loops]`` as ``flux config get`` gives it (None: the defaults);
        ValueError naming the key."""
        if table is None:
            return cls()
        if not isinstance(table, Mapping):
            raise ValueError("[quantum.loops] must be a table")
        unknown = sorted(set(table) - {"time-weight", "max-time-weight"})
        if unknown:
            raise ValueError(
                f"[quantum.loops] {unknown[0]} is unknown: time-weight, max-time-weight"
            )
        maximum = check_weight(
            table.get("max-time-weight", MAX_WEIGHT), "[quantum.loops] max-time-weight"
        )
        default = check_weight(
            table.get("time-weight", min(DEFAULT_WEIGHT, maximum)), "[quantum.loops] time-weight"
        )
        if default > maximum:
            raise ValueError(
                f"[quantum.loops] time-weight {default:g} is over max-time-weight {maximum:g}"
            )
        return cls(default, maximum)

    def weight(self, asked: float | None) -> float:
        """The weight a loop plans by: ``asked`` (ValueError above the maximum), else
        the site's default."""
        if asked is None:
            return self.default
        value = check_weight(asked)
        if value > self.maximum:
            raise ValueError(
                f"time weight {value:g} is over the site's maximum {self.maximum:g} "
                "([quantum.loops] max-time-weight)"
            )
        return value


def step_of(jobspec: Mapping[str, Any]) -> tuple[float, float] | None:
    """A loop step's time weight and time limit (seconds, 0: none) from its jobspec;
    None for a job without a valid weight > 0."""
    attributes = jobspec.get("attributes") or {}
    user = attributes.get("user") or {}
    system = attributes.get("system") or {}
    try:
        weight = check_weight(user.get(WEIGHT_ATTRIBUTE) if isinstance(user, Mapping) else None)
    except ValueError:
        return None
    duration = system.get("duration") if isinstance(system, Mapping) else None
    seconds = 0.0
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration > 0:
        seconds = float(duration)
    return (weight, seconds) if weight > 0 else None


def lead_quantile(weight: float) -> float:
    """The quantile of the wait for nodes a step is released early by: w / (1 + w)."""
    return weight / (1.0 + weight) if weight > 0 else 0.0


def hold_bound(node_wait: float, weight: float) -> float:
    """How long holding the nodes for a result is worth at most: w / (1 + w) x C."""
    return lead_quantile(weight) * max(0.0, node_wait)


@dataclass(frozen=True)
class VendorForecast:
    """Seconds until the next task's result, and where the figure comes from:
    ``service`` (its expected wait for the task), ``previous task`` (how long the
    loop's last task took on the device), or ``none``."""

    seconds: float | None
    source: str = "none"

    def describe(self) -> str:
        if self.seconds is None:
            return "unknown"
        return f"{duration_text(self.seconds)} ({self.source})"


@dataclass(frozen=True)
class StepFacts:
    """What step k knows when its work is done: the forecast wait for step k+1's nodes
    (at the weight's quantile), the forecast wait for task k+1's result, how long one
    iteration's work takes (None: unknown), the time left in step k's limit (None: no
    limit) and the loop's quickest turnaround of a released step."""

    node_wait: NodeWait
    vendor: VendorForecast
    work: float | None = None
    time_left: float | None = None
    # The quickest a step of the loop went from its release to running (seconds): what
    # a step given its nodes back costs even when they are free.
    turnaround: float = 0.0


@dataclass(frozen=True)
class StepPlan:
    """What follows step k: ``action`` and why; ``bound``: the longest step k holds its
    nodes for task k+1's result (KEEP); the forecasts it was made from."""

    action: StepAction
    reason: str
    weight: float
    bound: float = 0.0
    node_wait: float | None = None
    vendor_wait: float | None = None
    vendor_source: str = "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "reason": self.reason,
            "weight": self.weight,
            "bound": round(self.bound, 3),
            "node_wait": None if self.node_wait is None else round(self.node_wait, 3),
            "vendor_wait": None if self.vendor_wait is None else round(self.vendor_wait, 3),
            "vendor_source": self.vendor_source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepPlan:
        def number(key: str) -> float | None:
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            return float(value)

        return cls(
            action=StepAction(data["action"]),
            reason=str(data.get("reason") or ""),
            weight=number("weight") or 0.0,
            bound=number("bound") or 0.0,
            node_wait=number("node_wait"),
            vendor_wait=number("vendor_wait"),
            vendor_source=str(data.get("vendor_source") or "none"),
        )


def plan_step(facts: StepFacts, weight: float) -> StepPlan:
    """Keep, release early or give back, and why (see the module's text). Pure."""
    node, vendor = facts.node_wait, facts.vendor

    def plan(action: StepAction, reason: str, bound: float = 0.0) -> StepPlan:
        return StepPlan(
            action,
            reason,
            weight=weight,
            bound=bound,
            node_wait=node.seconds,
            vendor_wait=vendor.seconds,
            vendor_source=vendor.source,
        )

    if weight <= 0:
        why = "the loop's time weight is 0: its steps never hold nodes idle"
        return plan(StepAction.GIVE_BACK, f"give back: {why}")
    if node.seconds is None:
        why = f"the wait for nodes cannot be forecast: {node.describe()}"
        return plan(StepAction.GIVE_BACK, f"give back: {why}")
    # What getting nodes back costs: the wait in the queue, and a step's turnaround
    # (release -> running) even when they are free.
    back = node.seconds + facts.turnaround
    free = node.seconds <= 0
    gain = "nodes are free now" if free else f"the {node.describe()} forecast wait for nodes"
    if facts.turnaround > 0:
        gain += f" and a step's {duration_text(facts.turnaround)} turnaround"
    bound = hold_bound(back, weight)
    share = f"{lead_quantile(weight):.0%} of {gain}"
    if free:
        other = StepAction.GIVE_BACK
        elsewise = "give back: nodes are free now: the next step gets them at its result"
    else:
        other = StepAction.EARLY
        elsewise = (
            f"release early: the next step enters the queue when its result is "
            f"{duration_text(node.seconds)} away (the forecast wait for its nodes)"
        )
    if back <= 0:
        return plan(other, elsewise)
    room = None
    if facts.time_left is not None:
        room = (facts.time_left - (facts.work or 0.0)) / LIMIT_MARGIN
        if room < bound:
            bound = max(0.0, room)
    if bound <= 0:
        why = (
            f"{elsewise}; holding is worth up to {duration_text(hold_bound(back, weight))}"
            f" but the step's time limit leaves no room for it and one more iteration"
        )
        return plan(other, why)
    limited = " (what the step's time limit leaves)" if room is not None and room <= bound else ""
    if vendor.seconds is None:
        if free:  # nothing says the result is near, and the nodes are free: no hold
            return plan(other, elsewise)
        why = (
            f"keep: no forecast of the next result; the nodes are held at most "
            f"{duration_text(bound)}{limited}, {share}"
        )
        return plan(StepAction.KEEP, why, bound)
    if vendor.seconds <= bound:
        why = (
            f"keep: the next result is expected in {vendor.describe()}, within the "
            f"{duration_text(bound)} hold bound{limited} ({share}): holding the nodes "
            "costs less than getting them back"
        )
        return plan(StepAction.KEEP, why, bound)
    why = (
        f"{elsewise}; the result is expected in {vendor.describe()}, past the "
        f"{duration_text(bound)} hold bound{limited} ({share})"
    )
    return plan(other, why)


@dataclass(frozen=True)
class HoldCheck:
    """Whether a keeping step goes on holding its nodes, and why not."""

    hold: bool
    reason: str = ""


def keep_holding(plan: StepPlan, held: float, vendor_left: float | None) -> HoldCheck:
    """A step kept its nodes ``held`` seconds for the next result, which the service
    now expects in ``vendor_left`` (None: no word): hold on while the result can come
    within the plan's bound (ski rental: the bound is the most the hold is worth)."""
    if plan.action is not StepAction.KEEP:
        return HoldCheck(False, "not a keep")
    if held >= plan.bound:
        return HoldCheck(
            False,
            f"gave up after {duration_text(held)}: the result did not come within the "
            f"{duration_text(plan.bound)} hold bound; the next step is released early",
        )
    if vendor_left is not None and held + vendor_left > plan.bound:
        return HoldCheck(
            False,
            f"gave up after {duration_text(held)}: the service expects the result in "
            f"{duration_text(vendor_left)}, past the {duration_text(plan.bound)} hold "
            "bound; the next step is released early",
        )
    return HoldCheck(True)


def node_lead_release(vendor_left: float, node_wait: NodeWait, weight: float) -> ReleaseDecision:
    """The service's rule for a loop's step held for its task: released once the
    expected wait for the result (``vendor_left``) is at most the forecast wait for the
    step's nodes, so that they arrive with the result."""
    if weight <= 0:
        return ReleaseDecision(False, "no node lead: the loop's time weight is 0")
    if node_wait.seconds is None or node_wait.seconds <= 0:
        return ReleaseDecision(False, f"no node lead: wait for nodes {node_wait.describe()}")
    if vendor_left <= node_wait.seconds:
        return ReleaseDecision(
            True,
            f"node lead: expected wait for the result {duration_text(vendor_left)} <= "
            f"forecast wait for nodes {node_wait.describe()}",
            estimated=True,
            expected_wait=vendor_left,
        )
    return ReleaseDecision(
        False,
        f"expected wait for the result {duration_text(vendor_left)} > forecast wait for "
        f"nodes {duration_text(node_wait.seconds)}",
        expected_wait=vendor_left,
    )


@dataclass(frozen=True)
class Hindsight:
    """The best action once the waits are known: keeping costs the vendor wait of idle
    (per node), releasing at the best moment w x max(0, node wait - vendor wait) of
    delay; ``best`` is the cheaper (KEEP, else EARLY), ``cost`` its cost."""

    best: StepAction
    keep_cost: float
    release_cost: float

    @property
    def cost(self) -> float:
        return min(self.keep_cost, self.release_cost)

    def agrees(self, action: StepAction) -> bool:
        """Whether ``action`` is the best: a release early and a give-back are the same
        choice (the nodes go back) in hindsight."""
        if self.keep_cost == self.release_cost:
            return True
        return (action is StepAction.KEEP) == (self.best is StepAction.KEEP)


def hindsight(vendor_wait: float, node_wait: float, weight: float) -> Hindsight:
    """The best action for waits known after the fact (seconds per node)."""
    keep = max(0.0, vendor_wait)
    release = weight * max(0.0, node_wait - vendor_wait)
    best = StepAction.KEEP if keep < release else StepAction.EARLY
    return Hindsight(best, keep, release)
