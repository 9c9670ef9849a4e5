"""OpenQASM 3 as the vendors take it, run once on the Braket local simulator for any side.

This module owns what every side that runs an OpenQASM 3 program shares: the translation
of a program written against ``stdgates.inc`` (as Qiskit, IBM, IonQ and OQTOPUS take it)
into the dialect the Braket local simulator runs (``braket_source``), and one run of a
program for ``shots`` on a device of ``device_qubits`` (``run``: the simulator's
``GateModelTaskResult`` document, or ``ProgramError``). It must never open a file a
program names, hold state, or run a program wider than the device or than the scenario's
``max_simulated_qubits``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flux_quantum.emulator.simulate import OPENQASM_PROGRAM, SimulationRequest, simulate

# qiskit's stdgates.inc names the Braket simulator does not know, as Braket gates.
_STDGATE_ALIASES: dict[str, str] = {
    "sx": "gate sx a { v a; }",
    "sxdg": "gate sxdg a { vi a; }",
    "cx": "gate cx a, b { cnot a, b; }",
    "ccx": "gate ccx a, b, c { ccnot a, b, c; }",
    "sdg": "gate sdg a { si a; }",
    "tdg": "gate tdg a { ti a; }",
    "id": "gate id a { i a; }",
    "p": "gate p(l) a { phaseshift(l) a; }",
    "cp": "gate cp(l) a, b { cphaseshift(l) a, b; }",
    "rzz": "gate rzz(t) a, b { zz(t) a, b; }",
    "rxx": "gate rxx(t) a, b { xx(t) a, b; }",
    "ryy": "gate ryy(t) a, b { yy(t) a, b; }",
}
_INCLUDE = re.compile(r'^\s*include\s+"stdgates\.inc"\s*;\s*$', re.M)


def braket_source(qasm: str) -> str:
    """``qasm`` (OpenQASM 3 as IBM takes it) in the dialect the Braket simulator runs:
    ``include "stdgates.inc"`` dropped, the stdgates names it lacks defined from its own."""
    source = _INCLUDE.sub("", qasm)
    definitions = []
    for name, definition in _STDGATE_ALIASES.items():
        used = re.search(rf"(^|[;{{}}])\s*{name}\s*[\s(]", source, re.M)
        defined = re.search(rf"\bgate\s+{name}\b", source)
        if used and not defined:
            definitions.append(definition)
    if not definitions:
        return source
    lines = source.splitlines()
    # Definitions go after the version line (which must stay first).
    at = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("OPENQASM")), 0)
    return "\n".join(lines[:at] + definitions + lines[at:]) + "\n"


def run(source: str, shots: int, device_qubits: int, max_qubits: int) -> dict[str, Any]:
    """The simulator's result document of ``source`` (the simulator's dialect) run for
    ``shots`` on a device of ``device_qubits`` (``ProgramError``: it cannot run here)."""
    action = {"braketSchemaHeader": {"name": OPENQASM_PROGRAM, "version": "1"},
              "source": source, "inputs": {}}  # fmt: skip
    request = SimulationRequest(json.dumps(action), shots, "braket_sv", device_qubits, max_qubits)
    return simulate(request)
