"""One program compiled for one device, in the process that runs it (a compile worker).

This module owns the stage's steps in order: the cheap refusals (``screen``), the parse
(``load``), the bound on the operations the program would run once its loops are
unrolled (``MAX_OPERATIONS``: a loop of two billion iterations is refused here, never
handed to a vendor), then, for a vendor whose programs are mapped (``MAPPED``), the
mapping onto the device (``mapping``) written by the vendor's writer (default:
OpenQASM 3, Qiskit's exporter), with its layout and expected success; for one that
compiles on its side (``CHECKED``), the program as written once it passed the checks
(one Qiskit's parsers do not read, in the vendor's own dialect, goes as written: the
vendor checks it). It must only ever run inside a compile worker (``worker``), under its limits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flux_quantum.compiler import estimate, mapping
from flux_quantum.compiler.compiled import Compiled
from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.load import Unread, load
from flux_quantum.compiler.screen import screen
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.protocol.vendors import CHECKED, MAPPED
from flux_quantum.protocol.vendors import load as load_target

# Operations a program may run with its loops unrolled: far above any circuit a QPU
# takes in one shot (IBM's and IQM's limits are in the hundreds of thousands).
MAX_OPERATIONS = 10_000_000


def compile_program(
    text: str, target: DeviceTarget, form: str = MAPPED, writer: str | None = None
) -> Compiled:
    """``text`` compiled for ``target`` in ``form``; CompileError says why not."""
    start = time.monotonic()
    screen(text, target.qubits, target.device)
    as_written = form == CHECKED or not target.maps
    try:
        circuit = load(text)
    except Unread:
        if not as_written:
            raise
        # The vendor reads its own dialect and checks the program itself: sent as
        # written (the refusals above, and a recursive gate, still apply).
        return _as_written(text, target, start)
    if circuit.num_qubits > target.qubits:
        raise CompileError(
            f"the program needs {circuit.num_qubits} qubits and {target.device} has "
            f"{target.qubits}",
            unfit=True,
        )
    runs = operations(circuit)
    if runs > MAX_OPERATIONS:
        raise CompileError(
            f"the program would run {runs:.3g} operations with its loops unrolled, more "
            f"than the limit of {MAX_OPERATIONS:,}"
        )
    if as_written:
        return _as_written(text, target, start)
    if form != MAPPED:
        raise CompileError(f"{target.device}: no compile form {form!r} (mapped, checked)")
    compiled = mapping.transpile(circuit, target)
    write: Callable[[Any], str] = _default_writer if writer is None else load_target(writer)
    try:
        written = write(compiled)
    except CompileError:
        raise
    except Exception as exc:
        raise CompileError(
            f"the compiled program cannot be written for {target.device}: {exc}", unfit=True
        ) from None
    stats = estimate.statistics(compiled)
    return Compiled(
        text=written,
        form=MAPPED,
        device=target.device,
        calibration=target.calibration,
        layout=mapping.layout(compiled, circuit.num_qubits),
        success=estimate.success(compiled, target),
        two_qubit_gates=stats["two_qubit_gates"],
        depth=stats["depth"],
        seconds=time.monotonic() - start,
    )


def operations(circuit: Any) -> int:
    """The operations ``circuit`` runs with every ``for`` loop unrolled (a ``while``
    loop's body counted once: its count is only known when it runs)."""
    total = 0
    for instruction in circuit.data:
        operation = instruction.operation
        blocks = getattr(operation, "blocks", ())
        if not blocks:
            total += 1
            continue
        inner = max(operations(block) for block in blocks)
        if operation.name == "for_loop":
            indexset = operation.params[0]
            total += len(indexset) * inner
        else:
            total += inner
        if total > MAX_OPERATIONS:
            return total
    return total


def _as_written(text: str, target: DeviceTarget, start: float) -> Compiled:
    return Compiled(
        text=text,
        form=CHECKED,
        device=target.device,
        calibration=target.calibration,
        seconds=time.monotonic() - start,
    )


def _default_writer(compiled: Any) -> str:
    import qiskit.qasm3

    return str(qiskit.qasm3.dumps(compiled))
