"""An IBM backend's configuration and properties read as a ``DeviceTarget``: pure data
in, one record out.

This module owns which of IBM's backend documents the compile stage maps a program onto:
the configuration's ``n_qubits``, ``basis_gates`` and ``coupling_map`` (IBM's ISA: a
circuit IBM runs uses these gates on these pairs only, error 1517 otherwise), the
properties' gate and readout errors (``calibration``'s reading), and the properties'
``last_update_date`` as the calibration's id (else the backend's version). QRMI's
``target()`` gives both documents (``{"configuration", "properties"}``); an IBM Quantum
System publishes the same. A document without a configuration gives None.
"""

from __future__ import annotations

from typing import Any

from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.vendors.ibm.calibration import read_calibration


def read_target(device: str, document: dict[str, Any]) -> DeviceTarget | None:
    """The target in QRMI's ``target()`` document of an IBM backend, or None."""
    config = document.get("configuration")
    if not isinstance(config, dict):
        return None
    qubits = config.get("n_qubits")
    basis = config.get("basis_gates")
    if not isinstance(qubits, int) or qubits < 1 or not isinstance(basis, list):
        return None
    coupling = config.get("coupling_map")
    pairs = (
        [p for p in coupling if isinstance(p, list) and len(p) == 2]
        if isinstance(coupling, list)
        else None
    )
    properties = document.get("properties")
    calibration = read_calibration(properties)
    errors: dict[str, dict[str, float]] = {"one": {}, "two": {}, "readout": {}}
    if calibration is not None:
        for kind, figures in (
            ("one", calibration.one_qubit),
            ("two", calibration.two_qubit),
            ("readout", calibration.readout),
        ):
            errors[kind] = {key: 1.0 - fidelity for key, fidelity in figures}
    updated = properties.get("last_update_date") if isinstance(properties, dict) else None
    return DeviceTarget.build(
        device,
        qubits,
        [str(g) for g in basis],
        pairs,
        one_qubit_error=errors["one"],
        two_qubit_error=errors["two"],
        readout_error=errors["readout"],
        calibration=str(updated or config.get("backend_version") or ""),
    )
