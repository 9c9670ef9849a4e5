"""``VendorCalls``: every call the handler service makes to a vendor, timed and counted.

The service's vendor objects are wrapped (``MeteredVendor``) when metrics are on: each
call of the vendor interface (``create``, ``poll``, ``probe`` ...) is counted by vendor,
operation and outcome, timed into a histogram, and tells ``VendorCalls`` whether the
vendor answered. A vendor is *unreachable* from its first call that found it down (it
did not answer, timed out, failed on its side, or a probe said UNREACHABLE) until a
call it answers; ``unreachable_seconds`` says for how long. The calls run in worker
threads: what this class keeps is behind its lock. It never changes what a call
returns or raises, and labels nothing with a task or a job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus, Vendor
from flux_quantum.vendors.errors import VendorError, VendorUnavailable

# The vendor interface's calls that reach the vendor (the others are local).
OPERATIONS = frozenset(
    {
        "probe",
        "submit",
        "poll",
        "cancel",
        "result",
        "attach",
        "attach_and_poll",
        "submit_set",
        "result_of",
        "results",
        "find_task",
        "lookup_task",
        "open_session",
        "submit_in",
        "close_session",
        "session_of",
        "billed_seconds",
    }
)
# Vendor calls take from milliseconds (an answer from a local queue) to the vendor
# timeout (20 s) and its retries.
CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class VendorCalls:
    """Counts and times vendor calls; knows since when each vendor is unreachable."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._down_since: dict[str, float] = {}
        self._vendors: set[str] = set()
        self.calls = Counter(
            "flux_qpu_vendor_calls",
            "Calls the handler service made to a vendor, by operation and outcome "
            "(ok, or the error's class).",
            ("vendor", "operation", "outcome"),
            registry=registry,
        )
        self.errors = Counter(
            "flux_qpu_vendor_call_errors",
            "Vendor calls that failed, by operation.",
            ("vendor", "operation"),
            registry=registry,
        )
        self.duration = Histogram(
            "flux_qpu_vendor_call_duration_seconds",
            "How long vendor calls took (the vendor layer's own retries included).",
            ("vendor", "operation"),
            buckets=CALL_BUCKETS,
            registry=registry,
        )

    def wrap(self, name: str, vendor: Vendor) -> Vendor:
        with self._lock:
            self._vendors.add(name)
        return MeteredVendor(name, vendor, self)  # type: ignore[return-value]

    def observe(
        self, vendor: str, operation: str, seconds: float, outcome: str, down: bool
    ) -> None:
        """One call ended: ``outcome`` ``ok`` or the error's class; ``down``: it found
        the vendor unreachable."""
        self.calls.labels(vendor, operation, outcome).inc()
        self.duration.labels(vendor, operation).observe(seconds)
        if outcome != "ok":
            self.errors.labels(vendor, operation).inc()
        with self._lock:
            if down:
                self._down_since.setdefault(vendor, self.clock())
            else:
                self._down_since.pop(vendor, None)

    def unreachable_seconds(self, now: float | None = None) -> dict[str, float]:
        """Each vendor the service made: for how long it has been unreachable (0: it
        answered its last call)."""
        now = self.clock() if now is None else now
        with self._lock:
            return {
                name: max(0.0, now - self._down_since[name]) if name in self._down_since else 0.0
                for name in sorted(self._vendors)
            }


class MeteredVendor:
    """A vendor whose calls ``VendorCalls`` times and counts; everything else is the
    vendor's own."""

    def __init__(self, name: str, vendor: Vendor, calls: VendorCalls) -> None:
        self._name = name
        self._vendor = vendor
        self._calls = calls

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._vendor, attr)
        if attr not in OPERATIONS or not callable(target):
            return target
        return _metered(self._name, attr, target, self._calls)

    def __repr__(self) -> str:
        return f"MeteredVendor({self._vendor!r})"


def _metered(name: str, operation: str, call: Callable[..., Any], calls: VendorCalls) -> Any:
    def metered(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            calls.observe(name, operation, time.monotonic() - t0, type(exc).__name__, _down(exc))
            raise
        down = isinstance(result, DeviceSnapshot) and result.status is DeviceStatus.UNREACHABLE
        calls.observe(name, operation, time.monotonic() - t0, "unreachable" if down else "ok", down)
        return result

    return metered


def _down(error: BaseException) -> bool:
    """Whether a call's error says the vendor did not answer (rather than refused)."""
    if isinstance(error, VendorError):
        return isinstance(error, VendorUnavailable)
    return isinstance(error, OSError | TimeoutError)
