"""What a compiled circuit is expected to keep of its result on its device.

This module owns ``success``: the product, over the compiled circuit's operations on
their physical qubits, of one minus the device's published error for that gate there
(one-qubit gates per qubit, two-qubit gates per coupled pair, ``measure`` by the
qubit's readout error), with ``statistics`` (two-qubit gates and depth after routing)
beside it. An operation with no published error counts as exact; a device that
publishes no errors gives None. It reads a circuit the mapper made and nothing else.
"""

from __future__ import annotations

from typing import Any

from flux_quantum.compiler.target import DeviceTarget

_FREE = ("barrier", "delay")
# Done in software by a change of frame (IBM's and IQM's z rotations): no error.
_VIRTUAL = ("rz",)


def success(compiled: Any, target: DeviceTarget) -> float | None:
    """The expected success of ``compiled`` (a circuit on ``target``'s qubits), or None."""
    if not (target.one_qubit_error or target.two_qubit_error or target.readout_error):
        return None
    one, two, readout = (
        dict(target.one_qubit_error),
        dict(target.two_qubit_error),
        dict(target.readout_error),
    )
    index = {bit: i for i, bit in enumerate(compiled.qubits)}
    kept = 1.0
    for instruction in compiled.data:
        name = instruction.operation.name
        if name in _FREE or name in _VIRTUAL:
            continue
        qubits = [index[q] for q in instruction.qubits]
        key = "-".join(map(str, sorted(qubits)))
        if name == "measure":
            error = readout.get(key)
        elif len(qubits) == 2:
            error = two.get(key)
        elif len(qubits) == 1:
            error = one.get(key)
        else:
            error = None
        if error is not None:
            kept *= 1.0 - error
    return kept


def statistics(compiled: Any) -> dict[str, int]:
    """The compiled circuit's two-qubit gates, depth and operations by name."""
    two = sum(
        1
        for instruction in compiled.data
        if len(instruction.qubits) == 2 and instruction.operation.name not in _FREE
    )
    ops = {str(name): int(count) for name, count in compiled.count_ops().items()}
    return {"two_qubit_gates": two, "depth": int(compiled.depth()), "operations": sum(ops.values())}
