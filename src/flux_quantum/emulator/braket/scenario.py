"""The Braket side's scenario: which devices exist, how loaded their queues are, when they are
offline, which faults they inject and which reservations (Braket Direct) are booked.

This module owns the Braket scenario format (YAML or a plain dict; the emulator's main
scenario, ``Scenario``), its validation and the default scenario; the pieces every side's
scenario shares (a queue, a price, offline periods, the base fault) are the emulator's
``scenario``. It must never touch the network, the clock or any emulator state: a
``Scenario`` is an immutable description, and every mistake in one is reported as a
``ScenarioError`` naming the file, the device and the field in one sentence.
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml

from flux_quantum.emulator.scenario import (
    DISTRIBUTIONS,
    Availability,
    BaseFault,
    Cost,
    OfflinePeriod,
    QueueSpec,
    ScenarioError,
)

DEVICE_TYPES = ("QPU", "SIMULATOR")
DEVICE_STATUSES = ("ONLINE", "OFFLINE", "RETIRED", "PAUSED")
STATUS_REASONS = ("OUTSIDE_AVAILABILITY_WINDOW", "MAINTENANCE", "RESERVATION")
COST_UNITS = ("shot", "task", "minute")
BACKENDS = ("braket_sv", "braket_dm")
EXECUTION_DAYS = (
    "Everyday",
    "Weekdays",
    "Weekend",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)

# Braket's error codes and their HTTP status (botocore braket 2019-09-01 model).
BRAKET_ERRORS: Mapping[str, int] = {
    "ValidationException": 400,
    "ServiceQuotaExceededException": 402,
    "AccessDeniedException": 403,
    "ResourceNotFoundException": 404,
    "ConflictException": 409,
    "DeviceRetiredException": 410,
    "DeviceOfflineException": 424,
    "ThrottlingException": 429,
    "InternalServiceException": 500,
}
# S3 error codes a fault may inject into the emulated S3 (XML errors).
S3_ERRORS: Mapping[str, int] = {
    "AccessDenied": 403,
    "NoSuchKey": 404,
    "InternalError": 500,
    "SlowDown": 503,
}
BRAKET_OPERATIONS = (
    "CreateQuantumTask",
    "GetQuantumTask",
    "CancelQuantumTask",
    "CreateJob",
    "GetJob",
    "CancelJob",
    "SearchQuantumTasks",
    "SearchJobs",
    "GetDevice",
    "SearchDevices",
    "ListTagsForResource",
    "TagResource",
    "UntagResource",
)
S3_OPERATIONS = (
    "GetObject",
    "PutObject",
    "HeadObject",
    "DeleteObject",
    "ListObjectsV2",
    "HeadBucket",
    "CreateBucket",
)

# A Braket Direct reservation ARN (botocore's Association.arn pattern, narrowed to reservations).
RESERVATION_ARN = re.compile(r"arn:aws:braket:[a-z0-9-]+:[0-9]{12}:reservation/[A-Za-z0-9][\w.-]*")
RESERVATION_ARN_SHAPE = "arn:aws:braket:<region>:<12 digits>:reservation/<id>"

_PROVIDERS = {
    "amazon": "Amazon Braket",
    "ionq": "IonQ",
    "iqm": "IQM",
    "rigetti": "Rigetti",
    "quera": "QuEra",
    "aqt": "AQT",
    "local": "flux-quantum emulator",
}


@dataclass(frozen=True)
class ExecutionWindow:
    """A calendar execution window as the SDK's ``DeviceExecutionWindow`` shows it."""

    day: str = "Everyday"
    start: str = "00:00:00"
    end: str = "23:59:59"


@dataclass(frozen=True)
class Fault(BaseFault):
    """One injected fault: which calls it hits and what happens to them.

    Exactly one effect: ``error`` (a Braket or S3 error code), ``delay`` (answer after that
    many real seconds), ``reset`` (close the connection without an answer), ``fail_task``
    (CreateQuantumTask succeeds but the task ends FAILED with this reason) or
    ``cancel_task`` (CreateQuantumTask succeeds but Braket cancels the task when it would
    start running). ``after_commit``: the call is applied first (a task created, a cancel
    done), then the error, reset or delay (a delay may then go with an error or a reset);
    with ``reset`` it is a create whose answer is lost. Selection counts the calls that
    match ``operation`` and ``device`` (1-based): ``calls`` lists them, ``first`` takes the
    first N, ``after`` those after the Nth, ``every`` each Nth, ``rate`` a seeded fraction;
    ``start``/``end`` bound emulated time.
    """

    device: str | None = None
    error: str | None = None
    fail_task: str | None = None
    cancel_task: bool = False

    @property
    def status(self) -> int:
        """HTTP status of ``error``."""
        if self.error is None:
            return 200
        return BRAKET_ERRORS.get(self.error) or S3_ERRORS[self.error]

    @property
    def is_s3(self) -> bool:
        return self.error in S3_ERRORS


@dataclass(frozen=True)
class CalibrationSpec:
    """A QPU's published quality: typical one-qubit gate, two-qubit gate and readout
    fidelities. Each qubit (and coupled pair) gets the typical figure moved by a fixed
    pattern of 0, +spread, -spread, +spread/2, -spread/2, so the median stays the figure."""

    one_qubit: float
    two_qubit: float
    readout: float
    spread: float = 0.0


@dataclass(frozen=True)
class ProgramSetSpec:
    """A device's Braket program sets (the ``braket.ir.openqasm.program_set`` action, as
    its capabilities advertise it): at most ``max_executables`` executables and
    ``max_total_shots`` shots across them in one task."""

    max_executables: int = 100
    max_total_shots: int = 100_000


@dataclass(frozen=True)
class DeviceSpec:
    """One emulated Braket device. ``program_sets`` is None for a device that takes no
    program sets (by default Braket's managed simulators; every QPU takes them)."""

    arn: str
    name: str
    provider: str
    type: str
    qubits: int
    cost: Cost
    queue: QueueSpec = field(default_factory=QueueSpec)
    backend: str = "braket_sv"
    shots: tuple[int, int] = (0, 100_000)
    status: str = "ONLINE"
    status_reason: str | None = None
    availability: Availability | None = None
    offline: tuple[OfflinePeriod, ...] = ()
    faults: tuple[Fault, ...] = ()
    execution_windows: tuple[ExecutionWindow, ...] = (ExecutionWindow(),)
    poll_interval_ms: int = 1000
    native_gates: tuple[str, ...] = ()
    location: str = ""
    summary: str = ""
    calibration: CalibrationSpec | None = None
    program_sets: ProgramSetSpec | None = None

    @property
    def region(self) -> str:
        """The ARN's region ("" for global simulators)."""
        return self.arn.split(":")[3]


@dataclass(frozen=True)
class ReservationSpec:
    """A Braket Direct reservation: ``device`` (a device ARN) runs only this reservation's
    tasks during ``[start, end)`` (emulated seconds), for ``price_per_hour`` dollars an hour
    of the window, billed from the moment it is booked whatever runs in it."""

    arn: str
    device: str
    start: float
    end: float
    price_per_hour: float = 0.0

    @property
    def cost(self) -> float:
        """What the window costs: ``price_per_hour`` x its length in hours."""
        return self.price_per_hour * (self.end - self.start) / 3600.0

    def overlaps(self, other: ReservationSpec) -> bool:
        """Whether both are on one device and their windows share an instant."""
        return self.device == other.device and self.start < other.end and other.start < self.end

    def to_dict(self) -> dict[str, Any]:
        return {
            "arn": self.arn,
            "device": self.device,
            "start": self.start,
            "end": self.end,
            "price_per_hour": self.price_per_hour,
        }


@dataclass(frozen=True)
class EventsSpec:
    """Braket's task and device events as EventBridge would route them to a site's SQS
    queue ``queue`` (the emulator's SQS side): each one lost with probability ``lose``,
    sent twice with ``duplicate`` (the copy up to ``late`` seconds later, so it can come
    after the next state's event), each visible ``latency`` seconds after its change."""

    queue: str = "braket-events"
    lose: float = 0.0
    duplicate: float = 0.0
    late: float = 30.0
    latency: float = 0.0


@dataclass(frozen=True)
class HybridJobsSpec:
    """Braket hybrid jobs (CreateJob): a job waits ``startup`` seconds in its device's
    jobs queue and instance start-up before it runs; its instance is billed
    ``price_per_hour`` (per second) while it runs, its tasks as any task."""

    startup: float = 60.0
    price_per_hour: float = 0.115


@dataclass(frozen=True)
class Scenario:
    """Everything the emulator serves, immutable; build with ``from_yaml``/``from_dict``."""

    devices: tuple[DeviceSpec, ...]
    faults: tuple[Fault, ...] = ()
    reservations: tuple[ReservationSpec, ...] = ()
    events: EventsSpec = EventsSpec()
    hybrid_jobs: HybridJobsSpec = HybridJobsSpec()
    region: str = "us-east-1"
    account: str = "123456789012"
    bucket: str = "amazon-braket-flux-quantum-emulator"
    strict_regions: bool = True
    max_simulated_qubits: int = 20
    source: str = "<dict>"

    def device(self, arn: str) -> DeviceSpec | None:
        for spec in self.devices:
            if spec.arn == arn:
                return spec
        return None

    @classmethod
    def default(cls) -> Scenario:
        """sv1, dm1, tn1, IonQ Forte-1, IQM Garnet, Rigetti Ankaa-3, and two local devices."""
        return cls.from_dict(default_scenario(), source="<default scenario>")

    @classmethod
    def from_yaml(cls, path: str | Path) -> Scenario:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ScenarioError(f"scenario {path}: cannot read it ({exc.strerror})") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ScenarioError(f"scenario {path}: not valid YAML{where}") from exc
        return cls.from_dict(data if data is not None else {}, source=str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Scenario:
        return _parse_scenario(data, source)


# ---------------------------------------------------------------------------------------------
# Parsing


class _Fields:
    """Typed, located reads from one mapping of a scenario; every error names where it is."""

    def __init__(
        self, data: Any, source: str, device: str | None, prefix: str, where: str | None = None
    ) -> None:
        self.source = source
        self.device = device
        self.prefix = prefix
        self.where = where  # what the message names first (default: "scenario SOURCE")
        if not isinstance(data, Mapping):
            self.fail("", f"expected a mapping, got {_show(data)}")
        self.data: Mapping[str, Any] = data

    def fail(self, key: str, problem: str) -> NoReturn:
        name = f"{self.prefix}{key}".rstrip(".") or "(top level)"
        where = self.where or f"scenario {self.source}"
        if self.device is not None:
            where += f": device {self.device!r}"
        raise ScenarioError(f"{where}: field {name!r} {problem}")

    def reject_unknown(self, accepted: Sequence[str]) -> None:
        for key in self.data:
            if key not in accepted:
                self.fail(str(key), f"is unknown (accepted: {', '.join(accepted)})")

    def child(self, key: str) -> _Fields:
        return _Fields(self.data.get(key) or {}, self.source, self.device, f"{self.prefix}{key}.")

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def number(
        self, key: str, default: float | None, low: float = 0.0, high: float = math.inf
    ) -> float | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            self.fail(key, f"expected a number, got {_show(value)}")
        if not low <= value <= high:
            bound = f">= {low:g}" if high == math.inf else f"between {low:g} and {high:g}"
            self.fail(key, f"expected a number {bound}, got {value!r}")
        return float(value)

    def integer(self, key: str, default: int | None, low: int = 0) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected an integer, got {_show(value)}")
        if value < low:
            self.fail(key, f"expected an integer >= {low}, got {value!r}")
        return int(value)

    def string(self, key: str, default: str | None) -> str | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            self.fail(key, f"expected a non-empty string, got {_show(value)}")
        return value

    def choice(self, key: str, default: str | None, accepted: Sequence[str]) -> str | None:
        value = self.string(key, default)
        if value is not None and value not in accepted:
            self.fail(key, f"must be one of {', '.join(accepted)}, got {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {_show(value)}")
        return value

    def items(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, f"expected a list, got {_show(value)}")
        return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_SCENARIO_KEYS = (
    "extends",
    "region",
    "account",
    "bucket",
    "strict_regions",
    "max_simulated_qubits",
    "faults",
    "devices",
    "reservations",
    "events",
    "hybrid_jobs",
)
_HYBRID_KEYS = ("startup", "price_per_hour")
_EVENTS_KEYS = ("queue", "lose", "duplicate", "late", "latency")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
_DEVICE_KEYS = (
    "arn",
    "name",
    "provider",
    "type",
    "qubits",
    "backend",
    "cost",
    "shots",
    "queue",
    "status",
    "status_reason",
    "availability",
    "offline",
    "faults",
    "execution_windows",
    "poll_interval_ms",
    "native_gates",
    "location",
    "summary",
    "calibration",
    "program_sets",
)


def _parse_scenario(data: Mapping[str, Any], source: str) -> Scenario:
    top = _Fields(data, source, None, "")
    top.reject_unknown(_SCENARIO_KEYS)
    extends = top.choice("extends", None, ("default", "none"))
    raw_devices = top.items("devices")
    if extends == "default":
        raw_devices = _merge_devices(default_scenario()["devices"], raw_devices, top)
    if not raw_devices:
        top.fail("devices", "must list at least one device (or set 'extends: default')")
    region = top.string("region", "us-east-1")
    devices: list[DeviceSpec] = []
    for index, raw in enumerate(raw_devices):
        spec = _parse_device(raw, source, index)
        if any(d.arn == spec.arn for d in devices):
            top.fail(f"devices[{index}].arn", f"repeats device {spec.arn!r}")
        devices.append(spec)
    faults = tuple(
        _parse_fault(raw, source, None, f"faults[{i}].", top_level=True)
        for i, raw in enumerate(top.items("faults"))
    )
    names = {d.arn for d in devices} | {d.name for d in devices}
    for i, fault in enumerate(faults):
        if fault.device is not None and fault.device not in names:
            top.fail(f"faults[{i}].device", f"names no device of this scenario: {fault.device!r}")
    reservations: list[ReservationSpec] = []
    for i, raw in enumerate(top.items("reservations")):
        f = _Fields(raw, source, None, f"reservations[{i}].")
        reservation = parse_reservation(f, devices)
        check_reservation(f, reservation, reservations)
        reservations.append(reservation)
    return Scenario(
        devices=tuple(devices),
        faults=faults,
        reservations=tuple(sorted(reservations, key=lambda r: (r.device, r.start))),
        events=_parse_events(top.child("events")),
        hybrid_jobs=_parse_hybrid_jobs(top.child("hybrid_jobs")),
        region=region or "us-east-1",
        account=top.string("account", "123456789012") or "123456789012",
        bucket=top.string("bucket", Scenario.bucket) or Scenario.bucket,
        strict_regions=top.boolean("strict_regions", True),
        max_simulated_qubits=top.integer("max_simulated_qubits", 20, low=1) or 20,
        source=source,
    )


def _parse_events(f: _Fields) -> EventsSpec:
    f.reject_unknown(_EVENTS_KEYS)
    default = EventsSpec()
    queue = f.string("queue", default.queue) or default.queue
    if not _QUEUE_NAME.fullmatch(queue):
        f.fail("queue", f"must be an SQS queue name (1-80 of A-Z a-z 0-9 - _), got {queue!r}")
    return EventsSpec(
        queue=queue,
        lose=f.number("lose", 0.0, high=1.0) or 0.0,
        duplicate=f.number("duplicate", 0.0, high=1.0) or 0.0,
        late=f.number("late", default.late, high=3600.0) or 0.0,
        latency=f.number("latency", 0.0, high=3600.0) or 0.0,
    )


def _parse_hybrid_jobs(f: _Fields) -> HybridJobsSpec:
    f.reject_unknown(_HYBRID_KEYS)
    default = HybridJobsSpec()
    startup = f.number("startup", default.startup, high=86400.0)
    price = f.number("price_per_hour", default.price_per_hour)
    return HybridJobsSpec(
        startup=default.startup if startup is None else startup,
        price_per_hour=default.price_per_hour if price is None else price,
    )


def _merge_devices(base: list[Any], overrides: list[Any], top: _Fields) -> list[Any]:
    """Deep-merge ``overrides`` into copies of ``base`` matched by arn or name; append new ones."""
    merged = copy.deepcopy(base)
    for index, raw in enumerate(overrides):
        if not isinstance(raw, Mapping):
            top.fail(f"devices[{index}]", f"expected a mapping, got {_show(raw)}")
        key = raw.get("arn") or raw.get("name")
        target = next(
            (d for d in merged if key is not None and key in (d.get("arn"), d.get("name"))), None
        )
        if target is None:
            merged.append(dict(raw))
        elif raw.get("remove") is True:
            merged.remove(target)
        else:
            _deep_update(target, {k: v for k, v in raw.items() if k != "remove"})
    return merged


def _deep_update(target: dict[str, Any], changes: Mapping[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _parse_device(raw: Any, source: str, index: int) -> DeviceSpec:
    label = raw.get("name") or raw.get("arn") if isinstance(raw, Mapping) else None
    f = _Fields(raw, source, str(label or f"#{index}"), "")
    arn = f.string("arn", None)
    if arn is None:
        f.fail("arn", "is required (e.g. arn:aws:braket:::device/quantum-simulator/amazon/sv1)")
    parts = arn.split(":")
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "braket"] or "/" not in parts[5]:
        f.fail("arn", f"is not a Braket device ARN (arn:aws:braket:REGION::device/...): {arn!r}")
    path = parts[5].split("/")
    kind = "QPU" if len(path) > 1 and path[1] == "qpu" else "SIMULATOR"
    provider_key = path[2] if len(path) > 2 else ""
    name = f.string("name", path[-1]) or path[-1]
    f.device = name
    f.reject_unknown(_DEVICE_KEYS)
    dtype = f.choice("type", kind, DEVICE_TYPES) or kind
    qubits = f.integer("qubits", 20, low=1) or 20

    cost_f = f.child("cost")
    cost_f.reject_unknown(("price", "unit", "task_price"))
    default_unit = "shot" if dtype == "QPU" else "minute"
    cost = Cost(
        price=cost_f.number("price", 0.0) or 0.0,
        unit=cost_f.choice("unit", default_unit, COST_UNITS) or default_unit,
        task_price=cost_f.number("task_price", 0.3 if dtype == "QPU" else 0.0) or 0.0,
    )

    q = f.child("queue")
    q.reject_unknown(
        ("depth", "arrival_rate", "service_time", "distribution", "shot_time", "cancel_latency")
    )
    queue = QueueSpec(
        depth=q.integer("depth", 0) or 0,
        arrival_rate=q.number("arrival_rate", 0.0) or 0.0,
        service_time=q.number("service_time", 1.0) or 0.0,
        distribution=q.choice("distribution", "fixed", DISTRIBUTIONS) or "fixed",
        shot_time=q.number("shot_time", 0.0) or 0.0,
        cancel_latency=q.number("cancel_latency", 0.0) or 0.0,
    )
    if queue.service_time == 0 and (queue.arrival_rate > 0 or queue.depth > 0):
        q.fail("service_time", "must be > 0 when the queue has depth or arrivals")

    shots = f.items("shots") or [0 if dtype == "SIMULATOR" else 1, 100_000]
    if (
        len(shots) != 2
        or not all(isinstance(s, int) and s >= 0 for s in shots)
        or shots[0] > shots[1]
    ):
        f.fail("shots", f"expected [min, max] with 0 <= min <= max, got {_show(shots)}")

    status = f.choice("status", "ONLINE", DEVICE_STATUSES) or "ONLINE"
    status_reason = f.choice("status_reason", None, STATUS_REASONS)
    if status == "OFFLINE" and status_reason is None:
        status_reason = "MAINTENANCE"

    availability = None
    if f.get("availability") is not None:
        a = f.child("availability")
        a.reject_unknown(("period", "windows"))
        period = a.number("period", 0.0) or 0.0
        windows: list[tuple[float, float]] = []
        for i, w in enumerate(a.items("windows")):
            ok = (
                isinstance(w, list)
                and len(w) == 2
                and all(isinstance(x, int | float) and not isinstance(x, bool) for x in w)
                and 0 <= w[0] < w[1]
                and (period == 0 or w[1] <= period)
            )
            if not ok:
                a.fail(
                    f"windows[{i}]",
                    f"expected [start, end) with 0 <= start < end"
                    f"{' <= period' if period else ''}, got {_show(w)}",
                )
            windows.append((float(w[0]), float(w[1])))
        if not windows:
            a.fail("windows", "must list at least one [start, end) window")
        availability = Availability(windows=tuple(sorted(windows)), period=period)

    offline: list[OfflinePeriod] = []
    for i, raw_period in enumerate(f.items("offline")):
        o = _Fields(raw_period, source, name, f"offline[{i}].")
        o.reject_unknown(("start", "end", "reason", "accept_tasks"))
        start = o.number("start", 0.0) or 0.0
        end = o.number("end", math.inf)
        if end is None or end <= start:
            o.fail("end", f"must be after start ({start:g}), got {end!r}")
        offline.append(
            OfflinePeriod(
                start=start,
                end=float(end),
                reason=o.choice("reason", "MAINTENANCE", STATUS_REASONS) or "MAINTENANCE",
                accept_tasks=o.boolean("accept_tasks", False),
            )
        )

    execution_windows: list[ExecutionWindow] = []
    for i, raw_window in enumerate(f.items("execution_windows")):
        w = _Fields(raw_window, source, name, f"execution_windows[{i}].")
        w.reject_unknown(("day", "start", "end"))
        execution_windows.append(
            ExecutionWindow(
                day=w.choice("day", "Everyday", EXECUTION_DAYS) or "Everyday",
                start=_hhmmss(w, "start", "00:00:00"),
                end=_hhmmss(w, "end", "23:59:59"),
            )
        )

    calibration = None
    if f.get("calibration") is not None:
        c = f.child("calibration")
        c.reject_unknown(("one_qubit", "two_qubit", "readout", "spread"))
        figures = {}
        for key in ("one_qubit", "two_qubit", "readout"):
            value = c.number(key, None, high=1.0)
            if value is None:
                c.fail(key, "is required (a fidelity between 0 and 1)")
            figures[key] = float(value)
        spread = c.number("spread", 0.0, high=0.5) or 0.0
        calibration = CalibrationSpec(spread=spread, **figures)

    program_sets = _parse_program_sets(f, dtype, shots[1])

    native = f.items("native_gates")
    if not all(isinstance(g, str) for g in native):
        f.fail("native_gates", f"expected a list of gate names, got {_show(native)}")

    return DeviceSpec(
        arn=arn,
        name=name,
        provider=f.string("provider", _PROVIDERS.get(provider_key, provider_key or "unknown"))
        or "unknown",
        type=dtype,
        qubits=qubits,
        cost=cost,
        queue=queue,
        backend=f.choice("backend", "braket_sv", BACKENDS) or "braket_sv",
        shots=(int(shots[0]), int(shots[1])),
        status=status,
        status_reason=status_reason,
        availability=availability,
        offline=tuple(sorted(offline, key=lambda p: p.start)),
        faults=tuple(
            _parse_fault(raw_fault, source, name, f"faults[{i}].", top_level=False)
            for i, raw_fault in enumerate(f.items("faults"))
        ),
        execution_windows=tuple(execution_windows) or (ExecutionWindow(),),
        poll_interval_ms=f.integer("poll_interval_ms", 1000 if dtype == "QPU" else 200, low=1)
        or 1000,
        native_gates=tuple(native),
        location=f.string("location", "") or "",
        summary=f.string("summary", "") or "",
        calibration=calibration,
        program_sets=program_sets,
    )


def _parse_program_sets(f: _Fields, dtype: str, max_shots: int) -> ProgramSetSpec | None:
    """A device's ``program_sets``: absent, on by default on a QPU (Braket runs program
    sets on every gate-based QPU, not on its managed simulators); ``false`` off; ``true``
    or ``{max_executables, max_total_shots}`` on (defaults: 100 executables, as on Braket,
    and the device's max shots per task)."""
    value = f.data.get("program_sets")
    if value is False or (value is None and dtype != "QPU"):
        return None
    if value is None or value is True:
        return ProgramSetSpec(max_total_shots=max_shots)
    if not isinstance(value, Mapping):
        f.fail("program_sets", f"expected true, false or a mapping, got {_show(value)}")
    p = f.child("program_sets")
    p.reject_unknown(("max_executables", "max_total_shots"))
    return ProgramSetSpec(
        max_executables=p.integer("max_executables", 100, low=1) or 100,
        max_total_shots=p.integer("max_total_shots", max_shots, low=1) or max_shots,
    )


_RESERVATION_KEYS = ("arn", "device", "start", "end", "price_per_hour")


def reservation_from(
    data: Any,
    devices: Sequence[DeviceSpec],
    booked: Sequence[ReservationSpec] = (),
    now: float = 0.0,
    where: str = "reservation",
) -> ReservationSpec:
    """A reservation booked on a running emulator (``Emulator.add_reservation``, the
    ``POST /_emulator/reservations`` route): its fields as in a scenario, its ARN not taken,
    its window over none of ``booked`` on its device and ending after ``now``. ScenarioError
    in one sentence naming the field, ``where`` first."""
    f = _Fields(data, where, None, "", where=where)
    reservation = parse_reservation(f, devices)
    check_reservation(f, reservation, booked)
    if reservation.end <= now:
        f.fail("end", f"must be after the emulator's now ({now:g}), got {reservation.end:g}")
    return reservation


def parse_reservation(f: _Fields, devices: Sequence[DeviceSpec]) -> ReservationSpec:
    """One reservation's fields, its device (a name or an ARN) resolved to the device's ARN."""
    f.reject_unknown(_RESERVATION_KEYS)
    arn = f.string("arn", None)
    if arn is None:
        f.fail("arn", f"is required ({RESERVATION_ARN_SHAPE})")
    if not RESERVATION_ARN.fullmatch(arn):
        f.fail("arn", f"is not a reservation ARN ({RESERVATION_ARN_SHAPE}): {_show(arn)}")
    named = f.string("device", None)
    if named is None:
        f.fail("device", "is required (a device name or ARN of this scenario)")
    device = next((d.arn for d in devices if named in (d.arn, d.name)), None)
    if device is None:
        f.fail("device", f"names no device of this scenario: {named!r}")
    start = f.number("start", None)
    if start is None:
        f.fail("start", "is required (emulated seconds since the timeline's start, >= 0)")
    end = f.number("end", None)
    if end is None or end <= start:
        f.fail("end", f"must be a number after start ({start:g}), got {_show(end)}")
    price = f.number("price_per_hour", 0.0) or 0.0
    return ReservationSpec(arn=arn, device=device, start=start, end=end, price_per_hour=price)


def check_reservation(
    f: _Fields, reservation: ReservationSpec, booked: Sequence[ReservationSpec]
) -> None:
    """Refuse a reservation whose ARN is taken or whose window overlaps another on its device."""
    for other in booked:
        if other.arn == reservation.arn:
            f.fail("arn", f"repeats reservation {reservation.arn!r}")
        if reservation.overlaps(other):
            f.fail(
                "start",
                f"puts a window [{reservation.start:g}, {reservation.end:g}) over reservation "
                f"{other.arn!r} on {other.device} [{other.start:g}, {other.end:g})",
            )


def _hhmmss(f: _Fields, key: str, default: str) -> str:
    value = f.get(key, default)
    parts = str(value).split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or not (0 <= numbers[0] < 24 and 0 <= numbers[1] < 60):
        f.fail(key, f"expected a UTC time HH:MM[:SS], got {_show(value)}")
    numbers += [0] * (3 - len(numbers))
    return "{:02d}:{:02d}:{:02d}".format(*numbers)


_FAULT_KEYS = (
    "operation",
    "device",
    "error",
    "message",
    "delay",
    "fail_task",
    "cancel_task",
    "reset",
    "after_commit",
    "calls",
    "first",
    "after",
    "every",
    "rate",
    "start",
    "end",
)


def _parse_fault(raw: Any, source: str, device: str | None, prefix: str, top_level: bool) -> Fault:
    f = _Fields(raw, source, device, prefix)
    f.reject_unknown(_FAULT_KEYS if top_level else tuple(k for k in _FAULT_KEYS if k != "device"))
    ops_raw = f.get("operation")
    ops = [ops_raw] if isinstance(ops_raw, str) else ops_raw or []
    known = BRAKET_OPERATIONS + S3_OPERATIONS
    if not isinstance(ops, list) or not all(isinstance(o, str) and o in known for o in ops):
        f.fail("operation", f"must be one or a list of {', '.join(known)}, got {_show(ops_raw)}")
    error = f.choice("error", None, tuple(BRAKET_ERRORS) + tuple(S3_ERRORS))
    delay = f.number("delay", 0.0, high=600.0) or 0.0
    fail_task = f.string("fail_task", None)
    reset = f.boolean("reset", False)
    cancel_task = f.boolean("cancel_task", False)
    after_commit = f.boolean("after_commit", False)
    effects = [error is not None, delay > 0, fail_task is not None, reset, cancel_task]
    late_pair = after_commit and delay > 0 and (error is not None or reset) and sum(effects) == 2
    if sum(effects) != 1 and not late_pair:
        f.fail(
            "error",
            "needs exactly one effect: 'error', 'delay', 'reset', 'fail_task' or 'cancel_task'",
        )
    if fail_task is not None or cancel_task:
        name = "fail_task" if fail_task is not None else "cancel_task"
        if ops and ops != ["CreateQuantumTask"]:
            f.fail("operation", f"must be CreateQuantumTask (or omitted) with '{name}'")
        if after_commit:
            f.fail("after_commit", f"goes with 'error', 'reset' or 'delay', not '{name}'")
        ops = ["CreateQuantumTask"]
    if error is not None and ops:
        wanted = S3_OPERATIONS if error in S3_ERRORS else BRAKET_OPERATIONS
        wrong = [o for o in ops if o not in wanted]
        if wrong:
            kind = "an S3" if error in S3_ERRORS else "a Braket"
            f.fail("operation", f"{wrong[0]} cannot get {kind} error ({error})")
    calls = f.items("calls")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in calls):
        f.fail("calls", f"expected a list of call numbers >= 1, got {_show(calls)}")
    every = f.integer("every", None, low=1)
    start = f.number("start", None)
    end = f.number("end", None)
    if start is not None and end is not None and end <= start:
        f.fail("end", f"must be after start ({start:g}), got {end:g}")
    return Fault(
        operations=tuple(ops),
        device=f.string("device", None),
        error=error,
        message=f.string("message", None),
        delay=delay,
        fail_task=fail_task,
        reset=reset,
        after_commit=after_commit,
        cancel_task=cancel_task,
        calls=tuple(calls),
        first=f.integer("first", None, low=1),
        after=f.integer("after", None),
        every=every,
        rate=f.number("rate", None, high=1.0),
        start=start,
        end=end,
    )


# ---------------------------------------------------------------------------------------------
# The default scenario: the real Braket ARNs at the Braket pricing page's 2026 prices, plus
# two local devices.
# One copy: etc/flux-quantum/scenarios/default.yaml, shipped in the package as data.


@functools.cache
def default_scenario() -> dict[str, Any]:
    """The built-in default scenario (``etc/flux-quantum/scenarios/default.yaml``)."""
    text = resources.files("flux_quantum").joinpath("data/scenarios/default.yaml").read_text()
    return yaml.safe_load(text)
