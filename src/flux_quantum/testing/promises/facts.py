"""What the promise checker judges: a run's facts as plain data (``Facts``).

This module owns the records a run is read into (each job as Flux shows it,
``JobFacts``; the vendor's bill, ``Bill`` of ``BilledTask`` and ``BilledSession``; the
ledger's rows, ``LedgerRow``), the decoding of the emulator's report into a ``Bill``
(read, never trusted: ValueError names a bad field) and a job's state as its eventlog
tells it (``state_of``). It does no I/O: :mod:`flux_quantum.testing.promises.readers`
reads a run, and anyone may build ``Facts`` by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.protocol.events import Event
from flux_quantum.vendors.base import VendorSession

# A secret shorter than this would match by chance; ``Facts`` refuses it.
MIN_SECRET = 8

# Flux job states by name (``flux.job.info.statetostr``).
STATES = ("NEW", "DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP", "INACTIVE")

# A vendor task's final states; any other state is a task still live at the vendor.
COMPLETED = "COMPLETED"
TERMINAL = frozenset({COMPLETED, "FAILED", "CANCELLED"})
_STATE_ALIASES = {"DONE": COMPLETED, "ERROR": "FAILED", "CANCELED": "CANCELLED"}


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
    vendor: str = ""  # the vendor that billed it ("": the bill does not say)
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
        vendor=_text(entry.get("vendor"), f"{where}.vendor", optional=True) or "",
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
