"""Braket Direct reservations on the vendor emulator, driven through the unmodified SDK.

A reservation books a device for a window: the tasks created with its ARN (CreateQuantumTask's
``associations``) skip the public queue, wait QUEUED for the window, run in it one at a time
while the public queue waits, and are cancelled if still queued at its end; the window is
billed whatever runs in it and its tasks cost nothing. Every test steps a ManualClock.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

# One import per module: `import braket.aws` costs about two seconds.
from braket.aws import AwsDevice, AwsQuantumTask, AwsSession, DirectReservation
from braket.aws.queue_information import QueueType
from braket.circuits import Circuit

from flux_quantum.emulator import (
    Emulator,
    ManualClock,
    ReservationSpec,
    Scenario,
    ScenarioError,
)
from flux_quantum.emulator.braket.direct import RESERVATIONS_PATH, book
from flux_quantum.emulator.queue import DeviceQueue, TaskTimeline, Window

# Fixtures: make_emulator, manual_clock (see t/emulator_fixtures.py).
pytest_plugins = ["emulator_fixtures"]

MakeEmulator = Callable[..., Emulator]

QPU = "arn:aws:braket:us-east-1::device/qpu/emulator/Test-1"
OTHER = "arn:aws:braket:us-east-1::device/qpu/emulator/Other-1"
RES = "arn:aws:braket:us-east-1:123456789012:reservation/r-1"
RES2 = "arn:aws:braket:us-east-1:123456789012:reservation/r-2"
ASSOCIATION = "RESERVATION_TIME_WINDOW_ARN"
REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "etc" / "flux-quantum" / "scenarios"


def bell() -> Circuit:
    return Circuit().h(0).cnot(0, 1)


def scenario(
    *reservations: dict, depth: int = 20, service_time: float = 10.0, **queue: object
) -> dict:
    """Two QPU-shaped devices: Test-1 busy with one task and ``depth`` more waiting (fixed
    ``service_time``, no arrivals unless given), Other-1 idle; and ``reservations``."""
    return {
        "devices": [
            {
                "arn": QPU,
                "name": "Test-1",
                "qubits": 5,
                "cost": {"price": 0.01, "unit": "shot", "task_price": 0.3},
                "queue": {"depth": depth, "service_time": service_time, **queue},
            },
            {"arn": OTHER, "name": "Other-1", "qubits": 5, "cost": {"price": 0.01}},
        ],
        "reservations": list(reservations),
    }


def window(start: float, end: float, arn: str = RES, device: str = "Test-1", **more) -> dict:
    return {"arn": arn, "device": device, "start": start, "end": end, **more}


def fixed_queue(depth: int, *windows: Window) -> DeviceQueue:
    """Test-1's queue on its own: one fixed 10 s task running at t=0, ``depth`` waiting."""
    spec = Scenario.from_dict(scenario(depth=depth)).devices[0]
    queue = DeviceQueue(spec, 0)
    for booked in windows:
        queue.reserve(booked, 0.0)
    return queue


def ran(queue: DeviceQueue, task: str, t: float) -> tuple[float | None, float | None]:
    line = queue.timeline(task, t)
    return line.started, line.ended


def create(emu: Emulator, token: str, device: str = QPU, **more: object) -> str:
    """One CreateQuantumTask through boto3 (the SDK's client, no retries)."""
    answer = boto3.client("braket", region_name="us-east-1").create_quantum_task(
        clientToken=token,
        deviceArn=device,
        shots=10,
        action=json.dumps(
            {
                "braketSchemaHeader": {"name": "braket.ir.openqasm.program", "version": "1"},
                "source": "OPENQASM 3.0;\nbit[2] b;\nqubit[2] q;\nh q[0];\ncnot q[0], q[1];\n"
                "b = measure q;",
            }
        ),
        outputS3Bucket=emu.bucket,
        outputS3KeyPrefix="tasks",
        **more,
    )
    return answer["quantumTaskArn"]


def refusal(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    response = excinfo.value.response
    return (
        response["Error"]["Code"],
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Message"],
    )


# -- through the SDK ------------------------------------------------------------------------------


def test_a_reserved_task_waits_for_its_window_then_runs_ahead_of_a_long_public_queue(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(window(300, 900)))  # 210 s of public queue ahead
    device = AwsDevice(QPU)
    public = device.run(bell(), shots=10)
    session = AwsSession()
    reserved = AwsQuantumTask.create(
        session,
        QPU,
        bell(),
        (emu.bucket, "tasks"),
        10,
        reservation_arn=RES,
        disable_qubit_rewiring=False,
    )
    # Not in the device's queue: no position, a message naming the reservation.
    assert reserved.state() == "QUEUED"
    info = reserved.queue_position()
    assert info.queue_position is None and RES in (info.message or "")
    assert info.queue_type is QueueType.NORMAL
    assert public.queue_position().queue_position == "21"
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == "21"
    assert reserved.metadata()["associations"] == [{"arn": RES, "type": ASSOCIATION}]
    raw = boto3.client("braket").get_quantum_task(
        quantumTaskArn=reserved.id, additionalAttributeNames=["QueueInfo"]
    )
    assert raw["associations"] == [{"arn": RES, "type": ASSOCIATION}]
    assert raw["queueInfo"]["position"] == "None"

    manual_clock.set(210)  # the public queue reached ours; it runs 210-220
    assert public.state() == "RUNNING" and reserved.state() == "QUEUED"
    manual_clock.set(299.9)
    assert reserved.state() == "QUEUED"
    manual_clock.set(300)  # the window opens: ours runs at once
    assert reserved.state() == "RUNNING"
    manual_clock.set(310)
    assert reserved.state() == "COMPLETED"
    assert set(reserved.result().measurement_counts) <= {"00", "11"}
    line = emu.task_timeline(reserved.id)
    assert (line.started, line.ended) == (300, 310)


def test_the_public_queue_waits_during_the_window_and_resumes_at_its_end(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(window(25, 60), depth=3))
    device = AwsDevice(QPU)
    public = device.run(bell(), shots=10)  # behind 1 running and 3 waiting
    first = device.run(bell(), shots=10, reservation_arn=RES)
    second = device.run(bell(), shots=10, reservation_arn=RES)
    # 0-10 and 10-20 run; the next 10 s would end after 25: nothing starts at 20.
    manual_clock.set(24)
    assert public.queue_position().queue_position == "3"
    manual_clock.set(40)  # the window's tasks run 25-35 and 35-45, FIFO
    assert first.state() == "COMPLETED" and second.state() == "RUNNING"
    assert public.queue_position().queue_position == "3"  # frozen
    during = device.run(bell(), shots=10)  # created in the window: public, and waits
    manual_clock.set(59)
    assert public.queue_position().queue_position == "3"
    assert during.queue_position().queue_position == "4"
    assert device.queue_depth().quantum_tasks[QueueType.NORMAL] == "4"
    manual_clock.set(100)  # resumed at 60: 60-70, 70-80, ours 80-90, the later one 90-100
    timelines = {task.id: emu.task_timeline(task.id) for task in (first, second, public, during)}
    assert [(t.started, t.ended) for t in timelines.values()] == [
        (25, 35),
        (35, 45),
        (80, 90),
        (90, 100),
    ]


def test_tasks_still_queued_at_the_windows_end_are_cancelled_and_a_running_one_finishes(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(window(0, 25, price_per_hour=3600.0), depth=0))
    device = AwsDevice(QPU)
    with DirectReservation(device, reservation_arn=RES):  # the SDK's context: the env vars
        tasks = [device.run(bell(), shots=10) for _ in range(4)]
    public = device.run(bell(), shots=10)
    assert [t.metadata()["associations"][0]["arn"] for t in tasks] == [RES] * 4
    assert "associations" not in public.metadata()
    manual_clock.set(24.9)
    assert [t.state() for t in tasks] == ["COMPLETED", "COMPLETED", "RUNNING", "QUEUED"]
    manual_clock.set(25)
    assert [t.state() for t in tasks] == ["COMPLETED", "COMPLETED", "RUNNING", "CANCELLED"]
    assert public.state() == "QUEUED"  # the device is the running task's until 30
    manual_clock.set(30)
    assert tasks[2].state() == "COMPLETED" and public.state() == "RUNNING"
    assert emu.task_timeline(tasks[3].id) == TaskTimeline(0.0, None, None, None, 25)

    manual_clock.set(40)
    report = emu.report()
    [row] = report["bill"]["reservations"]
    assert row == {
        "arn": RES,
        "device": QPU,
        "start": 0.0,
        "end": 25.0,
        "start_at": "2025-01-01T00:00:00.000Z",
        "end_at": "2025-01-01T00:00:25.000Z",
        "price_per_hour": 3600.0,
        "cost": pytest.approx(25.0),
        "tasks": 4,
        "completed": 3,
        "cancelled": 1,
        "used_seconds": pytest.approx(25.0),  # 10 + 10 + the 5 s of the third inside it
    }
    rows = {r["id"]: r for r in report["bill"]["tasks"]}
    assert [rows[t.id]["cost"] for t in tasks] == [0.0] * 4
    assert [rows[t.id]["reservation"] for t in tasks] == [RES] * 4
    assert [(rows[t.id]["started"], rows[t.id]["ended"]) for t in tasks] == [
        (0.0, 10.0),
        (10.0, 20.0),
        (20.0, 30.0),
        (None, 25.0),
    ]
    assert rows[public.id]["reservation"] is None and rows[public.id]["cost"] == pytest.approx(0.4)
    assert report["bill"]["total"] == pytest.approx(25.0 + 0.4)


def test_creates_naming_an_unknown_foreign_or_ended_reservation_are_refused(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(window(0, 100), window(200, 300, arn=RES2, device="Other-1")))
    unknown = "arn:aws:braket:us-east-1:123456789012:reservation/nobody"
    cases = [
        (unknown, QPU, [unknown, "not found"]),
        (RES2, QPU, [RES2, f"is for device {OTHER}"]),
    ]
    for arn, device, words in cases:
        with pytest.raises(ClientError) as excinfo:
            AwsDevice(device).run(bell(), shots=10, reservation_arn=arn)
        code, status, message = refusal(excinfo)
        assert (code, status) == ("ValidationException", 400)
        for word in words:
            assert word in message
    with pytest.raises(ClientError) as excinfo:
        create(emu, "bad-type", associations=[{"arn": RES, "type": "JOB_ARN"}])
    code, status, message = refusal(excinfo)
    assert (code, status) == ("ValidationException", 400) and ASSOCIATION in message
    with pytest.raises(ClientError) as excinfo:
        create(emu, "two", associations=[{"arn": RES, "type": ASSOCIATION}] * 2)
    assert refusal(excinfo)[:2] == ("ValidationException", 400)

    # Idempotent like any create: the same token is the same task, even once it ended.
    first = create(emu, "once", associations=[{"arn": RES, "type": ASSOCIATION}])
    manual_clock.set(100)
    assert create(emu, "once", associations=[{"arn": RES, "type": ASSOCIATION}]) == first
    with pytest.raises(ClientError) as excinfo:
        create(emu, "once")  # the same token for a task outside the reservation
    assert refusal(excinfo)[:2] == ("ConflictException", 409)
    with pytest.raises(ClientError) as excinfo:
        AwsDevice(QPU).run(bell(), shots=10, reservation_arn=RES)
    code, status, message = refusal(excinfo)
    assert (code, status) == ("ValidationException", 400)
    assert RES in message and "ended at 2025-01-01T00:01:40.000Z" in message
    assert emu.task_arns() == [first]


# -- the window's bill and the forecast -------------------------------------------------------------


def test_a_window_is_billed_from_its_booking_whatever_runs_in_it(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(window(3600, 7200, price_per_hour=7000)))
    report = emu.report()
    [row] = report["bill"]["reservations"]
    assert (row["cost"], row["tasks"], row["used_seconds"]) == (7000.0, 0, 0.0)
    assert report["bill"]["total"] == 7000.0
    task = AwsDevice(QPU).run(bell(), shots=1000, reservation_arn=RES)
    manual_clock.set(7300)
    report = emu.report()
    [row] = report["bill"]["reservations"]
    assert (row["completed"], row["used_seconds"]) == (1, 10.0)
    [billed] = [r for r in report["bill"]["tasks"] if r["id"] == task.id]
    assert billed["state"] == "COMPLETED" and billed["cost"] == 0.0
    assert billed["billed_seconds"] is None
    assert report["bill"]["total"] == 7000.0  # no per-task or per-shot fee on top


def test_forecasts_know_the_window() -> None:
    """A reserved task forecasts its window's start; a public one the freeze; one the
    window's end will cancel, that end; each is what then happens."""
    spec = Scenario.from_dict(
        scenario(depth=30, service_time=20.0, distribution="exponential", arrival_rate=0.02)
    ).devices[0]
    queue = DeviceQueue(spec, 5)
    queue.reserve(Window("w", 200.0, 260.0), 0.0)
    queue.submit("public", 10.0, shots=0)
    for name in ("a", "b", "c", "d", "e"):
        queue.submit(name, 20.0, shots=0, window="w")
    forecasts = {name: queue.forecast(name, 30.0) for name in ("public", "a", "b", "e")}
    assert forecasts["a"].started == 200.0
    assert forecasts["public"].started is not None and forecasts["public"].started >= 260.0
    assert forecasts["e"] == TaskTimeline(20.0, None, None, None, 260.0)
    for name, forecast in forecasts.items():
        end = forecast.ended if forecast.ended is not None else forecast.cancelled
        assert end is not None
        assert queue.timeline(name, end + 1.0) == forecast, name


def test_the_public_queue_draws_the_same_service_times_with_or_without_a_window() -> None:
    spec = Scenario.from_dict(
        scenario(depth=5, service_time=20.0, distribution="exponential")
    ).devices[0]
    plain, reserved = DeviceQueue(spec, 1), DeviceQueue(spec, 1)
    reserved.reserve(Window("w", 50.0, 400.0), 0.0)
    for queue in (plain, reserved):
        queue.submit("public", 0.0, shots=0)
    reserved.submit("mine", 0.0, shots=0, window="w")
    a, b = plain.timeline("public", 10_000.0), reserved.timeline("public", 10_000.0)
    assert a.started is not None and b.started is not None and b.started >= 400.0
    assert a.ended is not None and b.ended is not None
    assert b.ended - b.started == pytest.approx(a.ended - a.started)


def test_a_window_over_a_busy_device_waits_for_the_running_task_and_stops_public_starts() -> None:
    queue = fixed_queue(3)
    queue.submit("public", 1.0, shots=0)
    queue.reserve(Window("late", 5.0, 30.0), 2.0)  # booked while a public task runs 0-10
    queue.submit("mine", 3.0, shots=0, window="late")
    assert queue.window_at(6.0) == "late" and queue.window_at(30.0) is None
    assert ran(queue, "mine", 100.0) == (10.0, 20.0)
    assert ran(queue, "public", 100.0) == (60.0, 70.0)  # 3 ahead from 30 on
    assert queue.progress("mine", 100.0).position is None
    with pytest.raises(ValueError, match="overlaps late"):
        queue.reserve(Window("over", 20.0, 140.0), 100.0)
    with pytest.raises(ValueError, match="no time left"):
        queue.reserve(Window("past", 40.0, 100.0), 100.0)
    with pytest.raises(ValueError, match="not open"):
        queue.submit("too late", 100.0, shots=0, window="late")


# -- booking while running ------------------------------------------------------------------------


def test_add_reservation_books_a_window_relative_to_now(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(depth=0))
    manual_clock.set(1000)
    booked = emu.add_reservation(arn=RES, device="Test-1", start=1100, end=1200, price_per_hour=36)
    assert booked == ReservationSpec(RES, QPU, 1100.0, 1200.0, 36.0)
    assert emu.reservations() == [booked]
    task = AwsDevice(QPU).run(bell(), shots=10, reservation_arn=RES)
    assert emu.task_forecast(task.id).started == 1100.0
    manual_clock.set(1111)
    assert task.state() == "COMPLETED"
    refused = [
        (
            {"arn": RES2, "device": OTHER, "start": 900, "end": 1000},
            "'end'",
            "after the emulator's",
        ),
        ({"arn": RES2, "device": "Test-1", "start": 1150, "end": 1300}, "'start'", RES),
        ({"arn": RES, "device": "Other-1", "start": 2000, "end": 2100}, "'arn'", "repeats"),
        ({"arn": "r-2", "device": "Other-1", "start": 2000, "end": 2100}, "'arn'", "<12 digits>"),
        ({"arn": RES2, "device": "Nope", "start": 2000, "end": 2100}, "'device'", "Nope"),
    ]
    for fields, field, word in refused:
        with pytest.raises(ScenarioError) as excinfo:
            emu.add_reservation(**fields)
        message = str(excinfo.value)
        assert message.startswith("reservation: field ") and field in message and word in message
    assert emu.reservations() == [booked]


def test_a_reservation_booked_over_http_by_another_process(
    make_emulator: MakeEmulator, manual_clock: ManualClock
) -> None:
    emu = make_emulator(scenario(depth=0))
    manual_clock.set(60)
    record = book(emu.url, RES, OTHER, start=120, end=3720, price_per_hour=7000)
    assert record == {
        "arn": RES,
        "device": OTHER,
        "start": 120.0,
        "end": 3720.0,
        "price_per_hour": 7000.0,
        "start_at": "2025-01-01T00:02:00.000Z",
        "end_at": "2025-01-01T01:02:00.000Z",
        "cost": 7000.0,
    }
    assert emu.reservations()[0].device == OTHER
    with pytest.raises(ValueError, match=r"^reservation: field 'start' puts a window"):
        book(emu.url, RES2, "Other-1", start=3000, end=4000)
    request = urllib.request.Request(emu.url + RESERVATIONS_PATH, data=b"[1, 2]", method="POST")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10)
    assert excinfo.value.code == 400
    assert json.loads(excinfo.value.read())["message"].startswith("reservation: the body")
    assert len(emu.report()["bill"]["reservations"]) == 1


# -- scenarios --------------------------------------------------------------------------------------


def test_the_reservation_scenario_file() -> None:
    loaded = Scenario.from_yaml(SCENARIOS / "reservation.yaml")
    [reserved] = loaded.reservations
    forte = loaded.device(reserved.device)
    assert forte is not None and forte.type == "QPU"
    assert (reserved.end - reserved.start, reserved.price_per_hour) == (3600.0, 7000.0)
    assert forte.queue.depth * forte.queue.service_time >= 3 * 3600  # hours of public queue
    queue = DeviceQueue(forte, 0)
    for booked in loaded.reservations:
        queue.reserve(Window(booked.arn, booked.start, booked.end), 0.0)
    queue.submit("public", 0.0, shots=0)
    queue.submit("mine", 0.0, shots=0, window=reserved.arn)
    mine = queue.forecast("mine", 0.0)
    assert mine.started is not None and reserved.start <= mine.started < reserved.end
    assert queue.forecast("public", 0.0).started is not None
    assert queue.timeline("public", mine.started).started is None


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"arn": "r-1", "device": "Test-1", "start": 0, "end": 10}, ["'reservations[0].arn'", "<12 digits>"]),
        ({"device": "Test-1", "start": 0, "end": 10}, ["'reservations[0].arn'", "required"]),
        ({"arn": RES, "device": "Nope", "start": 0, "end": 10}, ["'reservations[0].device'", "'Nope'"]),
        ({"arn": RES, "start": 0, "end": 10}, ["'reservations[0].device'", "required"]),
        ({"arn": RES, "device": "Test-1", "end": 10}, ["'reservations[0].start'", "required"]),
        ({"arn": RES, "device": "Test-1", "start": 10, "end": 10}, ["'reservations[0].end'", "after start (10)"]),
        ({"arn": RES, "device": "Test-1", "start": "noon", "end": 10}, ["'reservations[0].start'", "number"]),
        ({"arn": RES, "device": "Test-1", "start": -5, "end": 10}, ["'reservations[0].start'", ">= 0"]),
        ({"arn": RES, "device": QPU, "start": 0, "end": 10, "price_per_hour": -1}, ["'reservations[0].price_per_hour'", ">= 0"]),
        ({"arn": RES, "device": QPU, "start": 0, "end": 10, "colour": "red"}, ["'reservations[0].colour'", "unknown"]),
    ],
)  # fmt: skip
def test_bad_reservations_name_the_file_and_the_field(
    tmp_path: Path, entry: dict, words: list[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(scenario(entry)))  # JSON is YAML
    with pytest.raises(ScenarioError) as excinfo:
        Scenario.from_yaml(path)
    message = str(excinfo.value)
    assert message.startswith(f"scenario {path}: field ")
    for word in words:
        assert word in message


def test_overlapping_or_repeated_reservations_are_refused() -> None:
    with pytest.raises(ScenarioError) as excinfo:
        Scenario.from_dict(scenario(window(0, 100), window(50, 150, arn=RES2, device=QPU)))
    message = str(excinfo.value)
    assert "'reservations[1].start'" in message and RES in message and "[0, 100)" in message
    with pytest.raises(ScenarioError, match=r"'reservations\[1\].arn' repeats"):
        Scenario.from_dict(scenario(window(0, 100), window(200, 300, device="Other-1")))
    # Back to back, or the same hours on another device: both fine.
    fine = Scenario.from_dict(
        scenario(
            window(0, 100), window(100, 200, arn=RES2), window(0, 100, arn=RES + "x", device=OTHER)
        )
    )
    assert [r.start for r in fine.reservations if r.device == QPU] == [0.0, 100.0]
