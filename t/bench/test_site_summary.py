"""bench/site.py's summary of an arm: a chain's steps counted as one hybrid job, the
later tasks' idle, the time to the answer, the per-iteration overhead and the targets
(unit tier, no Flux: the records an arm would leave)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from site_records import (
    FACTOR,
    NODES,
    JobRecord,
    arm,
    chain_loop,
    in_job_loop,
    ordinary,
    site_jobs,
    site_report,
    variational,
    wall,
)


def test_an_in_job_loop_holds_its_nodes_through_the_later_tasks() -> None:
    summary, _ = site_report.summarize(arm("gated-done", [ordinary(), in_job_loop()]))
    assert summary.jobs == 2 and summary.hybrid_jobs == 1 and summary.var_jobs == 1
    assert summary.idle_first_node_h == 0.0
    assert summary.idle_later_node_h == pytest.approx(NODES * 1800.0 / 3600.0)
    assert summary.var_done_median_s == pytest.approx(3000.0)
    assert summary.hyb_ttr_median_s == pytest.approx(2900.0)
    assert summary.iter_overhead_n == 2 and summary.iter_overhead_p50_s == pytest.approx(0.0)
    assert summary.first_overhead_p50_s == pytest.approx(100.0 / FACTOR)
    assert summary.step_jobs == 0
    assert summary.ord_wait_mean_s == pytest.approx(60.0)


def test_a_chain_is_one_hybrid_job_of_steps_with_no_idle_between_them() -> None:
    summary, _ = site_report.summarize(arm("chain", [ordinary(), *chain_loop()]))
    assert summary.jobs == 2 and summary.hybrid_jobs == 1 and summary.var_jobs == 1
    assert summary.step_jobs == 2
    assert summary.idle_node_h == 0.0 and summary.idle_later_node_h == 0.0
    assert (summary.hyb_results, summary.hyb_failed, summary.hyb_unresolved) == (1, 0, 0)
    assert summary.var_done_median_s == pytest.approx(3130.0)  # submit -> last step's end
    assert summary.iter_overhead_p50_s == pytest.approx(30.0 / FACTOR)
    # the steps' classical work is useful time: 3 slices of 100 s on 8 nodes
    assert summary.util_useful * 64 * 4000.0 == pytest.approx(3 * 100.0 * NODES + 500.0 * 4)


def test_a_chain_missing_its_last_step_is_open_and_a_failed_step_fails_it() -> None:
    steps = chain_loop()
    summary, _ = site_report.summarize(arm("chain", steps[:2]))
    assert (summary.hyb_results, summary.hyb_unresolved) == (0, 1)
    assert math.isnan(summary.var_done_median_s)
    steps[1].exception = "timeout"
    summary, _ = site_report.summarize(arm("chain", steps))
    assert (summary.hyb_results, summary.hyb_failed) == (0, 1)


def test_the_targets_say_missed_where_the_chain_misses() -> None:
    injob, _ = site_report.summarize(arm("gated-done", [in_job_loop()]))
    chain, _ = site_report.summarize(arm("chain", chain_loop()))
    verdicts = [line.rsplit(" ", 1)[-1] for line in site_report.targets([injob, chain])[1:]]
    assert verdicts == ["met", "met", "met"]
    # 400 s of the day from each task's end to its step running: 4 wall seconds, and the
    # answer at 3,500 s against the in-job loop's 3,000 (more than 10 % later)
    slow, _ = site_report.summarize(arm("chain", chain_loop(lag=400.0)))
    verdicts = [line.rsplit(" ", 1)[-1] for line in site_report.targets([injob, slow])[1:]]
    assert verdicts == ["met", "MISSED", "MISSED"]
    assert site_report.targets([chain]) == [
        "targets: no gated-done arm in this run to hold the chain against"
    ]


def test_each_chain_arm_is_held_against_the_in_job_loop() -> None:
    injob, _ = site_report.summarize(arm("gated-done", [in_job_loop()]))
    chain, _ = site_report.summarize(arm("chain", chain_loop(lag=400.0)))
    predict, _ = site_report.summarize(arm("chain-predict", chain_loop()))
    lines = site_report.targets([injob, chain, predict])
    assert [line for line in lines if line.startswith("targets")] == [
        "targets, chain against gated-done:",
        "targets, chain-predict against gated-done:",
    ]
    assert [line.rsplit(" ", 1)[-1] for line in lines if line.startswith("  ")] == [
        *("met", "MISSED", "MISSED"),
        *("met", "met", "met"),
    ]
    assert site_report.targets([predict]) == [
        "targets: no gated-done arm in this run to hold the chain against"
    ]


def predicted_step(lead: float = 0.5) -> JobRecord:
    """Step 2 of a loop released by prediction at 1,000 s of the day with a start-up lead
    of ``lead`` wall seconds (50 s of the day), running at 1,020 s, its task ending at
    1,100 s: 30 s of its idle within the lead, 50 s past it."""
    r = variational(2, 21, submit=500.0, alloc=1020.0, start=1020.0, finish=1200.0)
    r.events["qpu-release"] = wall(1000.0)
    r.why = f"predicted: expected wait for the result 0.40s <= job start-up {lead:.2f}s"
    r.idle = [(wall(1020.0), wall(1100.0), 2)]
    r.work = [(wall(1100.0), wall(1200.0))]
    r.results = [(2, wall(1100.0), wall(1100.0))]
    r.t_result = wall(1100.0)
    return r


def test_a_release_by_prediction_is_counted_with_its_idle_within_and_past_its_lead() -> None:
    done = chain_loop()
    for r in done:
        r.events["qpu-release"] = r.events["start"] - 10.0 / FACTOR
        r.why = "COMPLETED"
    summary, _ = site_report.summarize(arm("chain-predict", [predicted_step(), *done]))
    assert summary.pred_released == 1 and summary.pred_lead_p50_s == pytest.approx(0.5)
    assert summary.idle_pred_node_h == pytest.approx(NODES * 80.0 / 3600.0)
    assert summary.idle_pred_lead_node_h == pytest.approx(NODES * 30.0 / 3600.0)
    assert summary.idle_later_node_h == pytest.approx(summary.idle_pred_node_h)
    # release -> run in wall seconds: 10 s of the day for the three steps released at done,
    # 20 s for the predicted one
    assert summary.release_run_p50_s == pytest.approx(10.0 / FACTOR)
    assert summary.release_run_p90_s == pytest.approx(17.0 / FACTOR)
    # a lead longer than the idle: all of it within the lead
    summary, _ = site_report.summarize(arm("chain-predict", [predicted_step(lead=2.0)]))
    assert summary.idle_pred_lead_node_h == pytest.approx(summary.idle_pred_node_h)
    lines = site_report.predict_table([summary], FACTOR)
    assert lines[-1].split()[:7] == ["chain-predict", "1", "2.00s", "3.3m", "0.2", "0.2", "0.0"]
    # an arm without releases by prediction prints no table
    summary, _ = site_report.summarize(arm("chain", done))
    assert summary.pred_released == 0 and site_report.predict_table([summary], FACTOR) == []


def test_a_predict_loop_releases_every_step_by_prediction_and_its_other_jobs_at_done(
    tmp_path: Path,
) -> None:
    pytest.importorskip("flux.job")
    from workload import Hybrid, TraceJob  # bench/, on the path above

    loop = TraceJob(5, 0.0, 8, 1800.0, 3600.0, 0.1, Hybrid("variational", "garnet", 100, 3))
    single = TraceJob(6, 0.0, 8, 600.0, 1200.0, 0.1, Hybrid("single", "garnet", 100))
    allowance = {"garnet": 5000.0}
    for arm_name, release_at, step_limit in (
        ("chain", "done", 1200.0),  # 3,600 / 3 iterations
        ("chain-predict", "predict", 7200.0),  # 1,200 + the device's longest wait, rounded
    ):
        limit = site_jobs.job_limit(loop, arm_name, allowance)
        assert limit == step_limit
        for step in (1, 2):
            spec = site_jobs.jobspec(loop, arm_name, 1.0, tmp_path / "p.qasm", limit, step)
            assert spec.attributes["system"]["qpu"]["release_at"] == release_at
        assert site_jobs.job_limit(single, arm_name, allowance) == 1200.0
        spec = site_jobs.jobspec(single, arm_name, 1.0, tmp_path / "p.qasm", 1200.0)
        assert spec.attributes["system"]["qpu"]["release_at"] == "done"
