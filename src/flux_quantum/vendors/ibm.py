"""IBM Quantum behind the vendor interface: not supported yet.

A documented stub so that a catalog may already list IBM backends: probing them reports
UNREACHABLE with the reason, and every task verb raises ``NotSupported``. The plan (see
VENDORS.md) is qiskit-ibm-runtime or QRMI: queue depth from ``pending_jobs``, no
per-job queue position (modelled as unknown, release on RUNNING or a predicted wait).
This module must never import qiskit at module level, so that flux-quantum works
where it is not installed.
"""

from __future__ import annotations

import time

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    Clock,
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    Vendor,
)
from flux_quantum.vendors.errors import NotSupported

REASON = "IBM Quantum is not supported yet"


class IbmVendor(Vendor):
    name = "ibm"

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock

    def _unsupported(self, operation: str) -> NotSupported:
        return NotSupported(
            f"ibm {operation}: {REASON} by this flux-quantum (qiskit-ibm-runtime support is "
            "planned); use a braket or local device",
            vendor=self.name,
            vendor_code="NotSupported",
            operation=operation,
        )

    def probe(self, device: Device) -> DeviceSnapshot:
        return DeviceSnapshot(
            device=device.name,
            status=DeviceStatus.UNREACHABLE,
            reason="not supported yet",
            price=device.price,
            t=self._clock(),
        )

    def submit(self, device: Device, program_text: str, shots: int, token: str) -> TaskRef:
        raise self._unsupported("submit")

    def poll(self, task: TaskRef) -> TaskSnapshot:
        raise self._unsupported("poll")

    def cancel(self, task: TaskRef) -> None:
        raise self._unsupported("cancel")

    def result(self, task: TaskRef) -> TaskResult:
        raise self._unsupported("result")

    def attach(self, task_id: str) -> TaskRef:
        raise self._unsupported("attach")
