"""The emulator's SQS side and Braket's events on it, through the real boto3 clients (the
SQS JSON protocol botocore's sqs 2012-11-05 model sends): GetQueueUrl, ReceiveMessage
with long polling, DeleteMessage(Batch), SendMessage, the visibility timeout, the
modelled QueueDoesNotExist, and the EventBridge-shaped task and device events the Braket
side publishes, with the scenario's lost and repeated events."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from braket.ir.openqasm import Program

from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.emulator.braket.scenario import EventsSpec
from flux_quantum.emulator.scenario import ScenarioError

pytest_plugins = ["emulator_fixtures"]

SV1 = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
QPU = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
LINE5 = {
    "arn": QPU,
    "name": "Line-5",
    "qubits": 5,
    "queue": {"depth": 2, "service_time": 10.0, "distribution": "fixed"},
    "offline": [{"start": 500, "end": 600, "reason": "MAINTENANCE"}],
}
BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"


def scenario(**events) -> Scenario:
    data = {"extends": "default", "devices": [LINE5]}
    if events:
        data["events"] = events
    return Scenario.from_dict(data)


def clients() -> tuple:
    """boto3's braket and sqs clients as the environment (the emulator's) sets them."""
    return boto3.client("braket"), boto3.client("sqs")


def create(braket, emu: Emulator, token: str = "t1", device: str = QPU) -> str:
    return braket.create_quantum_task(
        clientToken=token,
        deviceArn=device,
        shots=10,
        outputS3Bucket=emu.bucket,
        outputS3KeyPrefix="events",
        action=Program(source=BELL).json(),
    )["quantumTaskArn"]


def bodies(answer: dict) -> list[dict]:
    return [json.loads(m["Body"]) for m in answer.get("Messages", [])]


def test_the_queue_url_is_found_by_name_and_a_missing_queue_is_the_modelled_error(
    make_emulator,
):
    emu = make_emulator(scenario())
    _, sqs = clients()
    url = sqs.get_queue_url(QueueName="braket-events")["QueueUrl"]
    assert url == emu.events_queue_url == f"{emu.url}/sqs/123456789012/braket-events"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as info:
        sqs.receive_message(QueueUrl=url.replace("braket-events", "nope"))
    error = info.value.response["Error"]
    assert error["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert error["QueryErrorCode"] == "QueueDoesNotExist"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="nope")


def test_each_state_change_is_one_eventbridge_event(make_emulator, manual_clock):
    emu = make_emulator(scenario())
    braket, sqs = clients()
    url = emu.events_queue_url
    arn = create(braket, emu)
    first = bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
    assert [e["detail"]["status"] for e in first] == ["QUEUED"]
    event = first[0]
    assert event["source"] == "aws.braket"
    assert event["detail-type"] == "Braket Task State Change"
    assert event["resources"] == [arn] and event["account"] == "123456789012"
    detail = event["detail"]
    assert detail["quantumTaskArn"] == arn and detail["deviceArn"] == QPU
    assert detail["shots"] == "10" and detail["eventName"] == "INSERT"
    assert detail["outputS3Bucket"] == emu.bucket
    assert detail["outputS3Directory"].startswith("events/")
    # One task running and two waiting ahead, 10 s each: it runs from 30 s.
    manual_clock.advance(60)
    later = bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
    statuses = [e["detail"]["status"] for e in later]
    assert statuses[-2:] == ["RUNNING", "COMPLETED"]
    done = later[-1]
    assert done["detail"]["eventName"] == "MODIFY" and "endedAt" in done["detail"]
    assert done["time"].endswith("Z") and done["id"] != later[-2]["id"]


def test_a_long_poll_returns_as_soon_as_a_change_is_due(make_emulator, manual_clock):
    emu = make_emulator(scenario())
    braket, sqs = clients()
    url = emu.events_queue_url
    create(braket, emu)
    queued = sqs.receive_message(QueueUrl=url)["Messages"][0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=queued["ReceiptHandle"])
    threading.Timer(0.5, manual_clock.advance, args=(35,)).start()
    start = time.monotonic()
    answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=10)
    waited = time.monotonic() - start
    assert [e["detail"]["status"] for e in bodies(answer)] == ["RUNNING"]
    assert 0.4 <= waited < 5
    start = time.monotonic()
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert 0.9 <= time.monotonic() - start < 3


def test_a_message_not_deleted_comes_again_after_its_visibility_timeout(
    make_emulator, manual_clock
):
    emu = make_emulator(scenario())
    braket, sqs = clients()
    url = emu.events_queue_url
    create(braket, emu)
    first = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # hidden (in flight)
    manual_clock.advance(5)  # still before Line-5 starts it at 30 s
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    manual_clock.advance(26)  # past the 30 s visibility timeout; RUNNING since 30 s
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    ids = [m["MessageId"] for m in again]
    assert first["MessageId"] in ids
    repeat = next(m for m in again if m["MessageId"] == first["MessageId"])
    assert repeat["Attributes"]["ApproximateReceiveCount"] == "2"
    answer = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "old", "ReceiptHandle": first["ReceiptHandle"]},
            *({"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(again)),
        ],
    )
    assert {e["Id"] for e in answer["Successful"]} == {f"m{i}" for i in range(len(again))}
    assert [e["Id"] for e in answer["Failed"]] == ["old"]  # a later receive replaced it
    manual_clock.advance(100)
    left = bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
    assert [e["detail"]["status"] for e in left] == ["COMPLETED"]


def test_batches_are_checked_as_sqs_checks_them(make_emulator):
    emu = make_emulator(scenario())
    _, sqs = clients()
    url = emu.events_queue_url
    with pytest.raises(sqs.exceptions.EmptyBatchRequest):
        sqs.delete_message_batch(QueueUrl=url, Entries=[])
    many = [{"Id": str(i), "ReceiptHandle": "x"} for i in range(11)]
    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest):
        sqs.delete_message_batch(QueueUrl=url, Entries=many)
    with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
        sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": "a", "ReceiptHandle": "x"}, {"Id": "a", "ReceiptHandle": "y"}],
        )
    with pytest.raises(sqs.exceptions.ClientError) as info:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)
    assert info.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_anyone_the_queue_lets_in_can_send_to_it(make_emulator):
    emu = make_emulator(scenario())
    _, sqs = clients()
    url = emu.events_queue_url
    sent = sqs.send_message(QueueUrl=url, MessageBody='{"source": "not.braket"}')
    got = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert got["MessageId"] == sent["MessageId"] and got["Body"] == '{"source": "not.braket"}'
    assert got["MD5OfBody"] == sent["MD5OfMessageBody"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"


def test_lost_and_repeated_events_follow_the_scenario(make_emulator, manual_clock):
    emu = make_emulator(scenario(duplicate=1.0, late=0.0))
    braket, sqs = clients()
    url = emu.events_queue_url
    create(braket, emu)
    twice = bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
    assert len(twice) == 2 and twice[0]["id"] == twice[1]["id"]  # one event, sent twice
    report = emu.report()["faults"]["braket"]
    assert report["events_sent"] == 1 and report["events_duplicated"] == 1

    lossy = Emulator(scenario=scenario(lose=1.0), clock=ManualClock()).start()
    try:
        braket = boto3.client("braket", endpoint_url=lossy.url)
        sqs = boto3.client("sqs", endpoint_url=lossy.sqs_url)
        create(braket, lossy)
        assert "Messages" not in sqs.receive_message(QueueUrl=lossy.events_queue_url)
        assert lossy.report()["faults"]["braket"]["events_lost"] == 1
    finally:
        lossy.stop()


def test_a_device_going_offline_is_a_device_event(make_emulator, manual_clock):
    emu = make_emulator(scenario())
    _, sqs = clients()
    url = emu.events_queue_url
    sqs.receive_message(QueueUrl=url)  # the first look notes each device's status
    manual_clock.advance(510)
    events = [
        e
        for e in bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10))
        if e["detail-type"] == "Braket Device Status Change"
    ]
    assert [(e["detail"]["deviceArn"], e["detail"]["status"]) for e in events] == [(QPU, "OFFLINE")]


def test_the_events_section_is_checked():
    assert Scenario.from_dict({"extends": "default"}).events == EventsSpec()
    with pytest.raises(ScenarioError, match="field 'events.lose' expected a number between 0"):
        scenario(lose=2)
    with pytest.raises(ScenarioError, match="field 'events.queue' must be an SQS queue name"):
        scenario(queue="no/slash")
    with pytest.raises(ScenarioError, match="field 'events.dup' is unknown"):
        scenario(dup=1)
