"""The emulator's fault effects and its own bill, through the real clients (boto3, qrmi, the
project's Braket and IBM vendors) against a live emulator on a ManualClock: a reset is a
connection error; a lost create leaves one task that a retry with the same token finds; a
vendor-cancelled task ends CANCELLED and unbilled; IBM rates are seeded; the bill's
figures for a QPU, a simulator and an IBM job agree with the catalog's price model and
the vendors' own billed quantities; the report over HTTP and ``flux quantum emulator
--report``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
import qrmi
from botocore.config import Config
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError
from braket.ir.openqasm import Program

from flux_quantum.catalog import PriceModel, parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario, ScenarioError
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import RetryBudget, TaskState
from flux_quantum.vendors.braket.parsing import execution_seconds
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor

# Fixtures: emulator, make_emulator, manual_clock (see t/emulator_fixtures.py).
pytest_plugins = ["emulator_fixtures"]

MakeEmulator = Callable[..., Emulator]

QPU = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
SIM = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
SCENARIOS = Path(__file__).resolve().parents[2] / "etc" / "flux-quantum" / "scenarios"
GHZ = """OPENQASM 3.0;
qubit[3] q;
bit[3] c;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
c = measure q;
"""
# A Bell pair in the IBM line's ISA (rz, sx, cz on coupled qubits 0 and 1: h = rz sx rz,
# cx = h cz h), written by hand: these tests are about faults, not compiling.
BELL = (
    'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\n'
    "rz(pi/2) q[0];\nsx q[0];\nrz(pi/2) q[0];\nrz(pi/2) q[1];\nsx q[1];\nrz(pi/2) q[1];\n"
    "cz q[0], q[1];\nrz(pi/2) q[1];\nsx q[1];\nrz(pi/2) q[1];\nc = measure q;\n"
)
CATALOG = parse_catalog(
    f"""
devices:
  - {{name: line5, vendor: braket, id: "{QPU}", class: qpu, qubits: 5,
     price: {{per_task: 0.3, per_shot: 0.001}}}}
  - {{name: sv1, vendor: braket, id: "{SIM}", class: simulator, qubits: 34,
     price: {{per_minute: 0.075, min_seconds: 3}}}}
  - {{name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {{per_minute: 96}}}}
""",
    "t.yaml",
)


def braket_scenario(*faults: dict, service_time: float = 10.0, sim_time: float = 5.5) -> dict:
    """A QPU (5 tasks ahead of 10 s each) and SV1 (idle, ``sim_time`` a task), priced as
    the catalog above prices them."""
    return {
        "devices": [
            {
                "arn": QPU,
                "name": "Line-5",
                "qubits": 5,
                "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
                "queue": {"depth": 5, "service_time": service_time},
            },
            {
                "arn": SIM,
                "name": "SV1",
                "qubits": 20,
                "cost": {"price": 0.075, "unit": "minute"},
                "queue": {"service_time": sim_time},
            },
        ],
        "faults": list(faults),
    }


def create(emu: Emulator, token: str, device: str = QPU, shots: int = 100) -> str:
    """One CreateQuantumTask through boto3 (the SDK's client, no retries: see the fixtures)."""
    braket = boto3.client("braket", region_name="us-east-1")
    return braket.create_quantum_task(
        clientToken=token,
        deviceArn=device,
        shots=shots,
        action=Program(source=GHZ).json(),
        outputS3Bucket=emu.bucket,
        outputS3KeyPrefix="tasks",
    )["quantumTaskArn"]


def state(arn: str) -> str:
    braket = boto3.client("braket", region_name="us-east-1")
    return braket.get_quantum_task(quantumTaskArn=arn)["status"]


def braket_vendor(clock: ManualClock) -> BraketVendor:
    """The production Braket vendor (environment already pointed at the emulator)."""
    return BraketVendor(
        BraketSettings(connect_timeout=2, read_timeout=2),
        devices=CATALOG.devices,
        retry=RetryBudget(attempts=3, base_delay=0.01),
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
    )


def ibm_emulator(clock: ManualClock, *faults: dict, **top) -> Emulator:
    backend = {"name": "ibm_line", "qubits": 5, "queue": {"depth": 2, "service_time": 10}}
    scenario = IbmScenario.from_dict({"backends": [backend], "faults": list(faults), **top})
    return Emulator(clock=clock, ibm=scenario).start()


def ibm_vendor(emu: Emulator, clock: ManualClock, attempts: int = 3) -> IbmVendor:
    return IbmVendor(
        IbmSettings(settle=0.0),
        devices=CATALOG.devices,
        retry=RetryBudget(attempts=attempts, base_delay=0.01),
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=lambda seconds: None,
        environ=emu.ibm.env(emu.url),
    )


def by_id(report: dict) -> dict[str, dict]:
    return {task["id"]: task for task in report["bill"]["tasks"]}


# -- reset and lost answers -------------------------------------------------------------------


def test_a_reset_is_a_connection_error_and_creates_nothing(make_emulator: MakeEmulator) -> None:
    emu = make_emulator(braket_scenario({"operation": "CreateQuantumTask", "reset": True}))
    with pytest.raises(ConnectionClosedError):
        create(emu, "tok-reset")
    assert emu.task_arns() == []
    [call] = emu.calls
    assert (call.operation, call.status, call.error, call.task) == (
        "CreateQuantumTask",
        0,
        "ConnectionReset",
        None,
    )
    assert emu.report()["faults"]["braket"] == {"reset": 1}


def test_after_a_reset_the_same_client_goes_on(make_emulator: MakeEmulator) -> None:
    emu = make_emulator(braket_scenario({"operation": "GetDevice", "reset": True, "calls": [2]}))
    braket = boto3.client("braket", region_name="us-east-1")
    assert braket.get_device(deviceArn=SIM)["deviceName"] == "SV1"  # opens a kept-alive conn
    with pytest.raises(ConnectionClosedError):
        braket.get_device(deviceArn=SIM)
    assert braket.get_device(deviceArn=SIM)["deviceName"] == "SV1"
    assert [c.status for c in emu.calls] == [200, 0, 200]


def test_a_lost_create_leaves_one_task_that_the_same_token_finds(
    make_emulator: MakeEmulator,
) -> None:
    emu = make_emulator(
        braket_scenario(
            {"operation": "CreateQuantumTask", "after_commit": True, "reset": True, "calls": [1]}
        )
    )
    with pytest.raises(ConnectionClosedError):
        create(emu, "tok-lost")
    [arn] = emu.task_arns()  # the create applied; only its answer was lost
    assert create(emu, "tok-lost") == arn  # the retry with the same clientToken
    assert emu.task_arns() == [arn]
    assert [(c.status, c.task) for c in emu.calls] == [(0, arn), (201, arn)]
    report = emu.report()
    assert report["faults"]["braket"] == {"lost": 1}
    assert report["calls"]["CreateQuantumTask"] == 2
    assert [t["token"] for t in report["bill"]["tasks"]] == ["tok-lost"]


def test_the_braket_vendor_rides_over_a_lost_create_with_one_task(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(
        braket_scenario(
            {"operation": "CreateQuantumTask", "after_commit": True, "reset": True, "calls": [1]}
        )
    )
    task = braket_vendor(manual_clock).submit(CATALOG.get("line5"), GHZ, 100, "fq-7-1-0-0")
    assert emu.task_arns() == [task.task_id]
    assert emu.call_count("CreateQuantumTask") == 2


def test_an_answer_late_after_the_commit_times_the_client_out_but_the_task_exists(
    make_emulator: MakeEmulator,
) -> None:
    emu = make_emulator(
        braket_scenario(
            {"operation": "CreateQuantumTask", "after_commit": True, "delay": 0.5, "calls": [1]}
        )
    )
    braket = boto3.client("braket", region_name="us-east-1", config=Config(read_timeout=0.1))
    with pytest.raises(ReadTimeoutError):
        braket.create_quantum_task(
            clientToken="tok-slow",
            deviceArn=QPU,
            shots=10,
            action=Program(source=GHZ).json(),
            outputS3Bucket=emu.bucket,
            outputS3KeyPrefix="tasks",
        )
    assert len(emu.task_arns()) == 1
    assert emu.report()["faults"]["braket"] == {"delay": 1}


def test_a_cancel_that_applied_but_answered_an_error(
    make_emulator: MakeEmulator,
) -> None:
    emu = make_emulator(
        braket_scenario(
            {
                "operation": "CancelQuantumTask",
                "after_commit": True,
                "error": "InternalServiceException",
            }
        )
    )
    arn = create(emu, "tok-cancel")
    braket = boto3.client("braket", region_name="us-east-1")
    with pytest.raises(braket.exceptions.InternalServiceException):
        braket.cancel_quantum_task(quantumTaskArn=arn, clientToken="c1")
    assert state(arn) == "CANCELLED"
    assert emu.report()["faults"]["braket"] == {"error:InternalServiceException": 1}


def test_an_s3_fault_fails_the_result_download(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(braket_scenario({"operation": "GetObject", "error": "InternalError"}))
    vendor = braket_vendor(manual_clock)
    task = vendor.submit(CATALOG.get("sv1"), GHZ, 10, "fq-8-1-0-0")
    manual_clock.advance(10)
    assert vendor.poll(task).state is TaskState.COMPLETED
    with pytest.raises(errors.VendorError):
        vendor.result(task)
    assert emu.report()["faults"]["braket"]["s3:InternalError"] >= 1


# -- cancel_task / cancel_job -----------------------------------------------------------------


def test_a_task_the_vendor_cancels_ends_cancelled_and_unbilled(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(braket_scenario({"device": "Line-5", "cancel_task": True, "calls": [1]}))
    cancelled, fine = create(emu, "tok-c1"), create(emu, "tok-c2")
    assert state(cancelled) == "QUEUED"  # it waits its turn like any task
    manual_clock.advance(60)  # 1 running + 5 waiting: its turn comes at t=60
    assert state(cancelled) == "CANCELLED"
    assert state(fine) == "RUNNING"  # the device went on to the next task at once
    manual_clock.advance(10)
    assert state(fine) == "COMPLETED"
    report = emu.report()
    tasks = by_id(report)
    assert tasks[cancelled]["state"] == "CANCELLED" and tasks[cancelled]["cost"] == 0.0
    assert tasks[fine]["cost"] == pytest.approx(0.3 + 0.001 * 100)
    assert report["faults"]["braket"] == {"cancel_task": 1}


@pytest.mark.emulator
def test_an_ibm_job_ibm_cancels_ends_cancelled(manual_clock: ManualClock) -> None:
    emu = ibm_emulator(manual_clock, {"operation": "CreateJob", "cancel_job": True})
    try:
        ibm = ibm_vendor(emu, manual_clock)
        task = ibm.submit(CATALOG.get("line"), BELL, 10, "fq-9-1-0-0")
        assert ibm.poll(task).state is TaskState.QUEUED
        manual_clock.advance(30)
        assert ibm.poll(task).state is TaskState.CANCELLED
        report = emu.report()
        assert report["faults"]["ibm"] == {"cancel_job": 1}
        [job] = report["bill"]["tasks"]
        assert (job["state"], job["cost"], job["token"]) == ("CANCELLED", 0.0, "fq-9-1-0-0")
    finally:
        emu.stop()


# -- IBM: reset, lost create, rate, results -----------------------------------------------------


@pytest.mark.emulator
def test_ibm_lost_create_makes_one_job_and_a_reset_is_an_error(manual_clock: ManualClock) -> None:
    emu = ibm_emulator(
        manual_clock,
        {"operation": "CreateJob", "after_commit": True, "reset": True, "calls": [1]},
        {"operation": "GetJob", "reset": True, "calls": [1]},
    )
    try:
        ibm = ibm_vendor(emu, manual_clock)
        task = ibm.submit(CATALOG.get("line"), BELL, 10, "fq-10-1-0-0")
        assert emu.ibm.job_ids() == [task.task_id]
        with pytest.raises(errors.VendorError):
            ibm_vendor(emu, manual_clock, attempts=1).poll(task)
        assert ibm.poll(task).state is TaskState.QUEUED
        assert emu.report()["faults"]["ibm"] == {"lost": 1, "reset": 1}
    finally:
        emu.stop()


@pytest.mark.emulator
def test_ibm_fault_rate_is_seeded_per_seed(manual_clock: ManualClock) -> None:
    def pattern(seed: int) -> list[int]:
        scenario = IbmScenario.from_dict(
            {
                "backends": [{"name": "ibm_line", "qubits": 5}],
                "faults": [{"operation": "ListBackends", "status": 503, "rate": 0.5}],
            }
        )
        emu = Emulator(clock=manual_clock, ibm=scenario, seed=seed).start()
        try:
            resource = qrmi.QuantumResource.from_config(
                "ibm_line",
                qrmi.ResourceType.IBMQuantumComputeService,
                {k: v for k, v in emu.ibm.env(emu.url).items() if k.startswith("QRMI_")},
            )
            for _ in range(16):
                with contextlib.suppress(qrmi.QrmiError):
                    resource.status()
            calls = [c.status for c in emu.calls if c.operation == "ListBackends"]
            assert emu.report()["faults"]["ibm"].get("error:503", 0) == calls.count(503)
            return calls
        finally:
            emu.stop()

    first = pattern(1)
    assert first == pattern(1)
    assert set(first) == {200, 503}
    assert first != pattern(2)


@pytest.mark.emulator
def test_ibm_results_download_can_fail(manual_clock: ManualClock) -> None:
    emu = ibm_emulator(manual_clock, {"operation": "GetJobResults", "status": 500, "first": 1})
    try:
        ibm = ibm_vendor(emu, manual_clock, attempts=1)
        task = ibm.submit(CATALOG.get("line"), BELL, 10, "fq-11-1-0-0")
        manual_clock.advance(60)
        assert ibm.poll(task).state is TaskState.COMPLETED
        with pytest.raises(errors.VendorError):
            ibm.result(task)
        assert sum(ibm.result(task).counts.values()) == 10
        assert emu.report()["faults"]["ibm"] == {"error:500": 1}
    finally:
        emu.stop()


# -- the bill ---------------------------------------------------------------------------------


def test_the_bill_of_a_qpu_and_a_simulator_matches_the_catalog_and_the_result(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(braket_scenario(sim_time=5.5))
    vendor = braket_vendor(manual_clock)
    qpu = vendor.submit(CATALOG.get("line5"), GHZ, 200, "fq-1-1-0-0")
    sim = vendor.submit(CATALOG.get("sv1"), GHZ, 100, "fq-1-1-1-0")
    report = emu.report()
    assert {t["state"] for t in report["bill"]["tasks"]} == {"QUEUED", "RUNNING"}
    assert report["bill"]["total"] == 0.0  # nothing is billed before it completed
    manual_clock.advance(70)
    assert vendor.poll(qpu).state is TaskState.COMPLETED
    seconds = vendor.billed_seconds(sim)  # what the results.json says: 5500 ms
    assert seconds == 5.5
    report = emu.report()
    tasks = by_id(report)
    line5, sv1 = CATALOG.get("line5").price, CATALOG.get("sv1").price
    assert tasks[qpu.task_id] == {
        "vendor": "braket",
        "id": qpu.task_id,
        "device": QPU,
        "token": qpu.token,
        "state": "COMPLETED",
        "shots": 200,
        "billed_seconds": None,
        "cost": pytest.approx(line5.cost(200)),
        "session": None,
        "created": 0.0,
        "reservation": None,
        "started": 60.0,  # behind the 1 running and 5 waiting at t=0, 10 s each
        "ended": 70.0,
    }
    assert tasks[sim.task_id]["billed_seconds"] == 5.5
    assert tasks[sim.task_id]["cost"] == pytest.approx(sv1.cost(100, seconds))
    assert report["bill"]["total"] == pytest.approx(line5.cost(200) + sv1.cost(100, seconds))
    assert report["calls"]["CreateQuantumTask"] == 2 and report["now"] == 70.0


def test_a_short_simulator_task_is_billed_its_3_second_minimum(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(braket_scenario(sim_time=0.25))
    arn = create(emu, "tok-short", device=SIM, shots=10)
    manual_clock.advance(1)
    s3 = boto3.client("s3", region_name="us-east-1")
    task = boto3.client("braket", region_name="us-east-1").get_quantum_task(quantumTaskArn=arn)
    key = task["outputS3Directory"] + "/results.json"
    result = json.loads(s3.get_object(Bucket=emu.bucket, Key=key)["Body"].read())
    assert execution_seconds(result) == 0.25
    [billed] = emu.report()["bill"]["tasks"]
    assert billed["billed_seconds"] == 3.0
    expected = PriceModel(per_minute=0.075, min_seconds=3).cost(10, 0.25)
    assert billed["cost"] == pytest.approx(expected) == pytest.approx(0.075 / 20)


def test_failed_tasks_cost_nothing(make_emulator: MakeEmulator, manual_clock: ManualClock) -> None:
    emu = make_emulator(braket_scenario({"device": "SV1", "fail_task": "drift", "calls": [1]}))
    arn = create(emu, "tok-f", device=SIM)
    manual_clock.advance(10)
    assert state(arn) == "FAILED"
    report = emu.report()
    assert [(t["state"], t["cost"]) for t in report["bill"]["tasks"]] == [("FAILED", 0.0)]
    assert report["faults"]["braket"] == {"fail_task": 1}


@pytest.mark.emulator
def test_the_bill_of_an_ibm_job_and_its_session(manual_clock: ManualClock) -> None:
    emu = ibm_emulator(manual_clock)
    try:
        ibm = ibm_vendor(emu, manual_clock)
        line = CATALOG.get("line")
        session = ibm.open_session(line).session
        assert session is not None
        task = ibm.submit_in(session, line, BELL, 10, "fq-12-1-0-0")
        [open_session] = emu.report()["bill"]["sessions"]
        assert open_session["state"] == "open" and open_session["jobs"] == [task.task_id]
        manual_clock.advance(60)  # two background jobs of 10 s (and one running), then ours
        assert ibm.poll(task).state is TaskState.COMPLETED
        seconds = ibm.billed_seconds(task)  # the job document's usage.seconds
        assert seconds == 10.0
        ibm.close_session(session)
        report = emu.report()
        [job] = report["bill"]["tasks"]
        assert job["vendor"] == "ibm" and job["device"] == "ibm_line"
        assert job["token"] == "fq-12-1-0-0" and job["session"] == session.session_id
        assert job["billed_seconds"] == seconds and job["shots"] == 10
        assert job["cost"] == pytest.approx(line.price.cost(10, seconds)) == pytest.approx(16.0)
        [closed] = report["bill"]["sessions"]
        assert closed["state"] == "closed" and closed["cost"] == job["cost"]
        assert closed["id"] == session.session_id and closed["mode"] == "dedicated"
        assert report["bill"]["total"] == pytest.approx(16.0)
        assert report["calls"]["CreateJob"] == 1 and report["calls"]["CreateSession"] == 1
    finally:
        emu.stop()


@pytest.mark.emulator
def test_ibm_price_per_second_follows_the_plan(manual_clock: ManualClock) -> None:
    backends = [{"name": "b", "qubits": 3}]
    assert IbmScenario.from_dict({"backends": backends}).price_per_second == 1.60
    assert IbmScenario.from_dict({"backends": backends, "plan": "open"}).price_per_second == 0.0
    set_price = {"backends": backends, "price_per_second": 0.5}
    assert IbmScenario.from_dict(set_price).price_per_second == 0.5
    with pytest.raises(ScenarioError, match="price_per_second must be a number"):
        IbmScenario.from_dict({"backends": backends, "price_per_second": "cheap"})
    emu = ibm_emulator(manual_clock, plan="open")
    try:
        ibm = ibm_vendor(emu, manual_clock)
        task = ibm.submit(CATALOG.get("line"), BELL, 10, "fq-13-1-0-0")
        manual_clock.advance(60)
        assert ibm.poll(task).state is TaskState.COMPLETED
        [job] = emu.report()["bill"]["tasks"]
        assert job["state"] == "COMPLETED" and job["cost"] == 0.0 and job["billed_seconds"]
    finally:
        emu.stop()


# -- the report over HTTP and from the CLI ------------------------------------------------------


def test_the_report_over_http_needs_no_credential_and_carries_none(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(braket_scenario())
    create(emu, "tok-http")
    manual_clock.advance(70)
    with urllib.request.urlopen(emu.url + "/_emulator/report") as answer:
        assert answer.headers["Content-Type"] == "application/json"
        text = answer.read().decode()
    report = json.loads(text)
    assert report == json.loads(json.dumps(emu.report()))
    assert set(report) >= {"bill", "calls", "faults", "now"}
    assert set(report["bill"]) >= {"currency", "tasks", "sessions", "total"}
    for secret in emu.env().values():
        if "secret" in secret or secret == emu.ibm.env(emu.url)["QRMI_IBM_QCS_IAM_APIKEY"]:
            assert secret not in text
    assert emu.call_count() == 1  # the report is not a vendor call


@pytest.mark.emulator
def test_cli_report_prints_the_report_of_the_emulator_that_wrote_the_env_file(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "emulator.env"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(braket_scenario()))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "flux_quantum.cli.emulator", "--env-file", str(env_file), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    started = cli("--background", "--scenario", str(scenario))
    assert started.returncode == 0, started.stderr
    try:
        env = dict(
            line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
        )
        with urllib.request.urlopen(env["FLUX_QUANTUM_EMULATOR_URL"] + "/_emulator/report"):
            pass
        shown = cli("--report")
        assert shown.returncode == 0, shown.stderr
        report = json.loads(shown.stdout)
        assert report["bill"] == {
            "currency": "USD",
            "tasks": [],
            "sessions": [],
            "reservations": [],
            "total": 0.0,
        }
        assert report["faults"] == {
            "braket": {},
            "ibm": {},
            "iqm": {},
            "pasqal": {},
            "ibm-quantum-system": {},
            "alice-bob-felis": {},
            "oqtopus": {},
            "ionq": {},
        }
    finally:
        stopped = cli("--stop")
    assert stopped.returncode == 0, stopped.stderr
    gone = cli("--report")
    assert gone.returncode == 1 and "cannot read it" in gone.stderr


# -- scenario validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ({"reset": True, "error": "ThrottlingException"}, ["exactly one effect", "reset"]),
        ({"operation": "GetDevice", "cancel_task": True}, ["must be CreateQuantumTask"]),
        ({"cancel_task": True, "after_commit": True}, ["after_commit", "not 'cancel_task'"]),
        ({"reset": "yes"}, ["'faults[0].reset'", "true or false"]),
    ],
)
def test_braket_fault_mistakes_name_the_field(fault: dict, words: list[str]) -> None:
    with pytest.raises(ScenarioError) as raised:
        Scenario.from_dict({"extends": "default", "faults": [fault]})
    for word in words:
        assert word in str(raised.value)


def test_a_late_reset_may_follow_a_delay_and_both_scenario_files_parse() -> None:
    fault = {"after_commit": True, "reset": True, "delay": 1.0}
    assert Scenario.from_dict({"extends": "default", "faults": [fault]}).faults[0].reset
    braket = Scenario.from_yaml(SCENARIOS / "faults.yaml")
    assert any(f.after_commit and f.reset for f in braket.faults)
    ibm = IbmScenario.from_yaml(SCENARIOS / "ibm-faults.yaml")
    kinds = {
        k for f in ibm.faults for k in ("reset", "cancel_job", "after_commit") if getattr(f, k)
    }
    assert kinds == {"reset", "cancel_job", "after_commit"} and ibm.price_per_second == 1.60


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ({"operation": "GetJob", "cancel_job": True}, ["must be CreateJob"]),
        ({"operation": "CreateJob", "status": 500, "rate": 2}, ["rate must be between 0 and 1"]),
        ({"operation": "CreateJob", "reset": 1}, ["reset must be true or false"]),
        ({"operation": "CreateJob", "reset": True, "status": 500}, ["exactly one effect"]),
    ],
)
def test_ibm_fault_mistakes_name_the_field(fault: dict, words: list[str]) -> None:
    with pytest.raises(ScenarioError) as raised:
        IbmScenario.from_dict({"backends": [{"name": "b", "qubits": 3}], "faults": [fault]})
    for word in words:
        assert word in str(raised.value)
