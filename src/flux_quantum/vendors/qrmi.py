"""What every vendor reached through QRMI shares: one resource per device (and per session
it rides), the task verbs, the device's status and capacity.

QRMI (``qrmi``, the Quantum Resource Management Interface the Slurm SPANK plugins use)
gives every QPU the same verbs: ``status()`` (a ``ResourceStatus``: ``Online``,
``Paused`` or ``Offline``, ``pending_job_count``, ``capacity`` as ``available_slots`` of
``max_slots`` for devices that publish one), ``task_start(payload)``, ``task_status``,
``task_result``, ``task_stop``, ``target``. This module owns those verbs for every
vendor reached through QRMI (IBM, IQM, Pasqal), each call made through
``TranslatedCalls``; the subclass supplies only what is the vendor's own: its settings
(``_config``), its payload (``_payload``), how its result reads as counts
(``_results``), how a create whose outcome is unknown is found again (``_find``, and how
long to wait before trusting "none": ``_settle``), how its errors read (``_translate``)
and, where it has them, its resource types, sessions, failure reasons and calibration.

It must never change ``os.environ``, never retry outside its ``RetryBudget`` and never
write a setting's value into a message (they hold tokens and passwords).
"""

from __future__ import annotations

import abc
import functools
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from flux_quantum.catalog import Device
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.vendors.base import (
    Calibration,
    CatalogVendor,
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    S,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    VendorSession,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    InvalidRequest,
    NotFound,
    NotSupported,
    QuotaExceeded,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)

# qrmi's TaskStatus names.
TASK_STATES = {
    "Queued": TaskState.QUEUED,
    "Running": TaskState.RUNNING,
    "Completed": TaskState.COMPLETED,
    "Failed": TaskState.FAILED,
    "Cancelled": TaskState.CANCELLED,
}
# qrmi's error classes, by name (the extension module's classes are not importable
# without qrmi, which this module loads only when a call is made).
_KINDS: Mapping[str, type[VendorError]] = {
    "AuthenticationFailedError": AccessDenied,
    "ConfigError": AccessDenied,
    "EnvVarNotSetError": AccessDenied,
    "TaskNotFoundError": NotFound,
    "ResourceNotFoundError": NotFound,
    "TaskNotReadyError": InvalidRequest,
    "InvalidInputError": InvalidRequest,
    "UnsupportedPayloadError": InvalidRequest,
    "UnsupportedFunctionError": InvalidRequest,
    "UnsupportedResourceTypeError": InvalidRequest,
}
_STATUS = re.compile(r"\b(?:status(?: code)?|HTTP)[ :=]*([45]\d\d)\b|\b([45]\d\d) [A-Z][a-z]")


class QrmiResource:
    """A qrmi ``QuantumResource`` used by one thread at a time: its methods take the Rust
    object mutably, and a second thread calling in meanwhile fails ("Already borrowed")."""

    def __init__(self, resource: Any) -> None:
        self._resource = resource
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._resource, name)

        def call(*args: Any) -> Any:
            with self._lock:
                return method(*args)

        return call


class Creates:
    """The tokens this process created with, and when it first tried each: QRMI's create
    carries no idempotency token, so a create retried after an error whose outcome is
    unknown (the request may have landed) looks for the first one before it makes one.
    Shared by every QRMI vendor (IBM's too); thread-safe."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tried: dict[str, float] = {}

    def seen(self, token: str, since: float) -> None:
        """A create with ``token`` was made at ``since`` (by an earlier process)."""
        with self._lock:
            self._tried.setdefault(token, since)

    def once(
        self,
        token: str,
        find: Callable[[float], TaskRef | None],
        start: Callable[[], Any],
    ) -> Callable[[], str]:
        """The create to run under the retry budget: ``start`` the first time this
        process tries ``token``; later (a retry, or a token tried before) ``find`` since
        the first try, and ``start`` only when it finds nothing."""
        with self._lock:
            since = self._tried.get(token)
            first = since is None
            if since is None:
                since = self._tried[token] = self._clock()
        when = since

        def create() -> str:
            nonlocal first
            if not first:
                found = find(when)
                if found is not None:
                    return found.task_id
            first = False
            return str(start())

        return create


class AnsweredCreates:
    """The tasks of a vendor whose API cannot be searched by the token a create carries
    (IQM's, an IBM Quantum System's): a task is found again only by the id its create
    answered. Keeps that answer per token, and the tokens whose create may have made a
    task nobody saw (the answer was lost); for those, and for tokens this process never
    created with, the outcome is unknown and ``lost`` says so (a ``Conflict``, not
    retryable: creating again could run the program twice). Thread-safe."""

    def __init__(self, lost: Callable[[str, str], Conflict]) -> None:
        """``lost(subject, token)``: the error for a create of unknown outcome."""
        self._lost = lost
        self._lock = threading.Lock()
        self._made: dict[str, TaskRef] = {}
        self._unsure: set[str] = set()
        self._creating = threading.local()

    def creating(self, token: str) -> None:
        """This thread is about to create with ``token`` (read by ``current``)."""
        self._creating.token = token

    def current(self) -> str | None:
        """The token this thread last created with, or None."""
        return getattr(self._creating, "token", None)

    def made(self, token: str, ref: TaskRef) -> None:
        with self._lock:
            self._made[token] = ref
            self._unsure.discard(token)

    def unsure(self, token: str) -> None:
        with self._lock:
            self._unsure.add(token)

    def find(self, subject: str, token: str) -> TaskRef | None:
        """The task made with ``token``; None if no create with it may have made one."""
        with self._lock:
            made = self._made.get(token)
            unsure = token in self._unsure
        if made is None and unsure:
            raise self._lost(subject, token)
        return made

    def known(self, subject: str, token: str) -> TaskRef:
        """The task this process made with ``token``; ``lost`` for any other token."""
        with self._lock:
            made = self._made.get(token)
        if made is None:
            raise self._lost(subject, token)
        return made


# Seconds a plain HTTP call (what QRMI has no call for) waits for its answer.
HTTP_TIMEOUT = 20.0


def http_class(status: int) -> type[VendorError]:
    """Our error class for an HTTP status a vendor answered with."""
    if status == 429:
        return VendorThrottled
    if status in (401, 403):
        return AccessDenied
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status == 402:
        return QuotaExceeded
    if status >= 500:
        return VendorUnavailable
    return InvalidRequest


def translate(exc: BaseException, *, vendor: str, operation: str, subject: str) -> VendorError:
    """One project error for an exception from qrmi: by its class, else by the HTTP status
    in its text, else unavailable (retryable: a connection refused, a timeout)."""
    if isinstance(exc, VendorError):
        return exc
    kind = type(exc).__name__
    text = " ".join(str(exc).split())
    match = _STATUS.search(text)
    status = int(match.group(1) or match.group(2)) if match else None
    cls = _KINDS.get(kind) or (http_class(status) if status else VendorUnavailable)
    if cls is InvalidRequest and status is not None and status >= 500:
        cls = VendorUnavailable
    code = f"HTTP{status}" if status else kind
    return cls(
        f"{vendor} {operation} for {subject} failed with {code}: {text[:400]}",
        vendor=vendor,
        vendor_code=code,
        operation=operation,
    )


def read_status(status: Any, device: Device, t: float, **extra: Any) -> DeviceSnapshot:
    """A ``DeviceSnapshot`` from qrmi's ``ResourceStatus``: ``Online`` takes work,
    ``Paused`` is up but takes none (PAUSED: its queued tasks wait, none starts),
    ``Offline`` is down; the pending count is the queue depth; a published capacity is
    kept as (available, max) slots."""
    raw = str(getattr(status, "status", "") or "").split(".")[-1].upper()
    state = {"ONLINE": DeviceStatus.ONLINE, "PAUSED": DeviceStatus.PAUSED}.get(
        raw, DeviceStatus.OFFLINE
    )
    reason = getattr(status, "status_reason", None)
    if state is not DeviceStatus.ONLINE:
        reason = reason or raw or "UNKNOWN"
    elif getattr(status, "healthy", True) is False:
        reason = f"unhealthy: {reason}" if reason else "unhealthy"
    else:
        reason = None
    pending = getattr(status, "pending_job_count", None)
    capacity = getattr(status, "capacity", None)
    slots = None
    if capacity is not None:
        free = getattr(capacity, "available_slots", None)
        most = getattr(capacity, "max_slots", None)
        if _count(free) and _count(most):
            slots = (min(free, most), most)
    return DeviceSnapshot(
        device=device.name,
        status=state,
        reason=reason,
        queue_depth=pending if _count(pending) else None,
        price=device.price,
        t=t,
        capacity=slots,
        **extra,
    )


def unreachable(device: Device, exc: VendorError, t: float) -> DeviceSnapshot:
    """What a probe whose status call failed reports: UNREACHABLE, the vendor's code."""
    attempts = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
    return DeviceSnapshot(
        device=device.name,
        status=DeviceStatus.UNREACHABLE,
        reason=f"{exc.vendor_code}{attempts}",
        price=device.price,
        t=t,
    )


def no_reservation(vendor: str, reservation: str | None) -> None:
    """Refuse a reserved window's ARN: QRMI's vendors have none."""
    if reservation:
        raise NotSupported(
            f"{vendor} has no reserved windows (Braket Direct reservations are Braket's)",
            vendor=vendor,
            vendor_code="NotSupported",
            operation="create",
        )


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class QrmiVendor(CatalogVendor[S]):
    """A vendor whose devices are resources of one QRMI type (``resource_type``, a name
    of ``qrmi.ResourceType``). Idempotency as IBM's: QRMI's create has no token, so the
    subclass marks the payload with it and ``_find`` looks for it; ``submit`` looks
    before it creates again whenever this process already tried that token."""

    resource_type = ""
    # How a result flux-quantum cannot read is named in the error ("is not one ...").
    result_form = "one"

    def __init__(self, settings: S | None = None, **common: Any) -> None:
        """``common``: ``CatalogVendor``'s (devices, retry, clock, sleep, environ, name)."""
        super().__init__(settings, **common)
        self._lock = threading.Lock()
        # (device or backend, session id or None) -> its QRMI resource, built once.
        self._resources: dict[tuple[str, str | None], QrmiResource] = {}
        self._creates = Creates(self._clock)
        # Set by a vendor whose API cannot be searched by token (``AnsweredCreates``).
        self._answered: AnsweredCreates | None = None

    # -- what the subclass supplies

    @abc.abstractmethod
    def _config(self, device: Device) -> dict[str, str]:
        """QRMI's settings for ``device`` (keys without the resource-id prefix)."""

    @abc.abstractmethod
    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        """The ``qrmi.Payload`` that runs ``program_text``, marked with ``token``
        (ValueError: the program cannot run there, said in one sentence; its
        ``vendor_code``, if it has one, names the refusal)."""

    @abc.abstractmethod
    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        """The task's results from ``task_result().value`` (ValueError: unreadable)."""

    def _find(self, device: Device, token: str, since: float) -> TaskRef | None:
        """The task a create with ``token`` made at or after ``since``, or None (default:
        the one ``_answered`` kept, if the vendor keeps them)."""
        return self._answered.find(device.name, token) if self._answered else None

    def _settle(self) -> float | None:
        """Seconds after a create's recorded start before ``find_task`` trusts a "not
        found" (a create in flight may not be listed yet); None: it trusts it at once."""
        return None

    def _resource_type(self, device: Device) -> str:
        """The ``qrmi.ResourceType`` name of ``device`` (default: ``resource_type``)."""
        return self.resource_type

    def _task_resource(self, device: Device, session: VendorSession | None = None) -> QrmiResource:
        """The resource tasks are created through: the device's own (QRMI's vendors but
        IBM have no sessions: ``submit_in`` refuses before a task is created)."""
        return self._resource(device)

    def _resource_of(self, task: TaskRef) -> QrmiResource:
        """The resource ``task`` is polled, stopped and read through."""
        return self._resource(self.device_of(task.device))

    def _calibration(self, device: Device) -> Calibration | None:
        """The device's calibration for a probe (default: QRMI gives none)."""
        return None

    def _read_target(self, device: Device, document: dict[str, Any]) -> DeviceTarget | None:
        """The device's target in QRMI's ``target()`` document (default: nothing the
        compiler reads: the catalog's width only)."""
        return None

    def _explain(self, snapshot: DeviceSnapshot) -> DeviceSnapshot:
        """The snapshot with the vendor's own words for its state (default: QRMI's)."""
        return snapshot

    def _reason(self, task: TaskRef) -> str | None:
        """Why a FAILED or CANCELLED task ended, in the vendor's words (default: QRMI's
        task status says nothing)."""
        return None

    # -- plumbing

    def _http_json(self, request: urllib.request.Request, timeout: float = HTTP_TIMEOUT) -> Any:
        """Plain HTTP for what QRMI has no call for: ``request``'s JSON answer (an HTTP
        error as its class of ``VendorError``, naming the URL without its query and the
        first 300 characters of the answer; no answer as ``VendorUnavailable``). No proxy:
        the vendor's endpoint as configured."""
        where = request.full_url.split("?")[0]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = " ".join(exc.read().decode("utf-8", "replace").split())[:300]
            raise http_class(exc.code)(
                f"{self.name}: {where} answered {exc.code}: {body}",
                vendor=self.name,
                vendor_code=f"HTTP{exc.code}",
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as exc:
            raise VendorUnavailable(
                f"{self.name}: could not read {where} ({type(exc).__name__})",
                vendor=self.name,
                vendor_code=type(exc).__name__,
            ) from None

    def setting(self, device: Device, key: str, default: str | None = None) -> str | None:
        """QRMI's setting ``key`` for ``device`` from the environment, as QRMI reads it:
        ``<id>_KEY`` first, then ``KEY``, else ``default``."""
        env = self._environ
        return env.get(f"{device.id}_{key}") or env.get(key) or default

    def _resource(self, device: Device) -> QrmiResource:
        """QRMI's resource for ``device``, built once."""
        return self._open(
            (device.name, None),
            device.id,
            self._resource_type(device),
            lambda: self._config(device),
            device.name,
        )

    def _open(
        self,
        key: tuple[str, str | None],
        resource_id: str,
        kind: str,
        config: Callable[[], dict[str, str]],
        subject: str,
    ) -> QrmiResource:
        """The resource kept under ``key``: else QRMI's resource ``resource_id`` of type
        ``kind`` (a ``qrmi.ResourceType`` name) built from ``config()`` and kept."""
        with self._lock:
            resource = self._resources.get(key)
        if resource is not None:
            return resource
        import qrmi

        try:
            created = qrmi.QuantumResource.from_config(
                resource_id, getattr(qrmi.ResourceType, kind), config()
            )
        except VendorError:
            raise
        except Exception as exc:  # qrmi raises ConfigError for settings it refuses
            raise self._translate(exc, "configure", subject) from None
        with self._lock:
            return self._resources.setdefault(key, QrmiResource(created))

    def _forget(self, session_id: str) -> None:
        """Drop the resources that ride ``session_id`` (it was released)."""
        with self._lock:
            for key in [k for k in self._resources if k[1] == session_id]:
                del self._resources[key]

    # -- the interface

    def probe(self, device: Device) -> DeviceSnapshot:
        try:
            status = self._call("status", device.name, lambda: self._resource(device).status())
        except VendorError as exc:
            return unreachable(device, exc, self._clock())
        snapshot = read_status(status, device, self._clock(), calibration=self._calibration(device))
        return self._explain(snapshot)

    def target(self, device: Device) -> DeviceTarget:
        """QRMI's ``target()`` of the device read by the vendor (``_read_target``)."""
        answer = self._call("target", device.name, lambda: self._resource(device).target())
        try:
            document = json.loads(answer.value)
        except (ValueError, TypeError, AttributeError):
            document = None
        read = self._read_target(device, document) if isinstance(document, dict) else None
        return read if read is not None else super().target(device)

    def reports_positions(self, device: Device) -> bool:
        return False  # QRMI gives a device's pending count, never a task's place

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        no_reservation(self.name, reservation)
        return self._create(
            device, lambda: self._payload(device, program_text, shots, token), token
        )

    def _create(
        self,
        device: Device,
        build: Callable[[], Any],
        token: str,
        session: VendorSession | None = None,
    ) -> TaskRef:
        """Create the task whose payload ``build`` makes (ValueError: refused here, and
        nothing is sent), riding ``session`` if given."""
        try:
            payload = build()
        except ValueError as exc:
            raise InvalidRequest(
                f"{self.name} create for {device.name}: {exc}",
                vendor=self.name,
                vendor_code=getattr(exc, "vendor_code", "InvalidProgram"),
                operation="create",
            ) from None
        resource = self._task_resource(device, session)
        create = self._creates.once(
            token,
            lambda since: self._find(device, token, since),
            lambda: resource.task_start(payload),
        )
        task_id = self._call("create", device.name, create)
        ref = TaskRef(vendor=self.name, device=device.name, task_id=task_id, token=token)
        self._created(token, ref)
        return ref

    def _created(self, token: str, ref: TaskRef) -> None:
        """A create with ``token`` answered ``ref`` (kept in ``_answered``, if set)."""
        if self._answered is not None:
            self._answered.made(token, ref)

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The task an earlier create with ``token`` made on ``device`` at or after
        ``since`` (epoch seconds, recorded before that create), or None. Raises
        ``VendorUnavailable`` (retryable) before ``since`` plus the vendor's ``_settle``.
        A vendor with ``_answered`` knows only the tasks this process made: ``Conflict``
        (its ``lost``) for any other token, never None."""
        if self._answered is not None:
            return self._answered.known(device.name, token)
        settle = self._settle()
        if settle is not None and (wait := since + settle - self._clock()) > 0:
            raise VendorUnavailable(
                f"{self.name} find for {device.name}: a create made at {since:.0f} may still "
                f"be landing; look again in {wait:.0f}s",
                vendor=self.name,
                vendor_code="CreateMaySettle",
                operation="find",
            )
        self._creates.seen(token, since)
        return self._call("find", device.name, lambda: self._find(device, token, since))

    def poll(self, task: TaskRef) -> TaskSnapshot:
        resource = self._resource_of(task)
        status = self._call("status", task.task_id, lambda: resource.task_status(task.task_id))
        state = TASK_STATES.get(getattr(status, "name", str(status)).split(".")[-1])
        if state is None:
            raise VendorUnavailable(
                f"{self.name} status of {task.task_id} is {status!r}, which flux-quantum "
                "does not know; it keeps polling",
                vendor=self.name,
                vendor_code="UnknownStatus",
                operation="status",
            )
        message = None
        if state in (TaskState.FAILED, TaskState.CANCELLED):
            message = self._reason(task)
        return TaskSnapshot(task=task, state=state, message=message, t=self._clock())

    def cancel(self, task: TaskRef) -> None:
        resource = self._resource_of(task)
        self._call("cancel", task.task_id, lambda: resource.task_stop(task.task_id))

    def result(self, task: TaskRef) -> TaskResult:
        return self.results(task)[0]

    def results(self, task: TaskRef) -> list[TaskResult]:
        return self._read_results(task, self._result_text(task))

    def _result_text(self, task: TaskRef) -> str:
        """The task's result document as QRMI gives it (``task_result().value``)."""
        resource = self._resource_of(task)
        return self._call("result", task.task_id, lambda: resource.task_result(task.task_id)).value

    def _read_results(self, task: TaskRef, value: str) -> list[TaskResult]:
        """The task's results from its document; ``InvalidRequest`` when unreadable."""
        try:
            results = self._results(task, value)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} is not {self.result_form} flux-quantum "
                f"can read: {exc}",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="result",
            ) from None
        if not results:
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} holds no measurements",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="result",
            )
        return results

    def attach(self, task_id: str) -> TaskRef:
        """A task by its id: QRMI reads a task through its device's resource, so the task
        is looked for on each catalog device in turn."""
        last: VendorError | None = None
        for device in self._devices.values():
            resource = self._resource(device)
            try:
                self._call("status", task_id, functools.partial(resource.task_status, task_id))
            except NotFound as exc:
                last = exc
                continue
            return TaskRef(self.name, device.name, task_id)
        raise last or NotFound(
            f"{self.name} has no task {task_id}", vendor=self.name, vendor_code="NotFound"
        )
