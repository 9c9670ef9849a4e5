from __future__ import annotations

import pytest
from cut_circuits import chain

from flux_quantum.cutting.circuit import parse_circuit
from flux_quantum.cutting.plan import PlanError, plan_cut


def test_a_chain_is_cut_once_in_the_middle() -> None:
    plan = plan_cut(parse_circuit(chain(24)), 20)
    assert len(plan.cuts) == 1
    assert [len(b) for b in plan.blocks] == [12, 12]
    assert plan.widths == (13, 13)  # one ancilla each for the cut gate


def test_a_circuit_that_fits_is_not_cut() -> None:
    plan = plan_cut(parse_circuit(chain(5)), 5)
    assert plan.cuts == () and plan.blocks == (tuple(range(5)),)


def test_three_blocks_when_two_do_not_fit() -> None:
    # A middle block holds an ancilla for each of its two cut gates.
    plan = plan_cut(parse_circuit(chain(12)), 6)
    assert len(plan.blocks) == 3 and len(plan.cuts) == 2
    assert max(plan.widths) <= 6
    assert len(plan_cut(parse_circuit(chain(12)), 5).blocks) == 4


def test_fewest_cuts_wins_over_balance() -> None:
    # Qubits 0-3 interact a lot, 3-4 once, 4-5 a lot: the cut goes between 3 and 4.
    text = "qubit[6] q;\n" + "cz q[0], q[1];\ncz q[1], q[2];\ncz q[2], q[3];\n" * 2
    text += "cz q[3], q[4];\ncz q[4], q[5];\ncz q[4], q[5];\n"
    plan = plan_cut(parse_circuit(text), 5)
    assert plan.blocks == ((0, 1, 2, 3), (4, 5))


def test_a_gate_that_cannot_be_cut_is_never_cut() -> None:
    text = "qubit[4] q;\nswap q[1], q[2];\ncz q[0], q[1];\ncz q[2], q[3];\n"
    with pytest.raises(PlanError, match="no cut of cz, cx or rzz gates"):
        plan_cut(parse_circuit(text), 3)


def test_too_many_cuts_is_refused_with_what_would_do() -> None:
    with pytest.raises(PlanError, match="need 4 cut gates, over the limit of 3"):
        plan_cut(parse_circuit(chain(12)), 4)
