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


def test_native_code_that_could_not_allocate_is_the_memory_limit(monkeypatch):
    """Under the worker's RLIMIT_AS, Qiskit's Rust parser may fail an allocation without
    a Python exception: PyO3 then raises SystemError with NATIVE_FAILED. That is the
    memory limit (MemoryError, the worker's sentence), not an invalid program."""
    import qiskit.qasm3

    from flux_quantum.compiler.load import NATIVE_FAILED

    for message in NATIVE_FAILED:

        def fails(text: str, message: str = message) -> None:
            raise SystemError(message)

        monkeypatch.setattr(qiskit.qasm3, "loads", fails)
        with pytest.raises(MemoryError):
            load("OPENQASM 3.0;\nqubit q;\nh q;\n")

    def other(text: str) -> None:
        raise SystemError("some other interpreter failure")

    monkeypatch.setattr(qiskit.qasm3, "loads", other)
    with pytest.raises(SystemError, match="some other"):
        load("OPENQASM 3.0;\nqubit q;\nh q;\n")
