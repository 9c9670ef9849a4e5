"""The ``qpu-*`` eventlog protocol: every event flux-quantum writes in a job's eventlog.

A held job's eventlog is the service's only memory: the handler service records what it
chose, the idempotency token of each vendor task (before the vendor hears of it), the task
it got, and what became of it; after a crash or restart it reads them back and carries
on. This module is the one home of that protocol: the event names, one frozen record per
event that turns into its eventlog context and back (``to_context``/``decode``), the one
parser of eventlog text (``parse_eventlog``) and the one replay (``replay``) that folds a
job's events into what the service needs to continue. The service, the CLI, the consumer
and the benchmarks all read events through it. The other half of the protocol, what
flux-quantum writes into a job's jobspec at release and the memos on a held job, is
``protocol.py``'s.

It never talks to Flux and never sees a credential: a context holds device names, task
ids, tokens and reasons only. ``qpu-release`` is posted by the jobtap plugin
(``jobtap/quantum_services.c``); every other event by the handler service through the plugin's
``event`` service.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

# --- eventlog entries -----------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One eventlog entry as Flux stores it (RFC 18): a name, a time and a context."""

    name: str
    timestamp: float = 0.0
    context: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: Any) -> Event | None:
        """An entry decoded from JSON (or a flux ``EventLogEvent``); None if malformed."""
        if isinstance(entry, Event):
            return entry
        if not isinstance(entry, Mapping):
            name = getattr(entry, "name", None)
            if not isinstance(name, str):
                return None
            context = getattr(entry, "context", None)
            stamp = getattr(entry, "timestamp", 0.0)
            return cls(name, _float(stamp), context if isinstance(context, Mapping) else {})
        name = entry.get("name")
        if not isinstance(name, str):
            return None
        context = entry.get("context")
        return cls(
            name, _float(entry.get("timestamp")), context if isinstance(context, Mapping) else {}
        )

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp, "name": self.name, "context": dict(self.context)}


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def parse_eventlog(text: str | bytes | Iterable[Any] | None) -> list[Event]:
    """Events from an eventlog: job-info's newline-separated JSON, or entries already
    decoded. Lines that are not events (truncated, not JSON) are skipped."""
    if text is None:
        return []
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if isinstance(text, str):
        entries: list[Any] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    else:
        entries = list(text)
    out = []
    for entry in entries:
        event = Event.from_entry(entry)
        if event is not None:
            out.append(event)
    return out


def first(events: Iterable[Event], name: str) -> Event | None:
    """The first event called ``name``."""
    return next((e for e in events if e.name == name), None)


def last(events: Iterable[Event], name: str) -> Event | None:
    """The last event called ``name``."""
    found = None
    for event in events:
        if event.name == name:
            found = event
    return found


def first_times(events: Iterable[Event]) -> dict[str, float]:
    """When each event name first appeared (benchmarks time a job's story with it)."""
    stamps: dict[str, float] = {}
    for event in events:
        stamps.setdefault(event.name, event.timestamp)
    return stamps


def ends_hold(event: Event) -> bool:
    """An event after which a held job will never get a task by waiting longer: its
    release, leaving DEPEND some other way, its end, or a fatal exception."""
    if event.name in (RELEASE, "depend", "clean"):
        return True
    return event.name == "exception" and event.context.get("severity") == 0


# --- the qpu-* events --------------------------------------------------------------------------


@dataclass(frozen=True)
class QpuEvent:
    """Base of the records: ``name`` is the event name; fields are the context keys
    (``context_keys`` renames the ones that are Python keywords); None-valued optional
    fields are left out of the context."""

    name: ClassVar[str]
    context_keys: ClassVar[Mapping[str, str]] = {}

    def to_context(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (value == () and f.default == ()):
                continue
            if f.name == "late" and value is False:
                continue
            out[self.context_keys.get(f.name, f.name)] = _jsonable(value)
        return out

    @classmethod
    def decode(cls, context: Mapping[str, Any]) -> Self | None:
        """The record from an event's context; None when a required key is missing or
        a value has the wrong type (an eventlog is read, never trusted)."""
        hints = _hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = cls.context_keys.get(f.name, f.name)
            required = f.default is MISSING and f.default_factory is MISSING
            if key not in context:
                if required:
                    return None
                continue
            ok, value = _coerce(context[key], hints[f.name])
            if not ok:
                if required:
                    return None
                continue
            values[f.name] = value
        return cls(**values)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


def _coerce(value: Any, hint: Any) -> tuple[bool, Any]:
    """Check ``value`` against a field's type hint (the few shapes the records use)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(hint):
            return True, None
        for arg in get_args(hint):
            if arg is type(None):
                continue
            ok, out = _coerce(value, arg)
            if ok:
                return True, out
        return False, None
    if hint is Any:
        return True, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else None
    if hint is str:
        return isinstance(value, str), value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False, None
        (item, *_rest) = get_args(hint)
        out = []
        for v in value:
            ok, coerced = _coerce(v, item)
            if not ok:
                return False, None
            out.append(coerced)
        return True, tuple(out)
    if origin is Mapping or hint is Mapping or origin is dict:
        return isinstance(value, Mapping), dict(value) if isinstance(value, Mapping) else None
    return False, None


SELECT = "qpu-select"
SUBMIT = "qpu-submit"
TASK = "qpu-task"
QUEUE = "qpu-queue"
WAIT = "qpu-wait"
RETRY = "qpu-retry"
SUBMIT_FAILED = "qpu-submit-failed"
TASK_FAILED = "qpu-task-failed"
MAX_WAIT = "qpu-max-wait"
DEVICE_UNAVAILABLE = "qpu-device-unavailable"
FAILOVER = "qpu-failover"
INPUTS = "qpu-inputs"
READY = "qpu-ready"
JOIN = "qpu-join"
RELEASE = "qpu-release"
SESSION = "qpu-session"
SESSION_CLOSED = "qpu-session-closed"
COST = "qpu-cost"
RESERVATION_ENDED = "qpu-reservation-ended"
COMPILE = "qpu-compile"


@dataclass(frozen=True)
class Select(QpuEvent):
    """The policy chose a device for one program's attempt, and why."""

    name: ClassVar[str] = SELECT
    index: int
    attempt: int
    device: str
    explanation: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Compile(QpuEvent):
    """The program of one attempt was compiled for its device (``flux_quantum.compiler``),
    before its task: ``form`` (``mapped``: onto the device's gates and couplers;
    ``checked``: parsed and sent as written), ``layout`` (the physical qubit of each of
    the program's qubits, when mapped), ``calibration`` (the figures it was mapped on),
    the expected ``success`` on them, the compiled circuit's two-qubit gates and depth,
    the ``seconds`` it took, and ``program``: the text the vendor receives (None when it
    is the program as written, or longer than ``PROGRAM_KEPT`` bytes: then ``bytes``)."""

    name: ClassVar[str] = COMPILE
    index: int
    attempt: int
    device: str
    form: str
    layout: tuple[int, ...] | None = None
    calibration: str | None = None
    success: float | None = None
    two_qubit_gates: int | None = None
    depth: int | None = None
    seconds: float | None = None
    program: str | None = None
    bytes: int | None = None


PROGRAM_KEPT = 64 * 1024  # a compiled program kept in the eventlog at most (bytes)


@dataclass(frozen=True)
class MergeSlot:
    """A job's place in a merged vendor task (several jobs' programs in one Braket
    program set or IBM Sampler job): ``key`` is the task's idempotency token at the
    vendor (the same on every member), ``index`` the job's program in it (``results``
    answers in that order) and ``shots`` every member's shots in that order (the cost
    shares are computed from them)."""

    key: str
    index: int
    shots: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.shots)

    def to_context(self) -> dict[str, Any]:
        return {"key": self.key, "index": self.index, "size": self.size, "shots": list(self.shots)}

    @classmethod
    def decode(cls, value: Any) -> MergeSlot | None:
        """The slot of a ``merge`` context; None unless every field is sound (an
        eventlog is read, never trusted)."""
        if not isinstance(value, Mapping):
            return None
        key, index, shots = value.get("key"), value.get("index"), value.get("shots")
        if not isinstance(key, str) or not key:
            return None
        if not isinstance(shots, list) or not shots:
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shots):
            return None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(shots):
            return None
        return cls(key, index, tuple(shots))


@dataclass(frozen=True)
class Submit(QpuEvent):
    """The idempotency token of a task attempt, recorded BEFORE the vendor hears of it:
    a service that dies after the create finds the token and gets the same task back.

    ``since`` (epoch seconds, taken before the create) bounds where a vendor without an
    idempotent create (IBM) looks for the task again (``Vendor.find_task``); ``ahead`` is
    the device's pending count seen before the create, which a vendor that reports no
    queue position (IBM) leaves as the only measure of where the task stands;
    ``session`` is the fingerprint of the session the task rides (never its id);
    ``reservation`` the name of the reserved window (Braket Direct) the task is created
    in, with its ARN: the job was admitted into it; ``merge`` the job's place in a
    merged task (``MergeSlot``): ``token`` stays the job's own (its ledger row), the
    vendor knows the task by the slot's key, the same on every member's event, and the
    task is created once for all of them."""

    name: ClassVar[str] = SUBMIT
    context_keys: ClassVar[Mapping[str, str]] = {"device_class": "class"}
    unit: int
    index: int
    attempt: int
    token: str
    device: str
    vendor: str | None = None
    shots: int | None = None
    program: str | None = None
    default_program: str | None = None
    exclude: tuple[str, ...] = ()
    device_class: str | None = None
    since: float | None = None
    ahead: int | None = None
    session: str | None = None
    reservation: str | None = None
    merge: Mapping[str, Any] | None = None

    @property
    def slot(self) -> MergeSlot | None:
        return MergeSlot.decode(self.merge)


@dataclass(frozen=True)
class TaskCreated(QpuEvent):
    """The vendor task an attempt's token got."""

    name: ClassVar[str] = TASK
    unit: int
    index: int
    attempt: int
    token: str
    task: str
    device: str | None = None


@dataclass(frozen=True)
class QueueMilestone(QpuEvent):
    """The task's queue position first reached a milestone (100, 10, 1)."""

    name: ClassVar[str] = QUEUE
    index: int
    attempt: int
    milestone: int
    position: int | None = None
    task: str | None = None


@dataclass(frozen=True)
class Wait(QpuEvent):
    """No device can take the task now, for a reason that passes (busy slots, a
    vendor that did not answer): the service tries again later."""

    name: ClassVar[str] = WAIT
    index: int
    reason: str
    retry_in: float | None = None


@dataclass(frozen=True)
class Retry(QpuEvent):
    """A call failed in a way that may pass; the job stays held and it is retried."""

    name: ClassVar[str] = RETRY
    index: int
    operation: str
    code: str | None = None
    message: str | None = None
    retry_in: float | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class SubmitFailed(QpuEvent):
    """The vendor refused to create the task."""

    name: ClassVar[str] = SUBMIT_FAILED
    index: int
    attempt: int
    device: str
    reason: str
    code: str | None = None


@dataclass(frozen=True)
class TaskProblem(QpuEvent):
    """What happened to a waiting task: it failed, waited too long, or its device left.
    ``action`` says what the service did to a task that may still run."""

    index: int
    attempt: int
    device: str
    task: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class TaskFailed(TaskProblem):
    name: ClassVar[str] = TASK_FAILED
    state: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class MaxWaitExceeded(TaskProblem):
    name: ClassVar[str] = MAX_WAIT
    waited: float | None = None
    max_wait: float | None = None


@dataclass(frozen=True)
class DeviceUnavailable(TaskProblem):
    name: ClassVar[str] = DEVICE_UNAVAILABLE
    status: str | None = None


@dataclass(frozen=True)
class Failover(QpuEvent):
    """A new attempt for one program: a new token, the failed device excluded."""

    name: ClassVar[str] = FAILOVER
    context_keys: ClassVar[Mapping[str, str]] = {"failed": "from", "device_class": "class"}
    index: int
    attempt: int
    reason: str | None = None
    mode: str | None = None
    failed: str | None = None
    exclude: tuple[str, ...] = ()
    device_class: str | None = None


@dataclass(frozen=True)
class Inputs(QpuEvent):
    """The job's other Flux dependencies (``after``: those that held its task, e.g.
    ``after-success=ƒ...``) no longer hold it: the service starts on its task now, and
    the unit's time counts from here. Posted only for a job that waited."""

    name: ClassVar[str] = INPUTS
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ready(QpuEvent):
    """Every task of the unit reached its release point; ``tasks`` says why each did."""

    name: ClassVar[str] = READY
    index: int
    attempt: int
    tasks: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Join(QpuEvent):
    """The job rides the tasks of unit ``unit`` (a qpu.group, a follower, a restart)."""

    name: ClassVar[str] = JOIN
    unit: int
    via: str | None = None
    late: bool = False


@dataclass(frozen=True)
class Session(QpuEvent):
    """The service opened a vendor session for the unit's tasks (``qpu.session``), or ran
    them as single jobs: ``requested`` is the mode asked for, ``mode`` the one in force
    (``job``: no session), ``reason`` why they differ (IBM's Open plan refuses dedicated
    sessions with 1352). ``fingerprint`` tells sessions apart; the id itself is a secret
    and is never recorded (a restarted service reads it back from a task that rode it).
    ``loop``: the variational loop (``qpu.loop``) whose steps share the session;
    ``joined``: the unit that opened it, when this step joined it rather than opened it."""

    name: ClassVar[str] = SESSION
    device: str
    requested: str
    mode: str
    fingerprint: str | None = None
    reason: str | None = None
    loop: str | None = None
    joined: int | None = None


@dataclass(frozen=True)
class SessionClosed(QpuEvent):
    """The service closed (released) the unit's session, and why; posted on the jobs
    that are still held when it does (a job that already ended cannot take an event)."""

    name: ClassVar[str] = SESSION_CLOSED
    device: str
    fingerprint: str
    reason: str | None = None


@dataclass(frozen=True)
class Release(QpuEvent):
    """Posted by the plugin when it released the job (the task is in the jobspec)."""

    name: ClassVar[str] = RELEASE
    task: str | None = None
    device: str | None = None


@dataclass(frozen=True)
class Cost(QpuEvent):
    """What one task cost, settled in the site's ledger when it ended (``state``: the
    vendor's final state; a QPU task that failed or was cancelled costs nothing).
    ``estimate`` is what was reserved before the task was created; amounts are in
    ``currency``. Posted while the job is held or, once released, by the instance
    owner; a job that already ended does not get it (``flux quantum usage`` has it)."""

    name: ClassVar[str] = COST
    index: int
    attempt: int
    token: str
    device: str
    cost: float
    estimate: float | None = None
    currency: str | None = None
    state: str | None = None
    task: str | None = None
    billed_seconds: float | None = None


@dataclass(frozen=True)
class ReservationEnded(QpuEvent):
    """The reserved window the job waited for, or whose task it was held on, ended (or
    has less than one task's time left) before the job's task ran in it: ``end`` (epoch
    seconds) is the window's end, ``action`` what the service does now, by the job's end
    rule (``on-demand``: a new task in the device's public queue; ``fail``: the job
    fails). ``index``/``attempt``: the program's attempt that was for the window;
    ``task``: its task, when one was created (Braket cancels it at the end)."""

    name: ClassVar[str] = RESERVATION_ENDED
    reservation: str
    end: float
    action: str
    index: int | None = None
    attempt: int | None = None
    task: str | None = None
    reason: str | None = None


RECORDS: dict[str, type[QpuEvent]] = {
    cls.name: cls
    for cls in (
        Select,
        Submit,
        TaskCreated,
        QueueMilestone,
        Wait,
        Retry,
        SubmitFailed,
        TaskFailed,
        MaxWaitExceeded,
        DeviceUnavailable,
        Failover,
        Inputs,
        Ready,
        Join,
        Session,
        SessionClosed,
        Release,
        Cost,
        ReservationEnded,
        Compile,
    )
}
NAMES = frozenset(RECORDS)


def decode(event: Event) -> QpuEvent | None:
    """The record of a ``qpu-*`` event; None for other events or a malformed context."""
    cls = RECORDS.get(event.name)
    return None if cls is None else cls.decode(event.context)


# --- replay: what the eventlog says, for the service to continue ---------------------------


@dataclass(frozen=True)
class AttemptHistory:
    """What a job's eventlog says about one program's latest task attempt."""

    index: int
    attempt: int = 0
    token: str | None = None
    device: str | None = None
    vendor: str | None = None
    task: str | None = None
    queued_at: float | None = None
    exclude: tuple[str, ...] = ()
    device_class: str | None = None
    milestones: tuple[int, ...] = ()
    since: float | None = None
    ahead: int | None = None
    reservation: str | None = None  # the reserved window its task is created in
    merge: MergeSlot | None = None  # its place in a merged task

    @property
    def progress(self) -> tuple[int, bool, bool]:
        return (self.attempt, self.token is not None, self.task is not None)


@dataclass(frozen=True)
class History:
    """A job's qpu story, replayed from its eventlog. ``facts`` are the (event, index,
    attempt) triples recorded, so the service never posts one twice."""

    unit: int | None = None
    programs: Mapping[int, AttemptHistory] = field(default_factory=dict)
    facts: frozenset[tuple[str, int, int]] = frozenset()
    released: bool = False
    device: str | None = None
    task: str | None = None
    position: int | None = None
    session: Session | None = None
    session_closed: bool = False
    # Reserved windows the job's eventlog says ended before its task ran in them.
    reservations_ended: tuple[str, ...] = ()
    # When its other dependencies stopped holding its task (qpu-inputs), if they did.
    inputs_at: float | None = None


def replay(events: Iterable[Event | Mapping[str, Any]]) -> History:
    """The qpu-* events of one eventlog folded into a History (pure)."""
    unit: int | None = None
    programs: dict[int, AttemptHistory] = {}
    facts: set[tuple[str, int, int]] = set()
    released = False
    session: Session | None = None
    session_closed = False
    ended: list[str] = []
    inputs_at: float | None = None
    latest: dict[str, Any] = {"device": None, "task": None, "position": None}
    for entry in events:
        event = Event.from_entry(entry)
        record = None if event is None else decode(event)
        if event is None or record is None:
            continue
        if isinstance(record, Session):
            session, session_closed = record, False
            continue
        if isinstance(record, SessionClosed):
            session_closed = session is None or record.fingerprint == session.fingerprint
            continue
        if isinstance(record, Release):
            released = True
            continue
        if isinstance(record, Inputs):
            inputs_at = inputs_at if inputs_at is not None else event.timestamp or None
            continue
        if isinstance(record, ReservationEnded):
            if record.reservation not in ended:
                ended.append(record.reservation)
            continue
        if isinstance(record, Join):
            unit = record.unit
            continue
        if not isinstance(record, Submit | TaskCreated | Failover | QueueMilestone | Select):
            continue
        index = record.index
        if index < 0:
            continue
        if isinstance(record, Select):
            latest.update(device=record.device, task=None, position=None)
            continue
        prog = programs.get(index, AttemptHistory(index))
        if isinstance(record, Submit):
            unit = record.unit
            latest.update(device=record.device, task=None, position=None)
            if record.attempt < prog.attempt:
                continue
            prog = AttemptHistory(
                index,
                attempt=record.attempt,
                token=record.token,
                device=record.device,
                vendor=record.vendor,
                exclude=record.exclude or prog.exclude,
                device_class=record.device_class or prog.device_class,
                milestones=prog.milestones if record.attempt == prog.attempt else (),
                since=record.since,
                ahead=record.ahead,
                reservation=record.reservation,
                merge=record.slot,
            )
        elif isinstance(record, TaskCreated):
            unit = record.unit
            latest.update(device=record.device or latest["device"], task=record.task)
            if record.attempt != prog.attempt or record.token != prog.token:
                continue
            prog = replace(
                prog,
                task=record.task,
                device=record.device or prog.device,
                queued_at=event.timestamp or None,
            )
        elif isinstance(record, Failover):
            if (
                record.attempt <= prog.attempt
                and prog.token is not None
                and record.attempt != prog.attempt + 1
            ):
                continue
            prog = AttemptHistory(
                index,
                attempt=record.attempt,
                exclude=record.exclude,
                device_class=record.device_class or prog.device_class,
            )
        elif isinstance(record, QueueMilestone):
            if record.position is not None:
                latest["position"] = record.position
            if record.attempt == prog.attempt:
                programs[index] = replace(
                    prog, milestones=tuple(sorted({*prog.milestones, record.milestone}))
                )
            continue
        programs[index] = prog
        facts.add((record.name, index, record.attempt))
    return History(
        unit=unit,
        programs=programs,
        facts=frozenset(facts),
        released=released,
        device=latest["device"],
        task=latest["task"],
        position=latest["position"],
        session=session,
        session_closed=session_closed,
        reservations_ended=tuple(ended),
        inputs_at=inputs_at,
    )


def merge_histories(histories: Iterable[History]) -> dict[int, AttemptHistory]:
    """Per program, the most advanced attempt any member of a unit recorded."""
    merged: dict[int, AttemptHistory] = {}
    for history in histories:
        for index, prog in history.programs.items():
            best = merged.get(index)
            if best is None or prog.progress > best.progress:
                if best is not None and prog.attempt == best.attempt:
                    prog = replace(
                        prog, milestones=tuple(sorted({*prog.milestones, *best.milestones}))
                    )
                merged[index] = prog
    return merged


def task_token(unit: int, t_submit: float, index: int, attempt: int) -> str:
    """The idempotency token of one task attempt: stable across restarts of the service
    and of the instance (job id and submit time), unique across instances (job ids
    repeat between instances, their submit microseconds do not)."""
    return f"fq-{unit}-{int(t_submit * 1e6)}-{index}-{attempt}"
