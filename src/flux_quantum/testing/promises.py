"""The promise checker: does a run keep the promises flux-quantum makes?

The promises (``PROMISES``): a request creates exactly one billed vendor task
(``one_task``); no held job is lost or left held (``no_lost_job``); every vendor session
is closed (``sessions_closed``); the site's ledger is what the vendor bills
(``ledger_matches``); no credential appears in any log, event or memo (``no_secret``);
a job that fails says why (``honest_failure``). This module owns how each is counted:
``gather`` reads what a run left behind (the jobs' eventlogs, jobspecs and memos from
Flux, the emulator's bill from ``GET {url}/_emulator/report``, the site ledger read-only,
and log texts) into ``Facts``, plain data; ``check`` (pure) turns ``Facts`` into
``Findings``: the violations of each promise and the outcome of every job.
docs/reliability.md is its reference. It only reads: it never writes to Flux, the
ledger or the emulator, and never lets a secret out: ``Findings`` (and ``to_dict``)
name a secret by its first three characters, redact it from every reason and detail,
and name a vendor session by its fingerprint, never its id.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux_quantum.emulator.bill import read_report
from flux_quantum.protocol import events
from flux_quantum.protocol.events import Event, History, replay
from flux_quantum.protocol.jobspec import REQUEST_ATTRIBUTE, Released
from flux_quantum.vendors.base import VendorSession

PROMISES = (
    "one_task",
    "no_lost_job",
    "sessions_closed",
    "ledger_matches",
    "no_secret",
    "honest_failure",
)
OUTCOMES = ("completed", "failed", "cancelled", "held", "pending", "running")

# Two amounts agree when they differ by less than half a cent.
TOLERANCE = 0.005
# A secret shorter than this would match by chance; ``Facts`` refuses it.
MIN_SECRET = 8

# Flux job states by name (``flux.job.info.statetostr``), and the ones a job waits in.
STATES = ("NEW", "DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP", "INACTIVE")
_PENDING = frozenset({"NEW", "PRIORITY", "SCHED"})
_RUNNING = frozenset({"RUN", "CLEANUP"})

# A vendor task's final states; any other state is a task still live at the vendor.
COMPLETED = "COMPLETED"
TERMINAL = frozenset({COMPLETED, "FAILED", "CANCELLED"})
_STATE_ALIASES = {"DONE": COMPLETED, "ERROR": "FAILED", "CANCELED": "CANCELLED"}

_TOKEN = re.compile(r"^fq-(\d+)-(\d+)-(\d+)-(\d+)$")

# --- the findings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """One broken promise: which, about what (a job, a task, a session, a place), and
    what was found."""

    promise: str
    subject: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"promise": self.promise, "subject": self.subject, "detail": self.detail}


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, or where it stands: one of ``OUTCOMES``, and why (a failed or
    cancelled job's reason; a held job's state in words)."""

    jobid: int
    userid: int
    outcome: str
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobid": self.jobid,
            "userid": self.userid,
            "outcome": self.outcome,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Findings:
    """What ``check`` found: the violations, every job's outcome, what the vendor billed
    and what the ledger settled (None when no ledger was checked). ``not_checked``:
    promises that were not checked, and why; ``scope``: the jobs examined (None: every
    job of the instance)."""

    violations: tuple[Violation, ...]
    outcomes: tuple[JobOutcome, ...]
    billed_total: float
    ledger_total: float | None
    currency: str = "USD"
    not_checked: Mapping[str, str] = field(default_factory=dict)
    scope: tuple[int, ...] | None = None

    def counts(self) -> dict[str, int]:
        """Every promise -> its number of violations (0 included)."""
        out = dict.fromkeys(PROMISES, 0)
        for violation in self.violations:
            out[violation.promise] = out.get(violation.promise, 0) + 1
        return out

    def ok(self) -> bool:
        return not self.violations

    def outcome_counts(self) -> dict[str, int]:
        """Every outcome -> its number of jobs (0 included)."""
        out = dict.fromkeys(OUTCOMES, 0)
        for outcome in self.outcomes:
            out[outcome.outcome] = out.get(outcome.outcome, 0) + 1
        return out

    def reasons(self) -> dict[str, dict[str, int]]:
        """Failed and cancelled jobs by reason (a reason's job-specific numbers kept)."""
        out: dict[str, dict[str, int]] = {"failed": {}, "cancelled": {}}
        for outcome in self.outcomes:
            if outcome.outcome in out:
                reason = outcome.reason or "(no reason)"
                out[outcome.outcome][reason] = out[outcome.outcome].get(reason, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; holds no secret (``check`` redacted every text it carries)."""
        return {
            "ok": self.ok(),
            "counts": self.counts(),
            "checked": {p: p not in self.not_checked for p in PROMISES},
            "not_checked": dict(self.not_checked),
            "violations": [v.to_dict() for v in self.violations],
            "billed_total": round(self.billed_total, 6),
            "ledger_total": None if self.ledger_total is None else round(self.ledger_total, 6),
            "currency": self.currency,
            "outcomes": self.outcome_counts(),
            "reasons": self.reasons(),
            "jobs": [o.to_dict() for o in self.outcomes],
            "scope": "all" if self.scope is None else list(self.scope),
        }


# --- the facts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFacts:
    """One job as Flux shows it: its state name (``STATES``), its eventlog, whether it
    asked for a QPU (``attributes.system.qpu``, a ``qpu:`` dependency or any ``qpu-*``
    event), the tasks its jobspec names since its release, and its user memos."""

    jobid: int
    userid: int
    state: str
    events: tuple[Event, ...] = ()
    qpu: bool = False
    released_tasks: tuple[str, ...] = ()
    memo: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(
                f"job {self.jobid}: state must be one of {', '.join(STATES)}, got {self.state!r}"
            )


@dataclass(frozen=True)
class BilledTask:
    """One task of the emulator's bill (``bill.tasks[]`` of its report). ``state`` is
    normalized to upper case (COMPLETED, FAILED, CANCELLED, QUEUED, RUNNING, ...)."""

    id: str
    cost: float
    state: str
    vendor: str = "braket"
    device: str = ""
    token: str | None = None
    shots: int = 0
    billed_seconds: float | None = None
    session: str | None = field(default=None, repr=False)
    created: float = 0.0

    @property
    def billed(self) -> bool:
        """The vendor charged for it: it completed (the open plan charges 0), or costs."""
        return self.state == COMPLETED or self.cost > 0

    @property
    def live(self) -> bool:
        """Still at the vendor (queued, running): it will be billed when it completes."""
        return self.state not in TERMINAL


@dataclass(frozen=True)
class BilledSession:
    """One vendor session of the bill. Its ``id`` is a secret (it adds work billed to
    the account): only its ``fingerprint`` is ever shown."""

    id: str = field(repr=False)
    backend: str = ""
    mode: str = ""
    state: str = "closed"
    jobs: tuple[str, ...] = ()
    cost: float = 0.0

    @property
    def fingerprint(self) -> str:
        """The fingerprint the service records (``qpu-session``) for the same id."""
        return VendorSession("", self.backend, self.mode, self.id).fingerprint


@dataclass(frozen=True)
class Bill:
    """What the vendor (the emulator) billed, from its report."""

    tasks: tuple[BilledTask, ...] = ()
    sessions: tuple[BilledSession, ...] = ()
    total: float = 0.0
    currency: str = "USD"

    @classmethod
    def from_report(cls, report: Any) -> Bill:
        """The bill of a ``/_emulator/report`` document; ValueError names a bad field."""
        if not isinstance(report, Mapping):
            raise ValueError("emulator report: expected a JSON object")
        bill = _get(report, "bill", Mapping, "emulator report")
        tasks = [
            _task(entry, f"bill.tasks[{i}]")
            for i, entry in enumerate(_get(bill, "tasks", list, "bill"))
        ]
        sessions = [
            _session(entry, f"bill.sessions[{i}]")
            for i, entry in enumerate(_get(bill, "sessions", list, "bill", default=[]))
        ]
        total = _number(bill.get("total", sum(t.cost for t in tasks)), "bill.total")
        currency = bill.get("currency", "USD")
        if not isinstance(currency, str):
            raise ValueError(f"bill.currency must be a string, got {currency!r}")
        return cls(tuple(tasks), tuple(sessions), total, currency)


@dataclass(frozen=True)
class LedgerRow:
    """One row of the site ledger's ``charges`` table (the columns the checker needs)."""

    token: str
    jobid: int
    state: str  # reserved, settled, released
    cost: float | None = None
    estimate: float = 0.0
    task_id: str | None = None
    device: str = ""
    userid: int = 0


@dataclass(frozen=True)
class Facts:
    """Everything ``check`` judges, gathered once (``gather``) or built by hand.

    ``texts`` are the other places a secret must not appear (logs, exec eventlogs),
    place -> text; ``secrets`` are the credentials to look for (each at least
    ``MIN_SECRET`` characters; never shown); ``ledger`` None: the ledger is not checked;
    ``scope``: the job ids examined when not every job of the instance was (the bill
    and the ledger are then judged only where they concern those jobs' units).
    ``calls`` and ``faults`` are the emulator's counters, kept for the report."""

    jobs: tuple[JobFacts, ...] = ()
    bill: Bill = Bill()
    ledger: tuple[LedgerRow, ...] | None = None
    texts: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    scope: tuple[int, ...] | None = None
    calls: Mapping[str, int] = field(default_factory=dict)
    faults: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for secret in self.secrets:
            if not isinstance(secret, str) or len(secret) < MIN_SECRET:
                raise ValueError(
                    f"secrets: each must be a string of at least {MIN_SECRET} characters"
                    " (a shorter one would match by chance)"
                )


# --- check: the promises, one function each (pure) -------------------------------------------


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


# --- decoding the emulator's report (read, never trusted) ------------------------------------


def _get(obj: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    value = obj.get(key, default)
    if not isinstance(value, kind):
        name = "an object" if kind is Mapping else f"a {kind.__name__}"
        raise ValueError(f"{where}.{key} must be {name}, got {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, got {value!r}")
    return float(value)


def _text(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _state(value: Any, where: str) -> str:
    text = _text(value, where)
    assert text is not None
    state = text.upper()
    return _STATE_ALIASES.get(state, state)


def _task(entry: Any, where: str) -> BilledTask:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be an object, got {entry!r}")
    shots = entry.get("shots", 0)
    if isinstance(shots, bool) or not isinstance(shots, int):
        raise ValueError(f"{where}.shots must be an integer, got {shots!r}")
    seconds = entry.get("billed_seconds")
    token = entry.get("token")
    return BilledTask(
        id=_text(entry.get("id"), f"{where}.id") or "",
        cost=_number(entry.get("cost"), f"{where}.cost"),
        state=_state(entry.get("state"), f"{where}.state"),
        vendor=_text(entry.get("vendor", "braket"), f"{where}.vendor") or "",
        device=str(entry.get("device") or ""),
        token=token if isinstance(token, str) and token else None,
        shots=shots,
        billed_seconds=None if seconds is None else _number(seconds, f"{where}.billed_seconds"),
        session=_text(entry.get("session"), f"{where}.session", optional=True),
        created=_number(entry.get("created", 0.0), f"{where}.created"),
    )


def _session(entry: Any, where: str) -> BilledSession:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be an object, got {entry!r}")
    jobs = entry.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(j, str) for j in jobs):
        raise ValueError(f"{where}.jobs must be a list of job ids")
    state = _text(entry.get("state"), f"{where}.state") or ""
    return BilledSession(
        id=_text(entry.get("id"), f"{where}.id") or "",
        backend=str(entry.get("backend") or ""),
        mode=str(entry.get("mode") or ""),
        state=state.lower(),
        jobs=tuple(jobs),
        cost=_number(entry.get("cost", 0.0), f"{where}.cost"),
    )


def _counters(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in value.values()
    ):
        raise ValueError(f"{where} must map names to integers")
    return {str(k): int(v) for k, v in value.items()}


# --- gather: reading what a run left behind --------------------------------------------------


def read_ledger(
    path: str | Path, *, credentials: str | None = None, cluster: str | None = None
) -> tuple[LedgerRow, ...]:
    """Every charge of the site ledger, opened read-only (the service may be writing):
    a SQLite file, or a PostgreSQL ledger's ``postgresql://`` URL (its password in the
    ``credentials`` file). ``cluster``: only the rows that instance wrote (a ledger
    several instances share)."""
    columns = "token, jobid, state, cost, estimate, task_id, device, userid"
    if str(path).startswith(("postgresql://", "postgres://")):
        from flux_quantum.site.ledger import Ledger, LedgerError

        where, args = ("WHERE cluster = ?", (cluster,)) if cluster is not None else ("", ())
        try:
            with Ledger(str(path), readonly=True, credentials=credentials) as ledger:
                rows = ledger._store.rows(f"SELECT {columns} FROM charges {where}", args)
        except LedgerError as exc:
            raise ValueError(f"ledger: cannot read the charges of {path}: {exc}") from None
    else:
        uri = Path(path).absolute().as_uri() + "?mode=ro"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise ValueError(f"ledger: cannot open {path} read-only: {exc}") from None
        try:
            where, args = ("WHERE cluster = ?", (cluster,)) if cluster is not None else ("", ())
            rows = db.execute(f"SELECT {columns} FROM charges {where}", args).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(f"ledger: cannot read the charges of {path}: {exc}") from None
        finally:
            db.close()
    return tuple(
        LedgerRow(
            token=str(token),
            jobid=int(jobid),
            state=str(state),
            cost=None if cost is None else float(cost),
            estimate=float(estimate),
            task_id=task_id,
            device=str(device),
            userid=int(userid),
        )
        for token, jobid, state, cost, estimate, task_id, device, userid in rows
    )


def _read_texts(texts: Mapping[str, str] | Sequence[Path]) -> dict[str, str]:
    if isinstance(texts, str | bytes):
        raise ValueError("texts: give a mapping of place -> text or a list of paths, not a string")
    if isinstance(texts, Mapping):
        out = {}
        for place, text in texts.items():
            if not isinstance(text, str):
                raise ValueError(f"texts: the text of {place!r} must be a string")
            out[str(place)] = text
        return out
    out = {}
    for path in texts:
        try:
            out[str(path)] = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise ValueError(f"texts: cannot read {path}: {exc.strerror}") from None
    return out


def _state_name(state: Any) -> str:
    from flux.job.info import statetostr

    return str(statetostr(state))


def _is_qpu(system: Mapping[str, Any], job_events: Sequence[Event]) -> bool:
    if REQUEST_ATTRIBUTE in system:
        return True
    dependencies = system.get("dependencies")
    if isinstance(dependencies, list) and any(
        isinstance(d, Mapping) and d.get("scheme") == "qpu" for d in dependencies
    ):
        return True
    return any(e.name.startswith("qpu-") for e in job_events)


def state_of(job_events: Iterable[Event]) -> str:
    """A job's state as its eventlog tells it (RFC 21's transitions): what a job-list
    that lags behind the job-manager has not seen yet."""
    state = "NEW"
    after = {"validate": "DEPEND", "depend": "PRIORITY", "priority": "SCHED", "alloc": "RUN"}
    for event in job_events:
        if event.name == "clean" or event.name == "invalidate":
            return "INACTIVE"
        fatal = event.name == "exception" and event.context.get("severity") == 0
        if event.name == "finish" or fatal:
            state = "CLEANUP"
        elif event.name in after and STATES.index(after[event.name]) > STATES.index(state):
            state = after[event.name]
    return state


def read_jobs(
    uri: str | None, jobs: Iterable[int] | None = None
) -> tuple[tuple[JobFacts, ...], dict[str, str]]:
    """The jobs of the instance at ``uri`` (None: ``FLUX_URI``), or those of ``jobs``,
    through the Flux bindings: job-list for ids, states, users and memos, the service's
    own reader (``FluxJobs.records``) for eventlogs and jobspecs; and, as texts to scan,
    the exec eventlogs of the jobs that started. A job's state is the further of
    job-list's and its eventlog's (job-list may lag behind)."""
    try:
        import flux
    except ImportError:
        raise ValueError(
            "uri: the Flux Python bindings are not importable here; run the checker in"
            " the Python environment flux-quantum was installed into"
        ) from None

    from flux_quantum.instance.rpc import pipelined
    from flux_quantum.service.fluxside import FluxJobs

    handle = flux.Flux(uri) if uri else flux.Flux()
    payload = {"max_entries": 0, "attrs": ["state", "userid", "annotations"], "since": 0.0}
    rows = {row["id"]: row for row in handle.rpc("job-list.list", payload).get()["jobs"]}
    ids = sorted(rows) if jobs is None else list(dict.fromkeys(int(j) for j in jobs))
    records = FluxJobs(handle).records(ids)
    out = []
    started = []
    for jobid in ids:
        if jobid not in records:
            raise ValueError(f"jobs: cannot read the eventlog and jobspec of job {jobid}")
        record = records[jobid]
        if record is None:
            raise ValueError(f"jobs: the instance does not know job {jobid}")
        row = rows.get(jobid, {})
        state = state_of(record.events)
        if "state" in row:
            state = max(_state_name(row["state"]), state, key=STATES.index)
        release = Released.decode(record.system)
        tasks: tuple[str, ...] = ()
        if release is not None:
            tasks = release.info.tasks or ((release.task,) if release.task else ())
        memo = (row.get("annotations") or {}).get("user") or {}
        userid = row.get("userid", record.submitter())
        out.append(
            JobFacts(
                jobid=jobid,
                userid=userid if isinstance(userid, int) else -1,
                state=state,
                events=record.events,
                qpu=_is_qpu(record.system, record.events),
                released_tasks=tasks,
                memo=memo if isinstance(memo, Mapping) else {},
            )
        )
        if record.has_event("start"):
            started.append(jobid)
    texts = {}
    requests = [
        ("job-info.lookup", {"id": j, "keys": ["guest.exec.eventlog"], "flags": 0}) for j in started
    ]
    for jobid, answer in zip(started, pipelined(handle, requests), strict=True):
        if isinstance(answer, Mapping):
            texts[f"exec eventlog {jobid}"] = str(answer.get("guest.exec.eventlog") or "")
    return tuple(out), texts


def gather(
    *,
    uri: str | None,
    emulator_url: str,
    ledger: Path | str | None,
    texts: Mapping[str, str] | Sequence[Path] = (),
    secrets: Sequence[str] = (),
    jobs: Iterable[int] | None = None,
    ledger_credentials: str | None = None,
    cluster: str | None = None,
) -> Facts:
    """Everything ``check`` needs, read once: the jobs of the Flux instance at ``uri``
    (None: ``FLUX_URI``; ``jobs``: only these), the emulator's report at
    ``emulator_url``, the site ledger at ``ledger`` (None: not checked), the ``texts``
    (place -> text, or log files), and the ``secrets`` to look for. A PostgreSQL ledger
    (``ledger`` its URL, ``ledger_credentials`` its password's file) shared by several
    instances: ``cluster`` reads only this instance's rows. Raises ValueError naming
    what could not be read."""
    if isinstance(secrets, str):
        raise ValueError("secrets: give a list of strings, not one string")
    report = read_report(emulator_url)
    bill = Bill.from_report(report)
    places = _read_texts(texts)
    job_facts, exec_logs = read_jobs(uri, jobs)
    places.update(exec_logs)
    rows = (
        None
        if ledger is None
        else read_ledger(ledger, credentials=ledger_credentials, cluster=cluster)
    )
    faults = report.get("faults") or {}
    if not isinstance(faults, Mapping):
        raise ValueError("emulator report: faults must be an object")
    return Facts(
        jobs=job_facts,
        bill=bill,
        ledger=rows,
        texts=places,
        secrets=tuple(secrets),
        scope=None if jobs is None else tuple(j.jobid for j in job_facts),
        calls=_counters(report.get("calls"), "emulator report: calls"),
        faults={str(k): _counters(v, f"emulator report: faults.{k}") for k, v in faults.items()},
    )
