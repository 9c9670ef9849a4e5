"""What the emulator's IQM side serves: quantum computers, their queues, windows and faults.

This module owns the IQM scenario format (YAML or a plain dict), its validation and the
default scenario. It must never touch the network, the clock or any emulator state: an
``IqmScenario`` is an immutable description, and every mistake in one is a
``ScenarioError`` naming the file and the field in one sentence.

Shape (every key but ``devices`` optional)::

    token: emulator-iqm-token      # the API token the service accepts (Bearer)
    price_per_second: 0.30         # credits per QPU second (IQM publishes no list price)
    long_poll: 0                   # real seconds a wait_until_terminal GET may be held
    max_simulated_qubits: 20
    strict: true                   # false: non-native instructions, uncoupled cz run anyway
    devices:
      - id: garnet                 # IQM's alias, the QRMI resource id (no '_': QRMI turns
        qubits: 20                 #   the last one into ':')
        max_slots: 4               # our jobs waiting or processing at once (IQM's
                                   #   max_queued_jobs_per_user); one more is refused
        queue: {depth: 2, service_time: 5, arrival_rate: 0.01, shot_time: 0.0}
        paused: [[100, 200]]       # maintenance: online, takes no job (QRMI: Paused)
        offline: [[500, 600]]      # down (QRMI: Offline)
        status: online             # or maintenance / offline for the whole run
        couplers: [[1, 2], ...]    # QB numbers coupled by a cz (default: Garnet's lattice
                                   #   for 20 qubits, else a square lattice)
    faults:
      - operation: SubmitJob       # or a list; see OPERATIONS
        device: garnet
        status: 503                # answered with IQM's error body ...
        error_code: internal_error
        calls: [1]                 # ... on these matching calls (or first/after/every,
                                   #   rate, start/end in emulated seconds)
      - operation: SubmitJob
        fail_job: "calibration drifted"   # the job is created and later fails

Prices: IQM Resonance publishes each quantum computer's pay-as-you-go price per second
(``pricing.payg_price_per_second``, in credits) in its API, not as a public list price;
the default 0.30 is the value qrmi's own IQM tests use. A completed job is billed its run
seconds x ``price_per_second``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator import topology
from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = (
    "GetQuantumComputer",
    "SubmitJob",
    "GetJob",
    "CancelJob",
    "GetJobArtifact",
    "GetDynamicQuantumArchitecture",
    "GetCalibrationSet",
    "GetQualityMetrics",
    "GetQcArtifact",
)
STATUSES = ("online", "maintenance", "offline")
# IQM's error codes by HTTP status (the ``error_code`` of its error body).
ERROR_CODES: Mapping[int, str] = {
    400: "invalid_input",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "request_payload_too_large",
    429: "rate_limit_exceeded",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
}


def _device_id(name: str) -> str | None:
    # QRMI reads '_' and ',' in a resource id, and its settings are environment variables
    # named <id>_QRMI_IQM_ISA_*: letters and digits only.
    return (
        None
        if name.isascii() and name.isalnum()
        else f"must be letters and digits only, got {name!r}"
    )


@dataclass(frozen=True)
class IqmDeviceSpec(Record):
    """One emulated IQM quantum computer."""

    id: str = setting(check=_device_id)
    qubits: int = 20
    queue: QueueSpec = QueueSpec(service_time=2.0)
    max_slots: int = 8
    status: str = setting("online", choices=STATUSES)
    paused: tuple[tuple[float, float], ...] = ()
    offline: tuple[tuple[float, float], ...] = ()
    display_name: str = setting("", kind=str)
    description: str = setting("", kind=str)
    max_shots: int = 100_000
    max_executions: int = 1_000_000
    couplers: tuple[tuple[int, int], ...] = setting((), kind="pairs")

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """Its coupled qubits, 0-based: the scenario's ``couplers`` (QB numbers), else
        Garnet's lattice for 20 qubits, else a square lattice (IQM's Crystal layouts)."""
        if self.couplers:
            return tuple((a - 1, b - 1) for a, b in self.couplers)
        return topology.GARNET if self.qubits == 20 else tuple(topology.square(self.qubits))

    @classmethod
    def completed(cls, values: dict[str, Any]) -> dict[str, Any]:
        qubits = values.get("qubits", 20)
        return {
            **values,
            "display_name": values.get("display_name") or values["id"].capitalize(),
            "description": values.get("description")
            or f"{qubits}-qubit QPU (flux-quantum emulator)",
        }

    @property
    def name(self) -> str:
        return self.id

    @property
    def queue_key(self) -> str:
        """A stable identifier the shared ``DeviceQueue`` seeds from."""
        return f"iqm:{self.id}"

    def qubit_names(self) -> list[str]:
        return [f"QB{i + 1}" for i in range(self.qubits)]


@dataclass(frozen=True)
class IqmFault(JobFault):
    """One injected fault: an HTTP error (with IQM's ``error_code``), a delay, a reset
    connection or a failed job."""

    error_code: str | None = None

    def invalid(self) -> tuple[str, str] | None:
        if self.error_code is not None and self.status is None:
            return "error_code", "needs a status to answer with"
        return None


# The default: IQM's cloud Garnet (20 qubits, as IQM Resonance lists it) and an
# on-premises 54-qubit IQM Radiance as a site would run it, a busy and a quiet queue.
DEFAULT_IQM_SCENARIO: dict[str, Any] = {
    "devices": [
        {
            "id": "garnet",
            "qubits": 20,
            "display_name": "Garnet",
            "max_slots": 8,
            "queue": {"depth": 6, "arrival_rate": 0.02, "service_time": 6.0},
        },
        {
            "id": "radiance",
            "qubits": 54,
            "display_name": "Radiance (on premises)",
            "max_slots": 4,
            "queue": {"depth": 1, "service_time": 4.0},
        },
    ],
}


@dataclass(frozen=True)
class IqmScenario(ScenarioFile):
    """Everything the IQM side serves, immutable."""

    LABEL = "IQM"
    DEFAULT = DEFAULT_IQM_SCENARIO

    devices: tuple[IqmDeviceSpec, ...] = device_list("device")
    token: str = "emulator-iqm-token"
    price_per_second: float = 0.30
    long_poll: float = 0.0
    max_simulated_qubits: int = 20
    faults: tuple[IqmFault, ...] = fault_list(OPERATIONS, "SubmitJob")
    source: str = "<dict>"
    # Strict: instructions outside the native set, or a cz on uncoupled qubits, refused.
    strict: bool = True

    def device(self, device_id: str) -> IqmDeviceSpec | None:
        return next((d for d in self.devices if d.id == device_id), None)
