"""The emulated Alice & Bob side: the Felis Cloud API as QRMI's ``AliceBobFelis`` resource uses it, under /felis.

This package owns everything the emulator answers for Felis clients: ``service`` routes
each request, checks its Basic credentials, injects the scenario's faults and serves
targets and jobs (queued on the shared queue model once their QIR input arrives, run on
the Braket local simulator); ``scenario`` reads the scenario; ``wire`` has the side's
paths, Felis's error shape, its events and the QIR-to-OpenQASM translation. It must never
import another vendor's side.
"""

from flux_quantum.emulator.felis.scenario import FelisFault, FelisScenario, FelisTargetSpec
from flux_quantum.emulator.felis.service import FelisService
from flux_quantum.emulator.felis.wire import API, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# Alice & Bob's Felis (under /felis), as QRMI's AliceBobFelis resource reaches it.
SIDE = SideEntry(
    "felis", "alice-bob-felis", (PREFIX,), serve(FelisService), FelisScenario, "felis",
    "--felis-scenario", "Felis", lambda s: len(s.targets),
)  # fmt: skip

__all__ = [
    "API", "PREFIX", "SIDE", "FelisFault", "FelisScenario", "FelisService", "FelisTargetSpec",
]  # fmt: skip
