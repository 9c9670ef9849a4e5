"""``IbmQuantumSystemVendor``: an on-premises IBM Quantum System through QRMI.

This module owns what is the IBM Quantum System's own on top of ``QrmiVendor``: its
settings (QRMI's ``QRMI_IBM_QS_*``: the Quantum System API, IBM Cloud IAM and the
S3-compatible bucket the jobs' input and results pass through), the SamplerV2 payload
(``vendors.ibm.payload``: OpenQASM 3 only, marked with the idempotency token), the
reading of the result as counts, a failed job's reason and what a cancel leaves. It must
never change ``os.environ``, never retry outside its ``RetryBudget`` and never write an
API key or a secret key into a message.

- Settings, per backend first: ``<backend>_QRMI_IBM_QS_<KEY>`` in the job owner's
  environment, then ``QRMI_IBM_QS_<KEY>``, then the catalog's
  ``vendors.ibm-quantum-system`` entry for the non-secret ones (``endpoint``,
  ``iam_endpoint``, ``s3_endpoint``, ``s3_bucket``, ``s3_region``, ``job_timeout``). The
  IAM API key, the service CRN and the bucket's access keys come from the environment
  only (the catalog is world-readable).
- Program kinds: OpenQASM 3 only (IBM runs ISA circuits: the backend's basis gates and
  qubits); an IQM JSON circuit or a Pulser sequence is refused before anything is sent.
- Idempotency: QRMI names the job itself (a fresh uuid per create) and the API cannot be
  searched by the token the circuit carries, so a job is found again only by the id a
  create answered; a create whose answer never came is never repeated (``Conflict``,
  not retryable), as IQM's. QRMI's own retry resends a create with the same job id,
  which the API refuses as a duplicate (409): that too means the first one made the job.
- Queue: the API gives no pending count and no place; ``status()`` gives a capacity (the
  HPC lanes, less the backend's jobs in ``Running``), kept as the probe's slots. A
  waiting job already reads ``Running``.
- Cancel: QRMI's ``task_stop`` cancels a running job and then deletes it, so a later
  poll finds no job: a task this process stopped polls as CANCELLED.
- Billing: QRMI gives no job's QPU time; ``billed_seconds`` reads the job's
  ``usage.quantum_nanoseconds`` from the API itself (an IAM token, then the job).
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot, TaskState
from flux_quantum.vendors.errors import AccessDenied, Conflict, NotFound, VendorError
from flux_quantum.vendors.ibm.payload import sampler_input, split_result
from flux_quantum.vendors.ibm.target import read_target
from flux_quantum.vendors.ibm_quantum_system import VENDOR
from flux_quantum.vendors.qrmi import AnsweredCreates, QrmiVendor

SETTING_PREFIX = "QRMI_IBM_QS_"
# The catalog's settings and QRMI's names for them.
CATALOG_KEYS = {
    "endpoint": "ENDPOINT",
    "iam_endpoint": "IAM_ENDPOINT",
    "s3_endpoint": "S3_ENDPOINT",
    "s3_bucket": "S3_BUCKET",
    "s3_region": "S3_REGION",
}
SECRET_KEYS = ("IAM_APIKEY", "SERVICE_CRN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
DEFAULT_IAM_ENDPOINT = "https://iam.cloud.ibm.com"
DEFAULT_JOB_TIMEOUT = 86_400
_FAILED = re.compile(r"task failed\. code: (.*?), message: (.*?), solution: (.*)$")


@dataclass(frozen=True)
class IbmQuantumSystemSettings:
    """The catalog's non-secret settings (QRMI's names without the prefix) and the job
    timeout QRMI's create requires (seconds)."""

    values: Mapping[str, str] = field(default_factory=dict)
    job_timeout: int = DEFAULT_JOB_TIMEOUT

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str]) -> IbmQuantumSystemSettings:
        values = {
            qrmi: str(settings[key]) for key, qrmi in CATALOG_KEYS.items() if settings.get(key)
        }
        timeout = settings.get("job_timeout")
        return cls(values, int(timeout) if timeout else DEFAULT_JOB_TIMEOUT)


class IbmQuantumSystemVendor(QrmiVendor[IbmQuantumSystemSettings]):
    """An IBM Quantum System's backends and jobs through QRMI's ``IBMQuantumSystem``."""

    descriptor = VENDOR
    settings_type = IbmQuantumSystemSettings
    timeout_settings = ()  # QRMI's resource bounds its own calls
    resource_type = "IBMQuantumSystem"
    _answered: AnsweredCreates  # set in __init__: jobs are known only by their create

    def _read_target(self, device: Device, document: dict[str, Any]) -> DeviceTarget | None:
        return read_target(device.name, document)  # IBM's documents, as IBM's cloud

    def __init__(self, settings: IbmQuantumSystemSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._answered = AnsweredCreates(self._unknown)
        self._stopped: set[str] = set()  # jobs this process stopped (QRMI deleted them)

    # -- what QrmiVendor asks of a vendor

    def _config(self, device: Device) -> dict[str, str]:
        config: dict[str, str] = {}
        for key in (*CATALOG_KEYS.values(), *SECRET_KEYS):
            value = self.setting(device, SETTING_PREFIX + key) or self.settings.values.get(key)
            if value:
                config[SETTING_PREFIX + key] = value
        config.setdefault(SETTING_PREFIX + "IAM_ENDPOINT", DEFAULT_IAM_ENDPOINT)
        missing = [
            k for k in ("ENDPOINT", *SECRET_KEYS, "S3_ENDPOINT", "S3_BUCKET", "S3_REGION")
            if SETTING_PREFIX + k not in config
        ]  # fmt: skip
        if missing:
            names = ", ".join(f"{device.id}_{SETTING_PREFIX}{k}" for k in missing)
            raise AccessDenied(
                f"{self.name}: {device.name} is not configured: set {names} (or the same "
                "without the backend prefix) in the job owner's environment",
                vendor=self.name,
                vendor_code="NoCredentials",
            )
        timeout = self.setting(device, "QRMI_JOB_TIMEOUT_SECONDS")
        config["QRMI_JOB_TIMEOUT_SECONDS"] = timeout or str(self.settings.job_timeout)
        return config

    def _payload(self, device: Device, program_text: str, shots: int, token: str) -> Any:
        import qrmi

        reason = self.program_refusal(device, program_text)
        if reason is not None:
            raise ValueError(f"{device.name} {reason}")
        body = sampler_input(program_text, shots, token)
        self._answered.creating(token)
        return qrmi.Payload.QiskitPrimitive(input=body, program_id="sampler")

    def _results(self, task: TaskRef, value: str) -> list[TaskResult]:
        return [
            TaskResult(task=task, counts=counts, raw=raw) for counts, raw in split_result(value)
        ]

    def _reason(self, task: TaskRef) -> str | None:
        """A failed job's ``reason_message`` (code), as QRMI's ``task_result`` names it."""
        resource = self._resource_of(task)
        try:
            resource.task_result(task.task_id)
        except Exception as exc:  # QRMI says why through the error's text
            match = _FAILED.search(" ".join(str(exc).split()))
            if match:
                code, message, _solution = match.groups()
                return f"{message} ({code})" if code else message
        return None

    def _translate(self, exc: BaseException, operation: str, subject: str) -> VendorError:
        error = super()._translate(exc, operation, subject)
        token = self._answered.current()
        if operation != "create" or token is None:
            return error
        text = "".join(str(exc).split())
        if '"status_code":409' in text:
            # QRMI's retry sent the create again with its own job id after an answer was
            # lost, and the API refused the duplicate: the first one made the job.
            self._answered.unsure(token)
            return self._unknown(subject, token)
        refused = error.vendor_code.startswith("HTTP4") or type(exc).__name__ in (
            "InvalidInputError",
            "UnsupportedPayloadError",
            "ConfigError",
            "EnvVarNotSetError",
        )
        if not refused:
            self._answered.unsure(token)
        return error

    def _unknown(self, subject: str, token: str) -> Conflict:
        return Conflict(
            f"{self.name} create for {subject} with token {token} may have made a job "
            "whose answer was lost, and the Quantum System API cannot be searched by token; "
            f"not creating another: look for a circuit marked {token} in the backend's jobs",
            vendor=self.name,
            vendor_code="CreateOutcomeUnknown",
            operation="create",
            retryable=False,
        )

    # -- the interface

    def billed_seconds(self, task: TaskRef) -> float | None:
        """The QPU time of a finished job, the Quantum System API's ``usage.
        quantum_nanoseconds`` in seconds (QRMI has no call for it: an IAM token, then ``GET
        /v1/jobs/{id}``); None when the job does not give it or cannot be read."""
        device = self.device_of(task.device)
        try:
            config = self._config(device)
        except VendorError:
            return None
        iam = config[SETTING_PREFIX + "IAM_ENDPOINT"].rstrip("/") + "/identity/token"
        form = urllib.parse.urlencode(
            {
                "grant_type": "urn:ibm:params:oauth:grant-type:apikey",
                "apikey": config[SETTING_PREFIX + "IAM_APIKEY"],
            }
        ).encode()
        quoted = urllib.parse.quote(task.task_id, safe="")
        url = f"{config[SETTING_PREFIX + 'ENDPOINT'].rstrip('/')}/v1/jobs/{quoted}"

        def job() -> Any:
            token = self._http_json(
                urllib.request.Request(
                    iam,
                    data=form,
                    headers={
                        "Content-Type": "application/x-www-form-urlencoded",
                        "Accept": "application/json",
                    },
                )
            )
            bearer = token.get("access_token") if isinstance(token, dict) else None
            if not isinstance(bearer, str):
                return None
            headers = {
                "Authorization": f"Bearer {bearer}",
                "Service-CRN": config[SETTING_PREFIX + "SERVICE_CRN"],
                "Accept": "application/json",
            }
            return self._http_json(urllib.request.Request(url, headers=headers))

        try:
            doc = self._call("usage", task.task_id, job)
        except VendorError:
            return None
        usage = doc.get("usage") if isinstance(doc, dict) else None
        nanoseconds = usage.get("quantum_nanoseconds") if isinstance(usage, dict) else None
        if isinstance(nanoseconds, bool) or not isinstance(nanoseconds, int | float):
            return None
        return nanoseconds / 1e9 if nanoseconds >= 0 else None

    def cancel(self, task: TaskRef) -> None:
        super().cancel(task)
        with self._lock:
            self._stopped.add(task.task_id)

    def poll(self, task: TaskRef) -> TaskSnapshot:
        """QRMI's task status; a job this process stopped is gone (QRMI deletes it after
        the cancel) and polls as CANCELLED."""
        try:
            return super().poll(task)
        except NotFound:
            with self._lock:
                stopped = task.task_id in self._stopped
            if not stopped:
                raise
        return TaskSnapshot(
            task=task,
            state=TaskState.CANCELLED,
            message="cancelled and deleted by QRMI's task_stop",
            t=self._clock(),
        )
