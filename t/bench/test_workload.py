"""bench/workload.py: the site benchmark's seeded day of jobs (unit tier, no Flux)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import workload  # noqa: E402

DEVICES = (("sv1", 0.3), ("garnet", 0.4), ("ankaa3", 0.3))


def trace(share: float, seed: int = 1) -> workload.Trace:
    return workload.make_trace(256, 6 * 3600.0, 1.0, share, DEVICES, seed, 8.0, 3600.0)


def test_a_seed_is_a_trace() -> None:
    assert trace(0.2) == trace(0.2)
    assert trace(0.2, seed=2) != trace(0.2)


def test_the_day_offers_the_load_asked_for() -> None:
    t = trace(0.2)
    assert t.offered_load == pytest.approx(1.0, abs=0.05)
    day = [j for j in t.jobs if not j.backlog]
    work = sum(j.nodes * min(j.runtime, t.day - j.submit) for j in day if j.hybrid is None)
    assert work > 0
    assert all(-3600.0 <= j.submit < t.day for j in t.jobs)
    assert [j.submit for j in t.jobs] == sorted(j.submit for j in t.jobs)


def test_jobs_follow_the_model() -> None:
    t = trace(0.2)
    assert all(1 <= j.nodes <= t.nodes for j in t.jobs)
    assert all(1.0 <= j.runtime <= math.exp(workload.MAX_LOG_RUNTIME) for j in t.jobs)
    assert all(j.limit >= j.runtime for j in t.jobs)
    assert all(j.hybrid is None for j in t.jobs if j.backlog)
    serial = sum(1 for j in t.jobs if j.hybrid is None and j.nodes == 1) / len(t.jobs)
    assert 0.1 < serial < 0.5  # the model's 0.29


def test_the_small_share_is_inside_the_large_one() -> None:
    small, large = trace(0.05), trace(0.2)

    def ordinary(t: workload.Trace) -> set[tuple[float, int, float]]:
        return {(j.submit, j.nodes, j.runtime) for j in t.jobs if j.hybrid is None}

    assert ordinary(large) < ordinary(small)  # the same arrivals, more of them hybrid

    def units(t: workload.Trace) -> set[tuple[float, float]]:
        return {(j.submit, j.share_draw) for j in t.hybrid_jobs}

    assert units(small) and units(small) < units(large)
    assert all(j.share_draw < 0.05 for j in small.hybrid_jobs)


def test_hybrid_jobs_keep_their_pattern_in_every_share() -> None:
    def specs(t: workload.Trace) -> dict[float, workload.Hybrid]:
        return {j.share_draw: j.hybrid for j in t.hybrid_jobs if j.hybrid}

    small, large = specs(trace(0.05)), specs(trace(0.2))
    assert all(large[draw] == spec for draw, spec in small.items())


def test_fan_out_groups_share_a_submit() -> None:
    t = trace(0.2)
    assert {j.hybrid.pattern for j in t.hybrid_jobs if j.hybrid} == {
        "single",
        "fan-out",
        "variational",
    }
    for j in t.hybrid_jobs:
        assert j.hybrid is not None and j.nodes <= workload.HYBRID_MAX_NODES
        if j.hybrid.pattern == "fan-out":
            members = [k for k in t.jobs if k.index - k.member == j.index - j.member]
            assert len(members) == j.hybrid.group
            assert {k.submit for k in members} == {j.submit}
        if j.hybrid.pattern == "variational":
            assert 3 <= j.hybrid.iterations <= 5


def test_the_daily_cycle() -> None:
    weights = workload.day_weights(workload.LublinBatch(128))
    assert len(weights) == workload.BUCKETS
    assert sum(weights) / len(weights) == pytest.approx(1.0)
    # busier in the working day than in the night (the model's cycle)
    assert max(weights[18:36]) > 2 * min(weights[:12])
