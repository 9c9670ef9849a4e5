"""A circuit the compile stage mapped onto an IQM device, written as IQM's JSON circuit.

This module owns the writer the IQM descriptor names (``Compiling.writer``): a Qiskit
circuit in IQM's native gates on physical qubits (``r``: IQM's ``prx``, ``cz``,
``measure``, ``barrier``) becomes ``{"name", "instructions"}`` with ``prx`` angles in
full turns (``angle_t`` = θ/2π, ``phase_t`` = φ/2π), physical qubit i as ``QB{i+1}``,
and each measured classical bit its own ``measure`` keyed ``REG_I``, emitted after every
gate in classical-bit order, so that counts read back bit 0 first (``program``'s
``counts_from_measurements``), as the program's own bits. What the translation in
``program`` does not do and this does: layout and routing (the transpiler's). A gate
on a measured qubit is refused: IQM's circuits measure at the end.
"""

from __future__ import annotations

import json
import math
from typing import Any

TAU = 2 * math.pi


def write(circuit: Any) -> str:
    """IQM's JSON circuit (text) of the mapped Qiskit ``circuit``."""
    qubit_index = {bit: i for i, bit in enumerate(circuit.qubits)}
    clbit_order = {bit: i for i, bit in enumerate(circuit.clbits)}
    instructions: list[dict[str, Any]] = []
    measures: list[tuple[int, dict[str, Any]]] = []
    measured: set[int] = set()
    for instruction in circuit.data:
        name = instruction.operation.name
        qubits = [qubit_index[q] for q in instruction.qubits]
        names = [f"QB{q + 1}" for q in qubits]
        if name == "measure":
            clbit = instruction.clbits[0]
            location = circuit.find_bit(clbit)
            register, index = location.registers[0] if location.registers else (None, 0)
            key = f"{register.name}_{index}" if register is not None else f"c_{clbit_order[clbit]}"
            measured.update(qubits)
            measures.append(
                (clbit_order[clbit], {"name": "measure", "qubits": names, "args": {"key": key}})
            )
            continue
        if name == "barrier":
            if measured & set(qubits):
                continue
            instructions.append({"name": "barrier", "qubits": names, "args": {}})
            continue
        if measured & set(qubits):
            raise ValueError("IQM's circuits measure at the end; the program acts on a qubit after")
        if name == "r":
            theta, phi = (float(p) for p in instruction.operation.params)
            instructions.append(
                {
                    "name": "prx",
                    "qubits": names,
                    "args": {"angle_t": _turns(theta), "phase_t": _turns(phi) % 1.0},
                }
            )
        elif name == "cz":
            instructions.append({"name": "cz", "qubits": names, "args": {}})
        elif name != "delay":
            raise ValueError(f"{name} is not one of IQM's native operations (prx, cz, measure)")
    instructions += [m for _, m in sorted(measures, key=lambda m: m[0])]
    return json.dumps({"name": circuit.name or "circuit", "instructions": instructions})


def _turns(angle: float) -> float:
    rounded = round(angle / TAU, 12)
    return 0.0 if rounded in (0.0, -0.0) else rounded
