"""The site's update cycle with the QPU spend fed in its place: fetch, feed (ending at
the latest job the fetch reached), update-usage, update-fshare, priority-update; no feed without
a fetch; a failed feed leaves its spend for the next cycle and the rest runs. The fetch
and the priority update need an instance: here they are a recorded step (the fetch adds
a finished job's row as it would), the update steps are flux-accounting's own commands
on a database made by its own code. Skipped loudly where it is not installed."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest
from accounting import (
    ALICE,
    BOB,
    DATABASE_MISSING,
    WEIGHT,
    associations,
    classical_job,
    make_database,
    settle,
)

from flux_quantum.site.accounting import UpdateCycle, UsageFeed
from flux_quantum.site.accounting.usage_record import on_step
from flux_quantum.site.ledger import Ledger

# flux-accounting's own code makes the database, in the broker's Python (`flux python`).
pytestmark = [
    pytest.mark.flux,
    pytest.mark.skipif(DATABASE_MISSING is not None, reason=DATABASE_MISSING or ""),
]


class Site:
    """What the cycle runs: the update commands for real, the fetch and the priority
    update recorded (the fetch adds bob's finished job, or fails)."""

    def __init__(self, database: Path, fetch_fails: bool = False) -> None:
        self.database = database
        self.fetch_fails = fetch_fails
        self.ran: list[str] = []
        self.jobs = 2000
        self.ended = 0.0  # when the last job the fetch added ended

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.ran.append(argv[1])
        if argv[1] == "account-fetch-job-records":
            if self.fetch_fails:
                return subprocess.CompletedProcess(argv, 1, "", "rpc: Connection refused\n")
            now = time.time()
            self.jobs += 1
            self.ended = now - 1
            classical_job(self.database, self.jobs, BOB, "chemistry", now - 3, now - 1)
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[1] == "account-priority-update":
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return make_database(
        tmp_path / "FluxAccounting.db",
        [("root", ""), ("physics", "root"), ("chemistry", "root")],
        [("alice", ALICE, "physics"), ("bob", BOB, "chemistry")],
    )


def test_one_cycle_counts_the_fetched_jobs_and_the_fed_spend(tmp_path: Path, database: Path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        settle(ledger, "a1", ALICE, "alice", "physics", 0.5)
        site = Site(database)
        began = time.time()
        report = UpdateCycle(database, UsageFeed(ledger, database, WEIGHT), run=site).run()
    assert report.ok, report.failures
    assert site.ran == [
        "account-fetch-job-records",
        "account-update-usage",
        "account-update-fshare",
        "account-priority-update",
    ]
    assert report.steps[:2] == ["account-fetch-job-records", "feed"]
    assert report.feed is not None
    (record,) = report.feed.records
    # at the latest job the fetch reached: bob's, which ended a second before
    assert record.at == on_step(site.ended) and began - 2 <= record.at <= began
    found = associations(database)
    assert found[("alice", "physics")][0] == pytest.approx(50.0)
    assert found[("bob", "chemistry")][0] == pytest.approx(2.0, abs=1e-4)


def test_no_feed_without_a_fetch_and_the_rest_still_runs(tmp_path: Path, database: Path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        settle(ledger, "a1", ALICE, "alice", "physics", 0.5)
        site = Site(database, fetch_fails=True)
        report = UpdateCycle(database, UsageFeed(ledger, database, WEIGHT), run=site).run()
        assert [c.token for c in ledger.unfed()] == ["a1"]  # for the next cycle
    assert report.feed is None and "feed" not in report.steps
    assert report.failures == [
        "flux account-fetch-job-records exited 1: rpc: Connection refused",
        "the QPU spend was not fed: the fetch failed (next cycle)",
    ]
    assert site.ran[1:] == ["account-update-usage", "account-update-fshare",
                            "account-priority-update"]  # fmt: skip


def test_a_failed_feed_leaves_the_spend_for_the_next_cycle(tmp_path: Path, database: Path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        settle(ledger, "a1", ALICE, "alice", "physics", 0.5)
        gone = tmp_path / "moved.db"
        site = Site(database)
        report = UpdateCycle(database, UsageFeed(ledger, gone, WEIGHT), run=site).run()
        assert [c.token for c in ledger.unfed()] == ["a1"]
    assert report.failures == [
        f"the QPU spend was not fed (next cycle): flux-accounting's database {gone} does not exist"
    ]
    assert site.ran[-1] == "account-priority-update"
    # without a weight the cycle is flux-accounting's own
    plain = Site(database)
    plain.jobs = 3000
    assert UpdateCycle(database, None, run=plain).run().steps == plain.ran


class LaggingJobList(Site):
    """A fetch as flux-accounting's (the jobs inactive after the table's latest
    ``t_inactive``) from a job-list that lists a job inactive a moment after it ended:
    bob's second job ended just before the first cycle's fetch began and is listed only
    by the second."""

    def __init__(self, database: Path) -> None:
        super().__init__(database)
        now = time.time()
        self.ended_jobs = {2001: (now - 5, now - 3), 2002: (now - 3, now - 1)}
        self.listed = [[2001], [2001, 2002]]

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if argv[1] != "account-fetch-job-records":
            return super().__call__(argv)
        self.ran.append(argv[1])
        with closing(sqlite3.connect(self.database)) as db:
            since = db.execute("SELECT MAX(t_inactive) FROM jobs").fetchone()[0] or 0.0
        for jobid in self.listed.pop(0):
            t_run, t_inactive = self.ended_jobs[jobid]
            if t_inactive > since:
                classical_job(self.database, jobid, BOB, "chemistry", t_run, t_inactive)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_a_job_job_list_had_not_listed_yet_is_counted_by_the_next_cycle(
    tmp_path: Path, database: Path
):
    """The record ends at the latest job the fetch reached, not at the time the fetch
    began: a job that ended just before it, not yet listed, is still inactive after the
    table's latest, and the next fetch takes it (a record at the fetch's start hid it
    from every later fetch: its usage was never counted)."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        settle(ledger, "a1", ALICE, "alice", "physics", 0.5)
        site = LaggingJobList(database)
        cycle = UpdateCycle(database, UsageFeed(ledger, database, WEIGHT), run=site)
        first = cycle.run()
        assert first.ok, first.failures
        assert associations(database)[("bob", "chemistry")][0] == pytest.approx(2.0, abs=1e-4)
        second = cycle.run()
        assert second.ok, second.failures
    assert first.feed is not None
    (record,) = first.feed.records
    assert record.at <= site.ended_jobs[2001][1] < site.ended_jobs[2002][1]
    found = associations(database)
    assert found[("bob", "chemistry")][0] == pytest.approx(4.0, abs=1e-4)  # both jobs
    assert found[("alice", "physics")][0] == pytest.approx(50.0)
