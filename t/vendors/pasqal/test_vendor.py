"""``PasqalVendor`` against the emulator's Pasqal side, through the real qrmi client.

Unit tier: no Flux, a ``ManualClock``; also the pure program check and sampler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.emulator.clock import ManualClock
from flux_quantum.emulator.pasqal import PasqalScenario
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import AccessDenied, InvalidRequest, VendorUnavailable
from flux_quantum.vendors.pasqal import program as pasqal_program
from flux_quantum.vendors.pasqal.vendor import PasqalSettings, PasqalVendor, access_of

pytest.importorskip("qrmi")
from served_pasqal import DEVICES, SEQUENCE, Served  # noqa: E402


def device(name: str, qubits: int = 4, **properties: str) -> Device:
    return Device(name.lower(), "pasqal", name, "qpu", qubits, "eu", PriceModel(), 1, properties)


CATALOG = [device("FRESNEL"), device("FRESNEL_CAN1"), device("ONPREM", 1)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def serve(clock: ManualClock, faults=()) -> Served:
    return Served(PasqalScenario.from_dict({"devices": DEVICES, "faults": list(faults)}), clock)


@pytest.fixture
def served(clock, emulator_tier) -> Iterator[Served]:
    s = serve(clock)
    yield s
    s.server.stop()


def vendor(served: Served, clock: ManualClock, attempts: int = 1, **environ: str) -> PasqalVendor:
    env = {**served.service.env(served.url), "QRMI_JOB_UID": "1000", "QRMI_JOB_ID": "7", **environ}
    return PasqalVendor(
        PasqalSettings(settle=0.0),
        devices=CATALOG,
        retry=RetryBudget(attempts=attempts, base_delay=0.01),
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=lambda seconds: None,
        environ=env,
    )


# --- the pure program module ----------------------------------------------------------------


def test_check_accepts_pulser_and_says_what_is_wrong_otherwise():
    assert pasqal_program.check(SEQUENCE, 2) is None
    qasm = pasqal_program.check("OPENQASM 3.0;\nqubit[2] q;\nh q[0];", 10)
    assert qasm is not None and "OpenQASM" in qasm and "Pulser sequences" in qasm
    assert "2 atoms, more than the device's 1" in (pasqal_program.check(SEQUENCE, 1) or "")
    assert "register" in (pasqal_program.check('{"operations": []}', 4) or "")


def test_the_token_rides_the_name_and_is_replaced_when_marked_again():
    marked = pasqal_program.mark(SEQUENCE, "fq-1-0")
    assert pasqal_program.token_of(marked) == "fq-1-0"
    again = pasqal_program.mark(marked, "fq-1-1")
    assert pasqal_program.token_of(again) == "fq-1-1" and again.count("flux-quantum:") == 1
    assert json.loads(again)["register"] == json.loads(SEQUENCE)["register"]
    assert pasqal_program.token_of(SEQUENCE) is None


def test_the_sampler_follows_the_pulse_area_and_its_seed():
    half = json.loads(SEQUENCE)
    half["operations"][0]["amplitude"] = {"kind": "blackman", "duration": 500, "area": 1.5707963}
    text = json.dumps(half)
    counts = pasqal_program.sample(text, 4000, "s")
    assert counts == pasqal_program.sample(text, 4000, "s") and sum(counts.values()) == 4000
    excited = sum(n * key.count("1") for key, n in counts.items()) / 8000
    assert 0.45 < excited < 0.55  # sin^2(pi/4) = 1/2 per atom
    assert pasqal_program.sample(SEQUENCE, 10, "s") == {"11": 10}


# --- the vendor -------------------------------------------------------------------------------


def test_devices_are_cloud_or_local_by_id_or_property():
    assert access_of(CATALOG[0]) == "cloud" and access_of(CATALOG[2]) == "local"
    assert access_of(device("FRESNEL", pasqal_access="local")) == "local"


def test_probe_reads_online_offline_and_a_local_warden(served, clock):
    v = vendor(served, clock)
    assert v.probe(CATALOG[0]).status is DeviceStatus.ONLINE
    offline = v.probe(CATALOG[1])
    assert offline.status is DeviceStatus.OFFLINE and offline.reason
    assert v.probe(CATALOG[2]).status is DeviceStatus.ONLINE


def test_submit_poll_result_and_billed_seconds(served, clock):
    v = vendor(served, clock)
    task = v.submit(CATALOG[0], SEQUENCE, 200, "fq-7-0")
    assert v.poll(task).state is TaskState.RUNNING
    clock.advance(10)
    assert v.poll(task).state is TaskState.COMPLETED
    result = v.result(task)
    assert result.counts == {"11": 200} and result.raw == {"counter": {"11": 200}}
    assert v.billed_seconds(task) == 10.0
    (row,) = served.service.bill().tasks
    assert row.token == "fq-7-0" and row.shots == 200  # the token rode the sequence


def test_cancel_a_queued_task(served, clock):
    v = vendor(served, clock)
    v.submit(CATALOG[0], SEQUENCE, 10, "fq-a")
    queued = v.submit(CATALOG[0], SEQUENCE, 10, "fq-b")
    v.cancel(queued)
    assert v.poll(queued).state is TaskState.CANCELLED


def test_an_openqasm_program_is_refused_before_anything_is_sent(served, clock):
    v = vendor(served, clock)
    with pytest.raises(InvalidRequest, match="Pulser sequences") as caught:
        v.submit(CATALOG[0], "OPENQASM 3.0;\nqubit[1] q;", 10, "fq-q")
    assert caught.value.vendor_code == "InvalidProgram"
    assert served.service.job_ids() == []


@pytest.mark.emulator
def test_a_create_whose_answer_was_lost_is_found_not_made_twice(clock):
    s = serve(clock, [{"operation": "CreateBatch", "reset": True, "after_commit": True,
                       "calls": [1]}])  # fmt: skip
    try:
        v = vendor(s, clock, attempts=3)
        task = v.submit(CATALOG[0], SEQUENCE, 10, "fq-lost")
        assert s.service.job_ids() == [task.task_id]  # one batch, found by its token
        assert s.service.counts()[0]["ListBatches"] == 1
        # After a restart: find_task by the recorded token and time.
        fresh = vendor(s, clock)
        since = clock.epoch.timestamp()
        assert fresh.find_task(CATALOG[0], "fq-lost", since=since) == task
        assert fresh.find_task(CATALOG[0], "fq-other", since=since) is None
    finally:
        s.server.stop()


def test_find_task_waits_for_a_create_that_may_still_land(served, clock):
    v = vendor(served, clock)
    v.settings = PasqalSettings(settle=60.0)
    with pytest.raises(VendorUnavailable, match="may still be landing"):
        v.find_task(CATALOG[0], "fq-x", since=clock.epoch.timestamp())


def test_a_paused_device_refuses_and_the_error_is_translated(served, clock):
    v = vendor(served, clock)
    paused = device("EMU_MPS")
    v._devices[paused.name] = paused
    with pytest.raises(Exception) as caught:
        v.submit(paused, SEQUENCE, 10, "fq-p")
    assert caught.value.vendor_code == "HTTP409" and "paused" in str(caught.value)


def test_missing_credentials_are_named_without_a_secret(served, clock):
    env = {k: v for k, v in served.service.env(served.url).items() if "CLIENT" not in k}
    v = PasqalVendor(devices=CATALOG, environ={**env, "HOME": "/nonexistent"})
    with pytest.raises(AccessDenied, match="FRESNEL_QRMI_PASQAL_CLOUD_CLIENT_ID"):
        v.submit(CATALOG[0], SEQUENCE, 10, "fq-c")
    secret = served.service.env(served.url)["FRESNEL_QRMI_PASQAL_CLOUD_CLIENT_SECRET"]
    probe = v.probe(CATALOG[0])
    assert probe.status is DeviceStatus.UNREACHABLE and secret not in (probe.reason or "")
