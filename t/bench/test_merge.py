"""bench/merge.py's pure parts (unit tier, no Flux): each job's program carries its own
number and the check tells its own counts from another job's or a whole merged task's;
the devices it gives the emulator and the catalog agree; the site's table it writes is
one ``MergeConfig`` accepts, on the wall clock; the ledger's sum it reads; the verdicts it
prints; and (flux tier) a miniature of both arms end to end: four jobs on the Braket QPU
on a real Flux with the service, one task merged against four, every job with its own
100 shots, the ledger equal to the bill. The quick run (``python bench/merge.py
--quick``, about four minutes on 2 cores) is left to people: the flux tier's budget is
smaller."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tomllib
from pathlib import Path

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Scenario
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.site.merging import MergeConfig

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))


def _load(name: str, file: str) -> object:
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("merge_bench", "merge.py")
job = _load("merge_job", "merge_job.py")


# --- the jobs' programs and their check ---------------------------------------------------


def own_counts(index: int, jobs: int, zeros: int, ones: int) -> dict[str, int]:
    """What job ``index``'s program measures, c[0] first: the Bell pair 00 or 11, then
    the job's number least significant bit first."""
    bits = job.tag_bits(jobs)
    tag = "".join("1" if index >> k & 1 else "0" for k in range(bits))
    counts = {"00" + tag: zeros, "11" + tag: ones}
    return {key: n for key, n in counts.items() if n}


@pytest.mark.parametrize("jobs", [1, 2, 4, 10, 100, 200])
def test_every_job_s_program_writes_its_own_number_in_its_tag_qubits(jobs) -> None:
    bits = job.tag_bits(jobs)
    assert 2**bits >= jobs and bits >= 1
    texts = set()
    for index in range(jobs):
        text = job.program(index, jobs)
        texts.add(text)
        assert f"qubit[{2 + bits}] q;" in text and text.endswith("c = measure q;\n")
        flipped = {k for k in range(bits) if f"x q[{2 + k}];" in text}
        assert sum(1 << k for k in flipped) == index
        assert 0 < job.angle(index, jobs) < math.pi
    assert len(texts) == jobs
    with pytest.raises(ValueError):
        job.program(jobs, jobs)


def test_the_check_takes_only_the_job_s_own_shots() -> None:
    assert job.check(own_counts(5, 10, 60, 40), 5, 10, 100) is None
    assert job.check(own_counts(0, 10, 100, 0), 0, 10, 100) is None
    # Another job's counts, or a whole merged task's.
    assert "job 6's number" in job.check(own_counts(6, 10, 60, 40), 5, 10, 100)
    merged = {**own_counts(5, 10, 30, 20), **own_counts(6, 10, 30, 20)}
    assert job.check(merged, 5, 10, 100) is not None
    assert job.check(own_counts(5, 10, 120, 80), 5, 10, 100) == "200 shots, not 100"
    assert job.check(own_counts(5, 10, 50, 40), 5, 10, 100) == "90 shots, not 100"
    assert "Bell pair" in job.check({"01" + "1010": 100}, 5, 10, 100)
    assert "not 6 bits" in job.check({"0010": 100}, 5, 10, 100)


# --- what the emulator and the service are given ------------------------------------------


def device(kind: str = "braket", **changes: object) -> object:
    base = dict(queue_minutes=10.0, background_seconds=5.0, per_task=0.30, per_shot=0.00145)
    if kind == "ibm":
        base = dict(queue_minutes=10.0, background_seconds=2.0, per_second=1.60)
    base.update(changes)
    return bench.Device(kind, **base)


def test_the_braket_qpu_is_garnet_like_busy_and_takes_program_sets() -> None:
    d = device()
    scenario = Scenario.from_dict(d.braket_scenario(), source="test")
    (spec,) = scenario.devices
    assert spec.arn == bench.BRAKET_ARN and spec.type == "QPU"
    assert (spec.cost.task_price, spec.cost.price) == (0.30, 0.00145)
    # Ten minutes of 5 s tasks that never drain: as many arrive as are served.
    assert spec.queue.depth * spec.queue.service_time == pytest.approx(600)
    assert spec.queue.arrival_rate == pytest.approx(1 / spec.queue.service_time)
    assert spec.program_sets is not None and spec.program_sets.max_executables == 100
    assert d.task_seconds(100) == pytest.approx(5.1)
    ibm = IbmScenario.from_dict(d.ibm_scenario(), source="test")
    assert ibm.backends[0].queue.depth == 0  # the other device stays idle


def test_the_ibm_backend_is_paid_by_time_and_busy() -> None:
    d = device("ibm")
    ibm = IbmScenario.from_dict(d.ibm_scenario(), source="test")
    (backend,) = ibm.backends
    assert backend.name == bench.IBM_ID and ibm.plan == "paid"
    assert ibm.price_per_second == pytest.approx(1.60)
    assert backend.queue.depth * backend.queue.service_time == pytest.approx(600)


@pytest.mark.parametrize("kind", ["braket", "ibm"])
def test_the_catalog_has_both_devices_with_a_slot_a_job_and_the_drain_in_wall_seconds(
    kind,
) -> None:
    d = device(kind)
    catalog = parse_catalog(d.catalog(speed=20.0, slots=100), "test.yaml")
    garnet, heron = catalog.get(bench.BRAKET), catalog.get(bench.IBM)
    assert (garnet.vendor, garnet.id, garnet.slots) == ("local", bench.BRAKET_ARN, 100)
    assert (heron.vendor, heron.id, heron.slots) == ("ibm", bench.IBM_ID, 100)
    assert (garnet.price.per_task, garnet.price.per_shot) == (0.30, 0.00145)
    assert heron.price.per_minute == pytest.approx(96.0)
    ours = garnet if kind == "braket" else heron
    assert float(ours.properties["drain_seconds_per_task"]) == pytest.approx(
        d.background_seconds / 20.0
    )


def test_the_site_s_table_is_one_merge_config_accepts_on_the_wall_clock() -> None:
    table = tomllib.loads(bench.merge_table(60.0 / 20.0))["quantum"]["merge"]
    config = MergeConfig.from_config(table, [bench.BRAKET, bench.IBM])
    assert config.enabled and config.across_users is False
    assert config.max_wait == pytest.approx(3.0)
    assert config.covers(bench.BRAKET) and config.covers(bench.IBM)


def test_cores_a_job_and_the_plan_of_arms() -> None:
    assert bench.core_count(10) == 64 and bench.core_count(200) == 200
    assert bench.plan(True, None, None) == [("braket", 100), ("ibm", 20)]
    assert bench.plan(False, None, None) == [
        ("braket", 10),
        ("braket", 50),
        ("braket", 100),
        ("braket", 200),
        ("ibm", 100),
    ]
    assert bench.plan(True, "4,4", "") == [("braket", 4)]


def test_the_ledger_s_sum_is_read_from_flux_quantum_usage_json() -> None:
    document = {
        "currency": "USD",
        "rows": [
            {"user": "a", "device": "garnet", "tasks": 3, "spent": 0.45, "reserved": 0.0},
            {"user": "b", "device": "garnet", "tasks": 2, "spent": 0.29, "reserved": 0.0},
        ],
    }
    spent, rows = bench.ledger_total(document)
    assert spent == pytest.approx(0.74) and rows == 5
    assert bench.ledger_total({}) == (0.0, 0) and bench.ledger_total(None) == (0.0, 0)


def test_a_failed_job_s_note_names_the_half_that_failed(tmp_path) -> None:
    from flux_quantum.protocol.events import Event

    ran = [Event("submit", 1.0), Event("start", 2.0), Event("finish", 3.0, {"status": 0})]
    ok = {"ok": True, "why": None}
    stderr = tmp_path / "job0.err"
    assert bench.failure(ok, ran, stderr) is None
    assert bench.failure({"ok": False, "why": "90 shots, not 100"}, ran, stderr) == (
        "its record: 90 shots, not 100"
    )
    stderr.write_text("flux-shell[0]: ERROR: something\n")
    exited = [*ran[:2], Event("finish", 3.0, {"status": 256})]
    assert bench.failure(ok, exited, stderr) == (
        "its record is ok, but it finished with wait status 256; its stderr ends: "
        "flux-shell[0]: ERROR: something"
    )
    assert "no finish event" in bench.failure(ok, ran[:2], stderr)
    failed = [ran[0], Event("exception", 2.0, {"type": "qpu", "note": "create failed"})]
    assert bench.failure(None, failed, stderr) == (
        "no record: it never ran: qpu exception: create failed"
    )
    assert bench.failure(None, ran, stderr).startswith("no record: the job did not run")


# --- the table ------------------------------------------------------------------------------


def run(kind: str, mode: str, jobs: int, **figures: float) -> object:
    r = bench.Run(kind, mode, jobs, 20.0, jobs_done=jobs, own_shots=jobs)
    for key, value in figures.items():
        setattr(r, key, value)
    return r


def args() -> argparse.Namespace:
    return argparse.Namespace(
        devices={"braket": device(), "ibm": device("ibm")},
        shots=100,
        max_wait=60.0,
        speed=20.0,
        revision="abc1234",
        argv=["--quick"],
    )


def test_the_table_says_met_against_the_targets() -> None:
    runs = [
        run("braket", "separate", 100, tasks=100, cost=44.5, ledger=44.5, ready_last=900.0),
        run("braket", "merged", 100, tasks=1, cost=14.8, ledger=14.8, ready_last=400.0),
        run("ibm", "separate", 20, tasks=20, cost=67.2, ledger=67.2, ready_last=360.0),
        run("ibm", "merged", 20, tasks=1, cost=6.4, ledger=6.4, ready_last=350.0),
    ]
    text = bench.report(runs, args(), 60.0)
    assert "MISSED" not in text
    assert "tasks created 1 merged vs 100 separate (<= N/50 = 2 for 100+ jobs): met" in text
    assert "= 66.7% lower (>= 30 % lower at 100 shots a job): met" in text
    assert "no target: IBM bills usage time" in text
    assert "every job got exactly its own shots, in every arm: met" in text


def test_the_table_says_missed_and_why() -> None:
    runs = [
        run("braket", "separate", 100, tasks=100, cost=44.5, ledger=44.5, ready_last=900.0),
        run(
            "braket",
            "merged",
            100,
            tasks=5,
            cost=40.0,
            ledger=39.0,
            ready_last=950.0,
            held_max=60.0,
            jobs_done=99,
        ),
    ]
    text = bench.report(runs, args(), 60.0)
    assert "(<= N/50 = 2 for 100+ jobs): MISSED" in text
    assert "lower at 100 shots a job): MISSED" in text
    assert "(no worse): MISSED" in text
    assert "held up to 60 s to be merged" in text
    assert "ledger $39.00, bill $40.00" in text and text.count("MISSED") == 5
    # Small N: no task target, the table says so.
    small = [run("braket", "separate", 10, tasks=10), run("braket", "merged", 10, tasks=1)]
    assert "the N/50 target is for 100+ jobs" in bench.report(small, args(), 1.0)


@pytest.mark.flux
def test_a_miniature_merges_four_jobs_into_one_task_each_with_its_own_shots(tmp_path) -> None:
    d = device(queue_minutes=1.0)
    runs = {}
    for mode in bench.MODES:
        arm = bench.Arm(tmp_path / mode, d, mode, 4, shots=100, speed=20.0, max_wait=60.0)
        try:
            runs[mode] = arm.run(timeout=120.0)
        finally:
            arm.close()
    separate, merged = runs["separate"], runs["merged"]
    for r in (separate, merged):
        assert r.error == "", (r.label, r.error)
        assert (r.jobs_done, r.own_shots) == (4, 4), (r.label, r.notes)
        assert bench.ledger_agrees(r), (r.ledger, r.cost)
    assert (separate.tasks, separate.largest) == (4, 1)
    # One task of four unless the service's own pace split the burst (max_wait is 3 s of
    # wall time here): fewer tasks than jobs, and cheaper, either way.
    assert merged.tasks < separate.tasks and merged.largest >= 2
    assert merged.cost < separate.cost
