"""The toy vendor's descriptor: a vendor shipped apart from flux-quantum.

Its devices' ids are ``toy/REGION/NAME``; it runs OpenQASM circuits of at most as many
qubits as the device has (``program.check``); ``TOY_API_KEY`` and any ``..._TOY_TOKEN``
hold its secrets. One task of its carries up to four jobs' programs (``MERGED``), and its
devices are booked for windows as "Toy Reserve" (``toy-res/NAME``), but not those whose
id ends in ``-shared``. This face imports nothing but the standard library and
``flux_quantum.protocol``, as every vendor's must: Flux's own Python reads it.
"""

from __future__ import annotations

import re

from flux_quantum.protocol.merged_tasks import PUBS, Limits
from flux_quantum.protocol.vendors import ReservedWindows, VendorDescriptor

_ID = re.compile(r"^toy/([a-z]{2}(?:-[a-z0-9]+)+)/[a-z0-9-]+$")


def id_region(device_id: str) -> str | None:
    match = _ID.match(device_id)
    if not match:
        raise ValueError(f"id must be toy/REGION/NAME, got {device_id!r}")
    return match.group(1)


MERGED = Limits(layout=PUBS, max_programs=4)
WINDOWS = ReservedWindows(
    service="Toy Reserve",
    devices="Toy devices",
    label="vendor toy",
    reservation=r"toy-res/[a-z0-9-]+",
    reservation_form="a Toy Reserve id (toy-res/NAME)",
    on=lambda device_id: not device_id.endswith("-shared"),
)

VENDOR = VendorDescriptor(
    name="toy",
    title="Toy",
    vendor="toyvendor.vendor:ToyVendor",
    errors="toyvendor.errors:translate",
    settings=("endpoint", "queue"),
    id_region=id_region,
    program_check="toyvendor.program:check",
    credentials=("TOY_API_KEY",),
    credential_suffixes=("_TOY_TOKEN",),
    merged_tasks=MERGED,
    reserved_windows=WINDOWS,
    warm_up="toyvendor.vendor:warm_up",
)
