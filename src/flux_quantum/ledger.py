"""The ledger: every task's reserved and settled cost, in SQLite, in the instance owner's
state directory.

This module owns the ledger database (its location, schema and file permissions), the
atomic reserve-then-record of a charge against the quota (:meth:`Ledger.reserve`), the
settlement of a task's actual cost (:meth:`Ledger.settle`) or its release when no task
was created (:meth:`Ledger.release`), and the usage queries behind ``flux quantum
usage`` (:meth:`Ledger.usage`, with :func:`restrict_to_caller` for guests). Decisions
come from :mod:`flux_quantum.quota`; the ledger only measures and records.

Exactly once: a charge is keyed by its task's idempotency token. Reserving a token
that is already recorded returns the recorded reservation (``replayed``) without
counting it again; settling or releasing a token twice changes nothing the second time.
A service that restarts replays its jobs' eventlogs and calls the same verbs with the
same tokens, so a restart never charges a task twice nor forgets one.

No overspend: :meth:`Ledger.reserve` measures usage and inserts the charge inside one
``BEGIN IMMEDIATE`` transaction, which SQLite serializes across threads and processes
(each with its own ``Ledger``), so two concurrent reservations cannot both fit into the
same headroom.

Blocking: the handler service is the only writer and calls these verbs from its reactor
thread. A write is one small transaction in WAL mode with ``synchronous=NORMAL``
(no fsync per commit; a power loss may lose the last commits, which the restart replay
above writes again); it takes about a millisecond on a local disk. Readers
(``flux quantum usage``) never block the writer in WAL mode. ``busy_timeout`` bounds a
wait for another writer (a second service by mistake) to ``BUSY_TIMEOUT`` seconds.

Reserved windows (Braket Direct, :mod:`flux_quantum.reservations`): a window is one
settled row of the site (``userid`` -1, shown as "(site)"; ``bank`` the bank that
booked it, if one did) at the window's start, costing the window, booked once
(:meth:`Ledger.book_window`, keyed by ``window:<ARN>``); the tasks run in it cost
nothing and record the window's name, their QPU seconds and their share of its cost
(:meth:`Ledger.window_use`). The site's rows never count against a user's limits and
are not tasks; a bank's spend limits count the window it booked.

Schema: version 1 with columns added since (``reservation``, ``qpu_seconds``,
``share``), nullable; a ledger of an older flux-quantum gets them with ALTER TABLE
the first time a writer opens it (one transaction), and an older flux-quantum keeps
working on a migrated one (it names the columns it writes and ignores the others).
A read-only reader of a file not yet migrated sees no windows.

Guests never write it: the file is created 0600 (its WAL files follow) in a 0700
directory owned by the instance owner; guests read their own usage through the
service's RPC, never the file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.quota import (
    PERIODS,
    Charge,
    QuotaConfig,
    QuotaDecision,
    Usage,
    applicable,
    decide,
    period_window,
)

SCHEMA_VERSION = 1
FILENAME = "ledger.db"
SUBDIR = "flux-quantum"
CONFIG_KEY = "quantum.ledger.path"
SITE_USERID = -1  # the site's own rows: reserved windows it (or a bank) paid for
SITE_USER = "(site)"
WINDOW_TOKEN = "window:"  # + the reservation's ARN: one row per window
BUSY_TIMEOUT = 5.0
GROUPS = ("period", "user", "bank", "device", "reservation")
DEFAULT_GROUPS = ("period", "user", "bank", "device")
PERIOD_GROUPS = ("day", "month", "all")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS charges (
    token          TEXT PRIMARY KEY,   -- the task's idempotency token
    jobid          INTEGER NOT NULL,   -- the job (unit) the task belongs to
    userid         INTEGER NOT NULL,
    username       TEXT,
    bank           TEXT,               -- NULL without flux-accounting
    device         TEXT NOT NULL,
    vendor         TEXT NOT NULL,
    class          TEXT NOT NULL,
    shots          INTEGER NOT NULL,
    estimate       REAL NOT NULL,      -- reserved before the task was created
    cost           REAL,               -- actual, once settled (0 when released)
    state          TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'released')),
    reserved_at    REAL NOT NULL,      -- epoch seconds; the period it counts in
    settled_at     REAL,
    day            TEXT NOT NULL,      -- period labels at reserved_at, site timezone
    month          TEXT NOT NULL,
    task_id        TEXT,               -- the vendor's id, once known
    billed_seconds REAL,               -- time-billed devices: the billed run time
    note           TEXT,               -- why it was released, or that it was recorded
                                       -- past the quota (a task found after a restart)
    reservation    TEXT,               -- the reserved window's name (its row and tasks)
    qpu_seconds    REAL,               -- a window's task: its QPU time in the window
    share          REAL                -- ... and its share of the window's cost
);
CREATE INDEX IF NOT EXISTS charges_user ON charges (userid, reserved_at);
CREATE INDEX IF NOT EXISTS charges_bank ON charges (bank, reserved_at);
CREATE INDEX IF NOT EXISTS charges_job ON charges (jobid);
CREATE INDEX IF NOT EXISTS charges_device ON charges (device, state, settled_at);
"""

# Columns added to version 1 since, with ALTER TABLE on a ledger that lacks them.
ADDED_COLUMNS = (("reservation", "TEXT"), ("qpu_seconds", "REAL"), ("share", "REAL"))
ADDED_INDEXES = "CREATE INDEX IF NOT EXISTS charges_reservation ON charges (reservation);"

# What a charge counts: its actual cost once settled, its estimate while reserved.
_AMOUNT = "CASE state WHEN 'reserved' THEN estimate ELSE cost END"
_COUNTED = "state != 'released'"
_TASK = f"userid != {SITE_USERID}"


class LedgerError(FluxQuantumError):
    """The ledger cannot be opened or used; the message names the file."""


# --- location ---------------------------------------------------------------------------


def ledger_path(
    configured: str | None = None,
    statedir: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | None = None,
) -> Path:
    """Where the ledger lives: ``[quantum.ledger] path`` if set, else
    ``STATEDIR/flux-quantum/ledger.db`` (the broker attribute ``statedir``, as a system
    instance sets it: /var/lib/flux, where flux-accounting keeps its database), else
    ``$XDG_STATE_HOME/flux-quantum/ledger.db`` (``~/.local/state``) for a user's own
    instance, whose statedir is unset or removed at exit."""
    if configured:
        return Path(configured)
    if statedir:
        return Path(statedir) / SUBDIR / FILENAME
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or str(Path(home or Path.home()) / ".local" / "state")
    return Path(state) / SUBDIR / FILENAME


# --- records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reservation:
    """The outcome of :meth:`Ledger.reserve`: recorded (``allowed``) or refused, and
    whether the token had been recorded before (``replayed``: nothing was counted)."""

    token: str
    allowed: bool
    decision: QuotaDecision
    replayed: bool = False
    state: str | None = None  # the recorded state, None when refused


@dataclass(frozen=True)
class ChargeRecord:
    """One row of the ledger."""

    token: str
    jobid: int
    userid: int
    user: str | None
    bank: str | None
    device: str
    vendor: str
    device_class: str
    shots: int
    estimate: float
    cost: float | None
    state: str
    reserved_at: float
    settled_at: float | None
    task_id: str | None
    billed_seconds: float | None
    note: str | None
    reservation: str | None = None
    qpu_seconds: float | None = None
    share: float | None = None

    @property
    def site(self) -> bool:
        """The site's own row (a reserved window), not a user's task."""
        return self.userid == SITE_USERID

    @property
    def amount(self) -> float:
        """What it counts against limits now."""
        return self.estimate if self.state == "reserved" else float(self.cost or 0.0)


@dataclass(frozen=True)
class UsageQuery:
    """What ``flux quantum usage`` asks: filters, and how rows are grouped.

    ``user`` matches a user name or a uid; ``userid`` only a uid (set for guests by
    :func:`restrict_to_caller`). ``period`` groups by "day", "month" or "all";
    ``reservation`` in ``group_by`` gives a row per reserved window (its cost, its
    tasks, their QPU time and shares; "-": outside any window).
    """

    user: str | None = None
    userid: int | None = None
    bank: str | None = None
    since: float | None = None
    until: float | None = None
    period: str = "month"
    group_by: tuple[str, ...] = DEFAULT_GROUPS

    def to_dict(self) -> dict[str, Any]:
        """The payload of the service's ``usage`` RPC."""
        return {
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
        for key, kind in (("user", str), ("bank", str), ("userid", int)):
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
        return cls(period=period, group_by=tuple(group_by), **fields)


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
            "tasks": self.tasks,
            "spent": round(self.spent, 6),
            "reserved": round(self.reserved, 6),
            "total": round(self.total, 6),
            "released": self.released,
            "qpu_seconds": round(self.qpu_seconds, 3),
            "share": round(self.share, 6),
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
    return UsageQuery(
        user=None,
        userid=caller,
        bank=query.bank,
        since=query.since,
        until=query.until,
        period=query.period,
        group_by=query.group_by,
    )


def serve_usage(ledger: Ledger, payload: Mapping[str, Any], caller: int, owner: int) -> dict:
    """The service's ``usage`` RPC in one call: parse ``payload`` (``UsageQuery.to_dict``
    form), restrict it to the caller's own rows unless the caller is the owner, query.
    Raises ValueError (EINVAL) for a bad payload and GuestError (EPERM) for a guest who
    asks for somebody else. The answer: ``{"currency": ..., "rows": [UsageRow...]}``."""
    query = restrict_to_caller(UsageQuery.from_dict(payload), caller, owner)
    rows = ledger.usage(query)
    return {"currency": ledger.currency, "rows": [row.to_dict() for row in rows]}


# --- the ledger -------------------------------------------------------------------------


class Ledger:
    """One connection to the ledger file. Thread-safe (one lock per instance); open one
    per process. ``readonly`` opens it without write access (``flux quantum usage``)."""

    def __init__(
        self, path: str | os.PathLike[str], currency: str = "USD", readonly: bool = False
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        try:
            if readonly:
                uri = f"file:{self.path}?mode=ro"
                self._db = sqlite3.connect(
                    uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
            else:
                _create_private(self.path)
                self._db = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(SCHEMA)
                self._check_meta(currency)
            self._columns = {str(row[1]) for row in self._db.execute("PRAGMA table_info(charges)")}
            self._db.row_factory = sqlite3.Row
            self.currency = self._meta("currency") or currency
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: cannot open the ledger: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _check_meta(self, currency: str) -> None:
        with self._write():
            version = self._meta("schema_version")
            if version is None:
                self._db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('currency', ?)",
                    (str(SCHEMA_VERSION), currency),
                )
                self._migrate()  # its indexes
                return
            if int(version) > SCHEMA_VERSION:
                raise LedgerError(
                    f"{self.path}: ledger schema {version} is newer than this flux-quantum"
                    f" ({SCHEMA_VERSION}); upgrade flux-quantum"
                )
            recorded = self._meta("currency")
            if recorded != currency:
                raise LedgerError(
                    f"{self.path}: the ledger counts in {recorded} but the catalog's currency is"
                    f" {currency}; keep the catalog's currency or start a new ledger"
                )
            self._migrate()

    def _migrate(self) -> None:
        """Add the columns a ledger of an older flux-quantum lacks (inside the opening
        write transaction, so two writers opening it at once add them once)."""
        have = {str(row[1]) for row in self._db.execute("PRAGMA table_info(charges)")}
        for column, kind in ADDED_COLUMNS:
            if column not in have:
                self._db.execute(f"ALTER TABLE charges ADD COLUMN {column} {kind}")
        self._db.execute(ADDED_INDEXES)

    def _column(self, name: str) -> str:
        """``name`` in SQL, or NULL on a read-only ledger not yet migrated."""
        return name if name in self._columns else "NULL"

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One serialized write transaction (BEGIN IMMEDIATE takes the write lock first,
        so what is read inside it cannot change before the commit)."""
        if self.readonly:
            raise LedgerError(f"{self.path}: opened read-only")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _record(self, token: str) -> ChargeRecord | None:
        row = self._db.execute("SELECT * FROM charges WHERE token = ?", (token,)).fetchone()
        return None if row is None else _record_of(row)

    def _used(self, charge: Charge, quota: QuotaConfig) -> tuple[list[Any], list[Usage], float]:
        limits = applicable(quota, charge)
        used = []
        for limit, window in limits:
            where = [_COUNTED, "reserved_at >= ?", "reserved_at < ?"]
            args: list[Any] = [window.start, window.end]
            if limit.scope == "user":
                # The site's rows (reserved windows) are nobody's: never a user's usage.
                where.append(f"userid = ? AND userid != {SITE_USERID}")
                args.append(charge.userid)
            else:
                where.append("bank = ?")
                args.append(charge.bank)
            for column, values in (
                ("device", limit.only.devices),
                ("vendor", limit.only.vendors),
                ("class", limit.only.classes),
            ):
                if values is not None:
                    where.append(f"{column} IN ({', '.join('?' for _ in values)})")
                    args.extend(sorted(values))
            # A window the bank booked counts its cost, but it is not a task.
            row = self._db.execute(
                f"SELECT COALESCE(SUM({_AMOUNT}), 0), COALESCE(SUM({_TASK}), 0) FROM charges"
                f" WHERE {' AND '.join(where)}",
                args,
            ).fetchone()
            used.append(Usage(float(row[0]), int(row[1])))
        job = self._db.execute(
            f"SELECT COALESCE(SUM({_AMOUNT}), 0) FROM charges WHERE jobid = ? AND {_COUNTED}",
            (charge.jobid,),
        ).fetchone()
        return limits, used, float(job[0])

    # -- the verbs

    def check(self, charge: Charge, quota: QuotaConfig) -> QuotaDecision:
        """Would ``charge`` fit now? Records nothing (for ranking candidate devices)."""
        with self._lock:
            limits, used, job_spent = self._used(charge, quota)
        return decide(charge, limits, used, job_spent, self.currency)

    def over_quota(self, charges: Iterable[Charge], quota: QuotaConfig) -> dict[str, str]:
        """Devices whose charge would not fit, mapped to the refusal: the ``excluded``
        argument of ``policy.select_device`` (with the access rules' refusals)."""
        refused = {}
        for charge in charges:
            decision = self.check(charge, quota)
            if not decision.allowed:
                refused[charge.device] = decision.reason
        return refused

    def reserve(self, charge: Charge, quota: QuotaConfig, *, enforce: bool = True) -> Reservation:
        """Record ``charge`` if it fits every applicable limit, atomically.

        Call it before the vendor task is created; a refusal leaves nothing recorded.
        A token already recorded is returned as it is (``replayed``). ``enforce=False``
        records it whatever the limits say: for a task that already exists (found again
        after a restart whose reservation was lost), which must be counted.
        """
        with self._write():
            existing = self._record(charge.token)
            if existing is not None:
                decision = QuotaDecision(True, f"already recorded ({existing.state})")
                return Reservation(charge.token, True, decision, True, existing.state)
            limits, used, job_spent = self._used(charge, quota)
            decision = decide(charge, limits, used, job_spent, self.currency)
            if not decision.allowed and enforce:
                return Reservation(charge.token, False, decision)
            note = None if decision.allowed else f"recorded past the quota: {decision.reason}"
            zone = quota.zone
            self._db.execute(
                "INSERT INTO charges (token, jobid, userid, username, bank, device, vendor,"
                " class, shots, estimate, state, reserved_at, day, month, note, reservation)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?)",
                (
                    charge.token,
                    charge.jobid,
                    charge.userid,
                    charge.user,
                    charge.bank,
                    charge.device,
                    charge.vendor,
                    charge.device_class,
                    charge.shots,
                    charge.estimate,
                    charge.t,
                    period_window(charge.t, "day", zone).label,
                    period_window(charge.t, "month", zone).label,
                    note,
                    charge.reservation,
                ),
            )
            return Reservation(charge.token, True, decision, False, "reserved")

    def settle(
        self,
        token: str,
        cost: float,
        *,
        now: float,
        task_id: str | None = None,
        billed_seconds: float | None = None,
        reservation: str | None = None,
        qpu_seconds: float | None = None,
        share: float | None = None,
    ) -> ChargeRecord:
        """Record a finished task's actual ``cost``; a second call changes nothing.
        A task of a reserved window records the window's name, its ``qpu_seconds`` in
        it and its ``share`` of the window's cost (its own cost is 0).

        Raises LedgerError for a token never reserved (a bug in the caller) or one
        released (no task was created, so nothing can have run)."""
        with self._write():
            record = self._record(token)
            if record is None:
                raise LedgerError(f"{self.path}: no reservation for task token {token!r}")
            if record.state == "released":
                raise LedgerError(f"{self.path}: task token {token!r} was released, not run")
            if record.state == "reserved":
                self._db.execute(
                    "UPDATE charges SET state = 'settled', cost = ?, settled_at = ?,"
                    " task_id = COALESCE(?, task_id), billed_seconds = ?,"
                    " reservation = COALESCE(?, reservation), qpu_seconds = ?, share = ?"
                    " WHERE token = ?",
                    (cost, now, task_id, billed_seconds, reservation, qpu_seconds, share, token),
                )
            updated = self._record(token)
        assert updated is not None
        return updated

    def book_window(
        self,
        *,
        name: str,
        arn: str,
        bank: str | None,
        device: str,
        vendor: str,
        device_class: str,
        cost: float,
        start: float,
        note: str,
        zone: Any = None,
    ) -> ChargeRecord:
        """Record a reserved window as the site's (``bank``'s, if it booked it) settled
        charge at its ``start``, once: a window already booked (same ARN) is returned as
        it is. ``zone``: where the site's days and months begin (the quota's)."""
        token = WINDOW_TOKEN + arn
        with self._write():
            existing = self._record(token)
            if existing is not None:
                return existing
            labels = [period_window(start, period, zone or UTC).label for period in PERIODS]
            self._db.execute(
                "INSERT INTO charges (token, jobid, userid, username, bank, device, vendor,"
                " class, shots, estimate, cost, state, reserved_at, settled_at, day, month,"
                " task_id, note, reservation)"
                " VALUES (?, 0, ?, ?, ?, ?, ?, ?, 0, ?, ?, 'settled', ?, ?, ?, ?, ?, ?, ?)",
                (token, SITE_USERID, SITE_USER, bank, device, vendor, device_class, cost,
                 cost, start, start, *labels, arn, note, name),
            )  # fmt: skip
            booked = self._record(token)
        assert booked is not None
        return booked

    def window_use(self, name: str) -> tuple[int, float, float]:
        """A reserved window's tasks (created, not released), their QPU seconds and
        their shares of its cost, as settled so far."""
        with self._lock:
            if "reservation" not in self._columns:
                return 0, 0.0, 0.0
            row = self._db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(qpu_seconds), 0), COALESCE(SUM(share), 0)"
                f" FROM charges WHERE reservation = ? AND {_TASK} AND {_COUNTED}",
                (name,),
            ).fetchone()
        return int(row[0]), float(row[1]), float(row[2])

    def attach(self, token: str, task_id: str) -> None:
        """Note the vendor's task id of a reserved charge (for reports and recovery)."""
        with self._write():
            self._db.execute(
                "UPDATE charges SET task_id = ? WHERE token = ? AND task_id IS NULL",
                (task_id, token),
            )

    def release(self, token: str, *, now: float, reason: str) -> ChargeRecord | None:
        """The task was never created (the vendor refused it, the job went away before
        the create): drop the reservation, keep the row (cost 0, not a task). Settled
        charges stay settled; an unknown token is None."""
        with self._write():
            record = self._record(token)
            if record is None or record.state != "reserved":
                return record
            self._db.execute(
                "UPDATE charges SET state = 'released', cost = 0, settled_at = ?, note = ?"
                " WHERE token = ?",
                (now, reason, token),
            )
            return self._record(token)

    def record(self, token: str) -> ChargeRecord | None:
        with self._lock:
            return self._record(token)

    def open_reservations(self) -> list[ChargeRecord]:
        """Charges reserved and not yet settled or released, oldest first (recovery)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM charges WHERE state = 'reserved' ORDER BY reserved_at"
            ).fetchall()
        return [_record_of(row) for row in rows]

    def job_cost(self, jobid: int) -> float:
        """What a job's tasks count now (settled costs and open estimates): ``qpu_cost``."""
        with self._lock:
            row = self._db.execute(
                f"SELECT COALESCE(SUM({_AMOUNT}), 0) FROM charges WHERE jobid = ?", (jobid,)
            ).fetchone()
        return float(row[0])

    def billed_history(self, device: str, limit: int = 20) -> list[float]:
        """The device's most recent billed run times (for ``quota.expected_seconds``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT billed_seconds FROM charges WHERE device = ? AND state = 'settled'"
                " AND billed_seconds IS NOT NULL ORDER BY settled_at DESC LIMIT ?",
                (device, limit),
            ).fetchall()
        return [float(row[0]) for row in rows]

    def usage(self, query: UsageQuery) -> list[UsageRow]:
        """Tasks and spend grouped by ``query.group_by`` (period, user, bank, device,
        reservation)."""
        where, args = ["1 = 1"], []
        if query.userid is not None:
            where.append("userid = ?")
            args.append(query.userid)
        if query.user is not None:
            where.append("(username = ? OR CAST(userid AS TEXT) = ?)")
            args += [query.user, query.user]
        if query.bank is not None:
            where.append("bank = ?")
            args.append(query.bank)
        if query.since is not None:
            where.append("reserved_at >= ?")
            args.append(query.since)
        if query.until is not None:
            where.append("reserved_at < ?")
            args.append(query.until)
        period = {"day": "day", "month": "month"}.get(query.period, "'all'")
        reservation = self._column("reservation")
        columns = {
            "period": period,
            "user": f"CASE WHEN userid = {SITE_USERID} THEN '{SITE_USER}'"
            " ELSE COALESCE(username, CAST(userid AS TEXT)) END",
            "bank": "COALESCE(bank, '-')",
            "device": "device",
            "reservation": f"COALESCE({reservation}, '-')",
        }
        keys = [columns[name] if name in query.group_by else "'*'" for name in GROUPS]
        sql = (
            f"SELECT {', '.join(keys)},"
            f" COALESCE(SUM(state != 'released' AND {_TASK}), 0),"
            f" COALESCE(SUM(CASE state WHEN 'settled' THEN cost ELSE 0 END), 0),"
            f" COALESCE(SUM(CASE state WHEN 'reserved' THEN estimate ELSE 0 END), 0),"
            f" SUM(state = 'released'),"
            f" COALESCE(SUM({self._column('qpu_seconds')}), 0),"
            f" COALESCE(SUM({self._column('share')}), 0)"
            f" FROM charges WHERE {' AND '.join(where)}"
            f" GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5"
        )
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [
            UsageRow(
                period=str(r[0]),
                user=str(r[1]),
                bank=str(r[2]),
                device=str(r[3]),
                reservation=str(r[4]),
                tasks=int(r[5]),
                spent=float(r[6]),
                reserved=float(r[7]),
                released=int(r[8]),
                qpu_seconds=float(r[9]),
                share=float(r[10]),
            )
            for r in rows
        ]


def _create_private(path: Path) -> None:
    """The ledger's directory (0700) and file (0600), created by the instance owner
    before SQLite opens it: SQLite gives its WAL files the database file's mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


def _record_of(row: sqlite3.Row | Sequence[Any]) -> ChargeRecord:
    r = dict(row) if isinstance(row, sqlite3.Row) else row  # type: ignore[arg-type]
    return ChargeRecord(
        token=r["token"],
        jobid=int(r["jobid"]),
        userid=int(r["userid"]),
        user=r["username"],
        bank=r["bank"],
        device=r["device"],
        vendor=r["vendor"],
        device_class=r["class"],
        shots=int(r["shots"]),
        estimate=float(r["estimate"]),
        cost=None if r["cost"] is None else float(r["cost"]),
        state=r["state"],
        reserved_at=float(r["reserved_at"]),
        settled_at=None if r["settled_at"] is None else float(r["settled_at"]),
        task_id=r["task_id"],
        billed_seconds=None if r["billed_seconds"] is None else float(r["billed_seconds"]),
        note=r["note"],
        reservation=r.get("reservation"),
        qpu_seconds=_number(r.get("qpu_seconds")),
        share=_number(r.get("share")),
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)
