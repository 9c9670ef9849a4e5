"""The emulator's IBM Quantum System side through the real qrmi client (QRMI's
IBMQuantumSystem resource): IAM, the backend's status and lanes as a capacity, jobs whose
input and results pass through the S3 bucket, that queue, complete, fail and are
cancelled then deleted on the emulated clock, refusals (a wrong API key, an unknown
program id, another payload kind), injected faults, target, the settings ``env()`` gives
and the scenario's errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
import qrmi
from served_ibmqs import BACKEND, Served
from served_side import serve_fixture

from flux_quantum.emulator import ScenarioError
from flux_quantum.emulator.ibmqs import IbmQsScenario
from flux_quantum.vendors.ibm.payload import sampler_input, split_result

X_FIRST = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nx q[0];\nc = measure q;\n"


serve = serve_fixture(Served, backends=[BACKEND])


def start(res: Any, program: str = X_FIRST, shots: int = 16, token: str = "tok-1") -> str:
    payload = qrmi.Payload.QiskitPrimitive(
        input=sampler_input(program, shots, token), program_id="sampler"
    )
    return res.task_start(payload)


def test_env_names_every_backend_with_qrmi_settings(serve):
    served = serve(backends=[BACKEND, {"name": "ibm_osaka", "qubits": 3}])
    env = served.service.env(served.url)
    assert env["ibm_kobe_QRMI_IBM_QS_ENDPOINT"] == served.url + "/ibm-qs/api"
    assert env["ibm_osaka_QRMI_IBM_QS_S3_ENDPOINT"] == served.url + "/ibm-qs/s3/"
    assert env["ibm_kobe_QRMI_IBM_QS_IAM_ENDPOINT"] == served.url + "/ibm-qs"
    assert len(env) == 18


def test_status_gives_lanes_as_capacity_less_running_jobs(serve):
    served = serve()
    res = served.resource()
    status = res.status()
    assert status.status == qrmi.ResourceStatusCode.Online
    assert status.pending_job_count is None
    assert (status.capacity.available_slots, status.capacity.max_slots) == (2, 2)
    start(res)
    assert res.status().capacity.available_slots == 1
    ops = [c.operation for c in served.service.calls]
    assert ops[:4] == ["IamToken", "GetBackend", "GetBackendLanes", "ListJobs"]
    assert ops.count("IamToken") == 1  # the token is kept for its lifetime


def test_paused_and_offline_backends(serve, clock):
    served = serve(
        backends=[{**BACKEND, "paused": [[10, 20]]}, {"name": "ibm_down", "status": "offline"}]
    )
    res = served.resource()
    clock.advance(12)
    assert res.status().status == qrmi.ResourceStatusCode.Paused
    clock.advance(10)
    assert res.status().status == qrmi.ResourceStatusCode.Online
    assert served.resource("ibm_down").status().status == qrmi.ResourceStatusCode.Offline


def test_job_input_and_result_pass_through_the_bucket(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res)
    put = json.loads(served.service.stored(f"input_{job}.json") or b"{}")
    assert "flux-quantum-token: tok-1" in put["pubs"][0][0]
    assert res.task_status(job) == qrmi.TaskStatus.Running  # waiting reads Running
    with pytest.raises(qrmi.TaskNotReadyError, match="running"):
        res.task_result(job)
    clock.advance(29)  # the running and the waiting background jobs, 10 s each, then ours
    assert res.task_status(job) == qrmi.TaskStatus.Running
    clock.advance(2)
    assert res.task_status(job) == qrmi.TaskStatus.Completed
    [(counts, _raw)] = split_result(res.task_result(job).value)
    assert counts == {"10": 16}
    assert served.service.calls[-1].operation == "GetObject"
    [billed] = served.service.bill().tasks
    assert billed.state == "COMPLETED" and billed.billed_seconds == pytest.approx(10.0)


def test_failed_job_names_its_reason(serve, clock):
    served = serve(faults=[{"operation": "CreateJob", "fail_job": "calibration drifted"}])
    res = served.resource()
    job = start(res)
    clock.advance(100)
    assert res.task_status(job) == qrmi.TaskStatus.Failed
    with pytest.raises(qrmi.TaskNotReadyError, match="message: calibration drifted"):
        res.task_result(job)


def test_stop_cancels_then_deletes(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res)
    res.task_stop(job)
    ops = [c.operation for c in served.service.calls][-3:]
    assert ops == ["GetJob", "CancelJob", "DeleteJob"]
    assert served.service.job_deleted(job)
    with pytest.raises(qrmi.TaskNotFoundError):
        res.task_status(job)
    [billed] = served.service.bill().tasks
    assert billed.state == "CANCELLED" and billed.billed_seconds is None


def test_refusals(serve):
    served = serve()
    with pytest.raises(Exception, match="401|400|token"):
        served.resource(QRMI_IBM_QS_IAM_APIKEY="wrong").status()
    res = served.resource()
    with pytest.raises(qrmi.InvalidInputError, match="unknown program ID"):
        res.task_start(qrmi.Payload.QiskitPrimitive(input="{}", program_id="qaoa"))
    with pytest.raises(qrmi.UnsupportedPayloadError):
        res.task_start(
            qrmi.Payload.IQMServer(iqmjson="{}", job_type="circuit", use_timeslot=False, tag="t")
        )
    assert served.service.job_ids() == []
    with pytest.raises(Exception, match="400"):
        start(res, program="OPENQASM 3.0;\nqubit[9] q;\nbit[9] c;\nc = measure q;\n")
    assert served.service.job_ids() == []


def test_injected_faults_a_4xx_fails_the_create_a_5xx_is_retried_by_qrmi(serve):
    served = serve(
        faults=[
            {"operation": "CreateJob", "status": 409, "calls": [1]},
            {"operation": "CreateJob", "status": 503, "calls": [2]},
        ]
    )
    res = served.resource()
    with pytest.raises(qrmi.QrmiError, match="409"):
        start(res)
    assert served.service.job_ids() == []
    job = start(res)  # QRMI's own retry policy sends the create again after the 503
    assert served.service.job_ids() == [job]
    creates = [c.status for c in served.service.calls if c.operation == "CreateJob"]
    assert creates == [409, 503, 204]


def test_target_gives_configuration_and_properties(serve):
    doc = json.loads(serve().resource().target().value)
    assert doc["configuration"]["n_qubits"] == 5
    assert doc["properties"]["backend_name"] == "ibm_kobe"


@pytest.mark.parametrize(
    "scenario, field",
    [
        ({"backends": []}, "backends"),
        ({"backends": [{"name": "a-b"}]}, "backends[0].name"),
        (
            {"backends": [BACKEND], "faults": [{"operation": "GetJob", "fail_job": "x"}]},
            "CreateJob",
        ),
        ({"backends": [{"name": "ibm_x", "status": "broken"}]}, "status"),
    ],
)
def test_scenario_errors_name_the_field(scenario, field):
    with pytest.raises(ScenarioError, match=field.replace("[", r"\[").replace("]", r"\]")):
        IbmQsScenario.from_dict(scenario)
