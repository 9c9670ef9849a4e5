"""Vendor modules behind one interface (``flux_quantum.vendors.base.Vendor``).

One module per vendor: ``braket`` (Amazon Braket through amazon-braket-sdk and boto3),
``local`` (the flux-quantum emulator, no credentials: Braket's wire protocol, and IBM's
for its ``ibm_...`` backends), and through QRMI (``qrmi``, the layer they share) ``ibm``
(IBM Quantum), ``iqm`` (IQM Resonance or an on-premises IQM Server) and ``pasqal``
(Pasqal Cloud or an on-premises Pasqal QPU); ``oqtopus`` (OQTOPUS Cloud through its
own SDK, oqtopus-client); and ``ionq`` (IonQ direct, through IonQ's own client
ionq-core). This package also builds the vendors a catalog needs
(``make_vendor``) and probes many devices at once with a deadline (``probe_devices``).
Nothing outside this package imports a vendor SDK; nothing here keeps global state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flux_quantum.catalog import Catalog, Device
from flux_quantum.vendors.base import (
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    RetryBudget,
    Sleep,
    Vendor,
)


def make_vendor(
    name: str,
    catalog: Catalog,
    *,
    timeout: float | None = None,
    retry: RetryBudget | None = None,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
    environ: Mapping[str, str] | None = None,
    emulator: Any = None,
) -> Vendor:
    """The vendor object for ``name`` configured from the catalog's ``vendors:`` section.

    ``timeout`` bounds each network call (connect and read); ``emulator`` (an
    ``Emulator``) overrides where the ``local`` vendor connects.
    """
    common: dict[str, Any] = {"devices": catalog.devices, "clock": clock, "sleep": sleep}
    if retry is not None:
        common["retry"] = retry
    if name == "braket":
        from flux_quantum.vendors.braket import BraketSettings, BraketVendor

        overrides = {} if timeout is None else {"connect_timeout": timeout, "read_timeout": timeout}
        settings = BraketSettings.from_catalog(catalog.settings("braket"), **overrides)
        return BraketVendor(settings, environ=environ, **common)
    if name == "local":
        from flux_quantum.vendors.local import LocalVendor

        if emulator is not None:
            overrides = (
                {} if timeout is None else {"connect_timeout": timeout, "read_timeout": timeout}
            )
            return LocalVendor.from_emulator(emulator, settings_overrides=overrides, **common)
        return LocalVendor.from_settings(
            catalog.settings("local"), environ=environ, timeout=timeout, **common
        )
    if name == "ibm":
        from flux_quantum.vendors.ibm import IbmSettings, IbmVendor

        overrides = {} if timeout is None else {"timeout": timeout}
        return IbmVendor(
            IbmSettings.from_catalog(catalog.settings("ibm"), **overrides),
            environ=environ,
            **common,
        )
    if name == "iqm":
        from flux_quantum.vendors.iqm import IqmSettings, IqmVendor

        overrides = {} if timeout is None else {"timeout": timeout}
        return IqmVendor(
            IqmSettings.from_catalog(catalog.settings("iqm"), **overrides),
            environ=environ,
            **common,
        )
    if name == "pasqal":
        from flux_quantum.vendors.pasqal import PasqalSettings, PasqalVendor

        overrides = {} if timeout is None else {"timeout": timeout}
        return PasqalVendor(
            PasqalSettings.from_catalog(catalog.settings("pasqal"), **overrides),
            environ=environ,
            **common,
        )
    if name == "ibm-quantum-system":
        from flux_quantum.vendors.ibm_quantum_system import (
            IbmQuantumSystemSettings,
            IbmQuantumSystemVendor,
        )

        return IbmQuantumSystemVendor(
            IbmQuantumSystemSettings.from_catalog(catalog.settings("ibm-quantum-system")),
            environ=environ,
            **common,
        )
    if name == "alice-bob-felis":
        from flux_quantum.vendors.felis import FelisSettings, FelisVendor

        return FelisVendor(
            FelisSettings.from_catalog(catalog.settings("alice-bob-felis")),
            environ=environ,
            **common,
        )
    if name == "oqtopus":
        from flux_quantum.vendors.oqtopus import OqtopusSettings, OqtopusVendor

        overrides = {} if timeout is None else {"timeout": timeout}
        return OqtopusVendor(
            OqtopusSettings.from_catalog(catalog.settings("oqtopus"), **overrides),
            environ=environ,
            **common,
        )
    if name == "ionq":
        from flux_quantum.vendors.ionq import IonqSettings, IonqVendor

        overrides = {} if timeout is None else {"timeout": timeout}
        return IonqVendor(
            IonqSettings.from_catalog(catalog.settings("ionq"), **overrides),
            environ=environ,
            **common,
        )
    raise ValueError(f"unknown vendor {name!r}")


def probe_devices(
    devices: Iterable[Device],
    vendors: Mapping[str, Vendor],
    *,
    timeout: float,
    per_vendor: int = 4,
    clock: Clock = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, DeviceSnapshot]:
    """Probe every device in parallel; whatever has not answered after ``timeout``
    seconds is reported UNREACHABLE, so a hanging vendor never hides the others.

    At most ``per_vendor`` probes run against one vendor at a time. Each runs in a
    daemon thread: one stuck in a vendor call is abandoned (its socket timeout ends it
    later) and never delays the caller or interpreter exit.

    The deadline is read from ``monotonic`` alone: the caller waits for the answers
    until that clock says it has passed, however the threads are scheduled (a caller on
    a manual clock that stands still during the call gets every answer).
    """
    devices = list(devices)
    results: dict[str, DeviceSnapshot] = {}
    answered = threading.Condition()
    # Vendor APIs throttle bursts (and small servers drop connects beyond their listen
    # backlog), so each vendor sees at most ``per_vendor`` probes at a time.
    gates = {name: threading.BoundedSemaphore(per_vendor) for name in vendors}
    deadline = monotonic() + timeout

    def remaining() -> float:
        return max(0.0, deadline - monotonic())

    def probe(device: Device) -> None:
        vendor = vendors.get(device.vendor)
        gate = gates.get(device.vendor)
        try:
            if vendor is None or gate is None:
                raise LookupError(f"no vendor {device.vendor!r}")
            while not gate.acquire(timeout=remaining()):
                if not remaining():
                    return  # reported as "no answer" below
            try:
                snapshot = vendor.probe(device)
            finally:
                gate.release()
        except Exception as exc:  # a report must cover every device, whatever broke
            snapshot = DeviceSnapshot(
                device=device.name,
                status=DeviceStatus.UNREACHABLE,
                reason=f"{type(exc).__name__}: {exc}",
                price=device.price,
                t=clock(),
            )
        with answered:
            results[device.name] = snapshot
            answered.notify()

    names = {device.name for device in devices}
    for device in devices:
        threading.Thread(
            target=probe, args=(device,), name=f"probe-{device.name}", daemon=True
        ).start()
    with answered:
        while len(results) < len(names) and (wait := remaining()):
            answered.wait(wait)
        snapshots = dict(results)
    for device in devices:
        if device.name not in snapshots:
            snapshots[device.name] = DeviceSnapshot(
                device=device.name,
                status=DeviceStatus.UNREACHABLE,
                reason=f"no answer within {timeout:g}s",
                price=device.price,
                t=clock(),
            )
    return {device.name: snapshots[device.name] for device in devices}
