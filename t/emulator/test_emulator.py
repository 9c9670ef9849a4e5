"""The vendor emulator, driven through the unmodified amazon-braket-sdk and boto3.

Every test talks HTTP to a live emulator on 127.0.0.1 whose time is a ManualClock the test
steps, so queue positions, completions and offline periods are exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError

# One import per module: `import braket.aws` costs about two seconds.
from braket.aws import AwsDevice, AwsQuantumTask
from braket.aws.queue_information import QueueType
from braket.circuits import Circuit
from braket.ir.openqasm import Program

from flux_quantum.emulator import Emulator, ManualClock, Scenario, ScenarioError
from flux_quantum.emulator.queue import Dedication, DeviceQueue, TaskTimeline

# Fixtures: emulator, make_emulator, manual_clock (see t/emulator_fixtures.py).
pytest_plugins = ["emulator_fixtures"]


MakeEmulator = Callable[..., Emulator]

SV1 = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
DM1 = "arn:aws:braket:::device/quantum-simulator/amazon/dm1"
FORTE = "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"
GARNET = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
ANKAA = "arn:aws:braket:us-west-1::device/qpu/rigetti/Ankaa-3"
BUSY = "arn:aws:braket:::device/quantum-simulator/local/busy"
MAINTENANCE = "arn:aws:braket:::device/quantum-simulator/local/maintenance"
QPU = "arn:aws:braket:us-east-1::device/qpu/emulator/Test-1"
REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "etc" / "flux-quantum" / "scenarios"

GHZ3 = """OPENQASM 3.0;
bit[3] b;
qubit[3] q;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
b = measure q;
"""


def bell() -> Circuit:
    return Circuit().h(0).cnot(0, 1)


def qpu_scenario(**queue: float) -> dict:
    """One QPU-shaped device with a fixed-time queue (no arrivals unless given)."""
    return {
        "devices": [
            {
                "arn": QPU,
                "name": "Test-1",
                "qubits": 10,
                "cost": {"price": 0.01, "unit": "shot"},
                "queue": {"service_time": 10.0, **queue},
            }
        ]
    }


def client(region: str = "us-east-1", **config: float):
    return boto3.client("braket", region_name=region, config=Config(**config) if config else None)


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


# -- devices -------------------------------------------------------------------------------------


def test_devices_and_queue_depth_through_sdk(emulator: Emulator) -> None:
    sv1 = AwsDevice(SV1)
    assert (sv1.name, sv1.provider_name, sv1.type.value) == ("SV1", "Amazon Braket", "SIMULATOR")
    assert sv1.status == "ONLINE" and sv1.is_available
    assert sv1.properties.paradigm.qubitCount == 34
    assert sv1.properties.service.deviceCost.price == 0.075
    assert sv1.properties.service.deviceCost.unit == "minute"

    # A regional ARN: the SDK copies its session into eu-north-1 and still reaches us.
    garnet = AwsDevice(GARNET)
    assert garnet.aws_session.region == "eu-north-1"
    assert garnet.properties.paradigm.qubitCount == 20
    assert garnet.properties.service.deviceCost.unit == "shot"
    depth = garnet.queue_depth()
    assert depth.quantum_tasks[QueueType.NORMAL] == "8"
    assert depth.jobs == "0"
    assert emulator.call_count("GetDevice", GARNET) >= 2

    raw = client().get_device(deviceArn=FORTE)
    capabilities = json.loads(raw["deviceCapabilities"])
    assert capabilities["service"]["deviceCost"] == {"price": 0.08, "unit": "shot"}
    assert capabilities["service"]["executionWindows"][0]["executionDay"] == "Everyday"
    assert [q["queue"] for q in raw["deviceQueueInfo"]] == [
        "QUANTUM_TASKS_QUEUE",
        "QUANTUM_TASKS_QUEUE",
        "JOBS_QUEUE",
    ]
    assert raw["deviceQueueInfo"][0]["queueSize"] == "40"


def test_regional_endpoints_know_only_their_devices(emulator: Emulator) -> None:
    with pytest.raises(ClientError) as excinfo:
        client("us-east-1").get_device(deviceArn=GARNET)
    assert error_of(excinfo) == ("ResourceNotFoundException", 404)
    assert client("eu-north-1").get_device(deviceArn=GARNET)["deviceName"] == "Garnet"
    with pytest.raises(ClientError) as excinfo:
        client().get_device(deviceArn="arn:aws:braket:::device/quantum-simulator/amazon/nope")
    assert error_of(excinfo) == ("ResourceNotFoundException", 404)


def test_search_devices(emulator: Emulator) -> None:
    found = client().search_devices(filters=[{"name": "deviceArn", "values": [SV1, FORTE]}])
    assert sorted(d["deviceArn"] for d in found["devices"]) == sorted([SV1, FORTE])
    pages = (
        client()
        .get_paginator("search_devices")
        .paginate(filters=[], PaginationConfig={"PageSize": 2})
    )
    us_east = [d["deviceArn"] for page in pages for d in page["devices"]]
    assert FORTE in us_east and GARNET not in us_east and SV1 in us_east

    emulator.clear_calls()
    arns = {device.arn for device in AwsDevice.get_devices()}
    assert {SV1, DM1, FORTE, GARNET, ANKAA, BUSY} <= arns
    assert emulator.call_count("SearchDevices") == len(AwsDevice.REGIONS)


# -- tasks ---------------------------------------------------------------------------------------


def test_task_lifecycle_position_counts_down_to_running(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(qpu_scenario(depth=2))
    device = AwsDevice(QPU)
    task = device.run(bell(), shots=200)
    # One task running since t=0, two waiting ahead of ours.
    assert task.state() == "QUEUED"
    assert task.queue_position().queue_position == "3"
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == "3"
    positions = []
    for _ in range(3):
        manual_clock.advance(10)
        positions.append(task.queue_position().queue_position)
    assert positions == ["2", "1", None]
    assert task.state() == "RUNNING"
    info = task.queue_position()
    assert info.queue_position is None and "RUNNING" in info.message
    raw = client().get_quantum_task(quantumTaskArn=task.id, additionalAttributeNames=["QueueInfo"])
    assert raw["queueInfo"]["position"] == "None"
    assert raw["actionMetadata"]["actionType"] == "braket.ir.openqasm.program"

    manual_clock.advance(10)
    assert task.state() == "COMPLETED"
    result = task.result()
    assert set(result.measurement_counts) <= {"00", "11"}
    assert sum(result.measurement_counts.values()) == 200
    assert result.task_metadata.id == task.id
    assert emu.call_count("GetObject") == 1
    # Re-attach by ARN, as a restarted service would.
    again = AwsQuantumTask(task.id)
    assert again.state() == "COMPLETED"
    assert set(again.result().measurement_counts) <= {"00", "11"}


def test_openqasm_program_on_simulators(emulator: Emulator, manual_clock: ManualClock) -> None:
    sv1_task = AwsDevice(SV1).run(Program(source=GHZ3), shots=100)
    noisy = GHZ3.replace("b = measure", "#pragma braket noise bit_flip(0.0) q[0]\nb = measure")
    dm1_task = AwsDevice(DM1).run(Program(source=noisy), shots=100)
    assert sv1_task.state() == "RUNNING"  # an idle simulator starts at once
    manual_clock.advance(2)
    for task in (sv1_task, dm1_task):
        counts = task.result().measurement_counts
        assert set(counts) <= {"000", "111"} and sum(counts.values()) == 100

    # The results are plain S3 objects under the task's outputS3Directory.
    meta = sv1_task.metadata()
    s3 = boto3.client("s3")
    listed = s3.list_objects_v2(Bucket=meta["outputS3Bucket"], Prefix=meta["outputS3Directory"])
    assert [o["Key"] for o in listed["Contents"]] == [meta["outputS3Directory"] + "/results.json"]


def test_results_appear_only_when_completed(emulator: Emulator, manual_clock: ManualClock) -> None:
    task = AwsDevice(SV1).run(bell(), shots=10)
    meta = task.metadata()
    key = meta["outputS3Directory"] + "/results.json"
    s3 = boto3.client("s3")
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=meta["outputS3Bucket"], Key=key)
    assert error_of(excinfo) == ("NoSuchKey", 404)
    manual_clock.advance(1)
    assert s3.head_object(Bucket=meta["outputS3Bucket"], Key=key)["ContentLength"] > 0


def test_invalid_programs_are_validation_errors(emulator: Emulator) -> None:
    with pytest.raises(ClientError) as excinfo:
        AwsDevice(SV1).run(Program(source="OPENQASM 3.0; qubit[2] q; frobnicate q[0];"), shots=10)
    assert error_of(excinfo) == ("ValidationException", 400)
    with pytest.raises(ClientError) as excinfo:
        AwsDevice(FORTE).run(Program(source=GHZ3), shots=0)  # QPUs need shots >= 1
    assert error_of(excinfo)[0] == "ValidationException"
    assert emulator.task_arns() == []


def test_cancel(make_emulator: MakeEmulator, manual_clock: ManualClock) -> None:
    make_emulator(qpu_scenario(depth=5))
    device = AwsDevice(QPU)
    first, second = device.run(bell(), shots=10), device.run(bell(), shots=10)
    assert second.queue_position().queue_position == "7"
    first.cancel()
    assert first.state() == "CANCELLED"
    assert first.queue_position().queue_position is None
    assert second.queue_position().queue_position == "6"
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == "6"

    manual_clock.advance(80)  # 1 running + 5 waiting + ours: ours ran from t=60 to t=70
    assert second.state() == "COMPLETED"
    with pytest.raises(ClientError) as excinfo:
        second.cancel()
    assert error_of(excinfo) == ("ConflictException", 409)


def test_create_is_idempotent_on_client_token(emulator: Emulator) -> None:
    braket = client()
    request = {
        "clientToken": "token-1",
        "deviceArn": SV1,
        "shots": 10,
        "action": Program(source=GHZ3).json(),
        "outputS3Bucket": emulator.bucket,
        "outputS3KeyPrefix": "tasks",
    }
    first = braket.create_quantum_task(**request)["quantumTaskArn"]
    second = braket.create_quantum_task(**request)["quantumTaskArn"]
    assert first == second
    assert emulator.task_arns() == [first]
    creates = [c for c in emulator.calls if c.operation == "CreateQuantumTask"]
    assert [(c.status, c.task) for c in creates] == [(201, first), (201, first)]
    found = braket.search_quantum_tasks(filters=[])["quantumTasks"]
    assert [t["quantumTaskArn"] for t in found] == [first]

    with pytest.raises(ClientError) as excinfo:
        braket.create_quantum_task(**{**request, "shots": 20})
    assert error_of(excinfo) == ("ConflictException", 409)


def test_search_quantum_tasks(emulator: Emulator, manual_clock: ManualClock) -> None:
    done = AwsDevice(SV1).run(bell(), shots=10)
    manual_clock.advance(5)
    waiting = AwsDevice(FORTE).run(bell(), shots=10)
    braket = client()

    def search(*filters: dict) -> list[str]:
        pages = braket.get_paginator("search_quantum_tasks").paginate(
            filters=list(filters), PaginationConfig={"PageSize": 1}
        )
        return [t["quantumTaskArn"] for page in pages for t in page["quantumTasks"]]

    assert search() == [done.id, waiting.id]
    assert search({"name": "status", "operator": "EQUAL", "values": ["QUEUED"]}) == [waiting.id]
    assert search({"name": "deviceArn", "operator": "EQUAL", "values": [SV1]}) == [done.id]
    created = done.metadata()["createdAt"].isoformat()
    assert search({"name": "createdAt", "operator": "GT", "values": [created]}) == [waiting.id]
    # Tasks live in the region that created them.
    assert client("eu-north-1").search_quantum_tasks(filters=[])["quantumTasks"] == []


# -- queues, caps, availability --------------------------------------------------------------------


def test_capped_positions_and_queue_size(emulator: Emulator, manual_clock: ManualClock) -> None:
    device = AwsDevice(BUSY)
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == ">4000"
    task = device.run(bell(), shots=10)
    assert task.queue_position().queue_position == ">2000"
    # 4500 waiting ahead at t=0 and one served per second; arrivals queue behind us.
    manual_clock.advance(2600)
    assert task.queue_position().queue_position == str(4501 - 2600)
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == ">4000"


def test_offline_devices(make_emulator: MakeEmulator, manual_clock: ManualClock) -> None:
    scenario = qpu_scenario(depth=1)
    scenario["devices"][0]["offline"] = [{"start": 15, "end": 100, "reason": "MAINTENANCE"}]
    scenario["devices"].append(
        {
            "arn": MAINTENANCE,
            "name": "maintenance",
            "status": "OFFLINE",
            "status_reason": "MAINTENANCE",
        }
    )
    make_emulator(scenario)
    down = AwsDevice(MAINTENANCE)
    assert down.status == "OFFLINE" and not down.is_available
    reason = client().get_device(deviceArn=MAINTENANCE)["deviceStatusReason"]
    assert reason["reason"] == "MAINTENANCE"
    with pytest.raises(ClientError) as excinfo:
        down.run(bell(), shots=10)
    assert error_of(excinfo) == ("DeviceOfflineException", 424)

    task = AwsDevice(QPU).run(bell(), shots=10)  # t=0: one running, one waiting, ours
    manual_clock.advance(20)  # t=20: the waiting one started at 10; offline since 15
    raw = client().get_device(deviceArn=QPU)
    assert raw["deviceStatus"] == "OFFLINE"
    assert raw["deviceStatusReason"]["reason"] == "MAINTENANCE"
    assert raw["deviceStatusReason"]["estimatedEndAt"] > raw["deviceStatusReason"]["startedAt"]
    with pytest.raises(ClientError) as excinfo:
        AwsDevice(QPU).run(bell(), shots=10)
    assert error_of(excinfo) == ("DeviceOfflineException", 424)
    manual_clock.advance(70)  # t=90: still offline, ours has not started
    assert task.queue_position().queue_position == "1"
    manual_clock.advance(10)  # t=100: back online, ours starts
    assert task.state() == "RUNNING"
    assert AwsDevice(QPU).status == "ONLINE"


def test_outside_availability_window_queues_tasks(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    scenario = qpu_scenario()
    scenario["devices"][0]["availability"] = {"period": 100, "windows": [[50, 100]]}
    make_emulator(scenario)
    raw = client().get_device(deviceArn=QPU)
    assert raw["deviceStatus"] == "OFFLINE"
    assert raw["deviceStatusReason"]["reason"] == "OUTSIDE_AVAILABILITY_WINDOW"
    task = AwsDevice(QPU).run(bell(), shots=10)  # accepted, waits for the window
    assert task.state() == "QUEUED"
    manual_clock.advance(50)
    assert task.state() == "RUNNING"
    manual_clock.advance(10)
    assert task.state() == "COMPLETED"


def test_queues_are_deterministic_for_a_seed() -> None:
    spec = Scenario.default().device(FORTE)
    assert spec is not None

    def sizes(seed: int) -> list[int]:
        queue = DeviceQueue(spec, seed)
        return [queue.queue_size(t) for t in range(0, 20_000, 500)]

    assert sizes(7) == sizes(7)
    assert sizes(7) != sizes(8)
    assert sizes(7)[0] == 40 and min(sizes(7)) < 40  # it drains


def test_task_timeline_marks_front_start_and_end() -> None:
    """The truth benchmarks measure release lags against: two fixed 10 s tasks ahead
    (one running, one waiting), ours becomes next to run when the running one ends."""
    spec = Scenario.from_dict(
        {"devices": [{"arn": "arn:aws:braket:::device/qpu/emulator/T", "name": "T",
                      "queue": {"depth": 1, "service_time": 10.0, "distribution": "fixed"}}]}
    ).devices[0]  # fmt: skip
    queue = DeviceQueue(spec, 0)
    queue.submit("ours", 2.0, shots=0)
    assert queue.timeline("ours", 5.0) == TaskTimeline(2.0, None, None, None)
    assert queue.timeline("ours", 10.0).front == 10.0
    line = queue.timeline("ours", 40.0)
    assert (line.front, line.started, line.ended) == (10.0, 20.0, 30.0)


def test_a_forecast_is_what_the_queue_then_does_and_leaves_it_where_it_was() -> None:
    spec = Scenario.default().device(FORTE)  # arrivals and random service times
    assert spec is not None
    queue = DeviceQueue(spec, 3)
    queue.submit("ours", 100.0, shots=100)
    forecast = queue.forecast("ours", 150.0)
    assert forecast.ended is not None and forecast.started is not None
    assert queue.timeline("ours", 150.0).started is None  # not played forward
    assert queue.timeline("ours", forecast.ended + 1.0) == forecast


def _fixed_queue(depth: int) -> DeviceQueue:
    """A device busy with one fixed 10 s task and ``depth`` more waiting, no arrivals."""
    spec = Scenario.from_dict(
        {"devices": [{"arn": "arn:aws:braket:::device/qpu/emulator/T", "name": "T",
                      "queue": {"depth": depth, "service_time": 10.0, "distribution": "fixed"}}]}
    ).devices[0]  # fmt: skip
    return DeviceQueue(spec, 0)


def ran(queue: DeviceQueue, task: str, t: float) -> tuple[float | None, float | None]:
    """When TASK started and ended, as seen at T."""
    line = queue.timeline(task, t)
    return line.started, line.ended


def test_a_dedication_holds_the_device_from_its_first_start_until_idle_for_its_timeout() -> None:
    """IBM's dedicated session: the first task waits its turn; then the device runs only
    the dedication's tasks, a later one at once, until none waited or ran for the idle
    timeout; one after that waits its turn again and takes the device back."""
    queue, session = _fixed_queue(3), Dedication("s", idle_timeout=60.0, max_time=10_000.0)
    queue.submit("a", 1.0, shots=0, dedication=session)
    queue.submit("other", 2.0, shots=0)  # anyone else's task, behind ours
    assert ran(queue, "a", 55.0) == (40.0, 50.0)  # behind the 4 ahead
    assert queue.held_by(55.0) == "s" and queue.timeline("other", 60.0).started is None
    queue.submit("b", 70.0, shots=0, dedication=session)  # within the idle timeout
    assert ran(queue, "b", 100.0) == (70.0, 80.0)  # ahead of "other"
    assert queue.held_by(139.0) == "s" and queue.timeline("other", 139.0).started is None
    assert ran(queue, "other", 141.0) == (140.0, None)  # 60 s idle: given back
    assert queue.held_by(141.0) is None
    queue.submit("c", 145.0, shots=0, dedication=session)
    assert queue.held_by(149.0) is None and queue.timeline("c", 149.0).started is None
    assert ran(queue, "c", 200.0) == (150.0, 160.0)  # its turn, after "other"
    assert queue.held_by(200.0) == "s"


def test_a_dedication_gives_the_device_back_at_its_max_time_or_release() -> None:
    queue = _fixed_queue(3)
    queue.submit("a", 1.0, shots=0, dedication=Dedication("s", 60.0, max_time=25.0))
    queue.submit("other", 2.0, shots=0)
    assert ran(queue, "other", 100.0) == (65.0, 75.0)  # 25 s after a's start
    released = _fixed_queue(3)
    released.submit("a", 1.0, shots=0, dedication=Dedication("s", 60.0))
    released.submit("other", 2.0, shots=0)
    released.release("s", 55.0)  # the session was closed
    assert released.held_by(55.0) is None
    assert ran(released, "other", 100.0) == (55.0, 65.0)


# -- faults ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "code", "status"),
    [
        ("GetDevice", "ThrottlingException", 429),
        ("GetQuantumTask", "InternalServiceException", 500),
        ("CreateQuantumTask", "DeviceOfflineException", 424),
        ("SearchDevices", "AccessDeniedException", 403),
        ("CreateQuantumTask", "ServiceQuotaExceededException", 402),
    ],
)
def test_fault_codes_surface_as_client_errors(
    make_emulator: MakeEmulator, operation, code, status
) -> None:
    emu = make_emulator(
        {"extends": "default", "faults": [{"operation": operation, "error": code, "first": 1}]}
    )
    braket = client()
    arn = (
        braket.create_quantum_task(
            clientToken="setup",
            deviceArn=SV1,
            shots=10,
            action=Program(source=GHZ3).json(),
            outputS3Bucket=emu.bucket,
            outputS3KeyPrefix="tasks",
        )["quantumTaskArn"]
        if operation != "CreateQuantumTask"
        else None
    )
    calls = {
        "GetDevice": lambda: braket.get_device(deviceArn=SV1),
        "GetQuantumTask": lambda: braket.get_quantum_task(quantumTaskArn=arn),
        "CreateQuantumTask": lambda: AwsDevice(SV1).run(bell(), shots=10),
        "SearchDevices": lambda: braket.search_devices(filters=[]),
    }
    emu.clear_calls()
    with pytest.raises(ClientError) as excinfo:
        calls[operation]()
    assert error_of(excinfo) == (code, status)
    assert emu.call_count(operation) == 1  # AWS_MAX_ATTEMPTS=1: no hidden retry
    calls[operation]()  # `first: 1` only hit the first call
    assert [c.error for c in emu.calls if c.operation == operation] == [code, None]


def test_throttling_every_nth_and_retries(make_emulator: MakeEmulator) -> None:
    emu = make_emulator(
        {
            "extends": "default",
            "faults": [{"operation": "GetDevice", "error": "ThrottlingException", "every": 2}],
        }
    )
    braket = client()
    outcomes = []
    for _ in range(4):
        try:
            braket.get_device(deviceArn=SV1)
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
    assert outcomes == ["ok", "ThrottlingException", "ok", "ThrottlingException"]
    # With retries on, botocore rides over one throttle.
    emu.clear_calls()
    client(retries={"max_attempts": 3, "mode": "standard"}).get_device(deviceArn=SV1)
    assert [c.status for c in emu.calls] == [200]  # call 5 is odd: no throttle
    client(retries={"max_attempts": 3, "mode": "standard"}).get_device(deviceArn=SV1)
    assert [c.status for c in emu.calls] == [200, 429, 200]


def test_fault_rate_is_seeded(make_emulator: MakeEmulator) -> None:
    scenario = {
        "extends": "default",
        "faults": [{"operation": "GetDevice", "rate": 0.5, "error": "InternalServiceException"}],
    }

    def pattern(seed: int) -> list[int]:
        emu = make_emulator(scenario, seed=seed)
        braket = client()
        for _ in range(16):
            with contextlib.suppress(ClientError):
                braket.get_device(deviceArn=SV1)
        return [c.status for c in emu.calls]

    first, again = pattern(3), pattern(3)
    assert first == again
    assert set(first) == {200, 500}


def test_task_that_fails(make_emulator: MakeEmulator, manual_clock: ManualClock) -> None:
    reason = "Device calibration drifted; task aborted"
    make_emulator(
        {
            "extends": "default",
            "devices": [{"arn": SV1, "faults": [{"fail_task": reason, "first": 1}]}],
        }
    )
    device = AwsDevice(SV1)
    failing, fine = device.run(bell(), shots=10), device.run(bell(), shots=10)
    manual_clock.advance(5)
    assert failing.state() == "FAILED"
    assert failing.metadata()["failureReason"] == reason
    assert failing.result() is None
    assert fine.state() == "COMPLETED"


def test_slow_responses(make_emulator: MakeEmulator) -> None:
    emu = make_emulator(
        {"extends": "default", "faults": [{"operation": "GetDevice", "delay": 0.6, "first": 2}]}
    )
    with pytest.raises(ReadTimeoutError):
        client(read_timeout=0.2).get_device(deviceArn=SV1)
    start = time.monotonic()
    assert client().get_device(deviceArn=SV1)["deviceName"] == "SV1"
    assert time.monotonic() - start >= 0.5
    start = time.monotonic()
    client().get_device(deviceArn=SV1)
    assert time.monotonic() - start < 0.5
    assert emu.call_count("GetDevice") == 3


@pytest.mark.emulator
def test_stop_interrupts_slow_responses_and_joins_threads(manual_clock: ManualClock) -> None:
    scenario = Scenario.from_dict(
        {"extends": "default", "faults": [{"operation": "GetDevice", "delay": 30}]}
    )
    emu = Emulator(scenario, clock=manual_clock).start()
    braket = boto3.client(
        "braket",
        region_name="us-east-1",
        endpoint_url=emu.url,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"max_attempts": 1}, read_timeout=60),
    )
    errors: list[Exception] = []

    def slow_call() -> None:
        try:
            braket.get_device(deviceArn=SV1)
        except Exception as exc:
            errors.append(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    time.sleep(0.3)
    start = time.monotonic()
    emu.stop()
    caller.join(10)
    assert time.monotonic() - start < 5
    assert not caller.is_alive()
    assert not [t for t in threading.enumerate() if t.name.startswith("emulator-")]


# -- S3 ----------------------------------------------------------------------------------------------


def test_minimal_s3(emulator: Emulator) -> None:
    s3 = boto3.client("s3")
    s3.put_object(Bucket=emulator.bucket, Key="in/a b.json", Body=b'{"x": 1}')
    s3.put_object(Bucket=emulator.bucket, Key="in/sub/c.json", Body=b"{}")
    assert s3.get_object(Bucket=emulator.bucket, Key="in/a b.json")["Body"].read() == b'{"x": 1}'
    listed = s3.list_objects_v2(Bucket=emulator.bucket, Prefix="in/", Delimiter="/")
    assert [o["Key"] for o in listed["Contents"]] == ["in/a b.json"]
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["in/sub/"]
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=emulator.bucket, Key="in/missing")
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket="no-such-bucket", Key="k")
    assert error_of(excinfo) == ("NoSuchBucket", 404)
    assert emulator.call_count("PutObject") == 2


# -- scenarios -----------------------------------------------------------------------------------------


def test_scenario_files() -> None:
    default = Scenario.from_yaml(SCENARIOS / "default.yaml")
    assert default.devices == Scenario.default().devices
    arns = [d.arn for d in default.devices]
    assert {SV1, DM1, FORTE, GARNET, ANKAA, BUSY, MAINTENANCE} <= set(arns)
    for name in ("busy.yaml", "faults.yaml"):
        assert Scenario.from_yaml(SCENARIOS / name).devices


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "devices: [{arn: 'arn:aws:braket:::device/quantum-simulator/amazon/sv1',"
            " name: SV1, queue: {service_time: fast}}]",
            ["device 'SV1'", "'queue.service_time'", "'fast'"],
        ),
        (
            "extends: default\ndevices: [{name: Garnet, offline: [{start: 9, end: 3}]}]",
            ["device 'Garnet'", "'offline[0].end'"],
        ),
        (
            "extends: default\ndevices: [{name: SV1, faults: [{error: Boom}]}]",
            ["device 'SV1'", "'faults[0].error'", "ThrottlingException"],
        ),
        ("devices: [{name: x}]", ["device 'x'", "'arn'", "required"]),
        (
            "extends: default\ndevices: [{name: SV1, colour: red}]",
            ["device 'SV1'", "'colour'", "unknown"],
        ),
    ],
)
def test_bad_scenarios_name_file_device_and_field(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as excinfo:
        Scenario.from_yaml(path)
    message = str(excinfo.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_emulator_refuses_non_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        Emulator(host="0.0.0.0")


# -- CLI -------------------------------------------------------------------------------------------------


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BRAKET_", "AMZN_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "flux_quantum.cli.emulator", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


@pytest.mark.emulator
def test_cli_serves_until_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / "emulator.env"
    proc = _cli("--port", "0", "--env-file", str(env_file), "--seed", "3", "-v")
    try:
        deadline = time.monotonic() + 20
        while not env_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env_file.exists(), proc.stderr.read() if proc.poll() is not None else "timeout"
        exported = {}
        for line in env_file.read_text().splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.removeprefix("export ").partition("=")
            exported[key] = value
        assert exported["AWS_ENDPOINT_URL_BRAKET"].startswith("http://127.0.0.1:")
        assert exported["AWS_ENDPOINT_URL_S3"] == exported["AWS_ENDPOINT_URL_BRAKET"] + "/s3"
        for key, value in exported.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        assert AwsDevice(GARNET).name == "Garnet"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    pid_line, *exports = env_file.read_text().splitlines()
    assert pid_line == f"# pid {proc.pid}"
    assert out.splitlines() == exports
    assert "GetDevice arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet 200" in err


@pytest.mark.emulator
def test_cli_in_the_background_returns_once_it_serves_and_stops_by_its_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "emulator.env"
    started = subprocess.run(
        [
            sys.executable,
            "-m",
            "flux_quantum.cli.emulator",
            "--env-file",
            str(env_file),
            "--background",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    # It serves when the command returns: no wait on a clock.
    pid = int(env_file.read_text().splitlines()[0].removeprefix("# pid "))
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines()
    )
    for key, value in exported.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    try:
        assert AwsDevice(GARNET).name == "Garnet"
        assert f"--stop --env-file {env_file}" in started.stderr
    finally:
        stopped = subprocess.run(
            [
                sys.executable,
                "-m",
                "flux_quantum.cli.emulator",
                "--env-file",
                str(env_file),
                "--stop",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert stopped.returncode == 0, stopped.stderr
    assert not env_file.exists()
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    again = subprocess.run(
        [sys.executable, "-m", "flux_quantum.cli.emulator", "--background"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode != 0
    assert again.stderr.strip() == (
        "flux-quantum: ERROR: --background needs --env-file FILE (where the emulator's pid is)"
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--host", "0.0.0.0"], ["--host", "loopback"]),
        (["--speed", "0"], ["--speed"]),
        (["--scenario", "/nonexistent/s.yaml"], ["/nonexistent/s.yaml"]),
    ],
)
def test_cli_user_errors(args: list[str], words: list[str]) -> None:
    proc = _cli(*args)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert out == ""
    assert err.startswith("flux-quantum: ERROR: ")
    for word in words:
        assert word in err
