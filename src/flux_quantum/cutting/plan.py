"""Where to cut: the qubits each fragment holds and the gates cut between fragments.

A plan splits the circuit's qubits, in index order, into blocks of consecutive qubits
(reorder the register to bring qubits that interact together); every gate between two
blocks is cut. A cut gate costs its fragments one ancilla qubit each (the measurement
term of its decomposition is deferred onto it), so a block's width is its qubits plus the
cut gates touching it, and every block's width must be at most ``max_width``. Among the
plans that fit, ``plan_cut`` takes the one with the fewest cut gates (each multiplies the
subexperiments by 6 and the shots needed for one standard error by 9), then the fewest
blocks, then the narrowest widest block; it is exact (dynamic programming over the
split points). Only ``cz``, ``cx`` and ``rzz`` can be cut; a plan that would cut another
gate is not considered. Standard library only, and pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from flux_quantum.cutting.circuit import Circuit, Gate
from flux_quantum.errors import FluxQuantumError

CUTTABLE: tuple[str, ...] = ("cz", "cx", "rzz")
MAX_CUTS = 3


class PlanError(FluxQuantumError, ValueError):
    """No cut fits; the message says what would."""


@dataclass(frozen=True)
class Plan:
    """Blocks of consecutive qubits, the positions of the cut gates in the circuit, and
    each block's width (its qubits and its ancillas)."""

    blocks: tuple[tuple[int, ...], ...]
    cuts: tuple[int, ...]
    widths: tuple[int, ...]

    def block_of(self, qubit: int) -> int:
        return next(b for b, block in enumerate(self.blocks) if qubit in block)

    def to_dict(self) -> dict[str, object]:
        return {
            "blocks": [list(b) for b in self.blocks],
            "cuts": list(self.cuts),
            "widths": list(self.widths),
        }


def plan_cut(circuit: Circuit, max_width: int, max_cuts: int = MAX_CUTS) -> Plan:
    """The best plan whose fragments are at most ``max_width`` qubits wide."""
    n = circuit.qubits
    if max_width < 1:
        raise PlanError(f"max_width must be at least 1, got {max_width}")
    multi = circuit.two_qubit()
    # best[j]: (cuts, blocks, widest, previous split) for the qubits [0, j).
    best: list[tuple[int, int, int, int] | None] = [None] * (n + 1)
    best[0] = (0, 0, 0, -1)
    for j in range(1, n + 1):
        for i in range(max(0, j - max_width), j):
            before = best[i]
            if before is None:
                continue
            block = _block(multi, i, j)
            if block is None:
                continue
            crossing, touching = block
            width = (j - i) + touching
            if width > max_width:
                continue
            candidate = (before[0] + crossing, before[1] + 1, max(before[2], width), i)
            current = best[j]
            if current is None or candidate[:3] < current[:3]:
                best[j] = candidate
    final = best[n]
    if final is None:
        raise PlanError(
            f"no cut of cz, cx or rzz gates between blocks of consecutive qubits fits in "
            f"{max_width} qubits: reorder the register to bring interacting qubits together, "
            "or allow wider fragments"
        )
    if final[0] > max_cuts:
        raise PlanError(
            f"fragments of at most {max_width} qubits need {final[0]} cut gates, over the "
            f"limit of {max_cuts} (each multiplies the subexperiments by 6): allow wider "
            "fragments"
        )
    splits = [n]
    while splits[-1] > 0:
        entry = best[splits[-1]]
        assert entry is not None
        splits.append(entry[3])
    splits.reverse()
    blocks = tuple(tuple(range(a, b)) for a, b in zip(splits, splits[1:], strict=False))
    cuts = tuple(i for i, gate in multi if len({_index(blocks, q) for q in gate.qubits}) > 1)
    widths = tuple(
        len(block) + sum(1 for i in cuts if set(circuit.gates[i].qubits) & set(block))
        for block in blocks
    )
    return Plan(blocks, cuts, widths)


def _index(blocks: tuple[tuple[int, ...], ...], qubit: int) -> int:
    return next(b for b, block in enumerate(blocks) if qubit in block)


def _block(multi: list[tuple[int, Gate]], start: int, end: int) -> tuple[int, int] | None:
    """For the block [start, end) after blocks ending at ``start``: the gates cut
    between it and the blocks before it, and the gates cut that touch it at all; None
    when a gate that cannot be cut crosses its edges."""
    crossing = touching = 0
    for _, gate in multi:
        qubits = gate.qubits
        inside = [start <= q < end for q in qubits]
        if all(inside) or not any(inside):
            continue
        if gate.name not in CUTTABLE or len(qubits) != 2:
            return None
        touching += 1
        if min(qubits) < start:
            crossing += 1
    return crossing, touching
