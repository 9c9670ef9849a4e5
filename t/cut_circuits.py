"""Circuits the cutting tests share: seeded random layered circuits, and the chain whose
expectation values are known in closed form."""

from __future__ import annotations

import math
import random


def layered(
    qubits: int, layers: int, seed: int, gates: tuple[str, ...] = ("cz", "cx", "rzz(0.7)")
) -> str:
    """Random rotations, then a layer of two-qubit gates between neighbours, ``layers`` times."""
    rng = random.Random(seed)
    lines = ["OPENQASM 3.0;", 'include "stdgates.inc";', f"qubit[{qubits}] q;", f"bit[{qubits}] c;"]
    for _ in range(layers):
        for i in range(qubits):
            lines.append(f"ry({rng.uniform(0, 3):.6f}) q[{i}];")
            lines.append(f"rz({rng.uniform(0, 3):.6f}) q[{i}];")
        for i in range(qubits - 1):
            lines.append(f"{rng.choice(gates)} q[{i}], q[{i + 1}];")
    lines.append("c = measure q;")
    return "\n".join(lines) + "\n"


def chain_angles(qubits: int) -> list[float]:
    return [0.4 + 0.35 * (i % 3) for i in range(qubits)]


def chain(qubits: int) -> str:
    """ry(θ_i) on every qubit, then cz between neighbours: <X_i> = sin θ_i Π cos θ_nbr."""
    lines = ["OPENQASM 3.0;", 'include "stdgates.inc";', f"qubit[{qubits}] q;"]
    lines += [f"ry({a!r}) q[{i}];" for i, a in enumerate(chain_angles(qubits))]
    lines += [f"cz q[{i}], q[{i + 1}];" for i in range(qubits - 1)]
    return "\n".join(lines) + "\n"


def chain_x(qubits: int, i: int) -> float:
    """The exact <X_i> of ``chain(qubits)``."""
    theta = chain_angles(qubits)
    value = math.sin(theta[i])
    for j in (i - 1, i + 1):
        if 0 <= j < qubits:
            value *= math.cos(theta[j])
    return value
