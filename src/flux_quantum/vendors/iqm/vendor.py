"""``IqmVendor``: IQM quantum computers (IQM Resonance or an on-premises IQM Server) through QRMI.

This module owns what is IQM's own on top of ``QrmiVendor``: the settings (QRMI's
``QRMI_IQM_ISA_ENDPOINT`` and ``QRMI_IQM_ISA_TOKEN``), the ``circuit`` job payload built
from a program (``program``: OpenQASM 3 translated to prx/cz/measure, or IQM's JSON
circuit), the reading of a job's ``measurements`` as counts, the failure reason and run
time of a job (a plain ``GET /api/v1/jobs/{id}``, which QRMI has no call for), and which
creates may have made a job (IQM's refusals themselves read in ``errors``). It must never change ``os.environ``, never retry outside its
``RetryBudget`` and never write the API token into a message.

- Settings, per device first: ``<device id>_QRMI_IQM_ISA_ENDPOINT`` / ``_TOKEN`` in the job
  owner's environment, then ``QRMI_IQM_ISA_ENDPOINT`` / ``_TOKEN``, then the catalog's
  ``vendors.iqm.endpoint`` (never a token: the catalog is world-readable).
- Idempotency: the job carries the token as its IQM ``tag`` (``?tag=`` on the create; IQM
  keeps it and shows it in the job). IQM's API as QRMI uses it has no way to list or
  search jobs by tag, so a job is found again only by the id a create answered. A create
  whose answer never came (a connection reset, a timeout, a 5xx: the job may exist) is
  therefore never repeated: ``submit`` and ``find_task`` raise ``Conflict`` (not
  retryable) naming the tag to look for in IQM's job list. A create IQM refused with a
  4xx made nothing and may be repeated. ``find_task`` after a restart finds a job only
  if this process created it; otherwise its outcome is unknown and it raises the same.
- Queue: IQM reports a quantum computer's pending jobs (``queue_length``) and a waiting
  job's ``queue_position`` (1: next). ``poll`` reads the job with a plain GET: QRMI's
  ``task_status`` is a long poll (the real server holds it up to 30 s) that drops the
  position.
- Refusals on a create: 409 (the quantum computer is under maintenance or offline) ->
  ``DeviceOffline``, 403 (too many jobs waiting or processing) -> ``QuotaExceeded``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.vendors.base import (
    CatalogSettings,
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    VendorError,
    VendorUnavailable,
)
from flux_quantum.vendors.iqm import VENDOR
from flux_quantum.vendors.iqm.program import counts_from_measurements, run_request
from flux_quantum.vendors.iqm.target import read_target
from flux_quantum.vendors.qrmi import AnsweredCreates, QrmiVendor

SETTING_PREFIX = "QRMI_IQM_ISA_"
DEFAULT_ENDPOINT = "https://resonance.meetiqm.com"


@dataclass(frozen=True)
class IqmSettings(CatalogSettings):
    """Where IQM is (``endpoint``: IQM Resonance unless the catalog or environment says
    otherwise) and how long the plain REST reads this module makes may take."""

    endpoint: str | None = None
    timeout: float = 20.0


_JOB_STATES = {
    "waiting": TaskState.QUEUED,
    "processing": TaskState.RUNNING,
    "completed": TaskState.COMPLETED,
    "failed": TaskState.FAILED,
    "cancelled": TaskState.CANCELLED,
}


class IqmVendor(QrmiVendor[IqmSettings]):
    """IQM quantum computers and jobs through QRMI's ``IQMServer`` resource."""

    descriptor = VENDOR
    settings_type = IqmSettings
    resource_type = "IQMServer"
    _answered: AnsweredCreates  # set in __init__: jobs are known only by their create

    def __init__(self, settings: IqmSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._answered = AnsweredCreates(self._unknown)

    # -- what QrmiVendor asks of a vendor

    def _config(self, device: Device) -> dict[str, str]:
        endpoint = (
            self.setting(device, SETTING_PREFIX + "ENDPOINT")
            or self.settings.endpoint
            or DEFAULT_ENDPOINT
        )
        token = self.setting(device, SETTING_PREFIX + "TOKEN")
        if not token:
            raise AccessDenied(
                f"{self.name}: no IQM API token for {device.name}: set "
                f"{device.id}_{SETTING_PREFIX}TOKEN (or {SETTING_PREFIX}TOKEN) in the job "
                "owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        return {SETTING_PREFIX + "ENDPOINT": endpoint, SETTING_PREFIX + "TOKEN": token}

    def _read_target(self, device: Device, document: dict[str, Any]) -> DeviceTarget | None:
        return read_target(device.name, document)

    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        import qrmi

        body = run_request(program_text, shots, device.qubits)
        self._answered.creating(token)
        return qrmi.Payload.IQMServer(
            iqmjson=body, job_type="circuit", use_timeslot=False, tag=token
        )

    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        document = json.loads(value)
        circuits = document.get("measurements")
        if isinstance(circuits, list) and circuits:
            return [
                TaskResult(task=task, counts=counts_from_measurements(c), raw=document)
                for c in circuits
            ]
        counted = document.get("measurement_counts")
        if isinstance(counted, list) and counted:
            return [
                TaskResult(
                    task=task, counts={str(k): int(v) for k, v in c["counts"].items()}, raw=document
                )
                for c in counted
            ]
        return []

    def _explain(self, snapshot: DeviceSnapshot) -> DeviceSnapshot:
        """QRMI's Paused is IQM's ``maintenance`` and its Offline any state but
        ``online``: QRMI's reason ("healthy updated at ...") says neither."""
        if snapshot.status is DeviceStatus.PAUSED:
            return replace(snapshot, reason="maintenance")
        if snapshot.status is DeviceStatus.OFFLINE:
            return replace(snapshot, reason="not operational")
        return snapshot

    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        """The descriptor's mapping; a create whose answer may have made a job (not a
        refusal) leaves its token unsure."""
        error = super()._translate(exc, operation, subject)
        if operation == "create" and (token := self._answered.current()) is not None:
            refused = error.vendor_code.startswith("HTTP4") or type(exc).__name__ in (
                "InvalidInputError",
                "AuthenticationFailedError",
                "ResourceNotFoundError",
                "ConfigError",
            )
            if not refused:
                self._answered.unsure(token)
        return error

    def _unknown(self, subject: str, token: str) -> Conflict:
        return Conflict(
            f"{self.name} create for {subject} with tag {token} may have made a job whose "
            "answer was lost, and IQM's API cannot be searched by tag; not creating another: "
            f"look for tag {token} in IQM's job list",
            vendor=self.name,
            vendor_code="CreateOutcomeUnknown",
            operation="create",
            retryable=False,
        )

    # -- the interface

    def reports_positions(self, device: Device) -> bool:
        return True  # a waiting job's queue_position

    def poll(self, task: TaskRef) -> TaskSnapshot:
        """The job's state and place from a plain ``GET /api/v1/jobs/{id}``: QRMI's
        ``task_status`` is a long poll (the real server holds it up to 30 s, which would
        hold a worker and overrule the service's poll schedule) and drops the job's
        ``queue_position``, which IQM gives for a waiting job. A failed job's errors are
        its message."""
        job = self._job(task)
        raw = str(job.get("status") or "")
        state = _JOB_STATES.get(raw)
        if state is None:
            raise VendorUnavailable(
                f"{self.name} status of {task.task_id} is {raw!r}, which flux-quantum does "
                "not know; it keeps polling",
                vendor=self.name,
                vendor_code="UnknownStatus",
                operation="status",
            )
        place = job.get("queue_position")
        position = (
            place
            if state is TaskState.QUEUED
            and isinstance(place, int)
            and not isinstance(place, bool)
            and place >= 1
            else None
        )
        message = None
        if state is TaskState.FAILED:
            errors = [e for e in job.get("errors") or [] if isinstance(e, dict)]
            message = (
                "; ".join(f"{e.get('message')} ({e.get('error_code')})" for e in errors) or None
            )
        return TaskSnapshot(
            task=task, state=state, position=position, message=message, t=self._clock()
        )

    def billed_seconds(self, task: TaskRef) -> float | None:
        """The job's ``runtime_ms`` (IQM's run time of a finished job) in seconds; None when
        the job does not give it."""
        runtime = self._job(task).get("runtime_ms")
        if isinstance(runtime, int | float) and not isinstance(runtime, bool) and runtime >= 0:
            return runtime / 1000.0
        return None

    def _job(self, task: TaskRef) -> dict[str, Any]:
        """``GET /api/v1/jobs/{id}`` (no long poll), with the device's settings."""
        config = self._config(self.device_of(task.device))
        endpoint = config[SETTING_PREFIX + "ENDPOINT"].rstrip("/")
        url = f"{endpoint}/api/v1/jobs/{urllib.parse.quote(task.task_id, safe='')}"
        headers = {
            "Authorization": f"Bearer {config[SETTING_PREFIX + 'TOKEN']}",
            "Accept": "application/json",
        }

        def get() -> dict[str, Any]:
            request = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.settings.timeout) as answer:
                    document = json.loads(answer.read() or b"null")
            except urllib.error.HTTPError as exc:
                reason = exc.read().decode("utf-8", "replace")[:300]
                raise RuntimeError(
                    f"error in response: status code {exc.code} {exc.reason}: {reason}"
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                raise VendorUnavailable(
                    f"{self.name}: could not reach {url} ({exc})",
                    vendor=self.name,
                    vendor_code=type(exc).__name__,
                    operation="job",
                ) from None
            if not isinstance(document, dict):
                raise RuntimeError("the job document is not a JSON object")
            return document

        return self._call("job", task.task_id, get)
