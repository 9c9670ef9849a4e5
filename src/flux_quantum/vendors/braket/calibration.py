"""Braket device capabilities read as a ``Calibration``: pure data in, one record out.

This module owns which of Braket's ``standardized`` device properties (and IonQ's
``provider.fidelity`` means) stand for a qubit's gate, a coupled pair's gate and a
readout's fidelity. It must never call Braket (the vendor hands it the capabilities
document GetDevice gave): what it cannot use is left out, and a document with nothing
usable gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flux_quantum.vendors.base import Calibration

_ONE_QUBIT_TYPES = ("RANDOMIZED_BENCHMARKING", "SIMULTANEOUS_RANDOMIZED_BENCHMARKING")


def _fidelity(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _type_name(entry: Mapping[str, Any]) -> str:
    kind = entry.get("fidelityType")
    return str(kind.get("name") or "") if isinstance(kind, dict) else ""


def _first_fidelity(entries: object) -> float | None:
    """The first readable figure of a list of standardized ``Fidelity`` entries."""
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and (value := _fidelity(entry.get("fidelity"))) is not None:
            return value
    return None


def _timestamp(text: object) -> float | None:
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def read_calibration(capabilities: object) -> Calibration | None:
    """The calibration in a parsed ``deviceCapabilities`` document, or None.

    Braket publishes it as ``standardized`` device properties: version 1 and 2 (IQM,
    Rigetti) per qubit (``oneQubitProperties``: randomized-benchmarking and READOUT
    fidelities) and per pair (``twoQubitProperties``: a fidelity per gate; the best
    gate counts); version 3 (IonQ) device-wide (``singleQubitFidelity``,
    ``twoQubitGateFidelity``, ``readoutFidelity``). IonQ's ``provider.fidelity``
    (``1Q``, ``2Q``, ``spam`` means) fills in what the standardized part lacks. Values
    outside [0, 1] are skipped.
    """
    if not isinstance(capabilities, dict):
        return None
    standardized = capabilities.get("standardized")
    standardized = standardized if isinstance(standardized, dict) else {}
    one: dict[str, float] = {}
    readout: dict[str, float] = {}
    two: dict[str, float] = {}
    qubits = standardized.get("oneQubitProperties")
    for qubit, properties in (qubits if isinstance(qubits, dict) else {}).items():
        entries = properties.get("oneQubitFidelity") if isinstance(properties, dict) else None
        by_type = {
            _type_name(entry): _fidelity(entry.get("fidelity"))
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, dict)
        }
        gate = next((by_type[k] for k in _ONE_QUBIT_TYPES if by_type.get(k) is not None), None)
        if gate is not None:
            one[str(qubit)] = gate
        if (read := by_type.get("READOUT")) is not None:
            readout[str(qubit)] = read
    pairs = standardized.get("twoQubitProperties")
    for pair, properties in (pairs if isinstance(pairs, dict) else {}).items():
        entries = properties.get("twoQubitGateFidelity") if isinstance(properties, dict) else None
        figures = [
            value
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, dict) and (value := _fidelity(entry.get("fidelity"))) is not None
        ]
        if figures:
            two[str(pair)] = max(figures)
    provider = capabilities.get("provider")
    means = provider.get("fidelity") if isinstance(provider, dict) else None
    means = means if isinstance(means, dict) else {}

    def device_wide(table: dict[str, float], standardized_key: str, provider_key: str) -> None:
        if table:
            return
        value = _first_fidelity(standardized.get(standardized_key))
        if value is None and isinstance(means.get(provider_key), dict):
            value = _fidelity(means[provider_key].get("mean"))
        if value is not None:
            table["*"] = value

    device_wide(one, "singleQubitFidelity", "1Q")
    device_wide(two, "twoQubitGateFidelity", "2Q")
    device_wide(readout, "readoutFidelity", "spam")
    if not (one or two or readout):
        return None
    header = standardized.get("braketSchemaHeader")
    version = header.get("version", "?") if isinstance(header, dict) else "?"
    return Calibration(
        one_qubit=tuple(one.items()),
        two_qubit=tuple(two.items()),
        readout=tuple(readout.items()),
        updated_at=_timestamp(standardized.get("updatedAt"))
        if "updatedAt" in standardized
        else None,
        source=f"braket standardized v{version}" if standardized else "braket provider",
    )
