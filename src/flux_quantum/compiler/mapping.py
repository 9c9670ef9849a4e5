"""A program mapped onto a device with Qiskit's transpiler.

This module owns the Qiskit ``Target`` built from a ``DeviceTarget`` (its basis gates
with ``measure``, ``reset`` and ``delay`` on every qubit, its coupling map in both
directions, and the published gate and readout errors as the instructions' errors, so
that layout prefers the better qubits), cached per device and calibration in the worker
that built it, and ``transpile``: layout, routing and translation to the basis at
optimisation level 2, with a fixed seed, so that the same program on the same
calibration compiles to the same circuit. What the transpiler cannot do on the device
(a gate its basis cannot express, qubits its coupling map cannot join) is a
``CompileError`` with ``unfit`` set: another device may take the program.
"""

from __future__ import annotations

from typing import Any

from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.target import DeviceTarget

SEED = 11
LEVEL = 2  # Qiskit's default: noise-aware layout, a third fewer two-qubit gates than 1
_CACHE_SIZE = 32
_built: dict[tuple[str, str], tuple[DeviceTarget, Any]] = {}


def qiskit_target(target: DeviceTarget) -> Any:
    """The Qiskit ``Target`` of ``target``, built once per device and calibration."""
    cached = _built.get(target.key)
    if cached is not None and cached[0] == target:
        return cached[1]
    from qiskit.circuit import Measure
    from qiskit.transpiler import CouplingMap, InstructionProperties, Target

    pairs = target.pairs
    coupling = None
    if pairs is not None:
        coupling = CouplingMap([list(p) for a, b in pairs for p in ((a, b), (b, a))])
    built = Target.from_configuration(
        basis_gates=[*target.basis, "measure", "reset", "delay"],
        num_qubits=target.qubits,
        coupling_map=coupling,
    )
    one, two = dict(target.one_qubit_error), dict(target.two_qubit_error)
    for name in target.basis:
        if name not in built.operation_names:
            continue
        for qargs in list(built.qargs_for_operation_name(name) or ()):
            key = "-".join(map(str, sorted(qargs)))
            error = (two if len(qargs) == 2 else one).get(key)
            if error is not None:
                built.update_instruction_properties(name, qargs, InstructionProperties(error=error))
    for qubit, error in target.readout_error:
        if int(qubit) < target.qubits:
            built.update_instruction_properties(
                Measure().name, (int(qubit),), InstructionProperties(error=error)
            )
    if len(_built) >= _CACHE_SIZE:
        _built.pop(next(iter(_built)))
    _built[target.key] = (target, built)
    return built


def transpile(circuit: Any, target: DeviceTarget) -> Any:
    """``circuit`` mapped onto ``target`` (its layout kept on the result)."""
    from qiskit import transpile as qiskit_transpile
    from qiskit.transpiler.exceptions import TranspilerError

    if circuit.num_qubits > target.qubits:
        raise CompileError(
            f"the program needs {circuit.num_qubits} qubits and {target.device} has "
            f"{target.qubits}",
            unfit=True,
        )
    try:
        return qiskit_transpile(
            circuit,
            target=qiskit_target(target),
            optimization_level=LEVEL,
            seed_transpiler=SEED,
        )
    except TranspilerError as exc:
        detail = " ".join(str(exc).split()).strip("'\"")
        raise CompileError(
            f"the program cannot be mapped onto {target.device} "
            f"(basis {' '.join(target.basis)}): {detail}",
            unfit=True,
        ) from None


def layout(compiled: Any, width: int) -> tuple[int, ...] | None:
    """The physical qubit each of the program's first ``width`` qubits ended on."""
    if compiled.layout is None:
        return None
    final = compiled.layout.final_index_layout()
    return tuple(int(q) for q in final[:width])
