"""The ``local`` vendor: the flux-quantum emulator behind the vendor interface.

This package owns how the emulator is reached as a vendor (``vendor``: ``LocalVendor``,
the Braket vendor pointed at the emulator, its ``ibm_...`` backends through the IBM
vendor), with no account and no credentials. ``VENDOR`` is its descriptor: this face
imports nothing but the standard library, ``flux_quantum.protocol`` and Braket's face
(whose device ids and settings it shares).
"""

from __future__ import annotations

import re

from flux_quantum.protocol.vendors import VendorDescriptor
from flux_quantum.vendors.braket import EVENTS_SETTINGS, HYBRID_SETTINGS, arn_region

# A local device may also be an IBM backend the emulator serves (IBM's REST surface).
_IBM_BACKEND = re.compile(r"^ibm_[a-z0-9_]+$")


def id_region(device_id: str) -> str | None:
    """An emulated Braket device's ARN region, or None for an emulated IBM backend."""
    return None if _IBM_BACKEND.match(device_id) else arn_region(device_id)


VENDOR = VendorDescriptor(
    name="local",
    title="the flux-quantum emulator",
    vendor="flux_quantum.vendors.local.vendor:LocalVendor",
    errors="flux_quantum.vendors.braket.errors:translate_error",
    settings=("url", "s3_bucket", "s3_prefix", *EVENTS_SETTINGS, *HYBRID_SETTINGS),
    id_region=id_region,
    rank=90,  # the stand-in, after the vendors it stands in for
)
