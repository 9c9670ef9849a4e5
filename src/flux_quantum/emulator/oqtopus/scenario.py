"""What the emulator's OQTOPUS side serves: devices, their queues, maintenance and faults.

This module owns the OQTOPUS scenario format (YAML or a plain dict), its validation and
the default scenario. It must never touch the network, the clock or any emulator state:
an ``OqtopusScenario`` is an immutable description, and every mistake in one is a
``ScenarioError`` naming the file and the field in one sentence.

Shape (every key but ``devices`` optional)::

    token: emulator-oqtopus-token    # the API token the User API accepts (q-api-token)
    price_per_second: 0.30           # per QPU second (OQTOPUS publishes no list price)
    max_simulated_qubits: 20
    devices:
      - name: anemone                # OQTOPUS's device_id
        type: QPU                    # or simulator
        qubits: 64
        basis_gates: [sx, x, rz, cx]
        queue: {depth: 2, service_time: 5}
        unavailable: [[100, 200]]    # status unavailable (maintenance): jobs wait
        status: available            # or unavailable for the whole run
        max_shots: 100000
    faults:
      - operation: SubmitJob         # or a list; see OPERATIONS
        device: anemone
        status: 503                  # answered with OQTOPUS's error body ...
        calls: [1]                   # ... on these matching calls (first/after/every,
                                     #   rate, start/end in emulated seconds)
      - operation: SubmitJob
        fail_job: "calibration drifted"  # the job is submitted and later fails
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = (
    "ListDevices", "GetDevice", "RegisterJob", "UploadInput", "SubmitJob", "ListJobs",
    "GetJob", "GetJobStatus", "CancelJob", "DeleteJob", "DownloadObject",
)  # fmt: skip
TYPES = ("QPU", "simulator")
STATUSES = ("available", "unavailable")


@dataclass(frozen=True)
class OqtopusDeviceSpec(Record):
    """One emulated OQTOPUS device (a QPU or a simulator)."""

    name: str
    qubits: int = 1
    type: str = setting("QPU", choices=TYPES)
    basis_gates: tuple[str, ...] = setting(("sx", "x", "rz", "cx"), noun="gate name")
    queue: QueueSpec = QueueSpec(service_time=2.0)
    status: str = setting("available", choices=STATUSES)
    unavailable: tuple[tuple[float, float], ...] = ()
    max_shots: int = 100_000

    @property
    def queue_key(self) -> str:
        return f"oqtopus:{self.name}"


OqtopusFault = JobFault  # the side's faults (see JobFault)


# The default: a 64-qubit QPU with a queue, and a simulator.
DEFAULT_OQTOPUS_SCENARIO: dict[str, Any] = {
    "devices": [
        {"name": "anemone", "type": "QPU", "qubits": 64,
         "queue": {"depth": 2, "service_time": 6.0}},
        {"name": "qulacs", "type": "simulator", "qubits": 20,
         "basis_gates": ["x", "y", "z", "h", "s", "sdg", "t", "tdg", "rx", "ry", "rz", "cx"],
         "queue": {"service_time": 1.0}},
    ],
}  # fmt: skip


@dataclass(frozen=True)
class OqtopusScenario(ScenarioFile):
    """Everything the OQTOPUS side serves, immutable."""

    LABEL = "OQTOPUS"
    DEFAULT = DEFAULT_OQTOPUS_SCENARIO

    devices: tuple[OqtopusDeviceSpec, ...] = device_list("device")
    token: str = "emulator-oqtopus-token"
    price_per_second: float = 0.30
    max_simulated_qubits: int = 20
    faults: tuple[OqtopusFault, ...] = fault_list(OPERATIONS, "SubmitJob")
    source: str = "<dict>"

    def device(self, name: str) -> OqtopusDeviceSpec | None:
        return next((d for d in self.devices if d.name == name), None)
