"""The transpile onto a device: basis, coupling, layout, cached targets."""

from __future__ import annotations

import pytest

from flux_quantum.compiler import mapping
from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.load import load
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.emulator import isa, topology

GHZ = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[4] q;\nbit[4] c;\nh q[0];\ncx q[0], q[3];\ncx q[3], q[1];\ncx q[1], q[2];\nc = measure q;\n'
HERON = ("cz", "id", "rz", "sx", "x")


def test_a_circuit_is_mapped_onto_the_basis_and_the_couplers():
    target = DeviceTarget.build("line", 5, HERON, topology.line(5))
    compiled = mapping.transpile(load(GHZ), target)
    names = set(compiled.count_ops())
    assert names <= {*HERON, "measure", "barrier"}
    for instruction in compiled.data:
        if len(instruction.qubits) == 2:
            a, b = (compiled.find_bit(q).index for q in instruction.qubits)
            assert abs(a - b) == 1  # coupled on a line
    layout = mapping.layout(compiled, 4)
    assert layout is not None and len(set(layout)) == 4


def test_the_target_is_built_once_per_calibration():
    first = DeviceTarget.build("fez", 156, HERON, topology.heavy_hex(156), calibration="a")
    again = DeviceTarget.build("fez", 156, HERON, topology.heavy_hex(156), calibration="a")
    assert mapping.qiskit_target(first) is mapping.qiskit_target(again)
    later = DeviceTarget.build("fez", 156, HERON, topology.heavy_hex(156), calibration="b")
    assert mapping.qiskit_target(later) is not mapping.qiskit_target(first)


def test_errors_steer_the_layout_to_the_better_qubits():
    pairs = topology.line(6)
    noisy = {str(q): 0.2 for q in range(3)}
    target = DeviceTarget.build(
        "d", 6, HERON, pairs, one_qubit_error=noisy,
        two_qubit_error={"0-1": 0.3, "1-2": 0.3, "3-4": 0.001, "4-5": 0.001},
        readout_error={str(q): (0.2 if q < 3 else 0.01) for q in range(6)}, calibration="x",
    )  # fmt: skip
    bell = GHZ.replace("qubit[4]", "qubit[2]").replace("bit[4]", "bit[2]")
    bell = bell.replace("cx q[0], q[3];\ncx q[3], q[1];\ncx q[1], q[2];\n", "cx q[0], q[1];\n")
    compiled = mapping.transpile(load(bell), target)
    assert set(mapping.layout(compiled, 2) or ()) <= {3, 4, 5}


def test_a_basis_without_a_two_qubit_gate_cannot_take_a_cx():
    target = DeviceTarget.build("ones", 5, ("rz", "sx", "x"), topology.line(5))
    with pytest.raises(CompileError, match="cannot be mapped onto ones") as caught:
        mapping.transpile(load(GHZ), target)
    assert caught.value.unfit


def test_what_it_writes_passes_ibms_isa_check():
    from flux_quantum.compiler.program import _default_writer

    pairs = topology.heavy_hex(127)
    assert pairs is not None
    target = DeviceTarget.build("eagle", 127, ("ecr", "id", "rz", "sx", "x"), pairs)
    text = _default_writer(mapping.transpile(load(GHZ), target))
    assert isa.violation(text, target.basis, pairs, 127) is None
    assert isa.violation(GHZ, target.basis, pairs, 127) is not None
