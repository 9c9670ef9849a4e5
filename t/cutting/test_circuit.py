from __future__ import annotations

import math

import pytest

from flux_quantum.cutting.circuit import CircuitError, Gate, parse_circuit


def test_reads_the_subset_and_drops_final_measurements() -> None:
    circuit = parse_circuit(
        """OPENQASM 3.0;
        include "stdgates.inc";
        qubit[3] q; bit[3] c;
        h q[0];  // a comment
        rz(pi/2) q[1];
        cnot q[0],
          q[1];
        rzz(-2*pi/3 + 0.5) q[1], q[2];
        c = measure q;
        """
    )
    assert circuit.qubits == 3
    assert circuit.gates == (
        Gate("h", (0,)),
        Gate("rz", (1,), (math.pi / 2,)),
        Gate("cx", (0, 1)),
        Gate("rzz", (1, 2), (-2 * math.pi / 3 + 0.5,)),
    )


def test_reads_openqasm_2_registers() -> None:
    circuit = parse_circuit(
        'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg r[2];\ncreg m[2];\ncz r[0], r[1];\nmeasure r -> m;\n'
    )
    assert circuit.gates == (Gate("cz", (0, 1)),)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("qubit[2] q;\nfoo q[0];\n", "line 2: gate 'foo' is not one a cut takes"),
        ("qubit[2] q;\nqubit[1] r;\n", "line 2: a circuit to cut declares one qubit register"),
        ("qubit[2] q;\nh q[2];\n", "line 2: q[2] is past the register's 2 qubits"),
        (
            "qubit[2] q;\nbit[2] c;\nc = measure q;\nh q[0];\n",
            "line 4: a circuit to cut measures only at its end",
        ),
        ("qubit[2] q;\nrx(theta) q[0];\n", "line 2: parameter 'theta' is not a constant"),
        ("qubit[2] q;\ncz q[0], q[0];\n", "line 2: cz acts on 2 distinct qubit(s)"),
        ("qubit[2] q;\nh q[0]\n", "line 2: 'h q[0]' does not end with ';'"),
        ("h q[0];\n", "line 1: 'h q[0]' comes before the qubit register"),
        ("OPENQASM 3.0;\n", "the circuit declares no qubit register"),
    ],
)
def test_refuses_with_the_line(text: str, says: str) -> None:
    with pytest.raises(CircuitError) as info:
        parse_circuit(text)
    assert str(info.value).startswith(says)
