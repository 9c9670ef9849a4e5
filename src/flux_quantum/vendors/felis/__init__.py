"""Alice & Bob's QPUs and emulators (Felis Cloud) through QRMI (``AliceBobFelis``).

This package owns what is Felis's own: ``vendor`` (``FelisVendor``: its settings, the
payload of a QIR program, a job's histogram as counts, its run time) and ``program``
(which QIR programs a target takes, the histogram's reading). Its errors are QRMI's
(``flux_quantum.vendors.qrmi.translate``). ``VENDOR`` is its descriptor: this face
imports nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.programs import QIR
from flux_quantum.protocol.vendors import VendorDescriptor

VENDOR = VendorDescriptor(
    name="alice-bob-felis",
    title="Alice & Bob Felis",
    vendor="flux_quantum.vendors.felis.vendor:FelisVendor",
    errors="flux_quantum.vendors.qrmi:translate",
    settings=("endpoint",),
    programs=(QIR,),
    program_check="flux_quantum.vendors.felis.program:check",
    rank=60,
)
