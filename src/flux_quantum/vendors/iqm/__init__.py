"""IQM's quantum computers (IQM Resonance, or an IQM Server on premises) through QRMI.

This package owns what is IQM's own: ``vendor`` (``IqmVendor``: its settings, the
``circuit`` job of a program, reading a job back), ``program`` (OpenQASM 3 translated to
IQM's native gates, or IQM's JSON circuit; the counts of a job's measurements) and
``errors`` (what IQM's refusals mean). ``VENDOR`` is its descriptor: this face imports
nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

from flux_quantum.protocol.programs import IQM_JSON, OPENQASM
from flux_quantum.protocol.vendors import MAPPED, Compiling, VendorDescriptor

VENDOR = VendorDescriptor(
    name="iqm",
    title="IQM",
    vendor="flux_quantum.vendors.iqm.vendor:IqmVendor",
    errors="flux_quantum.vendors.iqm.errors:translate",
    settings=("endpoint",),
    programs=(OPENQASM, IQM_JSON),
    program_check="flux_quantum.vendors.iqm.program:check",
    rank=30,
    # Mapped onto the device's architecture (its prx/cz, its couplers) and written as
    # IQM's JSON circuit: IQM's server compiles nothing.
    compiling=Compiling(MAPPED, writer="flux_quantum.vendors.iqm.native:write"),
)
