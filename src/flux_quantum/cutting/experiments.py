"""The subexperiments of a cut: each fragment's programs, and the terms that combine them.

A cut gate is replaced by a quasi-probability decomposition of its channel into six
products of local operations (Mitarai and Fujii, New J. Phys. 23 023021, 2021): for
``U = exp(i t Z⊗Z)``, with ``c = cos t`` and ``s = sin t``,

    U ρ U† = c² ρ + s² (Z⊗Z) ρ (Z⊗Z) + cs [M⊗(S† − S) + (S† − S)⊗M](ρ)

where ``S`` stands for conjugation by the phase gate ``s`` (``S†`` by ``sdg``) and ``M`` for
a Z measurement whose outcome multiplies the estimate by ±1. ``rzz(φ)`` is ``t = −φ/2``;
``cz`` is ``t = π/4`` followed by ``s`` on both qubits; ``cx`` is ``cz`` between
Hadamards on its target. ``M`` is deferred onto an ancilla (a ``cx`` from the qubit onto
a fresh qubit measured at the end), so every program measures all its qubits at its end
only, which every device runs. A term of the whole cut is one choice per cut gate: its
coefficient is the product of the choices', and each fragment runs the local operations
its side of the choices names. Programs that are the same circuit (same fragment, same
local operations, same measurement setting) are made once. Standard library only, pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.cutting.circuit import Circuit, fragment_text
from flux_quantum.cutting.observables import basis, groups
from flux_quantum.cutting.plan import Plan

MEASURE = "m"
Op = tuple[str, ...]  # local gates on one qubit, "m": measured onto an ancilla
_BASIS_GATES = {"X": ("h",), "Y": ("sdg", "h"), "Z": ()}


def choices(name: str, params: Sequence[float]) -> list[tuple[float, Op, Op]]:
    """The decomposition of a cut gate: (coefficient, operation on its first qubit,
    operation on its second qubit); terms of coefficient 0 left out."""
    t = math.pi / 4 if name in ("cz", "cx") else -params[0] / 2
    c, s = math.cos(t), math.sin(t)
    base: list[tuple[float, Op, Op]] = [
        (c * c, (), ()),
        (s * s, ("z",), ("z",)),
        (c * s, (MEASURE,), ("sdg",)),
        (-c * s, (MEASURE,), ("s",)),
        (c * s, ("sdg",), (MEASURE,)),
        (-c * s, ("s",), (MEASURE,)),
    ]
    out = []
    for coefficient, a, b in base:
        if abs(coefficient) < 1e-12:
            continue
        if name in ("cz", "cx"):
            a, b = (*a, "s"), (*b, "s")
        if name == "cx":
            b = ("h", *b, "h")
        out.append((coefficient, a, b))
    return out


@dataclass(frozen=True)
class Program:
    """One subexperiment: fragment ``fragment`` with its ``variant``-th choice of local
    operations, measured in setting ``group``. ``qubits``: the circuit's qubits its first
    bits measure; ``signs``: the bits (ancillas of measured terms) that multiply the
    estimate by ±1."""

    fragment: int
    variant: int
    group: int
    qubits: tuple[int, ...]
    signs: tuple[int, ...]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "fragment": self.fragment,
            "variant": self.variant,
            "group": self.group,
            "qubits": list(self.qubits),
            "signs": list(self.signs),
            "text": self.text,
        }


@dataclass(frozen=True)
class Term:
    """One product of the decomposition: its coefficient and each fragment's variant."""

    coefficient: float
    variants: tuple[int, ...]


@dataclass(frozen=True)
class Experiments:
    """Everything a cut runs and recombines."""

    qubits: int
    plan: Plan
    cut_gates: tuple[dict[str, Any], ...]
    observables: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    programs: tuple[Program, ...]
    terms: tuple[Term, ...]
    variants: tuple[tuple[tuple[Op, ...], ...], ...] = field(default=())

    @property
    def overhead(self) -> float:
        """The sampling overhead: the sum of the coefficients' magnitudes, squared (the
        factor on the shots needed for a given standard error)."""
        return sum(abs(t.coefficient) for t in self.terms) ** 2

    def program_index(self) -> dict[tuple[int, int, int], int]:
        """(fragment, variant, group) -> position in ``programs``."""
        return {(p.fragment, p.variant, p.group): i for i, p in enumerate(self.programs)}


def build_experiments(circuit: Circuit, plan: Plan, observables: Sequence[str]) -> Experiments:
    """The programs and terms of cutting ``circuit`` as ``plan`` says, for ``observables``."""
    settings = [tuple(g) for g in groups(observables)]
    bases = [basis(observables, g) for g in settings]
    gate_choices = [choices(circuit.gates[i].name, circuit.gates[i].params) for i in plan.cuts]
    block_of = {q: b for b, block in enumerate(plan.blocks) for q in block}
    # Per fragment: the cut gates touching it (positions in plan.cuts), and which side.
    touching: list[list[tuple[int, int]]] = [[] for _ in plan.blocks]
    for k, i in enumerate(plan.cuts):
        a, b = circuit.gates[i].qubits
        touching[block_of[a]].append((k, 0))
        touching[block_of[b]].append((k, 1))
    variant_ids: list[dict[tuple[Op, ...], int]] = [{} for _ in plan.blocks]
    terms: list[Term] = []
    for picked in itertools.product(*(range(len(c)) for c in gate_choices)):
        coefficient = math.prod(gate_choices[k][j][0] for k, j in enumerate(picked))
        chosen: list[int] = []
        for f, sides in enumerate(touching):
            ops = tuple(_side(gate_choices[k][picked[k]], side) for k, side in sides)
            chosen.append(variant_ids[f].setdefault(ops, len(variant_ids[f])))
        terms.append(Term(coefficient, tuple(chosen)))
    programs = []
    for f in range(len(plan.blocks)):
        for ops, v in variant_ids[f].items():
            for g, setting in enumerate(bases):
                programs.append(
                    _program(circuit, plan, f, v, g, ops, touching[f], block_of, setting)
                )
    cut_gates = tuple(
        {
            "position": i,
            "gate": circuit.gates[i].name,
            "qubits": list(circuit.gates[i].qubits),
            "params": list(circuit.gates[i].params),
        }
        for i in plan.cuts
    )
    variants = tuple(tuple(ids) for ids in variant_ids)
    return Experiments(
        circuit.qubits,
        plan,
        cut_gates,
        tuple(observables),
        tuple(settings),
        tuple(programs),
        tuple(terms),
        variants,
    )


def _side(choice: tuple[float, Op, Op], side: int) -> Op:
    return choice[1] if side == 0 else choice[2]


def _program(
    circuit: Circuit,
    plan: Plan,
    f: int,
    v: int,
    g: int,
    ops: tuple[Op, ...],
    sides: list[tuple[int, int]],
    block_of: dict[int, int],
    setting: str,
) -> Program:
    block = plan.blocks[f]
    local = {q: n for n, q in enumerate(block)}
    ancilla = {k: len(block) + n for n, (k, _) in enumerate(sides)}
    op_of = {plan.cuts[k]: (k, side, ops[n]) for n, (k, side) in enumerate(sides)}
    body: list[str] = []
    signs: list[int] = []
    for i, gate in enumerate(circuit.gates):
        if i in op_of:
            k, side, op = op_of[i]
            qubit = local[gate.qubits[side]]
            for name in op:
                if name == MEASURE:
                    body.append(f"cx q[{qubit}], q[{ancilla[k]}];")
                    signs.append(ancilla[k])
                else:
                    body.append(f"{name} q[{qubit}];")
        elif all(block_of[q] == f for q in gate.qubits):
            body.append(gate.text(lambda q: f"q[{local[q]}]"))
    for q in block:
        body.extend(f"{name} q[{local[q]}];" for name in _BASIS_GATES[setting[q]])
    width = len(block) + len(sides)
    return Program(f, v, g, tuple(block), tuple(signs), fragment_text(width, body))
