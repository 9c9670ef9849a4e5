"""A loop's session on Braket: a hybrid job (``BraketHybridJobs``) through the real boto3
client against the emulator on a ManualClock (the vendor's waits advance it): its tasks
run ahead of a busy QPU's public queue, its instance time is billed, it is found again
through a task that rode it, and cancelled at the end; the emulator's CreateJob, GetJob
and CancelJob as Braket's model has them, and its priority queue."""

from __future__ import annotations

import boto3
import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.emulator.queue import DeviceQueue
from flux_quantum.emulator.scenario import QueueSpec
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.braket.hybrid_jobs import ENTRY_POINT, RELAY, relay_source
from flux_quantum.vendors.local.vendor import LocalVendor

# The project's emulator on loopback, through the real boto3/SDK clients.
pytestmark = pytest.mark.emulator

QPU = "arn:aws:braket:us-east-1::device/qpu/acme/Line-5"
ROLE = "arn:aws:iam::123456789012:role/flux-quantum-hybrid"
LINE5 = {
    "arn": QPU,
    "name": "Line-5",
    "qubits": 5,
    "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
    "queue": {"depth": 20, "service_time": 10.0, "distribution": "fixed"},
}
CATALOG = parse_catalog(
    f"""
devices:
  - {{name: line5, vendor: local, id: "{QPU}", class: qpu, qubits: 5,
     price: {{per_task: 0.3, per_shot: 0.001}}}}
""",
    "hybrid.yaml",
)
LINE = CATALOG.get("line5")
BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emu(clock):
    scenario = Scenario.from_dict(
        {
            "extends": "default",
            "devices": [LINE5],
            "hybrid_jobs": {"startup": 30, "price_per_hour": 0.36},
        }
    )
    emulator = Emulator(scenario=scenario, clock=clock).start()
    yield emulator
    emulator.stop()


def vendor(emu: Emulator, clock: ManualClock, **settings) -> LocalVendor:
    return LocalVendor.from_emulator(
        emu,
        devices=CATALOG.devices,
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=clock.advance,
        settings_overrides={"hybrid_role_arn": ROLE, "hybrid_price": 0.36, **settings},
    )


def test_a_hybrid_jobs_tasks_run_ahead_of_the_public_queue(emu, clock):
    v = vendor(emu, clock)
    plain = v.submit(LINE, BELL, 10, "plain-1")
    opening = v.open_session(LINE, "dedicated")
    assert (opening.requested, opening.mode) == ("dedicated", "hybrid")
    assert "ml.m5.large instance, $0.36/h, billed per second" in opening.reason
    assert "ahead of the public queue" in opening.reason
    session = opening.session
    assert session is not None and session.mode == "hybrid"
    assert "jobToken" not in repr(session) and session.session_id not in repr(session)
    # The job waited 30 s to start (the vendor's wait advanced the clock).
    assert emu.call_count("CreateJob") == 1 and emu.call_count("GetJob") >= 2
    rode = v.submit_in(session, LINE, BELL, 10, "rode-1")
    assert v.poll(rode).position == 1
    assert v.poll(plain).position > 1
    clock.advance(25)
    assert v.poll(rode).state in (TaskState.RUNNING, TaskState.COMPLETED)
    assert v.poll(plain).state is TaskState.QUEUED
    # Found again through the task that rode it, with its token; its own tasks' env.
    found = v.session_of(rode)
    assert found is not None and found.session_id == session.session_id and not found.closed
    assert v.session_environment(session) == {
        "AMZN_BRAKET_JOB_TOKEN": session.session_id.split()[1]
    }
    assert v.session_of(plain) is None
    v.close_session(session)
    v.close_session(session)  # a second close is fine
    assert v.session_of(rode).closed
    row = emu.report()["bill"]["sessions"][-1]
    assert row["mode"] == "hybrid" and row["state"] == "closed" and row["jobs"] == [rode.task_id]
    assert row["cost"] == pytest.approx(25 * 0.36 / 3600)


def test_without_a_role_there_is_no_hybrid_job(emu, clock):
    v = vendor(emu, clock, hybrid_role_arn=None)
    opening = v.open_session(LINE, "dedicated")
    assert opening.mode == "job" and opening.session is None
    assert emu.call_count("CreateJob") == 0


def test_a_job_that_does_not_start_in_time_is_cancelled_and_tasks_go_public(emu, clock):
    v = vendor(emu, clock, hybrid_start_timeout=10.0)
    opening = v.open_session(LINE, "batch")
    assert opening.mode == "job" and opening.session is None
    assert "did not run within 10s, so it was cancelled" in opening.reason
    assert emu.call_count("CancelJob") == 1
    assert emu.report()["bill"]["sessions"][-1]["state"] == "closed"


def test_a_session_that_is_not_a_hybrid_job_is_refused(emu, clock):
    from flux_quantum.vendors.base import VendorSession

    v = vendor(emu, clock)
    with pytest.raises(errors.VendorError, match="not a Braket hybrid job"):
        v.submit_in(VendorSession("local", "line5", "dedicated", "x"), LINE, BELL, 10, "t")


def test_the_relay_is_one_module_with_its_entry_point():
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(relay_source()), mode="r:gz") as tar:
        member = tar.getmember("flux_quantum_relay.py")
        text = tar.extractfile(member).read().decode()
    assert text == RELAY and ENTRY_POINT == "flux_quantum_relay:main"
    assert relay_source() == relay_source()  # the same bytes each time
    assert "AMZN_BRAKET_JOB_TOKEN" in RELAY and "AMZN_BRAKET_JOB_RESULTS_S3_PATH" in RELAY


def test_the_emulators_jobs_answer_as_braket_does(emu, clock):
    kw = {"region_name": "us-east-1", "aws_access_key_id": "a", "aws_secret_access_key": "b"}
    braket = boto3.client("braket", endpoint_url=emu.url, **kw)
    request = {
        "clientToken": "c-1",
        "jobName": "fq-1",
        "roleArn": ROLE,
        "algorithmSpecification": {"scriptModeConfig": {"entryPoint": "m:f", "s3Uri": "s3://b/k"}},
        "outputDataConfig": {"s3Path": f"s3://{emu.bucket}/jobs"},
        "instanceConfig": {"instanceType": "ml.m5.large", "volumeSizeInGb": 30},
        "deviceConfig": {"device": QPU},
    }
    arn = braket.create_job(**request)["jobArn"]
    assert arn == "arn:aws:braket:us-east-1:123456789012:job/fq-1"
    assert braket.create_job(**request)["jobArn"] == arn  # the same clientToken
    with pytest.raises(braket.exceptions.ConflictException):
        braket.create_job(**{**request, "clientToken": "c-2"})  # the name is taken
    with pytest.raises(braket.exceptions.ValidationException):
        braket.create_job(**{**request, "clientToken": "c-3", "jobName": "x", "roleArn": "r"})
    job = braket.get_job(jobArn=arn)
    assert job["status"] == "QUEUED" and job["queueInfo"]["queue"] == "JOBS_QUEUE"
    assert "jobToken" not in job  # Braket never gives the token out
    clock.advance(40)
    job = braket.get_job(jobArn=arn)
    assert job["status"] == "RUNNING" and job["billableDuration"] == 10_000
    with pytest.raises(braket.exceptions.ValidationException):
        braket.create_quantum_task(
            clientToken="t",
            deviceArn=QPU,
            shots=10,
            outputS3Bucket=emu.bucket,
            outputS3KeyPrefix="x",
            action='{"braketSchemaHeader": {"name": "braket.ir.openqasm.program", "version": "1"}, "source": "OPENQASM 3.0;"}',
            jobToken="not-a-token",
        )
    assert braket.cancel_job(jobArn=arn)["cancellationStatus"] == "CANCELLING"
    assert braket.get_job(jobArn=arn)["status"] == "CANCELLED"
    with pytest.raises(braket.exceptions.ResourceNotFoundException):
        braket.get_job(jobArn=arn.replace("fq-1", "fq-9"))


def test_a_priority_task_goes_ahead_of_the_public_ones_not_of_the_running_one():
    spec = Scenario.from_dict({"extends": "default", "devices": [LINE5]}).device(QPU)
    assert spec is not None and spec.queue == QueueSpec(
        depth=20, service_time=10.0, distribution="fixed"
    )
    queue = DeviceQueue(spec, seed=0)
    queue.submit("public", 5.0, shots=0)
    queue.submit("first", 5.0, shots=0, priority=True)
    queue.submit("second", 5.0, shots=0, priority=True)
    assert [queue.progress(t, 5.0).position for t in ("first", "second", "public")] == [1, 2, 23]
    assert queue.priority_size(5.0) == 2
    # The task running at 5 s ends at 10 s: the first priority task starts then.
    assert queue.timeline("first", 10.0).started == 10.0
    assert queue.timeline("second", 30.0).started == 20.0
    assert queue.priority_size(30.0) == 0


def test_a_jobs_own_task_through_the_sdk_rides_it_by_its_environment(emu, clock, monkeypatch):
    """What a step's own later tasks do (``session_environment``): the SDK's
    AwsSession.create_quantum_task adds AMZN_BRAKET_JOB_TOKEN as ``jobToken``."""
    from braket.aws import AwsSession
    from braket.ir.openqasm import Program

    v = vendor(emu, clock)
    session = v.open_session(LINE, "dedicated").session
    assert session is not None
    for key, value in {**emu.env(), **v.session_environment(session)}.items():
        monkeypatch.setenv(key, value)
    braket = boto3.client("braket", region_name="us-east-1")
    sdk = AwsSession(
        boto_session=boto3.session.Session(region_name="us-east-1"), braket_client=braket
    )
    arn = sdk.create_quantum_task(
        clientToken="own-1",
        deviceArn=QPU,
        shots=10,
        outputS3Bucket=emu.bucket,
        outputS3KeyPrefix="own",
        action=Program(source=BELL).json(),
    )
    task = braket.get_quantum_task(quantumTaskArn=arn, additionalAttributeNames=["QueueInfo"])
    assert task["queueInfo"]["queuePriority"] == "Priority" and task["jobArn"] in session.session_id
    v.close_session(session)
