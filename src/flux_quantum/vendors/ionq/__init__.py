"""IonQ's QPUs and cloud simulator, direct, through IonQ's own client (``ionq-core``).

This package owns what is IonQ's own: ``vendor`` (``IonqVendor``: its settings, the
verbs, sessions with IonQ's cost limit, a job's probabilities as counts) and ``errors``
(what the client raises, as vendor errors). ``VENDOR`` is its descriptor: this face
imports nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.vendors import VendorDescriptor

VENDOR = VendorDescriptor(
    name="ionq",
    title="IonQ",
    vendor="flux_quantum.vendors.ionq.vendor:IonqVendor",
    errors="flux_quantum.vendors.ionq.errors:translate",
    settings=("endpoint",),
    credentials=("IONQ_API_KEY", "IONQ_SESSION_ID"),
    rank=80,
)
