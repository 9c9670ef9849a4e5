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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator.reading import (
    Reader,
    Record,
    ScenarioFile,
    device_list,
    fault_list,
    setting,
)
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
    "LocalCancelJob",
    "LocalSpecs",
    "LocalCreateSession",
    "LocalRevokeSession",
)
CREATES = {"CreateBatch", "LocalCreateJob"}
SITE_PRICE_PER_SECOND = 0.5


@dataclass(frozen=True)
class PasqalDeviceSpec(Record):
    """One emulated Pasqal device, reached through the cloud API or a local warden."""

    name: str
    kind: str = setting("cloud", choices=KINDS)
    atoms: int = 61
    max_runs: int = 1000
    max_slots: int | None = None
    queue: QueueSpec = QueueSpec()
    status: str = setting("online", choices=STATUSES)
    paused: tuple[tuple[float, float], ...] = ()
    offline: tuple[tuple[float, float], ...] = ()

    def invalid(self) -> tuple[str, str] | None:
        if self.kind == "cloud" and self.name not in CLOUD_DEVICES:
            choices = ", ".join(CLOUD_DEVICES)
            return "name (a cloud device)", f"must be one of {choices}, got {self.name!r}"
        return None

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


def _fault(reader: Reader, raw: Any, index: int, devices: Sequence[str]) -> PasqalFault:
    where = f"faults[{index}]"
    accepted = (
        "operation", "device", "status", "message", "reset", "fail_job", "after_commit",
        "calls", "first", "after", "every", "start", "end",
    )  # fmt: skip
    f = reader.mapping(raw, where, accepted)
    ops = reader.operations(f, where, OPERATIONS)
    status = reader.integer(f["status"], f"{where}.status", 400) if "status" in f else None
    fail_job = reader.optional(f, "fail_job", where)
    reset = reader.flag(f, "reset", where)
    after_commit = reader.flag(f, "after_commit", where)
    if sum((status is not None, reset, fail_job is not None)) != 1:
        raise reader.fail(where, "needs exactly one effect: status, reset or fail_job")
    if fail_job is not None and not set(ops) <= CREATES:
        raise reader.fail(f"{where}.operation", "must be CreateBatch/LocalCreateJob with fail_job")
    if fail_job is not None and after_commit:
        raise reader.fail(f"{where}.after_commit", "goes with status or reset, not fail_job")
    return PasqalFault(
        operations=tuple(ops),
        device=reader.target(f, "device", where, devices),
        status=status,
        message=reader.optional(f, "message", where),
        reset=reset,
        fail_job=fail_job,
        after_commit=after_commit,
        **reader.selection(f, where),
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


@dataclass(frozen=True)
class PasqalScenario(ScenarioFile):
    """Everything the Pasqal side serves, immutable."""

    LABEL = "Pasqal"
    DEFAULT = DEFAULT_PASQAL_SCENARIO

    devices: tuple[PasqalDeviceSpec, ...] = device_list("device")
    project_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    faults: tuple[PasqalFault, ...] = fault_list(read=_fault)
    site_price_per_second: float = SITE_PRICE_PER_SECOND
    source: str = "<dict>"

    def invalid(self) -> tuple[str, str] | None:
        if (self.client_id is None) != (self.client_secret is None):
            return "client_id", "and client_secret must be given together"
        return None

    def device(self, name: str, kind: str | None = None) -> PasqalDeviceSpec | None:
        for spec in self.devices:
            if spec.name == name and kind in (None, spec.kind):
                return spec
        return None
