"""``IbmVendor``: IBM Quantum backends and jobs behind the vendor interface, through QRMI.

This module owns what is IBM's on top of ``QrmiVendor`` (which runs the task verbs
through the real ``qrmi`` client: ``status``, ``task_start``, ``task_status``,
``task_stop``, ``task_result``, each call under the ``RetryBudget``): resources that ride
sessions (``acquire``/``release``), the sampler payload, the REST reads QRMI has no call
for (``RestReader``: the job list, a job's failure reason, usage and session), the
calibration, and IBM's errors (``errors``). It must never change ``os.environ``, never
retry outside its ``RetryBudget``, never write an API key or a session id into a
message, a log line or a ``to_dict()``, and never import qiskit.

- Idempotency: IBM's job create has no idempotency field and QRMI passes no tags, so the
  token rides in the circuit's comment (IBM keeps a job's params as sent).
  ``find_task(device, token, since)`` lists the backend's jobs created after ``since``
  (minus a clock-skew margin) and returns the one carrying the token, once
  ``settings.settle`` seconds have passed since that create. ``submit`` looks before it
  creates whenever this process already tried that token.
- Queue: IBM reports a backend's pending jobs, never a job's position: ``poll`` gives
  ``position=None``; the release rule for that lives in ``flux_quantum.timing.release_point``.
- Merged tasks: ``submit_set`` (``submit_set_in`` in a session) runs several programs as
  the pubs of one Sampler job, every pub marked with the one token (so ``find_task``
  finds the job as for one program), within IBM's limits (``payload``: over one it is
  refused before anything is sent); ``results`` gives one ``TaskResult`` per pub, in
  order, each as if that pub had been a job of its own. IBM bills the job's usage
  seconds as a whole, with no fee per job or per pub.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.vendors.base import (
    Calibration,
    SessionOpening,
    TaskRef,
    TaskResult,
    VendorSession,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    InvalidRequest,
    NotFound,
    VendorError,
    VendorUnavailable,
)
from flux_quantum.vendors.ibm import VENDOR
from flux_quantum.vendors.ibm.calibration import CALIBRATION_TTL, read_calibration
from flux_quantum.vendors.ibm.errors import PLAN_REFUSED
from flux_quantum.vendors.ibm.payload import (
    program_token,
    sampler_input,
    sampler_set_input,
    split_result,
)
from flux_quantum.vendors.ibm.settings import (
    SESSION_MODES,
    SETTING_PREFIX,
    IbmSettings,
    resource_config,
    session_environment,
)
from flux_quantum.vendors.ibm.target import read_target
from flux_quantum.vendors.ibm.transport import RestReader
from flux_quantum.vendors.qrmi import QrmiResource, QrmiVendor, no_reservation

LIST_PAGE = 200
LIST_PAGES_MAX = 20


class IbmVendor(QrmiVendor[IbmSettings]):
    """IBM Quantum backends and jobs through QRMI: a ``QrmiVendor`` whose resources ride
    sessions, whose task is found by listing the backend's jobs, and whose failures and
    calibration are read from IBM's REST API."""

    descriptor = VENDOR
    settings_type = IbmSettings
    resource_type = "IBMQuantumComputeService"
    result_form = "a sampler result"

    def __init__(self, settings: IbmSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._readers: dict[str, RestReader] = {}
        self._calibrations: dict[str, tuple[float, Calibration | None]] = {}

    # -- plumbing

    def backend_of(self, device_name: str) -> str:
        device = self._devices.get(device_name)
        return device.id if device is not None else device_name

    def _device_name(self, backend: str) -> str:
        return next((d.name for d in self._devices.values() if d.id == backend), backend)

    def _backend_config(self, backend: str, session_id: str | None = None) -> dict[str, str]:
        config = resource_config(backend, self.settings, self._environ)
        if session_id is not None:
            config[SETTING_PREFIX + "SESSION_ID"] = session_id
        return config

    def _backend_resource(self, backend: str, session_id: str | None = None) -> QrmiResource:
        """QRMI's resource for ``backend`` (one per session it rides), built once."""
        return self._open(
            (backend, session_id),
            backend,
            self.resource_type,
            lambda: self._backend_config(backend, session_id),
            backend,
        )

    def _reader(self, backend: str) -> RestReader:
        with self._lock:
            reader = self._readers.get(backend)
            if reader is None:
                reader = RestReader(self._backend_config(backend), self.settings.timeout, time.time)
                self._readers[backend] = reader
            return reader

    def _job(self, job_id: str, backend: str) -> dict[str, Any]:
        reader = self._reader(backend)
        quoted = urllib.parse.quote(job_id, safe="")
        return self._call(
            "job", job_id, lambda: reader.get(f"/jobs/{quoted}", {"exclude_params": "true"})
        )

    # -- what QrmiVendor asks of a vendor

    def _config(self, device: Device) -> dict[str, str]:
        return self._backend_config(device.id)

    def _resource(self, device: Device) -> QrmiResource:
        return self._backend_resource(device.id)

    def _resource_of(self, task: TaskRef) -> QrmiResource:
        # A task on a backend the catalog does not name is still IBM's: its name is the id.
        return self._backend_resource(self.backend_of(task.device))

    def _task_resource(self, device: Device, session: VendorSession | None = None) -> QrmiResource:
        return self._backend_resource(device.id, session.session_id if session else None)

    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        return _sampler(sampler_input(program_text, shots, token))

    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        """One result per pub of the job, in the pubs' order: each pub's counts (its own
        shots) and, as ``raw``, the result document with that pub only."""
        return [
            TaskResult(task=task, counts=counts, raw=raw) for counts, raw in split_result(value)
        ]

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

    def _calibration(self, device: Device) -> Calibration | None:
        """The backend's calibration (QRMI ``target``: its properties), read at most once
        per ``CALIBRATION_TTL`` seconds; None when IBM does not give it."""
        now = self._clock()
        with self._lock:
            cached = self._calibrations.get(device.id)
        if cached is not None and now - cached[0] < CALIBRATION_TTL:
            return cached[1]
        try:
            target = self._call("target", device.name, lambda: self._resource(device).target())
            calibration = read_calibration(json.loads(target.value).get("properties"))
        except (VendorError, ValueError, AttributeError):
            calibration = None
        with self._lock:
            self._calibrations[device.id] = (now, calibration)
        return calibration

    def _settle(self) -> float:
        return self.settings.settle

    def _read_target(self, device: Device, document: dict[str, Any]) -> DeviceTarget | None:
        return read_target(device.name, document)

    # -- the interface

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        return self._create(
            device, lambda: self._payload(device, program_text, shots, token), token, session
        )

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """One Sampler job running ``programs`` (OpenQASM 3 text, shots) as its pubs, in
        order; ``results`` splits it back. Over one of IBM's job limits it raises
        ``InvalidRequest`` (vendor code ``OverLimit``) and creates nothing."""
        no_reservation(self.name, reservation)
        return self._create(device, lambda: _sampler(sampler_set_input(programs, token)), token)

    def submit_set_in(
        self,
        session: VendorSession,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
    ) -> TaskRef:
        """``submit_set`` riding ``session``."""
        return self._create(
            device, lambda: _sampler(sampler_set_input(programs, token)), token, session
        )

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
        """The job's result: its first pub's (the only one of a job ``submit`` made), with
        the whole result document as ``raw``."""
        value = self._result_text(task)
        first = self._read_results(task, value)[0]
        return TaskResult(task=task, counts=first.counts, raw=json.loads(value))

    def attach(self, task_id: str) -> TaskRef:
        backend = next(iter(self._devices.values())).id if self._devices else "ibm"
        job = self._job(task_id, backend)
        return TaskRef(self.name, self._device_name(str(job.get("backend") or "")), task_id)

    # -- sessions

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
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

        config = self._backend_config(device.id)
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
        resource = self._backend_resource(self.backend_of(session.device))
        try:
            self._call("release", session.device, lambda: resource.release(session.session_id))
        except NotFound:
            return
        self._forget(session.session_id)

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


def _sampler(payload_input: str) -> Any:
    """QRMI's payload of a SamplerV2 input."""
    import qrmi

    return qrmi.Payload.QiskitPrimitive(input=payload_input, program_id="sampler")
