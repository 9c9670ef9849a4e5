"""The small set of errors every vendor module maps its failures to.

A vendor's own error codes (``ThrottlingException``, ``DeviceOfflineException``, an IBM
HTTP status ...) never leave ``flux_quantum.vendors``: each vendor module turns them
into one of these classes, keeping the vendor's code in ``vendor_code`` and saying in
the message what flux-quantum did about it. ``retryable`` tells the caller whether the
same call may succeed when repeated after a backoff. This module only defines types; it
never retries, sleeps or logs.
"""

from __future__ import annotations

from flux_quantum.errors import FluxQuantumError


class VendorError(FluxQuantumError):
    """A vendor call failed; ``vendor_code`` is the vendor's own name for the failure."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        vendor: str,
        vendor_code: str,
        operation: str = "",
        retryable: bool | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.vendor = vendor
        self.vendor_code = vendor_code
        self.operation = operation
        self.attempts = attempts
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        message = super().__str__()
        if self.attempts > 1:
            return f"{message} (gave up after {self.attempts} attempts)"
        return message


class VendorThrottled(VendorError):
    """The vendor rate-limited us (Braket ThrottlingException, HTTP 429)."""

    retryable = True


class VendorUnavailable(VendorError):
    """The vendor did not answer, timed out or failed on its side (HTTP 5xx)."""

    retryable = True


class DeviceOffline(VendorError):
    """The device does not take tasks now (offline, paused, retired)."""


class DeviceRetired(DeviceOffline):
    """The device is gone for good (Braket DeviceRetiredException)."""


class InvalidRequest(VendorError):
    """The vendor rejected what we sent (Braket ValidationException, a bad program)."""


class AccessDenied(VendorError):
    """The caller's credentials are missing, wrong or not allowed to do this."""


class NotFound(VendorError):
    """The device or task does not exist (or not in this account and region)."""


class QuotaExceeded(VendorError):
    """An account quota was hit (e.g. too many tasks in flight); retry much later."""


class Conflict(VendorError):
    """The request conflicts with the resource's state (e.g. a token reused differently)."""


class NotSupported(VendorError):
    """This vendor is not supported by this flux-quantum build."""
