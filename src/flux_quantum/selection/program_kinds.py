"""Which devices can run a job's program, and why the others cannot.

A device runs the program kinds its vendor's descriptor names (``programs``: OpenQASM,
IQM's JSON circuits, Pulser sequences, QIR; ``flux_quantum.protocol.programs`` tells
them apart from the text), then passes the vendor's own check of such a program
(``program_check``: a gate IQM's translation lacks, a register larger than the device).
This module says in one sentence why a device cannot run a program; the service drops
such devices when it chooses one, so a job whose every allowed device cannot run its
program fails while held, before it gets nodes or a task. It names no vendor: a vendor
the registry does not know runs OpenQASM only. It is pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from flux_quantum.catalog import Device
from flux_quantum.compiler.screen import width
from flux_quantum.protocol.programs import OPENQASM, kind_of, kind_reason
from flux_quantum.protocol.vendors import registry

UNKNOWN_VENDOR_RUNS = (OPENQASM,)  # what a vendor the registry does not know runs


def device_reason(vendor: str, kind: str) -> str | None:
    """Why a device of ``vendor`` cannot run a program of ``kind``, or None."""
    descriptor = registry().get(vendor)
    if descriptor is None:
        return kind_reason(vendor, UNKNOWN_VENDOR_RUNS, kind)
    return descriptor.kind_reason(kind)


def program_reason(vendor: str, qubits: int, text: str | None) -> str | None:
    """Why a device of ``vendor`` with ``qubits`` qubits (atoms) cannot run ``text``, or
    None: its kind first, then what the vendor's own check says."""
    descriptor = registry().get(vendor)
    if descriptor is None:
        return kind_reason(vendor, UNKNOWN_VENDOR_RUNS, kind_of(text))
    return descriptor.program_reason(qubits, text)


def cannot_run(text: str | None, devices: Iterable[Device]) -> dict[str, str]:
    """The ``devices`` that cannot run ``text`` (``program_reason``; an OpenQASM
    program wider than the device, ``too_narrow``), with the reason."""
    devices = list(devices)
    reasons = {d.name: program_reason(d.vendor, d.qubits, text) for d in devices}
    kinds = {name: why for name, why in reasons.items() if why is not None}
    return {**too_narrow(text, devices), **kinds}


def too_narrow(text: str | None, devices: Iterable[Device]) -> dict[str, str]:
    """The ``devices`` with fewer qubits than the OpenQASM program ``text`` declares,
    with why (the compile stage checks its gates and couplings on the device chosen)."""
    if text is None or kind_of(text) != OPENQASM:
        return {}
    declared = width(text)
    return {
        d.name: f"has {d.qubits} qubits, the program declares {declared}"
        for d in devices
        if d.qubits < declared
    }
