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
    backends:
      - name: ibm_kobe               # the QRMI resource id
        qubits: 5
        lanes: 2                     # hpc_workload_manager lanes: jobs running at once
        queue: {depth: 2, service_time: 5}
        paused: [[100, 200]]         # paused: jobs wait, none starts (QRMI: Paused)
        status: online               # or paused / offline for the whole run
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.reading import Reader, ScenarioFile
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
DEFAULT_APIKEY = "emulator-ibm-qs-apikey"
DEFAULT_CRN = "crn:v1:flux-quantum:emulator:quantum-system:::"
DEFAULT_ACCESS_KEY = "emulator-qs-access-key"
DEFAULT_SECRET_KEY = "emulator-qs-secret-key"
DEFAULT_BUCKET = "flux-quantum-qs"
DEFAULT_PRICE_PER_SECOND = 1.60


@dataclass(frozen=True)
class IbmQsBackendSpec:
    """One emulated backend of an IBM Quantum System."""

    name: str
    qubits: int
    queue: QueueSpec = QueueSpec()
    lanes: int = 1
    status: str = "online"
    paused: tuple[tuple[float, float], ...] = ()

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

    backends: tuple[IbmQsBackendSpec, ...]
    apikey: str = DEFAULT_APIKEY
    crn: str = DEFAULT_CRN
    access_key_id: str = DEFAULT_ACCESS_KEY
    secret_access_key: str = DEFAULT_SECRET_KEY
    bucket: str = DEFAULT_BUCKET
    region: str = "us-east-1"
    price_per_second: float = DEFAULT_PRICE_PER_SECOND
    max_simulated_qubits: int = 20
    faults: tuple[IbmQsFault, ...] = ()
    source: str = "<dict>"

    def backend(self, name: str) -> IbmQsBackendSpec | None:
        return next((b for b in self.backends if b.name == name), None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> IbmQsScenario:
        return _Reader("IBM Quantum System", source).scenario(data)


class _Reader(Reader):
    """The scenario's own fields, read with the shared typed reads."""

    def scenario(self, data: Mapping[str, Any]) -> IbmQsScenario:
        texts = ("apikey", "crn", "access_key_id", "secret_access_key", "bucket", "region")
        accepted = (*texts, "price_per_second", "max_simulated_qubits", "backends", "faults")
        top = self.mapping(data, "(top level)", accepted)
        backends, faults = self.devices_and_faults(
            top, "backends", self.backend, OPERATIONS, "CreateJob"
        )
        defaults = IbmQsScenario(backends=())
        values = {k: self.text(top.get(k, getattr(defaults, k)), k) for k in texts}
        return IbmQsScenario(
            backends=tuple(backends),
            price_per_second=self.number(
                top.get("price_per_second", DEFAULT_PRICE_PER_SECOND), "price_per_second"
            ),
            max_simulated_qubits=self.integer(
                top.get("max_simulated_qubits", 20), "max_simulated_qubits", low=1
            ),
            faults=faults,
            source=self.source,
            **values,
        )

    def backend(self, raw: Any, index: int) -> IbmQsBackendSpec:
        where = f"backends[{index}]"
        d = self.mapping(raw, where, ("name", "qubits", "queue", "lanes", "status", "paused"))
        name = self.text(d.get("name"), f"{where}.name")
        if not name.isascii() or not name.replace("_", "").isalnum():
            # QRMI reads its settings from environment variables named <name>_QRMI_IBM_QS_*.
            raise self.fail(f"{where}.name", f"must be letters, digits and '_', got {name!r}")
        where = f"backend {name!r}:"
        return IbmQsBackendSpec(
            name=name,
            qubits=self.integer(d.get("qubits", 5), f"{where} qubits", low=1),
            queue=self.queue(d.get("queue", {}), where, service_time=2.0),
            lanes=self.integer(d.get("lanes", 1), f"{where} lanes", low=1),
            status=self.choice(d.get("status", "online"), f"{where} status", STATUSES),
            paused=self.periods(d.get("paused", []), f"{where} paused"),
        )
