"""The Braket vendor through the real amazon-braket-sdk and boto3, against a live emulator
on 127.0.0.1 driven by a ManualClock: lifecycle, queue positions, cancel, re-attach,
error mapping, the one retry budget (counted in the emulator's call log), idempotent
create, the lookup of a task by its token tag (never a create), capped and None
positions, and the pure parsing helpers."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskRef, TaskState
from flux_quantum.vendors.braket.parsing import (
    client_token,
    in_execution_window,
    parse_queue_count,
    reservation_of,
)
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.local.vendor import LocalVendor

GHZ = """OPENQASM 3.0;
qubit[3] q;
bit[3] c;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
c = measure q;
"""
QPU_ARN = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
SIM_ARN = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
BUSY_ARN = "arn:aws:braket:::device/quantum-simulator/local/busy"

CATALOG = parse_catalog(
    f"""
devices:
  - {{name: line5, vendor: braket, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: 0.3, per_shot: 0.001}}}}
  - {{name: sv1, vendor: braket, id: "{SIM_ARN}", class: simulator, qubits: 34,
     price: {{per_minute: 0.075, min_seconds: 3}}}}
  - {{name: busy, vendor: braket, id: "{BUSY_ARN}", class: simulator, qubits: 20,
     price: {{per_minute: 0.075}}}}
  - {{name: maintenance, vendor: braket,
     id: "arn:aws:braket:::device/quantum-simulator/local/maintenance",
     class: simulator, qubits: 20, price: {{per_minute: 0.075}}}}
  - {{name: ghost, vendor: braket, id: "arn:aws:braket:us-east-1::device/qpu/acme/Ghost",
     class: qpu, qubits: 5, price: {{per_task: 0.3}}}}
""",
    "test.yaml",
)
LINE5 = CATALOG.get("line5")

# A QPU with 5 tasks ahead, each served in exactly 10 s, no background arrivals.
LINE5_SPEC = {
    "arn": QPU_ARN,
    "name": "Line-5",
    "qubits": 5,
    "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
    "queue": {"depth": 5, "service_time": 10.0, "distribution": "fixed"},
}


def scenario(*faults: dict) -> Scenario:
    return Scenario.from_dict(
        {"extends": "default", "devices": [LINE5_SPEC], "faults": list(faults)}
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def start(clock: ManualClock, *faults: dict) -> Emulator:
    return Emulator(scenario=scenario(*faults), clock=clock).start()


@pytest.fixture
def emu(clock, emulator_tier):
    emulator = start(clock)
    yield emulator
    emulator.stop()


def make_vendor(clock: ManualClock, monkeypatch, emu: Emulator, **kw) -> BraketVendor:
    """The production Braket vendor, reaching the emulator the SDK's way: through the
    AWS_ENDPOINT_URL_* environment. Retry sleeps advance emulated time."""
    for key, value in emu.env().items():
        monkeypatch.setenv(key, value)
    # Would make botocore retry 10 times if our client config did not pin 1 attempt.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "10")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    return BraketVendor(
        BraketSettings(connect_timeout=2, read_timeout=2),
        devices=CATALOG.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
        **kw,
    )


@pytest.fixture
def vendor(clock, monkeypatch, emu) -> BraketVendor:
    return make_vendor(clock, monkeypatch, emu)


# --- pure helpers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("6", (6, False)),
        (" 12 ", (12, False)),
        ("0", (0, False)),
        (">2000", (2000, True)),
        (">4000", (4000, True)),
        ("None", (None, False)),
        (None, (None, False)),
        ("", (None, False)),
        ("-3", (None, False)),
        ("6.5", (None, False)),
        ("lots", (None, False)),
        ("٣", (None, False)),  # a non-ASCII digit is not a position
        (7, (7, False)),
        (True, (None, False)),
        ({"position": 3}, (None, False)),
    ],
)
def test_parse_queue_count(raw, expected):
    assert parse_queue_count(raw) == expected


def test_execution_windows_follow_the_sdk_rules():
    monday_noon = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
    saturday_1am = datetime(2025, 1, 11, 1, 0, tzinfo=UTC)
    window = {"executionDay": "Weekdays", "windowStartHour": "09:00:00", "windowEndHour": "17:00"}
    assert in_execution_window([window], monday_noon)
    assert not in_execution_window([window], saturday_1am)
    overnight = {
        "executionDay": "Friday",
        "windowStartHour": "22:00:00",
        "windowEndHour": "02:00:00",
    }
    assert in_execution_window([overnight], saturday_1am)  # Friday's window, past midnight
    assert not in_execution_window([overnight], monday_noon)
    assert in_execution_window(None, monday_noon)  # nothing published: status decides
    assert in_execution_window([{"windowStartHour": "garbage"}], monday_noon)


def test_client_token_is_kept_or_hashed_deterministically():
    assert client_token("job-123-attempt") == "job-123-attempt"
    long = "x" * 100
    assert len(client_token(long)) == 64 and client_token(long) == client_token(long)
    with pytest.raises(ValueError):
        client_token("")


# --- against the emulator ------------------------------------------------------------


def test_probe_reports_status_queue_and_price(vendor, emu):
    line5 = vendor.probe(LINE5)
    assert line5.status is DeviceStatus.ONLINE and line5.available
    assert (line5.queue_depth, line5.queue_capped) == (5, False)
    assert line5.price == LINE5.price
    busy = vendor.probe(CATALOG.get("busy"))
    assert (busy.queue_depth, busy.queue_capped) == (4000, True)  # ">4000"
    assert busy.describe_queue() == ">4000"
    down = vendor.probe(CATALOG.get("maintenance"))
    assert (down.status, down.reason) == (DeviceStatus.OFFLINE, "MAINTENANCE")
    ghost = vendor.probe(CATALOG.get("ghost"))
    assert ghost.status is DeviceStatus.UNREACHABLE
    assert ghost.reason == "ResourceNotFoundException"
    assert emu.call_count("GetDevice") == 4


def test_full_lifecycle_with_position_counting_down(vendor, emu, clock):
    task = vendor.submit(LINE5, GHZ, 100, token="job-1")
    assert task.task_id.startswith("arn:aws:braket:us-east-1:")
    assert (task.vendor, task.device, task.token) == ("braket", "line5", "job-1")
    seen = []
    for _ in range(10):
        snapshot = vendor.poll(task)
        seen.append((snapshot.state, snapshot.position))
        if snapshot.terminal:
            break
        clock.advance(10)
    queued = [position for state, position in seen if state is TaskState.QUEUED]
    assert queued == sorted(queued, reverse=True) and len(queued) >= 4
    assert queued[0] >= 5 and queued[-1] == 1
    assert all(position is None for state, position in seen if state is not TaskState.QUEUED)
    assert seen[-1] == (TaskState.COMPLETED, None)
    result = vendor.result(task)
    assert sum(result.counts.values()) == 100
    assert set(result.counts) <= {"000", "111"}
    assert result.raw["taskMetadata"]["id"] == task.task_id
    assert emu.call_count("GetObject") == 1


def test_result_of_unfinished_task_is_refused(vendor):
    task = vendor.submit(LINE5, GHZ, 10, token="early")
    with pytest.raises(errors.InvalidRequest, match="is QUEUED; only a COMPLETED task"):
        vendor.result(task)


def test_cancel_and_reattach_by_arn(vendor, emu, clock, monkeypatch):
    task = vendor.submit(LINE5, GHZ, 10, token="to-cancel")
    # A new vendor object (a restarted handler) finds the task by its ARN alone.
    again = make_vendor(clock, monkeypatch, emu)
    attached = again.attach(task.task_id)
    assert attached == TaskRef("braket", "line5", task.task_id, None)
    assert again.poll(attached).state is TaskState.QUEUED
    again.cancel(attached)
    clock.advance(1)
    assert vendor.poll(task).state in (TaskState.CANCELLING, TaskState.CANCELLED)
    assert emu.call_count("CancelQuantumTask") == 1
    with pytest.raises(errors.NotFound) as info:
        again.attach(task.task_id.rsplit("/", 1)[0] + "/00000000-0000-0000-0000-000000000000")
    assert info.value.vendor_code == "ResourceNotFoundException"


def test_capped_and_none_positions(vendor, clock):
    task = vendor.submit(CATALOG.get("busy"), GHZ, 10, token="deep")
    snapshot = vendor.poll(task)
    assert (snapshot.state, snapshot.position, snapshot.position_capped) == (
        TaskState.QUEUED,
        2000,
        True,
    )
    sim = vendor.submit(CATALOG.get("sv1"), GHZ, 10, token="quick")
    clock.advance(30)
    done = vendor.poll(sim)
    assert (done.state, done.position, done.position_capped) == (TaskState.COMPLETED, None, False)
    # Ended: Braket's "does not show queue position" is no reason, so no message.
    assert done.message is None


def test_idempotent_create_same_token_same_task(vendor, emu):
    first = vendor.submit(LINE5, GHZ, 10, token="once")
    second = vendor.submit(LINE5, GHZ, 10, token="once")
    assert first.task_id == second.task_id
    creates = [c for c in emu.calls if c.operation == "CreateQuantumTask"]
    assert len(creates) == 2 and {c.task for c in creates} == {first.task_id}
    assert len(emu.task_arns()) == 1


@pytest.mark.emulator
def test_create_retried_after_lost_answer_makes_one_task(clock, monkeypatch):
    # The first create is answered only after 1.5 s, past the 0.5 s read timeout: the
    # client gives up, our budget retries with the same clientToken, and when the slow
    # first request is finally processed the emulator hands back the same task.
    fault = {"operation": "CreateQuantumTask", "delay": 1.5, "calls": [1]}
    emu = start(clock, fault)
    try:
        vendor = make_vendor(clock, monkeypatch, emu)
        vendor.settings = BraketSettings(connect_timeout=0.5, read_timeout=0.5)
        task = vendor.submit(LINE5, GHZ, 10, token="lost-answer")
        deadline = time.monotonic() + 5
        while emu.call_count("CreateQuantumTask") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        creates = [c for c in emu.calls if c.operation == "CreateQuantumTask"]
        assert len(creates) == 2
        assert {c.task for c in creates} == {task.task_id}
        assert emu.task_arns() == [task.task_id]
    finally:
        emu.stop()


@pytest.mark.emulator
def test_throttling_is_retried_within_one_budget(clock, monkeypatch):
    fault = {"operation": "GetQuantumTask", "error": "ThrottlingException", "first": 2}
    emu = start(clock, fault)
    try:
        vendor = make_vendor(clock, monkeypatch, emu)
        task = vendor.submit(LINE5, GHZ, 10, token="throttled")
        t0 = clock.now()
        assert vendor.poll(task).state is TaskState.QUEUED
        # Two throttled answers and one good one: 3 calls, not botocore's 10 x ours.
        assert emu.call_count("GetQuantumTask") == 3
        assert [c.error for c in emu.calls if c.operation == "GetQuantumTask"] == [
            "ThrottlingException",
            "ThrottlingException",
            None,
        ]
        assert clock.now() - t0 == pytest.approx(0.25 + 0.5)  # the budget's backoff
    finally:
        emu.stop()


@pytest.mark.emulator
def test_throttling_past_the_budget_raises_with_the_vendor_code(clock, monkeypatch):
    faults = [
        {"operation": op, "error": "ThrottlingException", "first": 10}
        for op in ("GetDevice", "GetQuantumTask")
    ]
    emu = start(clock, *faults)
    try:
        vendor = make_vendor(clock, monkeypatch, emu, retry=RetryBudget(attempts=4))
        snapshot = vendor.probe(LINE5)
        assert snapshot.status is DeviceStatus.UNREACHABLE
        assert snapshot.reason == "ThrottlingException after 4 attempts"
        assert emu.call_count("GetDevice") == 4
        task = vendor.submit(LINE5, GHZ, 10, token="t")
        with pytest.raises(errors.VendorThrottled) as info:
            vendor.poll(task)
        assert info.value.retryable and info.value.attempts == 4
        assert "braket GetQuantumTask for arn:aws:braket:us-east-1:" in str(info.value)
        assert "failed with ThrottlingException" in str(info.value)
        assert str(info.value).endswith("(gave up after 4 attempts)")
        assert emu.call_count("GetQuantumTask") == 4
    finally:
        emu.stop()


ERROR_CASES = [
    ("ValidationException", errors.InvalidRequest, False),
    ("ServiceQuotaExceededException", errors.QuotaExceeded, False),
    ("AccessDeniedException", errors.AccessDenied, False),
    ("ResourceNotFoundException", errors.NotFound, False),
    ("ConflictException", errors.Conflict, False),
    ("DeviceRetiredException", errors.DeviceRetired, False),
    ("DeviceOfflineException", errors.DeviceOffline, False),
    ("ThrottlingException", errors.VendorThrottled, True),
    ("InternalServiceException", errors.VendorUnavailable, True),
]


@pytest.mark.emulator
@pytest.mark.parametrize(("code", "cls", "retryable"), ERROR_CASES)
def test_each_braket_error_is_mapped(clock, monkeypatch, code, cls, retryable):
    fault = {"operation": "CreateQuantumTask", "error": code, "message": f"injected {code}"}
    emu = start(clock, fault)
    try:
        vendor = make_vendor(clock, monkeypatch, emu)
        with pytest.raises(cls) as info:
            vendor.submit(LINE5, GHZ, 10, token=f"err-{code}")
        exc = info.value
        assert type(exc) is cls
        assert (exc.vendor, exc.vendor_code, exc.retryable) == ("braket", code, retryable)
        assert exc.operation == "CreateQuantumTask"
        assert f"braket CreateQuantumTask for line5 failed with {code}: injected {code}" in str(exc)
        # Retryable errors use the whole budget (3 attempts); the others are not retried.
        assert emu.call_count("CreateQuantumTask") == (3 if retryable else 1)
        assert emu.task_arns() == []
    finally:
        emu.stop()


@pytest.mark.emulator
@pytest.mark.parametrize(
    ("code", "cls"),
    [("NoSuchKey", errors.NotFound), ("AccessDenied", errors.AccessDenied)],
)
def test_s3_errors_on_result_are_mapped(clock, monkeypatch, code, cls):
    emu = start(clock, {"operation": "GetObject", "error": code})
    try:
        vendor = make_vendor(clock, monkeypatch, emu)
        task = vendor.submit(CATALOG.get("sv1"), GHZ, 10, token="s3")
        clock.advance(30)
        assert vendor.poll(task).state is TaskState.COMPLETED
        with pytest.raises(cls) as info:
            vendor.result(task)
        assert info.value.vendor_code == code and info.value.operation == "GetObject"
    finally:
        emu.stop()


def test_unreachable_endpoint_is_unavailable_not_a_hang(clock, monkeypatch, emu):
    vendor = make_vendor(clock, monkeypatch, emu)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BRAKET", "http://127.0.0.1:9")  # nothing listens
    dead = BraketVendor(devices=CATALOG.devices, clock=vendor._clock, sleep=clock.advance)
    t0 = time.monotonic()
    snapshot = dead.probe(LINE5)
    assert time.monotonic() - t0 < 5
    assert snapshot.status is DeviceStatus.UNREACHABLE
    assert snapshot.reason == "EndpointConnectionError after 3 attempts"
    with pytest.raises(errors.VendorUnavailable):
        dead.poll(TaskRef("braket", "line5", "arn:aws:braket:us-east-1:1:quantum-task/x"))


def test_explicit_endpoints_beat_the_environment(clock, monkeypatch, emu):
    # The environment points at a dead port (as if it were set for another Braket);
    # a vendor with explicit endpoints still reaches the emulator, and os.environ is
    # left as it was.
    monkeypatch.setenv("AWS_ENDPOINT_URL_BRAKET", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.delenv("AMZN_BRAKET_OUT_S3_BUCKET", raising=False)
    import os

    before = dict(os.environ)
    local_catalog = parse_catalog(
        f"""
devices:
  - {{name: line5, vendor: local, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: 0.3}}}}
  - {{name: sv1, vendor: local, id: "{SIM_ARN}", class: simulator, qubits: 34,
     price: {{per_minute: 0.075}}}}
""",
        "local.yaml",
    )
    local = LocalVendor.from_settings(
        {"url": emu.url},
        environ={},
        devices=local_catalog.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
    )
    assert local.probe(local_catalog.get("line5")).queue_depth == 5
    task = local.submit(local_catalog.get("sv1"), GHZ, 20, token="local-1")
    assert task.vendor == "local" and task.device == "sv1"
    clock.advance(30)
    assert local.poll(task).state is TaskState.COMPLETED
    assert sum(local.result(task).counts.values()) == 20
    assert dict(os.environ) == before
    # And the same emulator through an Emulator object.
    via_object = LocalVendor.from_emulator(emu, devices=local_catalog.devices)
    assert via_object.attach(task.task_id).device == "sv1"


def test_local_vendor_without_emulator_says_how_to_get_one():
    local = LocalVendor.from_settings({}, environ={})
    snapshot = local.probe(LINE5)
    assert snapshot.status is DeviceStatus.UNREACHABLE
    assert snapshot.reason == "no emulator (FLUX_QUANTUM_EMULATOR_URL unset)"
    with pytest.raises(errors.VendorUnavailable, match="set FLUX_QUANTUM_EMULATOR_URL"):
        local.submit(LINE5, GHZ, 10, token="x")


def test_submit_without_results_bucket_is_refused(clock, monkeypatch, emu):
    vendor = make_vendor(clock, monkeypatch, emu)
    monkeypatch.delenv("AMZN_BRAKET_OUT_S3_BUCKET")
    with pytest.raises(errors.InvalidRequest, match="no results bucket"):
        vendor.submit(LINE5, GHZ, 10, token="nobucket")
    assert emu.call_count("CreateQuantumTask") == 0


WINDOW_ARN = "arn:aws:braket:us-east-1:123456789012:reservation/vendor-window"


def test_a_task_in_a_reserved_window_carries_its_arn_and_waits_for_it(vendor, emu, clock):
    emu.add_reservation(arn=WINDOW_ARN, device=LINE5.id, start=600.0, end=4200.0)
    ref = vendor.submit(LINE5, GHZ, 10, token="in-window", reservation=WINDOW_ARN)
    waiting = vendor.poll(ref)
    # No place in the public queue: the task waits for its window.
    assert waiting.state is TaskState.QUEUED and waiting.position is None
    assert reservation_of(vendor._get_task(ref.task_id)) == WINDOW_ARN
    clock.set(620.0)
    assert vendor.poll(ref).state in (TaskState.RUNNING, TaskState.COMPLETED)
    # Without one, a task joins the public queue and says so.
    plain = vendor.submit(LINE5, GHZ, 10, token="public")
    assert reservation_of(vendor._get_task(plain.task_id)) is None


def test_a_window_arn_on_another_device_or_after_its_end_is_refused(vendor, emu, clock):
    emu.add_reservation(arn=WINDOW_ARN, device=LINE5.id, start=10.0, end=100.0)
    other = CATALOG.get("sv1")
    with pytest.raises(errors.InvalidRequest, match="is for device"):
        vendor.submit(other, GHZ, 10, token="elsewhere", reservation=WINDOW_ARN)
    clock.set(200.0)
    with pytest.raises(errors.InvalidRequest, match="ended"):
        vendor.submit(LINE5, GHZ, 10, token="too-late", reservation=WINDOW_ARN)


# --- lookup by token: never a create -------------------------------------------------


def test_lookup_finds_the_created_task_by_its_token_and_creates_none(vendor, emu, clock):
    since = clock.epoch.timestamp() + clock.now()
    created = vendor.submit(LINE5, GHZ, 10, token="look-me-up")
    other = vendor.submit(LINE5, GHZ, 10, token="someone-else")
    long_token = "x" * 100  # longer than a clientToken: looked up as its hash
    hashed = vendor.submit(LINE5, GHZ, 10, token=long_token)
    clock.advance(30.0)
    assert vendor.lookup_task(LINE5, "look-me-up", since=since) == created
    assert vendor.lookup_task(LINE5, long_token, since=since) == hashed
    assert vendor.lookup_task(LINE5, "never-created", since=since) is None
    # Another device's tasks are not this one's, whatever their tokens.
    assert vendor.lookup_task(CATALOG.get("sv1"), "look-me-up", since=since) is None
    # The lookups searched and created nothing.
    assert emu.call_count("SearchQuantumTasks") == 4
    assert emu.call_count("CreateQuantumTask") == 3
    assert sorted(emu.task_arns()) == sorted([created.task_id, other.task_id, hashed.task_id])


def test_lookup_searches_only_since_the_create(vendor, emu, clock):
    old = vendor.submit(LINE5, GHZ, 10, token="long-ago")
    clock.advance(3600.0)
    since = clock.epoch.timestamp() + clock.now()
    # Created an hour before ``since``, past the clock-skew margin: not this create's task.
    assert vendor.lookup_task(LINE5, "long-ago", since=since) is None
    assert vendor.lookup_task(LINE5, "long-ago", since=since - 3600.0) == old
    assert emu.task_arns() == [old.task_id]
