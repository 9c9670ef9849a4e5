"""The toy client's failures as flux-quantum's vendor errors."""

from __future__ import annotations

from flux_quantum.vendors.errors import AccessDenied, VendorError, VendorUnavailable


class ToyRefused(Exception):
    """What the toy client raises for a call it refuses; ``status`` as HTTP's."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def translate(exc: BaseException, *, vendor: str, operation: str, subject: str) -> VendorError:
    if isinstance(exc, VendorError):
        return exc
    status = getattr(exc, "status", None)
    kind = AccessDenied if status == 401 else VendorUnavailable
    return kind(
        f"{vendor} {operation} for {subject} failed: {exc}",
        vendor=vendor,
        vendor_code=f"HTTP{status}" if status else type(exc).__name__,
        operation=operation,
    )
