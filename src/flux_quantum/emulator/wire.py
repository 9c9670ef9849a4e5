"""HTTP request and response records shared by the emulator's server and its vendor sides.

This module owns the plain data passed between the socket layer and every vendor side
(``Request``, ``Response``), a JSON answer and a connection reset; each side's own error
shapes and timestamps are its ``wire``. It must never do I/O or hold state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def body_field(request: Request, key: str) -> str | None:
    """The string ``key`` of the request's JSON object body, or None (no such field, or
    no JSON object): what a side reads to know which device a create hits before it
    checks the body."""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        return None
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def json_response(status: int, document: Any) -> Response:
    body = json.dumps(document, separators=(",", ":")).encode()
    return Response(status, body, (("Content-Type", "application/json"),))
