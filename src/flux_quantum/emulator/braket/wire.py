"""Braket's rest-json wire format on the emulator: its errors, timestamps and JSON bodies.

This module owns how the Braket side reads a request's JSON body and answers what it
refuses: ``braket_error`` (the error shape botocore's braket 2019-09-01 model parses),
``BraketRefusal`` (an answer that stops handling a request, logged as its operation),
``invalid`` (a ValidationException), ``json_body`` and ``iso8601`` (Braket's timestamps).
It must never hold state, do I/O or answer with a shape that model does not have.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Request, Response


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


class BraketRefusal(Refusal):
    """Stop handling a request and answer ``response``; logged as ``operation``."""

    def __init__(self, operation: str, response: Response) -> None:
        super().__init__(response)
        self.operation = operation


def invalid(message: str, **members: Any) -> BraketRefusal:
    """A ValidationException saying ``message`` (plus the error shape's ``members``)."""
    return BraketRefusal("", braket_error("ValidationException", 400, message, **members))


def json_body(request: Request, operation: str) -> dict[str, Any]:
    """The request's JSON object ({} without a body), or ``operation``'s ValidationException."""
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        raise BraketRefusal(
            operation, braket_error("ValidationException", 400, "body is not JSON")
        ) from exc
    if not isinstance(body, dict):
        raise BraketRefusal(
            operation, braket_error("ValidationException", 400, "body is not an object")
        )
    return body
