"""Where the emulated OQTOPUS answers, and the shapes of its answers.

This module owns the OQTOPUS side's paths on the emulator (``PREFIX``: the User API's
base URL, ``STORAGE``: the presigned storage), OQTOPUS's error body (``{"message": ...}``,
``OqtopusRefusal``), the statuses a job's queue progress reads as (``STATUSES``) and the
zip archives the SDK uploads and downloads (one JSON file each). It must never hold state
or do I/O.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response

PREFIX = "/oqtopus"
STORAGE = PREFIX + "/storage"
# The job status a queued task's progress reads as (the shared queue's statuses).
STATUSES = {
    "QUEUED": "ready",
    "RUNNING": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "CANCELLING": "cancelling",
    "CANCELLED": "cancelled",
}
FINAL = ("succeeded", "failed", "cancelled")


class OqtopusRefusal(Refusal):
    """OQTOPUS's answer to a request it refuses (``{"message": ...}``, as its
    ``ErrorBadRequest``, ``ErrorNotFoundError`` ... models read it)."""

    def __init__(self, status: int, message: str) -> None:
        body = json.dumps({"message": message}).encode()
        headers = (("Content-Type", "application/json"),)
        super().__init__(Response(status, body, headers, error=f"HTTP{status}"), message)


def zipped(name: str, document: Any) -> bytes:
    """A zip archive of one JSON file ``name``, as OQTOPUS stores a job's files."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, json.dumps(document))
    return buffer.getvalue()


def unzipped(data: bytes) -> Any:
    """The JSON document of a one-file zip archive (ValueError: not one)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
            if len(names) != 1:
                raise ValueError(f"the archive holds {len(names)} files, not one")
            return json.loads(archive.read(names[0]))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"not a zip archive: {exc}") from None
