"""One program compiled for one device: the steps in order and the bound on loops."""

from __future__ import annotations

import json

import pytest

from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.program import MAX_OPERATIONS, compile_program
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.emulator import topology
from flux_quantum.protocol.vendors import CHECKED, MAPPED

BELL = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
LINE = DeviceTarget.build(
    "line", 5, ("cz", "id", "rz", "sx", "x"), topology.line(5), calibration="k"
)


def test_mapped_gives_the_written_text_its_layout_and_calibration():
    compiled = compile_program(BELL, LINE, MAPPED)
    assert compiled.form == MAPPED and compiled.calibration == "k"
    assert compiled.layout is not None and len(compiled.layout) == 2 and compiled.changed
    assert "cz $" in compiled.text and "h " not in compiled.text
    assert compiled.summary()["two_qubit_gates"] == 1


def test_checked_sends_the_program_as_written():
    compiled = compile_program(BELL, DeviceTarget.build("sim", 30), MAPPED)
    assert compiled.form == CHECKED and compiled.text == BELL and not compiled.changed
    assert compile_program(BELL, LINE, CHECKED).text == BELL


def test_a_writer_named_by_the_descriptor_writes_the_vendors_form():
    garnet = DeviceTarget.build("garnet", 20, ("r", "cz"), topology.GARNET)
    far = BELL.replace("qubit[2]", "qubit[20]").replace("cx q[0], q[1]", "cx q[0], q[19]")
    far = far.replace("c = measure q;", "c[0] = measure q[0];\nc[1] = measure q[19];")
    compiled = compile_program(far, garnet, MAPPED, "flux_quantum.vendors.iqm.native:write")
    circuit = json.loads(compiled.text)
    names = {i["name"] for i in circuit["instructions"]}
    assert names <= {"prx", "cz", "measure", "barrier"}
    coupled = {frozenset((f"QB{a + 1}", f"QB{b + 1}")) for a, b in topology.GARNET}
    assert all(
        frozenset(i["qubits"]) in coupled for i in circuit["instructions"] if i["name"] == "cz"
    )
    keys = [i["args"]["key"] for i in circuit["instructions"] if i["name"] == "measure"]
    assert keys == ["c_0", "c_1"]  # the program's own bits, bit 0 first


@pytest.mark.parametrize("loops", [1, 6])
def test_loops_beyond_the_bound_are_refused(loops):
    heads = "".join(f"for int i{k} in [0:99999] {{ " for k in range(loops))
    count = 2_000_000_000 if loops == 1 else 99999
    heads = heads.replace("99999", str(count - 1)) if loops == 1 else heads
    program = f'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit q;\n{heads}x q;{"}" * loops}\n'
    with pytest.raises(CompileError, match=f"limit of {MAX_OPERATIONS:,}"):
        compile_program(program, LINE, MAPPED)


def test_a_program_wider_than_the_device_is_unfit():
    with pytest.raises(CompileError, match="declares 6 qubits and line has 5") as caught:
        compile_program(BELL.replace("qubit[2]", "qubit[6]"), LINE, MAPPED)
    assert caught.value.unfit


def test_a_vendor_dialect_goes_as_written_where_the_vendor_compiles():
    braket = "OPENQASM 3.0;\nqubit[2] q;\niswap q[0], q[1];\n"
    sim = DeviceTarget.build("sim", 30)
    assert compile_program(braket, sim, CHECKED).text == braket
    with pytest.raises(CompileError, match="gate 'iswap' is not defined"):
        compile_program(braket, LINE, MAPPED)


def test_a_recursive_gate_is_refused_wherever_it_goes():
    recursive = "OPENQASM 3.0;\ngate g a { g a; }\nqubit q;\ng q;\n"
    for target in (LINE, DeviceTarget.build("sim", 30)):
        with pytest.raises(CompileError, match="gate g is defined in terms of itself"):
            compile_program(recursive, target, MAPPED)
