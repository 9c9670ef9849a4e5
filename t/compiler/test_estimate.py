"""The expected success of a compiled circuit on the device's published errors."""

from __future__ import annotations

import pytest

from flux_quantum.compiler import estimate, mapping
from flux_quantum.compiler.load import load
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.emulator import topology

BELL = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
HERON = ("cz", "id", "rz", "sx", "x")


def test_success_is_the_product_over_the_compiled_operations():
    errors = {"one": {"0": 0.01, "1": 0.01}, "two": {"0-1": 0.1}, "read": {"0": 0.05, "1": 0.05}}
    target = DeviceTarget.build(
        "d", 2, HERON, [(0, 1)], one_qubit_error=errors["one"],
        two_qubit_error=errors["two"], readout_error=errors["read"],
    )  # fmt: skip
    compiled = mapping.transpile(load(BELL), target)
    stats = estimate.statistics(compiled)
    ops = compiled.count_ops()
    sx = ops.get("sx", 0) + ops.get("x", 0)
    expected = 0.99**sx * 0.9 ** stats["two_qubit_gates"] * 0.95**2
    assert estimate.success(compiled, target) == pytest.approx(expected)
    assert stats["two_qubit_gates"] == 1 and stats["depth"] >= 3


def test_no_published_errors_no_estimate():
    target = DeviceTarget.build("d", 5, HERON, topology.line(5))
    assert estimate.success(mapping.transpile(load(BELL), target), target) is None
