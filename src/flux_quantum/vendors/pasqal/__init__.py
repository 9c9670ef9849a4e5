"""Pasqal's neutral-atom QPUs, in the cloud and on premises, through QRMI.

This package owns what is Pasqal's own: ``vendor`` (``PasqalVendor``: each device's
settings, the payload, finding a create again, a batch's run time) and ``program``
(Pulser sequences: the check, the idempotency mark, the emulator's sampler). Its errors
are QRMI's (``flux_quantum.vendors.qrmi.translate``). ``VENDOR`` is its descriptor: this
face imports nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.programs import PULSER
from flux_quantum.protocol.vendors import VendorDescriptor

VENDOR = VendorDescriptor(
    name="pasqal",
    title="Pasqal",
    vendor="flux_quantum.vendors.pasqal.vendor:PasqalVendor",
    errors="flux_quantum.vendors.qrmi:translate",
    settings=("base_url", "auth_endpoint", "project_id", "warden_url"),
    programs=(PULSER,),
    program_check="flux_quantum.vendors.pasqal.program:check",
    credential_suffixes=("QRMI_JOB_ACQUISITION_TOKEN",),  # an on-premises warden session
    rank=40,
)
