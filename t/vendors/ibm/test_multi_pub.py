"""IBM Sampler jobs of several pubs (merged tasks), through the real qrmi client against the
emulator on 127.0.0.1: one job for the pubs, run as long as all their shots take and billed
as one; results split back per pub, each as if it had been a job of its own; IBM's job
limits (executions, input size) refused with IBM's validation error by the emulator and
before sending by the vendor; one job per token across a lost answer; the pure payload."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace

import pytest
import qrmi
from compiled import isa

from flux_quantum.catalog import parse_catalog
from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.emulator.ibm.scenario import MAX_EXECUTIONS as EMULATED_MAX_EXECUTIONS
from flux_quantum.vendors import errors
from flux_quantum.vendors.base import RetryBudget, TaskRef, TaskState
from flux_quantum.vendors.ibm.payload import (
    MAX_EXECUTIONS,
    MAX_INPUT_BYTES,
    OverLimit,
    program_token,
    sampler_set_input,
    split_result,
)
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor

# Counts are written c[0] first. X0: x on qubit 0 of three; ZERO: nothing; BELL: random.
X0 = """OPENQASM 3.0;
include "stdgates.inc";
qubit[3] q;
bit[3] c;
x q[0];
c[0] = measure q[0];
c[1] = measure q[1];
c[2] = measure q[2];
"""
ZERO = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nc = measure q;\n'
# As the compile stage writes it for the backend: IBM runs ISA circuits only.
BELL = isa(ZERO.replace("bit[2] c;\n", "bit[2] c;\nh q[0];\ncx q[0], q[1];\n"))
CATALOG = parse_catalog(
    """
devices:
  - {name: line, vendor: ibm, id: ibm_line, class: qpu, qubits: 5, price: {per_minute: 96}}
""",
    "t.yaml",
)
LINE = CATALOG.get("line")
# Three background jobs of 10 s ahead (one running, two waiting); ours take 10 s plus
# 10 ms a shot.
BACKEND = {
    "name": "ibm_line",
    "qubits": 5,
    "queue": {"depth": 2, "service_time": 10, "shot_time": 0.01},
}
PRICE = 1.60  # the paid plan's dollars per usage second


def start(clock: ManualClock, faults=(), **top) -> Emulator:
    scenario = IbmScenario.from_dict({"backends": [BACKEND], "faults": list(faults), **top})
    return Emulator(clock=clock, ibm=scenario).start()


def vendor(emu: Emulator, clock: ManualClock) -> IbmVendor:
    return IbmVendor(
        IbmSettings(settle=0.0),
        devices=CATALOG.devices,
        retry=RetryBudget(attempts=3, base_delay=0.01),
        clock=lambda: clock.epoch.timestamp() + clock.now(),
        sleep=lambda seconds: None,
        environ=emu.ibm.env(emu.url),
    )


def create(emu: Emulator, params: dict) -> tuple[int, dict]:
    """(HTTP status, body) of one POST /jobs of ``params`` to the IBM side, plain HTTP."""
    form = urllib.parse.urlencode({"apikey": "k"}).encode()
    with urllib.request.urlopen(emu.url + "/ibm/identity/token", data=form) as answer:
        token = json.loads(answer.read())["access_token"]
    body = {"program_id": "sampler", "backend": "ibm_line", "params": params}
    request = urllib.request.Request(
        emu.url + "/ibm/api/v1/jobs",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + token},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def emu(clock, emulator_tier):
    emulator = start(clock)
    yield emulator
    emulator.stop()


# --- one job, results per pub, usage --------------------------------------------------------


def test_three_pubs_run_as_one_job_and_split_back_per_pub(emu, clock):
    ibm = vendor(emu, clock)
    programs = [(X0, 100), (BELL, 200), (ZERO, 300)]
    task = ibm.submit_set(LINE, programs, "fq-set-1")
    assert task == TaskRef("ibm", "line", task.task_id, "fq-set-1")
    assert emu.ibm.job_ids() == [task.task_id] and emu.call_count("CreateJob") == 1
    params = emu.ibm.job_params(task.task_id)
    assert [pub[1:] for pub in params["pubs"]] == [[None, 100], [None, 200], [None, 300]]
    assert {program_token(pub[0]) for pub in params["pubs"]} == {"fq-set-1"}
    assert params["support_qiskit"] is False and "shots" not in params
    with pytest.raises(errors.InvalidRequest):
        ibm.results(task)  # not before it completed
    # Three background jobs of 10 s, then ours: 10 s plus every pub's shots at 10 ms.
    clock.advance(30)
    assert ibm.poll(task).state is TaskState.RUNNING
    clock.advance(10 + 600 * 0.01)
    assert ibm.poll(task).state is TaskState.COMPLETED
    timeline = emu.ibm.job_timeline(task.task_id)
    assert (timeline.started, timeline.ended) == (30, 46)

    x0, bell, zero = ibm.results(task)
    assert all(part.task == task for part in (x0, bell, zero))
    assert x0.counts == {"100": 100} and zero.counts == {"00": 300}
    assert set(bell.counts) <= {"00", "11"} and sum(bell.counts.values()) == 200
    assert ibm.result(task).counts == x0.counts  # result() is the first pub's
    # Each pub's raw document is the job's, with that pub only, as IBM answers a job
    # sent with support_qiskit false: hex samples per register.
    assert [len(part.raw["results"]) for part in (x0, bell, zero)] == [1, 1, 1]
    assert zero.raw["results"][0]["data"]["c"] == {"samples": ["0x0"] * 300, "num_bits": 2}
    assert x0.raw["metadata"]["execution"]["job_id"] == task.task_id

    # The same program alone in its own job reads the same: counts, shots, document.
    alone = ibm.submit(LINE, X0, 100, "fq-alone-1")
    clock.advance(30)
    single = ibm.results(alone)
    assert len(single) == 1 and single[0].counts == x0.counts
    assert single[0].raw["results"] == x0.raw["results"]


def test_a_program_past_the_last_of_its_task_is_not_found(emu, clock):
    ibm = vendor(emu, clock)
    task = ibm.submit_set(LINE, [(X0, 100), (ZERO, 300)], "fq-past-1")
    clock.advance(30 + 10 + 400 * 0.01)
    assert ibm.result_of(replace(task, program=1)).counts == {"00": 300}
    with pytest.raises(errors.NotFound, match="has 2 program"):
        ibm.result_of(replace(task, program=2))


def test_the_whole_job_is_billed_its_usage_seconds(emu, clock):
    ibm = vendor(emu, clock)
    task = ibm.submit_set(LINE, [(X0, 100), (ZERO, 300)], "fq-bill-1")
    clock.advance(30 + 10 + 400 * 0.01)
    assert ibm.poll(task).state is TaskState.COMPLETED
    assert ibm.billed_seconds(task) == pytest.approx(14)
    tasks = emu.ibm.bill().tasks
    [billed] = tasks
    assert (billed.id, billed.token, billed.state, billed.shots) == (
        task.task_id,
        "fq-bill-1",
        "COMPLETED",
        400,
    )
    assert billed.billed_seconds == pytest.approx(14)
    assert billed.cost == pytest.approx(14 * PRICE)


def test_a_set_rides_a_session(emu, clock):
    ibm = vendor(emu, clock)
    opening = ibm.open_session(LINE, "batch")
    assert opening.session is not None
    task = ibm.submit_set_in(opening.session, LINE, [(X0, 10), (ZERO, 20)], "fq-sess-1")
    assert emu.ibm.session_jobs(opening.session.session_id) == [task.task_id]
    assert ibm.session_of(task) == opening.session
    clock.advance(30 + 10 + 30 * 0.01)
    assert [sum(r.counts.values()) for r in ibm.results(task)] == [10, 20]
    ibm.close_session(opening.session)


# --- IBM's limits ---------------------------------------------------------------------------


def test_the_emulator_refuses_a_job_over_the_executions_limit_with_ibm_s_error(emu, clock):
    # 101 pubs of 100,000 shots: each pub within a backend's shots, the job over 10 million.
    assert EMULATED_MAX_EXECUTIONS == MAX_EXECUTIONS == 10_000_000
    status, body = create(emu, {"pubs": [[X0, None, 100_000]] * 101, "version": 2})
    assert status == 400
    [error] = body["errors"]
    assert error["code"] == 1002 and "10100000 executions" in error["message"]
    assert "10000000" in error["message"] and emu.ibm.job_ids() == []
    # The real client hears it too.
    config = {k: v for k, v in emu.ibm.env(emu.url).items() if k.startswith("QRMI_")}
    res = qrmi.QuantumResource.from_config(
        "ibm_line", qrmi.ResourceType.IBMQuantumComputeService, config
    )
    document = json.dumps({"pubs": [[X0, None, 100_000]] * 101, "version": 2})
    with pytest.raises(qrmi.QrmiError, match="1002"):
        res.task_start(qrmi.Payload.QiskitPrimitive(input=document, program_id="sampler"))
    assert emu.ibm.job_ids() == []


@pytest.mark.emulator
def test_limits_at_and_over_a_scenario_s_bounds(clock):
    emu = start(clock, max_executions=1000, max_input_bytes=2000)
    try:
        status, body = create(emu, {"pubs": [[X0, None, 400], [ZERO, None, 300], [X0, None, 300]]})
        assert status == 200  # exactly 1000 executions
        status, body = create(emu, {"pubs": [[X0, None, 400], [ZERO, None, 301], [X0, None, 300]]})
        assert status == 400 and body["errors"][0]["code"] == 1002
        assert "1001 executions" in body["errors"][0]["message"]
        status, body = create(emu, {"pubs": [[X0, None, 1]] * 20})
        assert status == 413 and body["errors"][0]["code"] == 1002
        assert "over the limit of 2000 bytes" in body["errors"][0]["message"]
        assert len(emu.ibm.job_ids()) == 1
        # The vendor's own check holds IBM's real limits; the emulator's lower ones refuse
        # its set, translated as an invalid request with IBM's code (not retried).
        ibm = vendor(emu, clock)
        with pytest.raises(errors.InvalidRequest) as raised:
            ibm.submit_set(LINE, [(X0, 600), (ZERO, 600)], "fq-over-1")
        assert raised.value.vendor_code == "1002" and not raised.value.retryable
        assert emu.call_count("CreateJob") == 4 and len(emu.ibm.job_ids()) == 1
    finally:
        emu.stop()


def test_the_vendor_refuses_a_set_over_ibm_s_limits_before_sending(emu, clock):
    ibm = vendor(emu, clock)
    over = [(X0, 100_000)] * 101
    with pytest.raises(errors.InvalidRequest) as raised:
        ibm.submit_set(LINE, over, "fq-big-1")
    assert raised.value.vendor_code == "OverLimit" and "10100000 shots" in str(raised.value)
    with pytest.raises(errors.InvalidRequest) as raised:
        ibm.submit_set(LINE, [(X0, 10), (ZERO, 0)], "fq-bad-1")
    assert raised.value.vendor_code == "InvalidProgram" and "programs[1] shots" in str(raised.value)
    with pytest.raises(errors.NotSupported):
        ibm.submit_set(LINE, [(X0, 10)], "fq-res-1", reservation="arn:window")
    assert emu.call_count("CreateJob") == 0 and emu.ibm.job_ids() == []


# --- one job per token ----------------------------------------------------------------------


@pytest.mark.emulator
def test_a_set_whose_create_answer_was_lost_is_one_job_found_by_its_token(clock):
    emu = start(
        clock, [{"operation": "CreateJob", "reset": True, "after_commit": True, "calls": [1]}]
    )
    try:
        since = clock.epoch.timestamp() + clock.now()
        ibm = vendor(emu, clock)
        task = ibm.submit_set(LINE, [(X0, 10), (BELL, 20), (ZERO, 30)], "fq-lost-set")
        assert emu.ibm.job_ids() == [task.task_id]  # found again, not created twice
        assert emu.call_count("CreateJob") == 1 and emu.call_count("ListJobs") >= 1
        assert ibm.submit_set(LINE, [(X0, 10), (BELL, 20), (ZERO, 30)], "fq-lost-set") == task
        # After a restart the job is found by its token, as for one program.
        assert vendor(emu, clock).find_task(LINE, "fq-lost-set", since=since) == task
        assert emu.ibm.job_ids() == [task.task_id]
    finally:
        emu.stop()


# --- the pure payload -----------------------------------------------------------------------


def test_the_set_input_is_one_marked_pub_per_program_in_order():
    document = json.loads(sampler_set_input([(X0, 5), (BELL, 7)], "fq-9-0"))
    assert document["version"] == 2 and document["support_qiskit"] is False
    assert [pub[1:] for pub in document["pubs"]] == [[None, 5], [None, 7]]
    for pub, program in zip(document["pubs"], (X0, BELL), strict=True):
        lines = pub[0].splitlines()
        assert lines[1] == "// flux-quantum-token: fq-9-0" and lines[2:] == program.splitlines()[1:]
    bad = [
        ([], "programs must be a non-empty list"),
        ([(X0, 5), X0], r"programs\[1\] must be \(OpenQASM 3 program, shots\)"),
        ([(X0, True)], r"programs\[0\] shots must be an integer >= 1"),
        ([("OPENQASM 2.0;\nqreg q[1];\n", 5)], r"programs\[0\]: the program must be OpenQASM 3"),
        ([(b"OPENQASM 3.0;", 5)], r"programs\[0\] must hold the program as text"),
    ]
    for programs, message in bad:
        with pytest.raises(ValueError, match=message):
            sampler_set_input(programs, "fq-9-0")
    with pytest.raises(ValueError, match="token"):
        sampler_set_input([(X0, 5)], "two words")


def test_the_set_input_holds_ibm_s_limits():
    at_limit = json.loads(sampler_set_input([(X0, 100_000)] * 100, "t"))
    assert sum(pub[2] for pub in at_limit["pubs"]) == MAX_EXECUTIONS
    with pytest.raises(OverLimit) as raised:
        sampler_set_input([(X0, 100_000)] * 100 + [(X0, 1)], "t")
    assert raised.value.limit == "executions"
    # Two programs whose text makes the input just over IBM's 64 MiB.
    padded = X0 + "// " + "x" * (MAX_INPUT_BYTES // 2) + "\n"
    with pytest.raises(OverLimit) as raised:
        sampler_set_input([(padded, 1), (padded, 1)], "t")
    assert raised.value.limit == "input_bytes" and f"{MAX_INPUT_BYTES} bytes" in str(raised.value)


def test_results_split_from_either_form_ibm_answers_in():
    from flux_quantum.emulator.ibm.wire import sampler_result

    pubs = [("c", [1, 4, 1], 3, 3), ("meas", [0, 3], 2, 2)]
    for support_qiskit in (True, False):
        split = split_result(sampler_result(pubs, "job-1", support_qiskit))
        assert [counts for counts, _ in split] == [{"100": 2, "001": 1}, {"00": 1, "11": 1}]
    encoded = split_result(sampler_result(pubs, "job-1", True))
    assert [raw["__value__"]["metadata"]["execution"]["job_id"] for _, raw in encoded] == [
        "job-1",
        "job-1",
    ]
    assert all(len(raw["__value__"]["pub_results"]) == 1 for _, raw in encoded)
    # Two registers in one pub are joined per shot, in the result's field order.
    two = {"results": [{"data": {"a": {"samples": ["0x1", "0x0"], "num_bits": 1},
                                 "b": {"samples": ["0x2", "0x2"], "num_bits": 2}}}]}  # fmt: skip
    assert split_result(json.dumps(two))[0][0] == {"101": 1, "001": 1}
    empty = {"__type__": "PrimitiveResult", "__value__": {"pub_results": []}}
    for bad in ({"results": []}, empty, {"x": 1}):
        with pytest.raises(ValueError):
            split_result(json.dumps(bad))
