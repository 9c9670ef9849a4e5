"""bench/site.py's adaptive arm, summarized (unit tier, no Flux: the records an arm would
leave): a step that ran its successor's iteration in place counts as the loop's, the
cancelled step job is neither a failure nor where the loop ended; each plan is put beside
what happened (``site_steps.decisions``), and the new targets say met or MISSED."""

from __future__ import annotations

import pytest
from site_records import (
    FACTOR,
    NODES,
    ORIGIN,
    arm,
    in_job_loop,
    site_report,
    site_steps,
    variational,
    wall,
)


def plan(action: str, node_wait: float, vendor_wait: float, at: float) -> dict:
    """A plan made at ``at`` (the day's seconds), its waits in the day's seconds."""
    return {
        "action": action,
        "reason": "",
        "weight": 3.0,
        "bound": 0.75 * node_wait / FACTOR,
        "node_wait": node_wait / FACTOR,
        "vendor_wait": vendor_wait / FACTOR,
        "vendor_source": "previous task",
        "t": wall(at),
    }


def adaptive_loop() -> list:
    """The loop of ``in_job_loop`` as adaptive steps: step 1 keeps its nodes for task 2
    (600 s of the day) and runs iteration 2 in place, then gives them back; step 3 is
    released early, 50 s before its task ends, and allocated 20 s after it."""
    first = variational(1, 11, submit=0.0, alloc=1000.0, start=1000.0, finish=1800.0)
    first.results = [(1, wall(900.0), wall(1000.0)), (2, wall(1700.0), wall(1700.0))]
    first.work = [(wall(1000.0), wall(1100.0)), (wall(1700.0), wall(1800.0))]
    first.idle = [(wall(1100.0), wall(1700.0), 2)]
    first.t_result = wall(1700.0)
    kept = variational(2, 12, submit=1100.0)
    kept.events.update({"qpu-release": wall(1650.0), "exception": wall(1700.0)})
    kept.exception = "cancel"
    kept.ran_in, kept.hold = 11, (wall(1100.0), wall(1700.0), "in place")
    kept.plan = plan("keep", 3000.0, 550.0, 1100.0)
    kept.timeline = (1100.0, None, 1690.0, 1700.0)
    third = variational(3, 13, submit=1800.0, alloc=3020.0, start=3020.0, finish=3120.0)
    third.events["qpu-release"] = wall(2950.0)
    third.results = [(3, wall(3000.0), wall(3020.0))]
    third.work = [(wall(3020.0), wall(3120.0))]
    third.t_result = wall(3020.0)
    third.plan = plan("early", 60.0, 1100.0, 1800.0)
    third.timeline = (1800.0, None, 2900.0, 3000.0)
    return [first, kept, third]


def test_an_iteration_run_in_place_is_the_loops_and_its_cancelled_step_no_failure() -> None:
    summary, _ = site_report.summarize(arm("adaptive", adaptive_loop()))
    assert (summary.hyb_results, summary.hyb_failed, summary.hyb_unresolved) == (1, 0, 0)
    assert summary.var_done_median_s == pytest.approx(3120.0)  # the last step's end
    assert summary.idle_later_node_h == pytest.approx(NODES * 600.0 / 3600.0)
    assert summary.step_jobs == 2
    assert (summary.dec_n, summary.dec_keep, summary.dec_in_place, summary.dec_early) == (
        2,
        1,
        1,
        1,
    )


def test_each_plan_beside_what_happened_and_the_hindsight_best() -> None:
    kept, early = site_steps.decisions(adaptive_loop(), ORIGIN, FACTOR, 3.0)
    assert (kept.action, kept.outcome) == ("keep", "in place")
    assert kept.vendor_actual == pytest.approx(600.0) and kept.node_actual is None
    assert kept.idle == pytest.approx(NODES * 600.0)
    # keeping 600 s against 3 x (3000 - 600) of delay: keep was right
    assert kept.best == "keep" and kept.agrees
    assert (early.action, early.outcome) == ("early", "released")
    assert early.vendor_actual == pytest.approx(1200.0)
    assert early.node_actual == pytest.approx(70.0)  # release -> allocation
    assert early.delay == pytest.approx(20.0)  # the result waited for nodes
    assert early.best == "early" and early.agrees
    lines = site_steps.decision_lines("adaptive", [kept, early])
    assert lines[1].split()[:2] == ["keep", "1"] and "agree with hindsight   1" in lines[1]
    assert lines[-1] == "  all         2, agree with hindsight 2 (100%)"
    errors = site_steps.forecast_lines([kept, early])
    assert errors[1].startswith("  wait for nodes (plan; steps that went to the queue)  n   1")
    assert "median    0.2m" in errors[1]  # 70 s against the forecast 60 s


def test_the_adaptive_targets_against_the_in_job_loop_ungated_and_the_chain() -> None:
    arms = {
        "ungated": {"idle_node_h": 100.0},
        "gated-done": {
            "var_done_median_s": 3000.0,
            "var_done_p95_s": 10000.0,
            "idle_later_node_h": 40.0,
            "ord_wait_mean_s": 3600.0,
        },
        "chain": {"ord_wait_mean_s": 3000.0},
        "adaptive": {
            "var_done_median_s": 3050.0,  # +1.7 %
            "var_done_p95_s": 10600.0,  # +6 %
            "idle_later_node_h": 1.5,
            "idle_node_h": 1.5,
            "ord_wait_mean_s": 2900.0,
        },
    }
    lines = site_report.adaptive_targets(arms)
    assert lines[0] == "new targets, adaptive against gated-done:"
    assert [line.rsplit(" ", 1)[-1] for line in lines[1:]] == [
        *("met", "MISSED", "met", "MISSED", "met"),
    ]
    assert "the site's idle 1.5 node-h <= 1.0 (1% of ungated's 100.0)" in lines[4]
    assert site_report.adaptive_targets({"gated-done": arms["gated-done"]}) == []


def test_the_seeds_table_gives_medians_and_spread() -> None:
    injob, _ = site_report.summarize(arm("gated-done", [in_job_loop()]))
    adaptive, _ = site_report.summarize(arm("adaptive", adaptive_loop()))
    rows = []
    for seed in (1, 2, 3):
        for s in (injob, adaptive):
            rows.append(type(s)(**{**s.__dict__, "seed": seed}))
    lines = site_report.seeds_lines(rows)
    assert lines[0].startswith("across the seeds 1, 2, 3: median [min-max]")
    [row] = [line for line in lines if line.startswith("adaptive ")]
    assert row.split()[1:3] == ["1.33", "[1.33-1.33]"]  # later idle: 8 nodes x 600 s
    assert "0.87 [0.87-0.87]" in row  # the answer at 3,120 s of the day
    assert any(
        line.startswith("new targets, adaptive against gated-done, medians of 3") for line in lines
    )
