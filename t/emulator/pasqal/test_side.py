"""The emulator's Pasqal side, driven by the real qrmi client (0.26.4) over loopback HTTP.

Unit tier: no Flux, a ``ManualClock``, the service alone behind the emulator's HTTP server.
PasqalLocal's task calls need a munge daemon (libmunge makes a credential per request);
without one those client tests are skipped with one line naming it, and the warden side
is driven with plain HTTP instead.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from flux_quantum.emulator.clock import ManualClock
from flux_quantum.emulator.pasqal import LOCAL_PREFIX, PREFIX, PasqalScenario
from flux_quantum.emulator.scenario import ScenarioError

qrmi = pytest.importorskip("qrmi")
from served_pasqal import DEVICES, SEQUENCE, Served  # noqa: E402


def serve(clock: ManualClock, faults: list[dict[str, Any]] | None = None) -> Served:
    scenario = PasqalScenario.from_dict({"devices": DEVICES, "faults": faults or []})
    return Served(scenario, clock)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def served(clock: ManualClock, emulator_tier: None) -> Iterator[Served]:
    s = serve(clock)
    yield s
    s.server.stop()


def payload(sequence: str = SEQUENCE, runs: int = 100) -> Any:
    return qrmi.Payload.PasqalCloud(sequence=sequence, job_runs=runs)


# --- the scenario --------------------------------------------------------------------------


def test_the_default_scenario_has_a_cloud_and_an_on_premises_device():
    scenario = PasqalScenario.default()
    assert [(d.name, d.kind) for d in scenario.devices] == [
        ("FRESNEL", "cloud"),
        ("FRESNEL_ONPREM", "local"),
    ]


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"devices": [{"name": "NOPE"}]}, "device 'NOPE': name (a cloud device)"),
        ({"devices": [{"name": "FRESNEL", "atoms": 0}]}, "device 'FRESNEL': atoms"),
        ({"devices": [{"name": "FRESNEL", "kind": "moon"}]}, "device 'FRESNEL': kind"),
        ({"devices": [{"name": "FRESNEL"}], "faults": [{"operation": "CreateBatch"}]}, "faults[0]"),
        ({"devices": [{"name": "FRESNEL"}], "client_id": "x"}, "client_id"),
    ],
)
def test_each_scenario_mistake_is_one_sentence_naming_the_field(data, names):
    with pytest.raises(ScenarioError) as caught:
        PasqalScenario.from_dict(data)
    message = str(caught.value)
    assert names in message and "\n" not in message


def test_env_points_qrmi_at_the_service_for_every_device(served: Served):
    env = served.service.env(served.url)
    assert env["FRESNEL_QRMI_PASQAL_CLOUD_BASE_URL"] == served.url + PREFIX
    assert env["FRESNEL_QRMI_PASQAL_CLOUD_AUTH_ENDPOINT"].endswith("/pasqal/oauth/token")
    assert env["ONPREM_QRMI_WARDEN_URL"] == f"{served.url}{LOCAL_PREFIX}/ONPREM"
    assert not any(k.startswith("ONPREM_QRMI_PASQAL_CLOUD") for k in env)


# --- PasqalCloud through the real client ---------------------------------------------------


def test_status_online_and_offline_as_qrmi_reads_them(served: Served):
    assert str(served.cloud("FRESNEL").status().status).endswith("Online")
    assert str(served.cloud("FRESNEL_CAN1").status().status).endswith("Offline")
    # QRMI reads only availability: a paused cloud device (UP/DOWN) still reads Online.
    status = served.cloud("EMU_MPS").status()
    assert str(status.status).endswith("Online") and status.capacity is None


def test_a_batch_queues_runs_completes_and_gives_counts(served: Served, clock: ManualClock):
    resource = served.cloud()
    first = resource.task_start(payload())
    second = resource.task_start(payload(runs=50))
    assert resource.task_status(first) == qrmi.TaskStatus.Running  # an idle device starts it
    assert resource.task_status(second) == qrmi.TaskStatus.Queued
    clock.advance(10)
    assert resource.task_status(first) == qrmi.TaskStatus.Completed
    assert resource.task_status(second) == qrmi.TaskStatus.Running
    value = json.loads(resource.task_result(first).value)
    # A pi pulse on the global Rydberg channel excites both atoms in every run.
    assert value == {"counter": {"11": 100}}
    assert served.service.job_ids("FRESNEL") == [first, second]
    with pytest.raises(Exception, match="400"):
        resource.task_result(second)  # not done yet: Pasqal's refusal


def test_the_token_endpoint_and_bearer_are_checked(served: Served):
    config = served.config("FRESNEL")
    config["QRMI_PASQAL_CLOUD_CLIENT_SECRET"] = "wrong"
    scenario = PasqalScenario.from_dict(
        {"devices": DEVICES, "client_id": "cid", "client_secret": "right"}
    )
    other = Served(scenario, ManualClock())
    try:
        config["QRMI_PASQAL_CLOUD_BASE_URL"] = other.url + PREFIX
        config["QRMI_PASQAL_CLOUD_AUTH_ENDPOINT"] = other.url + PREFIX + "/oauth/token"
        config["QRMI_PASQAL_CLOUD_CLIENT_ID"] = "cid"
        bad = qrmi.QuantumResource.from_config("FRESNEL", qrmi.ResourceType.PasqalCloud, config)
        with pytest.raises(Exception, match="403"):
            bad.task_start(payload())
        config["QRMI_PASQAL_CLOUD_AUTH_TOKEN"] = "not-a-token-we-signed"
        forged = qrmi.QuantumResource.from_config("FRESNEL", qrmi.ResourceType.PasqalCloud, config)
        with pytest.raises(Exception, match="401"):
            forged.task_status("anything")
        assert other.service.job_ids() == []
    finally:
        other.server.stop()


def test_a_queued_batch_is_cancelled(served: Served):
    resource = served.cloud()
    resource.task_start(payload())
    queued = resource.task_start(payload())
    resource.task_stop(queued)
    assert resource.task_status(queued) == qrmi.TaskStatus.Cancelled
    with pytest.raises(Exception, match="409"):
        resource.task_stop(queued)


def test_paused_and_offline_devices_refuse_batches_in_pasqals_shape(served, clock):
    with pytest.raises(Exception, match=r"409.*EMU_MPS is paused"):
        served.cloud("EMU_MPS").task_start(payload())
    with pytest.raises(Exception, match=r"409.*FRESNEL_CAN1 is offline"):
        served.cloud("FRESNEL_CAN1").task_start(payload())
    clock.advance(100)  # the pause ends
    assert served.cloud("EMU_MPS").task_start(payload())
    error = next(c for c in served.service.calls if c.operation == "CreateBatch")
    assert (error.status, error.error) == (409, "HTTP409")


def test_a_register_larger_than_the_device_or_openqasm_is_refused(served: Served):
    big = json.loads(SEQUENCE)
    big["register"] = [{"name": f"q{i}", "x": 5.0 * i, "y": 0.0} for i in range(5)]
    with pytest.raises(Exception, match="5 atoms, more than the device's 4"):
        served.cloud().task_start(payload(json.dumps(big)))
    with pytest.raises(Exception, match="Pulser sequences"):
        served.cloud().task_start(payload("OPENQASM 3.0;\nqubit[1] q;"))
    with pytest.raises(Exception, match="runs must be between 1 and 500"):
        served.cloud().task_start(payload(runs=501))
    assert served.service.job_ids() == []


@pytest.mark.emulator
def test_faults_answer_errors_and_fail_jobs(clock: ManualClock):
    s = serve(
        clock,
        [
            {"operation": "CreateBatch", "status": 503, "message": "busy", "calls": [1]},
            {"operation": "CreateBatch", "fail_job": "laser drift", "calls": [2]},
        ],
    )
    try:
        resource = s.cloud()
        with pytest.raises(Exception, match=r"503.*busy"):
            resource.task_start(payload())
        failed = resource.task_start(payload())
        clock.advance(10)
        assert resource.task_status(failed) == qrmi.TaskStatus.Failed
        calls, effects = s.service.counts()
        assert calls["CreateBatch"] == 2 and effects == {"error:503": 1, "fail_job": 1}
    finally:
        s.server.stop()


def test_the_bill_charges_completed_qpu_seconds_at_the_site_rate(served, clock):
    resource = served.cloud()
    done = resource.task_start(payload())
    cancelled = resource.task_start(payload())
    resource.task_stop(cancelled)
    clock.advance(30)
    bill = served.service.bill()
    tasks, sessions = bill.tasks, bill.sessions
    rows = {t.id: t for t in tasks}
    assert rows[done].billed_seconds == 10.0 and rows[done].cost == pytest.approx(5.0)
    assert rows[cancelled].cost == 0.0 and rows[cancelled].state == "CANCELLED"
    assert sessions == [] and rows[done].vendor == "pasqal"


# --- PasqalLocal ---------------------------------------------------------------------------


def local(served: Served, **extra: str) -> Any:
    config = {**served.config("ONPREM"), "QRMI_JOB_UID": "1000", "QRMI_JOB_ID": "7", **extra}
    return qrmi.QuantumResource.from_config("ONPREM", qrmi.ResourceType.PasqalLocal, config)


def munge_missing() -> str | None:
    from flux_quantum.vendors.pasqal.vendor import munge_credential

    try:
        munge_credential()
    except OSError as exc:
        return str(exc)
    return None


def test_local_status_is_read_without_credentials(served: Served):
    assert str(local(served).status().status).endswith("Online")
    assert served.service.counts()[0] == {"LocalAccessible": 1}


def test_local_tasks_through_qrmi_need_munge(served: Served, clock: ManualClock):
    missing = munge_missing()
    if missing is not None:
        pytest.skip(f"PasqalLocal task calls need a running munged (libmunge: {missing})")
    token = local(served).acquire()
    resource = local(served, QRMI_JOB_ACQUISITION_TOKEN=token)
    task = resource.task_start(payload(runs=10))
    clock.advance(10)
    assert resource.task_status(task) == qrmi.TaskStatus.Completed


def http(served: Served, method: str, path: str, body: Any = None, **headers: str) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(served.url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_the_warden_side_takes_munge_and_a_session(served: Served, clock: ManualClock):
    base = f"{LOCAL_PREFIX}/ONPREM"
    with pytest.raises(urllib.error.HTTPError) as refused:
        http(served, "POST", base + "/sessions", {"user_id": "1000", "slurm_job_id": "7"})
    assert refused.value.code == 401 and b"invalid munge token" in refused.value.read()
    cred = {"x-munge-cred": "MUNGE:stand-in"}
    session = http(served, "POST", base + "/sessions", {"user_id": "1000", "slurm_job_id": "7"},
                   **cred)["id"]  # fmt: skip
    one_atom = json.loads(SEQUENCE)
    one_atom["register"] = one_atom["register"][:1]
    job = http(served, "POST", base + "/jobs", {"sequence": json.dumps(one_atom), "shots": 20},
               **cred, **{"X-Warden-Session": session})  # fmt: skip
    assert (job["id"], job["user_id"], job["status"], job["results"]) == (
        1,
        "1000",
        "RUNNING",
        None,
    )
    with pytest.raises(urllib.error.HTTPError) as full:  # max_slots 1: no free slot
        http(served, "POST", base + "/jobs", {"sequence": json.dumps(one_atom), "shots": 20},
             **cred, **{"X-Warden-Session": session})  # fmt: skip
    assert full.value.code == 429
    assert http(served, "GET", base + "/accessible")["qpu_slots_available"] == 0
    clock.advance(10)
    done = http(served, "GET", base + "/jobs/1", **cred)
    assert done["status"] == "DONE" and json.loads(done["results"]) == {"counter": {"1": 20}}
    assert [j["id"] for j in http(served, "GET", base + "/jobs", **cred)] == [1]
