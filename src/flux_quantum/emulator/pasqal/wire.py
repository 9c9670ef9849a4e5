"""Where the emulated Pasqal side answers, and the shapes its answers take.

This module owns the Pasqal side's paths on the emulator (Pasqal Cloud under ``PREFIX``,
its token endpoint, the on-premises warden under ``LOCAL_PREFIX/<device>``), Pasqal
Cloud's envelopes (``ok``, ``pasqal_error``) and the warden's error body
(``warden_error``), ``PasqalRefusal``, the batch statuses Pasqal reports for the shared
queue's (``STATES``) and a device's specs document. It must never hold state or do I/O.
"""

from __future__ import annotations

import json
from typing import Any

from flux_quantum.emulator.pasqal.scenario import PasqalDeviceSpec
from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response, json_response

PREFIX = "/pasqal"
LOCAL_PREFIX = "/pasqal-local"
AUTH_PATH = PREFIX + "/oauth/token"
API = PREFIX + "/core-fast/api"
# Pasqal's batch and job statuses for the shared queue's task statuses.
STATES = {
    "QUEUED": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETED": "DONE",
    "FAILED": "ERROR",
    "CANCELLING": "CANCELING",
    "CANCELLED": "CANCELED",
}
PENDING = ("PENDING", "RUNNING")


class PasqalRefusal(Refusal):
    """Pasqal's answer to a request it refuses."""


def pasqal_error(status: int, message: str) -> Response:
    """Pasqal Cloud's error envelope."""
    doc = {"code": status, "data": {"description": message}, "message": message, "status": "fail"}
    response = json_response(status, doc)
    return Response(status, response.body, response.headers, error=f"HTTP{status}")


def warden_error(status: int, message: str) -> Response:
    """The warden's error body (FastAPI's ``detail``)."""
    response = json_response(status, {"detail": message})
    return Response(status, response.body, response.headers, error=f"HTTP{status}")


def ok(data: Any) -> Response:
    return json_response(200, {"code": 200, "data": data, "message": "OK.", "status": "success"})


def specs_document(spec: PasqalDeviceSpec) -> dict[str, str]:
    """A device's specs as Pasqal Cloud and the warden list them (``specs``: a JSON string)."""
    specs = {"name": spec.name, "max_atom_num": spec.atoms, "max_runs": spec.max_runs}
    return {"device_type": spec.name, "specs": json.dumps(specs)}
