"""The promises' checks: ``check`` turns a run's ``Facts`` into ``Findings`` (pure).

One function a promise, each yielding its violations from what the eventlogs, the bill
and the ledger say (indexed once, ``_Story``): ``one_task``, ``no_lost_job``,
``sessions_closed``, ``ledger_matches``, ``no_secret``, ``honest_failure``; and every
job's outcome with its reason. docs/reliability.md is their reference. Data in,
findings out: it never reads Flux, a file, the emulator or the ledger, and never lets
a secret out (a secret is named by its first three characters and redacted from every
reason and detail; a vendor session by its fingerprint, never its id).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from flux_quantum.protocol import events
from flux_quantum.protocol.events import History, replay
from flux_quantum.testing.promises.facts import COMPLETED, BilledTask, Facts, JobFacts, LedgerRow
from flux_quantum.testing.promises.findings import Findings, JobOutcome, Violation

# Two amounts agree when they differ by less than half a cent.
TOLERANCE = 0.005

# The Flux job states a job waits in, and runs in.
_PENDING = frozenset({"NEW", "PRIORITY", "SCHED"})
_RUNNING = frozenset({"RUN", "CLEANUP"})

_TOKEN = re.compile(r"^fq-(\d+)-(\d+)-(\d+)-(\d+)$")


Request = tuple[int, int]  # (unit, program index)


class _Story:
    """What the eventlogs say, indexed for the promises: each job's replayed history,
    every request and the tokens and task ids recorded for it."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.histories: dict[int, History] = {}
        self.requests: dict[Request, set[int]] = defaultdict(set)
        self.by_token: dict[str, Request] = {}
        self.by_task: dict[str, Request] = {}
        # A merged task serves several requests: by its key (its token at the vendor)
        # and by its id.
        self.merged: dict[str, set[Request]] = defaultdict(set)
        self.named: set[str] = set()  # task ids any eventlog or jobspec names
        self.session_jobs: dict[str, set[int]] = defaultdict(set)  # fingerprint -> jobs
        for job in facts.jobs:
            history = replay(job.events)
            self.histories[job.jobid] = history
            self.named.update(job.released_tasks)
            for event in job.events:
                record = events.decode(event)
                if isinstance(record, events.Submit):
                    request = (record.unit, record.index)
                    self.requests[request].add(job.jobid)
                    self.by_token[record.token] = request
                    if record.slot is not None:
                        self.merged[record.slot.key].add(request)
                elif isinstance(record, events.Session) and record.fingerprint:
                    self.session_jobs[record.fingerprint].add(job.jobid)
                elif isinstance(record, events.TaskCreated):
                    request = (record.unit, record.index)
                    self.requests[request].add(job.jobid)
                    self.by_token.setdefault(record.token, request)
                    if record.task in self.by_task and self.by_task[record.task] != request:
                        self.merged[record.task] |= {self.by_task[record.task], request}
                    self.by_task[record.task] = request
                    self.named.add(record.task)
                task = getattr(record, "task", None)
                if isinstance(task, str) and task:
                    self.named.add(task)
        self.per_unit: dict[int, list[Request]] = defaultdict(list)
        for request in sorted(self.requests):
            self.per_unit[request[0]].append(request)
        units = {h.unit for h in self.histories.values() if h.unit is not None}
        self.units = units | {job.jobid for job in facts.jobs}
        self.ledger_refs: set[str] = set()
        for row in facts.ledger or ():
            if row.jobid in self.units:
                self.ledger_refs.add(row.token)
                if row.task_id:
                    self.ledger_refs.add(row.task_id)
        self.bill_ids = {task.id: task for task in facts.bill.tasks}
        self.tasks = tuple(t for t in facts.bill.tasks if self._in_scope(t))
        task_ids = {t.id for t in self.tasks}
        self.sessions = tuple(
            s
            for s in facts.bill.sessions
            if facts.scope is None or any(j in task_ids for j in s.jobs)
        )
        self.ledger = (
            None
            if facts.ledger is None
            else tuple(
                row for row in facts.ledger if facts.scope is None or row.jobid in self.units
            )
        )
        self.outcomes = [_outcome(job) for job in facts.jobs]

    def is_merged(self, task: BilledTask) -> bool:
        return (task.token is not None and task.token in self.merged) or task.id in self.merged

    def requests_of(self, task: BilledTask) -> set[Request]:
        """The requests ``task`` serves: one, or every member's of a merged task."""
        if task.token is not None and task.token in self.merged:
            return set(self.merged[task.token])
        if task.id in self.merged:
            return set(self.merged[task.id])
        if task.token is not None and task.token in self.by_token:
            return {self.by_token[task.token]}
        return {self.by_task[task.id]} if task.id in self.by_task else set()

    def _in_scope(self, task: BilledTask) -> bool:
        if self.facts.scope is None or task.id in self.named:
            return True
        if task.token is not None:
            if task.token in self.by_token:
                return True
            match = _TOKEN.match(task.token)
            if match and int(match.group(1)) in self.units:
                return True
        return task.id in self.ledger_refs or task.token in self.ledger_refs

    def unit_requests(self, unit: int | None) -> list[Request]:
        return [] if unit is None else self.per_unit.get(unit, [])


def _one_task(story: _Story) -> Iterator[Violation]:
    """More than one billed (or still live) task for a request; a billed task of no
    known request (an orphan); a completed QPU job whose request has no task that
    completed."""
    per_request: dict[Request, list[BilledTask]] = defaultdict(list)
    for task in story.tasks:
        requests = story.requests_of(task)
        if not requests:
            if task.id in story.named or not (task.billed or task.live):
                continue
            token = f"token {task.token}" if task.token else "no token"
            yield Violation(
                "one_task",
                f"task {task.id}",
                f"orphan: {_task_words(task)} ({token}) is named by no job's eventlog",
            )
            continue
        for request in requests:
            per_request[request].append(task)
    for (unit, index), tasks in sorted(per_request.items()):
        counted = [t for t in tasks if t.billed or t.live]
        if len(counted) > 1:
            yield Violation(
                "one_task",
                f"request {unit}.{index}",
                f"{len(counted)} billed tasks for program {index} of unit {unit}: "
                + ", ".join(f"{t.id} {_task_words(t)}" for t in counted),
            )
    for job, outcome in zip(story.facts.jobs, story.outcomes, strict=True):
        if not job.qpu or outcome.outcome != "completed":
            continue
        for unit, index in story.unit_requests(story.histories[job.jobid].unit):
            served = [
                t for t in per_request.get((unit, index), ()) if t.state == COMPLETED or t.live
            ]
            if not served:
                tried = per_request.get((unit, index), [])
                states = ", ".join(f"{t.id} {t.state}" for t in tried) or "none billed"
                yield Violation(
                    "one_task",
                    f"job {job.jobid}",
                    f"completed, but program {index} of unit {unit} has no completed task"
                    f" ({states})",
                )


def _task_words(task: BilledTask) -> str:
    return f"{task.state} {task.cost:.2f}" + (" (still at the vendor)" if task.live else "")


def _no_lost_job(story: _Story) -> Iterator[Violation]:
    """A QPU job still held or pending after the drain; one that ran without a release
    naming its tasks, or on a task the vendor never had."""
    for job in story.facts.jobs:
        if not job.qpu:
            continue
        subject = f"job {job.jobid}"
        if job.state == "DEPEND":
            state = job.memo.get("qpu_state")
            said = f" ({state})" if isinstance(state, str) and state else ""
            yield Violation("no_lost_job", subject, f"still held after the drain{said}")
            continue
        if job.state in _PENDING:
            yield Violation("no_lost_job", subject, f"still {job.state} after the drain")
            continue
        names = [e.name for e in job.events]
        ran = next((i for i, n in enumerate(names) if n in ("alloc", "start")), None)
        if ran is None:
            continue
        released = next((i for i, n in enumerate(names) if n == events.RELEASE), None)
        if released is None or released > ran:
            yield Violation(
                "no_lost_job", subject, f"got nodes ({names[ran]}) without a qpu-release"
            )
            continue
        record = events.decode(job.events[released])
        tasks = job.released_tasks
        if not tasks and isinstance(record, events.Release) and record.task:
            tasks = (record.task,)
        if not tasks:
            yield Violation("no_lost_job", subject, "released without naming a task")
        for task in tasks:
            if task not in story.bill_ids:
                yield Violation(
                    "no_lost_job", subject, f"released on task {task}, which the vendor never had"
                )


def _sessions_closed(story: _Story) -> Iterator[Violation]:
    """A vendor session still open after the drain (with the jobs whose ``qpu-session``
    event recorded its fingerprint: where to look for why)."""
    for session in story.sessions:
        if session.state != "open":
            continue
        fingerprint = session.fingerprint
        jobs = sorted(story.session_jobs.get(fingerprint, ()))
        recorded = (
            f"; recorded by job(s) {', '.join(map(str, jobs))}"
            if jobs
            else "; no job's eventlog records it"
        )
        yield Violation(
            "sessions_closed",
            f"session {fingerprint}",
            f"{session.mode} session on {session.backend} still open after the drain"
            f" ({len(session.jobs)} task(s), {session.cost:.2f}){recorded}",
        )


def _settled_total(rows: Iterable[LedgerRow]) -> float:
    return sum((row.cost or 0.0 for row in rows if row.state == "settled"), 0.0)


def _billed_total(story: _Story) -> float:
    """What the ledger must add up to: the bill, a merged task's cost to the cent (its
    jobs' shares are whole cents adding up to it rounded)."""
    total = story.facts.bill.total if story.facts.scope is None else None
    if total is not None and not story.merged:
        return total
    in_scope = story.tasks if total is None else story.facts.bill.tasks
    return sum(_cents(t.cost) if story.is_merged(t) else t.cost for t in in_scope)


def _cents(amount: float) -> float:
    """``amount`` rounded to the cent, half up (as the shares of a merged task are)."""
    return math.floor(amount * 100 + 0.5 + 1e-9) / 100


def _ledger_matches(story: _Story) -> Iterator[Violation]:
    """The ledger's settled total against the bill's; each task's cost; a billed task
    the ledger lacks; a charge for a task the vendor did not bill; a reservation never
    settled."""
    rows = story.ledger
    if rows is None:
        return
    currency = story.facts.bill.currency
    settled, billed = _settled_total(rows), _billed_total(story)
    if abs(settled - billed) >= TOLERANCE:
        yield Violation(
            "ledger_matches",
            "totals",
            f"the ledger settled {settled:.2f} {currency}, the vendor billed {billed:.2f}",
        )
    counted = [row for row in rows if row.state != "released"]
    # A merged task has a row per job (each its share): they add up to its bill.
    by_task: dict[str, list[LedgerRow]] = defaultdict(list)
    for row in counted:
        if row.task_id:
            by_task[row.task_id].append(row)
    by_token = {row.token: row for row in counted}
    matched: set[str] = set()
    for task in story.tasks:
        found = by_task.get(task.id, [])
        if not found and task.token is not None and task.token in by_token:
            found = [by_token[task.token]]
        if not found:
            if task.billed:
                yield Violation(
                    "ledger_matches",
                    f"task {task.id}",
                    f"billed {task.cost:.2f} {currency} ({task.state}) but not in the ledger",
                )
            continue
        matched.update(row.token for row in found)
        if not all(row.state == "settled" for row in found):
            continue
        settled_here = sum(row.cost or 0.0 for row in found)
        owed = _cents(task.cost) if story.is_merged(task) else task.cost
        if abs(settled_here - owed) >= TOLERANCE:
            tokens = ", ".join(row.token for row in found)
            yield Violation(
                "ledger_matches",
                f"task {task.id}",
                f"the ledger settled {settled_here:.2f} {currency} (token {tokens}),"
                f" the vendor billed {task.cost:.2f}",
            )
    for row in rows:
        if row.state == "reserved":
            yield Violation(
                "ledger_matches",
                f"charge {row.token}",
                f"still reserved ({row.estimate:.2f} {currency}) after the drain",
            )
        elif row.state == "settled" and row.token not in matched and (row.cost or 0) >= TOLERANCE:
            yield Violation(
                "ledger_matches",
                f"charge {row.token}",
                f"settled {row.cost:.2f} {currency} for task {row.task_id or '(none)'},"
                " which the vendor did not bill",
            )


def _places(facts: Facts) -> Iterator[tuple[str, str]]:
    """Every place a secret must not be: the texts, each eventlog, each job's memos."""
    yield from facts.texts.items()
    for job in facts.jobs:
        yield f"eventlog {job.jobid}", "\n".join(_strings([e.to_dict() for e in job.events]))
        if job.memo:
            yield f"memo {job.jobid}", "\n".join(_strings(job.memo))


def _strings(value: Any) -> Iterator[str]:
    """Every string (and number) in a JSON-like value, keys included: a secret is
    found as written, not as JSON escapes it."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
    elif value is not None:
        yield str(value)


def _no_secret(story: _Story) -> Iterator[Violation]:
    """One violation per (secret, place) where a secret appears."""
    secrets = list(dict.fromkeys(story.facts.secrets))
    if not secrets:
        return
    for place, text in _places(story.facts):
        for secret in secrets:
            if secret in text:
                yield Violation(
                    "no_secret", place, f"a secret ({_hint(secret)}) appears in {place}"
                )


def _hint(secret: str) -> str:
    return secret[:3] + "…"


# Events whose context says why a QPU job's task did not work out.
_QPU_REASONS = {
    events.SUBMIT_FAILED: ("reason",),
    events.TASK_FAILED: ("reason", "state"),
    events.MAX_WAIT: ("waited",),
    events.DEVICE_UNAVAILABLE: ("status",),
    events.FAILOVER: ("reason",),
}


def _qpu_reason(job: JobFacts) -> str | None:
    """The last reason a qpu-* event gives for a task that did not work out."""
    found = None
    for event in job.events:
        keys = _QPU_REASONS.get(event.name)
        if keys is None:
            continue
        for key in keys:
            value = event.context.get(key)
            if value not in (None, ""):
                found = f"{event.name}: {value}"
                break
    return found


def _outcome(job: JobFacts) -> JobOutcome:
    """Where a job stands or how it ended, and why."""
    if job.state == "DEPEND":
        state = job.memo.get("qpu_state")
        wait = events.last(job.events, events.WAIT)
        reason = state if isinstance(state, str) and state else None
        if reason is None and wait is not None and isinstance(wait.context.get("reason"), str):
            reason = wait.context["reason"]
        return JobOutcome(job.jobid, job.userid, "held", reason)
    if job.state in _PENDING:
        return JobOutcome(job.jobid, job.userid, "pending")
    if job.state in _RUNNING:
        return JobOutcome(job.jobid, job.userid, "running")
    fatal = next(
        (e for e in job.events if e.name == "exception" and e.context.get("severity") == 0), None
    )
    if fatal is not None:
        kind = str(fatal.context.get("type") or "exception")
        note = fatal.context.get("note")
        note = note.strip() if isinstance(note, str) else ""
        if kind == "cancel":
            who = fatal.context.get("userid")
            reason = note or (f"cancelled by user {who}" if isinstance(who, int) else "cancelled")
            return JobOutcome(job.jobid, job.userid, "cancelled", reason)
        reason = f"{kind}: {note}" if note else _qpu_reason(job)
        return JobOutcome(job.jobid, job.userid, "failed", reason)
    finish = events.last(job.events, "finish")
    status = finish.context.get("status") if finish is not None else None
    if isinstance(status, int) and not isinstance(status, bool):
        if status == 0:
            return JobOutcome(job.jobid, job.userid, "completed")
        signal = status & 0x7F
        reason = f"killed by signal {signal}" if signal else f"exit status {status >> 8}"
        return JobOutcome(job.jobid, job.userid, "failed", reason)
    return JobOutcome(job.jobid, job.userid, "failed", _qpu_reason(job))


def _honest_failure(story: _Story) -> Iterator[Violation]:
    """A job that ended failed or cancelled and says nowhere why."""
    for job, outcome in zip(story.facts.jobs, story.outcomes, strict=True):
        if outcome.outcome in ("failed", "cancelled") and not outcome.reason:
            fatal = next(
                (e for e in job.events if e.name == "exception" and e.context.get("severity") == 0),
                None,
            )
            kind = f"a {fatal.context.get('type')} exception" if fatal else "no exception"
            yield Violation(
                "honest_failure",
                f"job {job.jobid}",
                f"ended {outcome.outcome} without a reason ({kind} with no note,"
                " no qpu-* event saying why)",
            )


_CHECKS = (
    _one_task,
    _no_lost_job,
    _sessions_closed,
    _ledger_matches,
    _no_secret,
    _honest_failure,
)


def check(facts: Facts) -> Findings:
    """The violations of every promise in ``facts`` and every job's outcome (pure)."""
    story = _Story(facts)
    found = [violation for judge in _CHECKS for violation in judge(story)]
    secrets = sorted(set(facts.secrets), key=len, reverse=True)
    violations = tuple(
        Violation(v.promise, _redact(v.subject, secrets), _redact(v.detail, secrets)) for v in found
    )
    outcomes = tuple(
        JobOutcome(o.jobid, o.userid, o.outcome, _redact(o.reason, secrets)) for o in story.outcomes
    )
    not_checked = {} if facts.ledger is not None else {"ledger_matches": "no ledger was given"}
    return Findings(
        violations=violations,
        outcomes=outcomes,
        billed_total=_billed_total(story),
        ledger_total=None if story.ledger is None else _settled_total(story.ledger),
        currency=facts.bill.currency,
        not_checked=not_checked,
        scope=facts.scope,
    )


def _redact(text: str | None, secrets: Sequence[str]) -> Any:
    if text is None:
        return None
    for secret in secrets:
        text = text.replace(secret, _hint(secret))
    return text
