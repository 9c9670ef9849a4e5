"""A step holding its nodes for the next step's result (a loop's ``keep``).

When the plan after step k says keep, step k's job stays on its nodes while step k+1,
submitted as a held job like any other (its task created by the service, one token, so
one task per iteration), waits for its result; step k+1 also waits for step k's job to
end (``afterany``), so it never asks for nodes while step k holds them. ``Hold`` is the
decision's bookkeeping while it lasts: fed the time, whether step k+1's result is there
and the service's latest forecast for it, it says go on holding, run the iteration in
place, or give up (the plan's bound was reached or will be: ``step_plan.keep_holding``),
after which step k's job ends and step k+1 goes on as a released-early step. It never
calls Flux, never reads a clock and never waits: ``flux_quantum.job.loopsteps`` does,
and feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from flux_quantum.timing.node_wait import duration_text
from flux_quantum.timing.step_plan import StepPlan, keep_holding


class HoldState(StrEnum):
    HOLDING = "holding"
    IN_PLACE = "in place"  # the result came: the next iteration runs in this job
    GAVE_UP = "gave up"  # the nodes go back; the next step is released early


@dataclass(frozen=True)
class HoldOutcome:
    state: HoldState
    held: float
    reason: str = ""


class Hold:
    """Step ``host`` holding its nodes since ``since`` for step ``carrier``'s result, by
    ``plan`` (a keep)."""

    def __init__(self, plan: StepPlan, host: int, carrier: int, since: float) -> None:
        self.plan = plan
        self.host = host
        self.carrier = carrier
        self.since = since
        self.outcome: HoldOutcome | None = None

    def check(self, now: float, *, result_ready: bool, vendor_left: float | None) -> HoldOutcome:
        """Where the hold stands at ``now``; once it ended, the same outcome again."""
        if self.outcome is not None:
            return self.outcome
        held = max(0.0, now - self.since)
        if result_ready:
            self.outcome = HoldOutcome(
                HoldState.IN_PLACE,
                held,
                f"held {duration_text(held)} (bound {duration_text(self.plan.bound)}): the "
                "result came, the iteration ran in place",
            )
            return self.outcome
        check = keep_holding(self.plan, held, vendor_left)
        if check.hold:
            return HoldOutcome(HoldState.HOLDING, held)
        self.outcome = HoldOutcome(HoldState.GAVE_UP, held, check.reason)
        return self.outcome
