"""``IonqVendor``: IonQ's QPUs and cloud simulator, direct, through IonQ's own client.

This module owns what flux-quantum does with IonQ's Cloud Platform API v0.4 through
``ionq-core`` (``ionq_core.IonQClient`` and its generated ``api`` calls): its settings,
a device's probe, a job's create (alone or in a session), poll, cancel and result, and
IonQ sessions, whose cost limit is the job's remaining budget so that IonQ enforces it
too. It must never change ``os.environ``, never retry outside its ``RetryBudget`` (the
client's own retries are off), and never write the API key or a session id into a
message.

- Settings: the API key is ``IONQ_API_KEY`` in the job owner's environment (never the
  catalog: it is world-readable); the API's base URL is ``IONQ_API_URL`` there, else the
  catalog's ``vendors.ionq.endpoint``, else IonQ's (``https://api.ionq.co/v0.4``). A
  catalog device's ``id`` is IonQ's backend (``qpu.aria-1``, ``qpu.forte-1``,
  ``simulator``); the property ``ionq_noise`` runs the simulator with that noise model.
- Calls: ``get_backend`` (probe), ``create_job`` (``ionq.qasm3.v1``: the OpenQASM 3
  program as written, the token in the job's ``metadata``), ``get_job`` (poll, attach),
  ``cancel_job``, ``get_job_probabilities`` (result), ``get_jobs`` (a lost create's job,
  found by its token), ``create_session`` / ``get_session`` / ``end_session``.
- Status: IonQ gives no queue length, only ``average_queue_time``; with the device's
  ``drain_seconds_per_task`` property the probe turns it into a queue depth (that time
  over the drain), else it gives none. A job's place in the queue is never given.
- Idempotency: IonQ's create is not; a create this process sent before (retried after
  a lost answer) first looks for a job carrying its token on the backend, and so does the
  service's lookup after a restart (``find_task``).
- Results: IonQ's probabilities (a state's decimal integer, qubit 0 its least
  significant bit) times the shots, as counts with qubit 0 first.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    CatalogSettings,
    CatalogVendor,
    DeviceSnapshot,
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    VendorSession,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    InvalidRequest,
    NotFound,
    VendorError,
    VendorUnavailable,
)
from flux_quantum.vendors.ionq import VENDOR
from flux_quantum.vendors.ionq.errors import translate

if TYPE_CHECKING:
    from ionq_core.client import AuthenticatedClient

DEFAULT_ENDPOINT = "https://api.ionq.co/v0.4"
TOKEN_KEY = "flux_quantum_token"
SESSION_VARIABLE = "IONQ_SESSION_ID"
JOB_TYPE = "ionq.qasm3.v1"
LIST_PAGE = 100
STATES = {
    "submitted": TaskState.QUEUED,
    "ready": TaskState.QUEUED,
    "started": TaskState.RUNNING,
    "completed": TaskState.COMPLETED,
    "failed": TaskState.FAILED,
    "canceled": TaskState.CANCELLED,
}
BACKEND_STATUS = {
    "available": DeviceStatus.ONLINE,
    "unavailable": DeviceStatus.OFFLINE,
    "retired": DeviceStatus.RETIRED,
}


@dataclass(frozen=True)
class IonqSettings(CatalogSettings):
    """Where IonQ's API is (``endpoint``: IonQ's own unless the catalog or the
    environment says otherwise) and how long one call may take (``timeout``, seconds)."""

    endpoint: str | None = None
    timeout: float = 30.0


class IonqVendor(CatalogVendor[IonqSettings]):
    """IonQ's backends, jobs and sessions through ionq-core."""

    descriptor = VENDOR
    settings_type = IonqSettings

    def __init__(self, settings: IonqSettings | None = None, **common: Any) -> None:
        import ionq_core

        super().__init__(settings, **common)
        self._lock = threading.Lock()
        self._client: AuthenticatedClient | None = None
        self._secrets: set[str] = set()  # session ids: never in a message
        self._tried: dict[str, float] = {}  # token -> when its first create was sent
        self.translated = (ionq_core.IonQError,)

    # -- plumbing

    @property
    def endpoint(self) -> str:
        return (
            self._environ.get("IONQ_API_URL") or self.settings.endpoint or DEFAULT_ENDPOINT
        ).rstrip("/")

    def client(self) -> AuthenticatedClient:
        """IonQ's client with the job owner's key, made once (AccessDenied without one)."""
        with self._lock:
            if self._client is not None:
                return self._client
            key = self._environ.get("IONQ_API_KEY")
            if not key:
                raise AccessDenied(
                    f"{self.name}: no IonQ API key: set IONQ_API_KEY in the job owner's "
                    "environment",
                    vendor=self.name,
                    vendor_code="NoCredentials",
                )
            import httpx
            from ionq_core import IonQClient

            with warnings.catch_warnings():
                # A loopback emulator is plain HTTP; IonQ's own endpoint is HTTPS.
                warnings.filterwarnings("ignore", message="base_url .* does not use HTTPS")
                self._client = IonQClient(
                    api_key=key,
                    base_url=self.endpoint,
                    max_retries=0,
                    timeout=httpx.Timeout(self.settings.timeout),
                )
            return self._client

    def _device_named(self, backend: str) -> str:
        """The catalog device of IonQ's ``backend`` (its id), else the backend itself."""
        return next((d.name for d in self._devices.values() if d.id == backend), backend)

    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        return translate(
            exc, vendor=self.name, operation=operation, subject=subject, scrub=self._scrub
        )

    def _scrub(self, text: str) -> str:
        """``text`` with every session id this vendor holds replaced by its fingerprint."""
        for secret in list(self._secrets):
            if secret in text:
                fingerprint = VendorSession(self.name, "", "", secret).fingerprint
                text = text.replace(secret, f"<session {fingerprint}>")
        return text

    # -- devices

    def probe(self, device: Device) -> DeviceSnapshot:
        from ionq_core.api.backends import get_backend

        now = self._clock()
        try:
            doc = self._call(
                "get_backend",
                device.name,
                lambda: get_backend.sync(backend=cast(Any, device.id), client=self.client()),
            )
        except VendorError as exc:
            return DeviceSnapshot(
                device.name, DeviceStatus.UNREACHABLE, str(exc), price=device.price, t=now
            )
        if doc is None:
            return DeviceSnapshot(
                device.name,
                DeviceStatus.UNREACHABLE,
                "IonQ gave no backend",
                price=device.price,
                t=now,
            )
        status = BACKEND_STATUS.get(doc.status, DeviceStatus.OFFLINE)
        reason = None if status is DeviceStatus.ONLINE else doc.status
        if status is DeviceStatus.ONLINE and doc.degraded is True:
            reason = "degraded"
        return DeviceSnapshot(
            device.name,
            status,
            reason,
            queue_depth=_depth(doc.average_queue_time, device),
            price=device.price,
            t=now,
        )

    def reports_positions(self, device: Device) -> bool:
        return False

    # -- jobs

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        if reservation is not None:
            raise InvalidRequest(
                f"{self.name} has no reserved windows (reservation {reservation})",
                vendor=self.name,
                vendor_code="NotSupported",
                operation="create_job",
            )
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
        from ionq_core.api.default import create_job
        from ionq_core.models.circuit_job_creation_payload import CircuitJobCreationPayload

        reason = self.program_refusal(device, program_text)
        if reason is None and (isinstance(shots, bool) or not isinstance(shots, int) or shots < 1):
            reason = f"shots must be an integer >= 1, got {shots!r}"
        if reason is not None:
            raise InvalidRequest(
                f"{device.name} {reason}" if reason.startswith("takes") else reason,
                vendor=self.name,
                vendor_code="InvalidProgram",
                operation="create_job",
            )
        body: dict[str, Any] = {
            "type": JOB_TYPE,
            "backend": device.id,
            "shots": shots,
            "input": {"data": program_text},
            "name": f"flux-quantum {token}",
            "metadata": {TOKEN_KEY: token},
        }
        noise = device.properties.get("ionq_noise")
        if noise:
            body["noise"] = {"model": noise}
        if session is not None:
            self._secrets.add(session.session_id)
            body["session_id"] = session.session_id
        payload = CircuitJobCreationPayload.from_dict(body)

        def create() -> TaskRef:
            # IonQ's create is not idempotent: a token this process sent before (a retry
            # after a lost answer) is looked for among the backend's jobs first.
            with self._lock:
                again = token in self._tried
                since = self._tried.setdefault(token, self._clock())
            if again:
                found = self.find_task(device, token, since=since)
                if found is not None:
                    return found
            answer = create_job.sync(client=self.client(), body=payload)
            if answer is None:
                raise VendorUnavailable(
                    f"{self.name} create_job for {device.name}: IonQ gave no job",
                    vendor=self.name,
                    vendor_code="NoAnswer",
                    operation="create_job",
                )
            return TaskRef(self.name, device.name, answer.id, token)

        return self._call("create_job", device.name, create)

    def _job(self, task_id: str, subject: str) -> Any:
        from ionq_core.api.default import get_job

        job = self._call(
            "get_job", subject, lambda: get_job.sync(uuid=task_id, client=self.client())
        )
        if job is None:
            raise NotFound(
                f"{self.name} get_job for {subject}: IonQ has no job {task_id}",
                vendor=self.name,
                vendor_code="NotFound",
                operation="get_job",
            )
        return job

    def poll(self, task: TaskRef) -> TaskSnapshot:
        job = self._job(task.task_id, task.device)
        state = STATES.get(str(job.status), TaskState.QUEUED)
        message = None
        failure = getattr(job, "failure", None)
        if failure is not None:
            message = self._scrub(f"{failure.code}: {failure.message}")
        return TaskSnapshot(task, state, None, message=message, t=self._clock())

    def cancel(self, task: TaskRef) -> None:
        from ionq_core.api.default import cancel_job

        self._call(
            "cancel_job",
            task.device,
            lambda: cancel_job.sync(uuid=task.task_id, client=self.client()),
        )

    def attach(self, task_id: str) -> TaskRef:
        job = self._job(task_id, task_id)
        return TaskRef(self.name, self._device_named(str(job.backend)), task_id, _token(job))

    def result(self, task: TaskRef) -> TaskResult:
        from ionq_core.api.default import get_job_probabilities

        job = self._job(task.task_id, task.device)
        if job.status != "completed":
            raise InvalidRequest(
                f"{self.name} result for {task.device}: job {task.task_id} is {job.status}, "
                "not completed",
                vendor=self.name,
                vendor_code="NotCompleted",
                operation="get_job_probabilities",
            )
        answer = self._call(
            "get_job_probabilities",
            task.device,
            lambda: get_job_probabilities.sync(uuid=task.task_id, client=self.client()),
        )
        probabilities = dict(getattr(answer, "additional_properties", None) or {})
        stats = getattr(job, "stats", None)
        width = getattr(stats, "qubits", None)
        shots = getattr(job, "shots", None)
        counts = counts_from_probabilities(
            probabilities,
            shots if isinstance(shots, int) else 0,
            width if isinstance(width, int) else None,
        )
        return TaskResult(task, counts, raw={"probabilities": probabilities})

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The job a create with ``token`` made on ``device`` since ``since``: IonQ's job
        list on the backend, newest first, read back to ``since``, matched by the token
        in each job's metadata."""
        from ionq_core.types import UNSET

        after: Any = UNSET
        while True:
            page = self._jobs_page(device, after)
            jobs = list(getattr(page, "jobs", None) or [])
            for job in jobs:
                if _token(job) == token:
                    return TaskRef(self.name, device.name, str(job.id), token)
            older = [j for j in jobs if _epoch(str(j.submitted_at)) < since - 60.0]
            after = getattr(page, "next_", None) or UNSET
            if not jobs or older or after is UNSET:
                return None

    def _jobs_page(self, device: Device, after: Any) -> Any:
        """One page of IonQ's job list on ``device``, newest first, after ``after``."""
        from ionq_core.api.default import get_jobs

        return self._call(
            "get_jobs",
            device.name,
            lambda: get_jobs.sync(
                client=self.client(), target=device.id, limit=LIST_PAGE, next_=after
            ),
        )

    # -- sessions

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        """An IonQ session on ``device``; ``cost_limit`` (US dollars: the job's or its
        loop's remaining budget) becomes the session's ``cost_limit``, which IonQ
        enforces: a job that would exceed it is refused."""
        from ionq_core.api.default import create_session
        from ionq_core.models.create_session_request import CreateSessionRequest
        from ionq_core.models.session_cost_limit import SessionCostLimit
        from ionq_core.models.session_settings_request import SessionSettingsRequest

        requested = mode or "dedicated"
        settings: Any = None
        if cost_limit is not None and cost_limit > 0:
            settings = SessionSettingsRequest(
                cost_limit=SessionCostLimit(value=round(cost_limit, 2), unit="usd")
            )
        body = (
            CreateSessionRequest(backend=device.id, settings=settings)
            if settings is not None
            else CreateSessionRequest(backend=device.id)
        )
        answer = self._call(
            "create_session",
            device.name,
            lambda: create_session.sync(client=self.client(), body=body),
        )
        if answer is None:
            raise VendorUnavailable(
                f"{self.name} create_session for {device.name}: IonQ gave no session",
                vendor=self.name,
                vendor_code="NoAnswer",
                operation="create_session",
            )
        self._secrets.add(answer.id)
        session = VendorSession(self.name, device.name, requested, answer.id)
        return SessionOpening(requested, requested, session, None)

    def close_session(self, session: VendorSession) -> None:
        """End ``session``; one IonQ no longer knows is not an error."""
        from ionq_core.api.default import end_session

        self._secrets.add(session.session_id)
        try:
            self._call(
                "end_session",
                session.device,
                lambda: end_session.sync(session_id=session.session_id, client=self.client()),
            )
        except NotFound:
            return

    def session_of(self, task: TaskRef) -> VendorSession | None:
        from ionq_core.api.default import get_session

        job = self._job(task.task_id, task.device)
        session_id = getattr(job, "session_id", None)
        if not session_id:
            return None
        self._secrets.add(str(session_id))
        doc = self._call(
            "get_session",
            task.device,
            lambda: get_session.sync(session_id=str(session_id), client=self.client()),
        )
        closed = doc is None or doc.status == "ended" or not doc.active
        return VendorSession(self.name, task.device, "dedicated", str(session_id), closed=closed)

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        """``IONQ_SESSION_ID``: a job's own creates pass it as their ``session_id``."""
        return {SESSION_VARIABLE: session.session_id}


def counts_from_probabilities(
    probabilities: Mapping[str, float], shots: int, width: int | None = None
) -> dict[str, int]:
    """IonQ's probabilities as counts of ``shots`` (rounded), keyed by bitstrings of
    ``width`` bits (else as many as the largest state needs) with qubit 0 first."""
    states = {int(k): float(v) for k, v in probabilities.items()}
    bits = width or max((s.bit_length() for s in states), default=1) or 1
    counts: dict[str, int] = {}
    for state, p in sorted(states.items()):
        n = round(p * shots)
        if n:
            counts[format(state, f"0{bits}b")[::-1]] = n
    return counts


def _depth(average_queue_ms: Any, device: Device) -> int | None:
    """IonQ's average queue time (milliseconds) as a queue depth, with the device's
    ``drain_seconds_per_task``; None without it."""
    drain = device.properties.get("drain_seconds_per_task")
    try:
        seconds = float(average_queue_ms) / 1000.0
        per_task = float(drain) if drain is not None else 0.0
    except (TypeError, ValueError):
        return None
    return round(seconds / per_task) if per_task > 0 else None


def _token(job: Any) -> str | None:
    metadata = getattr(job, "metadata", None)
    values = getattr(metadata, "additional_properties", None) or {}
    token = values.get(TOKEN_KEY)
    return str(token) if token else None


def _epoch(iso: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")
