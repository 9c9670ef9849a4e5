"""Both OpenQASM versions read by Qiskit's parsers; a refusal is one sentence."""

from __future__ import annotations

import pytest

from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.load import load


def test_openqasm_2_with_qelib1_and_3_with_stdgates():
    two = 'OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncreg c[2];\nh q[0];\ncx q[0],q[1];\nmeasure q -> c;\n'
    three = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
    assert load(two).count_ops() == load(three).count_ops() == {"h": 1, "cx": 1, "measure": 2}


@pytest.mark.parametrize(
    "text, match",
    [
        (
            "OPENQASM 3.0;\ngate g a { g a; }\nqubit q;\ng q;\n",
            "gate g is defined in terms of itself",
        ),
        ("OPENQASM 3.0;\nqubit[2] q;\nfoo q[0];\n", "not valid OpenQASM 3"),
        ("OPENQASM 4.0;\nqubit q;\n", "OPENQASM 4 is not a version this site reads"),
    ],
)
def test_a_program_no_parser_reads(text, match):
    with pytest.raises(CompileError, match=match) as caught:
        load(text)
    assert not caught.value.unfit and "\n" not in str(caught.value)
