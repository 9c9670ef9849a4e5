"""The one vendor interface: probe a device, submit, poll, cancel, fetch the result.

Shaped like the Braket SDK's own objects (a device and a task with plain verbs), so
that every vendor module (``braket``, ``local``, ``ibm``) looks the same to the policy,
the handlers and the CLI. This module owns the records those verbs return
(``DeviceSnapshot``, ``TaskRef``, ``TaskSnapshot``, ``TaskResult``; a task's state is
``task_state``'s, and a vendor's feed of state changes ``task_events``'), the abstract
``Vendor``, the vendor-neutral ``Calibration`` record, the one bounded retry loop
(``RetryBudget``) and the one call wrapper (``TranslatedCalls``: a call under that loop,
its errors translated by the vendor) that vendor modules make their calls through, and
``CatalogVendor``: a vendor built from the catalog, with the one constructor every vendor
package's class shares and the error mapping its descriptor names. It never talks to a
vendor itself, never holds a credential and never sleeps except through the ``sleep`` it
is given.
"""

from __future__ import annotations

import abc
import hashlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, cast

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.protocol.vendors import VendorDescriptor
from flux_quantum.vendors.errors import NotFound, NotSupported, VendorError
from flux_quantum.vendors.task_state import (
    TaskState as TaskState,  # handed on: its records carry it
)

if TYPE_CHECKING:
    from flux_quantum.vendors.task_events import EventSource

T = TypeVar("T")
S = TypeVar("S")  # a vendor's settings record
Clock = Callable[[], float]
Sleep = Callable[[float], None]


class DeviceStatus(StrEnum):
    ONLINE = "ONLINE"
    PAUSED = "PAUSED"  # up, but takes no work now: its queued tasks wait (QRMI's Paused)
    OFFLINE = "OFFLINE"
    RETIRED = "RETIRED"
    UNREACHABLE = "UNREACHABLE"  # we could not ask (timeout, connection, credentials)


@dataclass(frozen=True)
class Calibration:
    """A device's measured quality as its vendor publishes it, the same for every vendor.

    Fidelities are probabilities in [0, 1]; a vendor that publishes errors (IBM's gate
    and readout errors) is given as ``1 - error`` (``from_errors``). ``one_qubit`` and
    ``readout`` map a qubit ("0", "17") to its figure, ``two_qubit`` a coupled pair
    ("0-1") to the best two-qubit gate fidelity on it; a vendor that only publishes
    device-wide figures (IonQ) gives one entry keyed ``"*"``. The ``*_median``
    properties are what selection uses: which qubits a task gets is the vendor's
    compiler's choice, so the typical qubit stands for them. ``updated_at`` is when the
    vendor measured them (epoch seconds) if it says; ``source`` names the document read.
    """

    one_qubit: tuple[tuple[str, float], ...] = ()
    two_qubit: tuple[tuple[str, float], ...] = ()
    readout: tuple[tuple[str, float], ...] = ()
    updated_at: float | None = None
    source: str = ""

    @classmethod
    def from_errors(
        cls,
        one_qubit: Mapping[str, float] | None = None,
        two_qubit: Mapping[str, float] | None = None,
        readout: Mapping[str, float] | None = None,
        *,
        updated_at: float | None = None,
        source: str = "",
    ) -> Calibration:
        """From error rates (IBM backend properties: ``gate_error``, ``readout_error``)."""

        def fidelities(errors: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
            return tuple((key, 1.0 - error) for key, error in (errors or {}).items())

        return cls(
            fidelities(one_qubit),
            fidelities(two_qubit),
            fidelities(readout),
            updated_at=updated_at,
            source=source,
        )

    @property
    def one_qubit_median(self) -> float | None:
        return _median(self.one_qubit)

    @property
    def two_qubit_median(self) -> float | None:
        return _median(self.two_qubit)

    @property
    def readout_median(self) -> float | None:
        return _median(self.readout)

    @property
    def empty(self) -> bool:
        return not (self.one_qubit or self.two_qubit or self.readout)

    def to_dict(self) -> dict[str, Any]:
        return {
            "one_qubit_median": self.one_qubit_median,
            "two_qubit_median": self.two_qubit_median,
            "readout_median": self.readout_median,
            "one_qubit": dict(self.one_qubit),
            "two_qubit": dict(self.two_qubit),
            "readout": dict(self.readout),
            "updated_at": self.updated_at,
            "source": self.source,
        }


def _median(figures: tuple[tuple[str, float], ...]) -> float | None:
    return statistics.median(value for _, value in figures) if figures else None


@dataclass(frozen=True)
class DeviceSnapshot:
    """What a device looked like at time ``t`` (seconds since the epoch).

    ``queue_depth`` is None when the vendor did not say; ``queue_capped`` means the
    vendor only gave a lower bound (Braket's ``">4000"``), so the true depth is larger.
    ``price`` is the price model in force (the catalog's: it is the site's contract).
    ``calibration`` is the vendor's latest quality figures, None when it publishes none
    (simulators are noise-free and publish none). ``capacity`` is (available, max) of the
    slots the device itself publishes (QRMI's ``ResourceCapacity``, an on-premises
    device's), None when it publishes none.
    """

    device: str
    status: DeviceStatus
    reason: str | None = None
    queue_depth: int | None = None
    queue_capped: bool = False
    price: PriceModel | None = None
    in_window: bool = True
    t: float = 0.0
    calibration: Calibration | None = None
    capacity: tuple[int, int] | None = None

    @property
    def available(self) -> bool:
        """Takes tasks now: online and inside an execution window."""
        return self.status is DeviceStatus.ONLINE and self.in_window

    def describe_status(self) -> str:
        """``ONLINE``, ``OFFLINE (MAINTENANCE)``, ``ONLINE (OUTSIDE_AVAILABILITY_WINDOW)``."""
        reason = self.reason
        if reason is None and not self.in_window:
            reason = "OUTSIDE_AVAILABILITY_WINDOW"
        return f"{self.status.value} ({reason})" if reason else self.status.value

    def describe_queue(self) -> str:
        if self.queue_depth is None:
            return "-"
        return f">{self.queue_depth}" if self.queue_capped else str(self.queue_depth)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "status": self.status.value,
            "reason": self.reason,
            "queue_depth": self.queue_depth,
            "queue_capped": self.queue_capped,
            "price": self.price.to_dict() if self.price else None,
            "in_window": self.in_window,
            "t": self.t,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "capacity": (
                {"available": self.capacity[0], "max": self.capacity[1]}
                if self.capacity is not None
                else None
            ),
        }


@dataclass(frozen=True)
class TaskRef:
    """A vendor task we created or re-attached: enough to find it again after a restart.

    ``token`` is the caller's idempotency token (kept by the caller, e.g. in the job's
    eventlog, so that a submit retried after a crash finds the same task).
    """

    vendor: str
    device: str
    task_id: str
    token: str | None = None
    # The job's program's place in a merged task (``submit_set``): its result is
    # ``results(task)[program]``. None: the task is the job's own.
    program: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vendor": self.vendor,
            "device": self.device,
            "task_id": self.task_id,
            "token": self.token,
        }
        if self.program is not None:
            out["program"] = self.program
        return out


@dataclass(frozen=True)
class TaskSnapshot:
    """A task's state at time ``t``.

    ``position`` is the place in the vendor's queue as it reports it (Braket: 1 = next to
    run), None when unknown or not
    queued; ``position_capped`` means the vendor only gave a lower bound (``">2000"``).
    """

    task: TaskRef
    state: TaskState
    position: int | None = None
    position_capped: bool = False
    message: str | None = None
    t: float = 0.0

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.to_dict(),
            "state": self.state.value,
            "position": self.position,
            "position_capped": self.position_capped,
            "message": self.message,
            "t": self.t,
        }


@dataclass(frozen=True)
class TaskResult:
    """A completed task's measurement counts (bitstring -> count) and the vendor's raw
    result document, for consumers that need more than counts."""

    task: TaskRef
    counts: Mapping[str, int]
    raw: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class VendorSession:
    """A vendor session (IBM: a dedicated or batch session) that tasks can ride.

    ``session_id`` is a secret: whoever holds it can add work billed to the account, so it
    is left out of ``repr`` and ``to_dict`` (what may go to an eventlog, the KVS or a log:
    the mode and a fingerprint). Keep it in memory; after a restart a vendor finds it
    again from a task that rode it (``Vendor.session_of``), with ``closed`` saying whether
    it was closed (or told to take no more work) since.
    """

    vendor: str
    device: str
    mode: str
    session_id: str = field(repr=False)
    closed: bool = False  # as read back: closed, or taking no more work (closing)

    @property
    def fingerprint(self) -> str:
        """A short hash of the id: tells two sessions apart without revealing either."""
        return hashlib.sha256(self.session_id.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "device": self.device,
            "mode": self.mode,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True)
class SessionOpening:
    """What ``Vendor.open_session`` got: the ``requested`` mode, the ``mode`` in force
    (``job`` when no session could be opened) and, when they differ, ``reason``: one line
    for the eventlog saying why."""

    requested: str
    mode: str
    session: VendorSession | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "mode": self.mode,
            "session": self.session.to_dict() if self.session else None,
            "reason": self.reason,
        }


class Vendor(abc.ABC):
    """One vendor behind the interface the rest of flux-quantum uses.

    ``probe`` reports and never raises for a vendor failure (an unreachable vendor is a
    snapshot with status UNREACHABLE); the task verbs raise ``VendorError`` subclasses.
    No verb blocks beyond the vendor's configured timeouts and retry budget.
    """

    name: str = ""

    @abc.abstractmethod
    def probe(self, device: Device) -> DeviceSnapshot:
        """Status, queue depth, price and window of ``device`` now."""

    @abc.abstractmethod
    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """Create a task; calling again with the same ``token`` never makes a second one.
        ``reservation``: a reserved window's ARN (Braket Direct) the task runs in; a vendor
        without reservations refuses one (``NotSupported``)."""

    @abc.abstractmethod
    def poll(self, task: TaskRef) -> TaskSnapshot:
        """State and queue position of ``task`` now."""

    @abc.abstractmethod
    def cancel(self, task: TaskRef) -> None:
        """Ask the vendor to cancel ``task`` (it may already have finished)."""

    @abc.abstractmethod
    def result(self, task: TaskRef) -> TaskResult:
        """The result of a COMPLETED task; raises InvalidRequest for any other state."""

    @abc.abstractmethod
    def attach(self, task_id: str) -> TaskRef:
        """Find an existing task by its vendor id (after a restart)."""

    def attach_and_poll(self, task: TaskRef) -> TaskSnapshot:
        """Re-attach a task found in an eventlog and poll it (after a restart): one call
        where the vendor's read of a task gives both (Braket)."""
        self.attach(task.task_id)
        return self.poll(task)

    # Merged tasks: many programs in one vendor task (a Braket program set, an IBM job of
    # several PUBs), one fee and one trip through the queue for all of them.

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """Create one task that runs every ``(program_text, shots)`` of ``programs``;
        calling again with the same ``token`` and programs never makes a second one.
        ``poll``, ``cancel`` and ``attach`` take the task as any other; ``results`` splits
        it back. ``reservation`` as for ``submit``. A vendor that cannot merge programs
        refuses (``NotSupported``); one whose limits the set exceeds (programs, shots,
        size) raises ``InvalidRequest``."""
        raise NotSupported(
            f"{self.name} cannot run several programs in one task",
            vendor=self.name,
            vendor_code="NotSupported",
            operation="submit_set",
        )

    def result_of(self, task: TaskRef) -> TaskResult:
        """The result of ``task`` for the job that holds the reference: one program's
        of a merged task (``task.program``), else the task's own (``result``)."""
        if task.program is None:
            return self.result(task)
        results = self.results(task)
        if not 0 <= task.program < len(results):
            raise NotFound(
                f"task {task.task_id} has {len(results)} program(s), not a program "
                f"#{task.program + 1}",
                vendor=self.name,
                vendor_code="NotFound",
                operation="result",
            )
        return results[task.program]

    def results(self, task: TaskRef) -> list[TaskResult]:
        """One result per program of a COMPLETED task, in the order ``submit_set`` took
        them, each exactly as if the program had been its own task (its counts, its
        shots); a task of one program (``submit``) gives ``[result(task)]``. Raises like
        ``result``."""
        return [self.result(task)]

    # Optional verbs: the defaults suit a vendor whose create is idempotent by token,
    # that reports queue positions and that has no sessions (Braket).

    def reports_positions(self, device: Device) -> bool:
        """Whether ``poll`` gives a queued task's place on ``device``. Without it (IBM) the
        service estimates the place from the device's pending count (``flux_quantum.timing.release_point``).
        Pure: never calls the vendor."""
        return True

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The task a create with ``token`` made on ``device`` at or after ``since``
        (epoch seconds, recorded before that create), or None. Call it after a restart
        for a recorded token with no recorded task, then ``submit`` only if it gives None.
        A vendor whose ``submit`` is idempotent by token looks nowhere: None."""
        return None

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The task a create with ``token`` made on ``device`` at or after ``since``,
        looked up WITHOUT creating one: the service asks it when a job left while its
        create's answer never came. None only when the vendor says no task has that
        token; raises a retryable ``VendorError`` when it cannot tell yet, and a
        non-retryable one when it cannot tell at all. This default is ``find_task``: a
        vendor whose ``find_task`` looks nowhere (an idempotent create, as Braket's)
        must give its own."""
        return self.find_task(device, token, since=since)

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        """Open a session for a job's tasks on ``device``; a vendor without sessions
        answers job mode. ``cost_limit``: what the job (or its loop) may still spend, in
        US dollars; a vendor whose sessions take a cost limit (IonQ) sets it, so that it
        enforces the budget too, the others ignore it."""
        return SessionOpening(mode or "dedicated", "job", None, f"{self.name} has no sessions")

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        """``submit`` riding ``session``."""
        raise NotSupported(
            f"{self.name} has no sessions", vendor=self.name, vendor_code="NotSupported"
        )

    def close_session(self, session: VendorSession) -> None:
        """Release ``session`` (idempotent)."""
        raise NotSupported(
            f"{self.name} has no sessions", vendor=self.name, vendor_code="NotSupported"
        )

    def session_of(self, task: TaskRef) -> VendorSession | None:
        """The session ``task`` rode, as the vendor knows it, or None."""
        return None

    def billed_seconds(self, task: TaskRef) -> float | None:
        """The run time the vendor bills for a finished ``task`` on a per-minute device,
        or None when it does not say (then the catalog's minimum is charged)."""
        return None

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        """What a job's own later tasks need in their environment to ride ``session``
        (a secret: only for that job's environment)."""
        raise NotSupported(
            f"{self.name} has no sessions", vendor=self.name, vendor_code="NotSupported"
        )

    def target(self, device: Device) -> DeviceTarget:
        """What the compile stage maps a program for ``device`` onto: its basis gates,
        coupling map and published errors as the vendor gives them (IBM's backend
        configuration, IQM's dynamic quantum architecture). This default knows only the
        catalog's width: a program is checked against it and sent as written. Raises
        ``VendorError`` when the vendor cannot be asked now."""
        return DeviceTarget.build(device.name, device.qubits)

    def event_source(self) -> EventSource | None:
        """The feed of this vendor's task state changes the site set up (Braket's
        events through a queue: ``flux_quantum.vendors.task_events``), or None: its
        tasks are only polled. Pure: building the source calls nothing."""
        return None


@dataclass(frozen=True)
class RetryBudget:
    """One bounded retry loop for a vendor call, on top of a client that does not retry.

    ``attempts`` counts every call including the first; the delay before attempt n+1 is
    ``min(max_delay, base_delay * 2**(n-1))``, scaled by ``jitter`` if given (a callable
    returning a factor in [0, 1], e.g. ``random.Random(seed).random``). Only errors with
    ``retryable`` set are retried, and never past ``deadline`` seconds after the first
    attempt. The final error says how many attempts were made.
    """

    attempts: int = 3
    base_delay: float = 0.25
    max_delay: float = 4.0
    deadline: float = 30.0
    jitter: Callable[[], float] | None = None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        delay = min(self.max_delay, self.base_delay * math.pow(2, attempt - 1))
        return delay * self.jitter() if self.jitter is not None else delay

    def run(self, call: Callable[[], T], *, clock: Clock, sleep: Sleep) -> T:
        """Run ``call`` until it succeeds, fails for good or the budget is spent.

        ``call`` must raise ``VendorError`` for vendor failures (vendor modules translate
        their SDK's exceptions inside ``call``).
        """
        start = clock()
        attempt = 1
        while True:
            try:
                return call()
            except VendorError as exc:
                exc.attempts = attempt
                if not exc.retryable or attempt >= self.attempts:
                    raise
                delay = self.delay(attempt)
                if clock() + delay - start > self.deadline:
                    raise
                sleep(delay)
                attempt += 1


class TranslatedCalls(abc.ABC):
    """The one shape of a vendor's call to its SDK or service: run under the vendor's
    ``RetryBudget`` (``retry``, with its ``_clock`` and ``_sleep``), every exception of a
    ``translated`` class turned into a ``VendorError`` by the vendor's ``_translate``
    (one that already is one passes as it is). Mixed into ``CatalogVendor``, whose
    constructor sets those attributes."""

    retry: RetryBudget
    _clock: Clock
    _sleep: Sleep
    # What the vendor's SDK raises; anything else (a bug) is not dressed up as the vendor's.
    translated: tuple[type[BaseException], ...] = (Exception,)

    @abc.abstractmethod
    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        """The project error for ``exc``, raised by ``operation`` on ``subject``."""

    def _call(self, operation: str, subject: str, call: Callable[[], T]) -> T:
        """One vendor call under the retry budget, errors translated."""

        def attempt() -> T:
            try:
                return call()
            except VendorError:
                raise
            except self.translated as exc:
                raise self._translate(exc, operation, subject) from None

        return self.retry.run(attempt, clock=self._clock, sleep=self._sleep)


class CatalogSettings:
    """A vendor's settings record (a frozen dataclass) read from its catalog section
    (``vendors.NAME``): each key the section sets, as the field of that name, then the
    ``overrides``. A record whose keys are not its fields reads them itself."""

    @classmethod
    def from_catalog(cls, section: Mapping[str, str], **overrides: Any) -> Self:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        values: dict[str, Any] = {key: section[key] for key in names if section.get(key)}
        return cls(**(values | overrides))


class CatalogVendor(TranslatedCalls, Vendor, Generic[S]):
    """A vendor a catalog names: its class in a vendor package, built by ``make_vendor``
    through ``from_catalog``.

    ``descriptor`` is its package's (``VENDOR``: the class takes its name from it);
    ``settings_type``, its settings record ``S``, reads the catalog's
    ``vendors.NAME`` section (``from_catalog(section, **overrides)``) and makes the
    defaults (no arguments); ``timeout_settings`` are the settings that bound one call,
    each set to ``make_vendor``'s ``timeout`` when one is given. The constructor is the
    one every such vendor shares: its settings, retry budget, clock and sleep, the
    environment its credentials come from (``os.environ`` unless one is handed in, read
    when used: never copied, never changed) and its catalog devices by name. A vendor
    that needs more takes ``**common`` and hands it on. Errors are translated by the
    descriptor's mapping unless the vendor keeps more state than that mapping sees.
    """

    descriptor: ClassVar[VendorDescriptor]
    settings_type: ClassVar[Any]
    timeout_settings: ClassVar[tuple[str, ...]] = ("timeout",)
    settings: S

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "descriptor" in cls.__dict__:
            cls.name = cls.descriptor.name

    def __init__(
        self,
        settings: S | None = None,
        *,
        devices: Iterable[Device] = (),
        retry: RetryBudget | None = None,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
        environ: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name or self.name
        self.settings = self.settings_type() if settings is None else settings
        self.retry = retry or RetryBudget()
        self._clock = clock
        self._sleep = sleep
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._devices = {d.name: d for d in devices if d.vendor == self.name}

    @classmethod
    def from_catalog(
        cls,
        section: Mapping[str, str],
        *,
        timeout: float | None = None,
        environ: Mapping[str, str] | None = None,
        emulator: Any = None,
        **common: Any,
    ) -> Self:
        """The vendor configured from the catalog's ``vendors.NAME`` ``section``; ``common``:
        the constructor's (devices, retry, clock, sleep). ``emulator``: an ``Emulator`` to
        reach instead of the configured endpoints, for a vendor that serves one object."""
        overrides = {} if timeout is None else dict.fromkeys(cls.timeout_settings, timeout)
        return cls(cls.settings_type.from_catalog(section, **overrides), environ=environ, **common)

    def device_of(self, name: str) -> Device:
        """The catalog device ``name`` of this vendor (NotFound: the catalog has none)."""
        device = self._devices.get(name)
        if device is None:
            raise NotFound(
                f"{self.name} has no device {name!r} in the catalog",
                vendor=self.name,
                vendor_code="UnknownDevice",
            )
        return device

    def program_refusal(self, device: Device, program_text: str) -> str | None:
        """Why ``device`` cannot run ``program_text`` (its kind, then the vendor's own
        check), or None: what the service drops a device for while the job is held."""
        return self.descriptor.program_reason(device.qubits, program_text)

    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        mapped = self.descriptor.translate(
            exc, vendor=self.name, operation=operation, subject=subject
        )
        return cast(VendorError, mapped)
