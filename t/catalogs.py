"""Catalog devices the policy, access, quota and ledger tests share, as the real Braket
devices are priced (the Amazon Braket pricing page, 2026): ``catalog_of("sv1", "forte1")``
parses a catalog of just those, in that order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flux_quantum.catalog import Catalog, parse_catalog

DEVICES = {
    "sv1": '{name: sv1, vendor: braket, id: "arn:aws:braket:::device/quantum-simulator/amazon/sv1",'
    " class: simulator, qubits: 34, price: {per_minute: 0.075, min_seconds: 3}}",
    "tn1": '{name: tn1, vendor: braket, id: "arn:aws:braket:::device/quantum-simulator/amazon/tn1",'
    " class: simulator, qubits: 50, price: {per_minute: 0.275, min_seconds: 3},"
    " properties: {expected_seconds: 120}}",
    "forte1": '{name: forte1, vendor: braket, id: "arn:aws:braket:us-east-1::device/qpu/ionq/'
    'Forte-1", class: qpu, qubits: 36, price: {per_task: 0.30, per_shot: 0.08}}',
    "garnet": '{name: garnet, vendor: braket, id: "arn:aws:braket:eu-north-1::device/qpu/iqm/'
    'Garnet", class: qpu, qubits: 20, price: {per_task: 0.30, per_shot: 0.00145}}',
    "ankaa3": '{name: ankaa3, vendor: braket, id: "arn:aws:braket:us-west-1::device/qpu/rigetti/'
    'Ankaa-3", class: qpu, qubits: 84, price: {per_task: 0.30, per_shot: 0.0009}}',
    # a cheap QPU whose vendor publishes no calibration
    "plain": '{name: plain, vendor: braket, id: "arn:aws:braket:us-west-1::device/qpu/rigetti/'
    'Plain", class: qpu, qubits: 84, price: {per_task: 0.30, per_shot: 0.0001}}',
}


def catalog_of(*names: str) -> Catalog:
    text = "devices:\n" + "".join(f"  - {DEVICES[name]}\n" for name in names)
    return parse_catalog(text, "catalog.yaml")


def emulated_catalog(
    scenario: Mapping[str, Any],
    *,
    drain: float = 10,
    slots: int | None = None,
    per_task: float = 0.3,
    per_shot: float = 0.001,
    region: str | None = "us-east-1",
) -> str:
    """A catalog (YAML text) of an emulator scenario's devices, each ``q-NAME`` on the
    ``local`` vendor, a 20-qubit QPU at ``per_task`` + ``per_shot``, draining a task in
    ``drain`` seconds; ``slots``: the catalog's default when None."""
    lines = ["devices:"]
    for spec in scenario["devices"]:
        lines += [
            f"  - name: q-{spec['name'].lower()}",
            "    vendor: local",
            f"    id: {spec['arn']}",
            "    class: qpu",
            "    qubits: 20",
        ]
        if region is not None:
            lines.append(f"    region: {region}")
        if slots is not None:
            lines.append(f"    slots: {slots}")
        lines += [
            f"    price: {{per_task: {per_task}, per_shot: {per_shot}}}",
            f"    properties: {{drain_seconds_per_task: {drain}}}",
        ]
    return "\n".join(lines) + "\n"
