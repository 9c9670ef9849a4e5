"""What the emulator's Pasqal side serves: neutral-atom devices, their queues, windows, faults.

This module owns the Pasqal part of an emulator scenario (a YAML file or a dict), its
validation and the default Pasqal scenario. Queues use the emulator's shared model
(``QueueSpec`` drained by ``DeviceQueue``), as every side's do. It must never touch the
network, a clock or emulator state: a ``PasqalScenario`` is an immutable description, and
every mistake is one ``ScenarioError`` naming the source, the device and the field.

Pasqal publishes no per-second price for its cloud QPUs (none was found in its public
documentation), so the bill charges QPU seconds at ``site_price_per_second``: a site's
own rate, labelled as such, not Pasqal's.

Format::

    project_id: PROJECT          # the cloud project the emulator expects (default: any)
    client_id: ID                # a service account it accepts (default: any pair)
    client_secret: SECRET
    site_price_per_second: 0.5   # the bill's rate for a completed batch's QPU seconds
    devices:
      - name: FRESNEL            # cloud: one of QRMI's device types (FRESNEL, FRESNEL_CAN1,
        kind: cloud              #   EMU_MPS, EMU_FREE, EMU_FRESNEL); local: any name
        atoms: 61                # the largest register it takes
        max_runs: 1000           # the most runs (shots) of one batch
        max_slots: 4             # our batches pending at once at most (default: no limit)
        queue: {depth: 3, service_time: 60, shot_time: 0.2, ...}  # as the Braket side's
        status: online | paused | offline
        paused: [[start, end], ...]      # emulated seconds: up, takes no new batch, runs none
        offline: [[start, end], ...]     # emulated seconds: down
    faults:
      - operation: CreateBatch   # or a list; omitted: every operation
        device: FRESNEL          # optional
        status: 503              # an HTTP error in Pasqal's error shape ...
        message: "text"          #   ... with this message
        reset: true              # or: close the connection without an answer
        fail_job: "reason"       # or: CreateBatch succeeds, the job ends ERROR
        after_commit: true       # apply the call first, then the error or reset
        calls: [1], first: N, after: N, every: N, start: T, end: T  # which calls
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flux_quantum.emulator.reading import Reader, load_yaml
from flux_quantum.emulator.scenario import BaseFault, QueueSpec

KINDS = ("cloud", "local")
STATUSES = ("online", "paused", "offline")
# The device types QRMI 0.26.4's PasqalCloud accepts as a resource id.
CLOUD_DEVICES = ("FRESNEL", "FRESNEL_CAN1", "EMU_MPS", "EMU_FREE", "EMU_FRESNEL")
OPERATIONS = (
    "Token",
    "GetDevice",
    "GetDeviceSpecs",
    "CreateBatch",
    "GetBatch",
    "ListBatches",
    "GetJob",
    "GetResults",
    "CancelBatch",
    "LocalAccessible",
    "LocalCreateJob",
    "LocalGetJob",
    "LocalListJobs",
    "LocalJobLogs",
    "LocalSpecs",
    "LocalCreateSession",
    "LocalRevokeSession",
)
SITE_PRICE_PER_SECOND = 0.5


@dataclass(frozen=True)
class PasqalDeviceSpec:
    """One emulated Pasqal device, reached through the cloud API or a local warden."""

    name: str
    kind: str = "cloud"
    atoms: int = 61
    max_runs: int = 1000
    max_slots: int | None = None
    queue: QueueSpec = field(default_factory=QueueSpec)
    status: str = "online"
    paused: tuple[tuple[float, float], ...] = ()
    offline: tuple[tuple[float, float], ...] = ()

    @property
    def queue_key(self) -> str:
        """A Braket-shaped identifier, so the shared ``DeviceQueue`` can seed from it."""
        return f"arn:aws:braket:::device/qpu/pasqal/{self.kind}/{self.name}"

    def state_at(self, now: float) -> str:
        """``online``, ``paused`` or ``offline`` at emulated time ``now``."""
        if self.status != "online":
            return self.status
        for start, end in self.offline:
            if start <= now < end:
                return "offline"
        for start, end in self.paused:
            if start <= now < end:
                return "paused"
        return "online"


@dataclass(frozen=True)
class PasqalFault(BaseFault):
    """One injected fault on the Pasqal side; see the module docstring for the fields (its
    scenario takes no ``delay`` and no ``rate``: they keep their defaults)."""

    device: str | None = None
    status: int | None = None
    fail_job: str | None = None


@dataclass(frozen=True)
class PasqalScenario:
    """Everything the Pasqal side serves, immutable."""

    devices: tuple[PasqalDeviceSpec, ...]
    project_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    faults: tuple[PasqalFault, ...] = ()
    site_price_per_second: float = SITE_PRICE_PER_SECOND
    source: str = "<dict>"

    def device(self, name: str, kind: str | None = None) -> PasqalDeviceSpec | None:
        for spec in self.devices:
            if spec.name == name and kind in (None, spec.kind):
                return spec
        return None

    @classmethod
    def default(cls) -> PasqalScenario:
        """FRESNEL in the cloud and an on-premises FRESNEL_ONPREM behind a warden."""
        return cls.from_dict(DEFAULT_PASQAL_SCENARIO, source="<default Pasqal scenario>")

    @classmethod
    def from_yaml(cls, path: str | Path) -> PasqalScenario:
        return cls.from_dict(*load_yaml(path, "Pasqal"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> PasqalScenario:
        return _Reader("Pasqal", source).scenario(data)


class _Reader(Reader):
    """The Pasqal scenario's own fields, read with the shared typed reads."""

    def scenario(self, data: Mapping[str, Any]) -> PasqalScenario:
        accepted = (
            "project_id", "client_id", "client_secret", "site_price_per_second", "devices",
            "faults",
        )  # fmt: skip
        top = self.mapping(data, "(top level)", accepted)
        raw = self.listed(top.get("devices"), "devices", "device")
        devices = [self.device(item, i) for i, item in enumerate(raw)]
        names = [d.name for d in devices]
        self.distinct(names, "devices[{i}].name", "device")
        if ("client_id" in top) != ("client_secret" in top):
            raise self.fail("client_id", "and client_secret must be given together")
        faults = tuple(self.fault(f, i, names) for i, f in enumerate(top.get("faults") or []))
        return PasqalScenario(
            devices=tuple(devices),
            project_id=self.text(top["project_id"], "project_id") if "project_id" in top else None,
            client_id=self.text(top["client_id"], "client_id") if "client_id" in top else None,
            client_secret=(
                self.text(top["client_secret"], "client_secret") if "client_secret" in top else None
            ),
            faults=faults,
            site_price_per_second=self.number(
                top.get("site_price_per_second", SITE_PRICE_PER_SECOND), "site_price_per_second"
            ),
            source=self.source,
        )

    def device(self, raw: Any, index: int) -> PasqalDeviceSpec:
        accepted = (
            "name", "kind", "atoms", "max_runs", "max_slots", "queue", "status", "paused",
            "offline",
        )  # fmt: skip
        d = self.mapping(raw, f"devices[{index}]", accepted)
        name = self.text(d.get("name"), f"devices[{index}].name")
        where = f"device {name!r}:"
        kind = self.choice(d.get("kind", "cloud"), f"{where} kind", KINDS)
        if kind == "cloud":
            self.choice(name, f"{where} name (a cloud device)", CLOUD_DEVICES)
        queue = self.queue(d.get("queue", {}), where, service_time=1.0)
        slots = d.get("max_slots")
        return PasqalDeviceSpec(
            name=name,
            kind=kind,
            atoms=self.integer(d.get("atoms", 61), f"{where} atoms", low=1),
            max_runs=self.integer(d.get("max_runs", 1000), f"{where} max_runs", low=1),
            max_slots=None if slots is None else self.integer(slots, f"{where} max_slots", 1),
            queue=queue,
            status=self.choice(d.get("status", "online"), f"{where} status", STATUSES),
            paused=self.periods(d.get("paused", []), f"{where} paused"),
            offline=self.periods(d.get("offline", []), f"{where} offline"),
        )

    def fault(self, raw: Any, index: int, devices: list[str]) -> PasqalFault:
        where = f"faults[{index}]"
        accepted = (
            "operation", "device", "status", "message", "reset", "fail_job", "after_commit",
            "calls", "first", "after", "every", "start", "end",
        )  # fmt: skip
        f = self.mapping(raw, where, accepted)
        ops = self.operations(f, where, OPERATIONS)
        device = self.target(f, "device", where, devices)
        status = self.integer(f["status"], f"{where}.status", 400) if "status" in f else None
        fail_job = self.optional(f, "fail_job", where)
        reset = self.flag(f, "reset", where)
        after_commit = self.flag(f, "after_commit", where)
        if sum((status is not None, reset, fail_job is not None)) != 1:
            raise self.fail(where, "needs exactly one effect: status, reset or fail_job")
        if fail_job is not None and not set(ops) <= {"CreateBatch", "LocalCreateJob"}:
            raise self.fail(
                f"{where}.operation", "must be CreateBatch/LocalCreateJob with fail_job"
            )
        if fail_job is not None and after_commit:
            raise self.fail(f"{where}.after_commit", "goes with status or reset, not fail_job")
        selection = self.selection(f, where)
        return PasqalFault(
            operations=tuple(ops),
            device=device,
            status=status,
            message=self.optional(f, "message", where),
            reset=reset,
            fail_job=fail_job,
            after_commit=after_commit,
            **selection,
        )


DEFAULT_PASQAL_SCENARIO: dict[str, Any] = {
    "devices": [
        {
            "name": "FRESNEL",
            "kind": "cloud",
            "atoms": 61,
            "max_runs": 1000,
            "queue": {"depth": 3, "service_time": 60.0, "shot_time": 0.2},
        },
        {
            "name": "FRESNEL_ONPREM",
            "kind": "local",
            "atoms": 61,
            "max_runs": 1000,
            "max_slots": 2,
            "queue": {"service_time": 30.0, "shot_time": 0.2},
        },
    ],
}
