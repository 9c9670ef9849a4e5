"""The ``local`` vendor: the flux-quantum emulator behind the vendor interface.

The emulator speaks Braket's wire protocol, so this is the Braket vendor pointed at the
emulator's endpoints with throw-away credentials: every feature (probe, submit, queue
positions, cancel, results, faults) works with no AWS account, in the same process as
real Braket devices. A device whose id names an IBM backend (``ibm_...``) is the
emulator's IBM side instead, reached through the IBM vendor (QRMI) with the emulator's
key: IBM's semantics (no queue position, sessions) with no IBM account. It owns only how the emulator is found: an ``Emulator`` object
handed to it, the catalog's ``vendors.local.url`` or ``FLUX_QUANTUM_EMULATOR_URL``; the
emulator's events queue (``vendors.local.events_queue``, its SQS under ``/sqs``) is read
as Braket's. It must never reach anything but the emulator and never change
``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    VendorSession,
)
from flux_quantum.vendors.braket.hybrid_jobs import MODE as HYBRID
from flux_quantum.vendors.braket.settings import BotoService, BraketSettings, numeric_settings
from flux_quantum.vendors.braket.vendor import BraketVendor
from flux_quantum.vendors.errors import VendorUnavailable
from flux_quantum.vendors.ibm.settings import emulator_settings as ibm_emulator_settings
from flux_quantum.vendors.ibm.vendor import IbmVendor
from flux_quantum.vendors.local import VENDOR

ENV_URL = "FLUX_QUANTUM_EMULATOR_URL"
# The emulator serves its path-style S3 under this prefix of its one port, the bucket
# it writes results to by default, and accepts any credentials.
S3_PREFIX = "/s3"
SQS_PREFIX = "/sqs"
DEFAULT_BUCKET = "amazon-braket-flux-quantum-emulator"
CREDENTIALS = ("flux-quantum-emulator", "flux-quantum-emulator")
REGION = "us-east-1"
# The emulator's IBM side takes any API key and instance unless its scenario names one.
IBM_CREDENTIALS = (
    "flux-quantum-emulator",
    "crn:v1:bluemix:public:quantum-computing:us-east:"
    "a/0123456789abcdef0123456789abcdef:f1a2b3c4-flux-quantum-emulator::",
)


def is_ibm(identifier: str) -> bool:
    """Whether a local device id or task id is the emulator's IBM side (not an ARN)."""
    return not identifier.startswith("arn:")


def emulator_settings(url: str, bucket: str | None = None, **overrides: Any) -> BraketSettings:
    """Braket settings that reach the emulator listening at ``url``."""
    url = url.rstrip("/")
    values: dict[str, Any] = {
        "region": REGION,
        "endpoint_url": url,
        "s3_endpoint_url": url + S3_PREFIX,
        "sqs_endpoint_url": url + SQS_PREFIX,
        "s3_bucket": bucket or DEFAULT_BUCKET,
        "credentials": CREDENTIALS,
    }
    values.update(overrides)
    return BraketSettings(**values)


class LocalVendor(BraketVendor):
    """Emulated Braket devices (catalog vendor ``local``)."""

    descriptor = VENDOR

    def __init__(
        self, settings: BraketSettings | None = None, *, ibm: IbmVendor | None = None, **common: Any
    ) -> None:
        """``common``: ``CatalogVendor``'s (devices, retry, clock, sleep) but the
        environment: the emulator's bucket and endpoints come from the settings only."""
        super().__init__(settings, environ={}, **common)
        self.configured = settings is not None and settings.endpoint_url is not None
        self.ibm = ibm

    @classmethod
    def from_catalog(
        cls, section: Mapping[str, str], *, emulator: Any = None, **options: Any
    ) -> LocalVendor:
        """An ``emulator`` handed in, else the catalog's ``vendors.local`` section (or
        ``FLUX_QUANTUM_EMULATOR_URL``); ``options``: ``CatalogVendor.from_catalog``'s."""
        timeout = options.pop("timeout", None)
        if emulator is None:
            return cls.from_settings(section, timeout=timeout, **options)
        options.pop("environ", None)  # the emulator says where it is and what it takes
        overrides = {} if timeout is None else dict.fromkeys(cls.timeout_settings, timeout)
        return cls.from_emulator(emulator, settings_overrides=overrides, **options)

    @classmethod
    def from_emulator(cls, emulator: Any, **kwargs: Any) -> LocalVendor:
        """Talk to a running ``flux_quantum.emulator.Emulator`` (uses its ``env()``)."""
        env = emulator.env()
        kwargs["ibm"] = _ibm_twins(
            env["FLUX_QUANTUM_EMULATOR_URL"],
            (env["QRMI_IBM_QCS_IAM_APIKEY"], env["QRMI_IBM_QCS_SERVICE_CRN"]),
            kwargs,
            kwargs.get("settings_overrides", {}).get("read_timeout"),
        )
        settings = BraketSettings(
            region=env.get("AWS_DEFAULT_REGION", REGION),
            endpoint_url=env["AWS_ENDPOINT_URL_BRAKET"],
            s3_endpoint_url=env["AWS_ENDPOINT_URL_S3"],
            sqs_endpoint_url=env["AWS_ENDPOINT_URL_SQS"],
            s3_bucket=env.get("AMZN_BRAKET_OUT_S3_BUCKET", DEFAULT_BUCKET),
            credentials=(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]),
            **kwargs.pop("settings_overrides", {}),
        )
        return cls(settings, **kwargs)

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, str],
        *,
        environ: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> LocalVendor:
        """From the catalog's ``vendors.local`` settings, else ``FLUX_QUANTUM_EMULATOR_URL``."""
        env = os.environ if environ is None else environ
        url = settings.get("url") or env.get(ENV_URL)
        overrides: dict[str, Any] = {}
        if settings.get("s3_prefix"):
            overrides["s3_prefix"] = settings["s3_prefix"]
        for key in ("events_queue", "hybrid_role_arn", "hybrid_instance"):
            if settings.get(key):
                overrides[key] = settings[key]
        overrides.update(numeric_settings(settings))
        if timeout is not None:
            overrides.update(dict.fromkeys(cls.timeout_settings, timeout))
        if not url:
            return cls(BraketSettings(**overrides), **kwargs)
        ibm = _ibm_twins(url, IBM_CREDENTIALS, kwargs, timeout)
        return cls(
            emulator_settings(url, settings.get("s3_bucket"), **overrides), ibm=ibm, **kwargs
        )

    def _require_emulator(self) -> None:
        if not self.configured:
            raise VendorUnavailable(
                f"local vendor: no emulator to talk to; set {ENV_URL} or vendors.local.url "
                "in the catalog (start one with `flux quantum emulator`)",
                vendor=self.name,
                vendor_code="NoEmulator",
            )

    def _ibm_side(self, identifier: str) -> IbmVendor | None:
        """The IBM vendor for an ``ibm_...`` device or a non-ARN task id, else None."""
        if not is_ibm(identifier):
            return None
        if self.ibm is None:
            self._require_emulator()
            raise VendorUnavailable(
                f"local vendor: {identifier} is an IBM backend and this emulator URL serves none",
                vendor=self.name,
                vendor_code="NoEmulator",
            )
        return self.ibm

    def probe(self, device: Device) -> DeviceSnapshot:
        if self.configured and self.ibm is not None and is_ibm(device.id):
            return self.ibm.probe(device)
        if not self.configured:
            return DeviceSnapshot(
                device=device.name,
                status=DeviceStatus.UNREACHABLE,
                reason=f"no emulator ({ENV_URL} unset)",
                price=device.price,
                t=self._clock(),
            )
        return super().probe(device)

    def reports_positions(self, device: Device) -> bool:
        return not is_ibm(device.id)

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        self._require_emulator()
        ibm = self._ibm_side(device.id)
        if ibm is not None:
            return ibm.submit(device, program_text, shots, token, reservation=reservation)
        return super().submit(device, program_text, shots, token, reservation=reservation)

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        self._require_emulator()
        ibm = self._ibm_side(device.id)
        if ibm is not None:
            return ibm.submit_set(device, programs, token, reservation=reservation)
        return super().submit_set(device, programs, token, reservation=reservation)

    def poll(self, task: TaskRef) -> TaskSnapshot:
        ibm = self._ibm_side(task.task_id)
        return ibm.poll(task) if ibm is not None else super().poll(task)

    def cancel(self, task: TaskRef) -> None:
        ibm = self._ibm_side(task.task_id)
        return ibm.cancel(task) if ibm is not None else super().cancel(task)

    def result(self, task: TaskRef) -> TaskResult:
        ibm = self._ibm_side(task.task_id)
        return ibm.result(task) if ibm is not None else super().result(task)

    def results(self, task: TaskRef) -> list[TaskResult]:
        ibm = self._ibm_side(task.task_id)
        return ibm.results(task) if ibm is not None else super().results(task)

    def billed_seconds(self, task: TaskRef) -> float | None:
        ibm = self._ibm_side(task.task_id)
        return ibm.billed_seconds(task) if ibm is not None else super().billed_seconds(task)

    def attach(self, task_id: str) -> TaskRef:
        ibm = self._ibm_side(task_id)
        return ibm.attach(task_id) if ibm is not None else super().attach(task_id)

    def attach_and_poll(self, task: TaskRef) -> TaskSnapshot:
        ibm = self._ibm_side(task.task_id)
        return ibm.attach_and_poll(task) if ibm is not None else super().attach_and_poll(task)

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        ibm = self._ibm_side(device.id)
        return ibm.find_task(device, token, since=since) if ibm is not None else None

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        ibm = self._ibm_side(device.id)
        if ibm is not None:
            return ibm.lookup_task(device, token, since=since)
        return super().lookup_task(device, token, since=since)

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        ibm = self._ibm_side(device.id)
        if ibm is None:
            return super().open_session(device, mode, cost_limit=cost_limit)
        return ibm.open_session(device, mode, cost_limit=cost_limit)

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        ibm = self._ibm_side(device.id)
        if ibm is None:
            return super().submit_in(session, device, program_text, shots, token)
        return ibm.submit_in(session, device, program_text, shots, token)

    def close_session(self, session: VendorSession) -> None:
        if self.ibm is None or session.mode == HYBRID:
            return super().close_session(session)
        return self.ibm.close_session(session)

    def session_of(self, task: TaskRef) -> VendorSession | None:
        ibm = self._ibm_side(task.task_id)
        return ibm.session_of(task) if ibm is not None else super().session_of(task)

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        if self.ibm is None or session.mode == HYBRID:
            return super().session_environment(session)
        return self.ibm.session_environment(session)

    def _client(self, service: BotoService, region: str) -> Any:
        self._require_emulator()
        return super()._client(service, region)


def _ibm_twins(
    url: str, credentials: tuple[str, str], kwargs: dict[str, Any], timeout: float | None
) -> IbmVendor:
    """The IBM vendor that serves a local vendor's ``ibm_...`` devices (no environment:
    a user's own QRMI settings must not send an emulated device to the real IBM)."""
    overrides = {} if timeout is None else {"timeout": timeout}
    settings = ibm_emulator_settings(url, credentials[0], credentials[1], **overrides)
    common = {k: kwargs[k] for k in ("devices", "retry", "clock", "sleep") if k in kwargs}
    return IbmVendor(settings, environ={}, name="local", **common)
