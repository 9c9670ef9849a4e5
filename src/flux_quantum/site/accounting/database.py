"""flux-accounting's database as flux-quantum reads it: banks, associations and their
default banks, usage weights, job usage and fair-share.

This module owns one read-only connection to the SQLite file flux-accounting keeps
(``FluxAccounting.db``, its ``bank_table``, ``association_table`` and ``config_table``)
and a snapshot of what flux-quantum needs of it, read again only when the file changed
(``PRAGMA data_version``). It never writes the database: usage goes in through
``UsageFeed`` and flux-accounting's own update cycle, and banks and users are
flux-accounting's to manage (``flux account add-bank``, ``add-user``). A change that
cannot be read (the file busy past the timeout while flux-accounting writes it) leaves
the last snapshot in use.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from flux_quantum.errors import FluxQuantumError
from flux_quantum.site.accounting.bank_tree import BankTree

BUSY_TIMEOUT = 5.0
TABLES = ("association_table", "bank_table", "config_table")
# flux-accounting's own defaults when its config_table has no weight (job_usage_calculation)
DEFAULT_WEIGHTS = {"node_weight": 1.0, "core_weight": 0.0, "gpu_weight": 0.0}


class AccountingError(FluxQuantumError):
    """flux-accounting's database cannot be used; the message names the file."""


@dataclass(frozen=True)
class Association:
    """One active row of ``association_table``: a user in a bank."""

    user: str
    userid: int
    bank: str
    default_bank: str
    job_usage: float
    fairshare: float


@dataclass(frozen=True)
class UsageWeights:
    """How flux-accounting weighs a job's nodes, cores and GPUs per second of it."""

    node: float = 1.0
    core: float = 0.0
    gpu: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    banks: BankTree
    associations: tuple[Association, ...]
    bank_usage: dict[str, float]
    weights: UsageWeights


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the file at ``path`` (AccountingError if it cannot)."""
    if not path.is_file():
        raise AccountingError(f"flux-accounting's database {path} does not exist")
    try:
        return sqlite3.connect(
            f"file:{quote(str(path))}?mode=ro",
            uri=True,
            timeout=BUSY_TIMEOUT,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise AccountingError(f"flux-accounting's database {path}: cannot open it: {exc}") from None


def read_weights(db: sqlite3.Connection) -> UsageWeights:
    rows = db.execute(
        "SELECT key, value FROM config_table WHERE key IN (?, ?, ?)", tuple(DEFAULT_WEIGHTS)
    ).fetchall()
    found = {**DEFAULT_WEIGHTS, **{str(k): float(v) for k, v in rows}}
    return UsageWeights(found["node_weight"], found["core_weight"], found["gpu_weight"])


class AccountingDatabase:
    """flux-accounting's database at ``path``, read only. Not thread-safe: the handler
    service asks it from its reactor thread, a command from its one thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = connect_read_only(self.path)
        self._version: int | None = None
        self._snapshot: Snapshot | None = None
        self._check_tables()
        self._fresh()

    def _check_tables(self) -> None:
        try:
            names = {
                str(r[0])
                for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as exc:
            self.close()
            raise AccountingError(f"flux-accounting's database {self.path}: {exc}") from None
        missing = [t for t in TABLES if t not in names]
        if missing:
            self.close()
            raise AccountingError(
                f"{self.path} is not a flux-accounting database (no {missing[0]}): make it"
                " with `flux account -p PATH create-db`"
            )

    def _fresh(self) -> Snapshot:
        """The snapshot, read again when another connection changed the file since."""
        try:
            version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
            if self._snapshot is None or version != self._version:
                self._snapshot = self._read()
                self._version = version
        except sqlite3.Error as exc:
            if self._snapshot is None:
                raise AccountingError(
                    f"flux-accounting's database {self.path}: cannot read it: {exc}"
                ) from None
        assert self._snapshot is not None
        return self._snapshot

    def _read(self) -> Snapshot:
        db = self._db
        banks = db.execute("SELECT bank, parent_bank, job_usage FROM bank_table WHERE active = 1")
        parents, usage = {}, {}
        for bank, parent, job_usage in banks.fetchall():
            parents[str(bank)] = str(parent or "")
            usage[str(bank)] = float(job_usage or 0.0)
        rows = db.execute(
            "SELECT username, userid, bank, default_bank, job_usage, fairshare"
            " FROM association_table WHERE active = 1 ORDER BY username, bank"
        ).fetchall()
        associations = tuple(
            Association(str(u), int(uid), str(b), str(d), float(ju or 0.0), float(fs or 0.0))
            for u, uid, b, d, ju, fs in rows
        )
        return Snapshot(BankTree(parents), associations, usage, read_weights(db))

    # -- what flux-quantum asks

    def banks(self) -> BankTree:
        return self._fresh().banks

    def associations(self) -> tuple[Association, ...]:
        return self._fresh().associations

    def weights(self) -> UsageWeights:
        return self._fresh().weights

    def association(self, userid: int, bank: str) -> Association | None:
        return next((a for a in self.associations() if a.userid == userid and a.bank == bank), None)

    def default_bank(self, userid: int) -> str | None:
        """The bank flux-accounting charges a job of ``userid`` that names none (what
        its plugin writes into the jobspec at job.new), None for a user it does not
        know."""
        for association in self.associations():
            if association.userid == userid:
                return association.default_bank
        return None

    def job_usage(self, *, user: str | None = None, bank: str | None = None) -> float | None:
        """flux-accounting's job usage now: an association's (``user`` and ``bank``), a
        bank's (its ``bank_table`` row: its sub-banks included), a user's in all their
        banks; None when it has no such row."""
        snapshot = self._fresh()
        if user is None and bank is not None:
            return snapshot.bank_usage.get(bank)
        found = [
            a
            for a in snapshot.associations
            if user in (a.user, str(a.userid)) and bank in (None, a.bank)
        ]
        return sum(a.job_usage for a in found) if found else None

    def fairshare(self, user: str, bank: str) -> float | None:
        found = [a for a in self.associations() if user in (a.user, str(a.userid))]
        return next((a.fairshare for a in found if a.bank == bank), None)

    def close(self) -> None:
        self._db.close()
