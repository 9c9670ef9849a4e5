"""IBM backend properties read as a ``Calibration``: pure data in, one record out.

This module owns which of IBM's properties stand for a qubit's, a coupled pair's and a
readout's error, and how often the vendor re-reads them. It must never call IBM (the
vendor hands it the properties it read): what it cannot use is left out, and a document
with nothing usable gives None.
"""

from __future__ import annotations

from datetime import datetime

from flux_quantum.vendors.base import Calibration

CALIBRATION_TTL = 900.0  # IBM recalibrates about daily; a probe re-reads every 15 min


def read_calibration(properties: object) -> Calibration | None:
    """Gate and readout errors of IBM backend properties as a ``Calibration``: per qubit
    the ``sx`` error (else ``x``; ``rz`` is virtual), per coupled pair ("0-1") the best
    two-qubit gate in either direction, per qubit ``readout_error``."""
    if not isinstance(properties, dict):
        return None
    one: dict[str, float] = {}
    two: dict[str, float] = {}
    for gate in properties.get("gates") or []:
        if not isinstance(gate, dict) or not isinstance(gate.get("qubits"), list):
            continue
        error = next(
            (p.get("value") for p in gate.get("parameters") or []
             if isinstance(p, dict) and p.get("name") == "gate_error"),
            None,
        )  # fmt: skip
        if not isinstance(error, int | float) or not 0 <= error <= 1:
            continue
        qubits = [str(q) for q in gate["qubits"]]
        if len(qubits) == 1 and gate.get("gate") in ("sx", "x"):
            key = qubits[0]
            if gate.get("gate") == "sx" or key not in one:
                one[key] = error
        elif len(qubits) == 2:
            key = "-".join(sorted(qubits, key=int))
            two[key] = min(error, two.get(key, 1.0))
    readout: dict[str, float] = {}
    for index, items in enumerate(properties.get("qubits") or []):
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get("name") != "readout_error":
                continue
            value = item.get("value")
            if isinstance(value, int | float) and 0 <= value <= 1:
                readout[str(index)] = value
    if not (one or two or readout):
        return None
    updated = properties.get("last_update_date")
    try:
        when = datetime.fromisoformat(str(updated).replace("Z", "+00:00")).timestamp()
    except ValueError:
        when = None
    return Calibration.from_errors(one, two, readout, updated_at=when, source="ibm properties")
