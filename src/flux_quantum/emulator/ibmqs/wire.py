"""Where the emulated IBM Quantum System answers, and the shapes of its answers.

This module owns the side's paths on the emulator (``PREFIX``: the Quantum System API
under ``API``, IBM Cloud IAM's token call at ``IAM_PATH``, the S3-compatible bucket
under ``S3``), the API's error body (``{"errors": [{"code", "message", "more_info"}],
"status_code", "title", "trace"}``, ``qs_error``) and ``QsRefusal``, S3's XML error,
IAM's, the job statuses the API reports for the shared queue's (``STATUS``), and the
reading of a presigned URL back into a bucket and key. It must never hold state or do I/O.
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import unquote, urlsplit

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response

PREFIX = "/ibm-qs"
API = PREFIX + "/api"
IAM_PATH = PREFIX + "/identity/token"
S3 = PREFIX + "/s3"
# The API's job statuses for the shared queue's: a waiting job is already "Running".
STATUS = {
    "QUEUED": "Running",
    "RUNNING": "Running",
    "COMPLETED": "Completed",
    "FAILED": "Failed",
    "CANCELLING": "Cancelled",
    "CANCELLED": "Cancelled",
}
TERMINAL = ("Completed", "Failed", "Cancelled")
PROGRAMS = ("sampler", "estimator")
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class QsRefusal(Refusal):
    """The Quantum System API's answer to a request it refuses."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(qs_error(status, code, message), message)


class S3Refusal(Refusal):
    """The bucket's answer to a request it refuses."""

    def __init__(self, status: int, code: str, message: str) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{uuid.uuid4().hex}</RequestId></Error>"
        )
        response = Response(
            status, body.encode(), (("Content-Type", "application/xml"),), error=code
        )
        super().__init__(response, message)


def qs_error(status: int, code: str, message: str) -> Response:
    """An error as the Quantum System API sends it."""
    body = {
        "errors": [{"code": code, "message": message, "more_info": ""}],
        "status_code": status,
        "title": TITLES.get(status, "Error"),
        "trace": uuid.uuid4().hex,
    }
    return Response(
        status, json.dumps(body).encode(), (("Content-Type", "application/json"),), error=code
    )


def iam_error(status: int, message: str) -> Response:
    """An error as IBM Cloud IAM sends it."""
    body = {"errorCode": "BXNIM0415E", "errorMessage": message, "context": {}}
    return Response(
        status,
        json.dumps(body).encode(),
        (("Content-Type", "application/json"),),
        error="BXNIM0415E",
    )


def object_of(url: str) -> tuple[str, str] | None:
    """The (bucket, key) a presigned URL of this side's bucket names, or None."""
    path = urlsplit(url).path
    at = path.find(S3 + "/")
    if at < 0:
        return None
    bucket, _, key = path[at + len(S3) + 1 :].partition("/")
    return (unquote(bucket), unquote(key)) if bucket and key else None
