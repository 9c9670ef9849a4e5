"""bench/site.py's summary of an arm: a chain's steps counted as one hybrid job, the
later tasks' idle, the time to the answer, the per-iteration overhead and the targets
(unit tier, no Flux: the records an arm would leave)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
# Not `import site`: that name is the standard library's.
_spec = importlib.util.spec_from_file_location("site_bench", BENCH / "site.py")
assert _spec is not None and _spec.loader is not None
site_bench = importlib.util.module_from_spec(_spec)
sys.modules["site_bench"] = site_bench
_spec.loader.exec_module(site_bench)

JobRecord = site_bench.JobRecord
FACTOR = 100.0  # emulated seconds per wall second
ORIGIN = 1000.0  # wall time of the day's start
NODES = 8


def wall(day_seconds: float) -> float:
    return ORIGIN + day_seconds / FACTOR


def variational(arm_step: int, jobid: int, **events: float) -> JobRecord:
    record = JobRecord(
        7,
        "hybrid",
        NODES,
        300.0,
        jobid=jobid,
        unit=7,
        pattern="variational",
        device="garnet",
        iterations=3,
        step=arm_step,
    )
    record.events = {name: wall(t) for name, t in events.items()}
    return record


def in_job_loop() -> JobRecord:
    """One job, 3 tasks: the first done before it runs, the later two waited for on its
    nodes for 600 and 1,200 seconds of the day."""
    r = variational(0, 1, submit=0.0, alloc=1000.0, start=1000.0, finish=3000.0)
    r.idle = [(wall(1100.0), wall(1700.0), 2), (wall(1800.0), wall(3000.0), 3)]
    r.work = [(wall(1000.0), wall(1100.0)), (wall(1700.0), wall(1800.0))]
    r.work.append((wall(2900.0), wall(3000.0)))
    r.results = [(1, wall(900.0), wall(1000.0)), (2, wall(1700.0), wall(1700.0))]
    r.results.append((3, wall(2900.0), wall(2900.0)))
    r.t_result = wall(2900.0)
    return r


def chain_loop(lag: float = 30.0) -> list[JobRecord]:
    """The same loop as three steps, each held until its task is done; step k's work
    starts ``lag`` seconds of the day after task k ended."""
    steps = []
    for k, (submit, ended) in enumerate(((0.0, 900.0), (1100.0, 1750.0), (1900.0, 3000.0)), 1):
        start = ended + lag
        r = variational(k, 10 + k, submit=submit, alloc=start, start=start, finish=start + 100)
        r.work = [(wall(start), wall(start + 100))]
        r.results = [(k, wall(ended), wall(start))]
        r.t_result = wall(start)
        steps.append(r)
    return steps


def ordinary() -> JobRecord:
    r = JobRecord(3, "ordinary", 4, 500.0, jobid=99)
    r.events = {name: wall(t) for name, t in {"submit": 10.0, "alloc": 70.0}.items()}
    r.events.update(start=wall(70.0), finish=wall(570.0))
    return r


def arm(name: str, records: list[JobRecord]) -> object:
    return site_bench.ArmRun(
        name, 0.2, 64, records, ORIGIN, FACTOR, 4000.0, 1.0, None, 1.0, 0, 0, [], []
    )


def test_an_in_job_loop_holds_its_nodes_through_the_later_tasks() -> None:
    summary, _ = site_bench.summarize(arm("gated-done", [ordinary(), in_job_loop()]))
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
    summary, _ = site_bench.summarize(arm("chain", [ordinary(), *chain_loop()]))
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
    summary, _ = site_bench.summarize(arm("chain", steps[:2]))
    assert (summary.hyb_results, summary.hyb_unresolved) == (0, 1)
    assert math.isnan(summary.var_done_median_s)
    steps[1].exception = "timeout"
    summary, _ = site_bench.summarize(arm("chain", steps))
    assert (summary.hyb_results, summary.hyb_failed) == (0, 1)


def test_the_targets_say_missed_where_the_chain_misses() -> None:
    injob, _ = site_bench.summarize(arm("gated-done", [in_job_loop()]))
    chain, _ = site_bench.summarize(arm("chain", chain_loop()))
    verdicts = [line.rsplit(" ", 1)[-1] for line in site_bench.targets([injob, chain])[1:]]
    assert verdicts == ["met", "met", "met"]
    # 400 s of the day from each task's end to its step running: 4 wall seconds, and the
    # answer at 3,500 s against the in-job loop's 3,000 (more than 10 % later)
    slow, _ = site_bench.summarize(arm("chain", chain_loop(lag=400.0)))
    verdicts = [line.rsplit(" ", 1)[-1] for line in site_bench.targets([injob, slow])[1:]]
    assert verdicts == ["met", "MISSED", "MISSED"]
    assert site_bench.targets([chain]) == [
        "targets: no gated-done arm in this run to hold the chain against"
    ]
