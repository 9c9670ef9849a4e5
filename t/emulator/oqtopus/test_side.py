"""The emulator's OQTOPUS side through the real oqtopus-client SDK (OQTOPUS Cloud's User
API): devices with their pending jobs and maintenance, sampling jobs registered, uploaded
through the presigned form, submitted, queued, run, succeeded, failed, cancelled on the
emulated clock, their counts downloaded through presigned URLs, the search by name, the
refusals (a wrong token, an unknown device or job, a job type it does not serve, a
cancel of a finished job), injected faults, the bill, the settings ``env()`` gives and the
scenario's errors."""

from __future__ import annotations

import pytest
from oqtopus_client import OqtopusJobSpec, UserApiError
from served_oqtopus import BELL, DEVICES, FLIP, Served
from served_side import serve_fixture

from flux_quantum.emulator import ScenarioError
from flux_quantum.emulator.oqtopus import OqtopusScenario

serve = serve_fixture(Served, devices=DEVICES)


def sampling(device: str = "qulacs", program: str = FLIP, shots: int = 20, name: str = "t1"):
    return OqtopusJobSpec.sampling(device_id=device, program=program, shots=shots, name=name)


def test_env_names_every_device_as_qrmi_does(serve):
    served = serve()
    env = served.service.env("http://127.0.0.1:9/")
    assert env["anemone_QRMI_OQTOPUS_URL"] == "http://127.0.0.1:9/oqtopus"
    assert env["qulacs_QRMI_OQTOPUS_API_TOKEN"] == "emulator-oqtopus-token"


def test_devices_with_pending_jobs_and_maintenance(serve, clock):
    served = serve()
    client = served.client()
    devices = {d.device_id: d for d in client.list_devices()}
    assert devices["anemone"].status == "available"
    assert devices["anemone"].n_pending_jobs == 1  # the background job waiting
    assert devices["anemone"].device_type == "QPU" and devices["anemone"].n_qubits == 4
    assert devices["qulacs"].device_type == "simulator" and devices["qulacs"].n_pending_jobs == 0
    clock.advance(1500)
    down = client.get_device("anemone")
    assert down.status == "unavailable"
    assert down.available_at is not None and down.available_at.isoformat().startswith("2025")
    with pytest.raises(UserApiError) as info:
        client.get_device("nowhere")
    assert info.value.status_code == 404


def test_a_sampling_job_runs_and_its_counts_come_back(serve, clock):
    served = serve()
    client = served.client()
    job_id = client.submit_job(sampling(program=FLIP, shots=20)).job_id
    assert client.get_job_status(job_id).status.value == "running"  # the device was idle
    clock.advance(5)
    job = client.get_job(job_id)
    assert job.status.value == "succeeded"
    assert job.get_counts() == {"01": 20}  # Qiskit's order: the last bit first
    assert job.execution_time == 1.0 and job.name == "t1" and job.shots == 20
    ops = [c.operation for c in served.service.calls]
    assert ops[:3] == ["RegisterJob", "UploadInput", "SubmitJob"]
    assert "DownloadObject" in ops  # the input and the result, through presigned URLs


def test_jobs_wait_their_turn_then_run(serve, clock):
    served = serve()
    client = served.client()
    job_id = client.submit_job(sampling("anemone", BELL, 100)).job_id
    assert client.get_job_status(job_id).status.value == "ready"
    clock.advance(25)  # two jobs ahead of it, 10 s each
    assert client.get_job_status(job_id).status.value == "running"
    clock.advance(10)
    counts = client.get_job(job_id).get_counts()
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 100


def test_search_finds_a_job_by_its_name_and_not_a_registered_one(serve):
    served = serve(faults=[{"operation": "SubmitJob", "status": 503, "calls": [1]}])
    client = served.client()
    with pytest.raises(UserApiError) as info:
        client.submit_job(sampling(name="tok-lost"))
    assert info.value.status_code == 503
    registered = client.list_jobs(q="tok-lost")
    assert registered == []  # registered, never submitted: it has no name
    job_id = client.submit_job(sampling(name="tok-lost")).job_id
    assert [j.job_id for j in client.list_jobs(q="tok-lost")] == [job_id]
    assert [j.status.value for j in client.list_jobs()] == ["running", "registered"]


def test_refusals(serve):
    served = serve()
    with pytest.raises(UserApiError) as info:
        served.client("wrong").list_devices()
    assert info.value.status_code == 401
    client = served.client()
    for spec in (
        sampling(device="nowhere"),
        sampling(shots=100_001),
        OqtopusJobSpec.estimation(device_id="qulacs", program=FLIP, operator=[]),
    ):
        with pytest.raises(UserApiError) as info:
            client.submit_job(spec)
        assert info.value.status_code == 400
    with pytest.raises(UserApiError) as info:
        client.get_job_status("no-such-job")
    assert info.value.status_code == 404


def test_a_program_that_cannot_run_fails_with_a_message(serve):
    served = serve()
    client = served.client()
    wide = "OPENQASM 3;\nqubit[9] q;\nbit[9] c;\nx q[8];\nc = measure q;\n"
    job = client.get_job(client.submit_job(sampling(program=wide)).job_id)
    assert job.status.value == "failed"
    assert job.message.startswith("transpile failed:")
    assert served.service.bill().tasks == []  # it never ran


def test_fail_job_fault_and_bill(serve, clock):
    served = serve(faults=[{"operation": "SubmitJob", "fail_job": "qubit 3 drifted"}])
    client = served.client()
    job_id = client.submit_job(sampling()).job_id
    clock.advance(5)
    job = client.get_job(job_id)
    assert job.status.value == "failed" and job.message == "qubit 3 drifted"
    assert job.get_counts() == {}
    [billed] = served.service.bill().tasks
    assert billed.vendor == "oqtopus" and billed.state == "FAILED" and billed.cost == 0.0
    assert served.service.counts()[1] == {"fail_job": 1}


def test_cancel_a_waiting_job_not_a_finished_one(serve, clock):
    served = serve()
    client = served.client()
    waiting = client.submit_job(sampling("anemone", name="w")).job_id
    client.cancel_job(waiting)
    clock.advance(1)
    assert client.get_job_status(waiting).status.value == "cancelled"
    done = client.submit_job(sampling(name="d")).job_id
    clock.advance(5)
    with pytest.raises(UserApiError) as info:
        client.cancel_job(done)
    assert info.value.status_code == 400
    [succeeded] = [b for b in served.service.bill().tasks if b.id == done]
    assert succeeded.state == "COMPLETED" and succeeded.cost == pytest.approx(0.30)


def test_presigned_urls_need_their_signature(serve):
    served = serve()
    client = served.client()
    job = client.list_jobs()  # none yet
    assert job == []
    job_id = client.submit_job(sampling()).job_id
    [listed] = client.list_jobs(q=job_id)
    url = str(listed.job_info.input)
    import urllib.error
    import urllib.request

    with urllib.request.urlopen(url) as answer:
        assert answer.headers["Content-Type"] == "application/zip"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url.replace("signature=", "signature=0"))
    assert info.value.code == 403


def test_scenario_errors_name_the_field():
    with pytest.raises(ScenarioError, match=r"device 'x': type must be one of QPU, simulator"):
        OqtopusScenario.from_dict({"devices": [{"name": "x", "type": "annealer"}]})
    with pytest.raises(ScenarioError, match="faults\\[0\\].device"):
        OqtopusScenario.from_dict(
            {"devices": [{"name": "x"}], "faults": [{"operation": "GetJob", "device": "y",
                                                      "status": 500}]}
        )  # fmt: skip
    assert [d.name for d in OqtopusScenario.default().devices] == ["anemone", "qulacs"]
