"""Unit tier: the promise checker (``flux_quantum.testing.promises``) on Facts built by hand.

For every promise a case that breaks it and a near case that does not (a fail-over
after a FAILED task, a failure with a reason, a job cancelled by its user, ...); the
decoders of the emulator's report and of the ledger; and that nothing the checker
reports carries a secret. No Flux, no emulator.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from flux_quantum.emulator.bill import read_report
from flux_quantum.protocol import events
from flux_quantum.protocol.events import Event
from flux_quantum.site.ledger import Ledger
from flux_quantum.site.quota import Charge, QuotaConfig
from flux_quantum.testing.promises import (
    PROMISES,
    Bill,
    BilledSession,
    BilledTask,
    Facts,
    Findings,
    JobFacts,
    LedgerRow,
    Violation,
    check,
    read_ledger,
    state_of,
)
from flux_quantum.vendors.base import VendorSession

T0 = 1_780_000_000.0
ARN = "arn:aws:braket:us-east-1:000000000000:quantum-task/"
SECRET = "AKIAFLUXQUANTUM1234SECRETVALUE"


def token(unit: int, index: int = 0, attempt: int = 0) -> str:
    return events.task_token(unit, T0, index, attempt)


def qpu(record: events.QpuEvent, t: float = T0) -> Event:
    return Event(record.name, t, record.to_context())


def attempt_events(unit: int, task: str, index: int = 0, attempt: int = 0) -> list[Event]:
    """What the service records for one attempt: its token, then the task it got."""
    tok = token(unit, index, attempt)
    return [
        qpu(events.Submit(unit=unit, index=index, attempt=attempt, token=tok, device="q-a")),
        qpu(events.TaskCreated(unit=unit, index=index, attempt=attempt, token=tok, task=task)),
    ]


def ran(status: int = 0) -> list[Event]:
    return [
        Event("depend", T0 + 5),
        Event("priority", T0 + 5, {"priority": 16}),
        Event("alloc", T0 + 6),
        Event("start", T0 + 6),
        Event("finish", T0 + 7, {"status": status}),
        Event("release", T0 + 7, {"ranks": "all", "final": True}),
        Event("free", T0 + 7),
        Event("clean", T0 + 7),
    ]


def fatal(kind: str, note: str = "", userid: int = 1000) -> Event:
    return Event("exception", T0 + 4, {"type": kind, "severity": 0, "userid": userid, "note": note})


def submit() -> Event:
    return Event("submit", T0, {"userid": 1000, "urgency": 16, "flags": 0, "version": 1})


def completed_job(jobid: int, *tasks: str, extra: list[Event] | None = None) -> JobFacts:
    """A QPU job whose program(s) got one task each, released on them, ran and exited 0."""
    story = [submit()]
    for index, task in enumerate(tasks):
        story += attempt_events(jobid, task, index)
    story += extra or []
    story.append(qpu(events.Release(task=tasks[0] if tasks else None), T0 + 4))
    story += ran()
    return JobFacts(jobid, 1000, "INACTIVE", tuple(story), qpu=True, released_tasks=tasks)


def billed(task: str, unit: int, index: int = 0, attempt: int = 0, **kw: Any) -> BilledTask:
    kw.setdefault("state", "COMPLETED")
    kw.setdefault("cost", 0.4 if kw["state"] == "COMPLETED" else 0.0)
    kw.setdefault("token", token(unit, index, attempt))
    return BilledTask(id=task, **kw)


def bill(*tasks: BilledTask, sessions: tuple[BilledSession, ...] = ()) -> Bill:
    return Bill(tuple(tasks), sessions, round(sum(t.cost for t in tasks), 6))


def settled(task: BilledTask, jobid: int, cost: float | None = None) -> LedgerRow:
    assert task.token is not None
    return LedgerRow(
        token=task.token,
        jobid=jobid,
        state="settled",
        cost=task.cost if cost is None else cost,
        estimate=0.4,
        task_id=task.id,
    )


def found(facts: Facts, promise: str) -> list[Violation]:
    findings = check(facts)
    json.dumps(findings.to_dict())  # always JSON-able
    return [v for v in findings.violations if v.promise == promise]


# --- a clean run -------------------------------------------------------------------------------


def clean_facts() -> Facts:
    """Two completed jobs, a batch of two programs and a single one; ledger = bill."""
    a, b, c = ARN + "a", ARN + "b", ARN + "c"
    tasks = (billed(a, 11), billed(b, 11, 1), billed(c, 12))
    return Facts(
        jobs=(completed_job(11, a, b), completed_job(12, c)),
        bill=bill(*tasks),
        ledger=(settled(tasks[0], 11), settled(tasks[1], 11), settled(tasks[2], 12)),
        texts={"service log": "unit 11: released\n"},
        secrets=(SECRET,),
    )


def test_a_clean_run_keeps_every_promise():
    findings = check(clean_facts())
    assert findings.ok() and findings.violations == ()
    assert findings.counts() == dict.fromkeys(PROMISES, 0)
    assert [o.outcome for o in findings.outcomes] == ["completed", "completed"]
    assert findings.billed_total == pytest.approx(1.2)
    assert findings.ledger_total == pytest.approx(1.2)
    out = findings.to_dict()
    assert json.loads(json.dumps(out)) == out
    assert out["ok"] is True and out["outcomes"]["completed"] == 2
    assert all(out["checked"].values()) and out["scope"] == "all"


# --- one_task ----------------------------------------------------------------------------------


def test_two_billed_tasks_for_one_request_is_a_violation():
    """A create whose answer was lost and was not found again: created twice."""
    a, dup = ARN + "a", ARN + "dup"
    facts = Facts(
        jobs=(completed_job(21, a),),
        bill=bill(billed(a, 21), billed(dup, 21)),  # same token: the create was repeated
    )
    [violation] = found(facts, "one_task")
    assert violation.subject == "request 21.0"
    assert a in violation.detail and dup in violation.detail and "2 billed" in violation.detail


def test_failover_after_a_failed_task_is_not_a_violation():
    failed, second = ARN + "failed", ARN + "second"
    story = attempt_events(22, failed) + [
        qpu(events.TaskFailed(index=0, attempt=0, device="q-a", task=failed, state="FAILED")),
        qpu(events.Failover(index=0, attempt=1, reason="task FAILED", failed="q-a")),
        *attempt_events(22, second, attempt=1),
        qpu(events.Release(task=second)),
        *ran(),
    ]
    job = JobFacts(22, 1000, "INACTIVE", (submit(), *story), qpu=True, released_tasks=(second,))
    facts = Facts(
        jobs=(job,),
        bill=bill(billed(failed, 22, state="FAILED"), billed(second, 22, attempt=1)),
    )
    assert check(facts).ok()


def test_a_stranded_task_left_queued_after_failover_counts_twice():
    """max-wait fail-over whose cancel never reached the vendor: the old task will run."""
    old, new = ARN + "old", ARN + "new"
    story = attempt_events(23, old) + [
        qpu(events.MaxWaitExceeded(index=0, attempt=0, device="q-a", task=old)),
        qpu(events.Failover(index=0, attempt=1, reason="waited too long", failed="q-a")),
        *attempt_events(23, new, attempt=1),
        qpu(events.Release(task=new)),
        *ran(),
    ]
    job = JobFacts(23, 1000, "INACTIVE", (submit(), *story), qpu=True, released_tasks=(new,))
    stranded = billed(old, 23, state="QUEUED")
    [violation] = found(Facts(jobs=(job,), bill=bill(stranded, billed(new, 23, 0, 1))), "one_task")
    assert "still at the vendor" in violation.detail
    cancelled = billed(old, 23, state="CANCELLED")
    assert found(Facts(jobs=(job,), bill=bill(cancelled, billed(new, 23, 0, 1))), "one_task") == []


def test_a_billed_task_no_eventlog_knows_is_an_orphan():
    orphan = billed(ARN + "orphan", 999)
    facts = clean_facts()
    facts = Facts(jobs=facts.jobs, bill=bill(*facts.bill.tasks, orphan))
    [violation] = found(facts, "one_task")
    assert violation.subject == f"task {ARN}orphan" and "orphan" in violation.detail
    # near: the same task not billed (cancelled before it ran) is no orphan
    unbilled = billed(ARN + "orphan", 999, state="CANCELLED")
    assert (
        found(Facts(jobs=facts.jobs, bill=bill(*clean_facts().bill.tasks, unbilled)), "one_task")
        == []
    )


def test_a_task_without_token_is_matched_by_the_id_its_eventlog_names():
    """IBM: the bill may carry no token; the qpu-task event names the job id."""
    ibm = billed("ibm-job-1", 24, token=None, vendor="ibm")
    facts = Facts(jobs=(completed_job(24, "ibm-job-1"),), bill=bill(ibm))
    assert check(facts).ok()


def test_a_completed_job_whose_request_has_no_completed_task_is_a_violation():
    """Released on a task that the vendor then cancelled, and the job still completed."""
    task = ARN + "gone"
    facts = Facts(jobs=(completed_job(25, task),), bill=bill(billed(task, 25, state="CANCELLED")))
    [violation] = found(facts, "one_task")
    assert violation.subject == "job 25" and "no completed task" in violation.detail
    # near: the same job failed with a reason is an outcome, not a broken promise
    job = completed_job(25, task)
    failed = JobFacts(
        25,
        1000,
        "INACTIVE",
        (*job.events[:-4], Event("finish", T0 + 7, {"status": 256}), *job.events[-3:]),
        qpu=True,
        released_tasks=(task,),
    )
    findings = check(Facts(jobs=(failed,), bill=facts.bill))
    assert findings.ok()
    assert findings.outcomes[0].outcome == "failed"
    assert findings.outcomes[0].reason == "exit status 1"


# --- no_lost_job -------------------------------------------------------------------------------


def held_job(jobid: int, state: str = "DEPEND", *, is_qpu: bool = True) -> JobFacts:
    story = (submit(), *attempt_events(jobid, ARN + f"h{jobid}")) if is_qpu else (submit(),)
    memo = {"qpu_state": "QUEUED"} if is_qpu else {}
    return JobFacts(jobid, 1000, state, story, qpu=is_qpu, memo=memo)


def test_a_qpu_job_still_held_or_pending_after_the_drain_is_lost():
    facts = Facts(
        jobs=(held_job(31), held_job(32, "SCHED")),
        bill=bill(billed(ARN + "h31", 31, state="QUEUED"), billed(ARN + "h32", 32)),
    )
    violations = found(facts, "no_lost_job")
    assert [(v.subject, v.detail) for v in violations] == [
        ("job 31", "still held after the drain (QUEUED)"),
        ("job 32", "still SCHED after the drain"),
    ]
    findings = check(facts)
    assert [(o.outcome, o.reason) for o in findings.outcomes] == [
        ("held", "QUEUED"),
        ("pending", None),
    ]


def test_a_held_job_that_asked_no_qpu_is_not_ours():
    facts = Facts(jobs=(held_job(33, is_qpu=False),))
    assert found(facts, "no_lost_job") == []
    assert check(facts).outcomes[0].outcome == "held"


def test_a_qpu_job_cancelled_while_held_is_not_lost():
    story = (submit(), *attempt_events(34, ARN + "c"), fatal("cancel"), Event("clean", T0 + 5))
    job = JobFacts(34, 1000, "INACTIVE", story, qpu=True)
    findings = check(Facts(jobs=(job,), bill=bill(billed(ARN + "c", 34, state="CANCELLED"))))
    assert findings.ok()
    assert (findings.outcomes[0].outcome, findings.outcomes[0].reason) == (
        "cancelled",
        "cancelled by user 1000",
    )


def test_a_qpu_job_that_ran_without_a_release_is_a_violation():
    story = (submit(), *attempt_events(35, ARN + "r"), *ran())
    job = JobFacts(35, 1000, "INACTIVE", story, qpu=True)
    [violation] = found(Facts(jobs=(job,), bill=bill(billed(ARN + "r", 35))), "no_lost_job")
    assert violation.detail == "got nodes (alloc) without a qpu-release"


def test_a_job_released_on_a_task_the_vendor_never_had_is_a_violation():
    job = completed_job(36, ARN + "ghost")
    [violation] = found(Facts(jobs=(job,)), "no_lost_job")
    assert "ghost" in violation.detail and "never had" in violation.detail
    # near: the task is in the bill
    assert found(Facts(jobs=(job,), bill=bill(billed(ARN + "ghost", 36))), "no_lost_job") == []


def test_a_follower_released_on_the_leaders_task_is_fine():
    task = ARN + "shared"
    leader = completed_job(37, task)
    story = (
        submit(),
        qpu(events.Join(unit=37, via="follow")),
        *attempt_events(37, task),
        qpu(events.Release(task=task)),
        *ran(),
    )
    follower = JobFacts(38, 1000, "INACTIVE", story, qpu=True, released_tasks=(task,))
    assert check(Facts(jobs=(leader, follower), bill=bill(billed(task, 37)))).ok()


# --- sessions_closed ---------------------------------------------------------------------------


SESSION_ID = "session-cxyz0123456789"


def test_an_open_session_is_a_violation_named_by_its_fingerprint_only():
    open_ = BilledSession(SESSION_ID, "ibm_kyiv", "dedicated", "open", ("j1",), 3.2)
    facts = Facts(bill=bill(sessions=(open_,)))
    [violation] = found(facts, "sessions_closed")
    fingerprint = VendorSession("ibm", "ibm_kyiv", "dedicated", SESSION_ID).fingerprint
    assert violation.subject == f"session {fingerprint}"
    assert "ibm_kyiv" in violation.detail
    assert violation.detail.endswith("no job's eventlog records it")
    # the job whose qpu-session event recorded it is named: where to look for why
    opened = events.Session(
        device="q-kyiv", requested="dedicated", mode="dedicated", fingerprint=fingerprint
    )
    job = JobFacts(16, 1000, "INACTIVE", (submit(), qpu(opened), fatal("cancel")), qpu=True)
    [violation] = found(Facts(jobs=(job,), bill=facts.bill), "sessions_closed")
    assert violation.detail.endswith("; recorded by job(s) 16")
    assert SESSION_ID not in json.dumps(check(facts).to_dict())
    assert SESSION_ID not in repr(facts)
    for state in ("closed", "expired"):
        done = BilledSession(SESSION_ID, "ibm_kyiv", "dedicated", state)
        assert found(Facts(bill=bill(sessions=(done,))), "sessions_closed") == []


# --- ledger_matches ----------------------------------------------------------------------------


def test_the_ledger_must_match_the_bill_total_and_per_task():
    facts = clean_facts()
    rows = list(facts.ledger or ())
    rows[0] = settled(facts.bill.tasks[0], 11, cost=0.35)  # 5 cents short
    violations = found(
        Facts(jobs=facts.jobs, bill=facts.bill, ledger=tuple(rows)), "ledger_matches"
    )
    assert [v.subject for v in violations] == ["totals", f"task {ARN}a"]
    assert "0.35" in violations[1].detail and "0.40" in violations[1].detail
    # near: within half a cent is the same amount
    rows[0] = settled(facts.bill.tasks[0], 11, cost=0.404)
    near = Facts(jobs=facts.jobs, bill=facts.bill, ledger=tuple(rows))
    assert found(near, "ledger_matches") == []


def test_a_billed_task_missing_from_the_ledger_and_a_reservation_left_open():
    facts = clean_facts()
    rows = list(facts.ledger or ())
    missing = rows.pop(2)
    reserved = LedgerRow(missing.token, 12, "reserved", None, 0.4, missing.task_id)
    for ledger, expected in (
        (rows, ["totals", f"task {ARN}c"]),
        ([*rows, reserved], ["totals", f"charge {missing.token}"]),
    ):
        changed = Facts(jobs=facts.jobs, bill=facts.bill, ledger=tuple(ledger))
        assert [v.subject for v in found(changed, "ledger_matches")] == expected


def test_a_charge_for_a_task_the_vendor_did_not_bill():
    facts = clean_facts()
    ghost = LedgerRow(token(13), 13, "settled", 0.4, 0.4, ARN + "ghost")
    changed = Facts(jobs=facts.jobs, bill=facts.bill, ledger=(*(facts.ledger or ()), ghost))
    assert [v.subject for v in found(changed, "ledger_matches")] == [
        "totals",
        f"charge {token(13)}",
    ]
    # near: a reservation released (no task was created) costs nothing and is fine
    released = LedgerRow(token(13), 13, "released", 0.0, 0.4)
    fine = Facts(jobs=facts.jobs, bill=facts.bill, ledger=(*(facts.ledger or ()), released))
    assert found(fine, "ledger_matches") == []


def test_no_ledger_means_not_checked_not_a_violation():
    facts = clean_facts()
    findings = check(Facts(jobs=facts.jobs, bill=facts.bill, ledger=None))
    assert findings.ok() and findings.ledger_total is None
    out = findings.to_dict()
    assert out["checked"]["ledger_matches"] is False
    assert out["not_checked"] == {"ledger_matches": "no ledger was given"}


def test_read_ledger_reads_what_the_service_writes(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        for tok, estimate in ((token(41), 0.4), (token(42), 0.5), (token(43), 0.6)):
            charge = Charge(tok, 41, 1000, "alice", None, "q-a", "local", "qpu", 100, estimate, T0)
            assert ledger.reserve(charge, QuotaConfig()).allowed
        ledger.settle(token(41), 0.4, now=T0 + 1, task_id=ARN + "x")
        ledger.release(token(42), now=T0 + 1, reason="refused")
    rows = {row.token: row for row in read_ledger(path)}
    assert (rows[token(41)].state, rows[token(41)].cost, rows[token(41)].task_id) == (
        "settled",
        0.4,
        ARN + "x",
    )
    assert rows[token(42)].state == "released" and rows[token(43)].state == "reserved"
    assert rows[token(43)].estimate == 0.6 and rows[token(41)].jobid == 41
    with pytest.raises(ValueError, match="ledger: cannot open"):
        read_ledger(tmp_path / "missing.db")


# --- no_secret ---------------------------------------------------------------------------------


def test_a_secret_anywhere_is_one_violation_per_place_and_never_shown():
    facts = clean_facts()
    leaky = JobFacts(
        14,
        1000,
        "INACTIVE",
        (submit(), Event("qpu-retry", T0, {"index": 0, "message": f"denied for {SECRET}"})),
        memo={"qpu_state": f"key={SECRET}"},
    )
    changed = Facts(
        jobs=(*facts.jobs, leaky),
        bill=facts.bill,
        ledger=facts.ledger,
        texts={"service log": f"connecting with {SECRET}\n", "broker log": "fine"},
        secrets=(SECRET,),
    )
    violations = found(changed, "no_secret")
    assert sorted(v.subject for v in violations) == ["eventlog 14", "memo 14", "service log"]
    assert all("AKI…" in v.detail for v in violations)
    text = json.dumps(check(changed).to_dict())
    assert SECRET not in text and SECRET[:8] not in text


def test_part_of_a_secret_is_not_the_secret():
    facts = clean_facts()
    near = Facts(jobs=facts.jobs, bill=facts.bill, texts={"log": SECRET[:-1]}, secrets=(SECRET,))
    assert found(near, "no_secret") == []


def test_a_secret_in_a_failure_reason_is_redacted_in_the_findings():
    story = (submit(), fatal("qpu", f"qpu: vendor said: bad key {SECRET}"), Event("clean", T0 + 5))
    job = JobFacts(15, 1000, "INACTIVE", story, qpu=True)
    findings = check(Facts(jobs=(job,), secrets=(SECRET,)))
    assert findings.outcomes[0].reason == "qpu: qpu: vendor said: bad key AKI…"
    assert [v.subject for v in findings.violations] == ["eventlog 15"]
    assert SECRET not in json.dumps(findings.to_dict())


def test_a_short_secret_is_refused():
    with pytest.raises(ValueError, match="secrets: each must be a string of at least 8"):
        Facts(secrets=("short",))


# --- honest_failure ----------------------------------------------------------------------------


def ended(jobid: int, *story: Event, is_qpu: bool = True) -> JobFacts:
    return JobFacts(jobid, 1000, "INACTIVE", (submit(), *story, Event("clean", T0 + 9)), qpu=is_qpu)


def test_a_failure_without_any_reason_is_a_violation():
    job = ended(51, Event("alloc", T0 + 1), fatal("exec"), is_qpu=False)
    [violation] = found(Facts(jobs=(job,)), "honest_failure")
    assert violation.subject == "job 51" and "a exec exception with no note" in violation.detail
    assert check(Facts(jobs=(job,))).outcomes[0].outcome == "failed"


def test_a_failure_with_a_reason_is_an_outcome():
    note = "qpu: task FAILED on q-a: calibration drifted; qpu.failover=fail, so the job fails"
    findings = check(Facts(jobs=(ended(52, fatal("qpu", note)),)))
    assert findings.ok()
    assert findings.outcomes[0].reason == f"qpu: {note}"
    assert findings.reasons() == {"failed": {f"qpu: {note}": 1}, "cancelled": {}}


def test_a_fatal_exception_without_note_takes_the_reason_from_a_qpu_event():
    problem = events.TaskFailed(
        index=0, attempt=0, device="q-a", task=ARN + "f", reason="calibration drifted"
    )
    job = ended(53, qpu(problem), fatal("qpu"))
    findings = check(Facts(jobs=(job,)))
    assert findings.ok()
    assert findings.outcomes[0].reason == "qpu-task-failed: calibration drifted"


def test_a_job_cancelled_by_its_user_is_an_outcome():
    job = ended(54, Event("alloc", T0 + 1), fatal("cancel", userid=1001), is_qpu=False)
    findings = check(Facts(jobs=(job,)))
    assert findings.ok()
    assert (findings.outcomes[0].outcome, findings.outcomes[0].reason) == (
        "cancelled",
        "cancelled by user 1001",
    )


def test_a_job_killed_by_a_signal_says_so():
    job = ended(55, Event("alloc", T0 + 1), Event("finish", T0 + 2, {"status": 9}), is_qpu=False)
    assert check(Facts(jobs=(job,))).outcomes[0].reason == "killed by signal 9"


def test_running_jobs_are_neither_lost_nor_failed():
    job = JobFacts(56, 1000, "RUN", (submit(), Event("alloc", T0)), qpu=False)
    findings = check(Facts(jobs=(job,)))
    assert findings.ok() and findings.outcomes[0].outcome == "running"


def test_the_state_an_eventlog_tells():
    assert state_of([submit()]) == "NEW"
    assert state_of([submit(), Event("validate", T0)]) == "DEPEND"
    assert state_of([submit(), Event("validate", T0), *ran()[:2]]) == "SCHED"
    assert state_of([submit(), Event("validate", T0), *ran()[:4]]) == "RUN"
    assert state_of([submit(), Event("validate", T0), fatal("cancel")]) == "CLEANUP"
    assert state_of([submit(), *ran()]) == "INACTIVE"
    # a priority change while SCHED does not take the job back
    assert state_of([submit(), *ran()[:2], Event("priority", T0, {"priority": 0})]) == "SCHED"


def test_a_job_state_must_be_a_flux_state():
    with pytest.raises(ValueError, match="job 1: state must be one of NEW, DEPEND"):
        JobFacts(1, 0, "done")


# --- scope: only some jobs examined ------------------------------------------------------------


def test_a_scoped_check_judges_only_what_concerns_its_jobs():
    facts = clean_facts()
    other = billed(ARN + "other", 77)  # a unit not examined: not ours to judge
    mine = billed(ARN + "lost", 11, index=5)  # a token of an examined unit, named nowhere
    rows = (*(facts.ledger or ()), settled(other, 77))
    scoped = Facts(
        jobs=facts.jobs,
        bill=bill(*facts.bill.tasks, other),
        ledger=rows,
        scope=(11, 12),
    )
    findings = check(scoped)
    assert findings.ok(), findings.violations
    assert findings.billed_total == pytest.approx(1.2) and findings.scope == (11, 12)
    assert findings.to_dict()["scope"] == [11, 12]
    lost = Facts(jobs=facts.jobs, bill=bill(*facts.bill.tasks, other, mine), scope=(11, 12))
    assert [v.subject for v in found(lost, "one_task")] == [f"task {ARN}lost"]
    # the whole instance: the other unit's task is an orphan
    everything = Facts(jobs=facts.jobs, bill=bill(*facts.bill.tasks, other), ledger=rows)
    assert [v.subject for v in found(everything, "one_task")] == [f"task {ARN}other"]


# --- the emulator's report ---------------------------------------------------------------------


REPORT: dict[str, Any] = {
    "bill": {
        "currency": "USD",
        "tasks": [
            {
                "vendor": "braket",
                "id": ARN + "a",
                "device": "arn:aws:braket:us-east-1::device/qpu/emulator/Alpha",
                "token": token(61),
                "state": "COMPLETED",
                "shots": 100,
                "billed_seconds": None,
                "cost": 0.4,
                "session": None,
                "created": 12.5,
            },
            {
                "vendor": "ibm",
                "id": "d1ibmjob",
                "device": "ibm_kyiv",
                "token": None,
                "state": "Cancelled",
                "shots": 0,
                "billed_seconds": None,
                "cost": 0.0,
                "session": SESSION_ID,
                "created": 13.0,
            },
        ],
        "sessions": [
            {
                "id": SESSION_ID,
                "backend": "ibm_kyiv",
                "mode": "batch",
                "state": "closed",
                "jobs": ["d1ibmjob"],
                "cost": 0.0,
            }
        ],
        "total": 0.4,
    },
    "calls": {"CreateQuantumTask": 1, "CreateJob": 1},
    "faults": {"braket": {"reset": 1}, "ibm": {}},
    "now": 20.0,
}


def test_the_bill_is_decoded_from_the_report():
    decoded = Bill.from_report(REPORT)
    assert decoded.total == 0.4 and decoded.currency == "USD"
    first, second = decoded.tasks
    assert (first.id, first.token, first.state, first.shots) == (
        ARN + "a",
        token(61),
        "COMPLETED",
        100,
    )
    assert second.state == "CANCELLED" and second.token is None and not second.billed
    assert decoded.sessions[0].state == "closed" and decoded.sessions[0].jobs == ("d1ibmjob",)
    assert SESSION_ID not in repr(decoded)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"bill": []}, "emulator report.bill must be an object"),
        ({"bill": {"tasks": [{"id": "x", "state": "COMPLETED"}]}}, r"bill.tasks\[0\].cost must be a number"),
        ({"bill": {"tasks": [{"id": "", "cost": 1, "state": "X"}]}}, r"bill.tasks\[0\].id must be"),
        ({"bill": {"tasks": [{"id": "x", "cost": 1, "state": "X", "shots": "9"}]}}, "shots must be an integer"),
        ({"bill": {"tasks": [], "sessions": [{"id": "s", "state": "open", "jobs": [1]}]}}, "jobs must be a list of job ids"),
        ({"bill": {"tasks": [], "total": "1"}}, "bill.total must be a number"),
    ],
)  # fmt: skip
def test_a_bad_report_names_the_field(broken, message):
    with pytest.raises(ValueError, match=message):
        Bill.from_report(broken)


@pytest.fixture
def report_server(emulator_tier: None) -> Iterator[str]:
    """A stand-in for the emulator's report endpoint (the format of SPEC A.2)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps(REPORT).encode()
            code = 200 if self.path == "/_emulator/report" else 404
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_read_report_gets_the_json_over_http(report_server):
    assert read_report(report_server + "/") == REPORT
    with pytest.raises(ValueError, match="emulator_url: cannot read"):
        read_report(report_server + "/nowhere")


def test_findings_counts_every_promise_even_when_zero():
    findings = Findings((Violation("no_secret", "log", "x"),), (), 0.0, None)
    assert findings.counts() == {**dict.fromkeys(PROMISES, 0), "no_secret": 1}
    assert not findings.ok()


# --- merged tasks --------------------------------------------------------------------------------


def merged_facts(shares: tuple[float, float, float], cost: float = 0.9) -> Facts:
    """Three jobs whose programs ran in one merged task, each with its own row (its
    share of the task's bill)."""
    task, key = ARN + "m", "merge-0123456789abcdef"
    jobs, rows = [], []
    for place, jobid in enumerate((21, 22, 23)):
        tok = token(jobid)
        slot = events.MergeSlot(key, place, (100, 200, 300))
        story = [
            submit(),
            qpu(
                events.Submit(
                    unit=jobid, index=0, attempt=0, token=tok, device="q-a", merge=slot.to_context()
                )
            ),
            qpu(events.TaskCreated(unit=jobid, index=0, attempt=0, token=tok, task=task)),
            qpu(events.Release(task=task), T0 + 4),
            *ran(),
        ]
        jobs.append(
            JobFacts(jobid, 1000, "INACTIVE", tuple(story), qpu=True, released_tasks=(task,))
        )
        rows.append(
            LedgerRow(
                token=tok,
                jobid=jobid,
                state="settled",
                cost=shares[place],
                estimate=0.4,
                task_id=task,
            )
        )
    one = BilledTask(id=task, state="COMPLETED", cost=cost, token=key)
    return Facts(jobs=tuple(jobs), bill=bill(one), ledger=tuple(rows), texts={}, secrets=())


def test_a_merged_task_serves_every_members_request_and_its_shares_add_up_to_its_bill():
    findings = check(merged_facts((0.2, 0.3, 0.4)))
    assert findings.ok, [v.to_dict() for v in findings.violations]
    # A bill of $0.735 is shared as whole cents adding up to $0.74.
    findings = check(merged_facts((0.25, 0.25, 0.24), cost=0.735))
    assert findings.ok, [v.to_dict() for v in findings.violations]


def test_shares_that_do_not_add_up_to_the_bill_are_a_violation():
    (violation,) = found(merged_facts((0.2, 0.3, 0.3)), "ledger_matches")[-1:]
    assert "the vendor billed 0.90" in violation.detail, violation
