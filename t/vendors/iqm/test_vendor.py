"""``IqmVendor`` against the emulator's IQM side, through the real qrmi client: probe
(online, PAUSED under maintenance), submit of OpenQASM 3 (translated to prx/cz) and of IQM
JSON, poll, result counts, cancel, billed seconds, refusals (a program IQM cannot take, a
paused device, too many jobs), never a second job after a create whose answer was lost,
and the pure program check."""

from __future__ import annotations

import json
from typing import Any

import pytest
from served_iqm import DEVICE, Served

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.emulator import ManualClock
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    DeviceOffline,
    InvalidRequest,
    QuotaExceeded,
)
from flux_quantum.vendors.iqm.program import check
from flux_quantum.vendors.iqm.vendor import IqmVendor

BELL = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
GARNET = Device("garnet", "iqm", "garnet", "QPU", 5, "eu-north", PriceModel(per_minute=18.0))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def served(request, clock, emulator_tier) -> Any:
    top = getattr(request, "param", {})
    served = Served({"devices": [DEVICE], **top}, clock)
    yield served
    served.server.stop()


def vendor(served: Served, attempts: int = 1, **environ: str) -> IqmVendor:
    env = {**served.service.env(served.url), **environ}
    return IqmVendor(
        devices=[GARNET], environ=env, retry=RetryBudget(attempts=attempts), sleep=lambda s: None
    )


@pytest.mark.emulator
def test_probe_reads_queue_and_maintenance(clock):
    served = Served({"devices": [{**DEVICE, "paused": [[10, 20]]}]}, clock)
    try:
        v = vendor(served)
        snapshot = v.probe(GARNET)
        assert snapshot.status is DeviceStatus.ONLINE and snapshot.queue_depth == 2
        clock.advance(12)
        assert v.probe(GARNET).status is DeviceStatus.PAUSED
    finally:
        served.server.stop()


def test_openqasm_bell_runs_and_counts(served, clock):
    v = vendor(served)
    ref = v.submit(GARNET, BELL, 200, "tok-bell")
    waiting = v.poll(ref)
    # IQM's queue_position of a waiting job: the two ahead, then ours (1: next).
    assert waiting.state is TaskState.QUEUED and waiting.position == 3, waiting
    assert v.reports_positions(GARNET)
    assert served.service.calls[-1].operation == "GetJob"  # a plain read, no long poll
    clock.advance(100)
    assert v.poll(ref).state is TaskState.COMPLETED
    counts = v.result(ref).counts
    assert set(counts) <= {"00", "11"} and sum(counts.values()) == 200 and len(counts) == 2
    assert v.billed_seconds(ref) == pytest.approx(10.0)
    assert served.service.job_tag(ref.task_id) == "tok-bell"


@pytest.mark.parametrize(
    "body, expected",
    [
        ("h q[0];\nrz(pi) q[0];\nh q[0];\n", "1"),  # HZH = X, z virtual
        ("sx q[0];\nsx q[0];\n", "1"),
        ("h q[0];\ns q[0];\ns q[0];\nh q[0];\n", "1"),
        (
            "ry(pi/2) q[0];\nrx(-pi/2) q[0];\nt q[0];\ntdg q[0];\nrx(pi/2) q[0];\nry(-pi/2) q[0];\n",
            "0",
        ),
    ],
)
def test_translation_keeps_the_circuit(served, clock, body, expected):
    v = vendor(served)
    program = f"OPENQASM 3.0;\nqubit[1] q;\nbit[1] c;\n{body}c[0] = measure q[0];\n"
    ref = v.submit(GARNET, program, 50, "tok-t")
    clock.advance(100)
    assert v.result(ref).counts == {expected: 50}


def test_iqm_json_program_is_sent_as_is(served, clock):
    v = vendor(served)
    circuit = {"name": "c", "instructions": [
        {"name": "prx", "qubits": ["QB2"], "args": {"angle_t": 0.5, "phase_t": 0.0}},
        {"name": "measure", "qubits": ["QB1", "QB2"], "args": {"key": "m"}}]}  # fmt: skip
    ref = v.submit(GARNET, json.dumps(circuit), 10, "tok-json")
    clock.advance(100)
    assert v.result(ref).counts == {"01": 10}


def test_programs_iqm_cannot_take_are_refused_in_one_sentence(served):
    v = vendor(served)
    with pytest.raises(InvalidRequest, match="OpenQASM 2"):
        v.submit(GARNET, "OPENQASM 2.0;\nqreg q[1];\n", 10, "tok-2")
    assert served.service.job_ids() == []
    assert check(BELL, 2) is None
    assert "device has 1" in (check(BELL, 1) or "")
    assert "ccx" in (check(BELL.replace("cx q[0]", "ccx q[0], q[1]"), 5) or "")
    assert "neither OpenQASM 3 nor IQM JSON" in (check("print(1)", 5) or "")


def test_cancel_a_waiting_job(served):
    v = vendor(served)
    ref = v.submit(GARNET, BELL, 10, "tok-c")
    v.cancel(ref)
    assert v.poll(ref).state is TaskState.CANCELLED


@pytest.mark.emulator
def test_failed_job_says_why(clock):
    served = Served(
        {"devices": [DEVICE], "faults": [{"operation": "SubmitJob", "fail_job": "drift"}]}, clock
    )
    try:
        v = vendor(served)
        ref = v.submit(GARNET, BELL, 10, "tok-f")
        clock.advance(100)
        snapshot = v.poll(ref)
        assert snapshot.state is TaskState.FAILED and "drift" in (snapshot.message or "")
    finally:
        served.server.stop()


@pytest.mark.emulator
def test_paused_device_refuses_then_the_same_token_creates_once(clock):
    served = Served({"devices": [{**DEVICE, "paused": [[0, 20]]}]}, clock)
    try:
        v = vendor(served)
        with pytest.raises(DeviceOffline):
            v.submit(GARNET, BELL, 10, "tok-p")
        clock.advance(25)
        ref = v.submit(GARNET, BELL, 10, "tok-p")  # a 409 made nothing: creating is safe
        assert served.service.job_ids() == [ref.task_id]
        assert v.find_task(GARNET, "tok-p", since=0.0) == ref
    finally:
        served.server.stop()


@pytest.mark.emulator
def test_too_many_jobs_is_a_quota(clock):
    served = Served({"devices": [{**DEVICE, "max_slots": 1}]}, clock)
    try:
        v = vendor(served)
        v.submit(GARNET, BELL, 10, "tok-a")
        with pytest.raises(QuotaExceeded):
            v.submit(GARNET, BELL, 10, "tok-b")
    finally:
        served.server.stop()


@pytest.mark.emulator
def test_a_lost_create_is_never_made_twice(clock):
    lost = {
        "operation": "SubmitJob",
        "reset": True,
        "after_commit": True,
        "delay": 0.01,
        "calls": [1],
    }
    served = Served({"devices": [DEVICE], "faults": [lost]}, clock)
    try:
        v = vendor(served, attempts=3)
        with pytest.raises(Conflict, match="tag tok-lost"):
            v.submit(GARNET, BELL, 10, "tok-lost")
        with pytest.raises(Conflict):
            v.submit(GARNET, BELL, 10, "tok-lost")
        assert len(served.service.job_ids()) == 1  # the job the lost answer made
        assert served.service.counts()[0]["SubmitJob"] == 1
        with pytest.raises(Conflict):
            vendor(served).find_task(GARNET, "tok-lost", since=0.0)  # after a restart
    finally:
        served.server.stop()


def test_no_token_is_access_denied_without_values(served):
    env = {k: v for k, v in served.service.env(served.url).items() if "TOKEN" not in k}
    v = IqmVendor(devices=[GARNET], environ=env, retry=RetryBudget(attempts=1))
    with pytest.raises(AccessDenied, match="garnet_QRMI_IQM_ISA_TOKEN") as raised:
        v.submit(GARNET, BELL, 10, "tok-n")
    assert served.url not in str(raised.value)
    assert v.probe(GARNET).status is DeviceStatus.UNREACHABLE
