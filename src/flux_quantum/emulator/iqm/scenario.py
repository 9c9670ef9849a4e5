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
    devices:
      - id: garnet                 # IQM's alias, the QRMI resource id (no '_': QRMI turns
        qubits: 20                 #   the last one into ':')
        max_slots: 4               # our jobs waiting or processing at once (IQM's
                                   #   max_queued_jobs_per_user); one more is refused
        queue: {depth: 2, service_time: 5, arrival_rate: 0.01, shot_time: 0.0}
        paused: [[100, 200]]       # maintenance: online, takes no job (QRMI: Paused)
        offline: [[500, 600]]      # down (QRMI: Offline)
        status: online             # or maintenance / offline for the whole run
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux_quantum.emulator.reading import Reader, load_yaml
from flux_quantum.emulator.scenario import BaseFault, QueueSpec

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
DEFAULT_TOKEN = "emulator-iqm-token"
DEFAULT_PRICE_PER_SECOND = 0.30


@dataclass(frozen=True)
class IqmDeviceSpec:
    """One emulated IQM quantum computer."""

    id: str
    qubits: int
    queue: QueueSpec = QueueSpec()
    max_slots: int = 8
    status: str = "online"
    paused: tuple[tuple[float, float], ...] = ()
    offline: tuple[tuple[float, float], ...] = ()
    display_name: str = ""
    description: str = ""
    max_shots: int = 100_000
    max_executions: int = 1_000_000

    @property
    def queue_key(self) -> str:
        """A stable identifier the shared ``DeviceQueue`` seeds from."""
        return f"iqm:{self.id}"

    def qubit_names(self) -> list[str]:
        return [f"QB{i + 1}" for i in range(self.qubits)]


@dataclass(frozen=True)
class IqmFault(BaseFault):
    """One injected fault: an HTTP error, a delay, a reset connection or a failed job."""

    device: str | None = None
    status: int | None = None
    error_code: str | None = None
    fail_job: str | None = None


@dataclass(frozen=True)
class IqmScenario:
    """Everything the IQM side serves, immutable."""

    devices: tuple[IqmDeviceSpec, ...]
    token: str = DEFAULT_TOKEN
    price_per_second: float = DEFAULT_PRICE_PER_SECOND
    long_poll: float = 0.0
    max_simulated_qubits: int = 20
    faults: tuple[IqmFault, ...] = ()
    source: str = "<dict>"

    def device(self, device_id: str) -> IqmDeviceSpec | None:
        return next((d for d in self.devices if d.id == device_id), None)

    @classmethod
    def default(cls) -> IqmScenario:
        """IQM Garnet (cloud, 20 qubits) and an on-premises 54-qubit IQM Radiance."""
        return cls.from_dict(DEFAULT_IQM_SCENARIO, source="<default IQM scenario>")

    @classmethod
    def from_yaml(cls, path: str | Path) -> IqmScenario:
        return cls.from_dict(*load_yaml(path, "IQM"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> IqmScenario:
        return _Reader("IQM", source).scenario(data)


class _Reader(Reader):
    """The IQM scenario's own fields, read with the shared typed reads."""

    def scenario(self, data: Mapping[str, Any]) -> IqmScenario:
        accepted = (
            "token",
            "price_per_second",
            "long_poll",
            "max_simulated_qubits",
            "devices",
            "faults",
        )
        top = self.mapping(data, "(top level)", accepted)
        raw = self.listed(top.get("devices"), "devices", "device")
        devices = [self.device(entry, i) for i, entry in enumerate(raw)]
        ids = [d.id for d in devices]
        self.distinct(ids, "devices[{i}].id", "device")
        faults = tuple(self.fault(f, i, ids) for i, f in enumerate(top.get("faults") or []))
        return IqmScenario(
            devices=tuple(devices),
            token=self.text(top.get("token", DEFAULT_TOKEN), "token"),
            price_per_second=self.number(
                top.get("price_per_second", DEFAULT_PRICE_PER_SECOND), "price_per_second"
            ),
            long_poll=self.number(top.get("long_poll", 0.0), "long_poll"),
            max_simulated_qubits=self.integer(
                top.get("max_simulated_qubits", 20), "max_simulated_qubits", low=1
            ),
            faults=faults,
            source=self.source,
        )

    def device(self, raw: Any, index: int) -> IqmDeviceSpec:
        where = f"devices[{index}]"
        accepted = (
            "id", "qubits", "queue", "max_slots", "status", "paused", "offline",
            "display_name", "description", "max_shots", "max_executions",
        )  # fmt: skip
        d = self.mapping(raw, where, accepted)
        name = self.text(d.get("id"), f"{where}.id")
        if not name.isascii() or not name.isalnum():
            # QRMI reads '_' and ',' in a resource id, and its settings are environment
            # variables named <id>_QRMI_IQM_ISA_*: letters and digits only.
            raise self.fail(f"{where}.id", f"must be letters and digits only, got {name!r}")
        where = f"device {name!r}:"
        queue = self.queue(d.get("queue", {}), where, service_time=2.0)
        qubits = self.integer(d.get("qubits", 20), f"{where} qubits", low=1)
        return IqmDeviceSpec(
            id=name,
            qubits=qubits,
            queue=queue,
            max_slots=self.integer(d.get("max_slots", 8), f"{where} max_slots", low=1),
            status=self.choice(d.get("status", "online"), f"{where} status", STATUSES),
            paused=self.periods(d.get("paused", []), f"{where} paused"),
            offline=self.periods(d.get("offline", []), f"{where} offline"),
            display_name=str(d.get("display_name") or name.capitalize()),
            description=str(d.get("description") or f"{qubits}-qubit QPU (flux-quantum emulator)"),
            max_shots=self.integer(d.get("max_shots", 100_000), f"{where} max_shots", low=1),
            max_executions=self.integer(
                d.get("max_executions", 1_000_000), f"{where} max_executions", low=1
            ),
        )

    def fault(self, raw: Any, index: int, devices: Sequence[str]) -> IqmFault:
        where = f"faults[{index}]"
        accepted = (
            "operation", "device", "status", "error_code", "message", "after_commit", "delay",
            "reset", "fail_job", "calls", "first", "after", "every", "rate", "start", "end",
        )  # fmt: skip
        f = self.mapping(raw, where, accepted)
        ops = self.operations(f, where, OPERATIONS)
        device = self.target(f, "device", where, devices)
        error_code = self.optional(f, "error_code", where)
        if error_code is not None and "status" not in f:
            raise self.fail(f"{where}.error_code", "needs a status to answer with")
        return IqmFault(
            operations=tuple(ops),
            device=device,
            error_code=error_code,
            **self.effects(f, where, ops, "SubmitJob"),
        )


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
