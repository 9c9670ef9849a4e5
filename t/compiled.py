"""Programs compiled for an emulated device, for tests that talk to a vendor or the
emulator directly (the service compiles on its own; these tests skip it).

``isa(qasm, qubits, basis, pairs)`` is ``qasm`` as the compile stage writes it for a
device of ``qubits`` with ``basis`` gates coupled as ``pairs`` (default: the emulator's
own map of an IBM backend of that size, ``topology.ibm``): an ISA circuit IBM's side
runs. It compiles in this process (``flux_quantum.compiler.program``), not in a worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flux_quantum.compiler.program import compile_program
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.emulator import topology
from flux_quantum.protocol.vendors import MAPPED

HERON = ("cz", "id", "rz", "sx", "x")  # IBM's Heron processors (the emulator's default)
EAGLE = ("ecr", "id", "rz", "sx", "x")  # Eagle's (an IBM Quantum System's default)


def isa(
    qasm: str,
    qubits: int = 5,
    basis: Sequence[str] = HERON,
    pairs: Iterable[tuple[int, int]] | None = None,
) -> str:
    """``qasm`` mapped onto an emulated IBM backend (see the module docstring)."""
    coupled = list(pairs) if pairs is not None else list(topology.ibm(qubits))
    target = DeviceTarget.build("emulated", qubits, basis, coupled)
    return compile_program(qasm, target, MAPPED).text
