"""A Sampler pub's circuit as the IBM side runs it: OpenQASM 3, from either client's encoding.

QRMI sends a pub's circuit as an OpenQASM 3 string; qiskit-ibm-runtime sends it as its
``RuntimeEncoder`` writes a ``QuantumCircuit`` (``{"__type__": "QuantumCircuit",
"__value__": base64(zlib(QPY))}``) and its parameter values as an encoded numpy array
(``{"__type__": "ndarray", "__value__": base64(zlib(npy))}``, or a plain list). This
module owns turning either into the OpenQASM 3 text the side simulates: a QPY circuit is
loaded with Qiskit and its parameters bound to the pub's one set of values before it is
written as OpenQASM 3, in a simulation worker (its job ``qpy``: Qiskit's native code never
runs in the emulator's process). It must never evaluate anything but
QPY and npy (no pickle), and refuses what it cannot run with ``PubError`` and a sentence
the side answers with IBM's validation error.
"""

from __future__ import annotations

import base64
import io
import zlib
from typing import Any

from flux_quantum.emulator.simulation_pool import SimulationFailed, shared_pool


class PubError(ValueError):
    """The pub cannot be read; the message says why."""


def pub_circuit(circuit: Any, values: Any) -> str:
    """The pub's circuit as OpenQASM 3 with ``values`` bound (None or empty: none)."""
    if isinstance(circuit, str):
        if "OPENQASM" not in circuit:
            raise PubError("a pub's circuit must be OpenQASM 3 or a QPY QuantumCircuit")
        if _values(values):
            raise PubError("the emulator binds parameter values only to QPY circuits")
        return circuit
    if not (isinstance(circuit, dict) and circuit.get("__type__") == "QuantumCircuit"):
        raise PubError("a pub's circuit must be OpenQASM 3 or a QPY QuantumCircuit")
    job = {"op": "qpy", "circuit": str(circuit.get("__value__")), "values": _values(values)}
    try:
        text: str = shared_pool().run(job)
    except SimulationFailed as exc:
        raise PubError(str(exc)) from exc
    return text


def _values(values: Any) -> list[list[float]]:
    """The pub's parameter value sets (each a list of floats; [] for none)."""
    if values is None or values == [] or values == {}:
        return []
    if isinstance(values, dict) and values.get("__type__") == "ndarray":
        encoded = values.get("__value__")
        if isinstance(encoded, list):
            return _rows(encoded)
        import numpy as np

        try:
            raw = zlib.decompress(base64.standard_b64decode(str(encoded)))
            array = np.load(io.BytesIO(raw), allow_pickle=False)
        except Exception as exc:
            raise PubError(f"the pub's parameter values cannot be read: {exc}") from exc
        return _rows(array.tolist())
    if isinstance(values, list):
        return _rows(values)
    raise PubError("a pub's parameter values must be a list or an encoded array")


def _rows(values: Any) -> list[list[float]]:
    if not isinstance(values, list) or not values:
        return []
    if all(isinstance(v, int | float) for v in values):
        return [[float(v) for v in values]]
    rows = []
    for row in values:
        if not isinstance(row, list) or not all(isinstance(v, int | float) for v in row):
            raise PubError("parameter values must be numbers, one set per row")
        rows.append([float(v) for v in row])
    return [row for row in rows if row] if any(rows) else []
