"""The decision after a loop's step (``flux_quantum.timing.step_plan``): pure."""

from __future__ import annotations

import pytest

from flux_quantum.timing.node_wait import NodeWait
from flux_quantum.timing.step_plan import (
    DEFAULT_WEIGHT,
    StepAction,
    StepFacts,
    StepPlan,
    VendorForecast,
    WeightSettings,
    hindsight,
    hold_bound,
    keep_holding,
    lead_quantile,
    node_lead_release,
    plan_step,
    step_of,
)


def facts(node: float | None, vendor: float | None, **kw: float) -> StepFacts:
    return StepFacts(NodeWait(node, 0.75, 0.5), VendorForecast(vendor, "service"), **kw)


def test_the_bound_is_the_break_even_of_holding_and_getting_the_nodes_back() -> None:
    assert lead_quantile(1.0) == 0.5 and lead_quantile(3.0) == 0.75 and lead_quantile(0) == 0
    assert hold_bound(1200.0, 3.0) == 900.0
    # keeping costs V of idle, giving back w (C - V) of delay: equal at V = w/(1+w) C
    v = hold_bound(1200.0, 3.0)
    assert v == pytest.approx(3.0 * (1200.0 - v))


def test_keep_when_the_result_comes_within_the_bound() -> None:
    plan = plan_step(facts(1200.0, 300.0), 3.0)
    assert plan.action is StepAction.KEEP and plan.bound == 900.0
    assert plan.reason.startswith("keep: the next result is expected in 5m (service)")
    assert "within the 15m hold bound" in plan.reason
    # no forecast of the result: hold up to the bound (ski rental), no longer
    blind = plan_step(facts(1200.0, None), 3.0)
    assert blind.action is StepAction.KEEP and blind.bound == 900.0


def test_release_early_when_the_result_is_past_the_bound() -> None:
    plan = plan_step(facts(1200.0, 3600.0), 3.0)
    assert plan.action is StepAction.EARLY and plan.bound == 0.0
    assert plan.reason.startswith("release early: the next step enters the queue when its")
    assert "past the 15m hold bound" in plan.reason


def test_the_time_limit_caps_the_bound() -> None:
    # 700 s left, 100 s of work: (700 - 100) / 1.2 = 500 s of room
    capped = plan_step(facts(1200.0, 300.0, work=100.0, time_left=700.0), 3.0)
    assert capped.action is StepAction.KEEP and capped.bound == pytest.approx(500.0)
    assert "what the step's time limit leaves" in capped.reason
    longer = plan_step(facts(1200.0, 600.0, work=100.0, time_left=700.0), 3.0)
    assert longer.action is StepAction.EARLY
    none = plan_step(facts(1200.0, 10.0, work=100.0, time_left=100.0), 3.0)
    assert none.action is StepAction.EARLY and "leaves no room" in none.reason


def test_a_steps_turnaround_counts_even_when_the_nodes_are_free() -> None:
    def quick(vendor: float) -> StepPlan:
        return plan_step(
            StepFacts(NodeWait(0.0, 0.75, 1.0), VendorForecast(vendor, "service"), turnaround=60.0),
            3.0,
        )

    kept = quick(30.0)
    assert kept.action is StepAction.KEEP and kept.bound == pytest.approx(45.0)
    assert "nodes are free now and a step's 60s turnaround" in kept.reason
    given = quick(100.0)
    assert given.action is StepAction.GIVE_BACK and "past the 45s hold bound" in given.reason
    busy = plan_step(facts(1200.0, 950.0), 3.0)
    assert busy.action is StepAction.EARLY
    turned = plan_step(
        StepFacts(NodeWait(1200.0, 0.75, 1.0), VendorForecast(950.0), turnaround=120.0), 3.0
    )
    assert turned.action is StepAction.KEEP and turned.bound == pytest.approx(990.0)


def test_give_back_when_there_is_nothing_to_gain() -> None:
    free = plan_step(facts(0.0, 30.0), 3.0)
    assert free.action is StepAction.GIVE_BACK and "nodes are free now" in free.reason
    unknown = plan_step(facts(None, 30.0), 3.0)
    assert unknown.action is StepAction.GIVE_BACK and "cannot be forecast" in unknown.reason
    never = plan_step(facts(1200.0, 30.0), 0.0)
    assert never.action is StepAction.GIVE_BACK and "time weight is 0" in never.reason


def test_a_hold_gives_up_at_the_bound_or_when_the_service_says_it_will_pass_it() -> None:
    plan = plan_step(facts(1200.0, 300.0), 3.0)
    assert keep_holding(plan, 100.0, 200.0).hold
    assert keep_holding(plan, 100.0, None).hold
    late = keep_holding(plan, 900.0, None)
    assert not late.hold and late.reason.startswith("gave up after 15m")
    told = keep_holding(plan, 100.0, 1000.0)
    assert not told.hold and "the service expects the result in 17m" in told.reason


def test_the_services_node_lead() -> None:
    wait = NodeWait(600.0, 0.75, 0.5)
    assert node_lead_release(500.0, wait, 3.0).release
    assert node_lead_release(500.0, wait, 3.0).reason.startswith(
        "node lead: expected wait for the result 8m <= forecast wait for nodes 10m"
    )
    assert not node_lead_release(700.0, wait, 3.0).release
    assert not node_lead_release(0.0, wait, 0.0).release
    assert not node_lead_release(0.0, NodeWait(0.0, 0.75, 0.5), 3.0).release


def test_hindsight_is_the_cheaper_of_keeping_and_releasing_at_the_best_time() -> None:
    best = hindsight(vendor_wait=300.0, node_wait=1200.0, weight=3.0)
    assert best.best is StepAction.KEEP and best.cost == 300.0
    assert best.agrees(StepAction.KEEP) and not best.agrees(StepAction.EARLY)
    late = hindsight(vendor_wait=3000.0, node_wait=1200.0, weight=3.0)
    assert late.best is StepAction.EARLY and late.cost == 0.0
    assert late.agrees(StepAction.GIVE_BACK) and late.agrees(StepAction.EARLY)


def test_a_plan_round_trips_and_a_step_carries_its_weight() -> None:
    plan = plan_step(facts(1200.0, 300.0), 3.0)
    assert StepPlan.from_dict(plan.to_dict()) == plan
    jobspec = {"attributes": {"user": {"qpu_time_weight": 2}, "system": {"duration": 600.0}}}
    assert step_of(jobspec) == (2.0, 600.0)
    assert step_of({"attributes": {"user": {"qpu_time_weight": 0}}}) is None
    assert step_of({"attributes": {"user": {"qpu_time_weight": "x"}}}) is None
    assert step_of({}) is None


def test_the_site_sets_the_default_and_the_most_a_loop_may_ask() -> None:
    assert WeightSettings.from_config(None).weight(None) == DEFAULT_WEIGHT
    site = WeightSettings.from_config({"time-weight": 1, "max-time-weight": 5})
    assert site.weight(None) == 1.0 and site.weight(4) == 4.0
    with pytest.raises(ValueError, match="over the site's maximum 5"):
        site.weight(6)
    with pytest.raises(ValueError, match="time-weight 6 is over max-time-weight 5"):
        WeightSettings.from_config({"time-weight": 6, "max-time-weight": 5})
    with pytest.raises(ValueError, match="unknown"):
        WeightSettings.from_config({"weight": 1})
    with pytest.raises(ValueError, match="finite number >= 0"):
        WeightSettings.from_config({"time-weight": -1})
