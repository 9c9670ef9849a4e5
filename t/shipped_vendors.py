"""The vendors flux-quantum ships, in the order users read them (their descriptors'
ranks): the one list the tests pin, in the registry's order and in the catalog's and the
request parser's messages. A vendor added to flux-quantum adds its name here."""

from __future__ import annotations

SHIPPED = (
    "braket",
    "ibm",
    "iqm",
    "pasqal",
    "ibm-quantum-system",
    "alice-bob-felis",
    "oqtopus",
    "ionq",
    "local",
)
NAMED = ", ".join(SHIPPED)
