"""``OqtopusVendor`` against the emulator's OQTOPUS side, through the real oqtopus-client
SDK: probe (status, pending jobs, maintenance), submit of an OpenQASM program, poll,
result counts (result 0 first), billed seconds, cancel, a failed job, programs it refuses
before anything is sent (and while the job is held: ``program_kinds``), the settings it
needs and where it reads them, never a second job after a create whose answer was lost
(the job is found by its name), and the pure reading of counts."""

from __future__ import annotations

import pytest
from served_oqtopus import BELL, DEVICES, FLIP, Served
from served_side import serve_fixture

from flux_quantum.catalog import Device, PriceModel, parse_catalog
from flux_quantum.emulator import ManualClock
from flux_quantum.selection.program_kinds import cannot_run
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import AccessDenied, InvalidRequest, VendorUnavailable
from flux_quantum.vendors.factory import make_vendor
from flux_quantum.vendors.oqtopus.vendor import OqtopusSettings, OqtopusVendor, counts_of

ANEMONE = Device("anemone", "oqtopus", "anemone", "qpu", 4, "ap-northeast-1",
                 PriceModel(per_minute=18.0))  # fmt: skip
QULACS = Device("qulacs", "oqtopus", "qulacs", "simulator", 8, "ap-northeast-1",
                PriceModel(per_task=0.0))  # fmt: skip
QIR = (
    "%Qubit = type opaque\n%Result = type opaque\ndefine void @main() #0 {\nentry:\n"
    "  call void @__quantum__qis__x__body(%Qubit* null)\n  ret void\n}\n"
)


serve = serve_fixture(Served, devices=DEVICES)


def vendor(served: Served, clock: ManualClock, attempts: int = 1, **environ: str) -> OqtopusVendor:
    env = {**served.service.env(served.url), **environ}
    return OqtopusVendor(
        devices=[ANEMONE, QULACS], environ=env, retry=RetryBudget(attempts=attempts),
        clock=clock.now, sleep=lambda s: None,
    )  # fmt: skip


def test_probe_reads_status_and_pending_jobs(serve, clock):
    v = vendor(serve(), clock)
    snapshot = v.probe(ANEMONE)
    assert snapshot.status is DeviceStatus.ONLINE and snapshot.queue_depth == 1
    assert snapshot.price == ANEMONE.price
    clock.advance(1500)  # inside the scenario's unavailable period [1000, 2000)
    down = v.probe(ANEMONE)
    assert down.status is DeviceStatus.OFFLINE
    assert down.reason is not None and down.reason.startswith("unavailable until 2025-")
    assert v.reports_positions(ANEMONE) is False


def test_probe_without_settings_is_unreachable_and_says_which(serve, clock):
    served = serve()
    no_token = OqtopusVendor(devices=[QULACS], environ={"OQTOPUS_URL": served.url + "/oqtopus"})
    snapshot = no_token.probe(QULACS)
    assert snapshot.status is DeviceStatus.UNREACHABLE and snapshot.reason == "NoCredentials"
    no_url = OqtopusVendor(devices=[QULACS], environ={"OQTOPUS_API_TOKEN": "t"})
    assert no_url.probe(QULACS).reason == "NoEndpoint"
    wrong = vendor(served, clock, qulacs_QRMI_OQTOPUS_API_TOKEN="wrong")
    assert wrong.probe(QULACS).reason == "HTTP401"
    assert served.service.calls[-1].operation == "GetDevice"


def test_settings_per_device_first_then_qrmi_then_the_sdks_and_the_catalog(serve, clock):
    served = serve()
    url, token = served.url + "/oqtopus", served.service.scenario.token
    sdk_names = OqtopusVendor(devices=[QULACS], environ={"OQTOPUS_URL": url,
                                                         "OQTOPUS_API_TOKEN": token})  # fmt: skip
    assert sdk_names.probe(QULACS).status is DeviceStatus.ONLINE
    overridden = OqtopusVendor(
        devices=[QULACS],
        environ={"OQTOPUS_URL": "http://127.0.0.1:9", "QRMI_OQTOPUS_URL": url,
                 "OQTOPUS_API_TOKEN": "wrong", "qulacs_QRMI_OQTOPUS_API_TOKEN": token},
    )  # fmt: skip
    assert overridden.probe(QULACS).status is DeviceStatus.ONLINE
    catalog = parse_catalog(
        f"vendors:\n  oqtopus: {{url: '{url}'}}\ndevices:\n"
        "  - {name: qulacs, vendor: oqtopus, id: qulacs, class: simulator, qubits: 8,\n"
        "     price: {per_task: 0.0}}\n",
        "b.yaml",
    )
    built = make_vendor("oqtopus", catalog, timeout=5.0, environ={"OQTOPUS_API_TOKEN": token})
    assert isinstance(built, OqtopusVendor) and built.settings == OqtopusSettings(url, 5.0)
    assert built.probe(catalog.devices[0]).status is DeviceStatus.ONLINE


def test_a_job_runs_and_its_counts_read_result_0_first(serve, clock):
    served = serve()
    v = vendor(served, clock)
    ref = v.submit(ANEMONE, FLIP, 10, "tok-flip")
    assert v.poll(ref).state is TaskState.QUEUED
    clock.advance(25)
    assert v.poll(ref).state is TaskState.RUNNING
    clock.advance(10)
    assert v.poll(ref).state is TaskState.COMPLETED
    result = v.result(ref)
    assert result.counts == {"10": 10} and result.raw == {"counts": {"01": 10}}
    assert v.billed_seconds(ref) == 10.0
    assert v.attach(ref.task_id) == ref


def test_bell(serve, clock):
    v = vendor(serve(), clock)
    ref = v.submit(QULACS, BELL, 100, "tok-bell")
    clock.advance(5)
    counts = v.result(ref).counts
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 100


def test_a_result_before_the_job_succeeded_is_refused(serve, clock):
    v = vendor(serve(), clock)
    ref = v.submit(ANEMONE, FLIP, 10, "tok-early")
    with pytest.raises(InvalidRequest, match="is ready; only a succeeded job has counts"):
        v.result(ref)


def test_cancel_a_waiting_job_and_a_finished_one(serve, clock):
    v = vendor(serve(), clock)
    waiting = v.submit(ANEMONE, FLIP, 10, "tok-w")
    v.cancel(waiting)
    clock.advance(1)
    assert v.poll(waiting).state is TaskState.CANCELLED
    done = v.submit(QULACS, FLIP, 10, "tok-d")
    clock.advance(5)
    v.cancel(done)  # OQTOPUS refuses; the job has finished, so nothing is wrong
    assert v.poll(done).state is TaskState.COMPLETED


def test_a_failed_job_says_why(serve, clock):
    served = serve(faults=[{"operation": "SubmitJob", "fail_job": "qubit 3 drifted"}])
    v = vendor(served, clock)
    ref = v.submit(QULACS, FLIP, 10, "tok-fail")
    clock.advance(5)
    snapshot = v.poll(ref)
    assert snapshot.state is TaskState.FAILED and snapshot.message == "qubit 3 drifted"


def test_other_program_kinds_are_refused_before_anything_is_sent(serve, clock):
    served = serve()
    v = vendor(served, clock)
    with pytest.raises(InvalidRequest) as info:
        v.submit(QULACS, QIR, 10, "tok-qir")
    assert str(info.value) == (
        "oqtopus create for qulacs: qulacs takes OpenQASM circuits only (oqtopus), the "
        "program is a QIR program"
    )
    with pytest.raises(InvalidRequest, match="shots must be an integer from 1 to 10000000"):
        v.submit(QULACS, FLIP, 0, "tok-zero")
    assert served.service.calls == []
    assert cannot_run(QIR, [QULACS]) == {
        "qulacs": "takes OpenQASM circuits only (oqtopus), the program is a QIR program"
    }
    assert cannot_run(FLIP, [QULACS]) == {}


def test_a_create_whose_answer_was_lost_is_found_not_repeated(serve, clock):
    served = serve(faults=[{"operation": "SubmitJob", "reset": True, "after_commit": True,
                            "calls": [1]}])  # fmt: skip
    v = vendor(served, clock, attempts=3)
    ref = v.submit(QULACS, FLIP, 10, "tok-lost")
    assert served.service.job_ids("qulacs") == [ref.task_id]  # one job, found by its name
    assert served.service.counts()[1] == {"lost": 1}
    assert [c.operation for c in served.service.calls][-1] == "ListJobs"


def test_a_failed_submit_step_makes_no_job_to_run_and_is_retried(serve, clock):
    served = serve(faults=[{"operation": "SubmitJob", "status": 503, "calls": [1]}])
    v = vendor(served, clock, attempts=3)
    ref = v.submit(QULACS, FLIP, 10, "tok-retry")
    assert served.service.job_ids("qulacs") == [ref.task_id]
    assert len(served.service.job_ids()) == 2  # the first stays registered, never runs


def test_find_task_after_a_restart(serve, clock):
    served = serve()
    first = vendor(served, clock)
    since = clock.now()
    ref = first.submit(QULACS, FLIP, 10, "tok-restart")
    later = vendor(served, clock)  # a new process: it never saw the create's answer
    with pytest.raises(VendorUnavailable, match="may still be landing"):
        later.find_task(QULACS, "tok-restart", since=since)
    clock.advance(30)
    assert later.find_task(QULACS, "tok-restart", since=since) == ref
    assert later.find_task(QULACS, "tok-never", since=since) is None
    assert later.submit(QULACS, FLIP, 10, "tok-restart") == ref  # found, not made again
    assert len(served.service.job_ids()) == 1


def test_no_message_carries_the_token(serve, clock):
    served = serve()
    v = vendor(served, clock, qulacs_QRMI_OQTOPUS_API_TOKEN="secret-token-123")
    with pytest.raises(AccessDenied) as info:
        v.submit(QULACS, FLIP, 10, "tok-secret")
    assert "secret-token-123" not in str(info.value)
    assert "secret-token-123" not in (v.probe(QULACS).reason or "")


def test_counts_of_reverses_qiskit_order_and_refuses_what_is_not_counts():
    assert counts_of({"011": 3, "0b001": 1}) == {"110": 3, "100": 1}
    with pytest.raises(ValueError, match="is not a bitstring"):
        counts_of({"0x1": 1})
    with pytest.raises(ValueError, match="not a whole number"):
        counts_of({"01": 1.5})
