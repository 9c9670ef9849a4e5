"""The emulated Pasqal side: Pasqal Cloud's API under /pasqal, an on-premises warden under
/pasqal-local, as QRMI's ``PasqalCloud`` and ``PasqalLocal`` resources use them.

This package owns everything the emulator answers for Pasqal clients: ``service`` routes
each request, injects the scenario's faults and answers Pasqal Cloud's device and batch
calls; ``warden`` answers the on-premises warden's; ``batches`` keeps the batches (and
local jobs) on the shared queue model; ``tokens`` issues and checks Pasqal Cloud's bearer
tokens; ``scenario`` reads the Pasqal scenario; ``wire`` has the side's paths and its
answers' shapes. What every side shares is the emulator package's. It must never import
another vendor's side.
"""

from flux_quantum.emulator.pasqal.scenario import PasqalDeviceSpec, PasqalFault, PasqalScenario
from flux_quantum.emulator.pasqal.service import PasqalService
from flux_quantum.emulator.pasqal.wire import LOCAL_PREFIX, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# Pasqal Cloud (under /pasqal) and an on-premises warden (/pasqal-local), as QRMI's
# PasqalCloud and PasqalLocal resources reach them.
SIDE = SideEntry(
    "pasqal", "pasqal", (PREFIX, LOCAL_PREFIX), serve(PasqalService), PasqalScenario, "pasqal",
    "--pasqal-scenario", "Pasqal", lambda s: len(s.devices),
)  # fmt: skip

__all__ = [
    "LOCAL_PREFIX",
    "PREFIX",
    "SIDE",
    "PasqalDeviceSpec",
    "PasqalFault",
    "PasqalScenario",
    "PasqalService",
]
