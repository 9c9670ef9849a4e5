"""Many devices probed at once, with a deadline: ``probe_devices``.

This module owns the one parallel probe of a catalog's devices: a thread per device, at
most a few per vendor at a time, every device answered for by the deadline (UNREACHABLE
when its vendor did not answer). It never retries (each vendor's budget does), never
waits past the deadline and keeps no state between calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import Clock, DeviceSnapshot, DeviceStatus, Vendor


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
