"""The emulated IQM side: the IQM Server API v1 as QRMI's ``IQMServer`` resource uses it, under /iqm.

This package owns everything the emulator answers for IQM clients: ``service`` routes each
request, checks its token, injects the scenario's faults and serves quantum computers,
calibration sets and jobs (queued on the shared queue model, their circuits simulated);
``scenario`` reads the IQM scenario; ``wire`` has the side's paths, IQM's error and
timestamp shapes and the translation of an IQM circuit into OpenQASM for the simulator.
What every side shares is the emulator package's. It must never import another vendor's side.
"""

from flux_quantum.emulator.iqm.scenario import IqmDeviceSpec, IqmFault, IqmScenario
from flux_quantum.emulator.iqm.service import IqmService
from flux_quantum.emulator.iqm.wire import API, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# IQM (under /iqm), as QRMI's IQMServer resource reaches it.
SIDE = SideEntry(
    "iqm", "iqm", (PREFIX,), serve(IqmService), IqmScenario, "iqm", "--iqm-scenario", "IQM",
    lambda s: len(s.devices),
)  # fmt: skip

__all__ = ["API", "PREFIX", "SIDE", "IqmDeviceSpec", "IqmFault", "IqmScenario", "IqmService"]
