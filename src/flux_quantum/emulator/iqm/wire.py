"""Where the emulated IQM side answers, and the shapes of IQM Server's answers.

This module owns the IQM side's paths on the emulator (``PREFIX``, the API v1 under
``API``), the job types it takes, IQM Server's error body (``{"error_code", "message",
"request_id"}``, ``iqm_error``) and ``IqmRefusal``, the job statuses IQM reports for the
shared queue's (``STATUS``) and the translation of an IQM circuit
(``prx``, ``cz``, ``measure``) into the OpenQASM 3 the Braket local simulator runs. It
must never hold state or do I/O.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

from flux_quantum.emulator.iqm.scenario import ERROR_CODES
from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response

PREFIX = "/iqm"
API = PREFIX + "/api/v1"
JOB_TYPES = ("circuit",)
STATUS = {
    "QUEUED": "waiting",
    "RUNNING": "processing",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLING": "cancelled",
    "CANCELLED": "cancelled",
}
TERMINAL = ("completed", "failed", "cancelled")


class IqmRefusal(Refusal):
    """IQM's answer to a request it refuses."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(iqm_error(status, message, code), message)


def iqm_error(status: int, message: str, code: str | None = None) -> Response:
    """An error as the IQM Server API sends it."""
    error_code = code or ERROR_CODES.get(status, "error")
    body = {"error_code": error_code, "message": message, "request_id": str(uuid.uuid4())}
    return Response(
        status, json.dumps(body).encode(), (("Content-Type", "application/json"),), error=error_code
    )


def braket_source(circuit: dict[str, Any]) -> tuple[str, list[tuple[str, list[int]]]]:
    """A validated IQM circuit as OpenQASM 3 the Braket simulator runs, on a compact
    register of the qubits it uses, and its measure keys with their compact qubits.
    prx(θ, φ) = rz(φ) rx(θ) rz(-φ), applied right to left."""
    used: dict[str, int] = {}
    for ins in circuit["instructions"]:
        for q in ins["qubits"]:
            used.setdefault(q, len(used))
    lines = ["OPENQASM 3.0;", f"qubit[{max(1, len(used))}] q;"]
    keys: list[tuple[str, list[int]]] = []
    measured = 0
    body = []
    for ins in circuit["instructions"]:
        qs = [used[q] for q in ins["qubits"]]
        if ins["name"] == "prx":
            theta = 2 * math.pi * float(ins["args"]["angle_t"])
            phi = 2 * math.pi * float(ins["args"]["phase_t"])
            body += [
                f"rz({-phi!r}) q[{qs[0]}];",
                f"rx({theta!r}) q[{qs[0]}];",
                f"rz({phi!r}) q[{qs[0]}];",
            ]
        elif ins["name"] == "cz":
            body.append(f"cz q[{qs[0]}], q[{qs[1]}];")
        elif ins["name"] == "measure":
            keys.append((ins["args"]["key"], qs))
            for q in qs:
                body.append(f"b[{measured}] = measure q[{q}];")
                measured += 1
    lines.append(f"bit[{max(1, measured)}] b;")
    return "\n".join(lines + body) + "\n", keys
