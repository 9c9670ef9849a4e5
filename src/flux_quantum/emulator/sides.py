"""The emulator's sides, in one table: each vendor's side is one package and one entry here.

This module owns which sides an ``Emulator`` serves and in which order they are built,
give their environment and are listed in its report: each entry (``side.SideEntry``) is
its package's ``SIDE`` (Braket's events queue is its ``EVENTS``, built after Braket,
whose events it serves). Braket, the side without a prefix, answers every path no other
side takes. Adding a vendor's side is its package and one line here. It must never hold
state or know a side's routes.
"""

from __future__ import annotations

from flux_quantum.emulator import braket, felis, ibm, ibmqs, ionq, iqm, oqtopus, pasqal
from flux_quantum.emulator.side import SideEntry

SIDES: tuple[SideEntry, ...] = (
    braket.SIDE,
    braket.EVENTS,
    ibm.SIDE,
    iqm.SIDE,
    pasqal.SIDE,
    ibmqs.SIDE,
    felis.SIDE,
    oqtopus.SIDE,
    ionq.SIDE,
)
