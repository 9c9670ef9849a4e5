"""Catalog devices the policy, access, quota and ledger tests share, as the real Braket
devices are priced (the Amazon Braket pricing page, 2026): ``catalog_of("sv1", "forte1")``
parses a catalog of just those, in that order."""

from __future__ import annotations

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
