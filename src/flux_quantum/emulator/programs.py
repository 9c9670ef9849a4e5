"""OpenQASM 3 as the vendors take it, run once on the Braket local simulator for any side.

This module owns what every side that runs an OpenQASM 3 program shares: a program
written against ``stdgates.inc`` (as Qiskit, IBM, IonQ and OQTOPUS take it) in the
dialect the Braket local simulator runs (``braket_source``, see ``openqasm``), and one
run of a program for ``shots`` on a device of ``device_qubits`` (``run``: the
simulator's ``GateModelTaskResult`` document, or ``ProgramError``). It must never open a file a
program names, hold state, or run a program wider than the device or than the scenario's
``max_simulated_qubits``.
"""

from __future__ import annotations

import json
from typing import Any

from flux_quantum.emulator import openqasm
from flux_quantum.emulator.simulate import OPENQASM_PROGRAM, SimulationRequest, simulate


def braket_source(qasm: str) -> str:
    """``qasm`` (OpenQASM 3 as IBM, IonQ and OQTOPUS take it: the standard library's
    names known with or without its include) in the dialect the Braket simulator runs."""
    return openqasm.for_simulator(qasm, library=True)


def run(source: str, shots: int, device_qubits: int, max_qubits: int) -> dict[str, Any]:
    """The simulator's result document of ``source`` (the simulator's dialect) run for
    ``shots`` on a device of ``device_qubits`` (``ProgramError``: it cannot run here)."""
    action = {"braketSchemaHeader": {"name": OPENQASM_PROGRAM, "version": "1"},
              "source": source, "inputs": {}}  # fmt: skip
    request = SimulationRequest(json.dumps(action), shots, "braket_sv", device_qubits, max_qubits)
    return simulate(request)
