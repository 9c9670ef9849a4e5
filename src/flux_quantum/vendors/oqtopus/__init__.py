"""OQTOPUS Cloud's devices and sampling jobs, through its own SDK (``oqtopus-client``).

This package owns what is OQTOPUS's own: ``vendor`` (``OqtopusVendor``: its settings,
the verbs through the SDK, a job's counts) and ``errors`` (what the SDK raises, as
vendor errors). ``VENDOR`` is its descriptor: this face imports nothing but the standard
library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.vendors import VendorDescriptor

VENDOR = VendorDescriptor(
    name="oqtopus",
    title="OQTOPUS Cloud",
    vendor="flux_quantum.vendors.oqtopus.vendor:OqtopusVendor",
    errors="flux_quantum.vendors.oqtopus.errors:translate",
    settings=("url",),
    rank=70,
)
