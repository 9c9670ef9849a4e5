"""What the emulator's IBM Quantum System side serves: backends, their lanes, queues and faults.

This module owns the IBM Quantum System scenario format (YAML or a plain dict), its
validation and the default scenario. It must never touch the network, the clock or any
emulator state: an ``IbmQsScenario`` is an immutable description, and every mistake in one
is a ``ScenarioError`` naming the file and the field in one sentence.

Shape (every key but ``backends`` optional)::

    apikey: emulator-ibm-qs-apikey   # the IBM Cloud API key IAM accepts
    crn: crn:v1:...                  # the Service-CRN header the API accepts
    access_key_id: emulator-qs-key   # the S3 access key the bucket accepts (SigV4's
    secret_access_key: emulator-qs-secret  #   Credential; the signature is not checked)
    bucket: flux-quantum-qs          # the S3 bucket jobs' input and results live in
    region: us-east-1
    price_per_second: 1.60           # US dollars per QPU second
    strict: true                     # false: circuits outside a backend's ISA run anyway
    backends:
      - name: ibm_kobe               # the QRMI resource id
        qubits: 5
        lanes: 2                     # hpc_workload_manager lanes: jobs running at once
        queue: {depth: 2, service_time: 5}
        paused: [[100, 200]]         # paused: jobs wait, none starts (QRMI: Paused)
        status: online               # or paused / offline for the whole run
        basis_gates: [ecr, id, rz, sx, x]
        coupling_map: [[0, 1], ...]  # default: heavy-hex for 127/133/156 qubits, else a line
    faults:
      - operation: CreateJob         # or a list; see OPERATIONS
        backend: ibm_kobe
        status: 503                  # answered with the API's error body ...
        calls: [1]                   # ... on these matching calls (first/after/every, rate,
                                     #   start/end in emulated seconds)
      - operation: CreateJob
        fail_job: "calibration drifted"  # the job is created and later fails

Prices: IBM publishes no list price for an on-premises IBM Quantum System; the default is
the pay-as-you-go rate of IBM's cloud (US$1.60 per QPU second) for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator import topology
from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = (
    "IamToken",
    "ListBackends",
    "GetBackend",
    "GetBackendLanes",
    "GetBackendConfiguration",
    "GetBackendProperties",
    "ListJobs",
    "CreateJob",
    "GetJob",
    "CancelJob",
    "DeleteJob",
    "PutObject",
    "GetObject",
)
STATUSES = ("online", "paused", "offline")


def _backend_name(name: str) -> str | None:
    # QRMI reads its settings from environment variables named <name>_QRMI_IBM_QS_*.
    if name.isascii() and name.replace("_", "").isalnum():
        return None
    return f"must be letters, digits and '_', got {name!r}"


@dataclass(frozen=True)
class IbmQsBackendSpec(Record):
    """One emulated backend of an IBM Quantum System."""

    name: str = setting(check=_backend_name)
    qubits: int = 5
    queue: QueueSpec = QueueSpec(service_time=2.0)
    lanes: int = 1
    status: str = setting("online", choices=STATUSES)
    paused: tuple[tuple[float, float], ...] = ()
    basis_gates: tuple[str, ...] = setting(("ecr", "id", "rz", "sx", "x"), noun="gate name")
    coupling_map: tuple[tuple[int, int], ...] = setting((), kind="pairs")

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """Its coupled qubit pairs (``topology.ibm``)."""
        return topology.ibm(self.qubits, self.coupling_map)

    @property
    def queue_key(self) -> str:
        """A stable identifier the shared ``DeviceQueue`` seeds from."""
        return f"ibm-qs:{self.name}"


IbmQsFault = JobFault  # the side's faults (see JobFault)


# The default: one on-premises 5-qubit backend, two lanes, a short queue.
DEFAULT_IBM_QS_SCENARIO: dict[str, Any] = {
    "backends": [
        {"name": "ibm_kobe", "qubits": 5, "lanes": 2, "queue": {"depth": 1, "service_time": 4.0}}
    ],
}


@dataclass(frozen=True)
class IbmQsScenario(ScenarioFile):
    """Everything the IBM Quantum System side serves, immutable."""

    LABEL = "IBM Quantum System"
    DEFAULT = DEFAULT_IBM_QS_SCENARIO

    backends: tuple[IbmQsBackendSpec, ...] = device_list("backend")
    apikey: str = "emulator-ibm-qs-apikey"
    crn: str = "crn:v1:flux-quantum:emulator:quantum-system:::"
    access_key_id: str = "emulator-qs-access-key"
    secret_access_key: str = "emulator-qs-secret-key"
    bucket: str = "flux-quantum-qs"
    region: str = "us-east-1"
    price_per_second: float = 1.60
    max_simulated_qubits: int = 20
    faults: tuple[IbmQsFault, ...] = fault_list(OPERATIONS, "CreateJob")
    source: str = "<dict>"
    # Strict: a circuit not written in its backend's ISA fails with IBM's 1517.
    strict: bool = True

    def backend(self, name: str) -> IbmQsBackendSpec | None:
        return next((b for b in self.backends if b.name == name), None)
