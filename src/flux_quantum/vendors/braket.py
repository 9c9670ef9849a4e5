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
- Program sets (``submit_set``/``results``): the SDK's ``ProgramSet`` of OpenQASM
  programs, created like any task (same AwsSession path, same clientToken idempotency) and
  read with the SDK's ``ProgramSetQuantumTaskResult``, its files fetched through our own S3
  client (the SDK's reader builds a default one). Braket runs every executable of a set
  for the same shots, so programs asking for different shots run as several executables
  of ``gcd`` shots each (``program_set_layout``), the layout kept in a tag of the task so
  that ``results`` can add their counts back up after a restart.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
TOKEN_TAG = "flux-quantum-token"  # the clientToken, as a tag SearchQuantumTasks shows
LOOKUP_SKEW = 300.0  # seconds before ``since`` a lookup searches from (clock skew)
LOOKUP_PAGES = 50  # SearchQuantumTasks pages (100 tasks each) a lookup reads at most
PROGRAM_SET_ACTION = "braket.ir.openqasm.program_set"
# The tag of a program set task that says how many executables each program runs as
# ("1.1.3.1"); absent: one each. Braket tag values: at most 256 characters.
LAYOUT_TAG = "flux-quantum-set"
TAG_VALUE_MAX = 256

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


def program_set_layout(shots: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """``(shots per executable, executables per program)`` for one Braket program set of
    programs asking for ``shots`` each.

    Braket runs every executable of a set for the same shots (the task's shots divided by
    its executables). So with ``g`` the greatest common divisor of ``shots``, program ``i``
    runs as ``shots[i] // g`` executables of ``g`` shots whose counts add up to its own:
    equal shots make one executable each; 100 and 300 make 1 and 3 of 100. The task's
    shots, and its bill, stay the sum of ``shots``. ValueError for no shots or shots < 1.
    """
    if not shots or any(s < 1 for s in shots):
        raise ValueError(f"shots must be one or more integers >= 1, got {list(shots)!r}")
    per = math.gcd(*shots)
    return per, tuple(s // per for s in shots)


def encode_layout(executables: Sequence[int]) -> str:
    """The ``LAYOUT_TAG`` value of a program set: executables per program, dot-separated."""
    return ".".join(str(n) for n in executables)


def decode_layout(value: object) -> tuple[int, ...] | None:
    """Executables per program from a ``LAYOUT_TAG`` value; None when it is not one."""
    if not isinstance(value, str) or not re.fullmatch(
        r"[1-9][0-9]{0,5}(\.[1-9][0-9]{0,5})*", value
    ):
        return None
    return tuple(int(n) for n in value.split("."))


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


def _is_program_set(data: Mapping[str, Any]) -> bool:
    """Whether a GetQuantumTask answer is of a program set (its actionMetadata)."""
    metadata = data.get("actionMetadata")
    return isinstance(metadata, Mapping) and metadata.get("actionType") == PROGRAM_SET_ACTION


def _name_first_failure(exc: ClientError) -> None:
    """Add Braket's first ``programSetValidationFailures`` entry to a refused program
    set's message, as the SDK does (which program, which inputs, what is wrong)."""
    failures = exc.response.get("programSetValidationFailures")
    if not isinstance(failures, list) or not failures or not isinstance(failures[0], Mapping):
        return
    first = failures[0]
    where = f"program {first.get('programIndex')}"
    if first.get("inputsIndex") is not None:
        where += f" inputs {first.get('inputsIndex')}"
    errors = first.get("errors") if isinstance(first.get("errors"), list) else []
    error = exc.response.setdefault("Error", {})
    message = str(error.get("Message") or "").rstrip(".")
    detail = "; ".join(map(str, errors))
    if detail and detail not in message:  # Braket's message may already say it
        error["Message"] = f"{message} (first failure: {where}: {detail})"


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
        from braket.ir.openqasm import Program

        request = self._create_request(
            device, token, shots, Program(source=program_text).json(), reservation
        )
        session = self._aws_session(device.region)
        arn = self._call(
            "CreateQuantumTask", device.name, lambda: session.create_quantum_task(**request)
        )
        return TaskRef(
            vendor=self.name, device=device.name, task_id=arn, token=request["clientToken"]
        )

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """One Braket program set of ``programs`` (OpenQASM text, shots): the SDK's
        ``ProgramSet``, each program as ``program_set_layout`` says, created like
        ``submit``. Braket's ValidationException (too many executables or shots, a device
        without program sets, a program that does not compile) is ``InvalidRequest``,
        naming the first failing program when Braket says which."""
        shots = []
        for index, entry in enumerate(programs):
            text, count = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, None)
            if not isinstance(text, str) or not text.strip():
                raise self._invalid_set(device, f"programs[{index}] must be (OpenQASM text, shots)")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise self._invalid_set(
                    device, f"programs[{index}] shots must be an integer >= 1, got {count!r}"
                )
            shots.append(count)
        if not shots:
            raise self._invalid_set(device, "programs is empty: give at least one (text, shots)")
        per, layout = program_set_layout(shots)
        from braket.program_sets import ProgramSet

        entries = [text for (text, _), n in zip(programs, layout, strict=True) for _ in range(n)]
        program_set = ProgramSet(entries, shots_per_executable=per)
        action = program_set.to_ir().json()
        request = self._create_request(device, token, program_set.total_shots, action, reservation)
        if any(n > 1 for n in layout):
            tag = encode_layout(layout)
            if len(tag) > TAG_VALUE_MAX:
                raise self._invalid_set(
                    device,
                    f"{len(shots)} programs of unequal shots need a layout longer than a "
                    "Braket tag holds; give them equal shots or merge fewer",
                )
            request["tags"][LAYOUT_TAG] = tag
        session = self._aws_session(device.region)

        def create() -> str:
            try:
                return session.create_quantum_task(**request)
            except ClientError as exc:
                _name_first_failure(exc)
                raise

        arn = self._call("CreateQuantumTask", device.name, create)
        return TaskRef(
            vendor=self.name, device=device.name, task_id=arn, token=request["clientToken"]
        )

    def _invalid_set(self, device: Device, problem: str) -> InvalidRequest:
        return InvalidRequest(
            f"{self.name} program set for {device.name}: {problem}",
            vendor=self.name,
            vendor_code="InvalidProgramSet",
            operation="CreateQuantumTask",
        )

    def _create_request(
        self, device: Device, token: str, shots: int, action: str, reservation: str | None
    ) -> dict[str, Any]:
        """The CreateQuantumTask request of ``action`` on ``device``."""
        bucket = self.settings.s3_bucket or self._environ.get("AMZN_BRAKET_OUT_S3_BUCKET")
        if not bucket:
            raise InvalidRequest(
                f"{self.name} CreateQuantumTask for {device.name}: no results bucket; set "
                f"vendors.{self.name}.s3_bucket in the catalog or AMZN_BRAKET_OUT_S3_BUCKET",
                vendor=self.name,
                vendor_code="NoResultsBucket",
                operation="CreateQuantumTask",
            )
        request: dict[str, Any] = {
            "clientToken": client_token(token),
            "deviceArn": device.id,
            "shots": shots,
            "action": action,
            "outputS3Bucket": bucket,
            "outputS3KeyPrefix": self.settings.s3_prefix,
            # The token as a tag as well: a search finds the task by it without
            # creating one (``lookup_task``), which the clientToken alone cannot.
            "tags": {"flux-quantum": __version__, TOKEN_TAG: client_token(token)},
        }
        if reservation:
            # What AwsQuantumTask.create(reservation_arn=...) sends: the task waits QUEUED
            # for the window and runs in it, outside the public queue.
            request["associations"] = [{"arn": reservation, "type": RESERVATION_ASSOCIATION}]
        return request

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
        """A managed simulator's run time, from its results.json (execution_seconds);
        None for a program set (Braket runs them on QPUs, billed per task and shot)."""
        data = self._completed(task)
        if _is_program_set(data):
            return None
        return execution_seconds(self._gate_model_result(task, data).raw)

    def _completed(self, task: TaskRef) -> dict[str, Any]:
        """GetQuantumTask of a COMPLETED task; InvalidRequest for any other state."""
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
        return data

    def _read(self, task: TaskRef, bucket: object, key: str) -> str:
        """One S3 object of ``task``'s results, as text."""
        s3 = self._client("s3", self._region_of(arn=task.task_id))

        def read() -> bytes:
            response = s3.get_object(Bucket=bucket, Key=key)
            with response["Body"] as body:
                return body.read()

        return self._call("GetObject", f"s3://{bucket}/{key}", read).decode("utf-8")

    def result(self, task: TaskRef) -> TaskResult:
        data = self._completed(task)
        if _is_program_set(data):
            raise InvalidRequest(
                f"{self.name} task {task.task_id} is a program set; read it per program "
                "with results()",
                vendor=self.name,
                vendor_code="ProgramSet",
                operation="GetQuantumTask",
            )
        return self._gate_model_result(task, data)

    def _gate_model_result(self, task: TaskRef, data: Mapping[str, Any]) -> TaskResult:
        bucket, directory = data.get("outputS3Bucket"), data.get("outputS3Directory")
        body = self._read(task, bucket, f"{directory}/{RESULTS_FILENAME}")
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

    def results(self, task: TaskRef) -> list[TaskResult]:
        """One result per program ``submit_set`` was given, in order: the counts of its
        executables added up (its shots, as if it had been its own task), read with the
        SDK's ``ProgramSetQuantumTaskResult``. ``raw`` is that program's own view: the
        task's metadata with the program's shots, and where it sat in the set. A task of
        one program gives ``[result(task)]``. InvalidRequest when not COMPLETED, or when a
        program's executable failed (naming it and Braket's reason)."""
        data = self._completed(task)
        if not _is_program_set(data):
            return [self._gate_model_result(task, data)]
        parsed = self._program_set_result(task, data)
        tags = data.get("tags") if isinstance(data.get("tags"), Mapping) else {}
        entries = list(parsed.entries)
        layout = decode_layout(tags.get(LAYOUT_TAG)) or (1,) * len(entries)
        if sum(layout) != len(entries) or any(len(e.entries) != 1 for e in entries):
            raise self._unreadable(
                task,
                f"its {len(entries)} programs do not match the layout {encode_layout(layout)} "
                "submit_set gave it (one executable each)",
            )
        metadata = parsed.task_metadata
        per = metadata.requestedShots // max(1, parsed.num_executables)
        out = []
        start = 0
        for index, n in enumerate(layout):
            group = [entry.entries[0] for entry in entries[start : start + n]]
            start += n
            counts: dict[str, int] = {}
            for executable in group:
                if not hasattr(executable, "counts"):  # a ProgramSetExecutableFailure
                    reason = executable.failureMetadata.failureReason
                    raise InvalidRequest(
                        f"{self.name} task {task.task_id}: program {index} failed: {reason}",
                        vendor=self.name,
                        vendor_code="ProgramFailed",
                        operation="GetObject",
                    )
                for bits, count in executable.counts.items():
                    counts[str(bits)] = counts.get(str(bits), 0) + int(count)
            raw = {
                "taskMetadata": {
                    "id": metadata.id,
                    "deviceId": metadata.deviceId,
                    "shots": sum(counts.values()),
                    "createdAt": metadata.createdAt,
                    "endedAt": metadata.endedAt,
                    "status": metadata.status,
                },
                "programSet": {
                    "program": index,
                    "programs": len(layout),
                    "executables": n,
                    "shotsPerExecutable": per,
                    "requestedShots": metadata.requestedShots,
                },
            }
            out.append(TaskResult(task=task, counts=counts, raw=raw))
        return out

    def _program_set_result(self, task: TaskRef, data: Mapping[str, Any]) -> Any:
        """The SDK's ``ProgramSetQuantumTaskResult`` of a program set task, its files
        (Braket's results.json names the others relative to ``s3Location``) read through
        our S3 client and handed to the SDK inline."""
        bucket, directory = data.get("outputS3Bucket"), data.get("outputS3Directory")
        try:
            document = json.loads(self._read(task, bucket, f"{directory}/{RESULTS_FILENAME}"))
            location = document.get("s3Location")
            if location:
                where, prefix = location

                def fetch(path: str) -> Any:
                    return json.loads(self._read(task, where, f"{prefix}/{path}"))

                if isinstance(document.get("taskMetadata"), str):
                    document["taskMetadata"] = fetch(document["taskMetadata"])
                programs = []
                for entry in document.get("programResults") or []:
                    if isinstance(entry, str):
                        folder = entry.removesuffix(f"/{RESULTS_FILENAME}")
                        entry = fetch(entry)
                        if isinstance(entry.get("source"), str):
                            entry["source"] = fetch(f"{folder}/{entry['source']}")
                        entry["executableResults"] = [
                            fetch(f"{folder}/{e}") if isinstance(e, str) else e
                            for e in entry.get("executableResults") or []
                        ]
                    programs.append(entry)
                document["programResults"] = programs
                document["s3Location"] = None
        except (ValueError, TypeError, AttributeError) as exc:
            raise self._unreadable(task, f"its files are not Braket's: {exc}") from None
        from braket.schema_common import BraketSchemaBase
        from braket.tasks import ProgramSetQuantumTaskResult

        try:
            schema = BraketSchemaBase.parse_raw_schema(json.dumps(document))
            return ProgramSetQuantumTaskResult.from_object(schema)
        except Exception as exc:  # the SDK raises assorted pydantic/value errors
            raise self._unreadable(task, f"the SDK cannot read it: {exc}") from None

    def _unreadable(self, task: TaskRef, problem: str) -> InvalidRequest:
        return InvalidRequest(
            f"{self.name} result of program set {task.task_id}: {problem}",
            vendor=self.name,
            vendor_code="UnreadableResult",
            operation="GetObject",
        )

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The task created on ``device`` with ``token``, found by its token tag among
        the tasks SearchQuantumTasks lists on the device since ``since`` (less
        ``LOOKUP_SKEW``), never by a create. ``Conflict`` when more tasks than
        ``LOOKUP_PAGES`` pages hold were created there since (it cannot tell)."""
        braket = self._braket(device.region)
        after = datetime.fromtimestamp(since - LOOKUP_SKEW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        wanted = client_token(token)
        request: dict[str, Any] = {
            "filters": [
                {"name": "deviceArn", "operator": "EQUAL", "values": [device.id]},
                {"name": "createdAt", "operator": "GTE", "values": [after]},
            ],
            "maxResults": 100,
        }
        for _ in range(LOOKUP_PAGES):
            page = self._call(
                "SearchQuantumTasks",
                device.name,
                lambda request=dict(request): braket.search_quantum_tasks(**request),
            )
            for summary in page.get("quantumTasks") or []:
                tags = summary.get("tags") if isinstance(summary, Mapping) else None
                if isinstance(tags, Mapping) and tags.get(TOKEN_TAG) == wanted:
                    arn = str(summary.get("quantumTaskArn") or "")
                    if arn:
                        return TaskRef(
                            vendor=self.name, device=device.name, task_id=arn, token=wanted
                        )
            next_token = page.get("nextToken")
            if not next_token:
                return None
            request["nextToken"] = next_token
        raise Conflict(
            f"{self.name} lookup of token {wanted} on {device.name}: more than "
            f"{LOOKUP_PAGES * 100} tasks were created there since "
            f"{after}; look for the tag {TOKEN_TAG}={wanted} in the console",
            vendor=self.name,
            vendor_code="TooManyTasks",
            operation="SearchQuantumTasks",
        )

    def attach_and_poll(self, task: TaskRef) -> TaskSnapshot:
        """One GetQuantumTask: it fails for a task that is not there (``attach``) and
        carries the status and queue position (``poll``)."""
        return self._task_snapshot(task, self._get_task(task.task_id))

    def attach(self, task_id: str) -> TaskRef:
        data = self._get_task(task_id)
        arn = str(data.get("deviceArn") or "")
        return TaskRef(vendor=self.name, device=self._device_name(arn), task_id=task_id)
