"""The ``local`` vendor: the flux-quantum emulator behind the vendor interface.

This package owns how the emulator is reached as a vendor (``vendor``: ``LocalVendor``,
the Braket vendor pointed at the emulator, its ``ibm_...`` backends through the IBM
vendor), with no account and no credentials. ``VENDOR`` is its descriptor: this face
imports nothing but the standard library, ``flux_quantum.protocol`` and the faces of
Braket (whose device ids, settings, program sets and reserved windows its emulated
Braket devices share) and IBM (whose Sampler jobs its emulated IBM backends take).
"""

from __future__ import annotations

import dataclasses
import re

from flux_quantum.protocol.merged_tasks import Limits
from flux_quantum.protocol.vendors import VendorDescriptor
from flux_quantum.vendors.braket import (
    BRAKET_DIRECT,
    EVENTS_SETTINGS,
    HYBRID_SETTINGS,
    PROGRAM_SETS,
    arn_region,
)
from flux_quantum.vendors.ibm import SAMPLER_JOBS

# A local device may also be an IBM backend the emulator serves (IBM's REST surface).
_IBM_BACKEND = re.compile(r"^ibm_[a-z0-9_]+$")


def id_region(device_id: str) -> str | None:
    """An emulated Braket device's ARN region, or None for an emulated IBM backend."""
    return arn_region(device_id) if is_braket(device_id) else None


def is_braket(device_id: str) -> bool:
    """Whether a local device is an emulated Braket device (not an IBM backend)."""
    return not _IBM_BACKEND.match(device_id)


def merged_tasks(device_id: str) -> Limits:
    """What one merged task on a local device may hold: a program set on an emulated
    Braket device, a Sampler job of several pubs on an emulated IBM backend."""
    return PROGRAM_SETS if is_braket(device_id) else SAMPLER_JOBS


VENDOR = VendorDescriptor(
    name="local",
    title="the flux-quantum emulator",
    vendor="flux_quantum.vendors.local.vendor:LocalVendor",
    errors="flux_quantum.vendors.braket.errors:translate_error",
    settings=("url", "s3_bucket", "s3_prefix", *EVENTS_SETTINGS, *HYBRID_SETTINGS),
    id_region=id_region,
    rank=90,  # the stand-in, after the vendors it stands in for
    merged_tasks=merged_tasks,
    # The emulator's Braket Direct: reserved windows on its Braket devices.
    reserved_windows=dataclasses.replace(BRAKET_DIRECT, label="the emulator's local", on=is_braket),
    warm_up="flux_quantum.vendors.braket.sdk:warm_up",
)
