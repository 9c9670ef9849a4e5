"""bench/reservation.py's pure parts (unit tier, no Flux): the device and window it gives
the emulator and the catalog agree, the overlap it measures idle with, and the verdicts
it prints; and (flux tier) a miniature of its reservation arm end to end: two jobs in a
short window on a real Flux with the service, every task of theirs in the window with
its ARN. The quick run (``python bench/reservation.py --quick``, both arms, about four
minutes on 2 cores) is left to people: the flux tier's budget is smaller."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Scenario

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("reservation_bench", BENCH / "reservation.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["reservation_bench"] = bench
_spec.loader.exec_module(bench)


def setup(**changes: object) -> object:
    base = dict(
        queue_hours=3.0,
        background_seconds=20.0,
        task_seconds=50.0,
        shots=1000,
        per_task=0.30,
        per_shot=0.08,
        per_hour=7000.0,
        jobs=8,
        tasks=4,
        think=30.0,
        window_minutes=20.0,
        opens_in=5.0,
        window_jobs=2,
    )
    base.update(changes)
    return bench.Setup(**base)


def test_the_emulator_gets_the_busy_device_and_the_window_the_site_booked() -> None:
    s = setup()
    scenario = Scenario.from_dict(s.scenario((300.0, 1500.0)), source="test")
    (device,) = scenario.devices
    assert device.arn == bench.DEVICE_ARN
    # A queue of 3 hours that never drains: as many arrive as are served.
    assert device.queue.depth * device.queue.service_time == pytest.approx(3 * 3600)
    assert device.queue.arrival_rate == pytest.approx(1 / device.queue.service_time)
    assert device.queue.service_time + 1000 * device.queue.shot_time == pytest.approx(50.0)
    (window,) = scenario.reservations
    assert (window.arn, window.start, window.end) == (bench.WINDOW_ARN, 300.0, 1500.0)
    assert window.cost == pytest.approx(7000.0 * 20 / 60)
    assert not Scenario.from_dict(s.scenario(None), source="test").reservations


def test_the_catalog_prices_and_drain_are_the_scenario_s_in_wall_seconds() -> None:
    s = setup()
    catalog = parse_catalog(s.catalog(speed=30.0))
    device = catalog.get(bench.DEVICE)
    assert device.id == bench.DEVICE_ARN and device.vendor == "local"
    assert (device.price.per_task, device.price.per_shot) == (0.30, 0.08)
    assert float(device.properties["drain_seconds_per_task"]) == pytest.approx(20.0 / 30.0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [((0, 10), (5, 20), 5), ((0, 10), (10, 20), 0), ((3, 4), (0, 10), 1), ((5, 1), (0, 9), 0)],
)
def test_overlap(a, b, expected) -> None:
    assert bench.overlap(a, b) == expected


def run(arm: str, **figures: float) -> object:
    r = bench.Run(arm, 30.0, jobs=8, jobs_done=8, tasks_done=32)
    for key, value in figures.items():
        setattr(r, key, value)
    return r


class Args:
    speed_on_demand, speed_window, revision = 600.0, 30.0, "abc1234"


def test_the_table_says_met_and_missed_against_the_targets() -> None:
    od = run("on-demand", idle=80_000.0, ttr_median=40_000.0, cost_per_task=80.3)
    good = run("reservation", idle=400.0, utilisation=0.9, window_seconds=1200.0, ttr_median=2000.0)
    text = bench.report({"on-demand": od, "reservation": good}, setup(), Args(), 60.0)
    assert "= 0.50% (<= 1 %): met" in text
    assert "window utilisation 90.0%" in text and "MISSED" not in text
    bad = run("reservation", idle=4000.0, utilisation=0.5, window_seconds=1200.0, outside=2)
    text = bench.report({"on-demand": od, "reservation": bad}, setup(), Args(), 60.0)
    assert text.count("MISSED") == 3


MINIATURE_SPEED = 30.0  # the bench's window clock
MINIATURE_TIMEOUT = 240.0  # wall seconds the arm may take


@pytest.mark.flux
def test_a_miniature_window_runs_every_job_inside_it(tmp_path) -> None:
    """Two jobs of two tasks each, every task inside the window. The window outlasts the
    arm's own timeout (240 wall seconds at x30: 120 minutes), so how fast this machine
    starts a job and creates its second task (importing the Braket SDK alone took 3.8 s
    on one) cannot end the window first: the jobs finish inside it, or the arm times
    out and says so. The run ends when the jobs do, not with the window."""
    window = MINIATURE_TIMEOUT * MINIATURE_SPEED / 60
    s = setup(jobs=2, tasks=2, window_minutes=window, opens_in=1.0, queue_hours=1.0)
    arm = bench.Arm(tmp_path / "reservation", s, "reservation", speed=MINIATURE_SPEED)
    try:
        result = arm.run(timeout=MINIATURE_TIMEOUT)
    finally:
        arm.close()
    assert result.error == "", result.error
    assert (result.jobs_done, result.tasks_done) == (2, 4)
    assert result.outside == 0
    assert result.window_used > 0
