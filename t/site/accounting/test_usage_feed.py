"""Settled QPU spend into flux-accounting's fair-share: the ledger's record of what was
fed (on both backends), the usage record a feed writes into flux-accounting's ``jobs``
table, and flux-accounting's own update (``flux account-update-usage``,
``account-update-fshare``, run here on a database made by its own code) counting it:
spend x ``qpu_weight`` of usage, exactly what it counts for a classical job of that
many node-seconds; never twice, never recomputed away, an interrupted feed finished or
fed again, and a record that neither hides nor is hidden by the association's jobs.
Skipped loudly where flux-accounting is not installed."""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from accounting import (
    ALICE,
    BOB,
    CAROL,
    DATABASE_MISSING,
    DAVE,
    GARNET,
    NO_LIMITS,
    WEIGHT,
    associations,
    classical_job,
    make_database,
    settle,
    update_usage,
)

from flux_quantum.site.accounting import (
    AccountingDatabase,
    AccountingError,
    UsageFeed,
    UsageRecord,
    UsageWeights,
    usage_jobid,
)
from flux_quantum.site.accounting.usage_record import on_step
from flux_quantum.site.ledger import Ledger, UsageQuery
from flux_quantum.site.quota import Charge

# --- the ledger's side, on both backends ------------------------------------------------


def test_the_ledger_feeds_each_settled_charge_once(ledger: Ledger) -> None:
    settle(ledger, "a1", ALICE, "alice", "physics", 0.4)
    settle(ledger, "a2", ALICE, "alice", "physics", 0.9)
    # a task in a reserved window costs nothing but feeds its share of the window
    window = Charge.for_device(GARNET, token="w1", jobid=3, userid=ALICE, user="alice",
                               bank="physics", shots=100, t=time.time(), reservation="r1")  # fmt: skip
    assert ledger.reserve(window, NO_LIMITS).allowed
    ledger.settle("w1", 0.0, now=time.time(), reservation="r1", qpu_seconds=30.0, share=0.7)
    settle(ledger, "free", ALICE, "alice", "physics", 0.0)  # costs nothing: nothing to feed
    settle(ledger, "nobank", BOB, "bob", None, 1.0)  # no bank: no association to feed
    reserved = Charge.for_device(GARNET, token="open", jobid=2, userid=BOB, user="bob",
                                 bank="chemistry", shots=100, t=time.time())  # fmt: skip
    ledger.reserve(reserved, NO_LIMITS)  # not settled yet
    assert [c.token for c in ledger.unfed()] == ["a1", "a2", "w1"]
    feed = ledger.open_feed(["a1", "a2", "w1"], userid=ALICE, user="alice", bank="physics",
                            spend=2.0, weight=WEIGHT, usage=200.0, t_inactive=100.0, now=99.0)  # fmt: skip
    assert feed is not None
    assert ledger.unfed() == []
    query = UsageQuery(period="all", group_by=("user", "bank"), accounting=True)

    def fed() -> list[tuple[str, str, float | None, float | None]]:
        return [(r.user, r.bank, r.fed, r.qpu_usage) for r in ledger.usage(query)]

    # pending: not fed yet, in the report as in flux-accounting
    assert fed() == [("alice", "physics", 0.0, 0.0), ("bob", "-", 0.0, 0.0),
                     ("bob", "chemistry", 0.0, 0.0)]  # fmt: skip
    # a feed of a charge another feed took records nothing
    assert ledger.open_feed(["a1"], userid=ALICE, user="alice", bank="physics", spend=0.4,
                            weight=WEIGHT, usage=40.0, t_inactive=100.0, now=99.0) is None  # fmt: skip
    (pending,) = ledger.feeds()
    assert (pending.id, pending.state, pending.tasks, pending.spend) == (feed, "pending", 3, 2.0)
    ledger.close_feed(feed, now=101.0)
    assert [(f.state, f.fed_at) for f in ledger.feeds()] == [("fed", 101.0)]
    (alice, *_) = ledger.usage(query)
    assert (alice.spent, alice.fed, alice.qpu_usage) == (pytest.approx(1.3), pytest.approx(2.0),
                                                         pytest.approx(200.0))  # fmt: skip
    assert alice.to_dict()["qpu_usage"] == 200.0
    assert "fed" not in ledger.usage(UsageQuery(period="all"))[0].to_dict()
    # a feed dropped (its record never written) frees its charges for the next one
    settle(ledger, "a3", ALICE, "alice", "physics", 0.5)
    again = ledger.open_feed(["a3"], userid=ALICE, user="alice", bank="physics", spend=0.5,
                             weight=WEIGHT, usage=50.0, t_inactive=200.0, now=199.0)  # fmt: skip
    assert again is not None and again != feed
    ledger.drop_feed(again)
    assert [c.token for c in ledger.unfed()] == ["a3"]
    assert [f.id for f in ledger.feeds()] == [feed]
    assert ledger.feeds(state="pending") == []


# --- the feed into a flux-accounting database -------------------------------------------


def needs_flux_accounting(test: Any) -> Any:
    """A test on a database flux-accounting's own code makes, in the broker's Python
    (`flux python`): the flux tier, skipped loudly where flux-accounting is absent."""
    skip = pytest.mark.skipif(DATABASE_MISSING is not None, reason=DATABASE_MISSING or "")
    return pytest.mark.flux(skip(test))


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """root -> physics (alice, carol), chemistry (bob); dave has no association."""
    return make_database(
        tmp_path / "FluxAccounting.db",
        [("root", ""), ("physics", "root"), ("chemistry", "root")],
        [("alice", ALICE, "physics"), ("carol", CAROL, "physics"), ("bob", BOB, "chemistry")],
    )


@pytest.fixture
def fa_ledger(tmp_path: Path):
    with Ledger(tmp_path / "ledger.db") as opened:
        yield opened


@needs_flux_accounting
def test_settled_spend_is_usage_after_one_update_as_much_as_a_classical_job(
    fa_ledger: Ledger, database: Path
) -> None:
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.4)
    settle(fa_ledger, "a2", ALICE, "alice", "physics", 0.9)
    now = time.time()
    # carol ran a one-node job for as many seconds as alice's spend weighs
    classical_job(database, 1001, CAROL, "physics", now - 200, now - 200 + 1.3 * WEIGHT)
    before = associations(database)
    report = UsageFeed(fa_ledger, database, WEIGHT).run(now)
    (record,) = report.records
    assert (record.user, record.bank, record.tasks) == ("alice", "physics", 2)
    assert record.spend == pytest.approx(1.3) and record.usage == pytest.approx(130.0)
    update_usage(database)
    after = associations(database)
    assert after[("alice", "physics")][0] == pytest.approx(130.0, abs=1e-5)
    assert after[("carol", "physics")][0] == pytest.approx(130.0, abs=1e-5)
    # the same usage is the same fair-share; bob, who used nothing, is unchanged
    assert after[("alice", "physics")][1] == after[("carol", "physics")][1]
    assert after[("alice", "physics")][1] < after[("bob", "chemistry")][1]
    assert after[("bob", "chemistry")][0] == before[("bob", "chemistry")][0] == 0.0
    db = AccountingDatabase(database)
    assert db.job_usage(bank="physics") == pytest.approx(260.0, abs=1e-4)
    assert db.job_usage(bank="root") == pytest.approx(260.0, abs=1e-4)
    db.close()
    # the ledger says what it fed, and what it became
    (feed,) = fa_ledger.feeds()
    assert (feed.state, feed.usage, feed.tasks) == ("fed", record.usage, 2)
    assert usage_jobid(feed.id, feed.opened_at) == record.jobid


@needs_flux_accounting
def test_nothing_is_fed_twice_nor_recomputed_away(fa_ledger: Ledger, database: Path) -> None:
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.5)
    feed = UsageFeed(fa_ledger, database, WEIGHT)
    first = time.time() - 100  # this cycle's fetch began then
    assert len(feed.run(first).records) == 1
    update_usage(database)
    assert associations(database)[("alice", "physics")][0] == pytest.approx(50.0)
    # the next cycles: nothing new to feed; the usage stays (no job of hers since)
    for _ in range(2):
        assert feed.run(time.time()).records == []
        update_usage(database)
        assert associations(database)[("alice", "physics")][0] == pytest.approx(50.0)
    # new spend, and a classical job that ended since the first fetch: both counted
    settle(fa_ledger, "a2", ALICE, "alice", "physics", 0.25)
    now = time.time()
    classical_job(database, 1002, ALICE, "physics", first + 10, first + 15)
    assert len(feed.run(now).records) == 1
    update_usage(database)
    assert associations(database)[("alice", "physics")][0] == pytest.approx(80.0, abs=0.01)


@needs_flux_accounting
def test_a_record_ends_after_the_associations_last_counted_job(
    fa_ledger: Ledger, database: Path
) -> None:
    """A horizon not later than the association's last counted job (a standalone feed
    whose horizon is the table's latest job, which is hers) would hide the record: it
    ends a microsecond step after that job instead."""
    now = time.time()
    classical_job(database, 1003, ALICE, "physics", now - 30, now - 10)
    update_usage(database)
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.1)
    (record,) = UsageFeed(fa_ledger, database, WEIGHT).run().records  # horizon: now - 10
    assert now - 10 < record.at < now - 10 + 1e-5
    update_usage(database)
    assert associations(database)[("alice", "physics")][0] == pytest.approx(30.0, abs=1e-4)


@needs_flux_accounting
def test_the_record_is_a_valid_job_of_one_node_and_one_core(
    fa_ledger: Ledger, database: Path
) -> None:
    from flux.job import JobID
    from flux.resource import ResourceSet

    with closing(sqlite3.connect(database)) as db:  # flux-accounting weighs cores too
        db.execute("UPDATE config_table SET value = '2.0' WHERE key = 'core_weight'")
        db.commit()
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.3)
    (record,) = UsageFeed(fa_ledger, database, WEIGHT, clock=lambda: 1.8e9).run(1.8e9).records
    with closing(sqlite3.connect(database)) as db:
        row = db.execute(
            "SELECT id, userid, bank, t_run, t_inactive, R, jobspec, project FROM jobs"
        ).fetchone()
    assert JobID(int(row[0])) == record.jobid and (row[1], row[2]) == (ALICE, "physics")
    resources = ResourceSet(row[5])
    assert (resources.nnodes, resources.ncores) == (1, 1)
    assert row[4] - row[3] == record.seconds == pytest.approx(30.0 / 3.0)  # node 1 + core 2
    system = json.loads(row[6])["attributes"]["system"]
    assert system["job"]["name"] == "qpu-usage" and system["bank"] == "physics"
    # the association's default project, as flux-accounting gives its jobs
    assert row[7] == system["project"] == "*"
    assert system["qpu_usage"] == {
        "feed": record.feed, "cluster": "local", "spend": 0.3, "currency": "USD", "tasks": 1,
        "qpu_weight": WEIGHT, "usage": pytest.approx(30.0),
    }  # fmt: skip
    update_usage(database)
    assert associations(database)[("alice", "physics")][0] == pytest.approx(30.0, abs=1e-5)
    # the id is a FLUID of generator 16383, which no broker of an instance uses
    assert (record.jobid >> 10) & 0x3FFF == 16383
    weightless = UsageWeights(node=0.0, core=0.0, gpu=1.0)
    with pytest.raises(AccountingError, match="weighs neither nodes nor cores"):
        UsageRecord.of(feed=1, userid=1, user="a", bank="b", spend=1.0, currency="USD",
                       tasks=1, weight=1.0, at=1.8e9, weights=weightless)  # fmt: skip


def test_a_records_usage_is_spend_times_weight_to_flux_accountings_decimals() -> None:
    """Its seconds are a multiple of 2**-20 (exact in a double), chosen for the usage to
    5 decimals: a usage just below a rounding boundary (1.0117749: 1.01177) stays below
    it, as the same usage of a classical job does, so the two tie in fair-share."""
    for weights in (UsageWeights(), UsageWeights(node=1.0, core=2.0)):
        record = UsageRecord.of(feed=1, userid=1, user="a", bank="b", spend=1.0,
                                currency="USD", tasks=1, weight=1.0117749, at=1.8e9,
                                weights=weights)  # fmt: skip
        per_second = weights.node + weights.core
        # flux-accounting's own update: (nodes x node_weight + cores x core_weight) x
        # (t_inactive - t_run), rounded to 5 decimals
        assert round(per_second * (record.at - record.t_run), 5) == 1.01177
        assert record.usage == round(1.0 * 1.0117749, 5) == 1.01177


@needs_flux_accounting
def test_an_interrupted_feed_is_finished_or_fed_again(fa_ledger: Ledger, database: Path) -> None:
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.2)
    settle(fa_ledger, "b1", BOB, "bob", "chemistry", 0.3)
    now = time.time()
    ended = on_step(now - 60)
    # a run opened both feeds, wrote bob's record, and stopped
    alice = fa_ledger.open_feed(["a1"], userid=ALICE, user="alice", bank="physics", spend=0.2,
                                weight=WEIGHT, usage=20.0, t_inactive=ended, now=now - 61)  # fmt: skip
    bob = fa_ledger.open_feed(["b1"], userid=BOB, user="bob", bank="chemistry", spend=0.3,
                              weight=WEIGHT, usage=30.0, t_inactive=ended, now=now - 61)  # fmt: skip
    assert alice is not None and bob is not None
    weights = UsageWeights()
    written = UsageRecord.of(feed=bob, userid=BOB, user="bob", bank="chemistry", spend=0.3,
                             currency="USD", tasks=1, weight=WEIGHT, at=ended,
                             weights=weights, opened=now - 61)  # fmt: skip
    with closing(sqlite3.connect(database)) as db:
        db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   written.row("local"))  # fmt: skip
        db.commit()
    report = UsageFeed(fa_ledger, database, WEIGHT).run(now)
    assert (report.recovered, report.dropped) == ([bob], [alice])
    assert [(r.user, r.spend) for r in report.records] == [("alice", 0.2)]
    update_usage(database)
    found = associations(database)
    assert found[("alice", "physics")][0] == pytest.approx(20.0)
    assert found[("bob", "chemistry")][0] == pytest.approx(30.0)
    assert [f.state for f in fa_ledger.feeds()] == ["fed", "fed"]


@needs_flux_accounting
def test_a_record_of_the_same_id_that_is_not_ours_stops_the_feed(
    fa_ledger: Ledger, database: Path
) -> None:
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.2)
    feed = fa_ledger.open_feed(["a1"], userid=ALICE, user="alice", bank="physics", spend=0.2,
                               weight=WEIGHT, usage=20.0, t_inactive=1.8e9, now=1.8e9)  # fmt: skip
    assert feed is not None
    classical_job(database, usage_jobid(feed, 1.8e9), BOB, "chemistry", 1.7e9, 1.7e9 + 1)
    with pytest.raises(AccountingError, match=f"is not the record of this ledger's feed {feed}"):
        UsageFeed(fa_ledger, database, WEIGHT).run(time.time())


@needs_flux_accounting
def test_spend_without_an_association_is_left_unfed_and_a_dry_run_writes_nothing(
    fa_ledger: Ledger, database: Path
) -> None:
    settle(fa_ledger, "d1", DAVE, "dave", "physics", 0.7)
    settle(fa_ledger, "a1", ALICE, "alice", "physics", 0.1)
    feed = UsageFeed(fa_ledger, database, WEIGHT)
    dry = feed.run(time.time(), dry_run=True)
    assert dry.dry_run and [r.user for r in dry.records] == ["alice"]
    assert [(u.user, u.bank, u.spend) for u in dry.unfed] == [("dave", "physics", 0.7)]
    assert fa_ledger.feeds() == [] and len(fa_ledger.unfed()) == 2
    with closing(sqlite3.connect(database)) as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
    report = feed.run(time.time())
    assert [r.user for r in report.records] == ["alice"] and len(report.unfed) == 1
    assert [c.token for c in fa_ledger.unfed()] == ["d1"]  # fed once flux-accounting knows dave
    # a standalone feed on a database with no job records has no horizon: it says so
    settle(fa_ledger, "a2", ALICE, "alice", "physics", 0.1)
    with closing(sqlite3.connect(database)) as db:
        db.execute("DELETE FROM jobs")
        db.commit()
    with pytest.raises(AccountingError, match="has no job records yet"):
        feed.run()
    with pytest.raises(AccountingError, match="qpu_weight is 0"):
        UsageFeed(fa_ledger, database, 0.0).run(time.time())
