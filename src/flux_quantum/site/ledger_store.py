"""Where the ledger's rows are kept: the ``[quantum.ledger]`` table and the two stores
behind :class:`flux_quantum.site.ledger.Ledger`, SQLite (the default: one file per instance)
and PostgreSQL (one database that several instances, "clusters", share).

This module owns each backend's SQL that is not the ledger's own queries: the schema
(the same tables and columns on both, in each one's types), its versioned migrations,
the connection, the write transaction and its locks, and the translation of the
driver's errors into :class:`LedgerError` (a broken setup, said once) and
:class:`LedgerUnavailable` (the database cannot be reached now: retry later). The
ledger's queries themselves are portable SQL with ``?`` placeholders, written once in
:mod:`flux_quantum.site.ledger`; the PostgreSQL store turns the placeholders into ``%s``.

Schema versions (the ``schema_version`` table: one row per version applied, with when
and what; ``meta.schema_version`` the current one, which an older flux-quantum reads and
refuses to go past):

1. ``meta`` and ``charges`` (with ``reservation``, ``qpu_seconds`` and ``share``, which
   a SQLite ledger of an older flux-quantum gets with ALTER TABLE);
2. ``charges.cluster``: which instance wrote the row. A SQLite ledger migrated to it
   gives its existing rows the local cluster's name (the column's default there, so an
   older writer's INSERT gets it too).
3. ``usage_feeds`` and ``charges.feed``: what settled spend was fed to flux-accounting
   as usage (``flux quantum accounting``), and in which feed each charge went.

Both stores migrate inside one write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL:
an advisory lock on the schema taken first), so two services opening one ledger at once
migrate it once.

No overspend across clusters (PostgreSQL): a write transaction takes
``pg_advisory_xact_lock`` on a 64-bit hash of each subject it measures (``user:UID``,
``bank:NAME`` of the limits that apply to the charge, ``token:TOKEN`` for a reserved
window's row), in sorted order, BEFORE it reads the sums; the locks are held until
COMMIT. Two services reserving against the same user or bank therefore run their
check-then-insert one after the other, and the second one's sums (READ COMMITTED: each
statement sees what was committed before it) include the first one's row. Services
reserving for different users and banks do not wait for each other. A lock waited for
longer than ``lock_timeout`` (5 s) is :class:`LedgerUnavailable`. SQLite's BEGIN
IMMEDIATE already serializes every writer of the file.

Credentials: never in the TOML. ``credentials`` names a file holding the password on
its first line (nothing else; trailing whitespace is dropped), owned by the service's
user and readable by nobody else (mode 0600 or 0400); anything else is refused with one
sentence. Without ``credentials`` the server must let the service's user in without a
password (``peer`` or ``trust`` in ``pg_hba.conf``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import sqlite3
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from flux_quantum.errors import FluxQuantumError

SCHEMA_VERSION = 3
FILENAME = "ledger.db"
SUBDIR = "flux-quantum"
BUSY_TIMEOUT = 5.0
CONNECT_TIMEOUT = 5  # seconds; PostgreSQL's connect_timeout
LOCK_TIMEOUT = "5s"
DEFAULT_CLUSTER = "local"
KEYS = ("path", "url", "credentials", "cluster", "connect_timeout")
CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCHEMES = ("postgresql", "postgres")
SCHEMA_LOCK = "schema"


class LedgerError(FluxQuantumError):
    """The ledger cannot be opened or used; the message names the file or database."""


class LedgerUnavailable(LedgerError):
    """The ledger's database cannot be reached now (down, restarting, unreachable,
    a lock not granted in time). Retryable: nothing was written by the failed call, or
    it was written whole (a lost COMMIT reply); the same call with the same token is
    safe to make again."""

    retryable = True


class LedgerConfigError(ValueError):
    """A bad ``[quantum.ledger]`` table; the message names the key."""


# --- configuration ----------------------------------------------------------------------


def default_cluster(hostname: str | None = None) -> str:
    """The cluster name of a PostgreSQL ledger without ``cluster``: the host's short
    name (``local`` when it is not a usable name)."""
    name = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    return name if CLUSTER_NAME.match(name) else DEFAULT_CLUSTER


@dataclass(frozen=True)
class LedgerConfig:
    """The ``[quantum.ledger]`` table: a SQLite ``path`` (default: the state directory)
    or a PostgreSQL ``url`` with its ``credentials`` file, and this instance's
    ``cluster`` name."""

    path: str | None = None
    url: str | None = None
    credentials: str | None = None
    cluster: str | None = None
    connect_timeout: int = CONNECT_TIMEOUT

    @property
    def postgresql(self) -> bool:
        return self.url is not None

    @property
    def cluster_name(self) -> str:
        if self.cluster is not None:
            return self.cluster
        return default_cluster() if self.postgresql else DEFAULT_CLUSTER

    @classmethod
    def from_config(cls, table: Mapping[str, Any] | None) -> LedgerConfig:
        """Parse ``[quantum.ledger]``; LedgerConfigError names the key of a bad value."""
        if table is None:
            return cls()
        if not isinstance(table, Mapping):
            raise LedgerConfigError("[quantum.ledger] must be a table")
        for key in table:
            if key not in KEYS:
                raise LedgerConfigError(
                    f"[quantum.ledger] has no key '{key}' (known: {', '.join(KEYS)})"
                )
        for key in ("path", "url", "credentials", "cluster"):
            value = table.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                raise LedgerConfigError(
                    f"[quantum.ledger] {key} must be a non-empty string, got {value!r}"
                )
        path, url, credentials = table.get("path"), table.get("url"), table.get("credentials")
        if path is not None and url is not None:
            raise LedgerConfigError(
                "[quantum.ledger] path (a SQLite file) and url (a PostgreSQL database) "
                "exclude each other: give one"
            )
        if url is not None:
            check_url(url)
        elif credentials is not None:
            raise LedgerConfigError(
                "[quantum.ledger] credentials is the password of a PostgreSQL url: "
                "give url too, or remove it"
            )
        if credentials is not None and not os.path.isabs(credentials):
            raise LedgerConfigError(
                f"[quantum.ledger] credentials must be an absolute path, got {credentials!r}"
            )
        cluster = table.get("cluster")
        if cluster is not None and not CLUSTER_NAME.match(cluster):
            raise LedgerConfigError(
                f"[quantum.ledger] cluster must be a name of letters, digits, '.', '_' and "
                f"'-' (at most 64, starting with a letter or digit), got {cluster!r}"
            )
        timeout = table.get("connect_timeout", CONNECT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 60:
            raise LedgerConfigError(
                f"[quantum.ledger] connect_timeout must be whole seconds from 1 to 60, "
                f"got {timeout!r}"
            )
        return cls(path, url, credentials, cluster, timeout)


def check_url(url: str) -> None:
    """A PostgreSQL URL the ledger accepts: ``postgresql://HOST[:PORT]/DB[?user=NAME]``,
    never a password in it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError as exc:
        raise LedgerConfigError(f"[quantum.ledger] url is not a URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise LedgerConfigError(
            f"[quantum.ledger] url must be postgresql://HOST:PORT/DATABASE?user=NAME, got "
            f"scheme {parts.scheme or '(none)'!r}"
        )
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    if parts.password is not None or "password" in params:
        raise LedgerConfigError(
            "[quantum.ledger] url must not contain a password: put it in the file named "
            "by [quantum.ledger] credentials"
        )
    if "passfile" in params:
        raise LedgerConfigError(
            "[quantum.ledger] url must not name a passfile: name the password's file in "
            "[quantum.ledger] credentials"
        )
    if not parts.path.strip("/"):
        raise LedgerConfigError(
            "[quantum.ledger] url names no database: postgresql://HOST:PORT/DATABASE?user=NAME"
        )


def read_credentials(path: str, uid: int | None = None) -> str:
    """The password in the ``credentials`` file: its first line. Refused (LedgerError,
    one sentence) unless the file is owned by ``uid`` (the service's user) and neither
    its group nor others may read or write it."""
    uid = os.geteuid() if uid is None else uid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise LedgerError(
            f"[quantum.ledger] credentials {path}: cannot open it: {exc.strerror}"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(f"[quantum.ledger] credentials {path} is not a regular file")
        if info.st_uid != uid or info.st_mode & 0o077:
            raise LedgerError(
                f"[quantum.ledger] credentials {path} must be owned by uid {uid} (the "
                f"service's user) with no access for group or others (chmod 600); it is "
                f"owned by uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}"
            )
        with os.fdopen(fd, encoding="utf-8") as handle:
            fd = -1
            password = handle.readline().rstrip("\r\n").rstrip()
    finally:
        if fd >= 0:
            os.close(fd)
    if not password:
        raise LedgerError(f"[quantum.ledger] credentials {path}: its first line is empty")
    return password


def lock_id(key: str) -> int:
    """The advisory lock of a subject: a signed 64-bit hash of ``key``."""
    digest = hashlib.sha256(f"flux-quantum:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# --- the schema -------------------------------------------------------------------------

_CHARGES = """
CREATE TABLE IF NOT EXISTS charges (
    token          TEXT PRIMARY KEY,   -- the task's idempotency token
    cluster        TEXT NOT NULL{cluster_default},  -- the instance that wrote it
    jobid          {int} NOT NULL,     -- the job (unit) the task belongs to
    userid         {int} NOT NULL,
    username       TEXT,
    bank           TEXT,               -- NULL without flux-accounting
    device         TEXT NOT NULL,
    vendor         TEXT NOT NULL,
    class          TEXT NOT NULL,
    shots          {int} NOT NULL,
    estimate       {real} NOT NULL,    -- reserved before the task was created
    cost           {real},             -- actual, once settled (0 when released)
    state          TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'released')),
    reserved_at    {real} NOT NULL,    -- epoch seconds; the period it counts in
    settled_at     {real},
    day            TEXT NOT NULL,      -- period labels at reserved_at, site timezone
    month          TEXT NOT NULL,
    task_id        TEXT,               -- the vendor's id, once known
    billed_seconds {real},             -- time-billed devices: the billed run time
    note           TEXT,               -- why it was released, or that it was recorded
                                       -- past the quota (a task found after a restart)
    reservation    TEXT,               -- the reserved window's name (its row and tasks)
    qpu_seconds    {real},             -- a window's task: its QPU time in the window
    share          {real},             -- ... and its share of the window's cost
    feed           {int}               -- the usage_feeds row that fed it to flux-accounting
);
"""
_FEEDS = """
CREATE TABLE IF NOT EXISTS usage_feeds (
    id         {serial},               -- the feed's number (its usage record's job id)
    cluster    TEXT NOT NULL,          -- the instance whose spend it fed
    userid     {int} NOT NULL,         -- the flux-accounting association: user and bank
    username   TEXT,
    bank       TEXT NOT NULL,
    spend      {real} NOT NULL,        -- settled spend fed (catalog currency)
    tasks      {int} NOT NULL,
    weight     {real} NOT NULL,        -- [quantum.accounting] qpu_weight then
    usage      {real} NOT NULL,        -- the usage flux-accounting computes of its record
    t_inactive {real} NOT NULL,        -- its record's t_inactive (when it ended)
    state      TEXT NOT NULL CHECK (state IN ('pending', 'fed')),
    opened_at  {real} NOT NULL,
    fed_at     {real}
);
"""
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at {real} NOT NULL,
    note       TEXT NOT NULL
);
"""
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS charges_user ON charges (userid, reserved_at)",
    "CREATE INDEX IF NOT EXISTS charges_bank ON charges (bank, reserved_at)",
    "CREATE INDEX IF NOT EXISTS charges_job ON charges (jobid)",
    "CREATE INDEX IF NOT EXISTS charges_device ON charges (device, state, settled_at)",
    "CREATE INDEX IF NOT EXISTS charges_reservation ON charges (reservation)",
    "CREATE INDEX IF NOT EXISTS charges_cluster ON charges (cluster, state)",
    "CREATE INDEX IF NOT EXISTS charges_feed ON charges (feed)",
    "CREATE INDEX IF NOT EXISTS usage_feeds_state ON usage_feeds (cluster, state)",
)
VERSION_NOTES = {
    1: "meta and charges (reservation, qpu_seconds, share)",
    2: "charges.cluster: the instance that wrote the row",
    3: "usage_feeds and charges.feed: spend fed to flux-accounting as usage",
}
# Columns added after version 1's first release (a SQLite ledger may lack them).
ADDED_COLUMNS = (
    ("reservation", "TEXT"),
    ("qpu_seconds", "REAL"),
    ("share", "REAL"),
    ("feed", "INTEGER"),
)


class Store:
    """What :class:`flux_quantum.site.ledger.Ledger` needs of a backend. Not thread-safe:
    the ledger serializes its calls."""

    kind: str = ""
    where: str = ""  # shown in messages: the file, or the URL (never a password)
    cluster: str = DEFAULT_CLUSTER
    columns: set[str]

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def dicts(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    @contextmanager
    def write(self, locks: Sequence[str] = ()) -> Iterator[None]:
        raise NotImplementedError
        yield

    def meta(self, key: str) -> str | None:
        found = self.rows("SELECT value FROM meta WHERE key = ?", (key,))
        return None if not found else str(found[0][0])

    def close(self) -> None:
        raise NotImplementedError

    def _check_version(self, currency: str) -> None:
        """Inside the opening write transaction: record a new ledger's version and
        currency, refuse a newer schema or another currency."""
        version = self.meta("schema_version")
        if version is None:
            return
        if int(version) > SCHEMA_VERSION:
            raise LedgerError(
                f"{self.where}: ledger schema {version} is newer than this flux-quantum"
                f" ({SCHEMA_VERSION}); upgrade flux-quantum"
            )
        recorded = self.meta("currency")
        if recorded is not None and recorded != currency:
            raise LedgerError(
                f"{self.where}: the ledger counts in {recorded} but the catalog's currency is"
                f" {currency}; keep the catalog's currency or start a new ledger"
            )

    def _record_versions(self, before: int | None, currency: str) -> None:
        """The versions applied now, and ``meta`` brought up to date."""
        now = time.time()
        applied = {int(r[0]) for r in self.rows("SELECT version FROM schema_version")}
        for version in range(1, SCHEMA_VERSION + 1):
            if version not in applied:
                note = VERSION_NOTES[version]
                if before is not None and version <= before:
                    note += " (before the schema_version table)"
                self.execute(
                    "INSERT INTO schema_version (version, applied_at, note) VALUES (?, ?, ?)",
                    (version, now, note),
                )
        if before is None:
            self.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('currency', ?)",
                (str(SCHEMA_VERSION), currency),
            )
        elif before < SCHEMA_VERSION:
            self.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )


# --- SQLite -----------------------------------------------------------------------------


class SqliteStore(Store):
    """One file in the instance owner's state directory, WAL mode, ``synchronous=NORMAL``;
    every write is BEGIN IMMEDIATE (the file's one writer at a time)."""

    kind = "sqlite"

    def __init__(
        self, path: Path, currency: str, cluster: str = DEFAULT_CLUSTER, readonly: bool = False
    ) -> None:
        self.path = path
        self.where = str(path)
        self.cluster = cluster
        self.readonly = readonly
        try:
            if readonly:
                self.db = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT,
                    isolation_level=None, check_same_thread=False,
                )  # fmt: skip
            else:
                _create_private(path)
                self.db = sqlite3.connect(
                    path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
                )
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                with self.write():
                    self._migrate(currency)
            self.columns = self._table_columns()
        except sqlite3.Error as exc:
            raise LedgerError(f"{path}: cannot open the ledger: {exc}") from None

    def _table_columns(self) -> set[str]:
        return {str(row[1]) for row in self.db.execute("PRAGMA table_info(charges)")}

    def _migrate(self, currency: str) -> None:
        raw = None
        if self._has_table("meta"):
            self._check_version(currency)
            raw = self.meta("schema_version")
        before = None if raw is None else int(raw)
        cluster = f" DEFAULT {_literal(self.cluster)}"
        for statement in _TABLES.format(real="REAL").split(";"):
            if statement.strip():
                self.db.execute(statement)  # not executescript: it would COMMIT
        self.db.execute(_CHARGES.format(int="INTEGER", real="REAL", cluster_default=cluster))
        self.db.execute(
            _FEEDS.format(serial="INTEGER PRIMARY KEY AUTOINCREMENT", int="INTEGER", real="REAL")
        )
        have = self._table_columns()
        for column, kind in ADDED_COLUMNS:
            if column not in have:
                self.db.execute(f"ALTER TABLE charges ADD COLUMN {column} {kind}")
        if "cluster" not in have:
            # Version 2: the rows already there are the local cluster's.
            self.db.execute(f"ALTER TABLE charges ADD COLUMN cluster TEXT NOT NULL{cluster}")
        for index in _INDEXES:
            self.db.execute(index)
        self._record_versions(before, currency)

    def _has_table(self, name: str) -> bool:
        found = self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return found is not None

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, tuple(args)).fetchall()

    def dicts(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.db.execute(sql, tuple(args))
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        self.db.execute(sql, tuple(args))

    @contextmanager
    def write(self, locks: Sequence[str] = ()) -> Iterator[None]:
        """BEGIN IMMEDIATE takes the file's write lock first, so what is read inside
        cannot change before the commit (``locks`` are not needed)."""
        del locks
        if self.readonly:
            raise LedgerError(f"{self.path}: opened read-only")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                # Another writer kept the file longer than the busy timeout: retryable.
                raise LedgerUnavailable(
                    f"{self.path}: the ledger is busy: another writer held it for more than "
                    f"{BUSY_TIMEOUT:g}s"
                ) from None
            raise
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


def _create_private(path: Path) -> None:
    """The ledger's directory (0700) and file (0600), created by the instance owner
    before SQLite opens it: SQLite gives its WAL files the database file's mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


# --- PostgreSQL -------------------------------------------------------------------------


def psycopg_missing() -> str | None:
    """Why the PostgreSQL store cannot be used here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'flux-quantum[postgresql]')"
    return None


class PostgresStore(Store):
    """A database several instances share, through psycopg 3: one connection
    (autocommit outside the write transactions), opened again after it broke. The
    schema is made or migrated at the first connection. A server that cannot be reached
    is :class:`LedgerUnavailable` on every call until it can; a wrong password, a
    missing database or role is :class:`LedgerError` when the store is made."""

    kind = "postgresql"

    def __init__(
        self,
        url: str,
        currency: str,
        cluster: str,
        *,
        credentials: str | None = None,
        readonly: bool = False,
        connect_timeout: int = CONNECT_TIMEOUT,
    ) -> None:
        missing = psycopg_missing()
        if missing is not None:
            raise LedgerError(f"[quantum.ledger] url: {missing}")
        try:
            check_url(url)
        except LedgerConfigError as exc:
            raise LedgerError(str(exc)) from None
        self.url = url
        self.where = url
        self.path = url
        self.cluster = cluster
        self.readonly = readonly
        self.currency = currency
        self.connect_timeout = connect_timeout
        self._password = read_credentials(credentials) if credentials else None
        self._conn: Any = None
        self._in_transaction = False
        self._migrated = False
        self.columns = set(PG_COLUMNS)
        with contextlib.suppress(LedgerUnavailable):  # else at the first call that can
            self._connection()

    def _connection(self) -> Any:
        import psycopg

        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._conn = None
        try:
            conn = psycopg.connect(
                self.url,
                password=self._password,
                autocommit=True,
                connect_timeout=self.connect_timeout,
                application_name="flux-quantum",
            )
        except psycopg.OperationalError as exc:
            raise self._failure(exc, connecting=True) from None
        try:
            conn.execute(f"SET lock_timeout = {_literal(LOCK_TIMEOUT)}")
            if self.readonly:
                conn.execute("SET default_transaction_read_only = on")
            self._conn = conn
            if not self._migrated:
                if self.readonly:
                    self._check_readable()
                else:
                    with self.write([SCHEMA_LOCK]):
                        self._migrate()
                self._migrated = True
        except BaseException:
            self._conn = None
            conn.close()
            raise
        return conn

    def _failure(self, exc: Exception, connecting: bool = False) -> LedgerError:
        """The driver's error as the ledger's: unreachable (retryable) or broken."""
        import psycopg

        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if sqlstate[:2] in ("28", "3D") or (
            connecting and re.search(r"password authentication|does not exist|no password", text)
        ):
            return LedgerError(f"{self.where}: cannot use the ledger: {text}")
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            return LedgerUnavailable(f"{self.where}: the ledger's database is unavailable: {text}")
        return LedgerError(f"{self.where}: {text}")

    def _check_readable(self) -> None:
        version = self.meta("schema_version") if self._exists() else None
        if version is None:
            raise LedgerError(f"{self.where}: no ledger there yet (the service creates it)")
        self._check_version(self.currency)

    def _exists(self) -> bool:
        return bool(self.rows("SELECT to_regclass('meta') IS NOT NULL")[0][0])

    def _migrate(self) -> None:
        before = None
        if self._exists():
            self._check_version(self.currency)
            raw = self.meta("schema_version")
            before = None if raw is None else int(raw)
        self.execute(_TABLES.format(real="DOUBLE PRECISION"))
        self.execute(_CHARGES.format(int="BIGINT", real="DOUBLE PRECISION", cluster_default=""))
        self.execute(
            _FEEDS.format(serial="BIGSERIAL PRIMARY KEY", int="BIGINT", real="DOUBLE PRECISION")
        )
        for column, kind in ADDED_COLUMNS:
            pg_kind = {"REAL": "DOUBLE PRECISION", "INTEGER": "BIGINT"}.get(kind, kind)
            self.execute(f"ALTER TABLE charges ADD COLUMN IF NOT EXISTS {column} {pg_kind}")
        for index in _INDEXES:
            self.execute(index)
        self._record_versions(before, self.currency)

    def _run(self, sql: str, args: Sequence[Any]) -> Any:
        """One statement; outside a transaction, once more on a new connection when the
        old one turns out broken (the server restarted since: nothing was done)."""
        import psycopg

        for again in (False, True):
            conn = self._connection()
            try:
                if not args:
                    return conn.execute(sql)  # no parameters: several statements may run
                return conn.execute(sql.replace("?", "%s"), tuple(args))
            except psycopg.Error as exc:
                if again or self._in_transaction or not conn.broken:
                    raise self._failure(exc) from None
        raise AssertionError("unreachable")

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._run(sql, args)
        return cursor.fetchall() if cursor.description else []

    def dicts(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self._run(sql, args)
        names = [d.name for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        self._run(sql, args)

    @contextmanager
    def write(self, locks: Sequence[str] = ()) -> Iterator[None]:
        """One transaction; ``locks`` (subject keys) taken first, in sorted order (so two
        writers never wait for each other in a cycle), held until COMMIT. A connection
        found broken at BEGIN (the server restarted since) is opened again, once."""
        import psycopg

        if self.readonly:
            raise LedgerError(f"{self.where}: opened read-only")
        for again in (False, True):
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                break
            except psycopg.Error as exc:
                if again or not conn.broken:
                    raise self._failure(exc) from None
        self._in_transaction = True
        try:
            for key in sorted(set(locks)):
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(key),))
            yield
        except BaseException as exc:
            self._in_transaction = False
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, psycopg.Error):
                raise self._failure(exc) from None
            raise
        self._in_transaction = False
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise self._failure(exc) from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


PG_COLUMNS = (
    "token", "cluster", "jobid", "userid", "username", "bank", "device", "vendor", "class",
    "shots", "estimate", "cost", "state", "reserved_at", "settled_at", "day", "month",
    "task_id", "billed_seconds", "note", "reservation", "qpu_seconds", "share", "feed",
)  # fmt: skip
