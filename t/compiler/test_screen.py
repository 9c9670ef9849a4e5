"""The refusals that need no parser, and Braket's dialect brought to the standard library."""

from __future__ import annotations

import pytest

from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.load import load
from flux_quantum.compiler.screen import normalised, screen, version, width


def test_width_counts_registers_and_physical_qubits():
    assert width("OPENQASM 3.0;\nqubit[3] q;\nqubit r;\n// qubit[99] x;\n") == 4
    assert width("OPENQASM 2.0;\nqreg q[5];\n") == 5
    assert width("OPENQASM 3.0;\nh $7;\n") == 8
    assert version("OPENQASM 2.0;\n") == 2 and version("qubit q;") == 3


@pytest.mark.parametrize(
    "text, match, unfit",
    [
        ("OPENQASM 3.0;\n\0", "NUL bytes", False),
        (
            'OPENQASM 3.0;\ninclude "/etc/passwd";\n',
            'include "/etc/passwd" is not supported',
            False,
        ),
        ("OPENQASM 3.0;\nqubit[100000] q;\n", "declares 100000 qubits and dev has 156", True),
    ],
)
def test_screen_refuses_in_one_sentence(text, match, unfit):
    with pytest.raises(CompileError, match=match) as caught:
        screen(text, 156, "dev")
    assert caught.value.unfit is unfit


def test_a_braket_program_reads_as_the_standard_library():
    braket = "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nh q[0];\ncnot q[0], q[1];\n#pragma braket result probability\nc = measure q;\n"
    text = normalised(braket)
    assert 'include "stdgates.inc";' in text and "gate cnot a, b { cx a, b; }" in text
    assert "#pragma" not in text
    assert load(braket).count_ops() == {"h": 1, "cnot": 1, "measure": 2}


def test_a_loop_variable_named_i_is_not_braket_identity():
    program = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit q;\nfor int i in [0:2] { x q; }\n'
    assert "gate i " not in normalised(program)
    assert load(program).num_qubits == 1
