"""The ``local`` vendor: the flux-quantum emulator behind the vendor interface.

The emulator speaks Braket's wire protocol, so this is the Braket vendor pointed at the
emulator's endpoints with throw-away credentials: every feature (probe, submit, queue
positions, cancel, results, faults) works with no AWS account, in the same process as
real Braket devices. It owns only how the emulator is found: an ``Emulator`` object
handed to it, the catalog's ``vendors.local.url`` or ``FLUX_QUANTUM_EMULATOR_URL``. It
must never reach anything but the emulator and never change ``os.environ``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    RetryBudget,
    Sleep,
    TaskRef,
)
from flux_quantum.vendors.braket import BraketSettings, BraketVendor
from flux_quantum.vendors.errors import VendorUnavailable

ENV_URL = "FLUX_QUANTUM_EMULATOR_URL"
# The emulator serves its path-style S3 under this prefix of its one port, the bucket
# it writes results to by default, and accepts any credentials.
S3_PREFIX = "/s3"
DEFAULT_BUCKET = "amazon-braket-flux-quantum-emulator"
CREDENTIALS = ("flux-quantum-emulator", "flux-quantum-emulator")
REGION = "us-east-1"


def emulator_settings(url: str, bucket: str | None = None, **overrides: Any) -> BraketSettings:
    """Braket settings that reach the emulator listening at ``url``."""
    url = url.rstrip("/")
    values: dict[str, Any] = {
        "region": REGION,
        "endpoint_url": url,
        "s3_endpoint_url": url + S3_PREFIX,
        "s3_bucket": bucket or DEFAULT_BUCKET,
        "credentials": CREDENTIALS,
    }
    values.update(overrides)
    return BraketSettings(**values)


class LocalVendor(BraketVendor):
    """Emulated Braket devices (catalog vendor ``local``)."""

    name = "local"

    def __init__(
        self,
        settings: BraketSettings | None = None,
        *,
        devices: Iterable[Device] = (),
        retry: RetryBudget | None = None,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
    ) -> None:
        # No environment: the emulator's bucket and endpoints come from the settings only.
        super().__init__(
            settings, devices=devices, retry=retry, clock=clock, sleep=sleep, environ={}
        )
        self.configured = settings is not None and settings.endpoint_url is not None

    @classmethod
    def from_emulator(cls, emulator: Any, **kwargs: Any) -> LocalVendor:
        """Talk to a running ``flux_quantum.emulator.Emulator`` (uses its ``env()``)."""
        env = emulator.env()
        settings = BraketSettings(
            region=env.get("AWS_DEFAULT_REGION", REGION),
            endpoint_url=env["AWS_ENDPOINT_URL_BRAKET"],
            s3_endpoint_url=env["AWS_ENDPOINT_URL_S3"],
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
        if timeout is not None:
            overrides.update(connect_timeout=timeout, read_timeout=timeout)
        if not url:
            return cls(BraketSettings(**overrides), **kwargs)
        return cls(emulator_settings(url, settings.get("s3_bucket"), **overrides), **kwargs)

    def _require_emulator(self) -> None:
        if not self.configured:
            raise VendorUnavailable(
                f"local vendor: no emulator to talk to; set {ENV_URL} or vendors.local.url "
                "in the catalog (start one with `flux quantum emulator`)",
                vendor=self.name,
                vendor_code="NoEmulator",
            )

    def probe(self, device: Device) -> DeviceSnapshot:
        if not self.configured:
            return DeviceSnapshot(
                device=device.name,
                status=DeviceStatus.UNREACHABLE,
                reason=f"no emulator ({ENV_URL} unset)",
                price=device.price,
                t=self._clock(),
            )
        return super().probe(device)

    def submit(self, device: Device, program_text: str, shots: int, token: str) -> TaskRef:
        self._require_emulator()
        return super().submit(device, program_text, shots, token)

    def _client(self, service: str, region: str) -> Any:
        self._require_emulator()
        return super()._client(service, region)
