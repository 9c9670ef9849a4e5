"""The IBM vendor through the real qrmi client against the emulator on 127.0.0.1: probe,
lifecycle and result shape, the payload, each fault mapped to the vendor error family,
exactly one job per token across a lost answer and a kill -9, sessions opened and
always released (asserted from the emulator's call log: done, cancel, failure and
restart paths), the Open plan's 1352 fallback, local twins, and the pure helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from compiled import isa

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, WallClock
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskRef, TaskState
from flux_quantum.vendors.factory import make_vendor
from flux_quantum.vendors.ibm.payload import (
    counts_from_result,
    mark_program,
    program_token,
    sampler_input,
)
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor
from flux_quantum.vendors.local.vendor import LocalVendor

# x on qubit 0 of three: c[0] reads 1. Counts are written c[0] first.
PROGRAM = """OPENQASM 3.0;
include "stdgates.inc";
qubit[3] q;
bit[3] c;
x q[0];
c[0] = measure q[0];
c[1] = measure q[1];
c[2] = measure q[2];
"""
# As the compile stage writes it for the backend: IBM runs ISA circuits only.
BELL = isa(
    'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
)
CATALOG = parse_catalog(
    """
devices:
  - {name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {per_minute: 96}}
  - {name: paused, vendor: ibm, id: ibm_paused, class: qpu, qubits: 5, price: {per_minute: 96}}
  - {name: down, vendor: ibm, id: ibm_down, class: qpu, qubits: 5, price: {per_minute: 96}}
""",
    "t.yaml",
)
LINE = CATALOG.get("line")
BACKENDS = [
    {"name": "ibm_line", "qubits": 5, "queue": {"depth": 3, "service_time": 10}},
    {"name": "ibm_paused", "qubits": 5, "paused": [[0, 100]]},
    {"name": "ibm_down", "qubits": 5, "status": "offline"},
]


def start(clock, faults=(), plan: str = "paid") -> Emulator:
    scenario = IbmScenario.from_dict({"plan": plan, "backends": BACKENDS, "faults": list(faults)})
    return Emulator(clock=clock, ibm=scenario).start()


def epoch_clock(clock):
    """The vendor's clock on the emulator's timeline (epoch seconds)."""
    return lambda: clock.epoch.timestamp() + clock.now()


def vendor(emu: Emulator, clock, attempts: int = 3, **settings) -> IbmVendor:
    return IbmVendor(
        IbmSettings(settle=settings.pop("settle", 0.0), **settings),
        devices=CATALOG.devices,
        retry=RetryBudget(attempts=attempts, base_delay=0.01),
        clock=epoch_clock(clock),
        sleep=lambda seconds: None,
        environ=emu.ibm.env(emu.url),
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emu(clock, emulator_tier):
    emulator = start(clock)
    yield emulator
    emulator.stop()


# --- pure helpers --------------------------------------------------------------------------


def test_the_payload_is_one_samplerv2_pub_of_the_marked_program():
    document = json.loads(sampler_input(PROGRAM, 100, "fq-1-2-0-0"))
    assert document["shots"] == 100 and document["version"] == 2
    (circuit,) = document["pubs"][0]
    lines = circuit.splitlines()
    assert lines[0] == "OPENQASM 3.0;" and lines[1] == "// flux-quantum-token: fq-1-2-0-0"
    assert lines[2:] == PROGRAM.splitlines()[1:]
    assert program_token(circuit) == "fq-1-2-0-0"
    # Marking again replaces the mark (a retried attempt carries its own token only).
    assert program_token(mark_program(circuit, "fq-1-2-0-1")) == "fq-1-2-0-1"
    assert mark_program(circuit, "fq-x").count("flux-quantum-token") == 1
    with pytest.raises(ValueError, match="OpenQASM 3"):
        sampler_input("OPENQASM 2.0;\nqreg q[1];\n", 10, "t")
    with pytest.raises(ValueError, match="token"):
        sampler_input(PROGRAM, 10, "two words")
    with pytest.raises(ValueError, match="shots"):
        sampler_input(PROGRAM, 0, "t")


def test_counts_are_read_from_runtimeencoder_bitarrays():
    from flux_quantum.emulator.ibm.wire import sampler_result

    # Two shots over 10 bits: c[0]=1 (value 1) and c[9]=1 (value 512).
    text = sampler_result([("c", [1, 512, 1], 10, 3)], "job")
    assert counts_from_result(text) == {"1000000000": 2, "0000000001": 1}
    with pytest.raises(ValueError):
        counts_from_result(json.dumps({"__type__": "Result", "__value__": {}}))


# --- the vendor through qrmi -----------------------------------------------------------------


def test_probe_reports_status_pending_jobs_price_and_calibration(emu, clock):
    ibm = vendor(emu, clock)
    snapshot = ibm.probe(LINE)
    assert snapshot.status is DeviceStatus.ONLINE and snapshot.queue_depth == 3
    assert snapshot.price == LINE.price and snapshot.describe_status() == "ONLINE"
    calibration = snapshot.calibration
    assert calibration is not None and calibration.source == "ibm properties"
    assert len(calibration.readout) == 5 and len(calibration.two_qubit) == 4
    assert 0.9 < calibration.two_qubit_median < 1.0
    paused = ibm.probe(CATALOG.get("paused"))
    assert paused.status is DeviceStatus.PAUSED and "paused" in (paused.reason or ""), paused
    assert ibm.probe(CATALOG.get("down")).describe_status() == "OFFLINE (The backend is offline.)"


def test_lifecycle_counts_and_reattach(emu, clock):
    ibm = vendor(emu, clock)
    task = ibm.submit(LINE, PROGRAM, 200, "fq-7-1-0-0")
    assert task == TaskRef("ibm", "line", task.task_id, "fq-7-1-0-0")
    queued = ibm.poll(task)
    assert queued.state is TaskState.QUEUED and queued.position is None  # IBM gives none
    with pytest.raises(errors.InvalidRequest):
        ibm.result(task)
    clock.advance(45)
    assert ibm.poll(task).state is TaskState.RUNNING
    clock.advance(10)
    assert ibm.poll(task).state is TaskState.COMPLETED
    result = ibm.result(task)
    assert result.counts == {"100": 200}  # the shape consumers read from Braket too
    # IBM answers a job sent with support_qiskit false in plain JSON, hex samples per register.
    assert result.raw["results"][0]["data"]["c"] == {"samples": ["0x1"] * 200, "num_bits": 3}
    # After a restart a fresh vendor re-attaches by job id and reads the same result.
    again = vendor(emu, clock)
    assert again.attach(task.task_id) == TaskRef("ibm", "line", task.task_id)
    assert again.result(task).counts == {"100": 200}
    params = emu.ibm.job_params(task.task_id)
    assert program_token(params["pubs"][0][0]) == "fq-7-1-0-0" and params["shots"] == 200
    # What IBM bills: the job's usage (here the emulated run, RUNNING to COMPLETED).
    billed = again.billed_seconds(task)
    assert billed is not None and 0 < billed <= 10


@pytest.mark.emulator
def test_cancel_and_a_failed_job_with_its_reason(clock):
    emu = start(clock, [{"operation": "CreateJob", "fail_job": "readout drift", "calls": [2]}])
    try:
        ibm = vendor(emu, clock)
        task = ibm.submit(LINE, BELL, 10, "fq-c")
        ibm.cancel(task)
        cancelled = ibm.poll(task)
        assert cancelled.state is TaskState.CANCELLED and cancelled.terminal
        failing = ibm.submit(LINE, BELL, 10, "fq-f")
        clock.advance(60)
        failed = ibm.poll(failing)
        assert failed.state is TaskState.FAILED and "readout drift" in failed.message
    finally:
        emu.stop()


@pytest.mark.emulator
@pytest.mark.parametrize(
    "fault, cls, code, retryable",
    [
        ({"status": 500}, errors.VendorUnavailable, "1000", True),
        ({"status": 503}, errors.VendorUnavailable, "1000", True),
        ({"status": 429}, errors.VendorThrottled, "1202", True),
        ({"status": 401, "code": 1201}, errors.AccessDenied, "1201", False),
        ({"status": 400, "code": 1002}, errors.InvalidRequest, "1002", False),
        ({"code": 1004}, errors.DeviceOffline, "1004", False),
        ({"status": 409}, errors.Conflict, "1000", False),
    ],
)
def test_each_fault_is_mapped_to_the_error_family(clock, fault, cls, code, retryable):
    emu = start(clock, [{"operation": "CreateJob", **fault}])
    try:
        with pytest.raises(cls) as raised:
            vendor(emu, clock, attempts=1).submit(LINE, BELL, 10, "fq-e")
        assert raised.value.vendor_code == code and raised.value.retryable is retryable
        assert raised.value.vendor == "ibm" and "create for line" in str(raised.value)
    finally:
        emu.stop()


def test_unknown_job_and_offline_backend(emu, clock):
    ibm = vendor(emu, clock)
    with pytest.raises(errors.NotFound) as raised:
        ibm.poll(TaskRef("ibm", "line", "nosuchjob"))
    assert raised.value.vendor_code == "1291"
    with pytest.raises(errors.DeviceOffline):
        ibm.submit(CATALOG.get("down"), BELL, 10, "fq-d")


@pytest.mark.emulator
def test_throttling_is_retried_within_one_budget(clock):
    emu = start(clock, [{"operation": "GetJob", "status": 429, "first": 2}])
    try:
        ibm = vendor(emu, clock, attempts=3)
        task = ibm.submit(LINE, BELL, 10, "fq-t")
        assert ibm.poll(task).state is TaskState.QUEUED  # after two throttled answers
        assert emu.call_count("GetJob") == 3
    finally:
        emu.stop()
    emu = start(clock, [{"operation": "GetJob", "status": 429}])
    try:
        ibm = vendor(emu, clock, attempts=2)
        task = ibm.submit(LINE, BELL, 10, "fq-t")
        with pytest.raises(errors.VendorThrottled) as raised:
            ibm.poll(task)
        assert raised.value.attempts == 2 and "gave up after 2 attempts" in str(raised.value)
    finally:
        emu.stop()


@pytest.mark.emulator
def test_concurrent_polls_of_one_backend_all_answer(clock):
    """The service polls from several worker threads; qrmi's resource takes one at a time."""
    emu = start(clock, [{"operation": "GetJob", "delay": 0.3}])
    try:
        ibm = vendor(emu, clock)
        task = ibm.submit(LINE, BELL, 10, "fq-cc")
        answers: list[object] = []

        def poll() -> None:
            try:
                answers.append(ibm.poll(task).state)
            except Exception as exc:  # the test reports whatever a thread met
                answers.append(exc)

        threads = [threading.Thread(target=poll) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert answers == [TaskState.QUEUED] * 3
    finally:
        emu.stop()


def test_an_unreachable_endpoint_is_unavailable_not_a_hang():
    closed = "http://127.0.0.1:9"
    env = {
        "QRMI_IBM_QCS_ENDPOINT": closed + "/api/v1",
        "QRMI_IBM_QCS_IAM_ENDPOINT": closed,
        "QRMI_IBM_QCS_IAM_APIKEY": "k",
        "QRMI_IBM_QCS_SERVICE_CRN": "crn",
    }
    ibm = IbmVendor(
        devices=CATALOG.devices, environ=env, retry=RetryBudget(attempts=1), clock=time.time
    )
    snapshot = ibm.probe(LINE)
    assert snapshot.status is DeviceStatus.UNREACHABLE and snapshot.reason
    with pytest.raises(errors.VendorUnavailable) as raised:
        ibm.submit(LINE, BELL, 10, "fq-u")
    assert raised.value.retryable


def test_missing_credentials_say_which_variables_and_never_the_key(emu, clock):
    ibm = IbmVendor(IbmSettings(), devices=CATALOG.devices, environ={})
    with pytest.raises(errors.AccessDenied) as raised:
        ibm.submit(LINE, BELL, 10, "fq-n")
    assert "ibm_line_QRMI_IBM_QCS_IAM_APIKEY" in str(raised.value)
    env = dict(emu.ibm.env(emu.url), QRMI_IBM_QCS_IAM_APIKEY="secret-key-123")
    env.pop("ibm_line_QRMI_IBM_QCS_IAM_APIKEY")
    scenario = {"apikey": "other", "backends": BACKENDS}
    strict = Emulator(clock=clock, ibm=IbmScenario.from_dict(scenario)).start()
    try:
        env = {k: v.replace(emu.url, strict.url) for k, v in env.items()}
        wrong = IbmVendor(IbmSettings(), devices=CATALOG.devices, environ=env, clock=time.time)
        with pytest.raises(errors.AccessDenied) as raised:
            wrong.submit(LINE, BELL, 10, "fq-n")
        assert "secret-key-123" not in str(raised.value)
        assert "secret-key-123" not in repr(wrong.settings)
    finally:
        strict.stop()


# --- exactly one job per token ---------------------------------------------------------------


@pytest.mark.emulator
def test_a_create_answered_with_an_error_after_it_landed_makes_one_job(clock):
    emu = start(
        clock, [{"operation": "CreateJob", "status": 503, "after_commit": True, "calls": [1]}]
    )
    try:
        ibm = vendor(emu, clock, attempts=3)
        task = ibm.submit(LINE, BELL, 10, "fq-lost-1")
        assert emu.ibm.job_ids() == [task.task_id]  # found again, not created twice
        assert emu.call_count("CreateJob") == 1 and emu.call_count("ListJobs") >= 1
        # The same token later (a service-level retry) still finds it.
        assert ibm.submit(LINE, BELL, 10, "fq-lost-1") == task
        assert emu.ibm.job_ids() == [task.task_id]
    finally:
        emu.stop()


def test_find_task_after_a_restart(emu, clock):
    since = epoch_clock(clock)()
    task = vendor(emu, clock).submit(LINE, BELL, 10, "fq-r-0")
    vendor(emu, clock).submit(LINE, BELL, 10, "fq-r-1")  # another request's job
    restarted = vendor(emu, clock)
    assert restarted.find_task(LINE, "fq-r-0", since=since) == task
    assert restarted.find_task(LINE, "fq-never", since=since) is None
    # Jobs created before the recorded time (minus the skew margin) are not looked at.
    clock.advance(3600)
    assert restarted.find_task(LINE, "fq-r-0", since=epoch_clock(clock)()) is None
    # Too soon after the recorded create a "not found" is not trusted.
    cautious = vendor(emu, clock, settle=60.0)
    with pytest.raises(errors.VendorUnavailable) as raised:
        cautious.find_task(LINE, "fq-r-0", since=epoch_clock(clock)())
    assert raised.value.retryable and raised.value.vendor_code == "CreateMaySettle"


CHILD = """
import json, sys, time
from flux_quantum.catalog import parse_catalog
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor
catalog = parse_catalog(sys.argv[1], "t.yaml")
env = json.loads(sys.argv[2])
since = time.time()
open(sys.argv[3], "w").write(str(since))  # recorded before the create, as the service does
IbmVendor(IbmSettings(settle=0), devices=catalog.devices, environ=env).submit(
    catalog.get("line"), sys.argv[4], 10, "fq-kill-0-0")
"""


@pytest.mark.emulator
def test_exactly_one_job_per_request_across_a_kill_9(tmp_path: Path):
    """The service records the token and the time, creates, and is killed before it hears
    the job id (the emulator holds the answer). After the restart, find_task finds that
    job and nothing creates a second one."""
    emu = Emulator(
        clock=WallClock(epoch=datetime.now(UTC)),
        ibm=IbmScenario.from_dict(
            {
                "backends": [{"name": "ibm_line", "qubits": 5, "queue": {"service_time": 600}}],
                "faults": [{"operation": "CreateJob", "delay": 30, "after_commit": True}],
            }
        ),
    ).start()
    recorded = tmp_path / "since"
    catalog_text = "devices:\n  - {name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {per_minute: 96}}\n"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            catalog_text,
            json.dumps(emu.ibm.env(emu.url)),
            str(recorded),
            BELL,
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        deadline = time.monotonic() + 30
        while not emu.ibm.job_ids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert emu.ibm.job_ids(), "the child never created its job"
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        since = float(recorded.read_text())
        restarted = IbmVendor(
            IbmSettings(settle=0), devices=parse_catalog(catalog_text, "t.yaml").devices,
            environ=emu.ibm.env(emu.url),
        )  # fmt: skip
        line = parse_catalog(catalog_text, "t.yaml").get("line")
        found = restarted.find_task(line, "fq-kill-0-0", since=since)
        task = found or restarted.submit(line, BELL, 10, "fq-kill-0-0")
        assert found is not None and emu.ibm.job_ids() == [task.task_id]
    finally:
        if child.poll() is None:
            child.kill()
        emu.stop()


# --- sessions ------------------------------------------------------------------------------


def released(emu: Emulator, session_id: str) -> bool:
    return (
        emu.call_count("UpdateSession", session_id) + emu.call_count("CloseSession", session_id)
        >= 1
    )


def test_a_session_is_opened_ridden_and_released_when_the_job_ends(emu, clock):
    ibm = vendor(emu, clock)
    opening = ibm.open_session(LINE)
    assert opening.mode == opening.requested == "dedicated" and opening.reason is None
    session = opening.session
    assert session is not None and emu.ibm.session_state(session.session_id) == "open"
    assert [c.task for c in emu.calls if c.operation == "CreateSession"] == [session.session_id]
    first = ibm.submit_in(session, LINE, BELL, 10, "fq-s-0")
    env = ibm.session_environment(session)
    assert env == {
        "QRMI_JOB_ACQUISITION_TOKEN": session.session_id,
        "ibm_line_QRMI_IBM_QCS_SESSION_ID": session.session_id,
    }
    # A later task from inside the job rides the session through QRMI's environment.
    inside = IbmVendor(
        IbmSettings(settle=0),
        devices=CATALOG.devices,
        environ={**emu.ibm.env(emu.url), **env},
        clock=epoch_clock(clock),
    )
    later = inside.submit(LINE, BELL, 10, "fq-s-1")
    assert ibm.session_of(later) == session
    clock.advance(100)
    assert ibm.poll(first).state is TaskState.COMPLETED
    ibm.close_session(session)
    assert released(emu, session.session_id)
    assert emu.ibm.session_state(session.session_id) == "closed"
    assert ibm.session_of(first).closed  # a restarted service need not close it again
    # What may be recorded never holds the id.
    assert session.session_id not in json.dumps(opening.to_dict())
    assert session.session_id not in repr(opening)


def test_cancel_closes_the_session_and_its_pending_jobs(emu, clock):
    ibm = vendor(emu, clock)
    session = ibm.open_session(LINE, "batch").session
    task = ibm.submit_in(session, LINE, BELL, 10, "fq-sc")
    ibm.cancel(task)
    ibm.close_session(session)
    assert released(emu, session.session_id)
    assert emu.ibm.session_state(session.session_id) == "closed"
    ibm.close_session(session)  # releasing twice is harmless


@pytest.mark.emulator
def test_a_failed_job_s_session_is_released_too(clock):
    emu = start(clock, [{"operation": "CreateJob", "fail_job": "boom"}])
    try:
        ibm = vendor(emu, clock)
        session = ibm.open_session(LINE).session
        task = ibm.submit_in(session, LINE, BELL, 10, "fq-sf")
        clock.advance(100)
        assert ibm.poll(task).state is TaskState.FAILED
        ibm.close_session(session)
        assert released(emu, session.session_id)
        assert emu.ibm.session_state(session.session_id) == "closed"
    finally:
        emu.stop()


def test_after_a_restart_the_session_is_found_from_its_task_and_released(emu, clock):
    """flux-quantum records the task id, never the session id: a restarted service reads
    the session back from IBM with the task and releases it."""
    ibm = vendor(emu, clock)
    opening = ibm.open_session(LINE)
    task = ibm.submit_in(opening.session, LINE, BELL, 10, "fq-sr")
    recorded = {"task": task.task_id, "session": opening.to_dict()}  # the eventlog's part
    del ibm
    restarted = vendor(emu, clock)
    session = restarted.session_of(TaskRef("ibm", "line", recorded["task"]))
    assert (
        session is not None and session.fingerprint == recorded["session"]["session"]["fingerprint"]
    )
    assert session.mode == "dedicated"
    restarted.close_session(session)
    assert released(emu, session.session_id)
    assert emu.ibm.session_state(session.session_id) == "closed"


@pytest.mark.emulator
def test_the_open_plan_falls_back_to_batch_then_to_job_mode(clock):
    emu = start(clock, plan="open")
    try:
        opening = vendor(emu, clock).open_session(LINE)
        assert (opening.requested, opening.mode) == ("dedicated", "batch")
        assert opening.reason.startswith("IBM refused a dedicated session on line (1352")
        assert opening.reason.endswith("using a batch session")
        assert emu.ibm.session_state(opening.session.session_id) == "open"
    finally:
        emu.stop()
    emu = start(clock, [{"operation": "CreateSession", "code": 1352}], plan="open")
    try:
        opening = vendor(emu, clock).open_session(LINE)
        assert opening.mode == "job" and opening.session is None
        assert opening.reason.endswith("tasks run as single jobs")
        assert emu.call_count("CreateSession") == 2
    finally:
        emu.stop()
    with pytest.raises(errors.InvalidRequest):
        vendor(start(clock), clock).open_session(LINE, "exclusive")


# --- wiring ------------------------------------------------------------------------------------


def test_make_vendor_and_local_twins(emu, clock):
    catalog = parse_catalog(
        f"""
vendors:
  ibm: {{session_mode: batch}}
  local: {{url: "{emu.url}"}}
devices:
  - {{name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {{per_minute: 96}}}}
  - {{name: local-line, vendor: local, id: ibm_line, class: qpu, qubits: 5,
     price: {{per_minute: 96}}}}
""",
        "t.yaml",
    )
    ibm = make_vendor("ibm", catalog, environ=emu.ibm.env(emu.url))
    assert isinstance(ibm, IbmVendor) and ibm.settings.session_mode == "batch"
    local = make_vendor("local", catalog, environ={})
    assert isinstance(local, LocalVendor)
    twin = catalog.get("local-line")
    assert local.probe(twin).queue_depth == 3
    task = local.submit(twin, PROGRAM, 20, "fq-twin")
    assert task.vendor == "local" and not task.task_id.startswith("arn:")
    # A restarted service re-attaches it through the IBM side (one call, not Braket's).
    again = make_vendor("local", catalog, environ={})
    assert again.attach_and_poll(task).state is TaskState.QUEUED
    clock.advance(60)
    assert local.poll(task).state is TaskState.COMPLETED
    assert local.result(task).counts == {"100": 20}
    opening = local.open_session(twin)
    assert opening.mode == "dedicated" and opening.session.vendor == "local"
    local.close_session(opening.session)
    assert released(emu, opening.session.session_id)
