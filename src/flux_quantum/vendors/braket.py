"""Amazon Braket behind the vendor interface, on amazon-braket-sdk and boto3.

This module owns every call flux-quantum makes to Braket (GetDevice, CreateQuantumTask,
GetQuantumTask, CancelQuantumTask and the S3 read of ``results.json``), the defensive
parsing of what comes back, and the mapping of Braket's error codes to
``flux_quantum.vendors.errors``. It never writes HTTP by hand, never blocks without a
timeout, never retries outside its one ``RetryBudget`` and never changes ``os.environ``.

Decisions worth knowing:

- Retries: botocore clients are built with ``total_max_attempts=1`` and the SDK's own
  backoff (``AwsSession.get_quantum_task`` retries throttling three times with real
  sleeps) is bypassed by calling the boto3 Braket client directly for reads, so the only
  retries are ours, with the injected clock and sleep.
- Idempotency: CreateQuantumTask goes through ``AwsSession.create_quantum_task`` (which
  also honours hybrid-job tokens and Braket Direct reservations) with
  ``clientToken`` = the caller's token, so a retried create returns the same task.
- Endpoints: with no override the SDK's usual resolution applies
  (``AWS_ENDPOINT_URL_BRAKET``/``AWS_ENDPOINT_URL_S3``, profiles, real AWS). An explicit
  ``endpoint_url``/``s3_endpoint_url`` is handed to each boto3 client, which beats the
  environment, so one process can talk to real Braket and to the emulator at once.
  ``AwsQuantumTask(arn)``/``AwsDevice`` are not used: they copy sessions and lose such
  clients.
- Heavy SDK modules (``braket.aws`` takes seconds to import) load only when a task is
  created or a result is read, so ``flux quantum backends`` stays quick.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from datetime import time as dtime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from flux_quantum import __version__
from flux_quantum.catalog import DEFAULT_REGION, Device
from flux_quantum.vendors.base import (
    Calibration,
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    RetryBudget,
    Sleep,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    Vendor,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    DeviceOffline,
    DeviceRetired,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)

RESULTS_FILENAME = "results.json"
TOKEN_MAX = 64  # CreateQuantumTask clientToken: 1..64 characters

# Braket's error codes (botocore model 2019-09-01) and S3's, to our error classes.
_ERROR_CLASSES: Mapping[str, type[VendorError]] = {
    "ThrottlingException": VendorThrottled,
    "TooManyRequestsException": VendorThrottled,
    "SlowDown": VendorThrottled,
    "InternalServiceException": VendorUnavailable,
    "ServiceUnavailableException": VendorUnavailable,
    "InternalError": VendorUnavailable,
    "ServiceUnavailable": VendorUnavailable,
    "DeviceOfflineException": DeviceOffline,
    "DeviceRetiredException": DeviceRetired,
    "ValidationException": InvalidRequest,
    "AccessDeniedException": AccessDenied,
    "AccessDenied": AccessDenied,
    "UnrecognizedClientException": AccessDenied,
    "InvalidSignatureException": AccessDenied,
    "ExpiredTokenException": AccessDenied,
    "InvalidClientTokenId": AccessDenied,
    "ResourceNotFoundException": NotFound,
    "NoSuchKey": NotFound,
    "NoSuchBucket": NotFound,
    "ServiceQuotaExceededException": QuotaExceeded,
    "ConflictException": Conflict,
}
_QUEUE_COUNT = re.compile(r"(>)?\s*([0-9]{1,12})", re.ASCII)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# --- parsing helpers (pure) ----------------------------------------------------------


# CreateQuantumTask's association type of a Braket Direct reservation.
RESERVATION_ASSOCIATION = "RESERVATION_TIME_WINDOW_ARN"


def reservation_of(data: Mapping[str, Any]) -> str | None:
    """The reservation ARN a GetQuantumTask answer says the task runs in, or None."""
    associations = data.get("associations")
    for entry in associations if isinstance(associations, list) else ():
        if isinstance(entry, Mapping) and entry.get("type") == RESERVATION_ASSOCIATION:
            arn = entry.get("arn")
            if isinstance(arn, str) and arn:
                return arn
    return None


def parse_queue_count(value: object) -> tuple[int | None, bool]:
    """``(count, capped)`` from a Braket queue size or position.

    Braket sends strings: ``"6"``, ``">2000"`` (a lower bound, ``capped``), the literal
    ``"None"`` once a task runs; anything else (missing, negative, garbage) is unknown.
    """
    if isinstance(value, bool) or value is None:
        return None, False
    if isinstance(value, int):
        return (value, False) if value >= 0 else (None, False)
    match = _QUEUE_COUNT.fullmatch(str(value).strip())
    if not match:
        return None, False
    return int(match.group(2)), match.group(1) is not None


def device_queue_depth(queue_info: object) -> tuple[int | None, bool]:
    """Depth of the normal-priority quantum task queue from GetDevice's
    ``deviceQueueInfo`` (the queue a new task joins)."""
    if not isinstance(queue_info, list):
        return None, False
    for entry in queue_info:
        if (
            isinstance(entry, dict)
            and entry.get("queue") == "QUANTUM_TASKS_QUEUE"
            and entry.get("queuePriority", "Normal") == "Normal"
        ):
            return parse_queue_count(entry.get("queueSize"))
    return None, False


def status_reason(value: object) -> str | None:
    """The reason code of GetDevice's ``deviceStatusReason`` (a structure whose
    ``reason`` is MAINTENANCE, OUTSIDE_AVAILABILITY_WINDOW or RESERVATION)."""
    if isinstance(value, dict):
        value = value.get("reason")
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _window_time(text: object) -> dtime | None:
    try:
        return dtime.fromisoformat(str(text)).replace(microsecond=0, tzinfo=None)
    except ValueError:
        return None


def in_execution_window(windows: object, now: datetime) -> bool:
    """Whether ``now`` (UTC) falls in one of a device's ``executionWindows``.

    Same rules as the SDK's ``AwsDevice.is_available`` (a window ending before it starts
    runs past midnight). A device that publishes no readable window is not held back:
    its status alone decides.
    """
    if not isinstance(windows, list):
        return True
    parsed = []
    for window in windows:
        if not isinstance(window, dict):
            continue
        start = _window_time(window.get("windowStartHour"))
        end = _window_time(window.get("windowEndHour"))
        if start is not None and end is not None:
            parsed.append((str(window.get("executionDay", "Everyday")), start, end))
    if not parsed:
        return True
    now = now.astimezone(UTC)
    clock = now.time().replace(microsecond=0)
    for day, start, end in parsed:
        weekday = now.weekday()
        if clock < end < start:  # the window started yesterday and runs past midnight
            weekday = (weekday - 1) % 7
        day_ok = (
            day == "Everyday"
            or (day == "Weekdays" and weekday < 5)
            or (day in ("Weekend", "Weekends") and weekday > 4)
            or (day in _DAYS and _DAYS.index(day) == weekday)
        )
        time_ok = (start < end and start <= clock <= end) or (
            end < start and (clock >= start or clock <= end)
        )
        if day_ok and time_ok:
            return True
    return False


_ONE_QUBIT_TYPES = ("RANDOMIZED_BENCHMARKING", "SIMULTANEOUS_RANDOMIZED_BENCHMARKING")


def _fidelity(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _type_name(entry: Mapping[str, Any]) -> str:
    kind = entry.get("fidelityType")
    return str(kind.get("name") or "") if isinstance(kind, dict) else ""


def _first_fidelity(entries: object) -> float | None:
    """The first readable figure of a list of standardized ``Fidelity`` entries."""
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and (value := _fidelity(entry.get("fidelity"))) is not None:
            return value
    return None


def _timestamp(text: object) -> float | None:
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def read_calibration(capabilities: object) -> Calibration | None:
    """The calibration in a parsed ``deviceCapabilities`` document, or None.

    Braket publishes it as ``standardized`` device properties: version 1 and 2 (IQM,
    Rigetti) per qubit (``oneQubitProperties``: randomized-benchmarking and READOUT
    fidelities) and per pair (``twoQubitProperties``: a fidelity per gate; the best
    gate counts); version 3 (IonQ) device-wide (``singleQubitFidelity``,
    ``twoQubitGateFidelity``, ``readoutFidelity``). IonQ's ``provider.fidelity``
    (``1Q``, ``2Q``, ``spam`` means) fills in what the standardized part lacks. Values
    outside [0, 1] are skipped.
    """
    if not isinstance(capabilities, dict):
        return None
    standardized = capabilities.get("standardized")
    standardized = standardized if isinstance(standardized, dict) else {}
    one: dict[str, float] = {}
    readout: dict[str, float] = {}
    two: dict[str, float] = {}
    qubits = standardized.get("oneQubitProperties")
    for qubit, properties in (qubits if isinstance(qubits, dict) else {}).items():
        entries = properties.get("oneQubitFidelity") if isinstance(properties, dict) else None
        by_type = {
            _type_name(entry): _fidelity(entry.get("fidelity"))
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, dict)
        }
        gate = next((by_type[k] for k in _ONE_QUBIT_TYPES if by_type.get(k) is not None), None)
        if gate is not None:
            one[str(qubit)] = gate
        if by_type.get("READOUT") is not None:
            readout[str(qubit)] = by_type["READOUT"]  # type: ignore[assignment]
    pairs = standardized.get("twoQubitProperties")
    for pair, properties in (pairs if isinstance(pairs, dict) else {}).items():
        entries = properties.get("twoQubitGateFidelity") if isinstance(properties, dict) else None
        figures = [
            value
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and (value := _fidelity(entry.get("fidelity"))) is not None
        ]
        if figures:
            two[str(pair)] = max(figures)
    provider = capabilities.get("provider")
    means = provider.get("fidelity") if isinstance(provider, dict) else None
    means = means if isinstance(means, dict) else {}

    def device_wide(table: dict[str, float], standardized_key: str, provider_key: str) -> None:
        if table:
            return
        value = _first_fidelity(standardized.get(standardized_key))
        if value is None and isinstance(means.get(provider_key), dict):
            value = _fidelity(means[provider_key].get("mean"))
        if value is not None:
            table["*"] = value

    device_wide(one, "singleQubitFidelity", "1Q")
    device_wide(two, "twoQubitGateFidelity", "2Q")
    device_wide(readout, "readoutFidelity", "spam")
    if not (one or two or readout):
        return None
    header = standardized.get("braketSchemaHeader")
    version = header.get("version", "?") if isinstance(header, dict) else "?"
    return Calibration(
        one_qubit=tuple(one.items()),
        two_qubit=tuple(two.items()),
        readout=tuple(readout.items()),
        updated_at=_timestamp(standardized.get("updatedAt"))
        if "updatedAt" in standardized
        else None,
        source=f"braket standardized v{version}" if standardized else "braket provider",
    )


def execution_seconds(result: object) -> float | None:
    """A managed simulator's run time from its results.json
    (``additionalMetadata.simulatorMetadata.executionDuration``, milliseconds): what
    Braket bills, with its 3 s minimum applied by the catalog's price model. None for a
    QPU (billed per task and shot) or when missing."""
    metadata = result.get("additionalMetadata") if isinstance(result, dict) else None
    simulator = metadata.get("simulatorMetadata") if isinstance(metadata, dict) else None
    duration = simulator.get("executionDuration") if isinstance(simulator, dict) else None
    if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
        return None
    return duration / 1000.0


def client_token(token: str) -> str:
    """The caller's idempotency token as a Braket clientToken (1..64 characters).

    Longer tokens are replaced by their SHA-256 (64 hex digits): still deterministic, so
    a retry with the same caller token stays idempotent.
    """
    if not token:
        raise ValueError("an idempotency token is required")
    if len(token) <= TOKEN_MAX:
        return token
    return hashlib.sha256(token.encode()).hexdigest()


def arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[3] or None if len(parts) > 3 else None


def translate_error(exc: Exception, *, vendor: str, operation: str, subject: str) -> VendorError:
    """One project error for an exception raised by boto3/botocore during ``operation``."""
    if isinstance(exc, VendorError):
        return exc
    what = f"{vendor} {operation} for {subject}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or "").strip()
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        cls = _ERROR_CLASSES.get(code)
        if cls is None:
            cls = VendorUnavailable if status >= 500 else VendorError
        detail = f": {message}" if message else ""
        return cls(
            f"{what} failed with {code}{detail}",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    code = type(exc).__name__
    if isinstance(exc, ConnectTimeoutError | ReadTimeoutError):
        return VendorUnavailable(
            f"{what} timed out ({code})", vendor=vendor, vendor_code=code, operation=operation
        )
    if isinstance(exc, EndpointConnectionError | ConnectionClosedError):
        return VendorUnavailable(
            f"{what} could not connect ({code}: {exc})",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AccessDenied(
            f"{what} failed: no usable AWS credentials ({code}); set a profile or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the job's owner",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, ParamValidationError):
        return InvalidRequest(
            f"{what} was refused before sending: {exc}",
            vendor=vendor,
            vendor_code=code,
            operation=operation,
        )
    if isinstance(exc, BotoCoreError):
        return VendorUnavailable(
            f"{what} failed ({code}: {exc})", vendor=vendor, vendor_code=code, operation=operation
        )
    raise exc


# --- the vendor ----------------------------------------------------------------------


@dataclass(frozen=True)
class BraketSettings:
    """How to reach Braket. Unset fields fall back to the SDK's usual sources.

    ``s3_bucket`` falls back to ``AMZN_BRAKET_OUT_S3_BUCKET``. ``credentials`` is an
    explicit (access key, secret) pair, used for the emulator only; real sites use the
    job owner's profile or environment.
    """

    region: str | None = None
    endpoint_url: str | None = None
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "flux-quantum"
    profile: str | None = None
    credentials: tuple[str, str] | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 20.0

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str], **overrides: Any) -> BraketSettings:
        known = ("endpoint_url", "s3_endpoint_url", "s3_bucket", "s3_prefix", "profile")
        values: dict[str, Any] = {key: settings[key] for key in known if key in settings}
        values.update(overrides)
        return cls(**values)


class BraketVendor(Vendor):
    """Amazon Braket devices and tasks through the SDK's boto3 Braket client."""

    name = "braket"

    def __init__(
        self,
        settings: BraketSettings | None = None,
        *,
        devices: Iterable[Device] = (),
        retry: RetryBudget | None = None,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings or BraketSettings()
        self.retry = retry or RetryBudget()
        self._clock = clock
        self._sleep = sleep
        self._environ = os.environ if environ is None else environ
        self._devices_by_arn = {d.id: d for d in devices if d.vendor == self.name}
        self._lock = threading.Lock()
        self._boto_session: boto3.session.Session | None = None
        self._clients: dict[tuple[str, str], Any] = {}
        self._aws_sessions: dict[str, Any] = {}

    # -- plumbing

    def _region_of(self, device: Device | None = None, arn: str | None = None) -> str:
        if device is not None:
            return device.region
        from_arn = arn_region(arn) if arn else None
        return from_arn or self.settings.region or DEFAULT_REGION

    def _session(self, region: str | None = None) -> boto3.session.Session:
        settings = self.settings
        key_id, secret = settings.credentials or (None, None)
        return boto3.session.Session(
            region_name=region,
            profile_name=settings.profile,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )

    def _config(self) -> Config:
        return Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=self.settings.connect_timeout,
            read_timeout=self.settings.read_timeout,
            user_agent_extra=f"flux-quantum/{__version__}",
        )

    def _client(self, service: str, region: str) -> Any:
        """The boto3 client of ``service`` in ``region``, built once.

        One boto3 session serves every region, so service models load once; S3 is only
        built when a result is read (its model is large).
        """
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                if self._boto_session is None:
                    self._boto_session = self._session()
                endpoint = self.settings.endpoint_url
                config = self._config()
                if service == "s3":
                    endpoint = self.settings.s3_endpoint_url
                    if endpoint:  # the emulator and most S3 look-alikes are path-style
                        config = config.merge(Config(s3={"addressing_style": "path"}))
                client = self._boto_session.client(
                    service, region_name=region, endpoint_url=endpoint, config=config
                )
                self._clients[(service, region)] = client
            return client

    def _braket(self, region: str) -> Any:
        return self._client("braket", region)

    def _call(self, operation: str, subject: str, call: Callable[[], Any]) -> Any:
        """One vendor call under the retry budget, errors translated."""

        def attempt() -> Any:
            try:
                return call()
            except (ClientError, BotoCoreError) as exc:
                raise translate_error(
                    exc, vendor=self.name, operation=operation, subject=subject
                ) from None

        return self.retry.run(attempt, clock=self._clock, sleep=self._sleep)

    def _device_name(self, arn: str) -> str:
        device = self._devices_by_arn.get(arn)
        return device.name if device else arn

    # -- the interface

    def probe(self, device: Device) -> DeviceSnapshot:
        braket = self._braket(device.region)
        try:
            data = self._call(
                "GetDevice", device.name, lambda: braket.get_device(deviceArn=device.id)
            )
        except VendorError as exc:
            return self._unreachable(device, exc)
        t = self._clock()
        raw_status = str(data.get("deviceStatus") or "")
        reason = status_reason(data.get("deviceStatusReason"))
        statuses = {"ONLINE": DeviceStatus.ONLINE, "OFFLINE": DeviceStatus.OFFLINE}
        statuses["RETIRED"] = DeviceStatus.RETIRED
        status = statuses.get(raw_status, DeviceStatus.OFFLINE)
        if raw_status not in statuses:
            reason = raw_status or "no status"  # PAUSED, or something new
        depth, capped = device_queue_depth(data.get("deviceQueueInfo"))
        capabilities = data.get("deviceCapabilities")
        if isinstance(capabilities, str):
            try:
                capabilities = json.loads(capabilities)
            except ValueError:
                capabilities = {}
        service = capabilities.get("service", {}) if isinstance(capabilities, dict) else {}
        windows = service.get("executionWindows") if isinstance(service, dict) else None
        in_window = in_execution_window(windows, datetime.fromtimestamp(t, UTC))
        if reason == "OUTSIDE_AVAILABILITY_WINDOW":
            in_window = False
        calibration = read_calibration(capabilities)
        return DeviceSnapshot(
            device=device.name,
            status=status,
            reason=str(reason) if reason else None,
            queue_depth=depth,
            queue_capped=capped,
            price=device.price,
            in_window=in_window,
            t=t,
            calibration=calibration,
        )

    def _unreachable(self, device: Device, exc: VendorError) -> DeviceSnapshot:
        if isinstance(exc, DeviceRetired):
            status, reason = DeviceStatus.RETIRED, None
        elif isinstance(exc, DeviceOffline):
            status, reason = DeviceStatus.OFFLINE, exc.vendor_code
        else:
            status = DeviceStatus.UNREACHABLE
            attempts = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
            reason = f"{exc.vendor_code}{attempts}"
        return DeviceSnapshot(
            device=device.name, status=status, reason=reason, price=device.price, t=self._clock()
        )

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        bucket = self.settings.s3_bucket or self._environ.get("AMZN_BRAKET_OUT_S3_BUCKET")
        if not bucket:
            raise InvalidRequest(
                f"{self.name} CreateQuantumTask for {device.name}: no results bucket; set "
                f"vendors.{self.name}.s3_bucket in the catalog or AMZN_BRAKET_OUT_S3_BUCKET",
                vendor=self.name,
                vendor_code="NoResultsBucket",
                operation="CreateQuantumTask",
            )
        from braket.ir.openqasm import Program

        token = client_token(token)
        request = {
            "clientToken": token,
            "deviceArn": device.id,
            "shots": shots,
            "action": Program(source=program_text).json(),
            "outputS3Bucket": bucket,
            "outputS3KeyPrefix": self.settings.s3_prefix,
            "tags": {"flux-quantum": __version__},
        }
        if reservation:
            # What AwsQuantumTask.create(reservation_arn=...) sends: the task waits QUEUED
            # for the window and runs in it, outside the public queue.
            request["associations"] = [{"arn": reservation, "type": RESERVATION_ASSOCIATION}]
        session = self._aws_session(device.region)
        arn = self._call(
            "CreateQuantumTask", device.name, lambda: session.create_quantum_task(**request)
        )
        return TaskRef(vendor=self.name, device=device.name, task_id=arn, token=token)

    def _aws_session(self, region: str) -> Any:
        """The SDK's AwsSession for ``region``, wrapping our Braket client (so its
        endpoint, timeouts and single attempt carry over)."""
        braket = self._braket(region)
        with self._lock:
            session = self._aws_sessions.get(region)
            if session is None:
                from braket.aws import AwsSession

                # AwsSession insists that its boto3 session has the client's region.
                session = AwsSession(boto_session=self._session(region), braket_client=braket)
                self._aws_sessions[region] = session
            return session

    def _get_task(self, task_id: str, operation: str = "GetQuantumTask") -> dict[str, Any]:
        braket = self._braket(self._region_of(arn=task_id))
        return self._call(
            operation,
            task_id,
            lambda: braket.get_quantum_task(
                quantumTaskArn=task_id, additionalAttributeNames=["QueueInfo"]
            ),
        )

    def poll(self, task: TaskRef) -> TaskSnapshot:
        data = self._get_task(task.task_id)
        return self._task_snapshot(task, data)

    def _task_snapshot(self, task: TaskRef, data: Mapping[str, Any]) -> TaskSnapshot:
        raw = str(data.get("status") or "")
        try:
            state = TaskState(raw)
        except ValueError:
            raise VendorUnavailable(
                f"{self.name} GetQuantumTask for {task.task_id} returned an unknown status "
                f"{raw!r}; flux-quantum keeps polling",
                vendor=self.name,
                vendor_code="UnknownStatus",
                operation="GetQuantumTask",
            ) from None
        queue = data.get("queueInfo")
        queue = queue if isinstance(queue, dict) else {}
        position, capped = None, False
        if state in (TaskState.CREATED, TaskState.QUEUED):
            position, capped = parse_queue_count(queue.get("position"))
        message = data.get("failureReason") or None
        if message is None and state not in (
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.CANCELLED,
        ):
            # Once ended, the queue's message only says no position is shown: not why.
            message = queue.get("message") or None
        return TaskSnapshot(
            task=task,
            state=state,
            position=position,
            position_capped=capped,
            message=str(message) if message else None,
            t=self._clock(),
        )

    def cancel(self, task: TaskRef) -> None:
        braket = self._braket(self._region_of(arn=task.task_id))
        # A fixed token per task makes a retried cancel the same request.
        token = hashlib.sha256(f"cancel:{task.task_id}".encode()).hexdigest()
        self._call(
            "CancelQuantumTask",
            task.task_id,
            lambda: braket.cancel_quantum_task(quantumTaskArn=task.task_id, clientToken=token),
        )

    def billed_seconds(self, task: TaskRef) -> float | None:
        """A managed simulator's run time, from its results.json (execution_seconds)."""
        return execution_seconds(self.result(task).raw)

    def result(self, task: TaskRef) -> TaskResult:
        data = self._get_task(task.task_id)
        status = data.get("status")
        if status != TaskState.COMPLETED:
            detail = f": {data['failureReason']}" if data.get("failureReason") else ""
            raise InvalidRequest(
                f"{self.name} task {task.task_id} is {status}{detail}; only a COMPLETED task "
                "has a result",
                vendor=self.name,
                vendor_code="ResultNotReady",
                operation="GetQuantumTask",
            )
        bucket, directory = data.get("outputS3Bucket"), data.get("outputS3Directory")
        key = f"{directory}/{RESULTS_FILENAME}"
        s3 = self._client("s3", self._region_of(arn=task.task_id))

        def read() -> bytes:
            response = s3.get_object(Bucket=bucket, Key=key)
            with response["Body"] as body:
                return body.read()

        body = self._call("GetObject", f"s3://{bucket}/{key}", read).decode("utf-8")
        from braket.tasks import GateModelQuantumTaskResult

        try:
            parsed = GateModelQuantumTaskResult.from_string(body)
            counts = {str(k): int(v) for k, v in parsed.measurement_counts.items()}
        except Exception as exc:  # the SDK raises assorted pydantic/value errors
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} could not be read by the SDK: {exc}",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="GetObject",
            ) from None
        return TaskResult(task=task, counts=counts, raw=json.loads(body))

    def attach_and_poll(self, task: TaskRef) -> TaskSnapshot:
        """One GetQuantumTask: it fails for a task that is not there (``attach``) and
        carries the status and queue position (``poll``)."""
        return self._task_snapshot(task, self._get_task(task.task_id))

    def attach(self, task_id: str) -> TaskRef:
        data = self._get_task(task_id)
        arn = str(data.get("deviceArn") or "")
        return TaskRef(vendor=self.name, device=self._device_name(arn), task_id=task_id)
