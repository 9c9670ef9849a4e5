"""SQS's JSON protocol on the emulator: where it answers, its answers and its errors.

This module owns the SQS side's path (``PREFIX``), a JSON answer in SQS's content type
(``json_answer``), an error as botocore's query-compatible JSON parser reads it
(``sqs_error``: ``__type`` and ``message`` in the body, the old query code and the
fault's side in ``x-amzn-query-error``, so the client raises the modelled exception),
``SqsRefusal`` (an answer that stops handling a request) and a queue's name from its URL
(``queue_name``). It must never hold state or do I/O.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response

PREFIX = "/sqs"
CONTENT_TYPE = "application/x-amz-json-1.0"
SHAPE_PREFIX = "com.amazonaws.sqs#"


class SqsRefusal(Refusal):
    """Stop handling a request and answer ``response`` (an ``sqs_error``)."""


def json_answer(document: Any, status: int = 200) -> Response:
    body = json.dumps(document, separators=(",", ":")).encode()
    return Response(status, body, (("Content-Type", CONTENT_TYPE),))


def sqs_error(
    code: str, message: str, *, status: int = 400, query_code: str | None = None
) -> Response:
    """An SQS error: ``code`` is the error shape's name (``QueueDoesNotExist``),
    ``query_code`` the code SQS's query protocol had for it (the header botocore maps
    back to the shape), defaulting to ``code``."""
    body = json.dumps({"__type": SHAPE_PREFIX + code, "message": message}).encode()
    side = "Sender" if status < 500 else "Receiver"
    headers = (
        ("Content-Type", CONTENT_TYPE),
        ("x-amzn-query-error", f"{query_code or code};{side}"),
    )
    return Response(status, body, headers, error=code)


def queue_name(url: Any) -> str | None:
    """The queue's name: the last segment of its URL's path (``.../123456789012/name``)."""
    if not isinstance(url, str) or not url:
        return None
    path = urlsplit(url).path if "://" in url else url
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name or None
