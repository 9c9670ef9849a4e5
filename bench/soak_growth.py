"""The soak's growth figures from its samples (pure; ``python bench/NAME.py`` finds this
module next to it): when the instance is warm, each figure's growth per day from then,
the broker's plateau beside the plain-Flux control's, and the KVS cache's bound.

Warm, by a rule of Flux's own, not of the figure judged: the day the plain-Flux control
(``soak_mirror``: the same jobs at the same moments, purged at the same age, without
flux-quantum) stops growing, i.e. the first day from which its broker's RSS grows at most
the target (1 % a day, least-squares slope over the mean) to the end of the run, over at
least ``PLATEAU_DAYS`` days. Without a control, or if it never stops growing, warm is
day 2 (said so). The KVS cache is a cache of recently used objects that the KVS expires
by age: its figure at a sample is what was read in the last minute, so a slope over its
day-end values measures noise; it is judged by its bound instead (the highest value over
the run's second half no higher than over the first).
"""

from __future__ import annotations

import statistics
from typing import Any

TARGET_PCT_PER_DAY = 1.0
PLATEAU_DAYS = 3
# The content cache's purge-target-size, flux-core's default (the soak keeps it): the
# cache fills up to it, then drops its oldest clean entries.
CONTENT_CACHE_TARGET = 16 * 2**20
# Figures that must stay flat, and those that hold history by design.
FLAT = (
    "service_rss_kb",
    "service_fds",
    "service_fds_held",
    "service_threads",
    "broker_rss_kb",
    "kvs_cache_kb",
)
BOUNDED = ("kvs_cache_kb",)  # judged by their bound, not their slope
HISTORY = ("ledger_bytes", "content_store_bytes", "content_cache_bytes")
# The broker's memory by kind (broker_figures.memory_kinds), soak and control.
INSIDE = ("mem_rss", "mem_anon", "mem_heap", "mem_arenas", "mem_file")


def growth_pct_per_day(values: list[float]) -> float | None:
    """Least-squares slope of one value a day, as % of their mean; None below 2 days."""
    if len(values) < 2 or not statistics.fmean(values):
        return None
    xs = list(range(len(values)))
    mx, my = statistics.fmean(xs), statistics.fmean(values)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return 100.0 * slope / my


def plateau_day(days: list[int], values: list[float], least: int = PLATEAU_DAYS) -> int | None:
    """The first of ``days`` from which ``values`` (one a day) stop growing: their slope
    from that day to the end at most the target, over at least ``least`` days; None if
    they never do."""
    for i in range(len(values) - least + 1):
        pct = growth_pct_per_day(values[i:])
        if pct is not None and pct <= TARGET_PCT_PER_DAY:
            return days[i]
    return None


def day_ends(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in samples if s.get("day_end")]


def _inside(sample: dict[str, Any], where: str, key: str) -> float:
    return float((sample.get(where) or {}).get(key) or 0)


def broker_plateau(ends: list[dict[str, Any]], where: str) -> dict[str, Any] | None:
    """The broker's RSS at ``where`` ("broker": the soak's, "control": plain Flux's):
    the day it stops growing, its level from then (mean of those days, kB), its last
    value, and the first day its content cache was full (None: never)."""
    rows = [s for s in ends if s.get(where)]
    if len(rows) < 2:
        return None
    days = [int(s["day_end"]) for s in rows]
    rss = [_inside(s, where, "mem_rss") for s in rows]
    day = plateau_day(days, rss)
    full = [
        int(s["day_end"])
        for s in rows
        if _inside(s, where, "content_cache_bytes") >= 0.95 * CONTENT_CACHE_TARGET
    ]
    return {
        "plateau_day": day,
        "plateau_kb": round(statistics.fmean(rss[days.index(day) :])) if day else None,
        "first_kb": rss[0],
        "last_kb": rss[-1],
        "content_cache_full_day": full[0] if full else None,
    }


def kvs_bound(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The KVS cache's highest value (kB) over the first and the second half of the run
    (every sample from day 1, by time); bounded if the second's is no higher."""
    rows = [s for s in samples if s.get("vendor_days", 0) > 0 and s.get("kvs_cache_kb") is not None]
    if len(rows) < 2:
        return None
    middle = (rows[0]["t"] + rows[-1]["t"]) / 2
    first = max(float(s["kvs_cache_kb"]) for s in rows if s["t"] <= middle)
    second = max(float(s["kvs_cache_kb"]) for s in rows if s["t"] > middle)
    return {"first_half_max_kb": first, "second_half_max_kb": second, "bounded": second <= first}


def largest_arenas(ends: list[dict[str, Any]], where: str, n: int = 4) -> list[str]:
    """The ``n`` malloc arenas (by their threads' names) holding the most at the last
    day's end at ``where`` ("broker" or "control")."""
    last = next((s[where].get("arenas_kb") for s in reversed(ends) if s.get(where)), None) or {}
    return sorted(last, key=lambda name: -last[name])[:n]


def arena_kb(sample: dict[str, Any], where: str, name: str) -> float:
    return float(((sample.get(where) or {}).get("arenas_kb") or {}).get(name) or 0)


def analyse(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The growth figures of a soak's ``samples`` (see the module's docstring)."""
    ends = day_ends(samples)
    control = broker_plateau(ends, "control")
    warm = control["plateau_day"] if control and control["plateau_day"] else None
    rule = (
        f"day {warm}, when the plain-Flux control's broker stopped growing"
        if warm
        else "day 2 (the plain-Flux control "
        + ("did not stop growing)" if control else "was not run)")
    )
    warm = warm or 2
    since = [s for s in ends if int(s["day_end"]) >= warm]
    since_day2 = [s for s in ends if int(s["day_end"]) >= 2]

    def slopes(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, float | None]:
        return {key: growth_pct_per_day([float(s[key] or 0) for s in rows]) for key in keys}

    inside = {
        f"{where}.{key}": growth_pct_per_day([_inside(s, where, key) for s in since])
        for where in ("broker", "control")
        for key in INSIDE
        if any(s.get(where) for s in since)
    } | {
        f"{where}.arena {name}": growth_pct_per_day([arena_kb(s, where, name) for s in since])
        for where in ("broker", "control")
        for name in largest_arenas(ends, where)
    }
    return {
        "warm_day": warm,
        "warm_rule": rule,
        "growth": slopes(since, (*FLAT, *HISTORY)),
        "growth_from_day_2": slopes(since_day2, FLAT),
        "growth_inside_broker": inside,
        "broker_plateau": broker_plateau(ends, "broker"),
        "control_plateau": control,
        "kvs_cache_bound": kvs_bound(samples),
    }


def flat_verdicts(result: dict[str, Any]) -> dict[str, bool | None]:
    """Each figure that must stay flat: met (True), MISSED (False) or unmeasured
    (None); a bounded one by its bound, the rest by their growth once warm."""
    out: dict[str, bool | None] = {}
    for key in FLAT:
        if key in BOUNDED:
            bound = result.get("kvs_cache_bound")
            out[key] = None if bound is None else bool(bound["bounded"])
        else:
            pct = result["growth"].get(key)
            out[key] = None if pct is None else pct <= TARGET_PCT_PER_DAY
    return out
