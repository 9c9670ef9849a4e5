"""The emulator's IQM side through the real qrmi client (QRMI's IQMServer resource): the
quantum computer's status (online, maintenance = Paused, offline), jobs that queue, run,
complete, fail and are cancelled on the emulated clock, results, refusals (a circuit wider
than the device, a paused device, more jobs than the slots), injected faults, target, the
settings ``env()`` gives and the scenario's errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
import qrmi
from served_iqm import DEVICE, Served
from served_side import serve_fixture

from flux_quantum.emulator import ScenarioError
from flux_quantum.emulator.iqm import IqmScenario
from flux_quantum.vendors.iqm.program import counts_from_measurements, run_request

X_BOTH = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nx q[0];\nx q[1];\nc = measure q;\n"


serve = serve_fixture(Served, devices=[DEVICE])


def start(res: Any, program: str = X_BOTH, shots: int = 32, tag: str | None = "tok-1") -> str:
    body = run_request(program, shots, 5) if program.startswith("OPENQASM") else program
    payload = qrmi.Payload.IQMServer(iqmjson=body, job_type="circuit", use_timeslot=False, tag=tag)
    return res.task_start(payload)


def test_env_names_every_device_with_qrmi_settings(serve):
    served = serve(devices=[DEVICE, {"id": "sirius", "qubits": 16}])
    env = served.service.env(served.url)
    assert env["garnet_QRMI_IQM_ISA_ENDPOINT"] == served.url + "/iqm"
    assert env["sirius_QRMI_IQM_ISA_TOKEN"] == "emulator-iqm-token"
    assert len(env) == 4


def test_status_online_with_queue_length_and_health(serve, clock):
    served = serve()
    status = served.resource().status()
    assert status.status == qrmi.ResourceStatusCode.Online
    assert status.pending_job_count == 2 and status.healthy is True
    assert status.capacity is None  # qrmi 0.26.4 never fills it for IQM
    clock.advance(25)
    assert served.resource().status().pending_job_count == 0


def test_job_queues_runs_completes_and_is_billed(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res)
    assert res.task_status(job) == qrmi.TaskStatus.Queued
    assert served.service.job_tag(job) == "tok-1"
    clock.advance(35)  # the running and the two waiting background jobs, 10 s each
    assert res.task_status(job) == qrmi.TaskStatus.Running
    clock.advance(10)
    assert res.task_status(job) == qrmi.TaskStatus.Completed
    value = json.loads(res.task_result(job).value)
    assert counts_from_measurements(value["measurements"][0]) == {"11": 32}
    assert value["measurement_counts"] == [
        {"measurement_keys": ["c_0", "c_1"], "counts": {"11": 32}}
    ]
    bill = served.service.bill()
    (billed,), sessions = bill.tasks, bill.sessions
    assert billed.state == "COMPLETED" and billed.billed_seconds == 10.0 and sessions == []
    assert billed.cost == pytest.approx(3.0) and billed.token == "tok-1"


def test_result_before_completion_is_a_missing_artifact(serve):
    served = serve()
    res = served.resource()
    job = start(res)
    assert json.loads(res.task_result(job).value) == {
        "measurements": None,
        "measurement_counts": None,
    }


def test_task_stop_cancels_a_waiting_job(serve, clock):
    served = serve()
    res = served.resource()
    job = start(res)
    res.task_stop(job)
    assert res.task_status(job) == qrmi.TaskStatus.Cancelled
    clock.advance(100)
    assert res.task_status(job) == qrmi.TaskStatus.Cancelled
    (billed,) = served.service.bill().tasks
    assert billed.state == "CANCELLED" and billed.cost == 0.0
    assert served.service.counts()[0]["CancelJob"] == 1


def test_maintenance_window_is_paused_and_refuses_jobs(serve, clock):
    served = serve(devices=[{**DEVICE, "paused": [[10, 20]], "offline": [[30, 40]]}])
    res = served.resource()
    clock.advance(12)
    status = res.status()
    assert status.status == qrmi.ResourceStatusCode.Paused and status.healthy is None
    with pytest.raises(Exception, match="409"):
        start(res)
    assert served.service.job_ids() == []
    clock.advance(20)  # t = 32: offline
    assert res.status().status == qrmi.ResourceStatusCode.Offline
    clock.advance(10)
    assert res.status().status == qrmi.ResourceStatusCode.Online
    start(res)
    assert len(served.service.job_ids()) == 1


def test_circuit_wider_than_the_device_is_refused(serve):
    served = serve()
    wide = {"circuits": [{"name": "w", "instructions": [
        {"name": "prx", "qubits": ["QB6"], "args": {"angle_t": 0.5, "phase_t": 0.0}},
        {"name": "measure", "qubits": ["QB6"], "args": {"key": "m"}}]}], "shots": 10}  # fmt: skip
    with pytest.raises(qrmi.InvalidInputError, match="QB6"):
        start(served.resource(), json.dumps(wide))
    assert served.service.job_ids() == []


def test_iqm_json_circuit_runs_as_sent(serve, clock):
    served = serve()
    res = served.resource()
    circuit = {"name": "flip", "instructions": [
        {"name": "prx", "qubits": ["QB3"], "args": {"angle_t": 0.5, "phase_t": 0.25}},
        {"name": "measure", "qubits": ["QB3", "QB1"], "args": {"key": "m"}}]}  # fmt: skip
    job = start(res, json.dumps({"circuits": [circuit], "shots": 20}))
    clock.advance(100)
    assert json.loads(res.task_result(job).value)["measurements"] == [{"m": [[1, 0]] * 20}]


def test_more_jobs_than_slots_are_refused(serve):
    served = serve(devices=[{**DEVICE, "max_slots": 1}])
    res = served.resource()
    start(res)
    with pytest.raises(Exception, match="403"):
        start(res)
    assert len(served.service.job_ids()) == 1


def test_fault_answers_the_first_create_with_503(serve):
    served = serve(faults=[{"operation": "SubmitJob", "status": 503, "calls": [1]}])
    res = served.resource()
    with pytest.raises(Exception, match="503"):
        start(res)
    start(res)
    assert len(served.service.job_ids()) == 1
    calls, effects = served.service.counts()
    assert calls["SubmitJob"] == 2 and effects == {"error:503": 1}


def test_fail_job_fault_fails_the_job(serve, clock):
    served = serve(faults=[{"operation": "SubmitJob", "fail_job": "calibration drifted"}])
    res = served.resource()
    job = start(res)
    clock.advance(100)
    assert res.task_status(job) == qrmi.TaskStatus.Failed


def test_wrong_token_is_unauthorized(serve):
    served = serve()
    with pytest.raises(qrmi.AuthenticationFailedError):
        served.resource(QRMI_IQM_ISA_TOKEN="not-it").status()


def test_unknown_job_and_device_are_not_found(serve):
    served = serve()
    with pytest.raises(qrmi.TaskNotFoundError):
        served.resource().task_status("00000000-0000-4000-8000-000000000000")
    config = {k.split("_", 1)[1]: v for k, v in served.service.env(served.url).items()}
    other = qrmi.QuantumResource.from_config("emerald", qrmi.ResourceType.IQMServer, config)
    with pytest.raises(qrmi.ResourceNotFoundError):
        other.status()


def test_target_and_metadata(serve):
    res = serve().resource()
    target = json.loads(res.target().value)
    assert target["dynamic_quantum_architecture"]["qubits"] == ["QB1", "QB2", "QB3", "QB4", "QB5"]
    assert set(target) == {"dynamic_quantum_architecture", "calibration_set", "quality_metrics",
                           "static_quantum_architecture"}  # fmt: skip
    assert res.metadata() == {"backend_name": "garnet"}


def test_default_scenario_and_errors_name_the_field():
    default = IqmScenario.default()
    assert [(d.id, d.qubits) for d in default.devices] == [("garnet", 20), ("radiance", 54)]
    with pytest.raises(ScenarioError, match=r"devices\[0\]\.id must be letters and digits only"):
        IqmScenario.from_dict({"devices": [{"id": "garnet_mock"}]})
    with pytest.raises(ScenarioError, match="max_slots must be an integer >= 1"):
        IqmScenario.from_dict({"devices": [{"id": "g", "max_slots": 0}]})
    with pytest.raises(ScenarioError, match=r"faults\[0\] needs exactly one effect"):
        IqmScenario.from_dict({"devices": [DEVICE], "faults": [{"operation": "GetJob"}]})
    with pytest.raises(ScenarioError, match=r"paused\[0\] must end after it starts"):
        IqmScenario.from_dict({"devices": [{"id": "g", "paused": [[5, 1]]}]})
