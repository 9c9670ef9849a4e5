"""Flux tier: the handler service hears Braket's task events through the real boto3 SQS
client, from the emulator's queue (the catalog's ``vendors.local.events_queue``), on a
real instance with the real plugin. An event wakes the poll of the task it names, so a
running task is not polled until its COMPLETED event releases its job; an event for a
task the service does not track is dropped; a queue that goes away is said once and the
tasks are polled as before."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from fluxinstance import FluxInstance
from qpu_setup import Qpu, catalog_text

pytestmark = pytest.mark.flux

EVENTS = (
    "vendors:\n"
    "  local: {events_queue: braket-events, events_wait: 1, events_poll: 300, "
    "events_silence: 900}\n"
)


@pytest.fixture(scope="module")
def inst(tmp_path_factory) -> Iterator[FluxInstance]:
    instance = FluxInstance(tmp_path_factory.mktemp("events"), size=2).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture
def qpu(inst: FluxInstance) -> Iterator[Qpu]:
    catalog = inst.workdir / "backends.yaml"
    catalog.write_text(catalog_text() + EVENTS)
    q = Qpu(inst, catalog)
    yield q
    q.close()


def feed(qpu: Qpu) -> dict[str, Any]:
    out = qpu.inst.quantum("service", "status", "--json", check=False).stdout
    return (json.loads(out or "{}").get("events") or {}).get("local") or {}


def polls(qpu: Qpu, task: str) -> int:
    return qpu.emu.call_count("GetQuantumTask", task)


def test_events_release_a_done_job_without_polling_its_running_task(qpu: Qpu) -> None:
    qpu.start_service()
    jobid = qpu.submit("--setattr=qpu.device=local:q-epsilon", "true", at_front=False)
    qpu.wait_event(jobid, "qpu-task")
    qpu.until(lambda: feed(qpu).get("state") == "listening", timeout=30)
    task = qpu.context(jobid, "qpu-task")["task"]
    # Two waiting and one running ahead, 10 s each: it runs from 30 s.
    qpu.advance(35)
    qpu.until(lambda: qpu.memo(jobid).get("qpu_state") == "RUNNING", timeout=20)
    running = polls(qpu, task)
    time.sleep(3)  # longer than --poll-max=2: without events it would be polled again
    assert polls(qpu, task) == running
    assert "qpu-release" not in qpu.names(jobid)
    qpu.advance(10)  # it ends: the COMPLETED event wakes one poll, which releases it
    start = time.monotonic()
    qpu.wait_event(jobid, "qpu-release", timeout=20)
    assert time.monotonic() - start < 6
    assert qpu.context(jobid, "qpu-ready")["tasks"][0]["why"] == "COMPLETED"
    assert polls(qpu, task) <= running + 2
    counts = feed(qpu)["counts"]
    assert counts["used"] >= 2 and counts["messages"] >= 3


def test_an_event_for_a_task_not_tracked_is_dropped_and_never_read(qpu: Qpu) -> None:
    qpu.start_service()
    qpu.until(lambda: feed(qpu).get("state") == "listening", timeout=30)
    stranger = "arn:aws:braket:us-east-1:999999999999:quantum-task/not-ours"
    body = {
        "version": "0",
        "id": "forged-1",
        "detail-type": "Braket Task State Change",
        "source": "aws.braket",
        "time": "2025-01-01T00:00:00Z",
        "detail": {"quantumTaskArn": stranger, "status": "COMPLETED"},
    }
    sqs = boto3.client(
        "sqs",
        endpoint_url=qpu.emu.sqs_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
    )
    sqs.send_message(QueueUrl=qpu.emu.events_queue_url, MessageBody=json.dumps(body))
    qpu.until(lambda: feed(qpu).get("counts", {}).get("unknown") == 1, timeout=20)
    assert qpu.emu.call_count("GetQuantumTask", stranger) == 0


def test_a_queue_that_goes_away_is_said_once_and_tasks_are_polled_again(qpu: Qpu) -> None:
    qpu.start_service()
    qpu.until(lambda: feed(qpu).get("state") == "listening", timeout=30)
    qpu.emu.sqs.remove_queue(qpu.emu.events_queue)
    qpu.until(lambda: feed(qpu).get("state") == "lost", timeout=30)
    jobid = qpu.submit("--setattr=qpu.device=local:q-delta", "true", at_front=False)
    qpu.wait_event(jobid, "qpu-task")
    qpu.advance(30)
    qpu.wait_event(jobid, "qpu-release", timeout=20)  # by its polls alone
    time.sleep(2)
    dmesg = qpu.inst.run(["flux", "dmesg"], check=False).stdout
    said = [
        line
        for line in dmesg.splitlines()
        if "braket events queue braket-events: cannot read" in line
    ]
    assert len(said) == 1, said
    assert "NonExistentQueue" in said[0] and "polling local tasks as before" in said[0]
