"""flux-accounting's database as the site policy reads it ([quantum.accounting]): the
table's checks, the bank tree, associations and default banks, a change seen without a
restart, a job's bank when its jobspec names none (a job still held is charged to its
user's default bank), quota limits on flux-accounting's banks (a parent bank covering
its sub-banks, a bank it does not have refused with one sentence). The database is made
by flux-accounting's own code (``fluxacct`` in ``flux python``); skipped loudly where it
is not installed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from accounting import DATABASE_MISSING, make_database
from catalogs import catalog_of

from flux_quantum.site.accounting import (
    AccountingConfig,
    AccountingConfigError,
    AccountingDatabase,
    AccountingError,
    BankTree,
)
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import QuotaConfigError

# flux-accounting's own code makes the database, in the broker's Python (`flux python`).
pytestmark = [
    pytest.mark.flux,
    pytest.mark.skipif(DATABASE_MISSING is not None, reason=DATABASE_MISSING or ""),
]

ALICE, BOB, CAROL = 5011, 5012, 5014
GARNET = catalog_of("garnet").get("garnet")
JOB = {"attributes": {"system": {}}}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root -> sciences -> (physics, chemistry), root -> guests; alice in physics (her
    default) and chemistry, bob in chemistry, carol in guests."""
    return make_database(
        tmp_path_factory.mktemp("fa") / "FluxAccounting.db",
        [("root", ""), ("sciences", "root"), ("physics", "sciences"),
         ("chemistry", "sciences"), ("guests", "root")],
        [("alice", ALICE, "physics"), ("alice", ALICE, "chemistry"),
         ("bob", BOB, "chemistry"), ("carol", CAROL, "guests")],
    )  # fmt: skip


def policy(database: Path, tmp_path: Path, **tables: object) -> SitePolicy:
    return SitePolicy.from_config(
        {
            "accounting": {"db": str(database)},
            "ledger": {"path": str(tmp_path / "ledger.db")},
            **tables,
        }
    )


@pytest.mark.parametrize(
    ("table", "sentence"),
    [
        ({"db": "FluxAccounting.db"}, "[quantum.accounting] db must be the absolute path of"),
        ({"db": "/x", "qpu_weight": -1}, "[quantum.accounting] qpu_weight must be a number >= 0"),
        ({"db": "/x", "weight": 1}, "[quantum.accounting] has an unknown key 'weight'"),
    ],
)
def test_a_bad_table_is_one_sentence_naming_the_key(table: dict, sentence: str) -> None:
    with pytest.raises(AccountingConfigError) as refused:
        AccountingConfig.from_config(table)
    assert str(refused.value).startswith(sentence)
    assert AccountingConfig.from_config(None) is None
    config = AccountingConfig.from_config({"db": "/var/lib/flux/FluxAccounting.db"})
    assert config is not None and (config.qpu_weight, config.feeds) == (0.0, False)


def test_the_bank_tree_and_associations(database: Path) -> None:
    db = AccountingDatabase(database)
    tree = db.banks()
    assert list(tree) == ["chemistry", "guests", "physics", "root", "sciences"]
    assert tree.covered("sciences") == {"sciences", "physics", "chemistry"}
    assert tree.covered("root") == set(tree)
    assert tree.covered("nope") == frozenset()
    assert tree.ancestors("physics") == ("sciences", "root")
    assert [(a.user, a.bank, a.default_bank) for a in db.associations()] == [
        ("alice", "chemistry", "physics"),
        ("alice", "physics", "physics"),
        ("bob", "chemistry", "chemistry"),
        ("carol", "guests", "guests"),
    ]
    assert (db.default_bank(ALICE), db.default_bank(BOB), db.default_bank(4242)) == (
        "physics",
        "chemistry",
        None,
    )
    assert db.association(ALICE, "chemistry") is not None
    assert db.association(BOB, "physics") is None
    weights = db.weights()
    assert (weights.node, weights.core, weights.gpu) == (1.0, 0.0, 0.0)
    assert db.job_usage(user="alice", bank="physics") == 0.0
    assert db.job_usage(bank="sciences") == 0.0 and db.job_usage(user="nobody") is None
    db.close()
    assert BankTree({"a": "", "b": "a", "c": "b"}).covered("a") == {"a", "b", "c"}


def test_a_change_to_the_database_is_seen_without_a_restart(tmp_path: Path) -> None:
    path = make_database(tmp_path / "fa.db", [("root", ""), ("ops", "root")], [])
    db = AccountingDatabase(path)
    assert db.default_bank(ALICE) is None
    with sqlite3.connect(path) as writer:  # what `flux account add-user` writes
        writer.execute(
            "INSERT INTO association_table (creation_time, username, userid, bank,"
            " default_bank) VALUES (0, 'alice', ?, 'ops', 'ops')",
            (ALICE,),
        )
    assert db.default_bank(ALICE) == "ops"
    db.close()


def test_a_file_that_is_not_flux_accountings_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AccountingError, match=r"does not exist"):
        AccountingDatabase(tmp_path / "nope.db")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(AccountingError) as refused:
        AccountingDatabase(other)
    assert str(refused.value) == (
        f"{other} is not a flux-accounting database (no association_table): make it with"
        " `flux account -p PATH create-db`"
    )


def test_a_job_is_charged_to_its_bank_or_its_users_default_bank(
    database: Path, tmp_path: Path
) -> None:
    site = policy(database, tmp_path)
    # no bank in the jobspec yet (a job still held before mf_priority.so wrote it, or
    # one submitted before the plugin knew the user): the default bank
    assert site.requester(ALICE, JOB).bank == "physics"
    named = {"attributes": {"system": {"bank": "chemistry"}}}
    assert site.requester(ALICE, named).bank == "chemistry"
    assert site.requester(4242, JOB).bank is None  # unknown there: refused at submit anyway
    charge = site.charge(
        GARNET, site.requester(ALICE, JOB), token="t1", jobid=7, shots=100, t=1.75e9
    )
    assert site.reserve(charge).allowed
    record = site.ledger.record("t1")
    assert record is not None and record.bank == "physics"
    site.close()
    # without [quantum.accounting] the jobspec's bank alone, as before
    plain = SitePolicy.from_config({"ledger": {"path": str(tmp_path / "plain.db")}})
    assert plain.requester(ALICE, JOB).bank is None
    plain.close()


def test_a_parent_banks_limit_counts_every_bank_under_it(database: Path, tmp_path: Path) -> None:
    quota = {"limits": [{"name": "sciences", "bank": "sciences", "period": "day", "tasks": 2}]}
    site = policy(database, tmp_path, quota=quota)

    def reserve(token: str, userid: int, bank: str):
        requester = site.requester(userid, {"attributes": {"system": {"bank": bank}}})
        charge = site.charge(GARNET, requester, token=token, jobid=1, shots=100, t=1.75e9)
        return site.reserve(charge)

    assert reserve("a", ALICE, "physics").allowed
    assert reserve("b", BOB, "chemistry").allowed
    third = reserve("c", ALICE, "chemistry")
    assert not third.allowed
    assert third.decision.reason == (
        "over quota: [quantum.quota] limit 1 'sciences': bank sciences with its sub-banks,"
        " 2 tasks a day; 2 tasks this day (2025-06-15)"
    )
    assert reserve("d", CAROL, "guests").allowed  # guests is not under sciences
    site.close()


def test_a_quota_on_a_bank_flux_accounting_lacks_stops_the_policy(
    database: Path, tmp_path: Path
) -> None:
    quota = {"limits": [{"bank": "biology", "period": "month", "spend": 100.0}]}
    with pytest.raises(QuotaConfigError) as refused:
        policy(database, tmp_path, quota=quota)
    assert str(refused.value) == (
        f"[quantum.quota] limits[1].bank 'biology' is not a bank in flux-accounting's"
        f" database {database}"
    )
    assert not (tmp_path / "ledger.db").exists()  # refused before the ledger is opened
    with pytest.raises(AccountingError, match="does not exist"):
        SitePolicy.from_config({"accounting": {"db": str(tmp_path / "missing.db")}})
