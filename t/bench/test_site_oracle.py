"""bench/site_oracle.py: the adaptive arm's steps against hindsight (unit tier, no Flux:
hand-made step records and job rows). The oracle keeps a step when that is what its
budget is best spent on, gives it back at the best moment when that costs no time,
spends a binding budget where the percentile moves (exactly: checked against every
choice on small cases), and the rule's replay at other weights keeps what a larger
weight would keep."""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import asdict, fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from site_records import arm, chain_loop, in_job_loop, site_oracle, site_report

from flux_quantum.timing.step_plan import StepAction

InJob, JobRow, Loop, Step = (
    site_oracle.InJob,
    site_oracle.JobRow,
    site_oracle.Loop,
    site_oracle.Step,
)
best_percentile, idle_for, frontier = (
    site_oracle.best_percentile,
    site_oracle.idle_for,
    site_oracle.frontier,
)
percentile, read_rows, replay = site_oracle.percentile, site_oracle.read_rows, site_oracle.replay


def step(
    nodes: int,
    vendor: float,
    node: float,
    action: StepAction = StepAction.GIVE_BACK,
    delay: float | None = None,
    **more: float | None,
) -> Step:
    """A later step whose task waited ``vendor`` s and whose nodes took ``node`` s; as
    run, it was given back at its result (its result waited ``node`` s) unless said."""
    return Step(
        2, nodes, vendor, node, True, action, delay=node if delay is None else delay, **more
    )


def loop(index: int, base: float, *steps: Step) -> Loop:
    """A loop that would take ``base`` s with no result waiting for nodes."""
    return Loop(
        index, "garnet", steps[0].nodes if steps else 1, base + sum(s.delay for s in steps), steps
    )


def test_keeping_is_best_when_the_nodes_come_back_long_after_the_result() -> None:
    # 2 nodes idle 600 s (1,200 node-s) save the 3,000 s the result would wait.
    one = loop(1, 5000.0, step(2, vendor=600.0, node=3600.0))
    assert frontier(one) == [(0.0, 8000.0), (1200.0, 5000.0)]
    assert best_percentile([one], 0.5, budget=1200.0) == (5000.0, 1200.0)
    assert best_percentile([one], 0.5, budget=1199.0) == (8000.0, 0.0)
    assert idle_for([one], 0.5, target=5000.0) == 1200.0
    assert idle_for([one], 0.5, target=4999.0) == math.inf


def test_giving_back_is_best_when_the_nodes_come_before_the_result() -> None:
    # Released at the result the step waited 600 s for nodes; released 600 s before
    # it, it waits none: no idle, no delay, whatever the budget.
    one = loop(1, 5000.0, step(16, vendor=3600.0, node=600.0))
    assert one.done == 5600.0
    assert frontier(one) == [(0.0, 5000.0)]
    assert best_percentile([one], 0.5, budget=1e9) == (5000.0, 0.0)
    assert idle_for([one], 0.95, target=5000.0) == 0.0


def test_a_binding_budget_goes_where_the_median_moves_not_to_the_cheapest_step() -> None:
    # Each loop's one step saves 5,000 s if kept; A is the cheapest to keep, but only
    # keeping B (or A and B) moves the median.
    loops = [
        loop(1, 1000.0, step(1, vendor=100.0, node=5100.0)),  # A: 100 node-s
        loop(2, 2000.0, step(2, vendor=100.0, node=5100.0)),  # B: 200 node-s
        loop(3, 3000.0, step(4, vendor=100.0, node=5100.0)),  # C: 400 node-s
    ]
    assert best_percentile(loops, 0.5, budget=0.0) == (7000.0, 0.0)
    assert best_percentile(loops, 0.5, budget=100.0) == (7000.0, 0.0)
    assert best_percentile(loops, 0.5, budget=299.0) == (6000.0, 200.0)
    assert best_percentile(loops, 0.5, budget=300.0) == (2000.0, 300.0)
    assert idle_for(loops, 0.5, 6000.0) == 200.0
    assert idle_for(loops, 0.5, 2000.0) == 300.0
    assert idle_for(loops, 0.5, 999.0) == math.inf


def test_an_interpolated_median_spends_on_the_loop_that_lowers_it_most() -> None:
    loops = [
        loop(1, 0.0, step(1, vendor=10.0, node=1010.0)),  # 1,000 s for 10 node-s
        loop(2, 0.0, step(2, vendor=10.0, node=3010.0)),  # 3,000 s for 20 node-s
    ]
    assert best_percentile(loops, 0.5, budget=10.0) == (1500.0, 10.0)
    assert best_percentile(loops, 0.5, budget=20.0) == (500.0, 20.0)
    assert best_percentile(loops, 0.5, budget=30.0) == (0.0, 30.0)


def brute(loops: list[Loop], q: float, budget: float) -> float:
    """The best percentile over every keep/give-back choice of every step."""
    steps = [(i, s) for i, lp in enumerate(loops) for s in lp.steps]
    best = math.inf
    for keep in itertools.product((False, True), repeat=len(steps)):
        idle = sum(s.keep_idle for (_, s), k in zip(steps, keep, strict=True) if k)
        if idle > budget:
            continue
        times = [lp.base for lp in loops]
        for (i, s), k in zip(steps, keep, strict=True):
            times[i] += 0.0 if k else s.best_delay
        best = min(best, percentile(times, q))
    return best


loops_strategy = st.lists(
    st.tuples(
        st.integers(0, 10),
        st.lists(
            st.tuples(st.integers(1, 4), st.integers(0, 10), st.integers(0, 20)),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(loops_strategy, st.integers(0, 60), st.sampled_from([0.5, 0.95]))
def test_the_oracle_is_the_best_of_every_choice(
    spec: list[tuple[int, list[tuple[int, int, int]]]], budget: int, q: float
) -> None:
    loops = [
        loop(i, 100.0 * base, *(step(n, 100.0 * v, 100.0 * c) for n, v, c in steps))
        for i, (base, steps) in enumerate(spec)
    ]
    value, idle = best_percentile(loops, q, 100.0 * budget)
    assert value == pytest.approx(brute(loops, q, 100.0 * budget))
    assert idle <= 100.0 * budget
    assert idle_for(loops, q, value) <= idle


def test_the_rule_replayed_at_a_larger_weight_keeps_what_the_day_released() -> None:
    # The day (w 0.25) released the step early: the result was forecast 1,000 s away,
    # past 20 % of the 3,600 s forecast wait for nodes; its result then waited 2,000 s.
    # At w 1 the bound is half of 3,600 s: it keeps, the result comes in 900 s.
    s = step(
        4,
        vendor=900.0,
        node=3600.0,
        action=StepAction.EARLY,
        delay=2000.0,
        node_forecast=3600.0,
        vendor_forecast=1000.0,
        work=60.0,
    )
    one = loop(1, 5000.0, s)
    day = replay([one], 0.25)
    assert (day.keeps, day.same, day.idle, day.times) == (0, 1, 0.0, (7000.0,))
    keep = replay([one], 1.0)
    assert (keep.keeps, keep.same, keep.idle, keep.times) == (1, 0, 3600.0, (5000.0,))


def test_the_replay_keeps_no_step_whose_limit_left_the_day_no_room() -> None:
    # At w 0.25 the rule would keep (bound 720 s >= 300 s) but the day gave the nodes
    # back: its limit had no room for the hold, at any weight.
    s = step(
        4,
        vendor=300.0,
        node=3600.0,
        action=StepAction.EARLY,
        delay=100.0,
        node_forecast=3600.0,
        vendor_forecast=300.0,
    )
    assert site_oracle.day_plan(s).action is StepAction.KEEP
    assert replay([loop(1, 0.0, s)], 8.0).keeps == 0
    free = replace(s, action=StepAction.KEEP)
    assert replay([loop(1, 0.0, free)], 8.0).keeps == 1


def row(step_no: int, **values: object) -> JobRow:
    """A row of the adaptive arm's loop 7 (4 nodes, 3 iterations of 300 s work)."""
    base = {f.name: None for f in fields(JobRow)}
    base.update(
        share=0.2,
        arm="adaptive",
        index=7,
        step=step_no,
        kind="hybrid",
        pattern="variational",
        device="garnet",
        nodes=4,
        runtime_s=900.0,
        idle_s=0.0,
        exception="",
        app_calls=1,
        release_why="",
        seed=1,
        plan="",
        hold="",
        ran_in="",
    )
    base.update(values)
    return JobRow(**base)


def adaptive_rows() -> list[JobRow]:
    """Step 1 runs from 1,000 s; step 2's task ends 200 s after the plan and step 1
    runs it in place (held 200 s); step 3 is given back: its task ends 1,000 s after
    the plan, it is released at 1,600 + 1,000 + 10 s and gets its nodes 400 s later."""
    first = dict(submit_s=0.0, alloc_s=1000.0, start_s=1000.0, finish_s=1600.0)
    return [
        row(1, **first, result_s=1000.0, task_ended_s=990.0, release_s=995.0),
        row(
            2,
            submit_s=1300.0,
            task_ended_s=1500.0,
            release_s=1510.0,
            exception="cancel",
            plan="keep",
            plan_node_wait_s=900.0,
            plan_vendor_wait_s=150.0,
            held_s=200.0,
            hold="in place",
            ran_in="123",
        ),
        row(
            3,
            submit_s=1600.0,
            alloc_s=3010.0,
            start_s=3010.0,
            finish_s=3310.0,
            result_s=3010.0,
            task_ended_s=2600.0,
            release_s=2610.0,
            plan="give-back",
            plan_node_wait_s=0.0,
            plan_vendor_wait_s=200.0,
        ),
    ]


def test_the_steps_are_read_from_the_rows_as_the_day_had_them() -> None:
    (one,) = site_oracle.loops_of(adaptive_rows())
    assert one.done == 3310.0 and one.first_wait == 1000.0
    kept, given = one.steps
    assert (kept.queued, kept.vendor_wait, kept.node_wait) == (False, 200.0, 900.0)
    assert (kept.idle, kept.delay, kept.action) == (800.0, 0.0, StepAction.KEEP)
    assert (given.queued, given.vendor_wait, given.node_wait) == (True, 1000.0, 400.0)
    assert (given.delay, given.work, given.turnaround) == (410.0, 300.0, 5.0)
    assert one.base == 2900.0
    failed = [replace(r, exception="timeout") if r.step == 1 else r for r in adaptive_rows()]
    assert site_oracle.loops_of(failed) == []


def test_the_report_holds_the_oracle_against_gated_done() -> None:
    injob = {(1, 0.2): InJob(median=2900.0, p95=2900.0, later_idle=100.0 * 3600)}
    text = "\n".join(site_oracle.report_lines(adaptive_rows(), injob))
    assert "oracle within 5.0 node-h: median 0.81h (met, 0.2 node-h)" in text
    assert "as run (w 0.25): median 0.92h" in text
    late = {(1, 0.2): InJob(median=2000.0, p95=2000.0, later_idle=100.0 * 3600)}
    text = "\n".join(site_oracle.report_lines(adaptive_rows(), late))
    assert "median 0.81h (MISSED" in text and "not even keeping every step" in text


def test_site_writes_rows_the_oracle_reads_back(tmp_path: Path) -> None:
    rows = site_report.job_rows(arm("chain", chain_loop()))
    path = tmp_path / "jobs.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in fields(JobRow)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    assert read_rows(path, JobRow) == rows
    assert [r.step for r in rows] == [1, 2, 3] and rows[1].submit_s == 1100.0


def test_a_recorded_time_limit_caps_the_hold_and_the_weight_is_the_plans() -> None:
    rows = adaptive_rows()
    rows[2] = replace(rows[2], plan_s=1590.0, plan_limit_s=900.0, plan_weight=1.0)
    (one,) = site_oracle.loops_of(rows)
    kept, given = one.steps
    # Step 1 started at 1,000 s with a 900 s limit: 310 s left at the plan, at 1,590 s.
    assert (given.time_left, given.vendor_wait, given.weight) == (310.0, 1010.0, 1.0)
    assert (kept.time_left, kept.weight) == (None, 0.25)  # not recorded: the day's
    s = step(
        4,
        vendor=300.0,
        node=3600.0,
        action=StepAction.KEEP,
        delay=0.0,
        node_forecast=3600.0,
        vendor_forecast=300.0,
    )
    assert replay([loop(1, 0.0, s)], 8.0).keeps == 1
    # 60 s of work and 1.2 x the hold must fit in what is left: 200 s holds no 300 s wait.
    short = replace(s, work=60.0, time_left=200.0)
    assert replay([loop(1, 0.0, short)], 8.0).keeps == 0
    assert replay([loop(1, 0.0, replace(short, time_left=500.0))], 8.0).keeps == 1


def test_site_prints_the_oracle_after_a_run_with_both_arms() -> None:
    runs = [arm("gated-done", [in_job_loop()]), arm("adaptive", chain_loop())]
    summaries = [site_report.summarize(run)[0] for run in runs]
    text = "\n".join(site_report.oracle_lines(summaries, runs))
    assert "seed 1, share 20%: 1 variational loops with their answer, 0 later steps" in text
    assert "gated-done: median 0.83h" in text and "per loop" not in text
    assert site_report.oracle_lines(summaries[1:], runs[1:]) == []
