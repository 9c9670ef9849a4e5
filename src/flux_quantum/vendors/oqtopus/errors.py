"""What OQTOPUS's SDK raises, as ``flux_quantum.vendors.errors``: the one translation.

This module owns which exceptions of ``oqtopus-client`` are the service's answer
(``raised``) and how each reads as a project error: an HTTP status of the User API (its
message from the body when the SDK parsed one), a connection or storage failure
(retryable), else a refusal of what was sent. Pure: it never calls OQTOPUS, and a message
holds only the service's answer, the operation and its subject, never the token.
"""

from __future__ import annotations

import asyncio

from flux_quantum.vendors.errors import InvalidRequest, VendorError, VendorUnavailable
from flux_quantum.vendors.qrmi import http_class


def translate(exc: BaseException, *, vendor: str, operation: str, subject: str) -> VendorError:
    """One project error for an exception of the SDK's call: its HTTP status (the
    ``UserApiError``'s, its message from the body when the SDK parsed one), else a
    connection or storage failure (retryable), else a refusal of what was sent."""
    if isinstance(exc, VendorError):
        return exc
    kind = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if kind == "UserApiError" and isinstance(status, int) and status > 0:
        detail = getattr(getattr(exc, "payload", None), "message", None) or exc.message  # type: ignore[attr-defined]
        cls, code = http_class(status), f"HTTP{status}"
    elif kind in ("UserApiError", "OqtopusStorageError") or isinstance(
        exc, OSError | asyncio.TimeoutError
    ) or _is_network(exc):  # fmt: skip
        detail, cls, code = str(exc), VendorUnavailable, kind
    else:
        detail, cls, code = str(exc), InvalidRequest, kind
    text = " ".join(str(detail).split())
    return cls(
        f"{vendor} {operation} for {subject} failed with {code}: {text[:400]}",
        vendor=vendor,
        vendor_code=code,
        operation=operation,
    )


def _is_network(exc: BaseException) -> bool:
    import aiohttp

    return isinstance(exc, aiohttp.ClientError)


def raised() -> tuple[type[BaseException], ...]:
    """What the SDK's calls raise: its own errors, aiohttp's, pydantic's validation, a
    timeout or an OS error, and the ``ValueError`` of a setting it refuses."""
    import aiohttp
    import pydantic
    from oqtopus_client import ResponseValidationError, UserApiError
    from oqtopus_client.services.storage import OqtopusStorageError

    return (
        UserApiError,
        ResponseValidationError,
        OqtopusStorageError,
        aiohttp.ClientError,
        pydantic.ValidationError,
        asyncio.TimeoutError,
        OSError,
        ValueError,
    )
