"""IBM's failures as ``flux_quantum.vendors.errors``: the one translation.

This module owns the mapping of what IBM answers when it refuses (an HTTP status and an
IBM error code in the body of a qrmi ``QrmiError`` or of one of our own REST reads) to the
project's vendor errors, with IBM's code and message kept in the text. It must never
retry and never call IBM, and a message it writes holds only IBM's own answer, the
operation and its subject: never a key or a token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from flux_quantum.vendors.errors import (
    AccessDenied,
    Conflict,
    DeviceOffline,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    VendorError,
    VendorThrottled,
    VendorUnavailable,
)

_BODY_RE = re.compile(r"(\{.*\})", re.S)
_STATUS_RE = re.compile(r"response body: (\d{3})\b")
PLAN_REFUSED = 1352  # "not authorized to run a session when using the open plan"


class HttpError(Exception):
    """An error answer to one of our own REST reads (QRMI's errors come as its own)."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"response body: {status} {body}")
        self.status = status


def _ibm_code(text: str) -> int | None:
    match = _BODY_RE.search(text)
    if not match:
        return None
    try:
        errors = json.loads(match.group(1)).get("errors") or []
        return int(errors[0]["code"])
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def classify(status: int | None, code: int | None) -> type[VendorError]:
    """Our error class for an IBM HTTP status and error code."""
    if code == 1202 or status == 429:
        return VendorThrottled
    if code == 1004:
        return DeviceOffline
    if code == 1012:
        return QuotaExceeded
    if code in (1201, PLAN_REFUSED) or status in (401, 403):
        return AccessDenied
    if code in (1007, 1291) or status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status is not None and status >= 500:
        return VendorUnavailable
    if status is not None and 400 <= status < 500:
        return InvalidRequest
    return VendorUnavailable


def translate_error(
    exc: BaseException, *, vendor: str, operation: str, subject: str
) -> VendorError:
    """One project error for an exception from qrmi or from our REST reads.

    qrmi 0.26 raises ``QrmiError`` subclasses whose text carries IBM's error body; the
    class says what kind (``AuthenticationFailedError``, ``InvalidInputError``,
    ``TaskNotFoundError``, ``TaskNotReadyError``), the body says which code.
    """
    if isinstance(exc, VendorError):
        return exc
    kind = type(exc).__name__
    text = str(exc)
    code = _ibm_code(text)
    status_match = _STATUS_RE.search(text)
    status = int(status_match.group(1)) if status_match else None
    if isinstance(exc, HttpError):
        status = exc.status
    kinds: Mapping[str, type[VendorError]] = {
        "AuthenticationFailedError": AccessDenied,
        "TaskNotFoundError": NotFound,
        "ResourceNotFoundError": NotFound,
        "TaskNotReadyError": InvalidRequest,
        "ConfigError": AccessDenied,
        "EnvVarNotSetError": AccessDenied,
    }
    cls = kinds.get(kind)
    if kind == "InvalidInputError":
        cls = DeviceOffline if code == 1004 else InvalidRequest
    if cls is None:
        cls = classify(status, code)
    vendor_code = str(code) if code is not None else (f"HTTP{status}" if status else kind)
    detail = _BODY_RE.sub("", text).strip(" :") if code is not None else text
    message = _error_message(code, text) or detail
    return cls(
        f"{vendor} {operation} for {subject} failed with {vendor_code}: {message}",
        vendor=vendor,
        vendor_code=vendor_code,
        operation=operation,
    )


def _error_message(code: int | None, text: str) -> str | None:
    if code is None:
        return None
    match = _BODY_RE.search(text)
    try:
        return str(json.loads(match.group(1))["errors"][0]["message"]) if match else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None
