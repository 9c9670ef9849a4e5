"""The ledger's usage report: what ``flux quantum usage`` asks (:class:`UsageQuery`),
the rows it gets (:class:`UsageRow`), who may ask for what, and the one SQL statement
behind it.

This module owns the report's shape and its query, written once in SQL both ledger
backends run (:func:`usage_statement`; the ledger runs it, :func:`usage_rows` reads its
rows). It never opens a ledger and never writes one; :mod:`flux_quantum.site.ledger`
re-exports its names for the modules that import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from flux_quantum.errors import FluxQuantumError
from flux_quantum.site.ledger_store import DEFAULT_CLUSTER

SITE_USERID = -1  # the site's own rows: reserved windows it (or a bank) paid for
SITE_USER = "(site)"
GROUPS = ("period", "user", "bank", "device", "reservation", "cluster")
DEFAULT_GROUPS = ("period", "user", "bank", "device")
PERIOD_GROUPS = ("day", "month", "all")
# A user's task, not the site's row (a reserved window).
TASK_ROW = f"userid != {SITE_USERID}"
# What a settled task feeds to flux-accounting: its cost (in a reserved window, its share
# of the window's cost), and the usage each unit of it became in the feed that took it.
FED_AMOUNT = "(cost + COALESCE(share, 0))"
FED_RATIO = (
    "(SELECT f.usage / f.spend FROM usage_feeds f WHERE f.id = charges.feed AND f.state = 'fed')"
)


class UsageLedger(Protocol):
    """What the report asks of a ledger."""

    @property
    def currency(self) -> str: ...

    def usage(self, query: UsageQuery) -> list[UsageRow]: ...


@dataclass(frozen=True)
class UsageQuery:
    """What ``flux quantum usage`` asks: filters, and how rows are grouped.

    ``user`` matches a user name or a uid; ``userid`` only a uid (set for guests by
    :func:`restrict_to_caller`). ``period`` groups by "day", "month" or "all";
    ``reservation`` in ``group_by`` gives a row per reserved window (its cost, its
    tasks, their QPU time and shares; "-": outside any window); ``cluster`` in it a row
    per instance sharing the ledger, and ``cluster`` alone only that instance's rows.
    """

    user: str | None = None
    userid: int | None = None
    bank: str | None = None
    since: float | None = None
    until: float | None = None
    period: str = "month"
    group_by: tuple[str, ...] = DEFAULT_GROUPS
    cluster: str | None = None
    accounting: bool = False  # each row's spend fed to flux-accounting, and its usage

    def to_dict(self) -> dict[str, Any]:
        """The payload of the service's ``usage`` RPC (``cluster`` and ``accounting``
        only when set: a service of an older flux-quantum refuses no field it does not
        know)."""
        return {
            **({"cluster": self.cluster} if self.cluster is not None else {}),
            **({"accounting": True} if self.accounting else {}),
            "user": self.user,
            "userid": self.userid,
            "bank": self.bank,
            "since": self.since,
            "until": self.until,
            "period": self.period,
            "group_by": list(self.group_by),
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> UsageQuery:
        """Parse an RPC payload; ValueError names a bad field."""
        if not isinstance(payload, Mapping):
            raise ValueError("usage: the request must be a JSON object")
        fields: dict[str, Any] = {}
        for key, kind in (("user", str), ("bank", str), ("userid", int), ("cluster", str)):
            value = payload.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise ValueError(f"usage: {key} must be a {kind.__name__}, got {value!r}")
            fields[key] = value
        for key in ("since", "until"):
            value = payload.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ValueError(f"usage: {key} must be epoch seconds, got {value!r}")
            fields[key] = None if value is None else float(value)
        period = payload.get("period", "month")
        if period not in PERIOD_GROUPS:
            raise ValueError(f"usage: period must be one of {', '.join(PERIOD_GROUPS)}")
        group_by = payload.get("group_by", list(DEFAULT_GROUPS))
        if not isinstance(group_by, list) or not all(g in GROUPS for g in group_by):
            raise ValueError(f"usage: group_by must list some of {', '.join(GROUPS)}")
        accounting = payload.get("accounting", False) is True
        return cls(period=period, group_by=tuple(group_by), accounting=accounting, **fields)


@dataclass(frozen=True)
class UsageRow:
    period: str
    user: str
    bank: str
    device: str
    tasks: int  # created (reserved or settled), not released; the site's rows are not tasks
    spent: float  # settled (a reserved window: its cost)
    reserved: float  # reserved, not yet settled
    released: int  # reservations whose task was never created
    reservation: str = "*"  # the reserved window ("-": none; "*": not grouped by it)
    qpu_seconds: float = 0.0  # tasks in a window: their QPU time
    share: float = 0.0  # ... and their share of its cost
    cluster: str = "*"  # the instance that wrote the rows ("*": not grouped by it)
    # Asked with ``accounting``: the spend fed to flux-accounting, and the usage it became.
    fed: float | None = None
    qpu_usage: float | None = None

    @property
    def total(self) -> float:
        return self.spent + self.reserved

    def to_dict(self) -> dict[str, Any]:
        return {
            "period": self.period,
            "user": self.user,
            "bank": self.bank,
            "device": self.device,
            "reservation": self.reservation,
            # Only when grouped by it: the rows of a one-cluster report stay as they were.
            **({"cluster": self.cluster} if self.cluster != "*" else {}),
            "tasks": self.tasks,
            "spent": round(self.spent, 6),
            "reserved": round(self.reserved, 6),
            "total": round(self.total, 6),
            "released": self.released,
            "qpu_seconds": round(self.qpu_seconds, 3),
            "share": round(self.share, 6),
            **({"fed": round(self.fed, 6)} if self.fed is not None else {}),
            **({"qpu_usage": round(self.qpu_usage, 5)} if self.qpu_usage is not None else {}),
        }


class GuestError(FluxQuantumError):
    """A guest asked for somebody else's usage."""


def restrict_to_caller(query: UsageQuery, caller: int, owner: int) -> UsageQuery:
    """The query a caller may run: the owner anything, a guest only their own rows.

    The service calls this with the RPC's ``msg.userid`` before :meth:`Ledger.usage`.
    """
    if caller == owner:
        return query
    if query.userid is not None and query.userid != caller:
        raise GuestError("a guest sees only their own usage (--user is for the instance owner)")
    if query.user is not None and query.user != str(caller):
        raise GuestError("a guest sees only their own usage (--user is for the instance owner)")
    return replace(query, user=None, userid=caller)


def serve_usage(
    ledger: UsageLedger, payload: Mapping[str, Any], caller: int, owner: int
) -> dict[str, Any]:
    """The service's ``usage`` RPC in one call: parse ``payload`` (``UsageQuery.to_dict``
    form), restrict it to the caller's own rows unless the caller is the owner, query.
    Raises ValueError (EINVAL) for a bad payload and GuestError (EPERM) for a guest who
    asks for somebody else. The answer: ``{"currency": ..., "rows": [UsageRow...]}``."""
    query = restrict_to_caller(UsageQuery.from_dict(payload), caller, owner)
    rows = ledger.usage(query)
    return {"currency": ledger.currency, "rows": [row.to_dict() for row in rows]}


def usage_statement(query: UsageQuery, columns: set[str]) -> tuple[str, list[Any]]:
    """The SQL (``?`` placeholders) and arguments of ``query`` on a ledger whose
    ``charges`` table has ``columns`` (a read-only reader of a ledger not yet migrated
    lacks some: they read as NULL)."""

    def column(name: str) -> str:
        return name if name in columns else "NULL"

    where: list[str] = ["1 = 1"]
    args: list[Any] = []
    if query.userid is not None:
        where.append("userid = ?")
        args.append(query.userid)
    if query.user is not None:
        where.append("(username = ? OR CAST(userid AS TEXT) = ?)")
        args += [query.user, query.user]
    if query.bank is not None:
        where.append("bank = ?")
        args.append(query.bank)
    if query.cluster is not None:
        where.append(f"{column('cluster')} = ?")
        args.append(query.cluster)
    if query.since is not None:
        where.append("reserved_at >= ?")
        args.append(query.since)
    if query.until is not None:
        where.append("reserved_at < ?")
        args.append(query.until)
    fed = ""
    if query.accounting:
        fed = (
            f", COALESCE(SUM(CASE WHEN {FED_RATIO} IS NOT NULL THEN {FED_AMOUNT} ELSE 0 END), 0)"
            f", COALESCE(SUM({FED_AMOUNT} * {FED_RATIO}), 0)"
            if "feed" in columns
            else ", 0, 0"
        )
    period = {"day": "day", "month": "month"}.get(query.period, "'all'")
    keyed = {
        "period": period,
        "user": f"CASE WHEN userid = {SITE_USERID} THEN '{SITE_USER}'"
        " ELSE COALESCE(username, CAST(userid AS TEXT)) END",
        "bank": "COALESCE(bank, '-')",
        "device": "device",
        "reservation": f"COALESCE({column('reservation')}, '-')",
        "cluster": f"COALESCE({column('cluster')}, '{DEFAULT_CLUSTER}')",
    }
    keys = [keyed[name] if name in query.group_by else "CAST('*' AS TEXT)" for name in GROUPS]
    positions = ", ".join(str(i + 1) for i in range(len(GROUPS)))
    sql = (
        f"SELECT {', '.join(keys)},"
        f" COALESCE(SUM(CASE WHEN state != 'released' AND {TASK_ROW} THEN 1 ELSE 0 END), 0),"
        f" COALESCE(SUM(CASE state WHEN 'settled' THEN cost ELSE 0 END), 0),"
        f" COALESCE(SUM(CASE state WHEN 'reserved' THEN estimate ELSE 0 END), 0),"
        f" COALESCE(SUM(CASE WHEN state = 'released' THEN 1 ELSE 0 END), 0),"
        f" COALESCE(SUM({column('qpu_seconds')}), 0),"
        f" COALESCE(SUM({column('share')}), 0){fed}"
        f" FROM charges WHERE {' AND '.join(where)}"
        f" GROUP BY {positions} ORDER BY {positions}"
    )
    return sql, args


def usage_rows(query: UsageQuery, rows: Sequence[Sequence[Any]]) -> list[UsageRow]:
    """The rows of :func:`usage_statement`'s answer."""
    n = len(GROUPS)
    return [
        UsageRow(
            period=str(r[0]),
            user=str(r[1]),
            bank=str(r[2]),
            device=str(r[3]),
            reservation=str(r[4]),
            cluster=str(r[5]),
            tasks=int(r[n]),
            spent=float(r[n + 1]),
            reserved=float(r[n + 2]),
            released=int(r[n + 3]),
            qpu_seconds=float(r[n + 4]),
            share=float(r[n + 5]),
            fed=float(r[n + 6]) if query.accounting else None,
            qpu_usage=float(r[n + 7]) if query.accounting else None,
        )
        for r in rows
    ]
