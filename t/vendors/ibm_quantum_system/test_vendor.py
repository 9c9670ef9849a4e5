"""``IbmQuantumSystemVendor`` against the emulator's IBM Quantum System side, through the
real qrmi client: probe (online with the lanes as slots, PAUSED), submit of OpenQASM 3,
poll, result counts, a failed job's reason, cancel (QRMI deletes the job: it polls as
CANCELLED), the settings it needs, program kinds it refuses before anything is sent
(also while the job is held: ``program_kinds``) and never a second job after a create
whose answer was lost."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from compiled import EAGLE, isa
from served_ibmqs import BACKEND, Served

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.emulator import ManualClock
from flux_quantum.selection.program_kinds import cannot_run
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import AccessDenied, Conflict, InvalidRequest
from flux_quantum.vendors.ibm_quantum_system.vendor import (
    IbmQuantumSystemSettings,
    IbmQuantumSystemVendor,
)

# A Bell pair as the compile stage writes it for the backend (Eagle's gates, a line of 5):
# an IBM Quantum System runs ISA circuits only.
BELL = isa(
    'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n',
    basis=EAGLE,
)
KOBE = Device(
    "kobe",
    "ibm-quantum-system",
    "ibm_kobe",
    "qpu",
    5,
    "ap-northeast-1",
    PriceModel(per_minute=96.0),
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def served(clock, emulator_tier) -> Any:
    served = Served({"backends": [{**BACKEND, "paused": [[100, 200]]}]}, clock)
    yield served
    served.server.stop()


def vendor(served: Served, attempts: int = 1, **environ: str) -> IbmQuantumSystemVendor:
    env = {**served.service.env(served.url), **environ}
    return IbmQuantumSystemVendor(
        devices=[KOBE], environ=env, retry=RetryBudget(attempts=attempts), sleep=lambda s: None
    )


def test_probe_reads_lanes_and_pause(served, clock):
    v = vendor(served)
    snapshot = v.probe(KOBE)
    assert snapshot.status is DeviceStatus.ONLINE and snapshot.capacity == (2, 2)
    assert snapshot.queue_depth is None and not v.reports_positions(KOBE)
    v.submit(KOBE, BELL, 10, "tok-a")
    assert v.probe(KOBE).capacity == (1, 2)
    clock.advance(150)
    assert v.probe(KOBE).status is DeviceStatus.PAUSED


def test_bell_runs_and_counts(served, clock):
    v = vendor(served)
    ref = v.submit(KOBE, BELL, 200, "tok-bell")
    assert v.poll(ref).state is TaskState.RUNNING  # the API has no separate waiting state
    clock.advance(31)
    assert v.poll(ref).state is TaskState.COMPLETED
    counts = v.result(ref).counts
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 200
    put = json.loads(served.service.stored(f"input_{ref.task_id}.json") or b"{}")
    assert "flux-quantum-token: tok-bell" in put["pubs"][0][0]


def test_failed_job_gives_its_reason(clock, emulator_tier):
    served = Served(
        {"backends": [BACKEND], "faults": [{"operation": "CreateJob", "fail_job": "drifted"}]},
        clock,
    )
    try:
        v = vendor(served)
        ref = v.submit(KOBE, BELL, 10, "tok-f")
        clock.advance(100)
        snapshot = v.poll(ref)
        assert snapshot.state is TaskState.FAILED and snapshot.message == "drifted (1517)"
    finally:
        served.server.stop()


def test_cancel_polls_as_cancelled_though_qrmi_deleted_the_job(served):
    v = vendor(served)
    ref = v.submit(KOBE, BELL, 10, "tok-c")
    v.cancel(ref)
    assert served.service.job_deleted(ref.task_id)
    snapshot = v.poll(ref)
    assert snapshot.state is TaskState.CANCELLED and "task_stop" in (snapshot.message or "")
    other = vendor(served)  # another process never stopped it: the job is simply gone
    with pytest.raises(Exception, match="not found"):
        other.poll(ref)


def test_programs_it_cannot_run_are_refused_before_anything_is_sent(served):
    v = vendor(served)
    pulser = json.dumps({"register": [], "channels": {}, "operations": []})
    iqm = json.dumps({"circuits": [{"name": "c", "instructions": []}]})
    for program, kind in ((pulser, "a Pulser sequence"), (iqm, "an IQM JSON circuit")):
        with pytest.raises(InvalidRequest, match=f"takes OpenQASM circuits only .*is {kind}"):
            v.submit(KOBE, program, 10, "tok-k")
        # The same sentence refuses the job while it is held, before any task.
        assert f"is {kind}" in cannot_run(program, [KOBE])["kobe"]
    assert cannot_run(BELL, [KOBE]) == {}
    assert served.service.job_ids() == []
    assert not [c for c in served.service.calls if c.operation == "PutObject"]


def test_missing_settings_are_named_without_values(served):
    env = {k: v for k, v in served.service.env(served.url).items() if "SECRET" not in k}
    v = IbmQuantumSystemVendor(devices=[KOBE], environ=env, retry=RetryBudget(attempts=1))
    with pytest.raises(AccessDenied, match="ibm_kobe_QRMI_IBM_QS_AWS_SECRET_ACCESS_KEY") as err:
        v.submit(KOBE, BELL, 10, "tok-s")
    assert served.service.scenario.access_key_id not in str(err.value)


def test_catalog_settings_fill_the_non_secret_ones(served, clock):
    env = served.service.env(served.url)
    secret = {k: v for k, v in env.items() if k.split("_QRMI_IBM_QS_")[1] in (
        "IAM_APIKEY", "SERVICE_CRN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}  # fmt: skip
    catalog = {
        "endpoint": env["ibm_kobe_QRMI_IBM_QS_ENDPOINT"],
        "iam_endpoint": env["ibm_kobe_QRMI_IBM_QS_IAM_ENDPOINT"],
        "s3_endpoint": env["ibm_kobe_QRMI_IBM_QS_S3_ENDPOINT"],
        "s3_bucket": env["ibm_kobe_QRMI_IBM_QS_S3_BUCKET"],
        "s3_region": "us-east-1",
        "job_timeout": "600",
    }
    v = IbmQuantumSystemVendor(
        IbmQuantumSystemSettings.from_catalog(catalog), devices=[KOBE], environ=secret
    )
    ref = v.submit(KOBE, BELL, 10, "tok-cat")
    clock.advance(31)
    assert sum(v.result(ref).counts.values()) == 10


def test_lost_create_answer_is_never_repeated(clock, emulator_tier):
    served = Served(
        {"backends": [BACKEND], "faults": [
            {"operation": "CreateJob", "after_commit": True, "reset": True, "calls": [1]}]},
        clock,
    )  # fmt: skip
    try:
        v = vendor(served, attempts=3)
        with pytest.raises(Conflict, match="tok-lost"):
            v.submit(KOBE, BELL, 10, "tok-lost")
        assert len(served.service.job_ids()) == 1  # the one the lost answer made
        with pytest.raises(Conflict):
            v.find_task(KOBE, "tok-lost", since=0.0)
    finally:
        served.server.stop()


def test_billed_seconds_is_the_jobs_qpu_time_the_bill_charges(served, clock):
    v = vendor(served)
    ref = v.submit(KOBE, BELL, 200, "tok-usage")
    assert v.billed_seconds(ref) is None  # not run yet: no usage
    clock.advance(60)
    assert v.poll(ref).state is TaskState.COMPLETED
    [billed] = [t for t in served.service.bill().tasks if t.id == ref.task_id]
    assert billed.billed_seconds and v.billed_seconds(ref) == pytest.approx(billed.billed_seconds)
    ops = [c.operation for c in served.service.calls]
    assert ops[-2:] == ["IamToken", "GetJob"], ops
    unknown = dataclasses.replace(ref, task_id="no-such-job")
    assert v.billed_seconds(unknown) is None  # a job the API does not know: nothing billed
