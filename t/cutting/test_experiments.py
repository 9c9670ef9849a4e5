"""The decomposition is exact: recombining the fragments' exact distributions gives the
whole circuit's exact expectation values, for every gate a cut takes."""

from __future__ import annotations

import pytest
from cut_circuits import chain, chain_x, layered

from flux_quantum.cutting import exact
from flux_quantum.cutting.circuit import parse_circuit
from flux_quantum.cutting.experiments import build_experiments, choices
from flux_quantum.cutting.plan import plan_cut
from flux_quantum.cutting.reconstruct import reconstruct

OBSERVABLES = ["XIIYZI", "ZZZZZZ", "IIXXII", "IYIIXI", "XXXXXX", "IIZZII", "IIYYII"]


@pytest.mark.parametrize(
    ("gates", "seed"),
    [(("cz",), 1), (("cx",), 2), (("rzz(0.7)",), 3), (("cz", "cx", "rzz(-1.9)"), 4)],
)
def test_exact_recombination(gates: tuple[str, ...], seed: int) -> None:
    circuit = parse_circuit(layered(6, 2, seed, gates))
    plan = plan_cut(circuit, 5)
    assert len(plan.cuts) == 2
    experiments = build_experiments(circuit, plan, OBSERVABLES)
    counts = [exact.probabilities(parse_circuit(p.text)) for p in experiments.programs]
    got = [e.value for e in reconstruct(experiments, counts)]
    assert got == pytest.approx(exact.expectations(circuit, OBSERVABLES), abs=1e-9)


def test_three_fragments() -> None:
    circuit = parse_circuit(layered(9, 1, 5))
    plan = plan_cut(circuit, 5)
    assert len(plan.blocks) == 3
    observables = ["XXXXXXXXX", "IIZZZZIII", "YIIIIIIIY"]
    experiments = build_experiments(circuit, plan, observables)
    counts = [exact.probabilities(parse_circuit(p.text)) for p in experiments.programs]
    got = [e.value for e in reconstruct(experiments, counts)]
    assert got == pytest.approx(exact.expectations(circuit, observables), abs=1e-9)


def test_exact_matches_the_closed_form() -> None:
    circuit = parse_circuit(chain(8))
    observables = ["I" * i + "X" + "I" * (7 - i) for i in range(8)]
    assert exact.expectations(circuit, observables) == pytest.approx(
        [chain_x(8, i) for i in range(8)], abs=1e-12
    )


def test_counts_of_the_decomposition() -> None:
    assert [round(abs(c), 12) for c, _, _ in choices("cz", ())] == [0.5] * 6
    assert len(choices("rzz", (0.0,))) == 1  # rzz(0) is the identity: one term
    circuit = parse_circuit(chain(24))
    plan = plan_cut(circuit, 20)
    experiments = build_experiments(
        circuit, plan, ["I" * 11 + "X" + "I" * 12, "I" * 11 + "ZZ" + "I" * 11]
    )
    # 5 distinct local operations a side, 2 settings, 2 fragments; overhead 3^2.
    assert len(experiments.programs) == 5 * 2 * 2
    assert experiments.overhead == pytest.approx(9.0)
    widths = {p.text.split("qubit[")[1].split("]")[0] for p in experiments.programs}
    assert widths == {"13"}
