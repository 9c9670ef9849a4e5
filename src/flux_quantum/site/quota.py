"""Spend and task limits: the ``[quantum.quota]`` table and the decision to charge a task.

This module owns the quota configuration (limits per user and per bank, per day or
month, on spend in the catalog's currency and on task counts, optionally for some
devices, vendors or classes only), the job cap (``qpu.max_cost``), a task's estimated
and actual cost, the period windows, and the decision whether a charge fits. Like
``policy`` and ``poller`` it only decides from data it is given: it never reads the
ledger, the clock or a vendor (``flux_quantum.site.ledger`` measures what was used, inside
the transaction that records the charge, and asks :func:`decide`).

The table::

    [quantum.quota]
    timezone = "UTC"                 # where days and months begin (an IANA name)

    [[quantum.quota.limits]]
    name = "user-monthly"            # optional, quoted in refusals
    user = "*"                       # each user on their own; or one user (name or uid)
    period = "month"                 # "day" or "month"
    spend = 100.0                    # in the catalog's currency, and/or
    tasks = 500                      # tasks created

    [[quantum.quota.limits]]
    bank = "chem"                    # one bank (its users together); "*": each bank
    period = "day"
    spend = 50.0
    classes = ["qpu"]                # optional: count only these devices, vendors, classes

Every limit that applies to a task is checked; the first one (in file order) the task
would exceed refuses it. A task counts against a period by when it was reserved. Spend
is what was settled plus what is reserved and not yet settled; a settled task costs
what it really cost, which may exceed its estimate (a simulator that ran long), so a
limit can be overrun by that difference but never by a new task.

Where flux-accounting runs (``[quantum.accounting]``), bank limits name its banks and
a limit on a parent bank counts its sub-banks too (:meth:`QuotaConfig.with_banks`, from
the bank tree in its database); a limit naming a bank it does not have is refused.

A task in a reserved window (Braket Direct, :mod:`flux_quantum.site.reservations`) is
charged nothing (``Charge.reservation``: the window is paid whatever runs in it): no
spend limit or job cap refuses it, task limits still count it. The window itself is
one row of the site (or of the bank that booked it) and counts against that bank's
spend limits.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.site.access import (
    SELECTOR_KEYS,
    DeviceFacts,
    DeviceSelector,
    checked_table,
    optional_name,
    shown,
)
from flux_quantum.site.charge import TaskCharge

TABLE = "quantum.quota"
PERIODS = ("day", "month")
LIMIT_KEYS = (
    "name",
    "user",
    "bank",
    "period",
    "spend",
    "tasks",
    *SELECTOR_KEYS,
)
TABLE_KEYS = ("timezone", "limits")
EACH = "*"
EXPECTED_SECONDS_PROPERTY = "expected_seconds"
# Enough settled tasks to trust a device's own run times over its catalog figure.
HISTORY_SAMPLES = 3
_EPSILON = 1e-9


class QuotaConfigError(ValueError):
    """The ``[quantum.quota]`` table is invalid; the message names the key."""


# --- money -----------------------------------------------------------------------------


def format_money(amount: float, currency: str = "USD") -> str:
    """``$12.34`` for US dollars, ``12.34 EUR`` otherwise; small amounts keep 4 decimals."""
    digits = 2 if abs(amount) >= 1 or amount == 0 else 4
    number = f"{amount:,.{digits}f}"
    return f"${number}" if currency == "USD" else f"{number} {currency}"


def expected_seconds(device: Device, history: Sequence[float] = ()) -> float | None:
    """Expected billed run time of a task on a time-billed device: the median of its
    recent settled run times (``history``) once there are ``HISTORY_SAMPLES``, else the
    catalog property ``expected_seconds``, else None (the price's minimum applies)."""
    if device.price.per_minute == 0:
        return None
    if len(history) >= HISTORY_SAMPLES:
        return float(statistics.median(history))
    text = device.properties.get(EXPECTED_SECONDS_PROPERTY)
    try:
        value = float(text) if text is not None else None
    except ValueError:
        value = None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def estimate_cost(price: PriceModel, shots: int, seconds: float | None = None) -> float:
    """What to reserve for a task: price x shots (QPUs), price x expected run time
    (simulators, never below their billed minimum)."""
    return price.cost(shots, seconds)


def actual_cost(price: PriceModel, shots: int, billed_seconds: float | None = None) -> float:
    """What a finished task cost: the same model at its billed run time."""
    return price.cost(shots, billed_seconds)


# --- periods ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One day or month in the site's timezone: [start, end) in epoch seconds."""

    period: str
    label: str  # "2025-06-01" or "2025-06"
    start: float
    end: float


def period_window(t: float, period: str, zone: tzinfo = UTC) -> Window:
    """The day or month that contains ``t`` (epoch seconds) in ``zone``."""
    # Aware datetimes add wall-clock time, and .timestamp() applies each instant's own
    # offset, so a day with a DST change is 23 or 25 hours long, as it should be.
    local = datetime.fromtimestamp(t, zone)
    if period == "day":
        start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=1)
        label = start.strftime("%Y-%m-%d")
    elif period == "month":
        start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + timedelta(days=32)).replace(day=1)
        label = start.strftime("%Y-%m")
    else:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")
    return Window(period, label, start.timestamp(), end.timestamp())


# --- configuration ---------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """One ``[[quantum.quota.limits]]`` entry. ``scope`` is "user" or "bank"; ``who``
    a name (or uid) or ``*`` (each user or bank on its own)."""

    index: int
    scope: str
    who: str
    period: str
    spend: float | None = None
    tasks: int | None = None
    name: str | None = None
    only: DeviceSelector = DeviceSelector()  # the devices it counts
    # A named bank's limit where flux-accounting runs: the bank and its sub-banks (its
    # tree in flux-accounting's database); None: the bank alone.
    covers: frozenset[str] | None = None

    @property
    def label(self) -> str:
        named = f" '{self.name}'" if self.name else ""
        return f"[{TABLE}] limit {self.index}{named}"

    def subject(self, charge: Charge) -> str | None:
        """Whose usage this limit counts for ``charge`` (None: it does not apply): a
        user's uid, or a bank's name (a named bank's for a charge to one of its
        sub-banks)."""
        if self.scope == "bank":
            if charge.bank is None:
                return None
            if self.who == EACH:
                return charge.bank
            if charge.bank == self.who or charge.bank in (self.covers or ()):
                return self.who
            return None
        if self.who not in (EACH, str(charge.userid), charge.user):
            return None
        return str(charge.userid)

    def banks(self, charge: Charge) -> tuple[str, ...]:
        """The banks whose rows a bank limit counts for ``charge``, sorted: the charge's
        own bank (``*``), else the named bank with its sub-banks."""
        if self.who == EACH or charge.bank is None:
            return (charge.bank,) if charge.bank is not None else ()
        return tuple(sorted(self.covers or {self.who}))

    def applies(self, charge: Charge) -> bool:
        device = DeviceFacts(charge.device, charge.vendor, charge.device_class)
        return self.subject(charge) is not None and self.only.match(device) is True

    def describe(self, charge: Charge, currency: str) -> str:
        whose = charge.user or str(charge.userid) if self.scope == "user" else self.subject(charge)
        if self.scope == "bank" and len(self.covers or ()) > 1:
            whose = f"{whose} with its sub-banks"
        amounts = []
        if self.spend is not None:
            amounts.append(format_money(self.spend, currency))
        if self.tasks is not None:
            amounts.append(f"{self.tasks} task{'s' if self.tasks != 1 else ''}")
        only = self.only != DeviceSelector()
        scope = f" on {self.only.describe()}" if only else ""
        return f"{self.label}: {self.scope} {whose}, {' and '.join(amounts)} a {self.period}{scope}"


@dataclass(frozen=True)
class QuotaConfig:
    """The site's limits, in file order, and the timezone of their periods."""

    limits: tuple[Limit, ...] = ()
    timezone: str = "UTC"

    @property
    def zone(self) -> tzinfo:
        return UTC if self.timezone == "UTC" else ZoneInfo(self.timezone)

    @classmethod
    def from_config(cls, table: object) -> QuotaConfig:
        """Validate ``[quantum.quota]`` as ``flux config get`` returns it (None: no limits)."""
        if table is None:
            return cls()
        table = checked_table(table, f"[{TABLE}]", TABLE_KEYS, QuotaConfigError)
        zone = table.get("timezone", "UTC")
        try:
            if not isinstance(zone, str) or not zone:
                raise ValueError
            if zone != "UTC":
                ZoneInfo(zone)
        except (ValueError, ZoneInfoNotFoundError):
            raise QuotaConfigError(
                f"[{TABLE}] timezone must be an IANA time zone such as UTC or Europe/Paris,"
                f" got {shown(zone)}"
            ) from None
        entries = table.get("limits", [])
        if not isinstance(entries, list):
            raise QuotaConfigError(f"[{TABLE}] limits must be a list of tables")
        limits = tuple(_parse_limit(entry, i) for i, entry in enumerate(entries, start=1))
        return cls(limits=limits, timezone=zone)

    def with_banks(self, coverage: Mapping[str, frozenset[str]], source: str) -> QuotaConfig:
        """The limits on the banks of ``source`` (flux-accounting's database, where it
        runs): ``coverage`` maps each of its banks to itself and its sub-banks, so a
        limit on a parent bank counts every bank under it. A limit naming a bank
        ``source`` does not have is refused (QuotaConfigError, one sentence)."""
        limits = []
        for limit in self.limits:
            if limit.scope != "bank" or limit.who == EACH:
                limits.append(limit)
                continue
            if limit.who not in coverage:
                raise QuotaConfigError(
                    f"[{TABLE}] limits[{limit.index}].bank '{limit.who}' is not a bank in {source}"
                )
            limits.append(replace(limit, covers=frozenset(coverage[limit.who])))
        return replace(self, limits=tuple(limits))


def _parse_limit(entry: object, index: int) -> Limit:
    where = f"[{TABLE}] limits[{index}]"
    entry = checked_table(entry, where, LIMIT_KEYS, QuotaConfigError)
    scopes = [key for key in ("user", "bank") if key in entry]
    if len(scopes) != 1:
        raise QuotaConfigError(f'{where} needs exactly one of user or bank (a name, or "*")')
    scope = scopes[0]
    who = entry[scope]
    if isinstance(who, bool) or not isinstance(who, str | int) or who == "":
        raise QuotaConfigError(f'{where}.{scope} must be a name or "*", got {shown(who)}')
    period = entry.get("period")
    if period not in PERIODS:
        raise QuotaConfigError(f'{where}.period must be "day" or "month", got {shown(period)}')
    spend = entry.get("spend")
    if spend is not None and (
        isinstance(spend, bool)
        or not isinstance(spend, int | float)
        or not math.isfinite(spend)
        or spend < 0
    ):
        raise QuotaConfigError(f"{where}.spend must be a number >= 0, got {shown(spend)}")
    tasks = entry.get("tasks")
    if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0):
        raise QuotaConfigError(f"{where}.tasks must be an integer >= 0, got {shown(tasks)}")
    if spend is None and tasks is None:
        raise QuotaConfigError(f"{where} needs spend, tasks or both")
    return Limit(
        index=index,
        scope=scope,
        who=str(who),
        period=period,
        spend=float(spend) if spend is not None else None,
        tasks=tasks,
        name=optional_name(entry.get("name"), f"{where}.name", QuotaConfigError),
        only=DeviceSelector.parse(entry, where, QuotaConfigError),
    )


# --- the decision ----------------------------------------------------------------------


@dataclass(frozen=True)
class Charge(TaskCharge):
    """One task to be charged (``TaskCharge``: who, where, what it is estimated to
    cost) and when (``t``, epoch seconds: the period it counts in); ``job_cap`` the
    request's ``qpu.max_cost`` for the whole job."""

    t: float
    job_cap: float | None = None

    @classmethod
    def for_device(
        cls,
        device: Device,
        *,
        token: str,
        jobid: int,
        userid: int,
        user: str | None,
        bank: str | None,
        shots: int,
        t: float,
        job_cap: float | None = None,
        history: Sequence[float] = (),
        reservation: str | None = None,
    ) -> Charge:
        """The charge of a task of ``shots`` on ``device``, its estimate from the catalog
        price (and the device's recent run times for time-billed simulators); in the
        reserved window ``reservation`` (its name) nothing: the window is paid."""
        seconds = expected_seconds(device, history)
        return cls(
            token=token,
            jobid=jobid,
            userid=userid,
            user=user,
            bank=bank,
            device=device.name,
            vendor=device.vendor,
            device_class=device.device_class,
            shots=shots,
            estimate=0.0 if reservation else estimate_cost(device.price, shots, seconds),
            t=t,
            job_cap=job_cap,
            reservation=reservation,
        )


@dataclass(frozen=True)
class Usage:
    """What one limit's subject used in the period: spend (settled + reserved) and tasks."""

    spend: float = 0.0
    tasks: int = 0


@dataclass(frozen=True)
class LimitCheck:
    """One applicable limit as the decision saw it."""

    limit: Limit
    window: Window
    used: Usage
    fits: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "limit": self.limit.index,
            "name": self.limit.name,
            "scope": self.limit.scope,
            "period": self.window.label,
            "spend_limit": self.limit.spend,
            "task_limit": self.limit.tasks,
            "spent": round(self.used.spend, 6),
            "tasks": self.used.tasks,
            "fits": self.fits,
        }


@dataclass(frozen=True)
class QuotaDecision:
    """Whether a charge fits; ``reason`` is one sentence naming the limit, what was
    spent and what the task would cost (or, when it fits, the closest limit)."""

    allowed: bool
    reason: str
    checks: tuple[LimitCheck, ...] = field(default=())
    limit: Limit | None = None  # the limit that refused it

    def to_dict(self) -> dict[str, object]:
        return {
            "allowed": self.allowed,
            "reason": self.reason,
            "limit": self.limit.index if self.limit else None,
            "checks": [check.to_dict() for check in self.checks],
        }


def headroom(job_cap: float | None, decision: QuotaDecision) -> float | None:
    """What a job may still spend as ``decision`` saw it, before its charge: its cap
    (``qpu.max_cost``) or the least any spend limit that applies has left, whichever is
    smaller; None when neither bounds it."""
    lefts = [
        (check.limit.spend or 0.0) - check.used.spend
        for check in decision.checks
        if check.limit.spend is not None
    ]
    if job_cap is not None:
        lefts.append(job_cap)
    return round(max(0.0, min(lefts)), 6) if lefts else None


def applicable(config: QuotaConfig, charge: Charge) -> list[tuple[Limit, Window]]:
    """The limits that count ``charge``, with the period window each counts it in."""
    zone = config.zone
    return [
        (limit, period_window(charge.t, limit.period, zone))
        for limit in config.limits
        if limit.applies(charge)
    ]


def decide(
    charge: Charge,
    limits: Sequence[tuple[Limit, Window]],
    used: Sequence[Usage],
    job_spent: float = 0.0,
    currency: str = "USD",
    tasks: int = 1,
) -> QuotaDecision:
    """Does ``charge`` fit? ``used[i]`` is what ``limits[i]``'s subject used in its
    window (without this charge); ``job_spent`` what the job's other tasks cost. A charge
    in a reserved window costs nothing more: neither the job's cap nor a spend limit
    refuses it (its bank may be over because of the window itself), task limits do.
    ``tasks``: how many tasks ``charge`` stands for (a batch's bound, checked before its
    first task: ``estimate`` is then what all of them may cost)."""
    cost = format_money(charge.estimate, currency)
    if tasks > 1:
        would = f"its {tasks} tasks may cost up to {cost}"
    else:
        would = f"this task on {charge.device} would cost {cost}"
    if charge.reservation is not None:
        would += f" (in reservation {charge.reservation})"
    paid = charge.reservation is not None
    if (
        not paid
        and charge.job_cap is not None
        and job_spent + charge.estimate > charge.job_cap + _EPSILON
    ):
        return QuotaDecision(
            False,
            f"over the job's cap: qpu.max_cost is {format_money(charge.job_cap, currency)},"
            f" the job has {format_money(job_spent, currency)} spent or reserved and {would}",
        )
    checks = []
    refusal: tuple[Limit, str] | None = None
    for (limit, window), usage in zip(limits, used, strict=True):
        over_spend = (
            not paid
            and limit.spend is not None
            and usage.spend + charge.estimate > limit.spend + _EPSILON
        )
        over_tasks = limit.tasks is not None and usage.tasks + tasks > limit.tasks
        fits = not (over_spend or over_tasks)
        checks.append(LimitCheck(limit, window, usage, fits))
        if fits or refusal is not None:
            continue
        in_period = f"this {window.period} ({window.label})"
        if over_spend:
            spent = f"{format_money(usage.spend, currency)} spent or reserved {in_period}"
            refusal = (limit, f"over quota: {limit.describe(charge, currency)}; {spent}, {would}")
        else:
            count = f"{usage.tasks} task{'s' if usage.tasks != 1 else ''} {in_period}"
            if tasks > 1:
                count += f", and the job would add {tasks}"
            refusal = (limit, f"over quota: {limit.describe(charge, currency)}; {count}")
    if refusal is not None:
        return QuotaDecision(False, refusal[1], tuple(checks), refusal[0])
    if not checks:
        return QuotaDecision(True, f"no limit applies; {would}", ())
    if paid:  # no spend counted: what is left of a spend limit says nothing about it
        return QuotaDecision(True, f"within {len(checks)} limit(s); {would}", tuple(checks))
    tightest = min(
        (c for c in checks if c.limit.spend is not None),
        key=lambda c: (c.limit.spend or 0.0) - c.used.spend,
        default=None,
    )
    if tightest is None:
        return QuotaDecision(True, f"within {len(checks)} task limit(s); {would}", tuple(checks))
    left = (tightest.limit.spend or 0.0) - tightest.used.spend - charge.estimate
    return QuotaDecision(
        True,
        f"within quota: {format_money(left, currency)} left after it of"
        f" {tightest.limit.describe(charge, currency)}",
        tuple(checks),
    )
