"""bench/compile_lag.py's pure parts (unit tier, no Flux): the figures of a setting, the
on/off ratio and the bar's verdict, and the record it merges into bench/results/compile.*
(the corpus part kept as it was, an earlier lag section replaced, never doubled)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from compile_lag import (  # noqa: E402
    BAR,
    Setting,
    after,
    catalog,
    figures,
    merged_json,
    merged_text,
    met,
    pooled,
    ratio,
    settings,
    summary,
)

from flux_quantum.catalog import parse_catalog  # noqa: E402

CORPUS = """flux-quantum compile-stage benchmark: 2026-12-07, commit 8da757e, 2 cores
command: python bench/compile.py ; took 8.1 min

target 100 % compiled and accepted: met
target other jobs' release lag p99 within 10 % while 100 programs compile: MISSED (not measured: needs a Flux instance)

compiled: the stage gave a program
"""


def setting(name: str, lags: list[float], others: int | None = None) -> Setting:
    s = Setting(name, compiles=100, others=len(lags) if others is None else others)
    s.lags = list(lags)
    s.detect = [lag / 2 for lag in lags]
    return s


def test_figures_are_the_median_and_the_99th_percentile() -> None:
    lags = [float(k) for k in range(1, 101)]  # 1 .. 100
    p50, p99 = figures(lags)
    assert p50 == pytest.approx(50.5)
    assert p99 == pytest.approx(99.01)
    assert all(math.isnan(x) for x in figures([]))


def test_the_ratio_is_on_over_off() -> None:
    assert ratio(1.1, 1.0) == pytest.approx(1.1)
    assert ratio(0.0, 0.0) == 1.0
    assert ratio(0.1, 0.0) == math.inf
    assert math.isnan(ratio(math.nan, 1.0))


def test_the_bar_is_p99_within_ten_percent_of_the_stage_off() -> None:
    off = setting("off", [0.2] * 29 + [0.5])
    assert met(setting("on", [0.2] * 29 + [0.5]), off)
    assert met(setting("on", [0.2] * 29 + [0.5 * BAR - 0.01]), off)
    assert not met(setting("on", [0.2] * 29 + [0.6]), off)
    # A lower p50 does not make up for the tail.
    assert not met(setting("on", [0.1] * 29 + [0.7]), off)


def test_the_bar_is_missed_when_an_other_job_was_not_measured_or_a_setting_failed() -> None:
    off = setting("off", [0.2] * 30)
    assert not met(setting("on", [0.2] * 29, others=30), off)
    failed = setting("on", [0.2] * 30)
    failed.error = "RuntimeError: flux start failed"
    assert not met(failed, off)


def test_the_summary_says_missed_plainly_with_both_settings_figures() -> None:
    on, off = setting("on", [0.3] * 29 + [2.0]), setting("off", [0.3] * 29 + [0.5])
    lines = summary(on, off)
    assert lines[-1].startswith("target other jobs' release lag p99 within 10 %")
    assert lines[-1].endswith("MISSED")
    assert "p99 on/off" in lines[-1]
    assert any(line.startswith("  compile on:") and "p99 1.5" in line for line in lines)
    assert any(line.startswith("  compile off:") for line in lines)
    on.during = [2.0]
    assert "1 released while the burst was handled (their p99 2.000 s)" in summary(on, off)[0]
    assert summary(off, off)[-1].endswith(": met")


def test_merging_replaces_the_target_line_and_appends_the_section_once() -> None:
    on, off = setting("on", [0.3] * 30), setting("off", [0.3] * 30)
    lines = summary(on, off)
    once = merged_text(CORPUS, lines, "python bench/compile.py --only-lag", "abc1234")
    assert "MISSED (not measured" not in once
    assert once.count("target other jobs' release lag") == 2  # the target and the section
    assert once.startswith(CORPUS.split("target other")[0])
    assert "compiled: the stage gave a program" in once
    assert "$ python bench/compile.py --only-lag\ncommit abc1234\n" in once
    twice = merged_text(once, lines, "python bench/compile.py --only-lag", "def5678")
    assert twice.count("release lag of other jobs while programs compile") == 1
    assert "commit def5678" in twice and "commit abc1234" not in twice


def test_the_json_record_keeps_the_corpus_rows_it_had() -> None:
    lag = {"command": "python bench/compile.py --only-lag", "runs": []}
    rows = [{"family": "ghz", "width": 2}]
    assert merged_json(rows, lag, None) == {"corpus": {"rows": rows}, "lag": lag}
    kept = {"command": "python bench/compile.py", "commit": "8da757e", "rows": rows}
    assert merged_json({"corpus": kept, "lag": {}}, lag, None) == {"corpus": kept, "lag": lag}
    new = {"command": "python bench/compile.py", "commit": "abc", "rows": []}
    assert merged_json(None, lag, new) == {"corpus": new, "lag": lag}


def test_the_catalog_gives_both_devices_a_slot_for_every_job() -> None:
    devices = parse_catalog(catalog(132, 2.0)).devices
    assert {d.name: d.vendor for d in devices} == {"others": "local", "kingston": "ibm"}
    assert all(d.slots == 132 for d in devices)


def test_a_setting_s_runs_pool_every_other_job_and_keep_the_worst_burst() -> None:
    first, second = setting("on", [0.1, 0.2]), setting("on", [0.3])
    first.during, second.during = [0.2], [0.3]
    first.burst_seconds, second.burst_seconds = 20.0, math.nan
    second.repeat, second.error = 1, "RuntimeError: boom"
    off = setting("off", [0.2, 0.2, 0.2])
    on, got_off = settings([first, off, second])
    assert sorted(on.lags) == [0.1, 0.2, 0.3] and on.others == 3 and on.runs == 2
    assert on.burst_seconds == 20.0 and on.compiles == 100 and on.during == [0.2, 0.3]
    assert on.error == "run 1: RuntimeError: boom"
    assert got_off.lags == off.lags and got_off.runs == 1
    assert not met(on, got_off)  # a failed run fails the bar
    assert pooled([first]).error == ""


def test_the_others_released_after_the_burst_are_the_rest_of_the_lags() -> None:
    off = setting("off", [0.7, 0.1, 0.1, 0.2])
    off.during = [0.7, 0.1]
    assert after(off) == [0.1, 0.2]
    on = setting("on", [0.3] * 4)
    line = next(x for x in summary(on, off) if x.startswith("  against the stage off's"))
    assert "over 2;" in line and "p99 0.199 s" in line and line.endswith("1.51")


def test_the_same_note_of_several_runs_is_kept_once() -> None:
    first, second = setting("on", [0.1]), setting("on", [0.1])
    first.notes, second.notes = ["a burst job ended: refused"], ["a burst job ended: refused"]
    second.notes.append("other job f2: not released, or its task did not end")
    assert len(pooled([first, second]).notes) == 2
