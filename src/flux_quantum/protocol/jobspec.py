"""The jobspec half of flux-quantum's protocol: what it writes on a job besides events.

A job asks for a QPU with ``attributes.system.qpu`` (its grammar is ``request.py``'s) or
rides another job's task with ``--dependency=qpu:JOBID``. At release the jobtap plugin
records the job's task in its jobspec: ``attributes.system.qpu_task`` (the job's task id),
``qpu_device`` (its catalog device) and ``qpu_info``, the release record (``ReleaseInfo``:
the vendor, every task and device, the catalog, how the job reads its tasks). The
job-shell plugin, the consumer library, the CLI and the service read them back. While a
job is held the handler service keeps memos on it (``HeldMemo``, ``flux jobs -o
'{user.qpu_position}'``), and two more once its tasks cost money or ride a session. This
module is the one home of those names and records; the ``qpu-*`` eventlog events are
``events.py``'s, and the C plugins keep the same names in ``jobtap/qpu_protocol.h``
(``t/protocol/test_jobspec.py`` checks that they agree). A jobspec and a memo are read, never
trusted: the decoders check every field and leave a malformed one unsaid. Standard
library only (``request.py`` imports it inside Flux's own Python); it never talks to Flux
and never holds a credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- what a job carries in attributes.system ------------------------------------------------

SYSTEM_PREFIX = "attributes.system."
# What the user writes: the qpu request, or a dependency on another qpu job.
REQUEST_ATTRIBUTE = "qpu"
DEPENDENCY_SCHEME = "qpu"
# What the plugin writes at release (a job-manager jobspec-update).
TASK_ATTRIBUTE = "qpu_task"
DEVICE_ATTRIBUTE = "qpu_device"
INFO_ATTRIBUTE = "qpu_info"
RELEASE_ATTRIBUTES: tuple[str, ...] = (TASK_ATTRIBUTE, DEVICE_ATTRIBUTE, INFO_ATTRIBUTE)

# ``qpu_info.reservation``: the reserved window (Braket Direct) the job was released into.
RESERVATION_INFO = "reservation"
# What the job-shell plugin exports from it: the variables the Braket SDK's
# DirectReservation context sets, which AwsSession.create_quantum_task reads, so the job's
# own tasks on that device run in the window with no change to its code.
RESERVATION_DEVICE_ENV = "AMZN_BRAKET_RESERVATION_DEVICE_ARN"
RESERVATION_ARN_ENV = "AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN"

# ``qpu_info.account`` of a job whose tasks the site's accounts pay for (a guest's job:
# it holds no credential of its own for them).
SITE_ACCOUNT = "site"


def system_of(jobspec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``attributes.system`` of a jobspec; empty when it is missing or not an object."""
    attributes = jobspec.get("attributes")
    system = attributes.get("system") if isinstance(attributes, Mapping) else None
    return system if isinstance(system, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class ReleasedWindow:
    """``qpu_info.reservation``: the window's name, its ARN and its end (epoch seconds)."""

    name: str
    arn: str
    end: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arn": self.arn, "end": self.end}

    def open_at(self, now: float) -> bool:
        """May a task still be created in the window at ``now``?"""
        return now < self.end

    @classmethod
    def decode(cls, value: Any) -> ReleasedWindow | None:
        if not isinstance(value, Mapping):
            return None
        name, arn, end = (
            _text(value.get("name")),
            _text(value.get("arn")),
            _number(value.get("end")),
        )
        if name is None or arn is None or end is None:
            return None
        return cls(name=name, arn=arn, end=float(end))


@dataclass(frozen=True)
class ReleaseInfo:
    """``attributes.system.qpu_info``: what the service knew of a job's tasks when it
    released it. ``tasks`` lists every task id of the job (one, or a batch's), ``devices``
    the device of each, in the same order (``""`` where the record said nothing usable);
    ``read_via`` is the service endpoint the job reads those tasks through (set by the
    instance owner's service), ``account`` is ``SITE_ACCOUNT`` when the site's accounts
    pay; ``programs`` gives, for each task, the job's program's place in it when the task
    is a merged one (several jobs' programs; -1: the task is the job's own). None and
    empty fields are ones the release did not record (an older release, or one made by
    hand with ``flux quantum release``)."""

    vendor: str | None = None
    device_id: str | None = None
    region: str | None = None
    tasks: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    catalog: str | None = None
    read_via: str | None = None
    account: str | None = None
    reservation: ReleasedWindow | None = None
    programs: tuple[int, ...] = ()

    @property
    def site_paid(self) -> bool:
        return self.account == SITE_ACCOUNT

    def to_dict(self) -> dict[str, Any]:
        """The ``qpu_info`` object; fields the record does not say are left out."""
        out: dict[str, Any] = {}
        for key in ("vendor", "device_id", "region"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.tasks:
            out["tasks"] = list(self.tasks)
        if self.devices:
            out["devices"] = list(self.devices)
        for key in ("catalog", "read_via", "account"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.reservation is not None:
            out[RESERVATION_INFO] = self.reservation.to_dict()
        if any(p >= 0 for p in self.programs):
            out["programs"] = list(self.programs)
        return out

    def program_of(self, task_id: str) -> int | None:
        """The job's program's place in ``task_id`` if it is a merged task, else None."""
        if len(self.programs) != len(self.tasks) or task_id not in self.tasks:
            return None
        place = self.programs[self.tasks.index(task_id)]
        return place if place >= 0 else None

    @classmethod
    def decode(cls, value: Any) -> ReleaseInfo:
        """The record of a ``qpu_info`` value. Anything but an object says nothing; a
        field of the wrong type or an empty string is left unsaid, a task id that is not
        a non-empty string is dropped, and a device keeps its place as ``""``."""
        if not isinstance(value, Mapping):
            return cls()
        tasks = value.get("tasks")
        devices = value.get("devices")
        programs = value.get("programs")
        if not isinstance(programs, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= -1 for p in programs
        ):
            programs = []
        return cls(
            vendor=_text(value.get("vendor")),
            device_id=_text(value.get("device_id")),
            region=_text(value.get("region")),
            tasks=tuple(t for t in tasks if _text(t)) if isinstance(tasks, list) else (),
            devices=tuple(_text(d) or "" for d in devices) if isinstance(devices, list) else (),
            catalog=_text(value.get("catalog")),
            read_via=_text(value.get("read_via")),
            account=_text(value.get("account")),
            reservation=ReleasedWindow.decode(value.get(RESERVATION_INFO)),
            programs=tuple(programs),
        )


@dataclass(frozen=True)
class Released:
    """What a released job's jobspec says: its task, its device and the release record.
    ``task`` is ``""`` for a job released without one (``flux quantum release`` with no
    ``--task``: the plugin still marks it released), ``device`` ``""`` when not recorded."""

    task: str
    device: str = ""
    info: ReleaseInfo = ReleaseInfo()

    def to_system(self) -> dict[str, Any]:
        """The ``attributes.system`` keys the plugin writes for this release."""
        out: dict[str, Any] = {TASK_ATTRIBUTE: self.task}
        if self.device:
            out[DEVICE_ATTRIBUTE] = self.device
        info = self.info.to_dict()
        if info:
            out[INFO_ATTRIBUTE] = info
        return out

    @classmethod
    def decode(cls, system: Mapping[str, Any]) -> Released | None:
        """The release recorded in ``attributes.system``; None when the job was not
        released (no ``qpu_task``)."""
        task = system.get(TASK_ATTRIBUTE)
        if task is None:
            return None
        return cls(
            task=_text(task) or "",
            device=_text(system.get(DEVICE_ATTRIBUTE)) or "",
            info=ReleaseInfo.decode(system.get(INFO_ATTRIBUTE)),
        )


def released(jobspec: Mapping[str, Any]) -> Released | None:
    """The release recorded in a (current) jobspec; None when the job was not released."""
    return Released.decode(system_of(jobspec))


# --- memos ---------------------------------------------------------------------------------

# Volatile memos on a held job (the service keeps them while it holds the job; they go
# with the job): where its tasks stand.
DEVICE_MEMO = "qpu_device"
TASK_MEMO = "qpu_task"
POSITION_MEMO = "qpu_position"
WAIT_MEMO = "qpu_wait"
STATE_MEMO = "qpu_state"
HELD_MEMO_KEYS: tuple[str, ...] = (DEVICE_MEMO, TASK_MEMO, POSITION_MEMO, WAIT_MEMO, STATE_MEMO)
# Volatile too: what the job's tasks count now in the site's ledger (settled and reserved).
COST_MEMO = "qpu_cost"
# Persistent (a memo event, kept after the job ends): the vendor session the job's tasks
# ride, as "MODE FINGERPRINT" (never the session id), so a restarted service finds it.
SESSION_MEMO = "qpu_session"
# Persistent too: the reserved window (Braket Direct) a job waits for or was released
# into, by name, so ``flux jobs``, ``flux quantum reservations`` and a restarted service
# find the window's jobs.
RESERVATION_MEMO = "qpu_reservation"


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, float) else _integer(value)


@dataclass(frozen=True)
class HeldMemo:
    """The memos of a held job: the device(s) (comma-separated), the first task, the
    queue position, the expected wait in seconds and the state in words (``released``,
    ``waiting: ...``, a vendor state). None is a key not set (a memo of None removes it)."""

    device: str | None = None
    task: str | None = None
    position: int | None = None
    wait: int | float | None = None
    state: str | None = None

    def to_memo(self) -> dict[str, Any]:
        """Every key, None included (a memo update clears what is no longer known)."""
        return {
            DEVICE_MEMO: self.device,
            TASK_MEMO: self.task,
            POSITION_MEMO: self.position,
            WAIT_MEMO: self.wait,
            STATE_MEMO: self.state,
        }

    @classmethod
    def decode(cls, memo: Any) -> HeldMemo:
        """The record of a job's user annotations (``annotations.user``); a key of the
        wrong type is left unset."""
        if not isinstance(memo, Mapping):
            return cls()
        return cls(
            device=_text(memo.get(DEVICE_MEMO)),
            task=_text(memo.get(TASK_MEMO)),
            position=_integer(memo.get(POSITION_MEMO)),
            wait=_number(memo.get(WAIT_MEMO)),
            state=_text(memo.get(STATE_MEMO)),
        )


def session_memo(mode: str, fingerprint: str) -> dict[str, str]:
    """The persistent ``qpu_session`` memo of a job whose tasks ride a vendor session."""
    return {SESSION_MEMO: f"{mode} {fingerprint}"}
