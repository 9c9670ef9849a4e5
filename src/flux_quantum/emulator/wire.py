"""HTTP request and response records shared by the emulator's server and its services.

This module owns the plain data passed between the socket layer and the Braket and S3
services, plus the helpers that format Braket's rest-json errors and timestamps. It must never
do I/O or hold state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Request:
    """One HTTP request as received (path still percent-encoded)."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes = b""

    def segments(self, prefix: str = "") -> list[str]:
        """Path segments after ``prefix``, each percent-decoded (ARNs arrive as one segment)."""
        path = self.path[len(prefix) :] if prefix and self.path.startswith(prefix) else self.path
        return [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []

    def first(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass(frozen=True)
class Response:
    """One HTTP response to send; ``reset``: send nothing, reset the connection instead."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    error: str | None = None  # the error code, for the call log
    reset: bool = False


RESET_ERROR = "ConnectionReset"


def connection_reset() -> Response:
    """No answer at all: the server resets the connection (logged as status 0)."""
    return Response(0, error=RESET_ERROR, reset=True)


def json_response(status: int, document: Any) -> Response:
    body = json.dumps(document, separators=(",", ":")).encode()
    return Response(status, body, (("Content-Type", "application/json"),))


def braket_error(code: str, status: int, message: str, **members: Any) -> Response:
    """A rest-json error as Braket sends it: the code in x-amzn-ErrorType, a message body
    (plus the error shape's other ``members``: a ValidationException's ``reason`` and
    ``programSetValidationFailures``)."""
    body = json.dumps({"message": message, **members}).encode()
    headers = (("Content-Type", "application/json"), ("x-amzn-ErrorType", code))
    return Response(status, body, headers, error=code)


def iso8601(moment: datetime) -> str:
    """Braket's timestamp format: ISO 8601, UTC, milliseconds, 'Z'."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
