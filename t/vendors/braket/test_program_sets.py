"""Braket program sets against a live emulator on 127.0.0.1 (ManualClock), through the real
amazon-braket-sdk and boto3: the SDK's own ``AwsDevice.run(ProgramSet)`` and our vendor
layer's ``submit_set``/``results`` (Braket and local), Braket's limits and errors, the
task's ``actionMetadata``, idempotent creates, one task on the bill (one fee, every shot),
a FAILED set, and the pure layout helpers."""

from __future__ import annotations

import json
from collections.abc import Callable

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario, ScenarioError
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.braket.parsing import (
    LAYOUT_TAG,
    decode_layout,
    encode_layout,
    program_set_layout,
)
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.local.vendor import LocalVendor
from flux_quantum.vendors.relayed import RelayedVendor

pytest_plugins = ["emulator_fixtures"]

MakeEmulator = Callable[..., Emulator]

QPU_ARN = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
SV1_ARN = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
SET_ACTION = "braket.ir.openqasm.program_set"
TASK_PRICE, SHOT_PRICE = 0.3, 0.001
SERVICE_TIME, SHOT_TIME = 10.0, 0.01

BELL = """OPENQASM 3.0;
qubit[2] q;
bit[2] c;
h q[0];
cnot q[0], q[1];
c = measure q;
"""
ONES = """OPENQASM 3.0;
qubit[3] q;
bit[3] c;
x q[0];
x q[1];
x q[2];
c = measure q;
"""
ONE = """OPENQASM 3.0;
qubit[1] q;
bit[1] c;
x q[0];
c = measure q;
"""
TOO_WIDE = """OPENQASM 3.0;
qubit[7] q;
bit[7] c;
h q[6];
c = measure q;
"""

CATALOG = parse_catalog(
    f"""
devices:
  - {{name: line5, vendor: braket, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: {TASK_PRICE}, per_shot: {SHOT_PRICE}}}}}
  - {{name: line5-local, vendor: local, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: {TASK_PRICE}, per_shot: {SHOT_PRICE}}}}}
  - {{name: sv1, vendor: braket, id: "{SV1_ARN}", class: simulator, qubits: 34,
     price: {{per_minute: 0.075}}}}
""",
    "program-sets.yaml",
)
LINE5 = CATALOG.get("line5")
LINE5_LOCAL = CATALOG.get("line5-local")


def line5(**program_sets: int) -> dict:
    """A QPU that takes program sets of at most 100 executables and 2000 shots (unless
    ``program_sets`` says otherwise), idle, each task served in 10 s plus 10 ms a shot."""
    return {
        "extends": "default",
        "devices": [
            {
                "arn": QPU_ARN,
                "name": "Line-5",
                "qubits": 5,
                "cost": {"price": SHOT_PRICE, "unit": "shot", "task_price": TASK_PRICE},
                "shots": [1, 1000],
                "queue": {"service_time": SERVICE_TIME, "shot_time": SHOT_TIME},
                "program_sets": {"max_executables": 100, "max_total_shots": 2000, **program_sets},
            }
        ],
    }


@pytest.fixture
def emu(make_emulator: MakeEmulator) -> Emulator:
    return make_emulator(line5())


def braket_vendor(clock: ManualClock) -> BraketVendor:
    """The production Braket vendor, reaching the emulator through the environment the
    fixtures set (AWS_ENDPOINT_URL_*); retry sleeps advance emulated time."""
    return BraketVendor(
        # A program set's create parses every program in the emulator: on a busy machine
        # (the tests run on every core) that outlasts a 2 s read and the create is retried.
        BraketSettings(connect_timeout=2, read_timeout=30),
        devices=CATALOG.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
    )


def local_vendor(clock: ManualClock, emu: Emulator) -> LocalVendor:
    return LocalVendor.from_emulator(
        emu,
        devices=CATALOG.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
    )


def boto_braket(emu: Emulator):
    env = emu.env()
    return boto3.client(
        "braket",
        region_name="us-east-1",
        endpoint_url=env["AWS_ENDPOINT_URL_BRAKET"],
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 1}),
    )


def create_raw(emu: Emulator, programs: list, shots: int, device: str = QPU_ARN) -> dict:
    """CreateQuantumTask with a hand-written program set action (what the SDK's models
    would refuse to build); the error's parsed response, or the answer."""
    action = {
        "braketSchemaHeader": {"name": SET_ACTION, "version": "1"},
        "programs": [p if isinstance(p, dict) else {"source": p, "inputs": {}} for p in programs],
    }
    try:
        return boto_braket(emu).create_quantum_task(
            clientToken=f"raw-{len(programs)}-{shots}-{device[-5:]}",
            deviceArn=device,
            shots=shots,
            action=json.dumps(action),
            outputS3Bucket=emu.bucket,
            outputS3KeyPrefix="raw",
        )
    except ClientError as exc:
        return exc.response


def row_of(emu: Emulator, task_id: str) -> dict:
    return next(t for t in emu.report()["bill"]["tasks"] if t["id"] == task_id)


# --- the SDK on its own ------------------------------------------------------------------


def test_the_sdk_runs_a_program_set_and_reads_each_program(emu, manual_clock):
    from braket.aws import AwsDevice
    from braket.circuits import Circuit
    from braket.device_schema import DeviceActionType
    from braket.program_sets import ProgramSet

    device = AwsDevice(QPU_ARN)
    limits = device.properties.action[DeviceActionType.OPENQASM_PROGRAM_SET]
    assert (limits.maximumExecutables, limits.maximumTotalShots) == (100, 2000)
    assert DeviceActionType.OPENQASM_PROGRAM_SET not in AwsDevice(SV1_ARN).properties.action

    program_set = ProgramSet(
        [Circuit().h(0).cnot(0, 1), Circuit().x(0).x(1).x(2), ONE], shots_per_executable=40
    )
    task = device.run(program_set, poll_interval_seconds=0.01)  # shots: 3 x 40
    metadata = task.metadata()
    assert metadata["shots"] == 120
    assert metadata["actionMetadata"] == {
        "actionType": SET_ACTION,
        "programCount": 3,
        "executableCount": 3,
    }
    manual_clock.advance(SERVICE_TIME + 120 * SHOT_TIME)
    result = task.result()
    assert task.metadata()["numSuccessfulShots"] == 120
    assert len(result) == 3
    bell, ones, one = (entry.entries for entry in result.entries)
    assert sum(bell[0].counts.values()) == 40 and set(bell[0].counts) <= {"00", "11"}
    assert ones[0].counts == {"111": 40}
    assert one[0].counts == {"1": 40}
    meta = result.task_metadata
    assert (meta.id, meta.requestedShots, meta.successfulShots) == (task.id, 120, 120)
    assert meta.status == "COMPLETED" and meta.totalFailedExecutables == 0
    # Where Braket puts them: results.json names the other files relative to s3Location.
    s3 = boto3.client("s3")
    directory = metadata["outputS3Directory"]
    top = json.loads(
        s3.get_object(Bucket=emu.bucket, Key=f"{directory}/results.json")["Body"].read()
    )
    assert top["programResults"] == [f"programs/{i}/results.json" for i in range(3)]
    assert top["s3Location"] == [emu.bucket, directory]
    assert top["taskMetadata"] == "metadata.json"


def test_inputs_make_several_executables_of_one_program(emu, manual_clock):
    from braket.aws import AwsDevice
    from braket.circuits import Circuit, FreeParameter
    from braket.program_sets import CircuitBinding, ProgramSet

    theta = FreeParameter("theta")
    sweep = CircuitBinding(Circuit().rx(0, theta), input_sets={"theta": [0.0, 3.141592653589793]})
    task = AwsDevice(QPU_ARN).run(
        ProgramSet([sweep, Circuit().x(0)], shots_per_executable=25), poll_interval_seconds=0.01
    )
    actions = task.metadata()["actionMetadata"]
    assert (actions["programCount"], actions["executableCount"]) == (2, 3)
    assert task.metadata()["shots"] == 75
    manual_clock.advance(60)
    result = task.result()
    assert [len(entry) for entry in result.entries] == [2, 1]
    assert result.entries[0][0].counts == {"0": 25}  # rx(0)
    assert result.entries[0][1].counts == {"1": 25}  # rx(pi)
    assert result.entries[0][1].inputs == {"theta": 3.141592653589793}


def test_the_sdk_reads_a_failed_program_set_per_executable(make_emulator, manual_clock):
    from braket.aws import AwsDevice
    from braket.program_sets import ProgramSet
    from braket.task_result import ProgramSetExecutableFailure

    scenario = line5()
    scenario["faults"] = [{"operation": "CreateQuantumTask", "fail_task": "QPU calibration lost"}]
    make_emulator(scenario)
    task = AwsDevice(QPU_ARN).run(
        ProgramSet([BELL, ONE], shots_per_executable=10), poll_interval_seconds=0.01
    )
    manual_clock.advance(60)
    assert task.state() == "FAILED"
    result = task.result()  # Braket keeps a FAILED program set's result
    failures = [entry[0] for entry in result.entries]
    assert all(isinstance(f, ProgramSetExecutableFailure) for f in failures)
    assert failures[0].failureMetadata.failureReason == "QPU calibration lost"
    assert result.task_metadata.totalFailedExecutables == 2
    assert "numSuccessfulShots" not in task.metadata()


# --- our vendor layer --------------------------------------------------------------------


def test_submit_set_splits_results_per_program_with_their_own_shots(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    programs = [(BELL, 100), (ONES, 300), (ONE, 200), (BELL, 100)]
    task = vendor.submit_set(LINE5, programs, token="merge-1")
    assert (task.vendor, task.device, task.token) == ("braket", "line5", "merge-1")
    assert vendor.poll(task).state is TaskState.RUNNING
    manual_clock.advance(SERVICE_TIME + 700 * SHOT_TIME)
    assert vendor.poll(task).state is TaskState.COMPLETED
    results = vendor.results(task)
    assert [sum(r.counts.values()) for r in results] == [100, 300, 200, 100]
    assert set(results[0].counts) <= {"00", "11"} and set(results[3].counts) <= {"00", "11"}
    assert results[1].counts == {"111": 300}
    assert results[2].counts == {"1": 200}
    assert [r.raw["taskMetadata"]["shots"] for r in results] == [100, 300, 200, 100]
    assert all(r.task == task and r.raw["taskMetadata"]["id"] == task.task_id for r in results)
    # Braket runs one shot count per executable: 100 each, 300 as three, 200 as two.
    assert [r.raw["programSet"]["executables"] for r in results] == [1, 3, 2, 1]
    assert results[0].raw["programSet"]["shotsPerExecutable"] == 100
    described = boto_braket(emu).get_quantum_task(quantumTaskArn=task.task_id)
    assert described["shots"] == 700
    assert described["actionMetadata"]["executableCount"] == 7
    assert described["tags"][LAYOUT_TAG] == "1.3.2.1"
    with pytest.raises(errors.InvalidRequest, match="results"):
        vendor.result(task)  # a program set is read per program
    assert vendor.billed_seconds(task) is None  # per task and shot


def test_the_local_vendor_runs_program_sets_too(emu, manual_clock):
    vendor = local_vendor(manual_clock, emu)
    task = vendor.submit_set(LINE5_LOCAL, [(ONE, 50), (ONES, 50)], token="local-1")
    assert task.vendor == "local"
    manual_clock.advance(60)
    assert [dict(r.counts) for r in vendor.results(task)] == [{"1": 50}, {"111": 50}]
    described = boto_braket(emu).get_quantum_task(quantumTaskArn=task.task_id)
    assert LAYOUT_TAG not in described["tags"]  # equal shots: one executable each


def test_results_of_a_single_program_task_is_its_result(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    task = vendor.submit(LINE5, ONES, 30, token="single-1")
    manual_clock.advance(60)
    (only,) = vendor.results(task)
    assert only.counts == vendor.result(task).counts == {"111": 30}


def test_a_relayed_vendor_sends_a_set_of_its_own_to_its_own_vendor(emu, manual_clock):
    own = braket_vendor(manual_clock)
    relayed = RelayedVendor(None, 7, "braket", tasks=("arn:released",), own=lambda: own)
    task = relayed.submit_set(LINE5, [(ONE, 20), (ONES, 20)], token="relayed-1")
    manual_clock.advance(60)
    assert [dict(r.counts) for r in relayed.results(task)] == [{"1": 20}, {"111": 20}]


def test_submit_set_is_idempotent_by_token(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    programs = [(BELL, 50), (ONE, 150)]
    first = vendor.submit_set(LINE5, programs, token="again")
    second = vendor.submit_set(LINE5, programs, token="again")
    assert first == second
    assert emu.task_arns() == [first.task_id]
    assert emu.call_count("CreateQuantumTask") == 2
    with pytest.raises(errors.Conflict):  # the same token for other programs
        vendor.submit_set(LINE5, [(BELL, 50)], token="again")
    assert emu.task_arns() == [first.task_id]


def test_a_program_set_is_one_task_on_the_bill_one_fee_and_every_shot(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    merged = vendor.submit_set(LINE5, [(BELL, 100)] * 10, token="bill-set")
    manual_clock.advance(SERVICE_TIME + 1000 * SHOT_TIME)
    assert vendor.poll(merged).state is TaskState.COMPLETED
    row = row_of(emu, merged.task_id)
    assert (row["state"], row["shots"], row["programs"], row["executables"]) == (
        "COMPLETED",
        1000,
        10,
        10,
    )
    assert row["cost"] == pytest.approx(TASK_PRICE + SHOT_PRICE * 1000)
    assert row["cost"] == pytest.approx(LINE5.price.cost(1000))
    # One task served for all its shots: 10 s, plus 10 ms for each of the 1000.
    assert (row["started"], row["ended"]) == (0.0, SERVICE_TIME + 1000 * SHOT_TIME)
    # The same programs as ten tasks pay ten fees for the same shots.
    single = [vendor.submit(LINE5, BELL, 100, token=f"bill-{i}") for i in range(10)]
    manual_clock.advance(10 * (SERVICE_TIME + 100 * SHOT_TIME))
    singles = [row_of(emu, t.task_id) for t in single]
    assert all(r["state"] == "COMPLETED" and "programs" not in r for r in singles)
    assert sum(r["cost"] for r in singles) == pytest.approx(10 * TASK_PRICE + SHOT_PRICE * 1000)
    assert emu.report()["bill"]["total"] == pytest.approx(11 * TASK_PRICE + 2 * SHOT_PRICE * 1000)


def test_a_failed_program_set_has_no_results(make_emulator, manual_clock):
    scenario = line5()
    scenario["faults"] = [{"operation": "CreateQuantumTask", "fail_task": "device error"}]
    make_emulator(scenario)
    vendor = braket_vendor(manual_clock)
    task = vendor.submit_set(LINE5, [(ONE, 10), (BELL, 10)], token="fails")
    manual_clock.advance(60)
    snapshot = vendor.poll(task)
    assert snapshot.state is TaskState.FAILED and snapshot.message == "device error"
    with pytest.raises(errors.InvalidRequest, match="FAILED: device error"):
        vendor.results(task)


# --- limits and errors ---------------------------------------------------------------


def test_too_many_executables_is_refused(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    with pytest.raises(errors.InvalidRequest, match="101 executables; Line-5 runs at most 100"):
        vendor.submit_set(LINE5, [(ONE, 10)] * 101, token="too-many")
    # Unequal shots count as the executables they become: 1 + 100 here.
    with pytest.raises(errors.InvalidRequest, match="101 executables"):
        vendor.submit_set(LINE5, [(ONE, 1), (ONE, 100)], token="too-many-2")
    assert emu.task_arns() == []


def test_total_shots_over_the_device_maximum_is_refused(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    with pytest.raises(errors.InvalidRequest, match="2100 total shots exceed Line-5's maximum"):
        vendor.submit_set(LINE5, [(ONE, 700)] * 3, token="too-long")
    vendor.submit_set(LINE5, [(ONE, 500)] * 4, token="just-fits")  # 2000: the maximum
    assert len(emu.task_arns()) == 1


def test_a_device_without_program_sets_refuses_one(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    with pytest.raises(errors.InvalidRequest, match="does not support action type") as caught:
        vendor.submit_set(CATALOG.get("sv1"), [(ONE, 10)], token="on-sv1")
    assert caught.value.vendor_code == "ValidationException"


def test_a_program_that_cannot_run_is_named(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    with pytest.raises(errors.InvalidRequest, match="program 1") as caught:
        vendor.submit_set(LINE5, [(ONE, 10), (TOO_WIDE, 10)], token="too-wide")
    assert "7 qubits but the device has 5" in str(caught.value)
    response = create_raw(emu, [ONE, ONE, "OPENQASM 3.0; qubit[1] q; nonsense q[0];"], 30)
    assert response["Error"]["Code"] == "ValidationException"
    assert response["reason"] == "ProgramSetValidationFailed"
    (failure,) = response["programSetValidationFailures"]
    assert failure["programIndex"] == 2 and "does not parse" in failure["errors"][0]
    assert emu.task_arns() == []


def test_what_the_sdk_models_refuse_the_service_refuses_too(emu):
    empty = create_raw(emu, [], 10)
    assert empty["Error"]["Message"] == "A program set must contain at least one program"
    uneven = create_raw(emu, [ONE, ONE, ONE], 100)  # 3 executables do not share 100 shots
    assert "must be a multiple of the program set's 3 executables" in uneven["Error"]["Message"]
    zero = create_raw(emu, [ONE], 0)
    assert "greater than 0" in zero["Error"]["Message"]
    ragged = create_raw(emu, [{"source": ONE, "inputs": {"a": [1, 2], "b": [1]}}], 10)
    assert ragged["programSetValidationFailures"] == [
        {
            "programIndex": 0,
            "errors": ["all program inputs must have the same length in a program set"],
        }
    ]
    on_sv1 = create_raw(emu, [ONE], 10, device=SV1_ARN)
    assert (
        "does not support action type braket.ir.openqasm.program_set"
        in (on_sv1["Error"]["Message"])
    )
    assert emu.task_arns() == []


def test_our_vendor_refuses_bad_programs_before_sending(emu, manual_clock):
    vendor = braket_vendor(manual_clock)
    with pytest.raises(errors.InvalidRequest, match="programs is empty"):
        vendor.submit_set(LINE5, [], token="none")
    with pytest.raises(errors.InvalidRequest, match=r"programs\[1\] shots must be an integer"):
        vendor.submit_set(LINE5, [(ONE, 10), (ONE, 0)], token="zero")
    with pytest.raises(errors.InvalidRequest, match=r"programs\[0\] must be"):
        vendor.submit_set(LINE5, [("", 10)], token="blank")
    assert emu.call_count("CreateQuantumTask") == 0


# --- scenario and pure helpers ---------------------------------------------------------


def test_scenario_program_sets_field():
    default = Scenario.default()
    qpus = [d for d in default.devices if d.type == "QPU"]
    assert qpus and all(d.program_sets is not None for d in qpus)
    forte = next(d for d in qpus if d.name == "Forte 1")
    assert (forte.program_sets.max_executables, forte.program_sets.max_total_shots) == (100, 10000)
    assert all(d.program_sets is None for d in default.devices if d.type == "SIMULATOR")
    sv1_on = Scenario.from_dict(
        {"extends": "default", "devices": [{"name": "SV1", "program_sets": True}]}
    )
    assert sv1_on.device(SV1_ARN).program_sets.max_total_shots == 100_000
    tests = Scenario.from_dict(line5())
    assert tests.device(QPU_ARN).program_sets.max_total_shots == 2000
    with pytest.raises(ScenarioError, match="'program_sets.max_programs' is unknown"):
        Scenario.from_dict(
            {
                "extends": "default",
                "devices": [{"name": "Garnet", "program_sets": {"max_programs": 5}}],
            }
        )
    with pytest.raises(ScenarioError, match="expected true, false or a mapping"):
        Scenario.from_dict(
            {"extends": "default", "devices": [{"name": "Garnet", "program_sets": 3}]}
        )


@pytest.mark.parametrize(
    ("shots", "layout"),
    [
        ([100], (100, (1,))),
        ([100, 100, 100], (100, (1, 1, 1))),
        ([100, 300, 200], (100, (1, 3, 2))),
        ([100, 150], (50, (2, 3))),
        ([7, 5], (1, (7, 5))),
    ],
)
def test_program_set_layout(shots, layout):
    per, executables = program_set_layout(shots)
    assert (per, executables) == layout
    assert [per * n for n in executables] == shots


def test_program_set_layout_refuses_nothing_and_zero():
    with pytest.raises(ValueError):
        program_set_layout([])
    with pytest.raises(ValueError):
        program_set_layout([10, 0])


def test_layout_tag_round_trips_and_rejects_garbage():
    assert decode_layout(encode_layout((1, 3, 2))) == (1, 3, 2)
    assert len(encode_layout((1,) * 100)) <= 256  # Braket's tag value limit
    for bad in (None, "", "1..2", "0.1", "a", "1,2", 3):
        assert decode_layout(bad) is None
