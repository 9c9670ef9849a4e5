"""The emulated IBM Quantum System side: the Quantum System API, IAM and its S3 bucket, under /ibm-qs.

This package owns everything the emulator answers for QRMI's ``IBMQuantumSystem`` resource:
``service`` routes each request, checks its IAM token, CRN and S3 access key, injects the
scenario's faults and serves backends, their lanes and jobs (queued on the shared queue
model, their sampler pubs simulated) and the bucket the jobs' input and results live in;
``scenario`` reads the scenario; ``wire`` has the side's paths and its error shapes. It
shares IBM's sampler result shapes (``emulator.ibm.wire``); it must never import another
vendor's side.
"""

from flux_quantum.emulator.ibmqs.scenario import IbmQsBackendSpec, IbmQsFault, IbmQsScenario
from flux_quantum.emulator.ibmqs.service import IbmQsService
from flux_quantum.emulator.ibmqs.wire import API, PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# An on-premises IBM Quantum System (under /ibm-qs: its API, IAM and S3 bucket), as QRMI's
# IBMQuantumSystem resource reaches it.
SIDE = SideEntry(
    "ibm_qs", "ibm-quantum-system", (PREFIX,), serve(IbmQsService), IbmQsScenario, "ibm_qs",
    "--ibm-qs-scenario", "IBM Quantum System", lambda s: len(s.backends),
)  # fmt: skip

__all__ = [
    "API", "PREFIX", "SIDE", "IbmQsBackendSpec", "IbmQsFault", "IbmQsScenario", "IbmQsService",
]  # fmt: skip
