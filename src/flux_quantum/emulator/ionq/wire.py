"""Where the emulated IonQ API answers, and the shapes of its answers.

This module owns the IonQ side's paths on the emulator (``PREFIX``, API v0.4 under
``API``), IonQ's error body (``{"error", "message", "status_code"}``, ``ionq_error``) and
``IonqRefusal``, the job statuses a queue state reads as (``STATUSES``), the translation
of a circuit job's input (OpenQASM 3 as written, or IonQ's ``qis`` JSON gate list) into
the OpenQASM 3 the Braket local simulator runs, and the probabilities document of a
result. It must never hold state or do I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response

PREFIX = "/ionq"
API = PREFIX + "/v0.4"
# The job status IonQ reports for each state of the shared queue model.
STATUSES = {
    "QUEUED": "ready",
    "RUNNING": "started",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLING": "canceled",
    "CANCELLED": "canceled",
}
FINAL = ("completed", "failed", "canceled")
_ERRORS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           409: "Conflict", 413: "Payload Too Large", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip
# IonQ's qis gates (one target, or a control) and their OpenQASM 3 names on the simulator.
_ONE = {"x": "x", "not": "x", "y": "y", "z": "z", "h": "h", "s": "s", "si": "si", "t": "t",
        "ti": "ti", "v": "v", "vi": "vi"}  # fmt: skip
_ROTATIONS = ("rx", "ry", "rz")


class IonqRefusal(Refusal):
    """IonQ's answer to a request it refuses."""

    def __init__(self, status: int, message: str) -> None:
        error = _ERRORS.get(status, "Error")
        body = json.dumps({"error": error, "message": message, "status_code": status}).encode()
        headers = (("Content-Type", "application/json"),)
        super().__init__(Response(status, body, headers, error=f"HTTP{status}"), message)


def ionq_error(status: int, message: str) -> Response:
    """An error as IonQ's API sends it."""
    return IonqRefusal(status, message).response


class CircuitError(ValueError):
    """A circuit the emulator cannot read; the message is the job's failure message."""


def openqasm(job_type: str, circuit: Any) -> str:
    """The job's ``input`` as an OpenQASM 3 program: ``ionq.qasm3.v1``'s ``data`` as
    written, ``ionq.circuit.v1``'s ``qis`` gate list translated (every qubit measured)."""
    if not isinstance(circuit, Mapping):
        raise CircuitError("input must be an object")
    if job_type == "ionq.qasm3.v1":
        data = circuit.get("data")
        if not isinstance(data, str) or not data.strip():
            raise CircuitError("input.data must be an OpenQASM 3 program")
        return data
    gateset = circuit.get("gateset", "qis")
    if gateset != "qis":
        raise CircuitError(f"the emulator runs the qis gateset only, not {gateset!r}")
    gates = circuit.get("circuit")
    if not isinstance(gates, list) or not gates:
        raise CircuitError("input.circuit must list at least one gate")
    lines: list[str] = []
    width = 0
    for index, gate in enumerate(gates):
        line, used = _gate(gate, index)
        lines.append(line)
        width = max(width, *used) if used else width
    qubits = circuit.get("qubits", width + 1)
    if isinstance(qubits, bool) or not isinstance(qubits, int) or qubits < width + 1:
        raise CircuitError(f"input.qubits must be an integer >= {width + 1}")
    head = ["OPENQASM 3.0;", f"qubit[{qubits}] q;", f"bit[{qubits}] c;"]
    return "\n".join([*head, *lines, "c = measure q;"]) + "\n"


def _gate(gate: Any, index: int) -> tuple[str, list[int]]:
    where = f"input.circuit[{index}]"
    if not isinstance(gate, Mapping):
        raise CircuitError(f"{where} must be an object")
    name = gate.get("gate")
    targets = gate.get("targets", [gate.get("target")] if "target" in gate else [])
    controls = gate.get("controls", [gate.get("control")] if "control" in gate else [])
    qubits = [*controls, *targets]
    if not targets or any(isinstance(q, bool) or not isinstance(q, int) or q < 0 for q in qubits):
        raise CircuitError(f"{where} needs target qubits (integers >= 0)")
    q = ", ".join(f"q[{i}]" for i in qubits)
    if name == "cnot" or (name in ("x", "not") and len(controls) == 1):
        if len(controls) != 1 or len(targets) != 1:
            raise CircuitError(f"{where} cnot needs one control and one target")
        return f"cnot {q};", qubits
    if controls:
        raise CircuitError(f"{where} gate {name!r} with controls is not emulated")
    if name == "swap" and len(targets) == 2:
        return f"swap {q};", qubits
    if name in _ONE and len(targets) == 1:
        return f"{_ONE[name]} {q};", qubits
    if name in _ROTATIONS and len(targets) == 1:
        angle = gate.get("rotation")
        if (
            isinstance(angle, bool)
            or not isinstance(angle, int | float)
            or not math.isfinite(angle)
        ):
            raise CircuitError(f"{where} {name} needs a rotation in radians")
        return f"{name}({float(angle)!r}) {q};", qubits
    raise CircuitError(f"{where} gate {name!r} is not a qis gate the emulator runs")


def probabilities(counts: Mapping[str, int], shots: int) -> dict[str, float]:
    """IonQ's probabilities of a result: keys are the state as a decimal integer, qubit 0
    its least significant bit (``counts``' bitstrings have qubit 0 first)."""
    total = shots or sum(counts.values()) or 1
    return {
        str(int(bits[::-1], 2)): count / total for bits, count in sorted(counts.items()) if count
    }
