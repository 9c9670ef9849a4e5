"""bench/loop.py's pure parts: the vendor's clock that races through a task and no
further, how long a job held its nodes while a task was pending, and the targets its
table prints (unit tier, no Flux: the runs an arm would leave)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("loop_bench", BENCH / "loop.py")
assert _spec is not None and _spec.loader is not None
loop_bench = importlib.util.module_from_spec(_spec)
sys.modules["loop_bench"] = loop_bench
_spec.loader.exec_module(loop_bench)
loop_arms = importlib.import_module("loop_arms")  # bench/loop_arms.py, on the path above
loop_report = importlib.import_module("loop_report")  # bench/loop_report.py


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_clock_races_up_to_the_forecast_end_and_goes_on_at_wall_speed() -> None:
    wall = Wall()
    clock = loop_bench.GearClock(100.0, wall_clock=wall)
    wall.t += 5  # no task pending: x1
    assert clock.now() == pytest.approx(5.0)
    clock.race(until=2005.0)  # a task created now, forecast to end at 2005
    wall.t += 10  # 1000 emulated seconds
    assert clock.now() == pytest.approx(1005.0)
    assert clock.wall(2005.0) == pytest.approx(1025.0)  # the end, exactly
    wall.t += 15  # 10 s of the race left (1000 emulated), then 5 s at x1
    assert clock.now() == pytest.approx(2010.0)
    assert clock.at(1025.0) == pytest.approx(2005.0)
    assert clock.at(1003.0) == pytest.approx(3.0)
    assert clock.wall(2010.0) == pytest.approx(wall.t)
    clock.race(until=1.0)  # in the past: nothing changes
    wall.t += 1
    assert clock.now() == pytest.approx(2011.0)


def test_a_job_waiting_for_its_task_counts_vendor_time_and_a_steps_tail_its_own() -> None:
    wall = Wall()
    clock = loop_bench.GearClock(100.0, wall_clock=wall)
    clock.race(until=1000.0)  # wall 1000 -> 1010 is emulated 0 -> 1000
    wall.t = 1020.0
    task = (1000.0, 1010.0)
    # An in-job loop's job (wall 990-1020) waits for its own task: 1000 vendor seconds.
    held = loop_bench.held_while_pending((990.0, 1020.0), task, clock, own=True)
    assert held == (pytest.approx(10.0), pytest.approx(1000.0), pytest.approx(1000.0))
    # A step (995-1001) ends 1 s after its successor's task was created: its tail, 1 s.
    held = loop_bench.held_while_pending((995.0, 1001.0), task, clock, own=False)
    assert held == (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0))
    # ... also when the race let the task end first: the step did not wait for it.
    held = loop_bench.held_while_pending((995.0, 1015.0), task, clock, own=False)
    assert held == (pytest.approx(15.0), pytest.approx(15.0), pytest.approx(15.0))
    # A step's tail longer than the task really was pending idles only that long.
    short = loop_bench.GearClock(100.0, wall_clock=wall)  # now at wall 1020
    short.race(until=5.0)  # 5 vendor seconds, raced through in 0.05 s
    held = loop_bench.held_while_pending((1010.0, 1030.0), (1020.0, 1020.05), short, own=False)
    assert held == (pytest.approx(10.0), pytest.approx(10.0), pytest.approx(5.0))
    assert loop_bench.held_while_pending((1011.0, 1015.0), task, clock, own=True) == (0, 0, 0)
    assert loop_bench.held_while_pending((1011.0, 1015.0), task, clock, own=False) == (0, 0, 0)


def run(arm: str, repeat: int, **values: object) -> object:
    fields = {
        "tasks": 9,
        "evaluated": 9,
        "idle": 0.0,
        "ttr": 10_000.0,
        "gaps": "0.5 0.5",
        "sessions_opened": 0,
        "sessions_closed": 0,
    }
    fields.update(values)
    return loop_arms.Run(arm, repeat, 4, 9, 100 + repeat, **fields)


def test_the_table_says_met_or_missed_against_the_in_job_loop() -> None:
    rows = [
        run("injob", 0, idle=80_000.0, ttr=22_000.0),
        run("injob", 1, idle=80_000.0, ttr=22_000.0),
        run("chain", 0, idle=100.0, ttr=23_000.0, overheads="0.1 0.2 9.0", gaps="2 2"),
        run("chain", 1, idle=100.0, ttr=26_000.0, overheads="0.1 0.2 9.0", gaps="2 2"),
        run("injob-session", 0, idle=300.0, ttr=2_500.0, sessions_opened=1, sessions_closed=1),
        run("chain-session", 0, idle=40.0, ttr=2_600.0, overheads="0.8 0.9", gaps="2 2"),
        run("chain-session", 1, tasks=8, error="RuntimeError: 8 tasks"),  # left out
    ]
    text = loop_report.report(rows, _args(), 60.0)
    assert "chain idle <= 10 % of injob's: 100 vs 80,000 node-s = 0.1 %  met" in text
    # The median of 23,000 and 26,000 s is 24,500: +11.4 % against 22,000.
    assert "+11.4 %  MISSED" in text
    assert "chain per-iteration overhead p50 <= 0.5 s wall: 0.200 s  met" in text
    assert "chain-session idle <= 10 % of injob-session's: 40 vs 300 node-s = 13.3 %" in text
    assert "chain-session per-iteration overhead p50 <= 0.5 s wall: 0.850 s  MISSED" in text
    # injob-session closed its session, chain-session opened none: every session closed.
    assert "exactly K tasks in every run: met; every session closed: met" in text
    assert "1 runs failed" in text


def _args() -> object:
    import argparse

    return argparse.Namespace(
        iterations=4,
        repeats=2,
        nodes=4,
        shots=1000,
        queue_minutes=40.0,
        job_seconds=0.5,
        fast=1200.0,
        poll_min=0.1,
        scan_interval=0.1,
        from_csv=None,
        revision="abc1234",
    )


def test_the_adaptive_arm_is_held_against_the_in_job_loop_and_says_its_plans() -> None:
    rows = [
        run("injob", 0, idle=80_000.0, ttr=22_000.0),
        run("chain", 0, idle=0.0, ttr=24_000.0, node_waits="30 40", plans=""),
        run(
            "adaptive",
            0,
            idle=3_000.0,
            ttr=22_300.0,
            node_waits="1 2",
            plans="keep keep early give-back",
            in_place=2,
        ),
    ]
    text = loop_report.report(rows, _args(), 60.0)
    assert (
        "adaptive time to result within +2 % of injob's: 22,300 vs 22,000 s = +1.4 %  met" in text
    )
    assert "adaptive idle <= 5 % of injob's: 3,000 vs 80,000 node-s = 3.8 %  met" in text
    assert (
        "  adaptive       wait for nodes p50 1.50 max 2.00; plans: 2 keep, 1 early, "
        "1 give-back; in place 2"
    ) in text
    assert "  chain          wait for nodes p50 35.00 max 40.00; plans: none" in text
