"""The emulated IBM Quantum side: IBM Cloud IAM and the Qiskit Runtime REST API, under /ibm.

This package owns everything the emulator answers for IBM clients (the unmodified
``qrmi``): ``service`` routes each request, checks its token, CRN and body, injects the
scenario's faults and serves backends, jobs and sessions; ``runtime`` keeps the backends'
queues, the jobs and the sessions and changes them; ``scenario`` reads the IBM scenario;
``wire`` has the side's paths and IBM's document shapes (errors, backend configuration and properties, sampler
results). What every side shares is the emulator package's. It must never import another
vendor's side.
"""

from flux_quantum.emulator.ibm.runtime import IbmRuntime
from flux_quantum.emulator.ibm.scenario import IbmBackendSpec, IbmFault, IbmScenario
from flux_quantum.emulator.ibm.service import IbmService
from flux_quantum.emulator.ibm.wire import API, IAM_PATH, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# IBM Quantum's cloud (IAM and the Qiskit Runtime REST API, under /ibm), as QRMI's
# IBMQiskitRuntimeService resource reaches it.
SIDE = SideEntry(
    "ibm", "ibm", (PREFIX,), serve(IbmService), IbmScenario, "ibm", "--ibm-scenario",
    "IBM Quantum", lambda s: len(s.backends),
)  # fmt: skip

__all__ = [
    "API",
    "IAM_PATH",
    "PREFIX",
    "SIDE",
    "IbmBackendSpec",
    "IbmFault",
    "IbmRuntime",
    "IbmScenario",
    "IbmService",
]
