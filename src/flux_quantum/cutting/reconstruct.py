"""Recombining a cut: expectation values and their standard errors from the counts.

Each program's counts give, for each observable of its setting, an estimate of the
fragment's factor: the mean over shots of ±1, the parity of the bits of the qubits where
the observable acts times the parity of its sign bits. The value of an observable is
``Σ_terms coefficient × Π_fragments factor``; its standard error comes from each
program's binomial variance ``(1 − E²)/(shots − 1)`` carried through that polynomial to
first order (the programs are independent; a program several terms share is counted
once, with the sum of its terms' derivatives). A bitstring's first character is the
program's first bit (``c[0]``), as the vendors' counts read. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flux_quantum.cutting.experiments import Experiments, Program
from flux_quantum.errors import FluxQuantumError


class ReconstructionError(FluxQuantumError, ValueError):
    """Counts that do not fit the cut's programs."""


@dataclass(frozen=True)
class Estimate:
    observable: str
    value: float
    standard_error: float

    def to_dict(self) -> dict[str, object]:
        return {
            "observable": self.observable,
            "value": self.value,
            "standard_error": self.standard_error,
        }


def factor(program: Program, observable: str, counts: Mapping[str, int]) -> tuple[float, float]:
    """(mean, variance of the mean) of the fragment's ±1 factor for ``observable``."""
    acting = [n for n, q in enumerate(program.qubits) if observable[q] != "I"]
    bits = acting + list(program.signs)
    shots = 0
    total = 0
    for bitstring, count in counts.items():
        if len(bitstring) <= max(bits, default=-1):
            raise ReconstructionError(
                f"a count's bitstring {bitstring!r} is shorter than the program's qubits"
            )
        parity = sum(bitstring[b] == "1" for b in bits) % 2
        total += -count if parity else count
        shots += count
    if shots == 0:
        raise ReconstructionError("a program has no shots")
    mean = total / shots
    variance = (1.0 - mean * mean) / max(shots - 1, 1)
    return mean, variance


def reconstruct(experiments: Experiments, counts: Sequence[Mapping[str, int]]) -> list[Estimate]:
    """The estimate of each observable from ``counts``, one per program in order."""
    if len(counts) != len(experiments.programs):
        raise ReconstructionError(
            f"{len(counts)} results for the cut's {len(experiments.programs)} programs"
        )
    index = experiments.program_index()
    fragments = len(experiments.plan.blocks)
    out = []
    for g, group in enumerate(experiments.groups):
        for o in group:
            observable = experiments.observables[o]
            factors: dict[int, tuple[float, float]] = {}
            value = 0.0
            gradient: dict[int, float] = {}
            for term in experiments.terms:
                ps = [index[(f, term.variants[f], g)] for f in range(fragments)]
                for p in ps:
                    if p not in factors:
                        factors[p] = factor(experiments.programs[p], observable, counts[p])
                means = [factors[p][0] for p in ps]
                value += term.coefficient * math.prod(means)
                for n, p in enumerate(ps):
                    others = math.prod(m for k, m in enumerate(means) if k != n)
                    gradient[p] = gradient.get(p, 0.0) + term.coefficient * others
            variance = sum(gradient[p] ** 2 * factors[p][1] for p in gradient)
            out.append((o, Estimate(observable, value, math.sqrt(variance))))
    return [estimate for _, estimate in sorted(out, key=lambda pair: pair[0])]
