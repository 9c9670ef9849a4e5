"""The feed: each flux-accounting association's settled QPU spend, not fed before,
written into flux-accounting's ``jobs`` table as one usage record per association
(:class:`~flux_quantum.site.accounting.usage_record.UsageRecord`), so that its next
``flux account-update-usage`` counts it as it counts a job.

This class owns that step and its ordering; the ledger owns what was fed
(``usage_feeds``, ``charges.feed``) and flux-accounting owns its database, of which it
writes only new ``jobs`` rows (a plain INSERT: a row of the same id is never replaced,
the run fails instead). It runs in the site's update cycle, after ``flux account-fetch-job-records``
and before ``flux account-update-usage`` (``UpdateCycle``), because flux-accounting
picks an association's new rows by ``t_inactive > last_job_timestamp`` and its next
fetch asks Flux only for jobs inactive after the table's latest ``t_inactive``: a record
must end no later than the fetch's horizon (every job inactive before it is in the
table), and after the association's ``last_job_timestamp``, or it would hide later
jobs, or be hidden itself.

Never twice, never lost: a feed is recorded pending in the ledger with its charges
before its record is written, and fed after; a run first settles what an interrupted
one left: a pending feed whose record is in the database is fed, one whose record is not
is dropped and its charges go to this run's feed.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote

from flux_quantum.site.accounting.database import BUSY_TIMEOUT, AccountingError, read_weights
from flux_quantum.site.accounting.usage_record import UsageRecord, after, usage_jobid
from flux_quantum.site.ledger import ChargeRecord, Ledger

INSERT = (
    "INSERT INTO jobs (id, userid, t_submit, t_run, t_inactive, ranks, R, jobspec,"
    " project, bank, requested_duration, actual_duration) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " ?, ?)"
)


@dataclass(frozen=True)
class Unfed:
    """Settled spend the feed cannot give to flux-accounting: its user has no
    association in that bank there."""

    userid: int
    user: str | None
    bank: str
    spend: float
    tasks: int


@dataclass
class FeedReport:
    """What one run did: the records written (or that would be, dry), the feeds an
    interrupted run left and this one settled, the spend left unfed and why."""

    horizon: float
    records: list[UsageRecord] = field(default_factory=list)
    recovered: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    unfed: list[Unfed] = field(default_factory=list)
    dry_run: bool = False


class UsageFeed:
    """Settled QPU spend of ``ledger``'s cluster into flux-accounting's database at
    ``database``, at ``weight`` usage per unit of currency."""

    def __init__(
        self,
        ledger: Ledger,
        database: Path,
        weight: float,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.database = Path(database)
        self.weight = weight
        self.clock = clock

    def _connect(self) -> sqlite3.Connection:
        if not self.database.is_file():
            raise AccountingError(f"flux-accounting's database {self.database} does not exist")
        try:
            return sqlite3.connect(
                f"file:{quote(str(self.database))}?mode=rw",
                uri=True,
                timeout=BUSY_TIMEOUT * 6,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise AccountingError(
                f"flux-accounting's database {self.database}: cannot open it to write: {exc}"
            ) from None

    def run(
        self, horizon: float | None = None, *, dry_run: bool = False, empty: float | None = None
    ) -> FeedReport:
        """Feed every association's unfed settled spend as one record ending at
        ``horizon`` (None: the latest ``t_inactive`` the jobs table holds, which is what
        the fetch reached; ``empty`` when it holds none yet), or just after the
        association's ``last_job_timestamp`` when that is later. ``dry_run``: write
        nothing, say what would be written.

        What the fetch reached is the safe horizon: Flux's job-list lists jobs inactive
        in the order they ended, a moment after each ``clean`` event, so a job that
        ended before the latest one fetched was fetched too, while one that ended just
        before the fetch began may not be listed yet (a record after it would hide it
        from every later fetch)."""
        if self.weight <= 0:
            raise AccountingError(
                "[quantum.accounting] qpu_weight is 0 (or not set): QPU spend is not fed"
            )
        db = self._connect()
        try:
            return self._run(db, horizon, dry_run, empty)
        except sqlite3.Error as exc:
            raise AccountingError(f"flux-accounting's database {self.database}: {exc}") from None
        finally:
            db.close()

    def _run(
        self, db: sqlite3.Connection, horizon: float | None, dry_run: bool, empty: float | None
    ) -> FeedReport:
        if horizon is None:
            latest = db.execute("SELECT MAX(t_inactive) FROM jobs").fetchone()[0]
            if latest is None and empty is not None:
                latest = empty
            if latest is None:
                raise AccountingError(
                    f"flux-accounting's database {self.database} has no job records yet: run"
                    " the feed after `flux account-fetch-job-records`, with the time before"
                    " it as its horizon (`flux quantum accounting update` does both)"
                )
            horizon = float(latest)
        report = FeedReport(horizon=horizon, dry_run=dry_run)
        if not dry_run:
            self._recover(db, report)
        weights = read_weights(db)
        associations = {
            (int(uid), str(bank)): (str(user), str(project or ""))
            for user, uid, bank, project in db.execute(
                "SELECT username, userid, bank, default_project FROM association_table"
                " WHERE active = 1"
            )
        }
        last = {
            (int(uid), str(bank)): float(ts or 0.0)
            for uid, bank, ts in db.execute(
                "SELECT userid, bank, last_job_timestamp FROM job_usage_factor_table"
            )
        }
        groups: dict[tuple[int, str], list[ChargeRecord]] = {}
        for charge in self.ledger.unfed():
            assert charge.bank is not None
            groups.setdefault((charge.userid, charge.bank), []).append(charge)
        for (userid, bank), charges in sorted(groups.items()):
            spend = sum(float(c.cost or 0.0) + float(c.share or 0.0) for c in charges)
            if (userid, bank) not in associations:
                report.unfed.append(Unfed(userid, charges[0].user, bank, spend, len(charges)))
                continue
            # The ledger's name of the user (none for a uid without an account here), else
            # flux-accounting's.
            name, project = associations[(userid, bank)]
            user = charges[0].user or name
            at = max(horizon, after(last.get((userid, bank), 0.0)))
            opened = self.clock()
            record = UsageRecord.of(
                feed=0,
                userid=userid,
                user=user,
                bank=bank,
                spend=spend,
                currency=self.ledger.currency,
                tasks=len(charges),
                weight=self.weight,
                at=at,
                weights=weights,
                opened=opened,
                project=project,
            )
            if dry_run:
                report.records.append(record)
                continue
            feed = self.ledger.open_feed(
                [c.token for c in charges],
                userid=userid,
                user=user,
                bank=bank,
                spend=spend,
                weight=self.weight,
                usage=record.usage,
                t_inactive=record.at,
                now=opened,
            )
            if feed is not None:  # else another feed took one of them: the next run
                report.records.append(replace(record, feed=feed))
        if dry_run or not report.records:
            return report
        db.execute("BEGIN IMMEDIATE")
        try:
            for record in report.records:
                db.execute(INSERT, record.row(self.ledger.cluster))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        for record in report.records:
            self.ledger.close_feed(record.feed, now=self.clock())
        return report

    def _recover(self, db: sqlite3.Connection, report: FeedReport) -> None:
        """What an interrupted run left pending: fed if its record is there, else
        dropped (its charges go to this run's feed)."""
        for pending in self.ledger.feeds(state="pending"):
            jobid = usage_jobid(pending.id, pending.opened_at)
            found = db.execute(
                "SELECT t_inactive, jobspec FROM jobs WHERE id = ?", (str(jobid),)
            ).fetchone()
            if found is None:
                self.ledger.drop_feed(pending.id)
                report.dropped.append(pending.id)
                continue
            if not self._ours(found, pending.id, pending.t_inactive):
                raise AccountingError(
                    f"flux-accounting's database {self.database} has a job {jobid} that is not"
                    f" the record of this ledger's feed {pending.id}: is another ledger feeding"
                    " this database?"
                )
            self.ledger.close_feed(pending.id, now=self.clock())
            report.recovered.append(pending.id)

    def _ours(self, row: tuple[object, ...], feed: int, t_inactive: float) -> bool:
        """Whether a ``jobs`` row is this ledger's record of ``feed``."""
        try:
            system = json.loads(str(row[1]))["attributes"]["system"]["qpu_usage"]
        except (ValueError, KeyError, TypeError):
            return False
        return (
            float(str(row[0])) == t_inactive
            and system.get("feed") == feed
            and system.get("cluster") == self.ledger.cluster
        )
