"""Reserved QPU time (such as Amazon Braket Direct): the site's windows and the pure
decisions on them.

A centre books a whole QPU for a window (Braket Direct: one-hour blocks, billed by the
window whatever runs in it; tasks created with the reservation's ARN skip the public
queue and wait QUEUED until the window begins). Which devices can be reserved, what
the vendor calls it and what a reservation's id looks like is the vendor's descriptor's
(``reserved_windows``: ``windows_on``), never this module's. This module owns the
``[[quantum.reservations]]`` tables of the instance configuration, their validation
(all or nothing, one sentence naming the key) and the decisions the handler service
asks of them: who may use a window, when a job waiting for one is admitted (its task
created with the ARN, the job released), when a window no longer takes work, and
whether a job that named no window is routed into one. It decides from data: it never
reads the clock, calls a vendor or touches Flux; the service hands it "now", the lead
it learned and what it tracks.

One window::

    [[quantum.reservations]]
    name = "forte-dec03"                 # what jobs ask for: --setattr=qpu.reservation=NAME
    device = "forte1"                    # the catalog's name of the reserved device
    arn = "arn:aws:braket:us-east-1:123456789012:reservation/..."
    start = 2026-12-03T09:00:00Z         # TOML date-times (or RFC 3339 strings, or epoch seconds)
    end = 2026-12-03T10:00:00Z
    cost = 7000.0                        # what the window costs, in the catalog's currency
    users = ["alice", "bob"]             # who may use it (names or uids) and/or banks;
    banks = ["chem"]                     #   neither: everyone the access rules allow
    bank = "chem"                        # who booked it: charged to this bank (default: the site)
    on_end = "on-demand"                 # a job whose task did not run by the end: "on-demand"
                                         #   (the device's public queue) or "fail"; a job may
                                         #   say otherwise with qpu.reservation_end
    route = true                         # the policy may route jobs that named no window here
    route_within = "2h"                  # ... from this long before it opens (default 0: only
                                         #   when it opens before the public queue would serve)
    jobs = 2                             # jobs of this window on nodes at once
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from flux_quantum.protocol.vendors import ReservedWindows, registry
from flux_quantum.site.access import (
    DeviceFacts,
    Requester,
    Rule,
    checked_table,
    name_list,
    shown,
)

TABLE = "quantum.reservations"
KEYS = (
    "name",
    "device",
    "arn",
    "start",
    "end",
    "cost",
    "users",
    "banks",
    "bank",
    "on_end",
    "route",
    "route_within",
    "jobs",
)
ON_DEMAND = "on-demand"
FAIL = "fail"
ON_END = (ON_DEMAND, FAIL)
DEFAULT_JOBS = 2

# States of a window at a time.
NEXT = "next"
NOW = "now"
PAST = "past"

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(s|m|h|d)?", re.ASCII)
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class ReservationConfigError(ValueError):
    """A ``[[quantum.reservations]]`` table is invalid; the message names the key."""


def format_seconds(seconds: float) -> str:
    """A short human duration: 45s, 12m, 2h05m, 3d4h."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def iso(t: float) -> str:
    """``t`` (epoch seconds) as RFC 3339 UTC, to the second."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(value: object, where: str) -> float:
    """Epoch seconds from a TOML date-time (``flux config get`` gives
    ``{"iso-8601-ts": ...}``), an RFC 3339 string with its offset, or a number."""
    if isinstance(value, Mapping) and set(value) == {"iso-8601-ts"}:
        value = value["iso-8601-ts"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed.timestamp()
    raise ReservationConfigError(
        f"{where} must be a date-time with its offset (2026-12-03T09:00:00Z, as a TOML "
        f"date-time or a string) or epoch seconds, got {shown(value, 60)}"
    )


def _duration(value: object, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds: float | None = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or ""]
    else:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ReservationConfigError(
            f"{where} must be a duration >= 0 such as 0, 90s, 30m or 2h, got {shown(value, 60)}"
        )
    return seconds


@dataclass(frozen=True)
class Reservation:
    """One booked window of a whole device."""

    name: str
    device: str
    arn: str
    start: float
    end: float
    cost: float
    who: Rule
    bank: str | None = None
    on_end: str = ON_DEMAND
    route: bool = False
    route_within: float = 0.0
    jobs: int = DEFAULT_JOBS

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def label(self) -> str:
        return f"reservation {self.name}"

    def state(self, now: float) -> str:
        if now >= self.end:
            return PAST
        return NOW if now >= self.start else NEXT

    def left(self, now: float) -> float:
        """Seconds of the window still to come (all of it before it opens)."""
        return max(0.0, self.end - max(now, self.start))

    def may_use(self, requester: Requester) -> bool | None:
        """True, False, or None when it depends on the job's bank (not known yet)."""
        return self.who.matches(requester, DeviceFacts(self.device))

    def share(self, seconds: float) -> float:
        """The part of the window's cost that ``seconds`` of its QPU time is."""
        return self.cost * max(0.0, seconds) / self.duration if self.duration > 0 else 0.0

    def describe_who(self) -> str:
        return self.who.who()

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "device": self.device,
            "arn": self.arn,
            "start": self.start,
            "end": self.end,
            "start_at": iso(self.start),
            "end_at": iso(self.end),
            "cost": self.cost,
            "who": self.describe_who(),
            "bank": self.bank,
            "on_end": self.on_end,
            "route": self.route,
            "route_within": self.route_within,
            "jobs": self.jobs,
        }


@dataclass(frozen=True)
class ReservationBook:
    """The site's windows, in file order."""

    reservations: tuple[Reservation, ...] = ()

    def __iter__(self) -> Iterator[Reservation]:
        return iter(self.reservations)

    def __len__(self) -> int:
        return len(self.reservations)

    def named(self, name: str) -> Reservation | None:
        return next((r for r in self.reservations if r.name == name), None)

    def by_arn(self, arn: str) -> Reservation | None:
        return next((r for r in self.reservations if r.arn == arn), None)

    def names(self) -> str:
        return ", ".join(r.name for r in self.reservations) or "none"

    def lookup(self, name: str) -> Reservation:
        """The window a job named, or ``LookupError`` with the sentence the job fails with."""
        found = self.named(name)
        if found is None:
            raise LookupError(
                f"qpu.reservation {name!r} is not a reservation of this instance "
                f"(configured: {self.names()})"
            )
        return found

    @classmethod
    def from_config(
        cls, value: object, devices: Mapping[str, object] | None = None
    ) -> ReservationBook:
        """Validate ``[[quantum.reservations]]`` as ``flux config get`` returns it (None: no
        windows). ``devices``: the catalog's devices by name, to check ``device`` against
        (each must be a QPU its vendor reserves: ``windows_on``)."""
        if value is None:
            return cls()
        if not isinstance(value, list):
            raise ReservationConfigError(
                f"[{TABLE}] must be a list of tables ([[{TABLE}]]), got {shown(value, 60)}"
            )
        parsed = [_parse(entry, index, devices) for index, entry in enumerate(value, start=1)]
        seen: dict[str, int] = {}
        for index, reservation in enumerate(parsed, start=1):
            if reservation.name in seen:
                raise ReservationConfigError(
                    f"[{TABLE}][{index}].name {reservation.name!r} is already the name of "
                    f"reservation {seen[reservation.name]}"
                )
            seen[reservation.name] = index
        for index, a in enumerate(parsed, start=1):
            for b in parsed[index:]:
                if a.device == b.device and a.start < b.end and b.start < a.end:
                    raise ReservationConfigError(
                        f"[{TABLE}] {a.name} and {b.name} overlap on device {a.device}: "
                        "a device has one reservation at a time"
                    )
        return cls(tuple(parsed))


def windows_on(vendor: object, device_id: object) -> ReservedWindows | None:
    """How the QPU ``device_id`` of ``vendor`` is reserved, as its vendor's descriptor
    says (None: it cannot be, or no such vendor)."""
    descriptor = registry().get(vendor)
    return descriptor.windows_on(str(device_id)) if descriptor is not None else None


def vendor_of(reservation: str) -> str | None:
    """The vendor whose windows ``reservation`` is the id of (the first in the order
    users read them), or None."""
    return next((name for name, w in _reserved_windows() if w.takes(reservation)), None)


def _reserved_windows() -> list[tuple[str, ReservedWindows]]:
    """Every vendor whose QPUs are reserved, with how, in the order users read them."""
    return [(d.name, d.reserved_windows) for d in registry() if d.reserved_windows is not None]


def _reserved_devices() -> str:
    """The devices that have reservations, for the sentence that refuses another:
    ``Braket devices (vendor braket, or the emulator's local)``."""
    labels: dict[str, list[str]] = {}
    for _, windows in _reserved_windows():
        labels.setdefault(windows.devices, []).append(windows.label)
    if not labels:
        return "devices of a vendor with reserved windows (none is installed)"
    return "; ".join(f"{devices} ({', or '.join(names)})" for devices, names in labels.items())


def _parse(entry: object, index: int, devices: Mapping[str, object] | None) -> Reservation:
    where = f"[{TABLE}][{index}]"
    table = checked_table(entry, where, KEYS, ReservationConfigError)
    for key in ("name", "device", "arn", "start", "end", "cost"):
        if key not in table:
            raise ReservationConfigError(f"{where} needs {key}")
    name = table["name"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ReservationConfigError(
            f"{where}.name must be lower-case letters, digits, '-', '_', '.' (at most 64, "
            f"first a letter or digit), got {shown(name, 60)}"
        )
    where = f"{where} ({name})"
    device = table["device"]
    if not isinstance(device, str) or not device:
        raise ReservationConfigError(
            f"{where}.device must be a device name, got {shown(device, 60)}"
        )
    if devices is not None:
        known = devices.get(device)
        if known is None:
            raise ReservationConfigError(
                f"{where}.device {device!r} is not in the catalog "
                f"(devices: {', '.join(sorted(devices)) or 'none'})"
            )
        vendor = getattr(known, "vendor", None)
        own = windows_on(vendor, getattr(known, "id", ""))
        if own is None:
            raise ReservationConfigError(
                f"{where}.device {device!r} is on vendor {vendor}: only "
                f"{_reserved_devices()} have reservations"
            )
        if getattr(known, "device_class", None) != "qpu":
            raise ReservationConfigError(
                f"{where}.device {device!r} is a {getattr(known, 'device_class', None)}: "
                f"{own.service} reserves QPUs only"
            )
        kinds = [own]
    else:
        kinds = [windows for _, windows in _reserved_windows()]
    arn = table["arn"]
    if not kinds:
        raise ReservationConfigError(f"{where}: no vendor installed has reserved windows")
    if not isinstance(arn, str) or not any(windows.takes(arn) for windows in kinds):
        forms = " or ".join(dict.fromkeys(windows.reservation_form for windows in kinds))
        raise ReservationConfigError(f"{where}.arn must be {forms}, got {shown(arn, 60)}")
    start = _time(table["start"], f"{where}.start")
    end = _time(table["end"], f"{where}.end")
    if end <= start:
        raise ReservationConfigError(
            f"{where}.end must be after start ({iso(start)}), got {iso(end)}"
        )
    cost = table["cost"]
    if (
        not isinstance(cost, (int, float))
        or isinstance(cost, bool)
        or not math.isfinite(cost)
        or cost < 0
    ):
        raise ReservationConfigError(
            f"{where}.cost must be what the window costs, a number >= 0, got {shown(cost, 60)}"
        )
    bank = table.get("bank")
    if bank is not None and (not isinstance(bank, str) or not bank):
        raise ReservationConfigError(f"{where}.bank must be a bank name, got {shown(bank, 60)}")
    on_end = table.get("on_end", ON_DEMAND)
    if on_end not in ON_END:
        raise ReservationConfigError(
            f'{where}.on_end must be "on-demand" or "fail", got {shown(on_end, 60)}'
        )
    route = table.get("route", False)
    if not isinstance(route, bool):
        raise ReservationConfigError(f"{where}.route must be true or false, got {shown(route, 60)}")
    jobs = table.get("jobs", DEFAULT_JOBS)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ReservationConfigError(f"{where}.jobs must be an integer >= 1, got {shown(jobs, 60)}")
    who = Rule(
        index=index,
        allow=True,
        name=name,
        users=name_list(table.get("users"), f"{where}.users", ReservationConfigError, numbers=True),
        banks=name_list(table.get("banks"), f"{where}.banks", ReservationConfigError),
    )
    return Reservation(
        name=name,
        device=device,
        arn=arn,
        start=start,
        end=end,
        cost=float(cost),
        who=who,
        bank=bank,
        on_end=on_end,
        route=route,
        route_within=_duration(table.get("route_within", 0), f"{where}.route_within"),
        jobs=jobs,
    )


# --- the decisions ----------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """Whether a job waiting for a window goes in now: its task created with the ARN and
    the job released. ``ended``: the window takes no more work (apply ``on_end``);
    ``retry_at``: when the answer may change (None: when something else changes)."""

    admit: bool
    reason: str
    ended: bool = False
    retry_at: float | None = None


def admission(
    reservation: Reservation,
    *,
    now: float,
    lead: float,
    active: int,
    task_seconds: float,
) -> Admission:
    """May one more job of ``reservation`` go in at ``now``?

    ``lead``: how long before its task can run a released job is on its nodes (the
    learned start-up plus the wait for its cores, as for the classical lead);
    ``active``: jobs of the window admitted and not ended; ``task_seconds``: the device's
    expected run time of one task. A job is admitted when the window opens within the
    lead (or is open), fewer than ``jobs`` of its jobs are on nodes, and a task created
    now can still run before the end; a window with less than one task's time left
    takes no more work, so no task is ever sent with an ARN whose window is over.
    """
    name = reservation.label
    if now + max(task_seconds, 0.0) >= reservation.end:
        when = "ended" if now >= reservation.end else "ends"
        return Admission(
            False,
            f"{name} {when} at {iso(reservation.end)}"
            + (
                ""
                if now >= reservation.end
                else f", too soon for a task of ~{format_seconds(task_seconds)}"
            ),
            ended=True,
        )
    opens_in = reservation.start - now
    if opens_in > lead:
        return Admission(
            False,
            f"{name} opens in {format_seconds(opens_in)} (at {iso(reservation.start)}); "
            f"the job goes in {format_seconds(lead)} before",
            retry_at=reservation.start - lead,
        )
    if active >= reservation.jobs:
        return Admission(
            False,
            f"{name}: its {reservation.jobs} place(s) on nodes are taken; the next job goes "
            "in when one ends",
        )
    if opens_in > 0:
        reason = f"{name} opens in {format_seconds(opens_in)} <= lead {format_seconds(lead)}"
    else:
        reason = f"{name} is open ({format_seconds(reservation.end - now)} left)"
    return Admission(True, f"{reason}, {active + 1} of {reservation.jobs} place(s)")


@dataclass(frozen=True)
class Route:
    """A policy's choice of a window for a job that named none (None: the public queue),
    with the sentence that goes into ``qpu-select``'s explanation."""

    reservation: Reservation | None
    reason: str


def route(
    book: Iterable[Reservation],
    *,
    now: float,
    requester: Requester,
    devices: Iterable[str],
    public_wait: Mapping[str, float | None],
    max_wait: float | None,
    waiting: Mapping[str, int],
    task_seconds: Mapping[str, float],
) -> Route:
    """Route a job into the window that opens first among those the rules allow.

    A window qualifies when it has ``route = true``, is not over, the job's user (and
    bank) may use it, its device is among the ``devices`` the job may run on, it opens
    within the job's ``max_wait``, and it has room: the jobs already waiting for it
    (``waiting``) and this one, one task each at ``task_seconds``, fit in what is left of
    it. It is taken when it opens sooner than the device's public queue would serve the
    job (``public_wait``; None: unknown), or within its ``route_within``: its tasks cost
    nothing more (the window is paid whatever runs in it), so it is cheaper.
    """
    wanted = set(devices)
    notes: list[str] = []
    best: tuple[float, Reservation, str] | None = None
    for reservation in book:
        if not reservation.route or reservation.device not in wanted:
            continue
        name = reservation.label
        if reservation.state(now) == PAST:
            continue
        allowed = reservation.may_use(requester)
        if allowed is not True:
            notes.append(f"{name}: not for {requester.describe()}")
            continue
        opens_in = max(0.0, reservation.start - now)
        if max_wait is not None and opens_in > max_wait:
            notes.append(f"{name} opens in {format_seconds(opens_in)}, after max_wait")
            continue
        seconds = task_seconds.get(reservation.device, 0.0)
        queued = waiting.get(reservation.name, 0) + 1
        # As admission() counts: a task must end before the window does.
        if seconds > 0 and queued * seconds >= reservation.left(now):
            notes.append(f"{name} is full ({queued - 1} job(s) wait for it)")
            continue
        public = public_wait.get(reservation.device)
        if public is not None and opens_in < public:
            why = (
                f"{name} on {reservation.device} opens in {format_seconds(opens_in)}, sooner "
                f"than its public queue (~{format_seconds(public)})"
            )
        elif opens_in <= reservation.route_within:
            why = (
                f"{name} on {reservation.device} opens in {format_seconds(opens_in)}, within "
                f"its route_within {format_seconds(reservation.route_within)}: its tasks cost "
                "nothing more (the window is paid)"
            )
        else:
            shown = "unknown" if public is None else f"~{format_seconds(public)}"
            notes.append(
                f"{name} opens in {format_seconds(opens_in)}, not sooner than the public "
                f"queue ({shown})"
            )
            continue
        if best is None or reservation.start < best[0]:
            best = (reservation.start, reservation, why)
    if best is not None:
        return Route(best[1], best[2])
    return Route(None, "; ".join(notes))
