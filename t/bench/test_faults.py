"""bench/faults.py's pure parts (unit tier, no Flux): the seeded fault plan and workload
are reproducible, the workload covers every pattern, every fault of the plan is one the
emulator accepts, the catalog's prices are the scenario's, the ledger-lock reading of
/proc/locks, and the summary and verdict the campaign prints; and (flux tier) a
miniature campaign end to end, about 25 s. The quick campaign itself (``python
bench/faults.py --quick``, about 2.5 minutes on 2 cores, with faults of every kind and a
clean arm) is left to people: the flux tier's budget is smaller."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("faults_bench", BENCH / "faults.py")
assert _spec is not None and _spec.loader is not None
faults = importlib.util.module_from_spec(_spec)
sys.modules["faults_bench"] = faults
_spec.loader.exec_module(faults)
faults_plan = importlib.import_module("faults_plan")  # bench/faults_plan.py, on the path above
faults_arm = importlib.import_module("faults_arm")
faults_report = importlib.import_module("faults_report")


def test_the_workload_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    a = faults_plan.workload(7, 60, 120.0)
    assert a == faults_plan.workload(7, 60, 120.0)
    assert a != faults_plan.workload(8, 60, 120.0)


@pytest.mark.parametrize("n", [5, 12, 300])
def test_the_workload_covers_every_pattern(n: int) -> None:
    plan = faults_plan.workload(3, n, 100.0)
    assert len(plan) == n
    assert {j.pattern for j in plan} == set(faults_plan.PATTERNS)
    assert all(0.0 <= j.at <= 100.0 for j in plan)
    assert [j.at for j in plan] == sorted(j.at for j in plan)


def test_the_workload_mixes_release_points_failover_and_sessions() -> None:
    plan = faults_plan.workload(1, 300, 400.0)
    releases = {str(j.release_at) for j in plan}
    assert {"done", "running", "1", "2", "predict"} <= releases
    assert any(j.failover for j in plan)
    sessions = [j for j in plan if j.session]
    assert sessions and all(j.device in {d.name for d in faults_plan.IBM} for j in sessions)
    assert all(j.members >= 2 for j in plan if j.pattern == "fanout")
    assert all(j.programs >= 2 for j in plan if j.pattern == "batch")
    assert all(j.release_at == "done" and j.iterations >= 2 for j in plan if j.pattern == "loop")


def test_a_request_carries_the_pattern_s_keys() -> None:
    programs = [Path(f"/p{k}.qasm") for k in range(3)]
    fan = faults_plan.JobPlan(4, 0.0, "fanout", "qpu-a", 2, members=3)
    assert fan.request(programs) == {
        "shots": 100,
        "release_at": 2,
        "device": "local:qpu-a",
        "program": "/p1.qasm",
        "group": "g4",
    }
    batch = faults_plan.JobPlan(5, 0.0, "batch", "any", "done", failover=True, programs=2)
    request = batch.request(programs)
    assert request["program"] == ["/p0.qasm", "/p1.qasm"]
    assert request["device"] == "local:any" and request["failover"] == "next"
    session = faults_plan.JobPlan(6, 0.0, "session", "heron", "running", session=True)
    assert session.request(programs)["session"] == "dedicated"


def test_disruptions_are_seeded_inside_the_window_and_apart() -> None:
    plan = faults_plan.disruption_plan(5, 400.0, 4, 2, 2)
    assert plan == faults_plan.disruption_plan(5, 400.0, 4, 2, 2)
    assert sorted(d.kind for d in plan) == sorted(["kill"] * 4 + ["restart"] * 2 + ["ledger"] * 2)
    times = [d.at for d in plan]
    assert times == sorted(times)
    assert all(40.0 <= t <= 360.0 for t in times)
    assert all(b - a >= 8.0 for a, b in zip(times, times[1:], strict=False))
    assert faults_plan.disruption_plan(5, 400.0, 0, 0, 0) == ()


def test_the_fault_plan_has_every_kind_and_the_emulator_accepts_all_of_it() -> None:
    plan = faults_plan.fault_plan(1.0, 3000.0)
    kinds = {(f.vendor, f.kind) for f in plan}
    for kind in ("reset", "lost", "delay", "fail_task", "cancel_task", "offline"):
        assert ("braket", kind) in kinds
    for kind in ("reset", "lost", "delay", "fail_job", "cancel_job", "paused", "error:503"):
        assert ("ibm", kind) in kinds
    assert ("braket", "s3:InternalError") in kinds and ("braket", "s3:SlowDown") in kinds
    braket, ibm, dropped = faults_plan.scenarios(plan)
    assert dropped == []
    rates = [f.entry["rate"] for f in plan if "rate" in f.entry]
    assert rates and all(0 < r < 0.1 for r in rates)
    assert len(braket["faults"]) + len(ibm["faults"]) == len(rates)
    assert faults_plan.fault_plan(0.0) == ()
    doubled = faults_plan.fault_plan(2.0, 3000.0)
    assert [f.entry.get("rate") for f in doubled] == [
        None if r is None else round(2 * r, 4) for r in (f.entry.get("rate") for f in plan)
    ]


def test_an_entry_the_emulator_refuses_is_left_out_and_said() -> None:
    bad = faults_plan.FaultSpec("braket", "nonsense", {"operation": "NoSuchCall", "rate": 0.1})
    good = faults_plan.fault_plan(1.0)[0]
    braket, _, dropped = faults_plan.scenarios([bad, good])
    assert braket["faults"] == [dict(good.entry)]
    assert (
        len(dropped) == 1
        and dropped[0].startswith("braket nonsense: ")
        and "operation" in (dropped[0])
    )


def test_the_catalog_s_prices_are_the_scenario_s() -> None:
    import yaml

    from flux_quantum.emulator import Scenario
    from flux_quantum.emulator.ibm import IbmScenario

    braket, ibm, _ = faults_plan.scenarios(())
    devices = {d["name"]: d for d in yaml.safe_load(faults_plan.catalog(20.0))["devices"]}
    for spec in Scenario.from_dict(braket).devices:
        price = devices[spec.name]["price"]
        if spec.cost.unit == "shot":
            assert (price["per_task"], price["per_shot"]) == (spec.cost.task_price, spec.cost.price)
        else:
            assert (price["per_minute"], price["min_seconds"]) == (spec.cost.price, 3)
    scenario = IbmScenario.from_dict(ibm)
    for backend in scenario.backends:
        twin = next(d for d in devices.values() if d["id"] == backend.name)
        assert twin["price"]["per_minute"] / 60 == pytest.approx(scenario.price_per_second)


def test_write_locks_sees_a_write_transaction_of_a_wal_database(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    assert faults_arm.write_locks(os.getpid(), files) == []
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO t VALUES (1)")
    assert faults_arm.write_locks(os.getpid(), files) == ["ledger.db-shm 120-120"]
    assert faults_arm.write_locks(os.getpid() + 1, files) == []
    db.execute("COMMIT")
    assert faults_arm.write_locks(os.getpid(), files) == []
    db.close()


def _findings(**counts: int) -> dict[str, object]:
    return {
        "counts": {p: counts.get(p, 0) for p in faults_report.PROMISE_NAMES},
        "checked": {p: p != "ledger_matches" for p in faults_report.PROMISE_NAMES},
        "violations": [{"promise": "one_task", "subject": "job 17", "detail": "two billed tasks"}]
        if counts.get("one_task")
        else [],
        "billed_total": 12.5,
        "ledger_total": None,
        "jobs": [
            {"jobid": 1, "userid": 0, "outcome": "completed", "reason": None},
            {"jobid": 2, "userid": 0, "outcome": "completed", "reason": None},
            {
                "jobid": 3,
                "userid": 0,
                "outcome": "failed",
                "reason": "qpu: qpu: task "
                "arn:aws:braket:us-east-1:1:quantum-task/5dcd-29 on qpu-b FAILED: x",
            },
            {
                "jobid": 4,
                "userid": 0,
                "outcome": "failed",
                "reason": "qpu: task "
                "arn:aws:braket:us-east-1:1:quantum-task/77aa on qpu-b FAILED: x",
            },
            {"jobid": 5, "userid": 0, "outcome": "cancelled", "reason": "by the campaign"},
        ],
    }


def _arm(name: str, findings: dict[str, object] | None, calls: int = 40) -> object:
    result = faults_arm.ArmResult(name, 1, jobs={"single": 3, "loop": 1}, qpu_jobs=5)
    result.findings = findings
    result.calls = calls
    result.report = {"faults": {"braket": {"reset": 2, "lost": 1}, "ibm": {"error:503": 4}}}
    result.recoveries = [
        faults_arm.Recovery("kill", 10.0, 1.2, 3),
        faults_arm.Recovery("ledger", 20.0, 6.5, 2, "killed mid-write"),
        faults_arm.Recovery("restart", 30.0, 4.0, 5),
    ]
    return result


def test_figures_from_the_report_and_the_findings() -> None:
    arm = _arm("faults", _findings())
    assert faults_report.faults_by_kind(arm.report) == {
        "braket lost": 1,
        "braket reset": 2,
        "ibm error:503": 4,
    }
    counts = faults_report.violations_by_promise(arm.findings)
    assert counts["ledger_matches"] is None and counts["one_task"] == 0
    assert faults_report.outcomes(arm.findings) == {
        "completed": 2,
        "failed: qpu: task <task> on qpu-b FAILED: x": 2,
        "cancelled: by the campaign": 1,
    }
    assert arm.calls_per_job == 8.0
    report = {"calls": {"GetQuantumTask": 30, "CreateQuantumTask": 9, "CreateJob": 12}}
    assert list(faults_report.calls_by_operation(report).items()) == [
        ("GetQuantumTask", 30),
        ("CreateJob", 12),
        ("CreateQuantumTask", 9),
    ]
    assert faults_report.calls_by_operation(None) == {}


def test_the_verdict_is_ok_only_when_the_checker_ran_and_found_nothing() -> None:
    assert faults_report.ok(_arm("faults", _findings()))
    assert not faults_report.ok(_arm("faults", _findings(one_task=1)))
    assert not faults_report.ok(_arm("faults", None))


def test_the_summary_says_targets_violations_and_the_call_ratio() -> None:
    bad = _arm("faults", _findings(one_task=1), calls=80)
    text = faults_report.summary([bad, _arm("clean", _findings())], ["header line"])
    assert text.startswith("header line\n")
    assert "one_task               1  MISSED" in text
    assert "one_task: job 17: two billed tasks" in text
    assert "ledger_matches     not checked" in text
    # the ledger writer's kill is a kill -9 too: 6.5 s misses the 5 s target
    assert "after kill -9      n 2, median 3.85s, max 6.50s <= 5s: MISSED" in text
    assert "after restart      n 1, median 4.00s, max 4.00s <= 30s: met" in text
    assert "16.0 with faults, 8.0 without (x2.00)" in text
    assert text.endswith("verdict: faults VIOLATIONS or not checked; clean 0 violations")
    csv_rows = faults_report.rows([bad])
    assert {"arm": "faults", "figure": "violations", "key": "one_task", "value": 1} in csv_rows
    assert {"arm": "faults", "figure": "recovery_ledger", "key": "20.0", "value": "6.500"} in (
        csv_rows
    )


@pytest.mark.flux
def test_a_small_campaign_runs_end_to_end_and_passes_the_checker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A miniature of the campaign (about 25 s: 8 submissions of every pattern, one kill -9,
    one instance restart, no injected fault, no clean arm) through the real instance, the
    supervised service and the checker. The quick campaign itself (``--quick``, about 2.5
    minutes) is left to people: the flux tier's budget is smaller."""
    rc = faults.main(
        [
            "--jobs=8",
            "--window=16",
            "--fault-scale=0",
            "--kills=1",
            "--restarts=1",
            "--ledger-kills=0",
            "--no-clean",
            "--drain=90",
            f"--out-dir={tmp_path}",
        ]
    )
    out = capsys.readouterr().out
    assert "verdict: faults 0 violations" in out, out[-3000:]
    assert rc == 0
    for promise in faults_report.PROMISE_NAMES:
        assert f"  {promise:<18}     0  met" in out
    assert "after restart      n 1," in out and "after kill -9      n 1," in out
    data = json.loads((tmp_path / "faults.json").read_text())
    (run,) = data["runs"]
    assert set(run["jobs"]) == set(faults_plan.PATTERNS)
    assert run["findings"]["ok"] is True
    assert run["report"]["bill"]["total"] == pytest.approx(run["findings"]["ledger_total"])
