"""Where the emulated Felis answers, and the shapes of its answers.

This module owns the Felis side's paths on the emulator (``PREFIX``, the API under
``API``), Felis's error body (``{"detail": ...}``, ``felis_error``) and ``FelisRefusal``,
the events a job's queue status reads as (``EVENTS``), and the translation of a QIR
program's calls (``felis_program.gates``) into the OpenQASM 3 the Braket local simulator
runs. It must never hold state or do I/O.
"""

from __future__ import annotations

import json

from flux_quantum.emulator.side import Refusal
from flux_quantum.emulator.wire import Response
from flux_quantum.vendors.felis.program import Gate

PREFIX = "/felis"
API = PREFIX + "/v1"
# The event a job's last one is, for the shared queue's task statuses.
EVENTS = {
    "QUEUED": "INPUT_READY",
    "RUNNING": "EXECUTING",
    "COMPLETED": "SUCCEEDED",
    "FAILED": "EXECUTION_FAILED",
    "CANCELLING": "CANCELLED",
    "CANCELLED": "CANCELLED",
}
FINAL = ("SUCCEEDED", "CANCELLED", "EXECUTION_FAILED", "TRANSPILATION_FAILED", "TIMED_OUT")
_OPENQASM = {"cx": "cnot", "s_adj": "sdg", "t_adj": "tdg"}


class FelisRefusal(Refusal):
    """Felis's answer to a request it refuses."""

    def __init__(self, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        headers = (("Content-Type", "application/json"),)
        super().__init__(Response(status, body, headers, error=f"HTTP{status}"), detail)


def felis_error(status: int, detail: str) -> Response:
    """An error as the Felis API sends it."""
    return FelisRefusal(status, detail).response


def openqasm(calls: list[Gate]) -> tuple[str, list[tuple[int, int]]]:
    """The program's calls as OpenQASM 3, and (result, qubit) of each measurement."""
    width = max(q for _n, qs, _p, _r in calls for q in qs) + 1
    results = [r for name, _q, _p, r in calls if name in ("mz", "m") and r is not None]
    lines = ["OPENQASM 3.0;", f"qubit[{width}] q;"]
    if results:
        lines.append(f"bit[{max(results) + 1}] c;")
    measured: list[tuple[int, int]] = []
    for name, qubits, params, result in calls:
        targets = ", ".join(f"q[{q}]" for q in qubits)
        if name in ("mz", "m"):
            if result is not None:
                lines.append(f"c[{result}] = measure q[{qubits[0]}];")
                measured.append((result, qubits[0]))
            continue
        if name == "reset":
            lines.append(f"reset {targets};")
            continue
        args = f"({', '.join(repr(p) for p in params)})" if params else ""
        lines.append(f"{_OPENQASM.get(name, name)}{args} {targets};")
    return "\n".join(lines) + "\n", measured
