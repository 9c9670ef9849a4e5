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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.reading import Reader, ScenarioFile
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = (
    "ListDevices", "GetDevice", "RegisterJob", "UploadInput", "SubmitJob", "ListJobs",
    "GetJob", "GetJobStatus", "CancelJob", "DeleteJob", "DownloadObject",
)  # fmt: skip
TYPES = ("QPU", "simulator")
STATUSES = ("available", "unavailable")
DEFAULT_TOKEN = "emulator-oqtopus-token"
DEFAULT_PRICE_PER_SECOND = 0.30


@dataclass(frozen=True)
class OqtopusDeviceSpec:
    """One emulated OQTOPUS device (a QPU or a simulator)."""

    name: str
    qubits: int
    type: str = "QPU"
    basis_gates: tuple[str, ...] = ("sx", "x", "rz", "cx")
    queue: QueueSpec = QueueSpec()
    status: str = "available"
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

    devices: tuple[OqtopusDeviceSpec, ...]
    token: str = DEFAULT_TOKEN
    price_per_second: float = DEFAULT_PRICE_PER_SECOND
    max_simulated_qubits: int = 20
    faults: tuple[OqtopusFault, ...] = ()
    source: str = "<dict>"

    def device(self, name: str) -> OqtopusDeviceSpec | None:
        return next((d for d in self.devices if d.name == name), None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> OqtopusScenario:
        return _Reader("OQTOPUS", source).scenario(data)


class _Reader(Reader):
    """The scenario's own fields, read with the shared typed reads."""

    def scenario(self, data: Mapping[str, Any]) -> OqtopusScenario:
        accepted = ("token", "price_per_second", "max_simulated_qubits", "devices", "faults")
        top = self.mapping(data, "(top level)", accepted)
        devices, faults = self.devices_and_faults(
            top, "devices", self.device_spec, OPERATIONS, "SubmitJob"
        )
        return OqtopusScenario(
            devices=tuple(devices),
            token=self.text(top.get("token", DEFAULT_TOKEN), "token"),
            price_per_second=self.number(
                top.get("price_per_second", DEFAULT_PRICE_PER_SECOND), "price_per_second"
            ),
            max_simulated_qubits=self.integer(
                top.get("max_simulated_qubits", 20), "max_simulated_qubits", low=1
            ),
            faults=faults,
            source=self.source,
        )

    def device_spec(self, raw: Any, index: int) -> OqtopusDeviceSpec:
        where = f"devices[{index}]"
        d = self.mapping(
            raw, where,
            ("name", "type", "qubits", "basis_gates", "queue", "status", "unavailable",
             "max_shots"),
        )  # fmt: skip
        name = self.text(d.get("name"), f"{where}.name")
        where = f"device {name!r}:"
        gates = d.get("basis_gates", list(OqtopusDeviceSpec.basis_gates))
        if not isinstance(gates, list) or not gates:
            raise self.fail(f"{where} basis_gates", "must list at least one gate name")
        return OqtopusDeviceSpec(
            name=name,
            qubits=self.integer(d.get("qubits", 1), f"{where} qubits", low=1),
            type=self.choice(d.get("type", "QPU"), f"{where} type", TYPES),
            basis_gates=tuple(self.text(g, f"{where} basis_gates") for g in gates),
            queue=self.queue(d.get("queue", {}), where, service_time=2.0),
            status=self.choice(d.get("status", "available"), f"{where} status", STATUSES),
            unavailable=self.periods(d.get("unavailable", []), f"{where} unavailable"),
            max_shots=self.integer(d.get("max_shots", 100_000), f"{where} max_shots", low=1),
        )
