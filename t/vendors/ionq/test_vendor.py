"""``IonqVendor`` against the emulator's IonQ side, through IonQ's real client
(ionq-core): probe (status, a queue depth from the average queue time and the drain),
submit of an OpenQASM program, poll, result counts (qubit 0 first), cancel, a failed
job's reason, a lost create's job found by its token, sessions whose cost limit is the
budget and IonQ's refusal of a job over it, programs it refuses before anything is sent,
the key it needs, and the pure reads (counts from probabilities, the budget a
reservation leaves)."""

from __future__ import annotations

from typing import Any

import pytest
from served_ionq import BACKENDS, BELL, Served

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.emulator import ManualClock
from flux_quantum.selection.program_kinds import cannot_run
from flux_quantum.site.quota import Limit, LimitCheck, QuotaDecision, Usage, headroom
from flux_quantum.vendors.base import DeviceStatus, RetryBudget, TaskState
from flux_quantum.vendors.errors import AccessDenied, InvalidRequest, NotFound
from flux_quantum.vendors.ionq.vendor import IonqSettings, IonqVendor, counts_from_probabilities

ARIA = Device(
    "ionq-aria", "ionq", "qpu.aria-1", "qpu", 25, "us-east-1",
    PriceModel(per_task=0.30, per_shot=0.03), properties={"drain_seconds_per_task": "10"},
)  # fmt: skip
FORTE = Device("ionq-forte", "ionq", "qpu.forte-1", "qpu", 36, "us-east-1", PriceModel())
NOISY = Device(
    "ionq-sim-aria", "ionq", "simulator", "simulator", 29, "us-east-1", PriceModel(),
    properties={"ionq_noise": "aria-1"},
)  # fmt: skip


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def served(clock, emulator_tier) -> Any:
    served = Served({"backends": BACKENDS}, clock)
    yield served
    served.server.stop()


def vendor(served: Served, **environ: str) -> IonqVendor:
    env = {**served.service.env(served.url), **environ}
    return IonqVendor(
        devices=[ARIA, FORTE, NOISY], environ=env, retry=RetryBudget(attempts=1),
        sleep=lambda s: None,
    )  # fmt: skip


def test_probe_status_and_queue_depth(served, clock):
    v = vendor(served)
    aria = v.probe(ARIA)
    assert aria.status is DeviceStatus.ONLINE and aria.queue_depth == 1  # 10 s / 10 s
    forte = v.probe(FORTE)
    assert forte.status is DeviceStatus.OFFLINE and forte.reason == "unavailable"
    assert forte.queue_depth is None  # no drain_seconds_per_task: no depth
    assert not v.reports_positions(ARIA)


def test_bell_runs_and_counts(served, clock):
    v = vendor(served)
    task = v.submit(ARIA, BELL, 200, "tok-bell")
    assert v.poll(task).state is TaskState.QUEUED
    with pytest.raises(InvalidRequest, match="is ready, not completed"):
        v.result(task)
    clock.advance(40)
    assert v.poll(task).state is TaskState.COMPLETED
    counts = v.result(task).counts
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 200
    assert v.attach(task.task_id) == task  # the token is read back from the job's metadata


def test_noise_model_from_the_device_property(served, clock):
    v = vendor(served)
    task = v.submit(NOISY, BELL, 2000, "tok-noise")
    clock.advance(5)
    assert {"01", "10"} & set(v.result(task).counts)


def test_cancel_and_failure(clock, emulator_tier):
    served = Served(
        {"backends": BACKENDS,
         "faults": [{"operation": "CreateJob", "fail_job": "ion lost", "calls": [2]}]},
        clock,
    )  # fmt: skip
    try:
        v = vendor(served)
        waiting = v.submit(ARIA, BELL, 10, "tok-a")
        failing = v.submit(ARIA, BELL, 10, "tok-b")
        v.cancel(waiting)
        assert v.poll(waiting).state is TaskState.CANCELLED
        clock.advance(60)
        failed = v.poll(failing)
        assert failed.state is TaskState.FAILED
        assert failed.message == "QuantumComputerError: ion lost"
    finally:
        served.server.stop()


def test_a_lost_create_is_found_by_its_token(served):
    v = vendor(served)
    made = v.submit(ARIA, BELL, 10, "tok-lost")
    v.submit(ARIA, BELL, 10, "tok-other")
    assert v.find_task(ARIA, "tok-lost", since=0.0) == made
    assert v.find_task(ARIA, "tok-never", since=0.0) is None


def test_session_cost_limit_is_the_budget_and_ionq_refuses_past_it(served, clock):
    v = vendor(served)
    opening = v.open_session(ARIA, "dedicated", cost_limit=4.0)
    assert opening.mode == "dedicated" and opening.session is not None
    session = opening.session
    [stored] = served.service.session_ids()
    assert session.session_id == stored
    first = v.submit_in(session, ARIA, BELL, 100, "tok-1")  # $3.30
    with pytest.raises(InvalidRequest) as refused:
        v.submit_in(session, ARIA, BELL, 100, "tok-2")
    message = str(refused.value)
    assert message == (
        "ionq create_job for ionq-aria: Session cost limit exceeded: the job would cost "
        "$3.30 and the session has $3.30 of its $4.00 limit spent."
    )
    assert refused.value.vendor_code == "HTTP400" and not refused.value.retryable
    assert session.session_id not in message
    found = v.session_of(first)
    assert found is not None and found.session_id == session.session_id and not found.closed
    v.close_session(session)
    found = v.session_of(first)
    assert found is not None and found.closed
    assert v.session_environment(session) == {"IONQ_SESSION_ID": session.session_id}


def test_a_session_without_a_budget_has_no_cost_limit(served):
    v = vendor(served)
    opening = v.open_session(ARIA, "batch")
    assert opening.mode == "batch" and opening.session is not None
    v.submit_in(opening.session, ARIA, BELL, 100, "tok-1")
    v.submit_in(opening.session, ARIA, BELL, 100, "tok-2")


def test_programs_ionq_cannot_run_are_refused_before_anything_is_sent(served):
    v = vendor(served)
    pulser = '{"register": [], "channels": {}, "operations": []}'
    with pytest.raises(InvalidRequest, match="ionq-aria takes OpenQASM circuits only \\(ionq\\)"):
        v.submit(ARIA, pulser, 10, "tok")
    with pytest.raises(InvalidRequest, match="shots must be an integer >= 1"):
        v.submit(ARIA, BELL, 0, "tok")
    assert served.service.calls == []
    assert cannot_run(pulser, [ARIA]) == {
        "ionq-aria": "takes OpenQASM circuits only (ionq), the program is a Pulser sequence"
    }


def test_missing_key_is_named_and_never_sent(served):
    v = IonqVendor(devices=[ARIA], environ={"IONQ_API_URL": served.url + "/ionq/v0.4"})
    with pytest.raises(AccessDenied, match="set IONQ_API_KEY in the job owner's environment"):
        v.submit(ARIA, BELL, 10, "tok")
    snapshot = v.probe(ARIA)
    assert snapshot.status is DeviceStatus.UNREACHABLE and "IONQ_API_KEY" in (snapshot.reason or "")


def test_wrong_key_and_unknown_job(served):
    v = vendor(served, IONQ_API_KEY="wrong")
    with pytest.raises(AccessDenied, match="ionq create_job for ionq-aria: Invalid API key."):
        v.submit(ARIA, BELL, 10, "tok")
    with pytest.raises(NotFound, match="Job nope not found"):
        vendor(served).attach("nope")


def test_endpoint_from_the_environment_then_the_catalog():
    env = {"IONQ_API_URL": "http://127.0.0.1:1/ionq/v0.4/"}
    assert IonqVendor(environ=env).endpoint == "http://127.0.0.1:1/ionq/v0.4"
    catalog = IonqSettings.from_catalog({"endpoint": "https://ionq.example/v0.4"})
    assert IonqVendor(catalog, environ={}).endpoint == "https://ionq.example/v0.4"
    assert IonqVendor(environ={}).endpoint == "https://api.ionq.co/v0.4"


def test_counts_from_probabilities_put_qubit_0_first():
    assert counts_from_probabilities({"0": 0.5, "3": 0.5}, 100, 2) == {"00": 50, "11": 50}
    assert counts_from_probabilities({"1": 0.25, "2": 0.75}, 4, 3) == {"100": 1, "010": 3}
    assert counts_from_probabilities({"2": 1.0}, 10) == {"01": 10}  # width from the state


def test_headroom_is_the_cap_or_the_tightest_spend_limit_left():
    def check(spend: float | None, used: float) -> LimitCheck:
        limit = Limit(index=0, scope="user", who="*", period="month", spend=spend, tasks=None)
        return LimitCheck(limit, None, Usage(spend=used), True)  # type: ignore[arg-type]

    decision = QuotaDecision(True, "", (check(10.0, 7.5), check(None, 0.0), check(50.0, 1.0)))
    assert headroom(None, decision) == 2.5
    assert headroom(2.0, decision) == 2.0
    assert headroom(5.0, QuotaDecision(True, "")) == 5.0
    assert headroom(None, QuotaDecision(True, "")) is None


def test_a_create_retried_after_its_answer_was_lost_makes_no_second_job(clock, emulator_tier):
    served = Served(
        {"backends": BACKENDS,
         "faults": [{"operation": "CreateJob", "reset": True, "after_commit": True, "calls": [1]}]},
        clock,
    )  # fmt: skip
    try:
        v = IonqVendor(
            devices=[ARIA], environ=served.service.env(served.url),
            retry=RetryBudget(attempts=3), sleep=lambda s: None,
        )  # fmt: skip
        task = v.submit(ARIA, BELL, 10, "tok-lost-answer")
        assert served.service.job_ids() == [task.task_id]  # found by its token, not made again
        assert [c.operation for c in served.service.calls].count("CreateJob") == 1
    finally:
        served.server.stop()
