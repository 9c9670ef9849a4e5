"""Run a quantum task's OpenQASM 3 action on the Braket local simulator and build results.json.

This module owns the one place where the emulator executes circuits: it parses the task's
``action`` (a ``braket.ir.openqasm.Program`` JSON string), checks its size, runs it on the
backend of ``braket.devices.LocalSimulator`` and returns the ``GateModelTaskResult`` JSON the
real service writes to ``{outputS3Directory}/results.json``. It must never run a program
wider than the scenario's ``max_simulated_qubits`` (memory grows as 2^n) and never touch
emulator state; errors come back as ``ProgramError`` with a message fit for a
ValidationException.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OPENQASM_PROGRAM = "braket.ir.openqasm.program"


class ProgramError(ValueError):
    """The action cannot run here; the message is what ValidationException says."""


@dataclass(frozen=True)
class SimulationRequest:
    """Everything needed to run one task's program."""

    action: str
    shots: int
    backend: str
    device_qubits: int
    max_qubits: int


def action_type(action: str) -> str:
    """The ``braketSchemaHeader.name`` of an action, checking it is JSON we can run."""
    try:
        document = json.loads(action)
    except (TypeError, ValueError) as exc:
        raise ProgramError("action is not a JSON document") from exc
    header = document.get("braketSchemaHeader") if isinstance(document, dict) else None
    name = header.get("name") if isinstance(header, dict) else None
    if name != OPENQASM_PROGRAM:
        raise ProgramError(
            f"action type {name!r} is not supported by the emulator (only {OPENQASM_PROGRAM})"
        )
    if not isinstance(document.get("source"), str):
        raise ProgramError("action has no OpenQASM 'source' string")
    return name


def simulate(request: SimulationRequest) -> dict[str, Any]:
    """Run the program; return the GateModelTaskResult document for results.json.

    The caller fills in ``taskMetadata`` (id, deviceId, times) when it publishes the result.
    """
    action_type(request.action)
    # Imported here: the Braket simulator costs seconds to import and only tasks need it.
    from braket.devices import LocalSimulator
    from braket.ir.openqasm import Program

    program = Program.parse_raw(request.action)
    # LocalSimulator wraps the simulator; the emulator needs its raw IR result (what the
    # managed service writes), not the SDK object LocalSimulator.run() wraps it in.
    simulator: Any = LocalSimulator(request.backend)._delegate
    try:
        qubits = simulator.parse_program(program).circuit.num_qubits
    except Exception as exc:
        raise ProgramError(f"the OpenQASM program does not parse: {exc}") from exc
    if qubits > request.device_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits but the device has {request.device_qubits}"
        )
    if qubits > request.max_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits; the emulator simulates at most "
            f"{request.max_qubits} (scenario field max_simulated_qubits)"
        )
    try:
        result = simulator.run(program, shots=request.shots)
    except Exception as exc:
        raise ProgramError(f"the program cannot run: {exc}") from exc
    return json.loads(result.json())
