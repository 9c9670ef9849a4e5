"""``OqtopusVendor``: devices and sampling jobs of OQTOPUS Cloud, through its own SDK.

This module owns the ``oqtopus`` vendor: OQTOPUS Cloud's User API reached through the
real ``oqtopus-client`` SDK (``OqtopusClient``; QRMI's ``OQTOPUS`` resource only wraps
that SDK through a native bridge the qrmi wheel lacks), each call under the
``RetryBudget`` with the SDK's own retries off, its errors translated (``errors``). It must never
change ``os.environ``, never retry outside its ``RetryBudget`` and never write the API
token into a message.

- Settings, per device first, as QRMI names them: ``<id>_QRMI_OQTOPUS_URL`` /
  ``<id>_QRMI_OQTOPUS_API_TOKEN`` in the job owner's environment, then
  ``QRMI_OQTOPUS_URL`` / ``QRMI_OQTOPUS_API_TOKEN``, then the SDK's own ``OQTOPUS_URL`` /
  ``OQTOPUS_API_TOKEN``; the URL may also come from the catalog's
  ``vendors.oqtopus.url`` (never the token: the catalog is world-readable). A catalog
  device's ``id`` is OQTOPUS's ``device_id``.
- Calls: ``get_device`` for a probe (``available`` is ONLINE, ``unavailable`` OFFLINE with
  ``available_at`` in the reason; ``n_pending_jobs`` the queue depth); ``submit_job`` of a
  sampling ``OqtopusJobSpec`` (the OpenQASM program, the shots, the token as the job's
  ``name``); ``get_job_status`` to poll (registered is CREATED, submitted and ready
  QUEUED, running, cancelling, succeeded COMPLETED, failed, cancelled), ``get_job`` for a
  failure's message, the run time (``execution_time``) and the counts; ``cancel_job``.
- Programs: OpenQASM only (OQTOPUS transpiles it for the device); a QIR program, an IQM
  JSON circuit or a Pulser sequence is refused before anything is sent (and while the
  job is held: the descriptor's program kinds).
- Counts: OQTOPUS keys them by the classical bits in Qiskit's order (the last bit
  first); they are written result 0 first, as the other vendors' are here.
- Idempotency: the job carries the token as its ``name`` and OQTOPUS searches jobs by
  name (``list_jobs(q=...)``), so a create retried after an error whose outcome is
  unknown, or looked for after a restart (``find_task``), finds the job the first create
  made before it makes one. A job registered but never submitted runs nothing and has no
  name: it is not found, and creating again is safe.
- Queue: OQTOPUS reports a device's pending jobs, never a job's place: ``poll`` gives
  ``position=None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    CatalogSettings,
    CatalogVendor,
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    InvalidRequest,
    NotFound,
    VendorError,
    VendorUnavailable,
)
from flux_quantum.vendors.oqtopus import VENDOR
from flux_quantum.vendors.oqtopus.errors import raised
from flux_quantum.vendors.qrmi import Creates, no_reservation, unreachable

SETTING_PREFIX = "QRMI_OQTOPUS_"
SDK_URL, SDK_TOKEN = "OQTOPUS_URL", "OQTOPUS_API_TOKEN"
MAX_SHOTS = 10_000_000  # the User API's bound on a job's shots
LIST_SIZE = 100  # jobs a search by token reads (a token names one job)
STATES = {
    "registered": TaskState.CREATED,
    "submitted": TaskState.QUEUED,
    "ready": TaskState.QUEUED,
    "running": TaskState.RUNNING,
    "cancelling": TaskState.CANCELLING,
    "succeeded": TaskState.COMPLETED,
    "failed": TaskState.FAILED,
    "cancelled": TaskState.CANCELLED,
}


@dataclass(frozen=True)
class OqtopusSettings(CatalogSettings):
    """Where OQTOPUS Cloud's User API is (``url``; else the environment says) and how long
    one of its calls may take (``timeout``, seconds)."""

    url: str | None = None
    timeout: float = 20.0


class OqtopusVendor(CatalogVendor[OqtopusSettings]):
    """OQTOPUS Cloud's devices and sampling jobs through ``oqtopus_client``."""

    descriptor = VENDOR
    settings_type = OqtopusSettings

    def __init__(self, settings: OqtopusSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._creates = Creates(self._clock)
        self.translated = raised()

    # -- settings and the client

    def _setting(self, device: Device, key: str, sdk_key: str) -> str | None:
        env = self._environ
        return (
            env.get(f"{device.id}_{SETTING_PREFIX}{key}")
            or env.get(SETTING_PREFIX + key)
            or env.get(sdk_key)
        )

    def _client(self, device: Device) -> Any:
        """The SDK's client for ``device`` (its URL and token), its own retries off."""
        from oqtopus_client import OqtopusClient, OqtopusConfig

        url = self._setting(device, "URL", SDK_URL) or self.settings.url
        if not url:
            raise InvalidRequest(
                f"{self.name}: no OQTOPUS URL for {device.name}: set vendors.oqtopus.url in "
                f"the catalog, or {device.id}_{SETTING_PREFIX}URL (or {SETTING_PREFIX}URL, "
                f"{SDK_URL}) in the job owner's environment",
                vendor=self.name,
                vendor_code="NoEndpoint",
            )
        token = self._setting(device, "API_TOKEN", SDK_TOKEN)
        if not token:
            raise AccessDenied(
                f"{self.name}: no OQTOPUS API token for {device.name}: set "
                f"{device.id}_{SETTING_PREFIX}API_TOKEN (or {SETTING_PREFIX}API_TOKEN, "
                f"{SDK_TOKEN}) in the job owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        config = OqtopusConfig(
            url=url, api_token=token, timeout=self.settings.timeout, retry_max_attempts=1
        )
        return OqtopusClient(config, user_agent="flux-quantum")

    def _on(self, device: Device, operation: str, subject: str, call: Callable[[Any], Any]) -> Any:
        """``call(client)`` on ``device``'s client, under the retry budget."""
        client = self._client(device)
        return self._call(operation, subject, lambda: call(client))

    # -- the interface

    def probe(self, device: Device) -> DeviceSnapshot:
        try:
            info = self._on(device, "status", device.name, lambda c: c.get_device(device.id))
        except VendorError as exc:
            return unreachable(device, exc, self._clock())
        pending = info.n_pending_jobs
        if info.status == "available":
            status, reason = DeviceStatus.ONLINE, None
        else:
            status = DeviceStatus.OFFLINE
            until = info.available_at
            reason = f"unavailable until {until.isoformat()}" if until else "unavailable"
        return DeviceSnapshot(
            device=device.name,
            status=status,
            reason=reason,
            queue_depth=pending if isinstance(pending, int) and pending >= 0 else None,
            price=device.price,
            t=self._clock(),
        )

    def reports_positions(self, device: Device) -> bool:
        return False  # a device's pending count, never a job's place

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
        reason = self.program_refusal(device, program_text)
        if reason is None and (isinstance(shots, bool) or not isinstance(shots, int)
                               or not 1 <= shots <= MAX_SHOTS):  # fmt: skip
            reason = f"shots must be an integer from 1 to {MAX_SHOTS}, got {shots!r}"
        if reason is not None:
            raise InvalidRequest(
                f"{self.name} create for {device.name}: {device.name} {reason}"
                if reason.startswith("takes")
                else f"{self.name} create for {device.name}: {reason}",
                vendor=self.name,
                vendor_code="InvalidProgram",
                operation="create",
            )
        from oqtopus_client import OqtopusJobSpec

        spec = OqtopusJobSpec.sampling(
            device_id=device.id,
            program=program_text,
            shots=shots,
            name=token,
            description="flux-quantum",
        )
        client = self._client(device)
        create = self._creates.once(
            token,
            lambda since: self._find_with(client, device, token),
            lambda: client.submit_job(spec).job_id,
        )
        task_id = self._call("create", device.name, create)
        return TaskRef(vendor=self.name, device=device.name, task_id=task_id, token=token)

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The job a create with ``token`` made on ``device``: OQTOPUS searches jobs by
        name, and the token is the job's name. Raises ``VendorUnavailable`` (retryable)
        until one call's timeout has passed since ``since``: a submit still in flight
        may land after a search that missed it."""
        wait = since + self.settings.timeout - self._clock()
        if wait > 0:
            raise VendorUnavailable(
                f"{self.name} find for {device.name}: a create made at {since:.0f} may still "
                f"be landing; look again in {wait:.0f}s",
                vendor=self.name,
                vendor_code="CreateMaySettle",
                operation="find",
            )
        self._creates.seen(token, since)
        client = self._client(device)
        return self._call("find", device.name, lambda: self._find_with(client, device, token))

    def _find_with(self, client: Any, device: Device, token: str) -> TaskRef | None:
        for job in client.list_jobs(q=token, size=LIST_SIZE):
            status = getattr(job.status, "value", job.status)
            if job.name == token and job.device_id == device.id and status != "registered":
                return TaskRef(self.name, device.name, str(job.job_id), token)
        return None

    def poll(self, task: TaskRef) -> TaskSnapshot:
        device = self.device_of(task.device)
        answer = self._on(device, "status", task.task_id, lambda c: c.get_job_status(task.task_id))
        raw = getattr(answer.status, "value", answer.status)
        state = STATES.get(str(raw))
        if state is None:
            raise VendorUnavailable(
                f"{self.name} status of {task.task_id} is {raw!r}, which flux-quantum does "
                "not know; it keeps polling",
                vendor=self.name,
                vendor_code="UnknownStatus",
                operation="status",
            )
        message = self._message(task) if state is TaskState.FAILED else None
        return TaskSnapshot(task=task, state=state, message=message, t=self._clock())

    def _job(self, task: TaskRef) -> Any:
        device = self.device_of(task.device)
        return self._on(device, "result", task.task_id, lambda c: c.get_job(task.task_id))

    def _message(self, task: TaskRef) -> str | None:
        """Why a failed job failed, in OQTOPUS's words (best effort: None if unread)."""
        try:
            return self._job(task).message or None
        except VendorError:
            return None

    def cancel(self, task: TaskRef) -> None:
        device = self.device_of(task.device)
        try:
            self._on(device, "cancel", task.task_id, lambda c: c.cancel_job(task.task_id))
        except InvalidRequest:
            if not self.poll(task).terminal:  # OQTOPUS refuses to cancel a finished job
                raise

    def result(self, task: TaskRef) -> TaskResult:
        job = self._job(task)
        status = str(getattr(job.status, "value", job.status))
        if status != "succeeded":
            raise InvalidRequest(
                f"{self.name} job {task.task_id} is {status}; only a succeeded job has counts",
                vendor=self.name,
                vendor_code="NotCompleted",
                operation="result",
            )
        try:
            counts = counts_of(job.get_counts())
        except ValueError as exc:
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} is not counts flux-quantum can read: {exc}",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="result",
            ) from None
        if not counts:
            raise InvalidRequest(
                f"{self.name} result of {task.task_id} holds no measurements",
                vendor=self.name,
                vendor_code="UnreadableResult",
                operation="result",
            )
        return TaskResult(task=task, counts=counts, raw={"counts": job.get_counts()})

    def billed_seconds(self, task: TaskRef) -> float | None:
        try:
            seconds = self._job(task).execution_time
        except VendorError:
            return None
        return float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else None

    def attach(self, task_id: str) -> TaskRef:
        """A job by its id: searched (by id) on each catalog device's API in turn."""
        last: VendorError | None = None
        for device in self._devices.values():
            try:
                jobs = self._on(device, "status", task_id, lambda c: c.list_jobs(q=task_id))
            except VendorError as exc:
                last = exc
                continue
            for job in jobs:
                if job.job_id == task_id and job.device_id == device.id:
                    return TaskRef(self.name, device.name, task_id, job.name)
        raise last or NotFound(
            f"{self.name} has no job {task_id} on a catalog device",
            vendor=self.name,
            vendor_code="NotFound",
        )


def counts_of(raw: Mapping[str, Any]) -> dict[str, int]:
    """OQTOPUS's counts (bits in Qiskit's order) written result 0 first (ValueError: a key
    is not bits or a count not a whole number)."""
    counts: dict[str, int] = {}
    for key, value in raw.items():
        bits = str(key).strip().removeprefix("0b").replace(" ", "")
        if not bits or set(bits) - {"0", "1"}:
            raise ValueError(f"the key {key!r} is not a bitstring")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"the count of {key!r} is not a whole number: {value!r}")
        counts[bits[::-1]] = counts.get(bits[::-1], 0) + value
    return counts
