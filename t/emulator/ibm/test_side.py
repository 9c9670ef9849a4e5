"""The emulator's IBM Quantum side, through the real qrmi client and plain HTTP: IAM,
backends (status, configuration, properties with gate and readout errors), pending
counts that drain, jobs (create, get, list by pending/session/backend, cancel, text/plain
RuntimeEncoder results), sessions, IBM's error body, faults, one env for both vendors."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
import qrmi

from flux_quantum.emulator import Emulator, ManualClock, ScenarioError
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.vendors.ibm.payload import counts_from_result

PROGRAM = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nx q[1];\nsx q[0];\nsx q[0];\nc = measure q;\n'
BACKEND = {"name": "ibm_line", "qubits": 5, "queue": {"depth": 3, "service_time": 10}}


def start(clock: ManualClock, **top) -> Emulator:
    scenario = IbmScenario.from_dict({"backends": [BACKEND], **top})
    return Emulator(clock=clock, ibm=scenario).start()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emu(clock, emulator_tier):
    emulator = start(clock)
    yield emulator
    emulator.stop()


def resource(emu: Emulator, backend: str = "ibm_line", **extra: str):
    config = {k: v for k, v in emu.ibm.env(emu.url).items() if k.startswith("QRMI_")}
    config.update(extra)
    return qrmi.QuantumResource.from_config(
        backend, qrmi.ResourceType.IBMQuantumComputeService, config
    )


def start_job(res, program: str = PROGRAM, shots: int = 64) -> str:
    document = json.dumps({"pubs": [[program]], "shots": shots, "version": 2})
    return res.task_start(qrmi.Payload.QiskitPrimitive(input=document, program_id="sampler"))


def http(emu: Emulator, method: str, path: str, body: dict | None = None, token: bool = True):
    """(status, content type, parsed or raw body) of one request to the IBM side."""
    headers = {"Content-Type": "application/json"}
    if token:
        form = urllib.parse.urlencode({"apikey": "k"}).encode()
        with urllib.request.urlopen(emu.url + "/ibm/identity/token", data=form) as answer:
            headers["Authorization"] = "Bearer " + json.loads(answer.read())["access_token"]
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(emu.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request) as answer:
            raw, status, kind = answer.read(), answer.status, answer.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        raw, status, kind = exc.read(), exc.code, exc.headers["Content-Type"]
    try:
        return status, kind, json.loads(raw) if raw else None
    except ValueError:
        return status, kind, raw.decode()


def test_one_env_serves_both_vendors(emu):
    env = emu.env()
    assert env["AWS_ENDPOINT_URL_BRAKET"] == emu.url
    assert env["ibm_line_QRMI_IBM_QCS_ENDPOINT"] == emu.url + "/ibm/api/v1"
    assert env["ibm_line_QRMI_IBM_QCS_IAM_ENDPOINT"] == emu.url + "/ibm"
    assert env["QRMI_IBM_QCS_SERVICE_CRN"] == env["ibm_line_QRMI_IBM_QCS_SERVICE_CRN"]


def test_job_lifecycle_and_text_plain_results(emu, clock):
    res = resource(emu)
    assert res.status().pending_job_count == 3
    job = start_job(res)
    assert res.task_status(job) == qrmi.TaskStatus.Queued
    assert res.status().pending_job_count == 4
    status, _, body = http(emu, "GET", f"/ibm/api/v1/jobs/{job}/results")
    assert status == 404 and body["errors"][0]["code"] == 1291  # not before it completed
    clock.advance(45)  # one running and three waiting background jobs of 10 s each
    assert res.task_status(job) == qrmi.TaskStatus.Running
    clock.advance(10)
    assert res.task_status(job) == qrmi.TaskStatus.Completed
    status, kind, text = http(emu, "GET", f"/ibm/api/v1/jobs/{job}/results")
    assert status == 200 and kind.startswith("text/plain")
    assert text["__type__"] == "PrimitiveResult"  # RuntimeEncoder JSON, served as text
    assert counts_from_result(res.task_result(job).value) == {"11": 64}  # sx.sx = x
    _, _, doc = http(emu, "GET", f"/ibm/api/v1/jobs/{job}")
    for key in ("id", "state", "status", "program", "created", "cost", "params"):
        assert key in doc
    assert doc["status"] == "Completed" and doc["state"]["status"] == "Completed"


def test_pending_counts_drain(emu, clock):
    res = resource(emu)
    seen = []
    for _ in range(4):
        seen.append(res.status().pending_job_count)
        clock.advance(10)
    assert seen == [3, 2, 1, 0]


def test_list_jobs_by_pending_session_and_backend(emu, clock):
    res = resource(emu)
    session = resource(emu).acquire()  # qrmi: the acquiring resource rides its session
    riding = resource(emu, QRMI_IBM_QCS_SESSION_ID=session)
    first, second = start_job(res), start_job(riding)
    clock.advance(55)  # four background jobs, the first of ours: the second runs

    def ids(query: str) -> list[str]:
        status, _, body = http(emu, "GET", "/ibm/api/v1/jobs?" + query)
        assert status == 200 and {"offset", "limit", "jobs"} <= set(body)
        return [job["id"] for job in body["jobs"]]

    assert ids("backend=ibm_line&sort=ASC") == [first, second]
    assert ids("pending=true") == [second]
    assert ids("pending=false") == [first]
    assert ids(f"session_id={session}") == [second]
    assert ids("backend=ibm_fez") == []
    created = emu.ibm.job_ids()
    assert created == [first, second]
    _, _, body = http(emu, "GET", "/ibm/api/v1/jobs?exclude_params=false&limit=1&offset=1")
    assert body["jobs"][0]["params"]["pubs"][0][0] == PROGRAM and body["count"] == 2


def test_cancel_and_sessions(emu, clock):
    res = resource(emu)
    job = start_job(res)
    res.task_stop(job)
    assert res.task_status(job) == qrmi.TaskStatus.Cancelled
    status, _, body = http(emu, "POST", f"/ibm/api/v1/jobs/{job}/cancel")
    assert status == 409 and body["errors"][0]["message"]
    session = res.acquire()
    assert emu.ibm.session_state(session) == "open"
    status, _, doc = http(emu, "GET", f"/ibm/api/v1/sessions/{session}")
    assert doc["mode"] == "dedicated" and doc["accepting_jobs"] is True
    res.release(session)
    assert emu.ibm.session_state(session) == "closed"
    assert emu.call_count("UpdateSession", session) == 1


def test_a_dedicated_sessions_later_jobs_skip_the_queue_until_its_interactive_ttl(emu, clock):
    """IBM's dedicated session: its first job waits its turn; from its start the backend
    runs only the session's jobs, a later one at once, and serves its queue again once
    no job of the session waited or ran for the interactive TTL (60 s)."""
    session = resource(emu).acquire()
    riding = resource(emu, QRMI_IBM_QCS_SESSION_ID=session)
    first = start_job(riding)
    other = start_job(resource(emu))  # another user's job, behind ours
    clock.advance(55)  # four background jobs of 10 s, then ours (40-50)
    assert riding.task_status(first) == qrmi.TaskStatus.Completed
    assert res_status(emu, other) == "Queued" and emu.ibm.session_state(session) == "active"
    second = start_job(riding)
    assert riding.task_status(second) == qrmi.TaskStatus.Running  # no queue
    clock.advance(10 + 59)  # it ran 55-65; 59 s later the backend is still the session's
    assert riding.task_status(second) == qrmi.TaskStatus.Completed
    assert res_status(emu, other) == "Queued"
    clock.advance(1)
    assert res_status(emu, other) == "Running" and emu.ibm.session_state(session) == "inactive"
    _, _, doc = http(emu, "GET", f"/ibm/api/v1/sessions/{session}")
    assert doc["state"] == "inactive" and doc["interactive_ttl"] == 60


def res_status(emu: Emulator, job: str) -> str:
    _, _, doc = http(emu, "GET", f"/ibm/api/v1/jobs/{job}")
    return doc["status"]


def test_backends_configuration_and_properties(emu):
    status, _, body = http(emu, "GET", "/ibm/api/v1/backends")
    names = [device["name"] for device in body["devices"]]
    assert names == ["ibm_line"] and body["devices"][0]["queue_length"] == 3
    _, _, config = http(emu, "GET", "/ibm/api/v1/backends/ibm_line/configuration")
    assert config["n_qubits"] == 5 and "sx" in config["basis_gates"]
    _, _, props = http(emu, "GET", "/ibm/api/v1/backends/ibm_line/properties")
    readout = [q for qubit in props["qubits"] for q in qubit if q["name"] == "readout_error"]
    assert len(readout) == 5 and all(0 < q["value"] < 0.5 for q in readout)
    two = [g for g in props["gates"] if g["gate"] == "cz"]
    assert len(two) == 8 and all(
        p["name"] in ("gate_error", "gate_length") for p in two[0]["parameters"]
    )
    # The same seed gives the same calibration.
    assert props == http(emu, "GET", "/ibm/api/v1/backends/ibm_line/properties")[2]
    status, _, body = http(emu, "GET", "/ibm/api/v1/backends/ibm_nope/status")
    assert status == 404 and body == {
        "errors": [{"code": 1007, "message": "Backend ibm_nope not found.", "more_info": ""}],
        "status_code": 404,
    }


@pytest.mark.emulator
def test_credentials_are_checked(clock):
    emu = start(clock, apikey="right-key", crn="crn:v1:site")
    try:
        status, _, body = http(emu, "GET", "/ibm/api/v1/backends", token=False)
        assert status == 401 and body["errors"][0]["code"] == 1201
        wrong = resource(emu, QRMI_IBM_QCS_IAM_APIKEY="wrong-key")
        with pytest.raises(qrmi.AuthenticationFailedError):
            wrong.task_status("x")
        assert resource(emu).status().pending_job_count == 3  # env() carries the right ones
    finally:
        emu.stop()


@pytest.mark.emulator
def test_a_token_outlives_an_emulator_restart_and_a_forged_one_is_refused(clock):
    """Tokens are signed like IAM's: a client holding one keeps working against an
    emulator restarted on the same scenario (fresh queues); a made-up one does not."""

    def get(emu: Emulator, token: str) -> int:
        request = urllib.request.Request(
            emu.url + "/ibm/api/v1/backends", headers={"Authorization": "Bearer " + token}
        )
        try:
            with urllib.request.urlopen(request) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    first = start(clock)
    form = urllib.parse.urlencode({"apikey": "k"}).encode()
    with urllib.request.urlopen(first.url + "/ibm/identity/token", data=form) as answer:
        token = json.loads(answer.read())["access_token"]
    first.stop()
    second = start(clock)
    try:
        assert get(second, token) == 200
        nonce = token.partition(".")[0]
        assert get(second, nonce + "." + "0" * 32) == 401
        assert get(second, "not-a-token") == 401
    finally:
        second.stop()


@pytest.mark.emulator
def test_paused_and_offline_backends(clock):
    emu = Emulator(
        clock=clock,
        ibm=IbmScenario.from_dict(
            {
                "backends": [
                    {"name": "ibm_paused", "qubits": 3, "paused": [[0, 50]]},
                    {"name": "ibm_down", "qubits": 3, "status": "offline"},
                ]
            }
        ),
    ).start()
    try:
        paused = resource(emu, "ibm_paused")
        assert str(paused.status().status).endswith("Paused")
        job = start_job(paused)  # a paused backend queues jobs and runs none
        clock.advance(40)
        assert paused.task_status(job) == qrmi.TaskStatus.Queued
        clock.advance(11)
        assert paused.task_status(job) == qrmi.TaskStatus.Completed
        assert str(paused.status().status).endswith("Online")
        with pytest.raises(qrmi.InvalidInputError, match="1004"):
            start_job(resource(emu, "ibm_down"))
    finally:
        emu.stop()


@pytest.mark.emulator
def test_faults_use_ibm_error_bodies(clock):
    emu = start(
        clock,
        faults=[
            {"operation": "GetJob", "status": 503, "first": 1},
            {"operation": "ListBackends", "status": 429},
            {"operation": "CreateJob", "fail_job": "calibration drift", "calls": [2]},
        ],
    )
    try:
        res = resource(emu)
        job = start_job(res)
        with pytest.raises(qrmi.QrmiError, match="503"):
            res.task_status(job)
        assert res.task_status(job) == qrmi.TaskStatus.Queued  # only the first call
        status, _, body = http(emu, "GET", "/ibm/api/v1/backends")
        assert status == 429 and body["errors"][0]["code"] == 1202
        failing = start_job(res)
        clock.advance(60)
        assert res.task_status(failing) == qrmi.TaskStatus.Failed
        _, _, doc = http(emu, "GET", f"/ibm/api/v1/jobs/{failing}")
        assert doc["state"]["reason"] == "calibration drift"
    finally:
        emu.stop()


@pytest.mark.emulator
def test_open_plan_refuses_dedicated_sessions_only(clock):
    emu = start(clock, plan="open")
    try:
        with pytest.raises(qrmi.QrmiError, match="1352"):
            resource(emu).acquire()
        batch = resource(emu, QRMI_IBM_QCS_SESSION_MODE="batch").acquire()
        assert emu.ibm.session_state(batch) == "open"
    finally:
        emu.stop()


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"backends": []}, "backends must list at least one backend"),
        ({"backends": [{"name": "b", "status": "asleep"}]}, "status must be one of"),
        ({"backends": [BACKEND], "plan": "free"}, "plan must be one of open, paid"),
        ({"backends": [BACKEND], "faults": [{"operation": "Nope", "status": 500}]}, "Nope"),
        ({"backends": [BACKEND], "faults": [{"operation": "GetJob"}]}, "exactly one effect"),
        (
            {"backends": [BACKEND], "faults": [{"operation": "GetJob", "fail_job": "x"}]},
            "must be CreateJob",
        ),
    ],
)
def test_scenario_mistakes_name_the_field(bad, message):
    with pytest.raises(ScenarioError, match=message):
        IbmScenario.from_dict(bad)
