"""Whether a circuit is written in a backend's instruction set (ISA), as IBM's service checks it.

This module owns the rule IBM's primitives apply to every circuit since 2024 (IBM's blog
"What are ISA circuits?", IBM Quantum docs "Optimize for target hardware"): each of its
operations must be one the backend's target has on those qubits: a basis gate on
qubits the device has, a two-qubit basis gate only on a pair of its coupling map, and
``measure``, ``reset``, ``barrier`` and ``delay`` anywhere. ``violation`` answers with
IBM's sentence for the first operation that breaks it, which a side refuses with IBM's
error code 1517 (``NON_ISA``). It must never hold state or run a program.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flux_quantum.emulator import openqasm
from flux_quantum.emulator.openqasm import ProgramError

CODE = 1517
NON_ISA = "Circuits do not match the target definition (non-ISA circuits)."
# What every IBM target has on every qubit beside its basis gates.
ANYWHERE = ("measure", "reset", "barrier", "delay")


def violation(
    source: str, basis: Sequence[str], coupling: Iterable[tuple[int, int]], qubits: int
) -> str | None:
    """Why the OpenQASM ``source`` is not an ISA circuit of a backend of ``qubits`` with
    ``basis`` gates coupled as ``coupling`` (undirected pairs), or None if it is:
    "The instruction h on qubits (0,) is not supported by the target." A program that
    does not parse is not one either."""
    pairs = {frozenset(p) for p in coupling}
    declared = openqasm.width(source)
    if declared > qubits:
        return f"The circuit declares {declared} qubits but the target has {qubits}."
    try:
        operations = openqasm.operations(source)
    except ProgramError as exc:
        return str(exc)
    for op in operations:
        if op.qubits is None:
            continue  # an index only known at run time (a loop's): the backend checks it then
        where = "(" + ", ".join(map(str, op.qubits)) + ("," if len(op.qubits) == 1 else "") + ")"
        known = op.name in ANYWHERE or op.name in basis
        outside = [q for q in op.qubits if q >= qubits]
        if outside:
            return (
                f"The instruction {op.name} on qubits {where} is not supported by the target: "
                f"it has qubits 0 to {qubits - 1}."
            )
        two = len(op.qubits) == 2 and op.name not in ANYWHERE
        if (
            not known
            or (two and frozenset(op.qubits) not in pairs)
            or (op.name not in ANYWHERE and len(op.qubits) > 2)
        ):
            return f"The instruction {op.name} on qubits {where} is not supported by the target."
    return None


def reason(detail: str) -> str:
    """IBM's failure text of a non-ISA job: its sentence, the first culprit, its code."""
    return f"{NON_ISA} -- {detail} -- https://ibm.biz/error_codes#{CODE}"
