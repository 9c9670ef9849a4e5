"""``flux quantum accounting feeds`` and ``flux quantum usage --accounting`` on a ledger
file (no instance): what was fed, each feed's flux-accounting job id, and each row's
spend fed and the usage it became. The verbs that need the instance's configuration
(``update``, ``feed``) say what is missing outside one; the flux tier runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accounting import ALICE, BOB, settle

from flux_quantum.cli.main import main
from flux_quantum.site.accounting import usage_jobid
from flux_quantum.site.ledger import Ledger

OPENED = 1.8e9


@pytest.fixture
def ledger_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("FLUX_URI", raising=False)
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        settle(ledger, "a1", ALICE, "alice", "physics", 0.4)
        settle(ledger, "b1", BOB, "bob", "chemistry", 0.25)
        feed = ledger.open_feed(["a1"], userid=ALICE, user="alice", bank="physics", spend=0.4,
                                weight=100.0, usage=40.0, t_inactive=OPENED, now=OPENED)  # fmt: skip
        assert feed is not None
        ledger.close_feed(feed, now=OPENED + 1)
    return path


def test_feeds_lists_what_was_fed(ledger_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flux.job import JobID

    assert main(["accounting", "feeds", "--ledger", str(ledger_file), "--json"]) == 0
    (feed,) = json.loads(capsys.readouterr().out)["feeds"]
    assert JobID(feed["jobid"]) == usage_jobid(feed["feed"], OPENED)
    assert (feed["user"], feed["bank"], feed["spend"], feed["usage"], feed["state"]) == (
        "alice", "physics", 0.4, 40.0, "fed",
    )  # fmt: skip
    assert main(["accounting", "feeds", "--ledger", str(ledger_file)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "FEED", "JOBID", "USER", "BANK", "TASKS", "SPEND", "USAGE", "T_INACTIVE", "STATE",
    ]  # fmt: skip
    assert row.split()[2:] == [
        "alice", "physics", "1", "$0.4000", "40", "2027-01-15T08:00:00.000000Z", "fed",
    ]  # fmt: skip


def test_usage_shows_the_spend_fed_and_the_usage_it_became(
    ledger_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["usage", "--ledger", str(ledger_file), "--by", "user,bank", "--period", "all"]
    assert main([*args, "--accounting"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PERIOD USER  BANK      DEVICE TASKS   SPENT RESERVED   TOTAL     FED QPU_USAGE JOB_USAGE",
        "*      alice physics   *          1 $0.4000    $0.00 $0.4000 $0.4000        40         -",
        "*      bob   chemistry *          1 $0.2500    $0.00 $0.2500   $0.00         0         -",
    ]
    assert main([*args, "--accounting", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["fed"], r["qpu_usage"], r["job_usage"]) for r in rows] == [
        (0.4, 40.0, None),
        (0.0, 0.0, None),
    ]
    assert main(args) == 0  # without it, the report is as it was
    assert "FED" not in capsys.readouterr().out


def test_the_verbs_that_need_the_instances_configuration_say_so(
    ledger_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accounting", "update", "--ledger", str(ledger_file)]) == 1
    assert capsys.readouterr().err.strip() == (
        "flux-quantum: ERROR: the instance's configuration has no [quantum.accounting] table:"
        ' name flux-accounting\'s database there (db = "...") or give -p DB'
    )
    assert main(["accounting", "feed", "-p", "/db", "--ledger", str(ledger_file)]) == 1
    assert "qpu_weight is 0 (or not set): nothing is fed" in capsys.readouterr().err
