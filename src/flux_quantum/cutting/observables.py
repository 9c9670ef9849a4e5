"""The observables a cut estimates: Pauli strings, and the measurement settings they share.

An observable is a Pauli string with one letter of ``I X Y Z`` per qubit of the circuit,
the first letter for qubit 0 (``q[0]``), as the vendors' bitstrings read. A sparse form
names only the qubits that are not ``I``: ``X11 Z12`` (letters and indices, separated by
spaces or ``*``). Observables that agree on every qubit where both act (qubit-wise
commuting) are measured together: ``groups`` puts them in as few settings as a greedy pass
finds, and ``basis`` is the letter each qubit is measured in. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from flux_quantum.errors import FluxQuantumError

PAULIS = "IXYZ"
MAX_OBSERVABLES = 64
_SPARSE = re.compile(r"([XYZ])(\d+)")


class ObservableError(FluxQuantumError, ValueError):
    """An observable a cut cannot take; the message names it."""


def parse_observable(text: object, qubits: int) -> str:
    """The dense Pauli string (one letter a qubit) of ``text``, or ObservableError."""
    accepted = (
        f"a Pauli string of {qubits} letters from IXYZ (the first for q[0]), or the "
        "qubits that are not I such as 'X11 Z12'"
    )
    if not isinstance(text, str) or not text.strip():
        raise ObservableError(f"observable {text!r} must be {accepted}")
    spelled = text.strip().upper()
    if len(spelled) == qubits and all(c in PAULIS for c in spelled):
        if set(spelled) == {"I"}:
            raise ObservableError(f"observable {text!r} is the identity, whose value is 1")
        return spelled
    letters = ["I"] * qubits
    for part in re.split(r"[\s*]+", spelled):
        match = _SPARSE.fullmatch(part)
        if match is None or int(match.group(2)) >= qubits or letters[int(match.group(2))] != "I":
            raise ObservableError(f"observable {text!r} must be {accepted}")
        letters[int(match.group(2))] = match.group(1)
    return "".join(letters)


def parse_observables(items: Sequence[object], qubits: int) -> tuple[str, ...]:
    """Dense Pauli strings of ``items``; at least one, at most ``MAX_OBSERVABLES``."""
    if not items or len(items) > MAX_OBSERVABLES:
        raise ObservableError(f"a cut takes 1 to {MAX_OBSERVABLES} observables, got {len(items)}")
    return tuple(parse_observable(item, qubits) for item in items)


def commute_qubitwise(a: str, b: str) -> bool:
    return all(x == "I" or y == "I" or x == y for x, y in zip(a, b, strict=True))


def groups(observables: Sequence[str]) -> list[list[int]]:
    """The observables' indices in measurement settings, first fit in the given order."""
    out: list[list[int]] = []
    for i, obs in enumerate(observables):
        for group in out:
            if all(commute_qubitwise(obs, observables[j]) for j in group):
                group.append(i)
                break
        else:
            out.append([i])
    return out


def basis(observables: Sequence[str], group: Sequence[int]) -> str:
    """The letter each qubit is measured in for ``group`` (Z where none acts)."""
    qubits = len(observables[group[0]])
    letters = ["Z"] * qubits
    for i in group:
        for q, letter in enumerate(observables[i]):
            if letter != "I":
                letters[q] = letter
    return "".join(letters)
