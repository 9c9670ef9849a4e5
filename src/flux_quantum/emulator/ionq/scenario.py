"""What the emulator's IonQ side serves: backends, their queues, prices and faults.

This module owns the IonQ scenario format (YAML or a plain dict), its validation and the
default scenario. It must never touch the network, the clock or any emulator state: an
``IonqScenario`` is an immutable description, and every mistake in one is a
``ScenarioError`` naming the file and the field in one sentence.

Shape (every key but ``backends`` optional)::

    api_key: emulator-ionq-key       # the key clients send as "Authorization: apiKey KEY"
    max_simulated_qubits: 20
    backends:
      - name: qpu.aria-1             # IonQ's backend name
        qubits: 25
        status: available            # available, unavailable or retired
        queue: {depth: 3, service_time: 20}
        price: {per_task: 0.30, per_shot: 0.03}   # what a job costs (sessions' cost limits)
        max_shots: 100000
        noise_models: []             # the simulator's: ideal, aria-1, forte-1, ...
    faults:
      - operation: CreateJob         # or a list; see OPERATIONS
        backend: qpu.aria-1
        status: 503                  # answered with IonQ's error body ...
        calls: [1]                   # ... on these matching calls
      - operation: CreateJob
        fail_job: "qubit lost"       # the job is created and fails on the QPU
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = (
    "ListBackends", "GetBackend", "CreateJob", "GetJob", "ListJobs", "CancelJob",
    "GetProbabilities", "CreateSession", "GetSession", "EndSession", "DeleteJob",
    "GetJobCost", "EstimateJobCost", "WhoAmI", "ListCharacterizations", "GetCharacterization",
    "ListSessions", "ListSessionJobs",
)  # fmt: skip
STATUSES = ("available", "unavailable", "retired")
# The noise models IonQ's simulator takes, with the emulator's readout flip probability.
NOISE_MODELS = {
    "ideal": 0.0,
    "harmony": 0.01,
    "aria-1": 0.005,
    "aria-2": 0.005,
    "forte-1": 0.003,
    "forte-enterprise-1": 0.003,
}


@dataclass(frozen=True)
class Price:
    """What a job costs: ``per_task`` plus ``per_shot`` x its shots (US dollars)."""

    per_task: float = 0.0
    per_shot: float = 0.0


@dataclass(frozen=True)
class IonqBackendSpec(Record):
    """One emulated IonQ backend (a QPU or the cloud simulator)."""

    name: str
    qubits: int = 25
    status: str = setting("available", choices=STATUSES)
    queue: QueueSpec = QueueSpec(service_time=5.0)
    price: Price = Price()
    max_shots: int = 100_000
    noise_models: tuple[str, ...] = setting(
        (), choices=tuple(NOISE_MODELS), noun="noise model name", empty=True
    )

    @property
    def queue_key(self) -> str:
        return f"ionq:{self.name}"

    def cost(self, shots: int) -> float:
        """What a job of ``shots`` shots costs here (US dollars)."""
        return round(self.price.per_task + self.price.per_shot * shots, 6)


IonqFault = JobFault  # the side's faults (see JobFault)


# The default: Aria and Forte with queues, and the simulator with IonQ's noise models.
# Prices: Amazon Braket's list prices of the same QPUs (per task and per shot).
DEFAULT_IONQ_SCENARIO: dict[str, Any] = {
    "backends": [
        {"name": "qpu.aria-1", "qubits": 25, "queue": {"depth": 2, "service_time": 8.0},
         "price": {"per_task": 0.30, "per_shot": 0.03}},
        {"name": "qpu.forte-1", "qubits": 36, "queue": {"depth": 1, "service_time": 10.0},
         "price": {"per_task": 0.30, "per_shot": 0.08}},
        {"name": "simulator", "qubits": 29, "queue": {"service_time": 0.5},
         "noise_models": list(NOISE_MODELS)},
    ],
}  # fmt: skip


@dataclass(frozen=True)
class IonqScenario(ScenarioFile):
    """Everything the IonQ side serves, immutable."""

    LABEL = "IonQ"
    DEFAULT = DEFAULT_IONQ_SCENARIO

    backends: tuple[IonqBackendSpec, ...] = device_list("backend")
    api_key: str = "flux-quantum-emulator-ionq"
    max_simulated_qubits: int = 20
    faults: tuple[IonqFault, ...] = fault_list(OPERATIONS, "CreateJob")
    source: str = "<dict>"

    def backend(self, name: str) -> IonqBackendSpec | None:
        return next((b for b in self.backends if b.name == name), None)
