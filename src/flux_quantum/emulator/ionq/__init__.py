"""The emulated IonQ side: IonQ's Cloud Platform API v0.4 as its client ``ionq-core`` calls it, under /ionq.

This package owns everything the emulator answers for IonQ clients: ``service`` routes
each request, checks its API key, injects the scenario's faults and serves backends, jobs
(queued on the shared queue model, run on the Braket local simulator, noisy on the
simulator's noise models) and sessions (``sessions``: their job-count, cost and duration
limits); ``scenario`` reads the scenario; ``wire`` has the side's paths, IonQ's error
shape and the circuit translation. It must never import another vendor's side.
"""

from flux_quantum.emulator.ionq.scenario import IonqBackendSpec, IonqFault, IonqScenario
from flux_quantum.emulator.ionq.service import IonqService
from flux_quantum.emulator.ionq.wire import API, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# IonQ (under /ionq), as its own client ionq-core reaches it.
SIDE = SideEntry(
    "ionq", "ionq", (PREFIX,), serve(IonqService), IonqScenario, "ionq", "--ionq-scenario",
    "IonQ", lambda s: len(s.backends),
)  # fmt: skip

__all__ = [
    "API", "PREFIX", "SIDE", "IonqBackendSpec", "IonqFault", "IonqScenario", "IonqService",
]  # fmt: skip
