"""``FelisVendor`` against the emulator's Felis side, through the real qrmi client: probe
(QRMI says Online and nothing else), submit of a QIR program, poll, result counts (result
0 first), cancel, a failed job, programs it refuses before anything is sent (and while
the job is held: ``program_kinds``), the settings it needs, never a second job after a
create whose outcome is unknown, and the pure program check."""

from __future__ import annotations

from typing import Any

import pytest
from served_felis import BELL, FLIP, TARGETS, Served, q, qir, r

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.emulator import ManualClock
from flux_quantum.protocol.programs import QIR, kind_of
from flux_quantum.selection.program_kinds import cannot_run
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import AccessDenied, Conflict, InvalidRequest
from flux_quantum.vendors.felis.program import check, histogram
from flux_quantum.vendors.felis.vendor import FelisSettings, FelisVendor

CATS = Device(
    "ab-cats", "alice-bob-felis", "ab_emu_6q_physical_cats", "simulator", 6, "eu-west-3",
    PriceModel(per_task=0.0),
)  # fmt: skip
BOSON = Device(
    "ab-boson", "alice-bob-felis", "ab_qpu_1q_boson_4a", "qpu", 1, "eu-west-3",
    PriceModel(per_minute=30.0),
)  # fmt: skip
QASM = "OPENQASM 3.0;\nqubit[1] q;\nbit[1] c;\nx q[0];\nc[0] = measure q[0];\n"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def served(clock, emulator_tier) -> Any:
    served = Served({"targets": TARGETS}, clock)
    yield served
    served.server.stop()


def vendor(served: Served, attempts: int = 1, **environ: str) -> FelisVendor:
    env = {**served.service.env(served.url), **environ}
    return FelisVendor(
        devices=[CATS, BOSON], environ=env, retry=RetryBudget(attempts=attempts),
        sleep=lambda s: None,
    )  # fmt: skip


def test_probe_is_what_qrmi_says(served):
    snapshot = vendor(served).probe(CATS)
    assert snapshot.status is DeviceStatus.ONLINE and snapshot.queue_depth is None
    assert served.service.calls == []


def test_bell_runs_and_counts(served, clock):
    v = vendor(served)
    ref = v.submit(CATS, BELL, 100, "tok-bell")
    assert v.poll(ref).state is TaskState.QUEUED
    clock.advance(25)
    assert v.poll(ref).state is TaskState.RUNNING
    clock.advance(10)
    assert v.poll(ref).state is TaskState.COMPLETED
    counts = v.result(ref).counts
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 100


def test_counts_are_written_result_0_first(served, clock):
    v = vendor(served)
    ref = v.submit(CATS, FLIP, 10, "tok-flip")
    clock.advance(100)
    assert v.result(ref).counts == {"10": 10}


def test_cancel_and_failure(clock, emulator_tier):
    served = Served(
        {"targets": TARGETS, "faults": [{"operation": "CreateJob", "fail_job": "cat lost",
                                         "calls": [2]}]},
        clock,
    )  # fmt: skip
    try:
        v = vendor(served)
        waiting = v.submit(CATS, FLIP, 10, "tok-c")
        v.cancel(waiting)
        assert v.poll(waiting).state is TaskState.CANCELLED
        failing = v.submit(CATS, FLIP, 10, "tok-f")
        clock.advance(100)
        assert v.poll(failing).state is TaskState.FAILED
    finally:
        served.server.stop()


def test_programs_felis_cannot_run_are_refused_before_anything_is_sent(served):
    v = vendor(served)
    with pytest.raises(InvalidRequest, match=r"takes QIR programs only .*OpenQASM circuit"):
        v.submit(CATS, QASM, 10, "tok-q")
    # The same sentence refuses the job while it is held, before any task.
    assert "the program is an OpenQASM circuit" in cannot_run(QASM, [CATS])["ab-cats"]
    assert cannot_run(BELL, [CATS]) == {}
    assert "2 qubits and the device has 1" in cannot_run(BELL, [BOSON])["ab-boson"]
    with pytest.raises(InvalidRequest, match="2 qubits"):
        v.submit(BOSON, BELL, 10, "tok-w")
    assert served.service.job_ids() == []


def test_qir_is_its_own_kind_and_other_vendors_refuse_it():
    assert kind_of(BELL) == QIR and kind_of(QASM) != QIR
    ibm = Device("kobe", "ibm-quantum-system", "ibm_kobe", "qpu", 5, "us-east-1", PriceModel())
    assert "the program is a QIR program" in cannot_run(BELL, [ibm])["kobe"]
    assert check(BELL, 2) is None and "not QIR" in (check(QASM, 2) or "")
    runtime_only = qir().replace(
        "entry:\n", "entry:\n  call void @__quantum__rt__initialize(i8* null)\n"
    )
    assert "no quantum instruction" in (check(runtime_only, 2) or "")
    assert histogram({"10": 3, "01": 1}) == "10,1\n01,3\n"


def test_missing_key_is_named(served):
    env = {k: v for k, v in served.service.env(served.url).items() if "API_KEY" not in k}
    v = FelisVendor(devices=[CATS], environ=env)
    with pytest.raises(AccessDenied, match="ab_emu_6q_physical_cats_QRMI_AB_FELIS_API_KEY"):
        v.submit(CATS, BELL, 10, "tok-k")


def test_catalog_endpoint_and_a_shared_key(served, clock):
    key = served.service.api_key()
    v = FelisVendor(
        FelisSettings.from_catalog({"endpoint": served.url + "/felis"}),
        devices=[CATS],
        environ={"QRMI_AB_FELIS_API_KEY": key},
    )
    ref = v.submit(CATS, FLIP, 5, "tok-cat")
    clock.advance(100)
    assert v.result(ref).counts == {"10": 5}


def test_a_job_whose_upload_failed_is_never_made_again(clock, emulator_tier):
    served = Served(
        {"targets": TARGETS, "faults": [{"operation": "UploadInput", "status": 500}]}, clock
    )
    try:
        v = vendor(served, attempts=3)
        with pytest.raises(Conflict, match="tok-up"):
            v.submit(CATS, FLIP, 10, "tok-up")
        assert len(served.service.job_ids()) == 1
        with pytest.raises(Conflict):
            v.find_task(CATS, "tok-up", since=0.0)
    finally:
        served.server.stop()


def test_a_qubit_index_past_the_register_is_read(served, clock):
    program = qir(f"x__body({q(3)})", f"mz__body({q(3)}, {r(0)})")
    ref = vendor(served).submit(CATS, program, 4, "tok-3")
    clock.advance(100)
    assert vendor(served).result(ref).counts == {"1": 4}


def test_billed_seconds_is_the_jobs_run_time_the_bill_charges(served, clock):
    v = vendor(served)
    ref = v.submit(CATS, BELL, 100, "tok-usage")
    assert v.billed_seconds(ref) is None  # not run yet: no EXECUTING and SUCCEEDED events
    clock.advance(100)
    assert v.poll(ref).state is TaskState.COMPLETED
    [billed] = [t for t in served.service.bill().tasks if t.id == ref.task_id]
    assert billed.billed_seconds and v.billed_seconds(ref) == pytest.approx(billed.billed_seconds)
    assert served.service.calls[-1].operation == "GetJob", served.service.calls[-1]
