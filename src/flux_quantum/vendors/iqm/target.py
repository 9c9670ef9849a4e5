"""An IQM quantum computer's dynamic quantum architecture read as a ``DeviceTarget``:
pure data in, one record out.

This module owns what the compile stage maps a program onto for IQM: the qubits the
architecture lists (``QB1``... as 0...), its native gates (``prx``, which Qiskit calls
``r``: R(θ, φ); ``cz``), the ``cz`` loci as the coupled pairs (IQM's server refuses a
``cz`` elsewhere), and the calibration set's id. QRMI's ``target()`` gives the
architecture as ``dynamic_quantum_architecture``. IQM's quality metrics are not read:
their names differ between calibration sets, and a target without errors is mapped
by connectivity alone. An architecture it cannot read gives None.
"""

from __future__ import annotations

import re
from typing import Any

from flux_quantum.compiler.target import DeviceTarget

_QUBIT = re.compile(r"^QB([1-9]\d*)$")
# IQM's native operations as Qiskit names them.
GATES = {"prx": "r", "cz": "cz"}


def read_target(device: str, document: dict[str, Any]) -> DeviceTarget | None:
    """The target in QRMI's ``target()`` document of an IQM quantum computer, or None."""
    dqa = document.get("dynamic_quantum_architecture")
    if not isinstance(dqa, dict) or not isinstance(dqa.get("qubits"), list):
        return None
    indices = [_index(q) for q in dqa["qubits"]]
    if not indices or None in indices:
        return None
    qubits = max(i for i in indices if i is not None) + 1
    found = dqa.get("gates")
    gates: dict[str, Any] = found if isinstance(found, dict) else {}
    basis = [GATES[name] for name in gates if name in GATES]
    pairs: list[tuple[int, int]] = []
    cz: dict[str, Any] = gates["cz"] if isinstance(gates.get("cz"), dict) else {}
    for implementation in (cz.get("implementations") or {}).values():
        for locus in (implementation or {}).get("loci") or []:
            ends = [_index(q) for q in locus] if isinstance(locus, list) else []
            if len(ends) == 2 and None not in ends and ends[0] != ends[1]:
                a, b = ends
                assert a is not None and b is not None
                pairs.append((a, b))
    return DeviceTarget.build(
        device, qubits, basis, pairs, calibration=str(dqa.get("calibration_set_id") or "")
    )


def _index(name: object) -> int | None:
    match = _QUBIT.match(name) if isinstance(name, str) else None
    return int(match.group(1)) - 1 if match else None
