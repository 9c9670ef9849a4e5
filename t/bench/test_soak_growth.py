"""bench/soak_growth.py (unit tier, no Flux): the growth per day, the day a series stops
growing, the warm day taken from the plain-Flux control and not from the figure judged,
the KVS cache judged by its bound, and the verdicts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import soak_growth  # noqa: E402


def day(n: int, broker_rss: float, control_rss: float | None, **extra: Any) -> dict[str, Any]:
    """A day-end sample of the soak, its control's broker beside it (None: no control)."""
    flat = dict.fromkeys(soak_growth.FLAT, 100.0) | dict.fromkeys(soak_growth.HISTORY, 1.0)
    return flat | {
        "t": 60.0 * n,
        "vendor_days": float(n),
        "day_end": n,
        "broker_rss_kb": broker_rss,
        "broker": {"mem_rss": broker_rss, "mem_anon": broker_rss / 2},
        "control": None if control_rss is None else {"mem_rss": control_rss},
        **extra,
    }


def test_growth_per_day_is_the_slope_over_the_mean() -> None:
    assert soak_growth.growth_pct_per_day([100.0, 100.0, 100.0]) == 0.0
    assert soak_growth.growth_pct_per_day([99.0, 100.0, 101.0]) == 1.0
    assert soak_growth.growth_pct_per_day([100.0]) is None


def test_a_series_stops_growing_on_the_first_day_of_its_flat_tail() -> None:
    days = list(range(1, 9))
    values = [30.0, 50.0, 70.0, 90.0, 110.0, 110.5, 110.2, 110.4]
    assert soak_growth.plateau_day(days, values) == 5
    assert soak_growth.plateau_day(days, [10.0 * d for d in days]) is None
    # The flat tail must be at least 3 days long: two flat days at the end are not enough.
    assert soak_growth.plateau_day([1, 2, 3, 4], [10.0, 20.0, 30.0, 30.0]) is None


def test_warm_is_the_day_the_control_stops_growing_and_the_soak_is_judged_from_it() -> None:
    control = [30.0, 60.0, 90.0, 100.0, 100.0, 100.0, 100.0]
    soak = [30.0, 60.0, 90.0, 100.0, 100.0, 100.0, 100.0]
    samples = [day(n, s, c) for n, (s, c) in enumerate(zip(soak, control, strict=True), 1)]
    result = soak_growth.analyse(samples)
    assert result["warm_day"] == 4
    assert "control's broker stopped growing" in result["warm_rule"]
    assert result["growth"]["broker_rss_kb"] == 0.0
    assert result["growth_from_day_2"]["broker_rss_kb"] > 1.0  # the old rule: MISSED
    assert result["control_plateau"]["plateau_kb"] == 100
    assert soak_growth.flat_verdicts(result)["broker_rss_kb"] is True


def test_a_broker_still_growing_after_the_control_stopped_misses() -> None:
    control = [30.0, 60.0, 90.0, 100.0, 100.0, 100.0, 100.0]
    soak = [30.0, 60.0, 90.0, 100.0, 110.0, 120.0, 130.0]
    samples = [day(n, s, c) for n, (s, c) in enumerate(zip(soak, control, strict=True), 1)]
    result = soak_growth.analyse(samples)
    assert result["warm_day"] == 4
    assert result["broker_plateau"]["plateau_day"] is None
    assert soak_growth.flat_verdicts(result)["broker_rss_kb"] is False


def test_without_a_control_warm_is_day_two_and_says_so() -> None:
    samples = [day(n, 100.0, None) for n in range(1, 5)]
    result = soak_growth.analyse(samples)
    assert result["warm_day"] == 2 and "was not run" in result["warm_rule"]
    assert result["control_plateau"] is None


def test_the_kvs_cache_is_judged_by_its_bound_not_its_slope() -> None:
    noisy = [600.0, 2400.0, 900.0, 1800.0, 700.0, 2300.0, 2000.0, 2350.0]
    samples = [day(n, 100.0, 100.0, kvs_cache_kb=kb) for n, kb in enumerate(noisy, 1)]
    result = soak_growth.analyse(samples)
    assert result["growth"]["kvs_cache_kb"] > 1.0  # a slope on noise
    assert result["kvs_cache_bound"] == {
        "first_half_max_kb": 2400.0,
        "second_half_max_kb": 2350.0,
        "bounded": True,
    }
    assert soak_growth.flat_verdicts(result)["kvs_cache_kb"] is True
    rising = [day(n, 100.0, 100.0, kvs_cache_kb=100.0 * n) for n in range(1, 9)]
    assert soak_growth.flat_verdicts(soak_growth.analyse(rising))["kvs_cache_kb"] is False
