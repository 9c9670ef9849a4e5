"""Exact values of a cut circuit, by state-vector simulation (numpy), for checking a cut.

``expectations`` gives the exact expectation value of each Pauli string on the circuit's
final state; ``probabilities`` the exact distribution of its bitstrings (first character:
qubit 0), which stands in for a device's counts where a check wants no shot noise. Memory
is 16 bytes times 2^qubits (256 MiB at 24 qubits), time about one pass over it per gate.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flux_quantum.cutting.circuit import Circuit, Gate

MAX_QUBITS = 26

_SQ2 = 1 / math.sqrt(2)
_FIXED: dict[str, list[list[complex]]] = {
    "id": [[1, 0], [0, 1]],
    "x": [[0, 1], [1, 0]],
    "y": [[0, -1j], [1j, 0]],
    "z": [[1, 0], [0, -1]],
    "h": [[_SQ2, _SQ2], [_SQ2, -_SQ2]],
    "s": [[1, 0], [0, 1j]],
    "sdg": [[1, 0], [0, -1j]],
    "t": [[1, 0], [0, complex(_SQ2, _SQ2)]],
    "tdg": [[1, 0], [0, complex(_SQ2, -_SQ2)]],
    "sx": [[0.5 + 0.5j, 0.5 - 0.5j], [0.5 - 0.5j, 0.5 + 0.5j]],
    "cx": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]],
    "cy": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, -1j], [0, 0, 1j, 0]],
    "cz": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, -1]],
    "swap": [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]],
}
_PAULI: dict[str, list[list[complex]]] = {k: _FIXED[k] for k in ("x", "y", "z")}


def matrix(gate: Gate) -> Any:
    """The gate's unitary, its first qubit the most significant."""
    name, params = gate.name, gate.params
    if name in _FIXED:
        return np.array(_FIXED[name], dtype=complex)
    if name == "ccx":
        m = np.eye(8, dtype=complex)
        m[6:8, 6:8] = [[0, 1], [1, 0]]
        return m
    theta = params[0]
    c, s = math.cos(theta / 2), math.sin(theta / 2)
    if name == "rx":
        return np.array([[c, -1j * s], [-1j * s, c]])
    if name == "ry":
        return np.array([[c, -s], [s, c]], dtype=complex)
    if name == "rz":
        return np.diag([complex(c, -s), complex(c, s)])
    if name == "p":
        return np.diag([1, np.exp(1j * theta)])
    if name == "cp":
        return np.diag([1, 1, 1, np.exp(1j * theta)])
    if name == "rzz":
        a, b = complex(c, -s), complex(c, s)
        return np.diag([a, b, b, a])
    raise ValueError(f"no matrix for gate {name}")


def statevector(circuit: Circuit) -> Any:
    """The final state as an array of shape (2,) * qubits, axis q for qubit q."""
    n = circuit.qubits
    if n > MAX_QUBITS:
        raise ValueError(f"an exact simulation holds at most {MAX_QUBITS} qubits, got {n}")
    state = np.zeros((2,) * n, dtype=complex)
    state[(0,) * n] = 1.0
    for gate in circuit.gates:
        _apply(state, matrix(gate), gate.qubits)
    return state


def _apply(state: Any, unitary: Any, qubits: Sequence[int]) -> None:
    """Apply ``unitary`` to ``qubits`` of ``state`` in place, a slice of the basis
    states of those qubits at a time (no copy of the whole state but the slices)."""
    k = len(qubits)
    rows = list(itertools.product((0, 1), repeat=k))

    def where(bits: tuple[int, ...]) -> tuple[Any, ...]:
        index: list[Any] = [slice(None)] * state.ndim
        for q, b in zip(qubits, bits, strict=True):
            index[q] = b
        return tuple(index)

    if np.count_nonzero(unitary - np.diag(np.diag(unitary))) == 0:
        for r, bits in enumerate(rows):
            if unitary[r, r] != 1:
                state[where(bits)] *= unitary[r, r]
        return
    old = [state[where(bits)].copy() for bits in rows]
    for r, bits in enumerate(rows):
        out = state[where(bits)]
        out[...] = 0
        for c in range(len(rows)):
            if unitary[r, c] != 0:
                out += unitary[r, c] * old[c]


def expectations(circuit: Circuit, observables: Sequence[str]) -> list[float]:
    """The exact expectation value of each Pauli string (first letter: qubit 0)."""
    state = statevector(circuit)
    out = []
    for observable in observables:
        image = state.copy()
        for q, letter in enumerate(observable):
            if letter != "I":
                _apply(image, np.array(_PAULI[letter.lower()]), [q])
        out.append(float(np.vdot(state, image).real))
    return out


def probabilities(circuit: Circuit) -> dict[str, float]:
    """The exact distribution of the measured bitstrings (first character: qubit 0)."""
    flat = np.abs(statevector(circuit).reshape(-1)) ** 2
    n = circuit.qubits
    return {format(i, f"0{n}b"): float(p) for i, p in enumerate(flat) if p > 1e-15}
