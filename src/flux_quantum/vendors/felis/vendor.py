"""``FelisVendor``: Alice & Bob's QPUs and emulators (Felis Cloud) through QRMI.

This module owns what is Felis's own on top of ``QrmiVendor``: its settings (QRMI's
``QRMI_AB_FELIS_BASE_ENDPOINT`` and ``QRMI_AB_FELIS_API_KEY``), the ``AliceBobFelis``
payload of a QIR program (``program``: human-readable QIR only, sent as written,
with ``nbShots``), the reading of a job's ``HISTOGRAM`` output as counts, and what a lost
create means. It must never change ``os.environ``, never retry outside its
``RetryBudget`` and never write the API key into a message.

- Settings, per target first: ``<id>_QRMI_AB_FELIS_BASE_ENDPOINT`` / ``_API_KEY`` in the
  job owner's environment, then without the prefix, then the catalog's
  ``vendors.alice-bob-felis.endpoint`` (never the key: the catalog is world-readable). A
  catalog device's ``id`` is QRMI's resource id, ``ab_`` and the target's name in lower
  case with ``_`` for ``:`` (``QPU:1Q:BOSON_4A`` is ``ab_qpu_1q_boson_4a``).
- Programs: human-readable QIR only; an OpenQASM circuit, an IQM JSON circuit or a Pulser
  sequence is refused before anything is sent (and while the job is held:
  the descriptor's program kinds).
- Status: QRMI's ``status()`` asks Felis nothing and always says Online, with no queue
  length: the probe says what QRMI says.
- Idempotency: a Felis job carries nothing of the request's and QRMI cannot list jobs,
  so a job is found again only by the id its create answered; a create whose answer was
  lost (or whose input upload failed after the job was made) is never repeated
  (``Conflict``, not retryable).
- Billing: QRMI gives no job's run time; ``billed_seconds`` reads the job from Felis
  itself, from its ``EXECUTING`` event to its ``SUCCEEDED`` one.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import CatalogSettings, TaskRef, TaskResult
from flux_quantum.vendors.errors import AccessDenied, Conflict, VendorError
from flux_quantum.vendors.felis import VENDOR
from flux_quantum.vendors.felis.program import counts_from_histogram
from flux_quantum.vendors.qrmi import AnsweredCreates, QrmiVendor

SETTING_PREFIX = "QRMI_AB_FELIS_"
DEFAULT_ENDPOINT = "https://api.alice-bob.com"


@dataclass(frozen=True)
class FelisSettings(CatalogSettings):
    """Where Felis is (``endpoint``: Alice & Bob's cloud unless the catalog or the
    environment says otherwise)."""

    endpoint: str | None = None


class FelisVendor(QrmiVendor[FelisSettings]):
    """Alice & Bob's targets and jobs through QRMI's ``AliceBobFelis`` resource."""

    descriptor = VENDOR
    settings_type = FelisSettings
    timeout_settings = ()  # QRMI's resource bounds its own calls
    resource_type = "AliceBobFelis"
    result_form = "a histogram"
    _answered: AnsweredCreates  # set in __init__: jobs are known only by their create

    def __init__(self, settings: FelisSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._answered = AnsweredCreates(self._unknown)

    # -- what QrmiVendor asks of a vendor

    def _config(self, device: Device) -> dict[str, str]:
        endpoint = (
            self.setting(device, SETTING_PREFIX + "BASE_ENDPOINT")
            or self.settings.endpoint
            or DEFAULT_ENDPOINT
        )
        key = self.setting(device, SETTING_PREFIX + "API_KEY")
        if not key:
            raise AccessDenied(
                f"{self.name}: no Felis API key for {device.name}: set "
                f"{device.id}_{SETTING_PREFIX}API_KEY (or {SETTING_PREFIX}API_KEY) in the job "
                "owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        return {SETTING_PREFIX + "BASE_ENDPOINT": endpoint, SETTING_PREFIX + "API_KEY": key}

    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        import qrmi

        reason = self.program_refusal(device, program_text)
        if reason is not None:
            raise ValueError(f"{device.name} {reason}" if reason.startswith("takes") else reason)
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
            raise ValueError(f"shots must be an integer >= 1, got {shots!r}")
        self._answered.creating(token)
        return qrmi.Payload.AliceBobFelis(
            human_qir=program_text, input_params=json.dumps({"nbShots": shots})
        )

    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        counts = counts_from_histogram(value)
        return [TaskResult(task=task, counts=counts, raw={"histogram": value})] if counts else []

    def billed_seconds(self, task: TaskRef) -> float | None:
        """The run time of a finished job, from its ``EXECUTING`` event to its
        ``SUCCEEDED`` one (QRMI has no call for it: ``GET /v1/jobs/{id}``); None when the
        job does not give both or cannot be read."""
        device = self.device_of(task.device)
        try:
            config = self._config(device)
        except VendorError:
            return None
        quoted = urllib.parse.quote(task.task_id, safe="")
        url = f"{config[SETTING_PREFIX + 'BASE_ENDPOINT'].rstrip('/')}/v1/jobs/{quoted}"
        headers = {
            "Authorization": f"Basic {config[SETTING_PREFIX + 'API_KEY']}",
            "Accept": "application/json",
        }
        try:
            doc = self._call(
                "usage",
                task.task_id,
                lambda: self._http_json(urllib.request.Request(url, headers=headers)),
            )
        except VendorError:
            return None
        events = doc.get("events") if isinstance(doc, dict) else None
        at: dict[str, datetime] = {}
        for event in events if isinstance(events, list) else []:
            if isinstance(event, dict) and event.get("type") in ("EXECUTING", "SUCCEEDED"):
                try:
                    at[event["type"]] = datetime.fromisoformat(str(event.get("createdAt")))
                except ValueError:
                    return None
        if len(at) != 2:
            return None
        seconds = (at["SUCCEEDED"] - at["EXECUTING"]).total_seconds()
        return seconds if seconds >= 0 else None

    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        error = super()._translate(exc, operation, subject)
        token = self._answered.current()
        if operation == "create" and token is not None:
            made = "upload failed for created job" in str(exc)
            refused = not made and (
                error.vendor_code.startswith("HTTP4")
                or type(exc).__name__ in ("InvalidInputError", "UnsupportedPayloadError")
                or "status code 4" in str(exc)
            )
            if not refused:
                self._answered.unsure(token)
            if made:
                return self._unknown(subject, token)
        return error

    def _unknown(self, subject: str, token: str) -> Conflict:
        return Conflict(
            f"{self.name} create for {subject} (token {token}) may have made a job whose "
            "answer was lost, and QRMI cannot list Felis's jobs; not creating another: look "
            "for it among your jobs in Felis's console",
            vendor=self.name,
            vendor_code="CreateOutcomeUnknown",
            operation="create",
            retryable=False,
        )
