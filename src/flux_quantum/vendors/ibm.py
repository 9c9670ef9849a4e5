"""IBM Quantum behind the vendor interface, through QRMI (``qrmi``'s IBM compute service).

This module owns every call flux-quantum makes to IBM Quantum: the task verbs go through
the real ``qrmi`` client (``status``, ``task_start``, ``task_status``, ``task_stop``,
``task_result``, ``acquire``/``release``); the three things QRMI cannot do (list a
backend's jobs to find one again, read a job's failure reason, backend and session) are
plain ``GET``s on the same REST API with the same settings. It also owns the sampler
payload built from a request's OpenQASM 3 program, the decoding of a sampler result into
counts, and the one mapping of IBM's errors to ``flux_quantum.vendors.errors``. It never
changes ``os.environ``, never retries outside its ``RetryBudget``, never writes an API
key or a session id into a message, a log line or a ``to_dict()``, and never imports
qiskit.

Decisions worth knowing (README and the module's tests say more):

- Settings: QRMI's own names, per backend first (``<backend>_QRMI_IBM_QCS_ENDPOINT``,
  ``_IAM_ENDPOINT``, ``_IAM_APIKEY``, ``_SERVICE_CRN``, ``_SESSION_MODE``), then the same
  without the backend prefix, then the catalog's ``vendors.ibm`` (never the API key: the
  catalog is world-readable). Each backend gets ``QuantumResource.from_config``.
- Payload: one SamplerV2 pub holding the request's OpenQASM 3 text as written, plus a
  comment line ``// flux-quantum-token: TOKEN`` after the version line; ``shots`` at the
  top level; ``version: 2``. IBM runs ISA circuits only: the program must already use the
  backend's basis gates and qubits. No parameters, one circuit per task.
- Idempotency: IBM's job create has no idempotency field and QRMI passes no tags, so the
  token rides in the circuit's comment (IBM keeps a job's params as sent).
  ``find_task(device, token, since)`` lists the backend's jobs created after ``since``
  (minus a clock-skew margin) and returns the one carrying the token. ``submit`` looks
  before it creates whenever this process already tried that token.
- Queue: IBM reports a backend's pending jobs, never a job's position: ``poll`` gives
  ``position=None``; the release rule for that lives in ``flux_quantum.poller``.
- Counts: written bit 0 first (``c[0]`` leftmost), the order Braket's counts use, so a
  consumer reads the same keys from either vendor; IBM's own tools print them reversed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    Calibration,
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    RetryBudget,
    SessionOpening,
    Sleep,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    Vendor,
    VendorSession,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    DeviceOffline,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)

SETTING_PREFIX = "QRMI_IBM_QCS_"
DEFAULT_ENDPOINT = "https://quantum.cloud.ibm.com/api/v1"
DEFAULT_IAM_ENDPOINT = "https://iam.cloud.ibm.com"
SESSION_MODES = ("dedicated", "batch")
TOKEN_MARK = "// flux-quantum-token: "
_TOKEN_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MARK_RE = re.compile(r"^// flux-quantum-token: (\S+)\s*$", re.M)
_BODY_RE = re.compile(r"(\{.*\})", re.S)
_STATUS_RE = re.compile(r"response body: (\d{3})\b")
PLAN_REFUSED = 1352  # "not authorized to run a session when using the open plan"
LIST_PAGE = 200
LIST_PAGES_MAX = 20
CALIBRATION_TTL = 900.0  # IBM recalibrates about daily; a probe re-reads every 15 min
_STATES = {
    "Queued": TaskState.QUEUED,
    "Running": TaskState.RUNNING,
    "Completed": TaskState.COMPLETED,
    "Failed": TaskState.FAILED,
    "Cancelled": TaskState.CANCELLED,
}


# --- payload and result (pure) -----------------------------------------------------------


def mark_program(program_text: str, token: str) -> str:
    """``program_text`` with the token comment after its ``OPENQASM`` version line."""
    if not _TOKEN_RE.fullmatch(token):
        raise ValueError(
            f"an idempotency token of letters, digits and ._:- is required, got {token!r}"
        )
    lines = program_text.splitlines()
    at = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("OPENQASM")), None)
    if at is None or not lines[at - 1].strip().startswith("OPENQASM 3"):
        raise ValueError("the program must be OpenQASM 3 and start with its 'OPENQASM 3' line")
    kept = [line for line in lines if not _MARK_RE.match(line)]
    at = next(i + 1 for i, line in enumerate(kept) if line.strip().startswith("OPENQASM"))
    return "\n".join([*kept[:at], TOKEN_MARK + token, *kept[at:]]) + "\n"


def program_token(circuit: object) -> str | None:
    """The token a marked circuit carries, or None."""
    if not isinstance(circuit, str):
        return None
    match = _MARK_RE.search(circuit)
    return match.group(1) if match else None


def sampler_input(program_text: str, shots: int, token: str) -> str:
    """The SamplerV2 input (JSON text) of one task: the marked program as its one pub."""
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
        raise ValueError(f"shots must be an integer >= 1, got {shots!r}")
    document = {
        "pubs": [[mark_program(program_text, token)]],
        "shots": shots,
        "version": 2,
        "support_qiskit": False,
    }
    return json.dumps(document)


def _decode_bits(value: Mapping[str, Any]) -> list[str]:
    """A RuntimeEncoder BitArray as one bit string per shot, classical bit 0 first."""
    import numpy as np

    array = value["array"]
    if not isinstance(array, dict) or array.get("__type__") != "ndarray":
        raise ValueError("a BitArray without an encoded ndarray")
    raw = array["__value__"]
    if isinstance(raw, list):
        rows = np.array(raw, dtype=np.uint8)
    else:
        data = zlib.decompress(base64.standard_b64decode(raw))
        rows = np.load(io.BytesIO(data), allow_pickle=False)
    num_bits = int(value["num_bits"])
    rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim else rows.reshape(-1, 1)
    shots = []
    for row in rows:
        number = int.from_bytes(bytes(int(b) for b in row), "big")
        shots.append("".join("1" if number >> i & 1 else "0" for i in range(num_bits)))
    return shots


def counts_from_result(text: str) -> dict[str, int]:
    """Counts of a sampler job's result (RuntimeEncoder JSON) for its first pub.

    Several classical registers are joined per shot, in the result's field order.
    Raises ValueError for anything that is not a SamplerV2 result.
    """
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("__type__") != "PrimitiveResult":
        raise ValueError("not a PrimitiveResult")
    pubs = document["__value__"]["pub_results"]
    if not pubs:
        raise ValueError("a PrimitiveResult with no pub results")
    data = pubs[0]["__value__"]["data"]
    if data.get("__type__") != "DataBin":
        raise ValueError("a pub result without a DataBin")
    fields = data["__value__"]["fields"]
    names = data["__value__"].get("field_names") or list(fields)
    registers = []
    for name in names:
        entry = fields[name]
        if isinstance(entry, dict) and entry.get("__type__") == "BitArray":
            registers.append(_decode_bits(entry["__value__"]))
    if not registers:
        raise ValueError("a DataBin with no BitArray")
    counts: dict[str, int] = {}
    for bits in zip(*registers, strict=True):
        key = "".join(bits)
        counts[key] = counts.get(key, 0) + 1
    return counts


def read_calibration(properties: object) -> Calibration | None:
    """Gate and readout errors of IBM backend properties as a ``Calibration``: per qubit
    the ``sx`` error (else ``x``; ``rz`` is virtual), per coupled pair ("0-1") the best
    two-qubit gate in either direction, per qubit ``readout_error``."""
    if not isinstance(properties, dict):
        return None
    one: dict[str, float] = {}
    two: dict[str, float] = {}
    for gate in properties.get("gates") or []:
        if not isinstance(gate, dict) or not isinstance(gate.get("qubits"), list):
            continue
        error = next(
            (p.get("value") for p in gate.get("parameters") or []
             if isinstance(p, dict) and p.get("name") == "gate_error"),
            None,
        )  # fmt: skip
        if not isinstance(error, int | float) or not 0 <= error <= 1:
            continue
        qubits = [str(q) for q in gate["qubits"]]
        if len(qubits) == 1 and gate.get("gate") in ("sx", "x"):
            key = qubits[0]
            if gate.get("gate") == "sx" or key not in one:
                one[key] = error
        elif len(qubits) == 2:
            key = "-".join(sorted(qubits, key=int))
            two[key] = min(error, two.get(key, 1.0))
    readout: dict[str, float] = {}
    for index, items in enumerate(properties.get("qubits") or []):
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get("name") != "readout_error":
                continue
            value = item.get("value")
            if isinstance(value, int | float) and 0 <= value <= 1:
                readout[str(index)] = value
    if not (one or two or readout):
        return None
    updated = properties.get("last_update_date")
    try:
        when = datetime.fromisoformat(str(updated).replace("Z", "+00:00")).timestamp()
    except ValueError:
        when = None
    return Calibration.from_errors(one, two, readout, updated_at=when, source="ibm properties")


# --- errors (the one translation) --------------------------------------------------------


def _ibm_code(text: str) -> int | None:
    match = _BODY_RE.search(text)
    if not match:
        return None
    try:
        errors = json.loads(match.group(1)).get("errors") or []
        return int(errors[0]["code"])
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def classify(status: int | None, code: int | None) -> type[VendorError]:
    """Our error class for an IBM HTTP status and error code."""
    if code == 1202 or status == 429:
        return VendorThrottled
    if code == 1004:
        return DeviceOffline
    if code == 1012:
        return QuotaExceeded
    if code in (1201, PLAN_REFUSED) or status in (401, 403):
        return AccessDenied
    if code in (1007, 1291) or status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status is not None and status >= 500:
        return VendorUnavailable
    if status is not None and 400 <= status < 500:
        return InvalidRequest
    return VendorUnavailable


def translate_error(
    exc: BaseException, *, vendor: str, operation: str, subject: str
) -> VendorError:
    """One project error for an exception from qrmi or from our REST reads.

    qrmi 0.26 raises ``QrmiError`` subclasses whose text carries IBM's error body; the
    class says what kind (``AuthenticationFailedError``, ``InvalidInputError``,
    ``TaskNotFoundError``, ``TaskNotReadyError``), the body says which code.
    """
    if isinstance(exc, VendorError):
        return exc
    kind = type(exc).__name__
    text = str(exc)
    code = _ibm_code(text)
    status_match = _STATUS_RE.search(text)
    status = int(status_match.group(1)) if status_match else None
    if isinstance(exc, _HttpError):
        status = exc.status
    kinds: Mapping[str, type[VendorError]] = {
        "AuthenticationFailedError": AccessDenied,
        "TaskNotFoundError": NotFound,
        "ResourceNotFoundError": NotFound,
        "TaskNotReadyError": InvalidRequest,
        "ConfigError": AccessDenied,
        "EnvVarNotSetError": AccessDenied,
    }
    cls = kinds.get(kind)
    if kind == "InvalidInputError":
        cls = DeviceOffline if code == 1004 else InvalidRequest
    if cls is None:
        cls = classify(status, code)
    vendor_code = str(code) if code is not None else (f"HTTP{status}" if status else kind)
    detail = _BODY_RE.sub("", text).strip(" :") if code is not None else text
    message = _error_message(code, text) or detail
    return cls(
        f"{vendor} {operation} for {subject} failed with {vendor_code}: {message}",
        vendor=vendor,
        vendor_code=vendor_code,
        operation=operation,
    )


def _error_message(code: int | None, text: str) -> str | None:
    if code is None:
        return None
    match = _BODY_RE.search(text)
    try:
        return str(json.loads(match.group(1))["errors"][0]["message"]) if match else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


# --- settings ----------------------------------------------------------------------------


@dataclass(frozen=True)
class IbmSettings:
    """How to reach IBM Quantum. Every field may be overridden per backend by QRMI's own
    environment variables; ``apikey`` is for the emulator only (real keys come from the
    job owner's environment).

    ``session_mode`` is the default for ``open_session``; ``timeout`` bounds the REST
    reads this module makes itself; ``skew`` widens ``find_task``'s time window for
    clock differences; ``settle`` is how long after a create's recorded start
    ``find_task`` waits before it trusts a "not found" (a create still in flight at IBM
    when the service restarted would otherwise be missed).
    """

    endpoint: str | None = None
    iam_endpoint: str | None = None
    service_crn: str | None = None
    session_mode: str = "dedicated"
    apikey: str | None = field(default=None, repr=False)
    timeout: float = 20.0
    skew: float = 300.0
    settle: float = 60.0

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str], **overrides: Any) -> IbmSettings:
        values: dict[str, Any] = {}
        for key, name in (
            ("endpoint", "endpoint"),
            ("iam_endpoint", "iam_endpoint"),
            ("instance", "service_crn"),
            ("session_mode", "session_mode"),
        ):
            if settings.get(key):
                values[name] = settings[key]
        values.update(overrides)
        return cls(**values)


def emulator_settings(url: str, apikey: str, crn: str, **overrides: Any) -> IbmSettings:
    """Settings that reach the IBM side of the flux-quantum emulator listening at ``url``
    (it serves IBM's API under ``/ibm``); a create there lands at once, so no settle."""
    url = url.rstrip("/")
    values: dict[str, Any] = {
        "endpoint": url + "/ibm/api/v1",
        "iam_endpoint": url + "/ibm",
        "service_crn": crn,
        "apikey": apikey,
        "settle": 0.0,
    }
    values.update(overrides)
    return IbmSettings(**values)


def resource_config(
    backend: str, settings: IbmSettings, environ: Mapping[str, str]
) -> dict[str, str]:
    """QRMI's config for ``backend`` (keys without the backend prefix)."""

    def pick(key: str, default: str | None) -> str | None:
        return environ.get(f"{backend}_{SETTING_PREFIX}{key}") or environ.get(
            SETTING_PREFIX + key, default
        )

    config = {
        SETTING_PREFIX + "ENDPOINT": pick("ENDPOINT", settings.endpoint or DEFAULT_ENDPOINT),
        SETTING_PREFIX + "IAM_ENDPOINT": pick(
            "IAM_ENDPOINT", settings.iam_endpoint or DEFAULT_IAM_ENDPOINT
        ),
        SETTING_PREFIX + "IAM_APIKEY": pick("IAM_APIKEY", settings.apikey),
        SETTING_PREFIX + "SERVICE_CRN": pick("SERVICE_CRN", settings.service_crn),
        SETTING_PREFIX + "SESSION_MODE": pick("SESSION_MODE", settings.session_mode),
    }
    # A session handed to a job (QRMI's names): its tasks ride it.
    session = next(
        (environ[name] for name in (
            f"{backend}_{SETTING_PREFIX}SESSION_ID",
            f"{backend}_QRMI_JOB_ACQUISITION_TOKEN",
            SETTING_PREFIX + "SESSION_ID",
            "QRMI_JOB_ACQUISITION_TOKEN",
        ) if environ.get(name)),
        None,
    )  # fmt: skip
    config[SETTING_PREFIX + "SESSION_ID"] = session
    missing = [k for k in ("IAM_APIKEY", "SERVICE_CRN") if not config[SETTING_PREFIX + k]]
    if missing:
        names = " and ".join(
            f"{backend}_{SETTING_PREFIX}{k} (or {SETTING_PREFIX}{k})" for k in missing
        )
        raise AccessDenied(
            f"ibm: no IBM Quantum credentials for {backend}: set {names} in the job owner's "
            "environment (the service instance CRN may also be vendors.ibm.instance)",
            vendor="ibm",
            vendor_code="NoCredentials",
        )
    return {k: v for k, v in config.items() if v}


def session_environment(session: VendorSession, backend: str) -> dict[str, str]:
    """What a job's later tasks need to ride ``session`` (QRMI's names). Secret: put it
    only into the job's own environment, never into an eventlog, the KVS or a log."""
    return {
        "QRMI_JOB_ACQUISITION_TOKEN": session.session_id,
        f"{backend}_{SETTING_PREFIX}SESSION_ID": session.session_id,
    }


# --- the REST reads QRMI has no call for ---------------------------------------------------


class _HttpError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"response body: {status} {body}")
        self.status = status


class _RestReader:
    """GETs on IBM's REST API with an IAM token of its own (refreshed before expiry)."""

    def __init__(self, config: Mapping[str, str], timeout: float, wall: Clock) -> None:
        self._endpoint = config[SETTING_PREFIX + "ENDPOINT"].rstrip("/")
        self._iam = config[SETTING_PREFIX + "IAM_ENDPOINT"].rstrip("/")
        self._apikey = config[SETTING_PREFIX + "IAM_APIKEY"]
        self._crn = config.get(SETTING_PREFIX + "SERVICE_CRN", "")
        self._timeout = timeout
        self._wall = wall
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None

    def _bearer(self) -> str:
        with self._lock:
            if self._token is not None and self._token[1] - 60 > self._wall():
                return self._token[0]
        form = urllib.parse.urlencode(
            {"grant_type": "urn:ibm:params:oauth:grant-type:apikey", "apikey": self._apikey}
        ).encode()
        request = urllib.request.Request(
            self._iam + "/identity/token",
            data=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        answer = self._send(request)
        token = str(answer["access_token"])
        expires = float(
            answer.get("expiration") or self._wall() + float(answer.get("expires_in", 600))
        )
        with self._lock:
            self._token = (token, expires)
        return token

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        url = self._endpoint + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json"}
        if self._crn:
            headers["Service-CRN"] = self._crn
        return self._send(urllib.request.Request(url, headers=headers))

    def _send(self, request: urllib.request.Request) -> Any:
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")
            raise _HttpError(exc.code, body) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise VendorUnavailable(
                f"ibm: could not reach {request.full_url.split('?')[0]} ({exc})",
                vendor="ibm",
                vendor_code=type(exc).__name__,
            ) from None


# --- the vendor ----------------------------------------------------------------------------


class _Resource:
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


class IbmVendor(Vendor):
    """IBM Quantum backends and jobs through QRMI."""

    name = "ibm"

    def __init__(
        self,
        settings: IbmSettings | None = None,
        *,
        devices: Iterable[Device] = (),
        retry: RetryBudget | None = None,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
        environ: Mapping[str, str] | None = None,
        name: str = "ibm",
    ) -> None:
        self.name = name
        self.settings = settings or IbmSettings()
        self.retry = retry or RetryBudget()
        self._clock = clock
        self._sleep = sleep
        self._environ = dict(os.environ if environ is None else environ)
        self._devices = {d.name: d for d in devices if d.vendor == name}
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str | None], _Resource] = {}
        self._readers: dict[str, _RestReader] = {}
        self._tried: dict[str, float] = {}  # token -> when this process first created with it
        self._calibrations: dict[str, tuple[float, Calibration | None]] = {}

    # -- plumbing

    def backend_of(self, device_name: str) -> str:
        device = self._devices.get(device_name)
        return device.id if device is not None else device_name

    def _device_name(self, backend: str) -> str:
        return next((d.name for d in self._devices.values() if d.id == backend), backend)

    def _config(self, backend: str, session_id: str | None = None) -> dict[str, str]:
        config = resource_config(backend, self.settings, self._environ)
        if session_id is not None:
            config[SETTING_PREFIX + "SESSION_ID"] = session_id
        return config

    def _resource(self, backend: str, session_id: str | None = None) -> _Resource:
        """QRMI's resource for ``backend`` (one per session it rides), built once."""
        key = (backend, session_id)
        with self._lock:
            resource = self._resources.get(key)
        if resource is not None:
            return resource
        config = self._config(backend, session_id)
        import qrmi

        try:
            created = qrmi.QuantumResource.from_config(
                backend, qrmi.ResourceType.IBMQuantumComputeService, config
            )
        except Exception as exc:  # qrmi raises ConfigError for settings it refuses
            raise translate_error(
                exc, vendor=self.name, operation="configure", subject=backend
            ) from None
        with self._lock:
            return self._resources.setdefault(key, _Resource(created))

    def _reader(self, backend: str) -> _RestReader:
        with self._lock:
            reader = self._readers.get(backend)
            if reader is None:
                reader = _RestReader(self._config(backend), self.settings.timeout, time.time)
                self._readers[backend] = reader
            return reader

    def _call(self, operation: str, subject: str, call: Callable[[], Any]) -> Any:
        """One vendor call under the retry budget, errors translated."""

        def attempt() -> Any:
            try:
                return call()
            except VendorError:
                raise
            except Exception as exc:  # qrmi's errors are RuntimeErrors; ours are _HttpError
                raise translate_error(
                    exc, vendor=self.name, operation=operation, subject=subject
                ) from None

        return self.retry.run(attempt, clock=self._clock, sleep=self._sleep)

    # -- the interface

    def probe(self, device: Device) -> DeviceSnapshot:
        try:
            status = self._call("status", device.name, lambda: self._resource(device.id).status())
        except VendorError as exc:
            attempts = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
            return DeviceSnapshot(
                device=device.name,
                status=DeviceStatus.UNREACHABLE,
                reason=f"{exc.vendor_code}{attempts}",
                price=device.price,
                t=self._clock(),
            )
        # qrmi's ResourceStatusCode: Online, Paused (jobs queue, none runs), Offline.
        raw = str(getattr(status, "status", "") or "").split(".")[-1].upper()
        state = DeviceStatus.ONLINE if raw == "ONLINE" else DeviceStatus.OFFLINE
        pending = getattr(status, "pending_job_count", None)
        return DeviceSnapshot(
            device=device.name,
            status=state,
            reason=None if raw == "ONLINE" else raw or "UNKNOWN",
            queue_depth=pending if isinstance(pending, int) and pending >= 0 else None,
            price=device.price,
            t=self._clock(),
            calibration=self._calibration(device),
        )

    def _calibration(self, device: Device) -> Calibration | None:
        """The backend's calibration (QRMI ``target``: its properties), read at most once
        per ``CALIBRATION_TTL`` seconds; None when IBM does not give it."""
        now = self._clock()
        with self._lock:
            cached = self._calibrations.get(device.id)
        if cached is not None and now - cached[0] < CALIBRATION_TTL:
            return cached[1]
        try:
            target = self._call("target", device.name, lambda: self._resource(device.id).target())
            calibration = read_calibration(json.loads(target.value).get("properties"))
        except (VendorError, ValueError, AttributeError):
            calibration = None
        with self._lock:
            self._calibrations[device.id] = (now, calibration)
        return calibration

    def reports_positions(self, device: Device) -> bool:
        return False  # IBM gives a backend's pending count, never a job's place

    def submit(self, device: Device, program_text: str, shots: int, token: str) -> TaskRef:
        return self._create(device, program_text, shots, token, None)

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        return self._create(device, program_text, shots, token, session)

    def _create(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        session: VendorSession | None,
    ) -> TaskRef:
        try:
            payload_input = sampler_input(program_text, shots, token)
        except ValueError as exc:
            raise InvalidRequest(
                f"{self.name} create for {device.name}: {exc}",
                vendor=self.name,
                vendor_code="InvalidProgram",
                operation="create",
            ) from None
        import qrmi

        payload = qrmi.Payload.QiskitPrimitive(input=payload_input, program_id="sampler")
        resource = self._resource(device.id, session.session_id if session else None)
        with self._lock:
            since = self._tried.get(token)
            first = since is None
            if first:
                since = self._tried[token] = self._clock()
        assert since is not None

        def create() -> str:
            nonlocal first
            if not first:
                # This process created with this token before and the outcome is not
                # known (an error after the request may have left): look first.
                found = self._find(device, token, since)
                if found is not None:
                    return found.task_id
            first = False
            return str(resource.task_start(payload))

        job_id = self._call("create", device.name, create)
        return TaskRef(vendor=self.name, device=device.name, task_id=job_id, token=token)

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The job an earlier create with ``token`` made on ``device`` at or after ``since``
        (seconds since the epoch, recorded before that create), or None when IBM has none.

        Raises ``VendorUnavailable`` (retryable) before ``since + settings.settle``: a
        create in flight when the caller died may not be listed yet.
        """
        wait = since + self.settings.settle - self._clock()
        if wait > 0:
            raise VendorUnavailable(
                f"{self.name} find for {device.name}: a create made at {since:.0f} may still "
                f"be landing; look again in {wait:.0f}s",
                vendor=self.name,
                vendor_code="CreateMaySettle",
                operation="find",
            )
        with self._lock:
            self._tried.setdefault(token, since)
        return self._call("find", device.name, lambda: self._find(device, token, since))

    def _find(self, device: Device, token: str, since: float) -> TaskRef | None:
        after = datetime.fromtimestamp(since - self.settings.skew, UTC)
        query = {
            "backend": device.id,
            "created_after": after.isoformat().replace("+00:00", "Z"),
            "exclude_params": "false",
            "sort": "ASC",
            "limit": str(LIST_PAGE),
        }
        reader = self._reader(device.id)
        for page in range(LIST_PAGES_MAX):
            answer = reader.get("/jobs", {**query, "offset": str(page * LIST_PAGE)})
            jobs = answer.get("jobs") or []
            for job in jobs:
                pubs = (job.get("params") or {}).get("pubs") or []
                if any(isinstance(p, list) and p and program_token(p[0]) == token for p in pubs):
                    return TaskRef(self.name, device.name, str(job["id"]), token)
            if len(jobs) < LIST_PAGE:
                return None
        raise VendorUnavailable(
            f"{self.name} find for {device.name}: more than {LIST_PAGE * LIST_PAGES_MAX} jobs "
            "since the recorded create; not sure the task is absent, so not creating another",
            vendor=self.name,
            vendor_code="TooManyJobs",
            operation="find",
        )

    def poll(self, task: TaskRef) -> TaskSnapshot:
        resource = self._resource(self.backend_of(task.device))
        status = self._call("status", task.task_id, lambda: resource.task_status(task.task_id))
        state = _STATES.get(getattr(status, "name", str(status)).split(".")[-1])
        if state is None:
            raise VendorUnavailable(
                f"{self.name} status of {task.task_id} is {status!r}, which flux-quantum does "
                "not know; it keeps polling",
                vendor=self.name,
                vendor_code="UnknownStatus",
                operation="status",
            )
        message = None
        if state in (TaskState.FAILED, TaskState.CANCELLED):
            message = self._reason(task)
        return TaskSnapshot(task=task, state=state, message=message, t=self._clock())

    def _reason(self, task: TaskRef) -> str | None:
        """The job's failure or cancellation reason (best effort: None if unreadable)."""
        try:
            job = self._job(task.task_id, self.backend_of(task.device))
        except VendorError:
            return None
        state = job.get("state") or {}
        reason = state.get("reason")
        code = state.get("reason_code")
        if not reason:
            return None
        return f"{reason} ({code})" if code else str(reason)

    def _job(self, job_id: str, backend: str) -> dict[str, Any]:
        reader = self._reader(backend)
        quoted = urllib.parse.quote(job_id, safe="")
        return self._call(
            "job", job_id, lambda: reader.get(f"/jobs/{quoted}", {"exclude_params": "true"})
        )

    def cancel(self, task: TaskRef) -> None:
        resource = self._resource(self.backend_of(task.device))
        self._call("cancel", task.task_id, lambda: resource.task_stop(task.task_id))

    def billed_seconds(self, task: TaskRef) -> float | None:
        """What IBM bills a finished job: its ``usage`` (``quantum_seconds``, else
        ``seconds``) in ``GET /jobs/{id}``; None when the job does not say."""
        usage = self._job(task.task_id, self.backend_of(task.device)).get("usage")
        if not isinstance(usage, dict):
            return None
        for key in ("quantum_seconds", "seconds"):
            value = usage.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return float(value)
        return None

    def result(self, task: TaskRef) -> TaskResult:
        resource = self._resource(self.backend_of(task.device))
        value = self._call("result", task.task_id, lambda: resource.task_result(task.task_id)).value
        try:
            counts = counts_from_result(value)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} is not a sampler result flux-quantum "
                f"can read: {exc}",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="result",
            ) from None
        return TaskResult(task=task, counts=counts, raw=json.loads(value))

    def attach(self, task_id: str) -> TaskRef:
        backend = next(iter(self._devices.values())).id if self._devices else "ibm"
        job = self._job(task_id, backend)
        return TaskRef(self.name, self._device_name(str(job.get("backend") or "")), task_id)

    # -- sessions

    def open_session(self, device: Device, mode: str | None = None) -> SessionOpening:
        """Open a session (QRMI ``acquire``) on ``device``: ``dedicated`` or ``batch``
        (default: the settings'). An Open-plan refusal of a dedicated session (1352) falls
        back to batch, and a refusal of that to job mode; ``reason`` says so in one line."""
        requested = mode or self.settings.session_mode
        if requested not in SESSION_MODES:
            raise InvalidRequest(
                f"{self.name} session mode must be one of {', '.join(SESSION_MODES)}, "
                f"got {requested!r}",
                vendor=self.name,
                vendor_code="InvalidSessionMode",
                operation="acquire",
            )
        reasons = []
        for attempt in SESSION_MODES[SESSION_MODES.index(requested) :]:
            try:
                session_id = self._acquire(device, attempt)
            except AccessDenied as exc:
                if exc.vendor_code != str(PLAN_REFUSED):
                    raise
                reasons.append(
                    f"IBM refused a {attempt} session on {device.name} ({exc.vendor_code}: the Open plan runs no {attempt} sessions)"
                )
                continue
            session = VendorSession(self.name, device.name, attempt, session_id)
            reason = None if attempt == requested else f"{reasons[-1]}; using a {attempt} session"
            return SessionOpening(requested, attempt, session, reason)
        return SessionOpening(requested, "job", None, f"{reasons[-1]}; tasks run as single jobs")

    def _acquire(self, device: Device, mode: str) -> str:
        import qrmi

        config = self._config(device.id)
        config[SETTING_PREFIX + "SESSION_MODE"] = mode
        config.pop(SETTING_PREFIX + "SESSION_ID", None)

        def acquire() -> str:
            resource = qrmi.QuantumResource.from_config(
                device.id, qrmi.ResourceType.IBMQuantumComputeService, config
            )
            return str(resource.acquire())

        return self._call("acquire", device.name, acquire)

    def close_session(self, session: VendorSession) -> None:
        """Release ``session`` (QRMI ``release``: closed at once if jobs are still pending,
        else told to accept no more). Releasing one IBM no longer knows is not an error."""
        resource = self._resource(self.backend_of(session.device))
        try:
            self._call("release", session.device, lambda: resource.release(session.session_id))
        except NotFound:
            return
        with self._lock:
            for key in [k for k in self._resources if k[1] == session.session_id]:
                del self._resources[key]

    def session_of(self, task: TaskRef) -> VendorSession | None:
        """The session ``task`` rode, read back from IBM (after a restart nothing else
        knows it: flux-quantum never records a session id)."""
        backend = self.backend_of(task.device)
        session_id = self._job(task.task_id, backend).get("session_id")
        if not session_id:
            return None
        reader = self._reader(backend)
        quoted = urllib.parse.quote(str(session_id), safe="")
        doc = self._call("session", task.device, lambda: reader.get(f"/sessions/{quoted}"))
        mode = str(doc.get("mode") or "dedicated")
        closed = doc.get("state") == "closed" or doc.get("accepting_jobs") is False
        return VendorSession(self.name, task.device, mode, str(session_id), closed=closed)

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        return session_environment(session, self.backend_of(session.device))
