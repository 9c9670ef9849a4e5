"""Recombination from sampled counts: within a few standard errors, errors that shrink
with the shots, and counts that do not fit refused."""

from __future__ import annotations

import random

import pytest
from cut_circuits import layered

from flux_quantum.cutting import exact
from flux_quantum.cutting.circuit import parse_circuit
from flux_quantum.cutting.experiments import build_experiments
from flux_quantum.cutting.plan import plan_cut
from flux_quantum.cutting.reconstruct import ReconstructionError, factor, reconstruct

OBSERVABLES = ["XIIYZI", "IIXXII", "IIZZII"]


def _sampled(shots: int, seed: int) -> tuple[list[float], list[float], list[float]]:
    circuit = parse_circuit(layered(6, 1, 7))
    experiments = build_experiments(circuit, plan_cut(circuit, 5), OBSERVABLES)
    rng = random.Random(seed)
    counts = []
    for program in experiments.programs:
        dist = exact.probabilities(parse_circuit(program.text))
        drawn = rng.choices(list(dist), weights=list(dist.values()), k=shots)
        counts.append({b: drawn.count(b) for b in set(drawn)})
    estimates = reconstruct(experiments, counts)
    return (
        [e.value for e in estimates],
        [e.standard_error for e in estimates],
        exact.expectations(circuit, OBSERVABLES),
    )


def test_sampled_values_within_four_standard_errors() -> None:
    values, errors, exact_values = _sampled(2000, seed=11)
    for value, error, truth in zip(values, errors, exact_values, strict=True):
        assert 0 < error < 0.2
        assert abs(value - truth) <= 4 * error


def test_standard_error_shrinks_as_one_over_root_shots() -> None:
    _, few, _ = _sampled(500, seed=3)
    _, many, _ = _sampled(4500, seed=3)
    for a, b in zip(few, many, strict=True):
        assert a / b == pytest.approx(3.0, rel=0.2)


def test_factor_reads_signs_and_first_bit_first() -> None:
    circuit = parse_circuit(layered(4, 1, 2))
    experiments = build_experiments(circuit, plan_cut(circuit, 3), ["ZIII"])
    program = next(p for p in experiments.programs if p.signs and p.fragment == 0)
    # Qubit 0 is bit 0 (the first character); the ancilla's bit flips the sign.
    width = len(program.text.split("qubit[")[1].split("]")[0])
    assert width
    sign = program.signs[0]
    zero = ["0"] * (sign + 1)
    one_sign = zero.copy()
    one_sign[sign] = "1"
    assert factor(program, "ZIII", {"".join(zero): 3})[0] == 1.0
    assert factor(program, "ZIII", {"".join(one_sign): 3})[0] == -1.0
    flipped = one_sign.copy()
    flipped[0] = "1"
    assert factor(program, "ZIII", {"".join(flipped): 3})[0] == 1.0


def test_wrong_number_of_results() -> None:
    circuit = parse_circuit(layered(4, 1, 2))
    experiments = build_experiments(circuit, plan_cut(circuit, 3), ["ZIII"])
    with pytest.raises(ReconstructionError, match=r"1 results for the cut's \d+ programs"):
        reconstruct(experiments, [{"0000": 1}])
