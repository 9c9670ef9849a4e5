"""Merged tasks: the site's ``[quantum.merge]`` table and the pure decisions on it.

Every QPU task pays a per-task fee and one trip through the vendor's queue. A service that
sees every held job can run the programs of many small jobs as one vendor task (a Braket
program set, an IBM Sampler job of several pubs: ``Vendor.submit_set``) and split the
results back (``Vendor.results``). This module owns the ``[quantum.merge]`` table of the
instance configuration, its validation (all or nothing, one sentence naming the key) and
the decisions the handler service asks of it: which held programs may share a task
(``compatible``), how they are grouped within the vendor's limits (``batches``), when a
group is sent (``decide``) and the one-line sentences for memos and events (``explain``).
What each job pays of the merged task's bill is :mod:`flux_quantum.site.cost_shares`'s.
It decides from data: it never reads the clock, calls a vendor or touches Flux; the
service hands it "now", the device's state and the held jobs.

The table (every key optional)::

    [quantum.merge]
    enabled = true              # merge compatible held jobs' programs (default true)
    across_users = false        # jobs of different users share a task: false (default),
                                #   true, or a list of banks: ["chem"] lets users of bank
                                #   chem share a task with each other
    max_wait = "60s"            # the longest a job is held back to be merged (default 60 s;
                                #   a number of seconds or 30s, 2m, 1h)
    devices = ["forte1"]        # catalog names (default: every device that takes merged tasks)

A job opts out with ``--setattr=qpu.merge=no`` (``qpu.merge`` is ``yes`` or ``no``).

Who shares a task: programs on the same device, paid by the same account (``site`` or
``user``), in the same reserved window (or none), of jobs that did not opt out and ride no
vendor session; of one user, or of different users only as ``across_users`` allows (a
merged task's results are split back per job: no job ever sees another's).

What a task may hold (``Limits``, ``flux_quantum.protocol.merged_tasks``) is the vendor's
to say: its descriptor's ``merged_tasks`` for the device (``device_limits``), such as
the executables and shots of a program set, or the executions and input bytes of a job
of several pubs. A vendor that declares none takes no merged tasks.

When it is sent (the bounded wait): at once on an idle device; otherwise when it is full
(the next program would go over the vendor's limits) or when one of its jobs has waited its
own expected queue gain, capped by ``max_wait`` and by the device's expected queue wait
(merging cannot save more than the queue it skips). So no job waits longer than what
merging saves it, and none waits at all when nothing is queued.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flux_quantum.protocol.merged_tasks import Limits, Load
from flux_quantum.protocol.vendors import registry
from flux_quantum.site.access import checked_table, name_list, shown
from flux_quantum.site.reservations import format_seconds

TABLE = "quantum.merge"
KEYS = ("enabled", "across_users", "max_wait", "devices")
DEFAULT_MAX_WAIT = 60.0
ACCOUNTS = ("site", "user")

# Bounds of a wait (``Decision.bound``).
BOUND_GAIN = "gain"
BOUND_MAX_WAIT = "max_wait"
BOUND_QUEUE = "queue"

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(s|m|h)?", re.ASCII)
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


class MergeConfigError(ValueError):
    """The ``[quantum.merge]`` table is invalid; the message names the key."""


# --- the site's configuration ------------------------------------------------------------


@dataclass(frozen=True)
class MergeConfig:
    """The validated ``[quantum.merge]`` table.

    ``across_users``: True (any users), False (one user per task) or the banks whose users
    may share a task with each other (both jobs in the same listed bank). ``devices``:
    None for every device that takes merged tasks.
    """

    enabled: bool = True
    across_users: bool | frozenset[str] = False
    max_wait: float = DEFAULT_MAX_WAIT
    devices: frozenset[str] | None = None

    @classmethod
    def from_config(
        cls, table: object, devices: Mapping[str, object] | Iterable[str] | None = None
    ) -> MergeConfig:
        """Validate ``[quantum.merge]`` as ``flux config get`` returns it (None: the
        defaults). ``devices``: the catalog's device names (or devices by name), to check
        ``devices`` against."""
        if table is None:
            return cls()
        where = f"[{TABLE}]"
        table = checked_table(table, where, KEYS, MergeConfigError)
        enabled = table.get("enabled", True)
        if not isinstance(enabled, bool):
            raise MergeConfigError(
                f"{where} enabled must be true or false, got {shown(enabled, 60)}"
            )
        across = table.get("across_users", False)
        if not isinstance(across, bool):
            if (
                not isinstance(across, list)
                or not across
                or not all(isinstance(bank, str) and bank for bank in across)
            ):
                raise MergeConfigError(
                    f"{where} across_users must be true, false or a non-empty list of bank "
                    f"names, got {shown(across, 60)}"
                )
            across = frozenset(across)
        max_wait = _duration(table.get("max_wait", DEFAULT_MAX_WAIT), f"{where} max_wait")
        names = name_list(table.get("devices"), f"{where} devices", MergeConfigError)
        if names is not None and devices is not None:
            known = set(devices)
            for name in sorted(names):
                if name not in known:
                    raise MergeConfigError(
                        f"{where} devices: {name!r} is not in the catalog "
                        f"(devices: {', '.join(sorted(known)) or 'none'})"
                    )
        return cls(enabled=enabled, across_users=across, max_wait=max_wait, devices=names)

    def covers(self, device: str) -> bool:
        """Whether merging is on for ``device`` (that it takes merged tasks is the
        vendor's to say: ``Limits``)."""
        return self.enabled and (self.devices is None or device in self.devices)

    def users_may_share(self, a: Candidate, b: Candidate) -> bool:
        """Whether the jobs of ``a`` and ``b`` may share a task as far as their users go."""
        if a.userid == b.userid or self.across_users is True:
            return True
        if self.across_users is False:
            return False
        return a.bank is not None and a.bank == b.bank and a.bank in self.across_users

    def describe_users(self) -> str:
        if self.across_users is True:
            return "jobs of any users share a task"
        if self.across_users is False:
            return "a task holds the jobs of one user"
        banks = ", ".join(sorted(self.across_users))
        return f"users of one bank share a task in banks {banks}"

    def describe(self) -> str:
        """``merging on (every device that takes merged tasks; a task holds the jobs of one
        user; max_wait 1m)`` or ``merging off``."""
        if not self.enabled:
            return "merging off"
        where = (
            "every device that takes merged tasks"
            if self.devices is None
            else f"devices {', '.join(sorted(self.devices))}"
        )
        return (
            f"merging on ({where}; {self.describe_users()}; "
            f"max_wait {format_seconds(self.max_wait)})"
        )

    def to_dict(self) -> dict[str, object]:
        across: object = self.across_users
        if isinstance(across, frozenset):
            across = sorted(across)
        return {
            "enabled": self.enabled,
            "across_users": across,
            "max_wait": self.max_wait,
            "devices": None if self.devices is None else sorted(self.devices),
        }


def _duration(value: object, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds: float | None = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
    else:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise MergeConfigError(
            f"{where} must be a duration >= 0 such as 0, 30s, 2m or 1h, got {shown(value, 60)}"
        )
    return seconds


# --- what waits and what a task takes -----------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A held job's program waiting to be merged.

    ``size``: the program's bytes as the vendor carries it (``payload_size``); ``since``:
    when it began to wait (epoch seconds); ``gain``: seconds its result is expected to come
    sooner if merged than alone (None: not known, counted as 0: it waits for no one);
    ``session``: the vendor session mode it rides (None: none; a job riding one is never
    merged); ``opt_out``: its job said ``qpu.merge=no``; ``reservation``: the reserved
    window its task runs in (None: the public queue).
    """

    unit: int
    jobid: int
    userid: int
    user: str | None
    bank: str | None
    account: str
    device: str
    vendor: str
    size: int
    shots: int
    since: float
    gain: float | None = None
    session: str | None = None
    opt_out: bool = False
    reservation: str | None = None

    def __post_init__(self) -> None:
        if self.account not in ACCOUNTS:
            raise ValueError(f"account must be site or user, got {self.account!r}")
        if isinstance(self.shots, bool) or not isinstance(self.shots, int) or self.shots < 1:
            raise ValueError(f"shots must be an integer >= 1, got {self.shots!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"size must be an integer >= 0, got {self.size!r}")

    @property
    def order(self) -> tuple[float, int, int]:
        """Oldest first: when it began to wait, then job id, then unit id."""
        return (self.since, self.jobid, self.unit)

    @property
    def who(self) -> str:
        return self.user or str(self.userid)

    @property
    def label(self) -> str:
        return f"job {self.jobid}"


def payload_size(program_text: str) -> int:
    """The bytes ``program_text`` takes in a vendor's JSON request (escapes counted): the
    ``size`` of its ``Candidate``."""
    return len(json.dumps(program_text))


def device_limits(vendor: str, device_id: str) -> Limits | None:
    """What one merged task on the QPU ``device_id`` of ``vendor`` may hold, as the
    vendor's descriptor says (None: it takes no merged tasks, or no such vendor)."""
    descriptor = registry().get(vendor)
    return descriptor.merge_limits(device_id) if descriptor is not None else None


# --- who may share a task -----------------------------------------------------------------


def alone_reason(candidate: Candidate, config: MergeConfig) -> str | None:
    """Why ``candidate`` is never merged, whatever else waits (None: it may be)."""
    if not config.enabled:
        return f"merging is off at this site ([{TABLE}] enabled = false)"
    if candidate.opt_out:
        return "its job opted out (qpu.merge=no)"
    if candidate.session is not None:
        return f"it rides a vendor session ({candidate.session})"
    if not config.covers(candidate.device):
        return f"device {candidate.device} is not in [{TABLE}] devices"
    return None


def compatible(a: Candidate, b: Candidate, config: MergeConfig) -> str | None:
    """None when ``a`` and ``b`` may share one task, else why not (one sentence)."""
    for candidate in (a, b):
        why = alone_reason(candidate, config)
        if why is not None:
            return f"{candidate.label}: {why}"
    if a.device != b.device:
        return f"different devices ({a.device}, {b.device})"
    if a.vendor != b.vendor:
        return f"different vendors ({a.vendor}, {b.vendor})"
    if a.account != b.account:
        return f"different accounts pay ({a.account}, {b.account})"
    if a.reservation != b.reservation:
        return f"different reserved windows ({a.reservation or 'none'}, {b.reservation or 'none'})"
    if a.userid != b.userid:
        users = f"{a.who}, {b.who}"
        if a.account == "user":
            return f"different users ({users}), each paying with their own account"
        if not config.users_may_share(a, b):
            if not isinstance(config.across_users, frozenset):  # False (True: they may share)
                return (
                    f"different users ({users}) and [{TABLE}] across_users = false: a task "
                    "holds the jobs of one user"
                )
            banks = ", ".join(sorted(config.across_users))
            return (
                f"different users ({users}) in banks {a.bank or 'unknown'} and "
                f"{b.bank or 'unknown'}: [{TABLE}] across_users lets users share a task only "
                f"within one of the banks {banks}"
            )
    return None


# --- batches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Programs that go out as one task (or one that goes alone), oldest first.

    ``members``: in the order of ``submit_set``'s programs (``results`` answers in that
    order). ``alone``: why its one member is never merged (None: a batch that may merge,
    perhaps of one yet). ``limits``: the device's (None: it takes no merged task).
    ``room``: how many more programs like its newest (its shots, its size) fit (None: no
    limit applies); ``full``: not even one more (``full_reason`` says which limit).
    """

    device: str
    members: tuple[Candidate, ...]
    limits: Limits | None = None
    alone: str | None = None
    full: bool = False
    full_reason: str | None = None
    room: int | None = None

    @property
    def oldest(self) -> Candidate:
        return self.members[0]

    @property
    def merged(self) -> bool:
        return len(self.members) > 1

    @property
    def jobids(self) -> list[int]:
        return [m.jobid for m in self.members]

    @property
    def shots(self) -> list[int]:
        return [m.shots for m in self.members]

    @property
    def total_shots(self) -> int:
        return sum(self.shots)

    @property
    def executables(self) -> int:
        if self.limits is None:
            return len(self.members)
        return self.limits.executables(self.shots)

    @property
    def key(self) -> str:
        """A name of this batch's members in order (``merge-`` and 16 hex digits): the
        same members give the same key, so a token derived from it is stable."""
        text = ",".join(f"{m.unit}:{m.jobid}" for m in self.members)
        return "merge-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, object]:
        return {
            "device": self.device,
            "key": self.key,
            "jobs": self.jobids,
            "shots": self.shots,
            "executables": self.executables,
            "alone": self.alone,
            "full": self.full,
            "full_reason": self.full_reason,
            "room": self.room,
        }


@dataclass
class _Open:
    """A batch being filled: its members, what they add up to, and one member of each
    kind (user, bank, account, vendor, window): whether a program may join depends only
    on those, so it is checked against one member of each kind."""

    device: str
    limits: Limits
    members: list[Candidate] = field(default_factory=list)
    shots: list[int] = field(default_factory=list)
    load: Load = field(default_factory=lambda: Load())
    kinds: dict[tuple[object, ...], Candidate] = field(default_factory=dict)

    def add(self, candidate: Candidate, load: Load) -> None:
        self.members.append(candidate)
        self.shots.append(candidate.shots)
        self.load = load
        self.kinds.setdefault(_kind(candidate), candidate)


def _kind(c: Candidate) -> tuple[object, ...]:
    return (c.userid, c.bank, c.account, c.vendor, c.reservation)


def batches(
    candidates: Iterable[Candidate],
    limits: Limits | Mapping[str, Limits] | None,
    config: MergeConfig,
) -> list[Batch]:
    """Group ``candidates`` into tasks: every candidate in exactly one batch.

    Oldest first (``Candidate.order``), each candidate joins the first batch whose every
    member it is ``compatible`` with and that still fits the device's ``limits`` with it
    (one ``Limits`` for every device, or by device name; a device without limits takes no
    merged task), else starts a new batch. Candidates that are never merged
    (``alone_reason``, no limits, over the limits on their own) are batches of one with
    ``alone`` set. Batches come in the order of their oldest member; the same candidates
    give the same batches whatever order they are given in.
    """
    ordered = sorted(candidates, key=lambda c: c.order)
    slots: list[_Open | Batch] = []
    for candidate in ordered:
        device_limits = limits.get(candidate.device) if isinstance(limits, Mapping) else limits
        why = alone_reason(candidate, config)
        if why is None and device_limits is None:
            why = f"device {candidate.device} takes no merged tasks"
        if why is None and device_limits is not None:
            over = device_limits.problem([candidate.shots], [candidate.size])
            if over is not None:
                why = f"on its own it is over a merged task's limits ({over})"
        if why is not None:
            slots.append(Batch(candidate.device, (candidate,), device_limits, alone=why))
            continue
        assert device_limits is not None
        for slot in slots:
            if not isinstance(slot, _Open) or slot.device != candidate.device:
                continue
            if any(compatible(candidate, m, config) is not None for m in slot.kinds.values()):
                continue
            load = slot.load.plus(slot.shots, candidate.shots, candidate.size)
            if device_limits.load_problem(load) is not None:
                continue
            slot.add(candidate, load)
            break
        else:
            slot = _Open(candidate.device, device_limits)
            slot.add(candidate, Load.of([candidate.shots], [candidate.size]))
            slots.append(slot)
    return [slot if isinstance(slot, Batch) else _close(slot) for slot in slots]


def _close(slot: _Open) -> Batch:
    newest = slot.members[-1]
    room = slot.limits.load_room(slot.load, slot.shots, newest.shots, newest.size)
    reason = None
    if room == 0:
        over = slot.limits.load_problem(slot.load.plus(slot.shots, newest.shots, newest.size))
        reason = f"one more like {newest.label} would make {over}"
    return Batch(
        slot.device,
        tuple(slot.members),
        slot.limits,
        full=reason is not None,
        full_reason=reason,
        room=room,
    )


# --- when a batch is sent ---------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Whether a batch goes out now, with ``reason`` (one sentence) and ``cause`` (its
    short why, for ``explain``). ``retry_at``: when the answer changes if nothing else does
    (the end of the bounded wait; None when sent). ``due``, ``bound``, ``by`` and
    ``seconds``: the end of the wait, what set it (``gain``, ``max_wait`` or ``queue``),
    whose job's bound it is and how long that bound is."""

    send: bool
    reason: str
    retry_at: float | None = None
    cause: str = ""
    due: float | None = None
    bound: str | None = None
    by: int | None = None
    seconds: float | None = None


def wait_bound(
    candidate: Candidate, config: MergeConfig, expected_queue_wait: float | None = None
) -> tuple[float, str]:
    """The longest ``candidate`` may wait to be merged, and what sets it: its expected
    queue gain (unknown: 0), capped by ``max_wait`` and by the device's expected queue
    wait (merging cannot save more than the queue it skips)."""
    gain = max(0.0, candidate.gain) if candidate.gain is not None else 0.0
    seconds, bound = gain, BOUND_GAIN
    if config.max_wait < seconds:
        seconds, bound = config.max_wait, BOUND_MAX_WAIT
    if expected_queue_wait is not None and max(0.0, expected_queue_wait) < seconds:
        seconds, bound = max(0.0, expected_queue_wait), BOUND_QUEUE
    return seconds, bound


def decide(
    batch: Batch,
    *,
    now: float,
    device_idle: bool,
    expected_queue_wait: float | None,
    config: MergeConfig,
    complete: bool = False,
) -> Decision:
    """Send ``batch`` now, or wait for more programs to merge with (the bounded wait).

    Sent at once when it is never merged (``alone``), when the device is idle or its
    expected queue wait is 0 (nothing waits then), when it is full, and, holding two
    jobs or more, when it is ``complete``: the caller knows no other job on its way to
    it (a burst is all in: waiting longer only delays them all). Otherwise each
    member may wait until its ``since`` plus its ``wait_bound`` (its queue gain, at most
    ``max_wait`` and the device's ``expected_queue_wait``); the batch goes when the first
    of those ends, so no member waits longer than merging saves it.
    """
    device = batch.device
    n = len(batch.members)
    sent = f"sent alone on {device}" if n == 1 else f"sent {n} jobs as one task on {device}"
    if batch.alone is not None:
        return Decision(True, f"{sent}: {batch.alone}", cause=batch.alone)
    if device_idle or (expected_queue_wait is not None and expected_queue_wait <= 0):
        cause = f"{device} is idle" if device_idle else f"{device} has no queue"
        cause += ", nothing waits"
        return Decision(True, f"{sent}: {cause}", cause=cause)
    if batch.full:
        cause = f"the task is full ({batch.full_reason})"
        return Decision(True, f"{sent}: {cause}", cause=cause)
    if complete and n > 1:
        cause = "no other job is on its way"
        return Decision(True, f"{sent}: {cause}", cause=cause)
    due, bound, by, seconds = math.inf, BOUND_GAIN, batch.oldest, 0.0
    for member in batch.members:
        wait, why = wait_bound(member, config, expected_queue_wait)
        if member.since + wait < due:
            due, bound, by, seconds = member.since + wait, why, member, wait
    if now >= due:
        cause = f"{by.label} has waited {_waited(bound, seconds)}"
        return Decision(
            True,
            f"{sent}: {cause}",
            cause=cause,
            due=due,
            bound=bound,
            by=by.jobid,
            seconds=seconds,
        )
    whose = f"{by.label}'s"
    cause = f"sent {_when(batch, due)} ({_bound_words(bound, seconds, whose)})"
    return Decision(
        False,
        f"{_jobs(n)} {'waits' if n == 1 else 'wait'} to merge on {device}: {cause}",
        retry_at=due,
        cause=cause,
        due=due,
        bound=bound,
        by=by.jobid,
        seconds=seconds,
    )


def _jobs(n: int, what: str = "job") -> str:
    return f"1 {what}" if n == 1 else f"{n} {what}s"


def _waited(bound: str, seconds: float) -> str:
    shown = format_seconds(seconds)
    if bound == BOUND_MAX_WAIT:
        return f"[{TABLE}] max_wait ({shown})"
    if bound == BOUND_QUEUE:
        return f"as long as the device's queue wait ({shown})"
    return f"its queue gain ({shown})"


def _bound_words(bound: str, seconds: float, whose: str) -> str:
    shown = format_seconds(seconds)
    if bound == BOUND_MAX_WAIT:
        return f"[{TABLE}] max_wait, {shown}"
    if bound == BOUND_QUEUE:
        return f"the device's queue wait, {shown}"
    return f"{whose} queue gain, {shown}"


def clock_time(t: float) -> str:
    """``t`` (epoch seconds) as a UTC time of day, ``12:00:05Z``."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%SZ")


def _when(batch: Batch, due: float) -> str:
    at = f"at {clock_time(due)}"
    if batch.room is None:
        return at
    return f"when {len(batch.members) + batch.room} wait or {at}"


def explain(batch: Batch, decision: Decision, jobid: int) -> str:
    """The one line for job ``jobid``'s memo or event about ``batch`` and ``decision``,
    e.g. ``merging with 3 other jobs on forte1: sent when 5 wait or at 12:00:05Z (its
    queue gain, 40s)``."""
    device = batch.device
    if batch.alone is not None:
        return f"not merged on {device}: {batch.alone}"
    others = len(batch.members) - 1
    with_others = f"with {_jobs(others, 'other job')}"
    if decision.send:
        if others == 0:
            return f"sent alone on {device}, no compatible job waits: {decision.cause}"
        return f"merged {with_others} into one task on {device}: {decision.cause}"
    assert decision.due is not None and decision.bound is not None
    whose = "its" if decision.by == jobid else f"job {decision.by}'s"
    what = _bound_words(decision.bound, decision.seconds or 0.0, whose)
    when = _when(batch, decision.due)
    if others == 0:
        return f"waiting to merge on {device}: sent {when} ({what})"
    return f"merging {with_others} on {device}: sent {when} ({what})"
