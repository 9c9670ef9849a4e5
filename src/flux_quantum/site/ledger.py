"""The ledger: every task's reserved and settled cost, in SQLite in the instance owner's
state directory (the default), or in a PostgreSQL database that several instances
("clusters") share, so that one budget per user and bank holds across all of them.

This module owns the ledger's interface (:class:`Ledger`, one for both backends) and its
queries, written once in SQL both backends run: the atomic reserve-then-record of a
charge against the quota (:meth:`Ledger.reserve`), the settlement of a task's actual cost
(:meth:`Ledger.settle`) or its release when no task was created (:meth:`Ledger.release`),
the report behind ``flux quantum usage`` (:meth:`Ledger.usage` runs the statement of
:mod:`flux_quantum.site.usage_report`, which also says who may ask for what), and what
settled spend was fed to flux-accounting as usage (:meth:`Ledger.unfed`,
:meth:`Ledger.open_feed`, :meth:`Ledger.close_feed`: ``flux quantum accounting``). Each
backend's connection, schema, migrations and locks are
:mod:`flux_quantum.site.ledger_store`'s. Decisions come from
:mod:`flux_quantum.site.quota`; the ledger only measures and records.

Fed once: a feed is recorded ``pending`` with the charges it takes (``charges.feed``)
before its usage record is written to flux-accounting's database, and ``fed`` after;
a charge already in a feed is never taken by another, and a pending feed is closed or
dropped by the next run (its record is in flux-accounting's database, or it is not).

Exactly once: a charge is keyed by its task's idempotency token (unique across
instances: it holds the job's submit microseconds). Reserving a token that is already
recorded returns the recorded reservation (``replayed``) without counting it again;
settling or releasing a token twice changes nothing the second time. A service that
restarts replays its jobs' eventlogs and calls the same verbs with the same tokens, so a
restart never charges a task twice nor forgets one.

Clusters: every row names the instance that wrote it (``cluster``: ``[quantum.ledger]
cluster``, by default ``local`` on SQLite and the host's short name on PostgreSQL).
Limits count every cluster's rows; settlement, release, ``attach``, the open
reservations a restarted service recovers and sweeps, and a job's cost (job ids repeat
between instances) are the service's own cluster's only.

No overspend: :meth:`Ledger.reserve` measures usage and inserts the charge inside one
write transaction that no other reservation against the same limits can interleave
with. On SQLite it is ``BEGIN IMMEDIATE``, which serializes every writer of the file
(threads and processes, each with its own ``Ledger``). On PostgreSQL the transaction
first takes ``pg_advisory_xact_lock`` on a hash of every subject whose spend the
applicable limits measure (``user:UID``, ``bank:NAME``), in sorted order, and only then
reads the sums (READ COMMITTED: each statement sees every commit made before it); the
locks are held until COMMIT. Two services racing for a user's last dollar thus check
and insert one after the other, and the second sees the first's row; reservations for
other users and banks do not wait.

Unavailable: a PostgreSQL server that cannot be reached (down, restarting, a lock not
granted within 5 s) makes every verb raise :class:`LedgerUnavailable` (retryable); the
connection is opened again at the next call. A verb that raised it recorded nothing,
or (a reply lost after COMMIT) recorded everything: calling it again with the same token
is safe. The service holds the job rather than create a task it could not reserve.

Blocking: the handler service calls these verbs from its reactor thread. A SQLite write
is one small transaction in WAL mode with ``synchronous=NORMAL`` (no fsync per commit;
a power loss may lose the last commits, which the restart replay above writes again);
it takes about a millisecond on a local disk. Readers (``flux quantum usage``) never
block the writer in WAL mode. ``busy_timeout`` bounds a wait for another writer to
``BUSY_TIMEOUT`` seconds. A PostgreSQL write is one round trip per statement; a server
that does not answer a connection blocks for at most ``connect_timeout`` seconds.

Reserved windows (Braket Direct, :mod:`flux_quantum.site.reservations`): a window is one
settled row of the site (``userid`` -1, shown as "(site)"; ``bank`` the bank that
booked it, if one did) at the window's start, costing the window, booked once
(:meth:`Ledger.book_window`, keyed by ``window:<ARN>``, by whichever cluster books it
first); the tasks run in it cost nothing and record the window's name, their QPU seconds
and their share of its cost (:meth:`Ledger.window_use`). The site's rows never count
against a user's limits and are not tasks; a bank's spend limits count the window it
booked.

Schema: versioned (``ledger_store.SCHEMA_VERSION``; the ``schema_version`` table), made
and migrated by the service when it opens the ledger; a SQLite ledger of an older
flux-quantum is migrated in place (its rows get the local cluster's name). A read-only
reader of a file not yet migrated sees no windows and no clusters.

Guests never write it: the SQLite file is created 0600 (its WAL files follow) in a 0700
directory owned by the instance owner; the PostgreSQL password is in a file only the
service's user may read. Guests read their own usage through the service's RPC, never
the database.
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

from flux_quantum.site.charge import TaskCharge
from flux_quantum.site.ledger_store import (
    CONNECT_TIMEOUT,
    DEFAULT_CLUSTER,
    FILENAME,
    SCHEMA_VERSION,
    SCHEMES,
    SUBDIR,
    LedgerConfig,
    LedgerConfigError,
    LedgerError,
    LedgerUnavailable,
    PostgresStore,
    SqliteStore,
    Store,
    default_cluster,
)
from flux_quantum.site.quota import (
    PERIODS,
    Charge,
    QuotaConfig,
    QuotaDecision,
    Usage,
    applicable,
    decide,
    period_window,
)
from flux_quantum.site.usage_report import (
    DEFAULT_GROUPS,
    FED_AMOUNT,
    GROUPS,
    PERIOD_GROUPS,
    SITE_USER,
    SITE_USERID,
    TASK_ROW,
    GuestError,
    UsageQuery,
    UsageRow,
    restrict_to_caller,
    serve_usage,
    usage_rows,
    usage_statement,
)

__all__ = [
    "DEFAULT_CLUSTER",
    "DEFAULT_GROUPS",
    "FILENAME",
    "GROUPS",
    "PERIOD_GROUPS",
    "SCHEMA_VERSION",
    "SITE_USER",
    "SITE_USERID",
    "SUBDIR",
    "ChargeRecord",
    "FeedRecord",
    "GuestError",
    "LedgerConfig",
    "LedgerConfigError",
    "LedgerError",
    "LedgerUnavailable",
    "Ledger",
    "Reservation",
    "UsageQuery",
    "UsageRow",
    "restrict_to_caller",
    "serve_usage",
]

CONFIG_KEY = "quantum.ledger.path"
URL_KEY = "quantum.ledger.url"
WINDOW_TOKEN = "window:"  # + the reservation's ARN: one row per window

# What a charge counts: its actual cost once settled, its estimate while reserved.
_AMOUNT = "CASE state WHEN 'reserved' THEN estimate ELSE cost END"
_COUNTED = "state != 'released'"
_TASK = TASK_ROW
_IS_TASK = f"CASE WHEN {_TASK} THEN 1 ELSE 0 END"
_CHUNK = 500  # tokens per statement (SQLite's limit on parameters is far above)


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
class ChargeRecord(TaskCharge):
    """One row of the ledger: a task's charge (``TaskCharge``), what it really cost
    (once settled), its state and when it was reserved and settled."""

    cost: float | None
    state: str
    reserved_at: float
    settled_at: float | None
    task_id: str | None
    billed_seconds: float | None
    note: str | None
    qpu_seconds: float | None = None
    share: float | None = None
    cluster: str | None = None  # the instance that wrote it (None: a ledger not migrated)

    @property
    def site(self) -> bool:
        """The site's own row (a reserved window), not a user's task."""
        return self.userid == SITE_USERID

    @property
    def amount(self) -> float:
        """What it counts against limits now."""
        return self.estimate if self.state == "reserved" else float(self.cost or 0.0)


@dataclass(frozen=True)
class FeedRecord:
    """One row of ``usage_feeds``: settled spend of one flux-accounting association
    (``userid`` in ``bank``) fed as ``usage`` by a record ending at ``t_inactive``;
    ``pending`` until the record is in flux-accounting's database."""

    id: int
    cluster: str
    userid: int
    user: str | None
    bank: str
    spend: float
    tasks: int
    weight: float
    usage: float
    t_inactive: float
    state: str
    opened_at: float
    fed_at: float | None


# --- the ledger -------------------------------------------------------------------------


class Ledger:
    """The ledger, on one of its stores: a SQLite file (``target`` a path, the default)
    or a PostgreSQL database several instances share (``target`` a ``postgresql://``
    URL, with the password in the ``credentials`` file). Thread-safe (one lock per
    instance); open one per process. ``readonly`` opens it without write access
    (``flux quantum usage``). ``cluster``: the name this instance's rows carry; it
    settles, recovers and sweeps only those. Every query is written once, here, in SQL
    both backends run; :mod:`flux_quantum.site.ledger_store` owns the rest of each backend's."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        currency: str = "USD",
        readonly: bool = False,
        *,
        cluster: str | None = None,
        credentials: str | None = None,
        connect_timeout: int = CONNECT_TIMEOUT,
    ) -> None:
        self.readonly = readonly
        self._lock = threading.Lock()
        text = os.fspath(target)
        self._store: Store
        if text.split(":", 1)[0] in SCHEMES and "://" in text:
            self.cluster = cluster or default_cluster()
            self._store = PostgresStore(
                text,
                currency,
                self.cluster,
                credentials=credentials,
                readonly=readonly,
                connect_timeout=connect_timeout,
            )
            self.path: Path | str = text
        else:
            self.cluster = cluster or DEFAULT_CLUSTER
            self._store = SqliteStore(Path(text), currency, self.cluster, readonly)
            self.path = Path(text)
        self._currency = currency
        self._known_currency: str | None = None

    @classmethod
    def from_config(
        cls,
        config: LedgerConfig,
        *,
        currency: str = "USD",
        statedir: str | None = None,
        environ: Mapping[str, str] | None = None,
        readonly: bool = False,
    ) -> Ledger:
        """The ledger ``[quantum.ledger]`` names: its ``url`` (PostgreSQL) or ``path``
        (SQLite; default in the state directory, :func:`ledger_path`)."""
        target = config.url or ledger_path(config.path, statedir, environ)
        return cls(
            target,
            currency,
            readonly,
            cluster=config.cluster_name,
            credentials=config.credentials,
            connect_timeout=config.connect_timeout,
        )

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._store.kind

    @property
    def currency(self) -> str:
        """The ledger's currency (the one it was created with)."""
        if self._known_currency is None:
            try:
                with self._lock:
                    self._known_currency = self._store.meta("currency") or self._currency
            except LedgerUnavailable:
                return self._currency
        return self._known_currency

    @property
    def _db(self) -> sqlite3.Connection:
        """The SQLite connection (tests that play an older flux-quantum's writer)."""
        assert isinstance(self._store, SqliteStore)
        return self._store.db

    @property
    def _columns(self) -> set[str]:
        return self._store.columns

    def close(self) -> None:
        with self._lock:
            self._store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    def _column(self, name: str) -> str:
        """``name`` in SQL, or NULL on a read-only ledger not yet migrated."""
        return name if name in self._columns else "NULL"

    @contextmanager
    def _write(self, locks: Sequence[str] = ()) -> Iterator[None]:
        """One write transaction, with the subjects' locks (see the store)."""
        if self.readonly:
            raise LedgerError(f"{self.path}: opened read-only")
        with self._lock, self._store.write(locks):
            yield

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._store.rows(sql, args)

    def _one(self, sql: str, args: Sequence[Any] = ()) -> tuple[Any, ...]:
        return self._store.rows(sql, args)[0]

    def _record(self, token: str) -> ChargeRecord | None:
        found = self._store.dicts("SELECT * FROM charges WHERE token = ?", (token,))
        return None if not found else _record_of(found[0])

    def _mine(self, token: str) -> ChargeRecord | None:
        """The charge of ``token`` if this cluster wrote it (None otherwise)."""
        record = self._record(token)
        return record if record is None or record.cluster in (None, self.cluster) else None

    def _used(self, charge: Charge, limits: Sequence[Any]) -> tuple[list[Usage], float]:
        used = []
        for limit, window in limits:
            where = [_COUNTED, "reserved_at >= ?", "reserved_at < ?"]
            args: list[Any] = [window.start, window.end]
            if limit.scope == "user":
                # The site's rows (reserved windows) are nobody's: never a user's usage.
                where.append(f"userid = ? AND userid != {SITE_USERID}")
                args.append(charge.userid)
            else:
                # The limit's bank, with its sub-banks where flux-accounting says so.
                banks = limit.banks(charge)
                where.append(f"bank IN ({', '.join('?' for _ in banks)})")
                args.extend(banks)
            for column, values in (
                ("device", limit.only.devices),
                ("vendor", limit.only.vendors),
                ("class", limit.only.classes),
            ):
                if values is not None:
                    where.append(f"{column} IN ({', '.join('?' for _ in values)})")
                    args.extend(sorted(values))
            # A window the bank booked counts its cost, but it is not a task.
            row = self._one(
                f"SELECT COALESCE(SUM({_AMOUNT}), 0), COALESCE(SUM({_IS_TASK}), 0) FROM charges"
                f" WHERE {' AND '.join(where)}",
                args,
            )
            used.append(Usage(float(row[0]), int(row[1])))
        # Job ids repeat between instances: a job is this cluster's.
        job = self._one(
            f"SELECT COALESCE(SUM({_AMOUNT}), 0) FROM charges WHERE jobid = ? AND {_COUNTED}"
            f" AND {self._own()}",
            (charge.jobid, *self._own_args()),
        )
        return used, float(job[0])

    def _own(self) -> str:
        return "cluster = ?" if "cluster" in self._columns else "1 = 1"

    def _own_args(self) -> tuple[str, ...]:
        return (self.cluster,) if "cluster" in self._columns else ()

    @staticmethod
    def _subjects(charge: Charge, limits: Sequence[Any]) -> list[str]:
        """The locks a reservation takes: one per subject whose spend it measures."""
        keys = set()
        for limit, _window in limits:
            keys.add(f"{limit.scope}:{limit.subject(charge)}")
        return sorted(keys)

    # -- the verbs

    def check(self, charge: Charge, quota: QuotaConfig, *, tasks: int = 1) -> QuotaDecision:
        """Would ``charge`` fit now? Records nothing (for ranking candidate devices, and
        for a batch's bound: ``tasks`` tasks that may cost ``charge.estimate`` in all)."""
        limits = applicable(quota, charge)
        with self._lock:
            used, job_spent = self._used(charge, limits)
        return decide(charge, limits, used, job_spent, self.currency, tasks)

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
        """Record ``charge`` if it fits every applicable limit, atomically (on
        PostgreSQL with the limited subjects' locks taken before the sums are read).

        Call it before the vendor task is created; a refusal leaves nothing recorded.
        A token already recorded is returned as it is (``replayed``). ``enforce=False``
        records it whatever the limits say: for a task that already exists (found again
        after a restart whose reservation was lost), which must be counted.
        LedgerUnavailable: the database cannot be reached; nothing was recorded, or the
        charge was recorded whole (then the same call again is ``replayed``).
        """
        limits = applicable(quota, charge)
        currency = self.currency
        with self._write(self._subjects(charge, limits)):
            existing = self._record(charge.token)
            if existing is not None:
                decision = QuotaDecision(True, f"already recorded ({existing.state})")
                return Reservation(charge.token, True, decision, True, existing.state)
            used, job_spent = self._used(charge, limits)
            decision = decide(charge, limits, used, job_spent, currency)
            if not decision.allowed and enforce:
                return Reservation(charge.token, False, decision)
            note = None if decision.allowed else f"recorded past the quota: {decision.reason}"
            zone = quota.zone
            self._store.execute(
                "INSERT INTO charges (token, cluster, jobid, userid, username, bank, device,"
                " vendor, class, shots, estimate, state, reserved_at, day, month, note,"
                " reservation)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?)",
                (
                    charge.token,
                    self.cluster,
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

        Raises LedgerError for a token never reserved by this cluster (a bug in the
        caller) or one released (no task was created, so nothing can have run)."""
        with self._write():
            record = self._mine(token)
            if record is None:
                raise LedgerError(f"{self.path}: no reservation for task token {token!r}")
            if record.state == "released":
                raise LedgerError(f"{self.path}: task token {token!r} was released, not run")
            if record.state == "reserved":
                self._store.execute(
                    "UPDATE charges SET state = 'settled', cost = ?, settled_at = ?,"
                    " task_id = COALESCE(?, task_id), billed_seconds = ?,"
                    " reservation = COALESCE(?, reservation), qpu_seconds = ?, share = ?"
                    f" WHERE token = ? AND state = 'reserved' AND {self._own()}",
                    (cost, now, task_id, billed_seconds, reservation, qpu_seconds, share,
                     token, *self._own_args()),
                )  # fmt: skip
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
        charge at its ``start``, once: a window already booked (same ARN, by any
        cluster) is returned as it is. ``zone``: where the site's days and months begin
        (the quota's)."""
        token = WINDOW_TOKEN + arn
        locks = [f"token:{token}"] + ([f"bank:{bank}"] if bank is not None else [])
        with self._write(locks):
            existing = self._record(token)
            if existing is not None:
                return existing
            labels = [period_window(start, period, zone or UTC).label for period in PERIODS]
            self._store.execute(
                "INSERT INTO charges (token, cluster, jobid, userid, username, bank, device,"
                " vendor, class, shots, estimate, cost, state, reserved_at, settled_at, day,"
                " month, task_id, note, reservation)"
                " VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, 0, ?, ?, 'settled', ?, ?, ?, ?, ?, ?, ?)",
                (token, self.cluster, SITE_USERID, SITE_USER, bank, device, vendor,
                 device_class, cost, cost, start, start, *labels, arn, note, name),
            )  # fmt: skip
            booked = self._record(token)
        assert booked is not None
        return booked

    def window_use(self, name: str) -> tuple[int, float, float]:
        """A reserved window's tasks (created, not released), their QPU seconds and
        their shares of its cost, as settled so far (every cluster's)."""
        with self._lock:
            if "reservation" not in self._columns:
                return 0, 0.0, 0.0
            row = self._one(
                f"SELECT COUNT(*), COALESCE(SUM(qpu_seconds), 0), COALESCE(SUM(share), 0)"
                f" FROM charges WHERE reservation = ? AND {_TASK} AND {_COUNTED}",
                (name,),
            )
        return int(row[0]), float(row[1]), float(row[2])

    def attach(self, token: str, task_id: str) -> None:
        """Note the vendor's task id of a reserved charge (for reports and recovery)."""
        with self._write():
            self._store.execute(
                "UPDATE charges SET task_id = ? WHERE token = ? AND task_id IS NULL"
                f" AND {self._own()}",
                (task_id, token, *self._own_args()),
            )

    def release(self, token: str, *, now: float, reason: str) -> ChargeRecord | None:
        """The task was never created (the vendor refused it, the job went away before
        the create): drop the reservation, keep the row (cost 0, not a task). Settled
        charges stay settled; an unknown token (or another cluster's) is None."""
        with self._write():
            record = self._mine(token)
            if record is None or record.state != "reserved":
                return record
            self._store.execute(
                "UPDATE charges SET state = 'released', cost = 0, settled_at = ?, note = ?"
                f" WHERE token = ? AND state = 'reserved' AND {self._own()}",
                (now, reason, token, *self._own_args()),
            )
            return self._record(token)

    def record(self, token: str) -> ChargeRecord | None:
        with self._lock:
            return self._record(token)

    def open_reservations(self) -> list[ChargeRecord]:
        """This cluster's charges reserved and not yet settled or released, oldest
        first (recovery after a restart, the sweep)."""
        with self._lock:
            rows = self._store.dicts(
                f"SELECT * FROM charges WHERE state = 'reserved' AND {self._own()}"
                " ORDER BY reserved_at",
                self._own_args(),
            )
        return [_record_of(row) for row in rows]

    def job_cost(self, jobid: int) -> float:
        """What a job's tasks count now (settled costs and open estimates): ``qpu_cost``.
        A job of this cluster (job ids repeat between instances)."""
        with self._lock:
            row = self._one(
                f"SELECT COALESCE(SUM({_AMOUNT}), 0) FROM charges WHERE jobid = ?"
                f" AND {self._own()}",
                (jobid, *self._own_args()),
            )
        return float(row[0])

    def billed_history(self, device: str, limit: int = 20) -> list[float]:
        """The device's most recent billed run times (for ``quota.expected_seconds``),
        on any cluster."""
        with self._lock:
            rows = self._rows(
                "SELECT billed_seconds FROM charges WHERE device = ? AND state = 'settled'"
                " AND billed_seconds IS NOT NULL ORDER BY settled_at DESC LIMIT ?",
                (device, limit),
            )
        return [float(row[0]) for row in rows]

    def usage(self, query: UsageQuery) -> list[UsageRow]:
        """Tasks and spend grouped by ``query.group_by`` (period, user, bank, device,
        reservation, cluster), of every cluster unless ``query.cluster`` names one."""
        sql, args = usage_statement(query, self._columns)
        with self._lock:
            rows = self._rows(sql, args)
        return usage_rows(query, rows)

    # -- spend fed to flux-accounting as usage (flux quantum accounting)

    def unfed(self) -> list[ChargeRecord]:
        """This cluster's settled tasks whose spend no feed took yet: a user's (not the
        site's), in a bank, costing something (or a share of a reserved window)."""
        if "feed" not in self._columns:
            return []
        with self._lock:
            rows = self._store.dicts(
                f"SELECT * FROM charges WHERE state = 'settled' AND feed IS NULL AND {_TASK}"
                f" AND bank IS NOT NULL AND {FED_AMOUNT} > 0 AND {self._own()} ORDER BY settled_at",
                self._own_args(),
            )
        return [_record_of(row) for row in rows]

    def open_feed(
        self,
        tokens: Sequence[str],
        *,
        userid: int,
        user: str | None,
        bank: str,
        spend: float,
        weight: float,
        usage: float,
        t_inactive: float,
        now: float,
    ) -> int | None:
        """Record a pending feed of the charges of ``tokens`` (one association's), and
        its number; None when one of them was fed meanwhile (nothing recorded)."""
        with self._write([f"feed:{self.cluster}"]):
            for start in range(0, len(tokens), _CHUNK):
                chunk = tokens[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                free = self._one(
                    f"SELECT COUNT(*) FROM charges WHERE feed IS NULL AND token IN ({marks})",
                    chunk,
                )
                if int(free[0]) != len(chunk):
                    return None
            feed = int(
                self._one(
                    "INSERT INTO usage_feeds (cluster, userid, username, bank, spend, tasks,"
                    " weight, usage, t_inactive, state, opened_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) RETURNING id",
                    (self.cluster, userid, user, bank, spend, len(tokens), weight, usage,
                     t_inactive, now),
                )[0]
            )  # fmt: skip
            for start in range(0, len(tokens), _CHUNK):
                chunk = tokens[start : start + _CHUNK]
                marks = ", ".join("?" for _ in chunk)
                self._store.execute(
                    f"UPDATE charges SET feed = ? WHERE token IN ({marks})", (feed, *chunk)
                )
            return feed

    def close_feed(self, feed: int, *, now: float) -> None:
        """A pending feed's record is in flux-accounting's database: it is fed."""
        with self._write([f"feed:{self.cluster}"]):
            self._store.execute(
                "UPDATE usage_feeds SET state = 'fed', fed_at = ? WHERE id = ? AND state = 'pending'",
                (now, feed),
            )

    def drop_feed(self, feed: int) -> None:
        """A pending feed whose record never reached flux-accounting: its charges are
        free for the next feed."""
        with self._write([f"feed:{self.cluster}"]):
            self._store.execute("UPDATE charges SET feed = NULL WHERE feed = ?", (feed,))
            self._store.execute(
                "DELETE FROM usage_feeds WHERE id = ? AND state = 'pending'", (feed,)
            )

    def feeds(self, *, state: str | None = None) -> list[FeedRecord]:
        """This cluster's feeds, oldest first (``state``: only ``pending`` or ``fed``)."""
        if "feed" not in self._columns:
            return []
        where, args = ["cluster = ?"], [self.cluster]
        if state is not None:
            where.append("state = ?")
            args.append(state)
        with self._lock:
            rows = self._store.dicts(
                f"SELECT * FROM usage_feeds WHERE {' AND '.join(where)} ORDER BY id", args
            )
        return [_feed_of(row) for row in rows]


def _record_of(r: Mapping[str, Any]) -> ChargeRecord:
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
        cluster=r.get("cluster"),
    )


def _feed_of(r: Mapping[str, Any]) -> FeedRecord:
    return FeedRecord(
        id=int(r["id"]),
        cluster=str(r["cluster"]),
        userid=int(r["userid"]),
        user=r["username"],
        bank=str(r["bank"]),
        spend=float(r["spend"]),
        tasks=int(r["tasks"]),
        weight=float(r["weight"]),
        usage=float(r["usage"]),
        t_inactive=float(r["t_inactive"]),
        state=str(r["state"]),
        opened_at=float(r["opened_at"]),
        fed_at=_number(r["fed_at"]),
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)
