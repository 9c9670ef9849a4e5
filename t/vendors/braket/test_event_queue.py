"""The Braket vendor's event source (``BraketEventQueue``) through the real boto3 SQS
client against a live emulator on a ManualClock: the queue found by name or given by
URL, long polls, the previous batch acknowledged, the queue gone as ``NotFound``; the
reading of EventBridge bodies (never trusted) and the events settings."""

from __future__ import annotations

import json

import boto3
import pytest

from flux_quantum.catalog import CatalogError, parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.braket.event_queue import BraketEventQueue, read_event
from flux_quantum.vendors.braket.settings import BraketSettings, client_config, queue_region
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.factory import make_vendor
from flux_quantum.vendors.local.vendor import LocalVendor
from flux_quantum.vendors.task_events import DeviceEvent, TaskEvent

# The project's emulator on loopback, through the real boto3/SDK clients.
pytestmark = pytest.mark.emulator

QPU = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
LINE5 = {
    "arn": QPU,
    "name": "Line-5",
    "qubits": 5,
    "queue": {"depth": 0, "service_time": 10.0, "distribution": "fixed"},
}
CATALOG_TEXT = f"""
devices:
  - {{name: line5, vendor: local, id: "{QPU}", class: qpu, qubits: 5,
     price: {{per_task: 0.3, per_shot: 0.001}}}}
vendors:
  local: {{events_queue: braket-events, events_wait: 0, events_poll: 45}}
"""
CATALOG = parse_catalog(CATALOG_TEXT, "events.yaml")
BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"
TASK_ARN = "arn:aws:braket:us-east-1:123456789012:quantum-task/abc"


def event(**changes) -> str:
    body = {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Braket Task State Change",
        "source": "aws.braket",
        "account": "123456789012",
        "time": "2021-10-28T01:17:45Z",
        "region": "us-east-1",
        "resources": [TASK_ARN],
        "detail": {
            "quantumTaskArn": TASK_ARN,
            "status": "COMPLETED",
            "deviceArn": "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
            "shots": "100",
            "outputS3Bucket": "amazon-braket-x",
            "outputS3Directory": "tasks/abc",
            "createdAt": "2021-10-28T01:17:42.898Z",
            "eventName": "MODIFY",
            "endedAt": "2021-10-28T01:17:44.735Z",
        },
    }
    body.update(changes)
    return json.dumps(body)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emu(clock):
    emulator = Emulator(
        scenario=Scenario.from_dict({"extends": "default", "devices": [LINE5]}), clock=clock
    ).start()
    yield emulator
    emulator.stop()


def local(emu: Emulator, clock: ManualClock) -> LocalVendor:
    """The emulator's Braket from the catalog's ``vendors.local`` (events_wait 0: no wait)."""
    vendor = make_vendor("local", CATALOG, environ={"FLUX_QUANTUM_EMULATOR_URL": emu.url})
    assert isinstance(vendor, LocalVendor)
    return vendor


# --- reading a body ----------------------------------------------------------------------


def test_a_task_state_change_is_read_into_a_task_event():
    read = read_event(event())
    assert read == TaskEvent(
        "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        TASK_ARN,
        TaskState.COMPLETED,
        "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
        1635383865.0,
    )


def test_a_device_status_change_is_read_into_a_device_event():
    body = event(
        **{"detail-type": "Braket Device Status Change"},
        detail={"deviceArn": QPU, "status": "OFFLINE"},
    )
    assert read_event(body) == DeviceEvent(
        "6a7e8feb-b491-4cf7-a9f1-bf3703467718", QPU, "OFFLINE", 1635383865.0
    )


@pytest.mark.parametrize(
    "body",
    [
        None,
        "not json",
        "[1, 2]",
        event(source="aws.s3"),
        event(id=""),
        event(**{"detail-type": "Braket Job State Change"}),
        event(detail={"quantumTaskArn": TASK_ARN, "status": "EXPLODED"}),
        event(detail={"quantumTaskArn": "not-an-arn", "status": "RUNNING"}),
        event(detail="COMPLETED"),
    ],
)
def test_anything_else_is_unreadable(body):
    assert read_event(body) is None


def test_a_time_that_cannot_be_read_is_none():
    read = read_event(event(time="yesterday"))
    assert isinstance(read, TaskEvent) and read.t is None


# --- the settings ------------------------------------------------------------------------


def test_the_events_settings_come_from_the_catalog_and_are_checked():
    settings = BraketSettings.from_catalog(
        {"events_queue": "q", "events_wait": "5", "events_poll": "30", "events_silence": "600"}
    )
    assert (settings.events_queue, settings.events_wait) == ("q", 5)
    assert (settings.events_poll, settings.events_silence) == (30.0, 600.0)
    with pytest.raises(ValueError, match="events_wait must be a whole number of seconds"):
        BraketSettings.from_catalog({"events_wait": "soon"})
    with pytest.raises(ValueError, match="events_wait must be 0 to 20 seconds"):
        BraketSettings.from_catalog({"events_wait": "21"})
    with pytest.raises(ValueError, match="events_poll must be seconds > 0"):
        BraketSettings.from_catalog({"events_poll": "0"})
    with pytest.raises(CatalogError, match="vendors.ibm: unknown setting 'events_queue'"):
        text = CATALOG_TEXT.replace("local: {events_queue", "ibm: {events_queue")
        parse_catalog(text, "x.yaml")


def test_the_queue_region_and_the_read_timeout_of_a_long_poll():
    assert queue_region("https://sqs.eu-north-1.amazonaws.com/123456789012/q") == "eu-north-1"
    assert queue_region("braket-events") is None
    assert queue_region("http://127.0.0.1:9/sqs/123456789012/q") is None
    settings = BraketSettings(read_timeout=5.0, events_wait=20, sqs_endpoint_url="http://x")
    endpoint, config = client_config(settings, "sqs")
    assert endpoint == "http://x" and config.read_timeout == 30.0
    assert client_config(settings, "braket")[1].read_timeout == 5.0


def test_a_vendor_without_a_queue_has_no_event_source():
    assert BraketVendor(BraketSettings()).event_source() is None


# --- the queue through boto3 -------------------------------------------------------------


def test_events_of_the_vendors_own_tasks_come_and_are_acknowledged(emu, clock):
    vendor = local(emu, clock)
    source = vendor.event_source()
    assert isinstance(source, BraketEventQueue)
    assert source is vendor.event_source()  # made once
    assert (source.safety_poll, source.silence) == (45.0, 900.0)
    task = vendor.submit(CATALOG.get("line5"), BELL, 10, "tok-1")
    clock.advance(60)
    batch = source.receive()
    assert [(e.task_id, e.state) for e in batch.tasks] == [
        (task.task_id, TaskState.QUEUED),
        (task.task_id, TaskState.RUNNING),
        (task.task_id, TaskState.COMPLETED),
    ]
    assert batch.messages == 3 and batch.unreadable == 0
    calls = [c.operation for c in emu.calls if c.operation in ("GetQueueUrl", "ReceiveMessage")]
    assert calls == ["GetQueueUrl", "ReceiveMessage"]
    # Acknowledged at the next read: nothing comes again, even past the visibility timeout.
    assert source.receive(batch.receipts).messages == 0
    clock.advance(120)
    again = source.receive()
    assert again.messages == 0 and again.unacknowledged == 0
    assert emu.call_count("DeleteMessageBatch") == 1
    assert emu.call_count("GetQueueUrl") == 1  # the URL is kept


def test_messages_that_are_not_braket_events_are_counted_unreadable(emu, clock):
    vendor = local(emu, clock)
    source = vendor.event_source()
    sqs = boto3.client(
        "sqs",
        endpoint_url=emu.sqs_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )
    sqs.send_message(QueueUrl=emu.events_queue_url, MessageBody='{"source": "someone.else"}')
    sqs.send_message(QueueUrl=emu.events_queue_url, MessageBody=event())
    batch = source.receive()
    assert batch.unreadable == 1 and [e.task_id for e in batch.tasks] == [TASK_ARN]


def test_a_queue_that_is_gone_is_not_found_with_its_code(emu, clock):
    vendor = local(emu, clock)
    source = vendor.event_source()
    source.receive()
    emu.sqs.remove_queue(emu.events_queue)
    with pytest.raises(errors.NotFound) as info:
        source.receive()
    assert info.value.vendor_code == "AWS.SimpleQueueService.NonExistentQueue"
    assert "ReceiveMessage for braket-events" in str(info.value)


def test_a_queue_given_by_url_is_read_without_looking_it_up(emu, clock, monkeypatch):
    for key, value in emu.env().items():
        monkeypatch.setenv(key, value)
    vendor = BraketVendor(
        BraketSettings(events_queue=emu.events_queue_url, events_wait=0),
        devices=CATALOG.devices,
    )
    source = vendor.event_source()
    assert source is not None and source.receive().messages == 0
    assert emu.call_count("GetQueueUrl") == 0 and emu.call_count("ReceiveMessage") == 1
