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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flux_quantum.emulator.scenario import DISTRIBUTIONS, QueueSpec, ScenarioError

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
class IqmFault:
    """One injected fault: an HTTP error, a delay, a reset connection or a failed job."""

    operations: tuple[str, ...] = ()
    device: str | None = None
    status: int | None = None
    error_code: str | None = None
    message: str | None = None
    after_commit: bool = False
    delay: float = 0.0
    reset: bool = False
    fail_job: str | None = None
    calls: tuple[int, ...] = ()
    first: int | None = None
    after: int | None = None
    every: int | None = None
    rate: float | None = None
    start: float | None = None
    end: float | None = None

    def selects(self, n: int, now: float, draw: float = 0.0) -> bool:
        """Whether the ``n``-th matching call (1-based) at emulated ``now`` is hit."""
        if self.start is not None and now < self.start:
            return False
        if self.end is not None and now >= self.end:
            return False
        return all(
            (
                not self.calls or n in self.calls,
                self.first is None or n <= self.first,
                self.after is None or n > self.after,
                self.every is None or n % self.every == 0,
                self.rate is None or draw < self.rate,
            )
        )


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
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ScenarioError(f"IQM scenario {path}: cannot read it ({exc.strerror})") from exc
        except yaml.YAMLError as exc:
            raise ScenarioError(f"IQM scenario {path}: not valid YAML") from exc
        return cls.from_dict(data if data is not None else {}, source=str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> IqmScenario:
        return _Reader(source).scenario(data)


class _Reader:
    """Typed reads from a scenario dict; every error says where it is."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> ScenarioError:
        return ScenarioError(f"IQM scenario {self.source}: {where} {problem}")

    def mapping(self, value: Any, where: str, accepted: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"must be a mapping, got {value!r:.40}")
        for key in value:
            if key not in accepted:
                raise self.fail(f"{where}.{key}", f"is unknown (accepted: {', '.join(accepted)})")
        return value

    def number(self, value: Any, where: str, low: float = 0.0) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise self.fail(where, f"must be a number, got {value!r:.40}")
        if value < low:
            raise self.fail(where, f"must be >= {low:g}, got {value!r}")
        return float(value)

    def integer(self, value: Any, where: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(where, f"must be an integer >= {low}, got {value!r:.40}")
        return value

    def choice(self, value: Any, where: str, accepted: Sequence[Any]) -> Any:
        if value not in accepted:
            raise self.fail(where, f"must be one of {', '.join(map(str, accepted))}, got {value!r}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"must be a non-empty string, got {value!r:.40}")
        return value

    def periods(self, value: Any, where: str) -> tuple[tuple[float, float], ...]:
        if not isinstance(value, list):
            raise self.fail(where, "must be a list of [start, end] pairs")
        periods = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{where}[{i}]", f"must be [start, end], got {pair!r:.40}")
            start = self.number(pair[0], f"{where}[{i}]")
            end = self.number(pair[1], f"{where}[{i}]")
            if end <= start:
                raise self.fail(f"{where}[{i}]", f"must end after it starts, got {pair!r}")
            periods.append((start, end))
        return tuple(sorted(periods))

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
        raw = top.get("devices")
        if not isinstance(raw, list) or not raw:
            raise self.fail("devices", "must list at least one device")
        devices = [self.device(entry, i) for i, entry in enumerate(raw)]
        ids = [d.id for d in devices]
        for i, name in enumerate(ids):
            if name in ids[:i]:
                raise self.fail(f"devices[{i}].id", f"repeats device {name!r}")
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
        queue = self.mapping(
            d.get("queue", {}),
            f"{where} queue",
            ("depth", "arrival_rate", "service_time", "distribution", "shot_time"),
        )
        service = self.number(queue.get("service_time", 2.0), f"{where} queue.service_time")
        depth = self.integer(queue.get("depth", 0), f"{where} queue.depth")
        arrivals = self.number(queue.get("arrival_rate", 0.0), f"{where} queue.arrival_rate")
        if service == 0 and (depth or arrivals):
            raise self.fail(f"{where} queue.service_time", "must be > 0 with depth or arrivals")
        qubits = self.integer(d.get("qubits", 20), f"{where} qubits", low=1)
        return IqmDeviceSpec(
            id=name,
            qubits=qubits,
            queue=QueueSpec(
                depth=depth,
                arrival_rate=arrivals,
                service_time=service,
                distribution=self.choice(
                    queue.get("distribution", "fixed"), f"{where} queue.distribution", DISTRIBUTIONS
                ),
                shot_time=self.number(queue.get("shot_time", 0.0), f"{where} queue.shot_time"),
            ),
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
        ops = f.get("operation", [])
        ops = [ops] if isinstance(ops, str) else ops
        if not isinstance(ops, list):
            raise self.fail(f"{where}.operation", "must be an operation or a list of them")
        for op in ops:
            self.choice(op, f"{where}.operation", OPERATIONS)
        device = f.get("device")
        if device is not None:
            self.choice(device, f"{where}.device", devices)
        status = self.integer(f["status"], f"{where}.status", 400) if "status" in f else None
        if status is not None and status > 599:
            raise self.fail(f"{where}.status", f"must be an HTTP error status, got {status}")
        error_code = (
            self.text(f["error_code"], f"{where}.error_code") if "error_code" in f else None
        )
        if error_code is not None and status is None:
            raise self.fail(f"{where}.error_code", "needs a status to answer with")
        delay = self.number(f.get("delay", 0.0), f"{where}.delay")
        fail_job = self.text(f["fail_job"], f"{where}.fail_job") if "fail_job" in f else None
        flags = {}
        for key in ("after_commit", "reset"):
            value = f.get(key, False)
            if not isinstance(value, bool):
                raise self.fail(f"{where}.{key}", f"must be true or false, got {value!r:.40}")
            flags[key] = value
        effects = [status is not None, delay > 0, fail_job is not None, flags["reset"]]
        if sum(effects) != 1 and not (flags["after_commit"] and delay > 0 and sum(effects) == 2):
            raise self.fail(where, "needs exactly one effect: status, delay, reset or fail_job")
        if fail_job is not None and ops != ["SubmitJob"]:
            raise self.fail(f"{where}.operation", "must be SubmitJob with fail_job")
        rate = self.number(f["rate"], f"{where}.rate") if "rate" in f else None
        if rate is not None and rate > 1:
            raise self.fail(f"{where}.rate", f"must be between 0 and 1, got {rate!r}")
        calls = f.get("calls", [])
        if not isinstance(calls, list):
            raise self.fail(f"{where}.calls", "must be a list of call numbers")
        return IqmFault(
            operations=tuple(ops),
            device=device,
            status=status,
            error_code=error_code,
            message=self.text(f["message"], f"{where}.message") if "message" in f else None,
            after_commit=flags["after_commit"],
            delay=delay,
            reset=flags["reset"],
            fail_job=fail_job,
            calls=tuple(self.integer(c, f"{where}.calls", 1) for c in calls),
            first=self.integer(f["first"], f"{where}.first", 1) if "first" in f else None,
            after=self.integer(f["after"], f"{where}.after") if "after" in f else None,
            every=self.integer(f["every"], f"{where}.every", 1) if "every" in f else None,
            rate=rate,
            start=self.number(f["start"], f"{where}.start") if "start" in f else None,
            end=self.number(f["end"], f"{where}.end") if "end" in f else None,
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
