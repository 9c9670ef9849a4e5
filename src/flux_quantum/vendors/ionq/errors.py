"""What IonQ's client raises, as ``flux_quantum.vendors.errors``: the one translation.

This module owns the mapping of ``ionq-core``'s errors (its HTTP errors by class, a
connection failure) to the project's, with IonQ's status kept as the code. Pure: it never
calls IonQ, and a message holds only IonQ's answer, the operation and its subject, with
whatever ``scrub`` hides (the session ids the vendor holds) hidden.
"""

from __future__ import annotations

from collections.abc import Callable

from flux_quantum.vendors.errors import (
    AccessDenied,
    InvalidRequest,
    NotFound,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)


def translate(
    exc: BaseException,
    *,
    vendor: str,
    operation: str,
    subject: str,
    scrub: Callable[[str], str] = str,
) -> VendorError:
    """One project error for an exception of a call through ionq-core."""
    if isinstance(exc, VendorError):
        return exc
    from ionq_core import (
        APIConnectionError,
        APIError,
        AuthenticationError,
        BadRequestError,
        NotFoundError,
        PermissionDeniedError,
        RateLimitError,
        ServerError,
    )

    text = scrub(str(getattr(exc, "message", None) or exc))
    status = getattr(exc, "status_code", None)
    code = f"HTTP{status}" if status is not None else type(exc).__name__
    message = f"{vendor} {operation} for {subject}: {text}"
    kinds: list[tuple[type[BaseException], type[VendorError]]] = [
        (RateLimitError, VendorThrottled),
        (ServerError, VendorUnavailable),
        (APIConnectionError, VendorUnavailable),
        (AuthenticationError, AccessDenied),
        (PermissionDeniedError, AccessDenied),
        (NotFoundError, NotFound),
        (BadRequestError, InvalidRequest),
        (APIError, InvalidRequest),
    ]
    kind = next((k for base, k in kinds if isinstance(exc, base)), VendorError)
    return kind(message, vendor=vendor, vendor_code=code, operation=operation)
