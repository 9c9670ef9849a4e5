"""The emulator's Alice & Bob Felis side through the real qrmi client (QRMI's
AliceBobFelis resource): status (QRMI asks nothing), jobs created, given their QIR input,
queued, run, completed, failed, cancelled on the emulated clock, the HISTOGRAM output,
transpilation refused for an instruction the target lacks, refusals (a wrong API key, an
unknown job, too many shots), injected faults, target, the settings ``env()`` gives and
the scenario's errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
import qrmi
from served_felis import BELL, FLIP, TARGETS, Served
from served_side import serve_fixture

from flux_quantum.emulator import ScenarioError
from flux_quantum.emulator.felis import FelisScenario
from flux_quantum.vendors.felis.program import counts_from_histogram

serve = serve_fixture(Served, targets=TARGETS)


def start(res: Any, program: str = FLIP, shots: int = 20) -> str:
    payload = qrmi.Payload.AliceBobFelis(
        human_qir=program, input_params=json.dumps({"nbShots": shots})
    )
    return res.task_start(payload)


def test_env_names_every_target_by_its_qrmi_resource_id(serve):
    served = serve()
    env = served.service.env(served.url)
    assert env["ab_emu_6q_physical_cats_QRMI_AB_FELIS_BASE_ENDPOINT"] == served.url + "/felis"
    assert "ab_qpu_1q_boson_4a_QRMI_AB_FELIS_API_KEY" in env and len(env) == 4


def test_status_asks_felis_nothing(serve):
    served = serve()
    status = served.resource().status()
    assert status.status == qrmi.ResourceStatusCode.Online
    assert status.pending_job_count is None and status.capacity is None
    assert served.service.calls == []


def test_job_is_created_uploaded_queued_run_and_counted(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res, BELL, 200)
    assert [c.operation for c in served.service.calls] == ["CreateJob", "UploadInput"]
    assert res.task_status(job) == qrmi.TaskStatus.Queued
    clock.advance(25)  # the running and the waiting background jobs, 10 s each
    assert res.task_status(job) == qrmi.TaskStatus.Running
    clock.advance(10)
    assert res.task_status(job) == qrmi.TaskStatus.Completed
    counts = counts_from_histogram(res.task_result(job).value)
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 200
    [billed] = served.service.bill().tasks
    assert billed.state == "COMPLETED" and billed.billed_seconds == pytest.approx(10.0)


def test_histogram_is_in_qiskit_order(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res, FLIP, 20)
    clock.advance(100)
    assert res.task_result(job).value == "01,20\n"  # result 1 = 0, result 0 = 1
    assert counts_from_histogram(res.task_result(job).value) == {"10": 20}


def test_instruction_the_target_lacks_fails_transpilation(serve):
    served = serve()
    res = served.resource("ab_qpu_1q_boson_4a")
    job = start(res, BELL.replace("%Qubit* inttoptr (i64 1 to %Qubit*)", "%Qubit* null"))
    assert res.task_status(job) == qrmi.TaskStatus.Failed
    with pytest.raises(qrmi.QrmiError, match="409"):
        res.task_result(job)
    with pytest.raises(qrmi.QrmiError, match="409"):
        res.task_stop(job)  # QRMI deletes a failed job, which Felis refuses


def test_failed_and_cancelled_jobs(serve, clock):
    served = serve(faults=[{"operation": "CreateJob", "fail_job": "cat lost", "calls": [1]}])
    res = served.resource()
    failed = start(res)
    clock.advance(100)
    assert res.task_status(failed) == qrmi.TaskStatus.Failed
    waiting = start(res)
    res.task_stop(waiting)
    assert res.task_status(waiting) == qrmi.TaskStatus.Cancelled
    assert [c.operation for c in served.service.calls][-3:] == ["GetJob", "CancelJob", "GetJob"]
    res.task_stop(waiting)  # QRMI stops a cancelled job without a DELETE
    assert served.service.calls[-1].operation == "GetJob"


def test_refusals(serve):
    served = serve()
    with pytest.raises(qrmi.QrmiError, match="401|Invalid API key"):
        start(served.resource(QRMI_AB_FELIS_API_KEY="dXNlcjpwdw=="))
    res = served.resource()
    with pytest.raises(qrmi.TaskNotFoundError):
        res.task_status("no-such-job")
    with pytest.raises(qrmi.QrmiError):
        start(res, shots=1_000_000)
    with pytest.raises(qrmi.UnsupportedPayloadError):
        res.task_start(qrmi.Payload.QiskitPrimitive(input="{}", program_id="sampler"))
    assert served.service.job_ids() == []


def test_injected_fault_answers_with_felis_error_body(serve):
    served = serve(faults=[{"operation": "UploadInput", "status": 500, "calls": [1]}])
    res = served.resource()
    with pytest.raises(qrmi.QrmiError, match="input upload failed for created job"):
        start(res)
    [job] = served.service.job_ids()  # the job exists, without its input
    assert res.task_status(job) == qrmi.TaskStatus.Queued


def test_target_lists_the_resource_s_own_entry(serve):
    doc = json.loads(serve().resource().target().value)
    assert doc["name"] == "EMU:6Q:PHYSICAL_CATS" and doc["numQubits"] == 6
    assert {"signature": "__quantum__qis__mz__body"} in doc["instructions"]


@pytest.mark.parametrize(
    "scenario, field",
    [
        ({"targets": []}, "targets"),
        ({"targets": [{"name": "emu-6q"}]}, r"targets\[0\].name"),
        ({"targets": [{"name": "QPU:1Q:X", "instructions": ["ccx"]}]}, "instructions"),
        ({"targets": TARGETS, "faults": [{"operation": "GetJob", "fail_job": "x"}]}, "CreateJob"),
    ],
)
def test_scenario_errors_name_the_field(scenario, field):
    with pytest.raises(ScenarioError, match=field):
        FelisScenario.from_dict(scenario)
