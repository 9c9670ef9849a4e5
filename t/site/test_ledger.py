"""The SQLite ledger: reservation and settlement keyed by the task's token (exactly once,
across a restart of the process), no overspend under concurrent reservations from threads
and from separate processes, a bank's limit shared by its users, usage reports for the
owner and for a guest, the file's location and permissions, devices over quota
dropped from a selection, and reserved windows: booked once as the site's (or a bank's)
spend, their tasks free with their QPU time and share, a ledger of the schema before
them migrated in place."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import stat
import threading
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from catalogs import catalog_of

from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import NoDeviceError, select_device
from flux_quantum.site.access import Requester
from flux_quantum.site.ledger import (
    GuestError,
    Ledger,
    LedgerError,
    UsageQuery,
    ledger_path,
    restrict_to_caller,
    serve_usage,
)
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import Charge, QuotaConfig, actual_cost
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus, TaskState
from flux_quantum.vendors.braket.parsing import execution_seconds
from flux_quantum.vendors.braket.vendor import BraketVendor

CATALOG = catalog_of("sv1", "forte1", "garnet")
pytest_plugins = ["emulator_fixtures"]
SV1, FORTE, GARNET = (CATALOG.get(n) for n in ("sv1", "forte1", "garnet"))
JUNE_3 = datetime(2025, 6, 3, 15, 30, tzinfo=UTC).timestamp()
DAY = 86400.0

QUOTA = QuotaConfig.from_config(
    {
        "limits": [
            {"name": "user-daily", "user": "*", "period": "day", "spend": 20.0},
            {"name": "chem-monthly", "bank": "chem", "period": "month", "spend": 30.0},
            {"user": "*", "period": "month", "tasks": 50},
        ]
    }
)


def charge(token: str, device=GARNET, user="alice", userid=1000, bank="chem", t=JUNE_3, **kw):
    return Charge.for_device(
        device,  # type: ignore[arg-type]
        token=token,
        jobid=kw.pop("jobid", 7),
        userid=userid,
        user=user,
        bank=bank,
        shots=kw.pop("shots", 1000),
        t=t,
        **kw,
    )


# The ledger's contract on both backends: the ``ledger`` fixture (conftest.py) is SQLite
# always, PostgreSQL where it is installed (t/site/test_ledger_pg.py says once, loudly, when
# it is not).


def test_reserve_settle_release(ledger: Ledger) -> None:
    first = ledger.reserve(charge("fq-7-1-0-0"), QUOTA)
    assert first.allowed and not first.replayed and first.state == "reserved"
    assert ledger.job_cost(7) == pytest.approx(1.75)
    ledger.attach("fq-7-1-0-0", "arn:task/1")
    settled = ledger.settle("fq-7-1-0-0", 1.75, now=JUNE_3 + 60)
    assert (settled.state, settled.cost, settled.task_id) == ("settled", 1.75, "arn:task/1")
    # a simulator settles with its billed run time
    ledger.reserve(charge("fq-7-1-1-0", SV1), QUOTA)
    sim = ledger.settle("fq-7-1-1-0", 0.0125, now=JUNE_3 + 70, billed_seconds=10.0)
    assert sim.billed_seconds == 10.0
    assert ledger.billed_history("sv1") == [10.0]
    # a task the vendor refused is released: nothing spent, not a task
    ledger.reserve(charge("fq-7-1-2-0"), QUOTA)
    released = ledger.release("fq-7-1-2-0", now=JUNE_3 + 80, reason="ValidationException")
    assert released is not None and (released.state, released.cost) == ("released", 0.0)
    assert ledger.job_cost(7) == pytest.approx(1.75 + 0.0125)
    with pytest.raises(LedgerError, match="was released, not run"):
        ledger.settle("fq-7-1-2-0", 1.0, now=JUNE_3 + 90)
    with pytest.raises(LedgerError, match="no reservation for task token 'nope'"):
        ledger.settle("nope", 1.0, now=JUNE_3)
    assert ledger.release("nope", now=JUNE_3, reason="x") is None
    assert ledger.open_reservations() == []


def test_a_refused_reservation_records_nothing(ledger: Ledger) -> None:
    refused = ledger.reserve(charge("big", FORTE), QUOTA)
    assert not refused.allowed and refused.state is None
    assert refused.decision.reason == (
        "over quota: [quantum.quota] limit 1 'user-daily': user alice, $20.00 a day;"
        " $0.00 spent or reserved this day (2025-06-03), this task on forte1 would cost $80.30"
    )
    assert ledger.record("big") is None
    # enforce=False records a task that exists already (found after a restart)
    forced = ledger.reserve(charge("big", FORTE), QUOTA, enforce=False)
    assert forced.allowed and forced.state == "reserved"
    record = ledger.record("big")
    assert record is not None and record.note is not None
    assert record.note.startswith("recorded past the quota: over quota:")


def test_limits_count_reserved_and_settled_tasks_per_period(ledger: Ledger) -> None:
    # alice: $20 a day. Eleven Garnet tasks ($1.75 each) fit ($19.25), a twelfth does not.
    for i in range(11):
        assert ledger.reserve(charge(f"a{i}"), QUOTA).allowed
        if i % 2:
            ledger.settle(f"a{i}", 1.75, now=JUNE_3 + i)
    refused = ledger.reserve(charge("a11"), QUOTA)
    assert not refused.allowed
    assert "$19.25 spent or reserved this day (2025-06-03)" in refused.decision.reason
    # a settlement below the estimate makes room again
    ledger.settle("a0", 0.30, now=JUNE_3 + 20)
    assert ledger.reserve(charge("a11"), QUOTA).allowed
    # the next day is a new day, but chem's month ($30) is nearly spent: 19.25 + ... so far
    tomorrow = ledger.reserve(charge("b0", t=JUNE_3 + DAY), QUOTA)
    assert tomorrow.allowed
    checks = {c.limit.index: c for c in tomorrow.decision.checks}
    assert checks[1].used.spend == 0.0  # alice's new day
    assert checks[2].used.spend == pytest.approx(17.8 + 1.75)  # chem's month so far


def test_a_banks_limit_is_shared_by_its_users(ledger: Ledger) -> None:
    quota = QuotaConfig.from_config({"limits": [{"bank": "chem", "period": "month", "spend": 5.0}]})
    assert ledger.reserve(charge("alice-1", user="alice", userid=1000), quota).allowed
    assert ledger.reserve(charge("bob-1", user="bob", userid=1001, jobid=8), quota).allowed
    refused = ledger.reserve(charge("bob-2", user="bob", userid=1001, jobid=8), quota)
    assert not refused.allowed
    assert refused.decision.reason.startswith(
        "over quota: [quantum.quota] limit 1: bank chem, $5.00 a month; $3.50 spent or reserved"
    )
    # carol in another bank is not held back by chem's spending
    assert ledger.reserve(charge("carol-1", user="carol", userid=1002, bank="phys"), quota).allowed


def test_exactly_once_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as before:
        assert before.reserve(charge("fq-9-1-0-0", jobid=9), QUOTA).allowed
        assert before.reserve(charge("fq-9-1-1-0", jobid=9), QUOTA).allowed
        before.settle("fq-9-1-0-0", 1.75, now=JUNE_3 + 5)
    # the service restarts and replays both jobs' histories with the same tokens
    with Ledger(path) as after:
        again = after.reserve(charge("fq-9-1-0-0", jobid=9), QUOTA)
        assert again.allowed and again.replayed and again.state == "settled"
        assert after.reserve(charge("fq-9-1-1-0", jobid=9), QUOTA).replayed
        assert [r.token for r in after.open_reservations()] == ["fq-9-1-1-0"]
        after.settle("fq-9-1-0-0", 99.0, now=JUNE_3 + 50)  # a second settle changes nothing
        after.settle("fq-9-1-1-0", 1.5, now=JUNE_3 + 60)
        after.settle("fq-9-1-1-0", 1.5, now=JUNE_3 + 61)
        assert after.job_cost(9) == pytest.approx(1.75 + 1.5)
        rows = after.usage(UsageQuery(period="all", group_by=()))
        assert [(r.tasks, r.spent, r.reserved) for r in rows] == [(2, pytest.approx(3.25), 0.0)]


def test_concurrent_reservations_from_threads_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    quota = QuotaConfig.from_config({"limits": [{"user": "*", "period": "day", "spend": 10.0}]})
    results: list[bool] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        with Ledger(path) as mine:  # one connection per thread, as separate services would
            for i in range(10):
                outcome = mine.reserve(charge(f"t{n}-{i}", jobid=n), quota).allowed
                with lock:
                    results.append(outcome)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # $10 holds five $1.75 tasks ($8.75), whatever the interleaving of 60 attempts
    assert results.count(True) == 5
    with Ledger(path) as check:
        total = sum(r.total for r in check.usage(UsageQuery(period="all", group_by=())))
    assert total == pytest.approx(8.75)


def _reserve_many(path: str, worker: int, count: int, queue) -> None:  # type: ignore[no-untyped-def]
    quota = QuotaConfig.from_config({"limits": [{"bank": "chem", "period": "day", "spend": 10.0}]})
    with Ledger(path) as mine:
        allowed = sum(
            mine.reserve(
                charge(f"p{worker}-{i}", userid=1000 + worker, jobid=worker), quota
            ).allowed
            for i in range(count)
        )
    queue.put(allowed)


def test_concurrent_reservations_from_processes_never_overspend(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.db")
    Ledger(path).close()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_reserve_many, args=(path, n, 8, queue)) for n in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    allowed = sum(queue.get(timeout=10) for _ in workers)
    assert allowed == 5  # four users of one bank: five tasks in $10, never six
    with Ledger(path) as check:
        rows = check.usage(UsageQuery(period="day", group_by=("period", "bank")))
    assert [(r.period, r.bank, r.tasks) for r in rows] == [("2025-06-03", "chem", 5)]
    assert rows[0].reserved == pytest.approx(8.75)


def test_usage_reports_and_guests(ledger: Ledger) -> None:
    ledger.reserve(charge("a1"), QUOTA)
    ledger.settle("a1", 1.5, now=JUNE_3 + 1)
    ledger.reserve(charge("a2", SV1), QUOTA)
    ledger.reserve(charge("b1", user="bob", userid=1001, bank="phys", jobid=8), QUOTA)
    ledger.reserve(charge("a3", t=JUNE_3 + 30 * DAY), QUOTA)  # July
    rows = ledger.usage(UsageQuery())
    assert [(r.period, r.user, r.bank, r.device, r.tasks) for r in rows] == [
        ("2025-06", "alice", "chem", "garnet", 1),
        ("2025-06", "alice", "chem", "sv1", 1),
        ("2025-06", "bob", "phys", "garnet", 1),
        ("2025-07", "alice", "chem", "garnet", 1),
    ]
    assert rows[0].to_dict() == {
        "period": "2025-06",
        "user": "alice",
        "bank": "chem",
        "device": "garnet",
        "reservation": "*",
        "tasks": 1,
        "spent": 1.5,
        "reserved": 0.0,
        "total": 1.5,
        "released": 0,
        "qpu_seconds": 0.0,
        "share": 0.0,
    }
    by_user = ledger.usage(UsageQuery(user="alice", period="all", group_by=("user",)))
    assert [(r.user, r.tasks) for r in by_user] == [("alice", 3)]
    assert ledger.usage(UsageQuery(user="1001", group_by=("user",)))[0].user == "bob"
    july = ledger.usage(UsageQuery(since=JUNE_3 + 20 * DAY, group_by=("period",)))
    assert [(r.period, r.tasks) for r in july] == [("2025-07", 1)]
    assert [r.bank for r in ledger.usage(UsageQuery(bank="phys", group_by=("bank",)))] == ["phys"]
    # a guest sees their own rows only, whatever they ask for
    owner, bob = 500, 1001
    assert restrict_to_caller(UsageQuery(), owner, owner) == UsageQuery()
    guest = restrict_to_caller(UsageQuery(bank="chem", period="all"), bob, owner)
    assert guest.userid == bob and ledger.usage(guest) == []
    mine = ledger.usage(
        restrict_to_caller(UsageQuery(period="all", group_by=("user",)), bob, owner)
    )
    assert [(r.user, r.tasks) for r in mine] == [("bob", 1)]
    with pytest.raises(GuestError, match="a guest sees only their own usage"):
        restrict_to_caller(UsageQuery(user="alice"), bob, owner)
    assert restrict_to_caller(UsageQuery(user=str(bob)), bob, owner).userid == bob


def test_the_file_is_private_and_read_only_readers_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "state" / "flux-quantum" / "ledger.db"
    with Ledger(path) as owner:
        owner.reserve(charge("a1"), QUOTA)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with Ledger(path, readonly=True) as reader:
        assert reader.currency == "USD"
        assert len(reader.usage(UsageQuery())) == 1
        with pytest.raises(LedgerError, match="opened read-only"):
            reader.reserve(charge("a2"), QUOTA)
    with pytest.raises(LedgerError, match="counts in USD but the catalog's currency is EUR"):
        Ledger(path, currency="EUR")
    with pytest.raises(LedgerError, match="cannot open the ledger"):
        Ledger(tmp_path / "missing.db", readonly=True)


def test_where_the_ledger_lives() -> None:
    assert ledger_path("/etc/x.db", "/var/lib/flux") == Path("/etc/x.db")
    assert ledger_path(None, "/var/lib/flux") == Path("/var/lib/flux/flux-quantum/ledger.db")
    assert ledger_path(None, None, {"XDG_STATE_HOME": "/s"}) == Path("/s/flux-quantum/ledger.db")
    assert ledger_path(None, None, {}, home="/home/a") == Path(
        "/home/a/.local/state/flux-quantum/ledger.db"
    )


def test_devices_over_quota_are_dropped_from_a_selection(ledger: Ledger) -> None:
    for i in range(10):
        ledger.reserve(charge(f"a{i}"), QUOTA)  # $17.50 of alice's $20 today
    request = parse_request({"policy": "max-fidelity", "class": "qpu"})
    charges = [charge("next", device) for device in (FORTE, GARNET)]  # type: ignore[arg-type]
    excluded = ledger.over_quota(charges, QUOTA)
    assert set(excluded) == {"forte1"}  # garnet's $1.75 still fits
    snaps = {d.name: DeviceSnapshot(d.name, DeviceStatus.ONLINE, queue_depth=0) for d in CATALOG}
    selection = select_device(CATALOG.devices, snaps, request, excluded=excluded)
    assert selection.device.name == "garnet"
    forte = next(c for c in selection.explanation.candidates if c.device == "forte1")
    assert forte.reason.startswith("dropped: over quota: [quantum.quota] limit 1 'user-daily'")
    assert ledger.backend == "postgresql" or os.path.exists(ledger.path)


# --- flux quantum usage and the service's usage RPC ----------------------------------------


def filled(path: Path) -> None:
    with Ledger(path) as ledger:
        ledger.reserve(charge("a1"), QUOTA)
        ledger.settle("a1", 1.5, now=JUNE_3 + 1)
        ledger.reserve(charge("a2", SV1), QUOTA)
        ledger.reserve(charge("b1", user="bob", userid=1001, bank="phys", jobid=8), QUOTA)


def test_usage_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flux_quantum.cli.main import main

    path = tmp_path / "ledger.db"
    filled(path)
    assert main(["usage", "--ledger", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PERIOD  USER  BANK DEVICE TASKS SPENT RESERVED   TOTAL",
        "2025-06 alice chem garnet     1 $1.50    $0.00   $1.50",
        "2025-06 alice chem sv1        1 $0.00  $0.0037 $0.0037",
        "2025-06 bob   phys garnet     1 $0.00    $1.75   $1.75",
    ]
    assert main(["usage", "--ledger", str(path), "--by", "user", "--period", "all", "-n",
                 "-o", "{user}:{tasks}:{total}"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ["alice:2:$1.50", "bob:1:$1.75"]
    assert main(["usage", "--ledger", str(path), "--user", "bob", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["currency"] == "USD"
    assert [(r["user"], r["reserved"]) for r in report["rows"]] == [("bob", 1.75)]
    assert main(["usage", "--ledger", str(path), "--since", "2025-06-04"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PERIOD USER BANK DEVICE TASKS SPENT RESERVED TOTAL"
    ]
    assert main(["usage", "--ledger", str(path), "-o", "{cost}"]) == 1
    assert "unknown field '{cost}' (accepted: period, user" in capsys.readouterr().err
    assert main(["usage", "--ledger", str(path), "--since", "last week"]) == 1
    assert "--since must be a date such as 2025-06-01" in capsys.readouterr().err


def test_usage_command_shows_a_reader_who_is_not_the_owner_only_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flux_quantum.cli.main import main

    path = tmp_path / "ledger.db"
    filled(path)
    with Ledger(path) as ledger:
        ledger.reserve(charge("mine", userid=os.getuid(), user="me"), QUOTA)
    if os.getuid() != 0:
        pytest.skip("needs root to give the ledger file to another owner")
    os.chown(path, 4321, -1)  # the instance owner is somebody else
    assert main(["usage", "--ledger", str(path), "--by", "user", "-n", "-o", "{user}"]) == 0
    assert capsys.readouterr().out.splitlines() == ["me"]
    assert main(["usage", "--ledger", str(path), "--user", "alice"]) == 1
    assert "a guest sees only their own usage" in capsys.readouterr().err


def test_the_services_usage_rpc(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    filled(path)
    owner, bob = 500, 1001
    with Ledger(path) as ledger:
        everyone = serve_usage(ledger, UsageQuery(group_by=["user"]).to_dict(), owner, owner)
        assert [r["user"] for r in everyone["rows"]] == ["alice", "bob"]
        mine = serve_usage(ledger, {"group_by": ["user"]}, bob, owner)
        assert mine == {"currency": "USD", "rows": [mine["rows"][0]]}
        assert mine["rows"][0]["user"] == "bob"
        with pytest.raises(GuestError):
            serve_usage(ledger, {"user": "alice"}, bob, owner)
        with pytest.raises(ValueError, match="usage: period must be one of day, month, all"):
            serve_usage(ledger, {"period": "week"}, owner, owner)
        with pytest.raises(ValueError, match="usage: since must be epoch seconds"):
            serve_usage(ledger, {"since": "yesterday"}, owner, owner)


def test_a_simulator_task_settles_at_its_billed_run_time(tmp_path: Path, make_emulator) -> None:
    # sv1 runs for 8 emulated seconds: Braket bills 8 s (above the 3 s minimum).
    emu = make_emulator(
        {"extends": "default", "devices": [{"name": "SV1", "queue": {"service_time": 8.0}}]}
    )
    clock = emu.clock
    vendor = BraketVendor(devices=[SV1], clock=lambda: clock.epoch.timestamp() + clock.now())
    program = "OPENQASM 3; qubit[2] q; h q[0]; cnot q[0], q[1];"
    with Ledger(tmp_path / "ledger.db") as ledger:
        token = "fq-3-1-0-0"
        reserved = ledger.reserve(charge(token, SV1, shots=100, jobid=3), QUOTA)
        assert reserved.allowed
        task = vendor.submit(SV1, program, 100, token)  # type: ignore[arg-type]
        ledger.attach(token, task.task_id)
        clock.advance(20)
        assert vendor.poll(task).state is TaskState.COMPLETED
        billed = execution_seconds(vendor.result(task).raw)
        assert billed == pytest.approx(8.0)
        cost = actual_cost(SV1.price, 100, billed)  # type: ignore[union-attr]
        assert cost == pytest.approx(0.075 * 8 / 60)
        record = ledger.settle(
            token, cost, now=JUNE_3 + 20, task_id=task.task_id, billed_seconds=billed
        )
    assert (record.state, record.billed_seconds, record.task_id) == ("settled", 8.0, task.task_id)
    assert record.cost == pytest.approx(0.01)
    assert execution_seconds({"additionalMetadata": {"simulatorMetadata": None}}) is None


# --- the service's entry points (flux_quantum.site.policy) ---------------------------------


def test_site_policy_as_the_service_uses_it(tmp_path: Path) -> None:
    quantum = {
        "access": {"rules": [{"devices": ["forte1"], "banks": ["chem"], "allow": False}]},
        "quota": {"limits": [{"bank": "*", "period": "day", "spend": 4.0}]},
    }
    site = SitePolicy.from_config(quantum, statedir=str(tmp_path))
    assert site.ledger.path == tmp_path / "flux-quantum" / "ledger.db"
    uid = os.getuid()
    jobspec = {"attributes": {"system": {"qpu": "any", "bank": "chem"}}}
    who = site.requester(uid, jobspec)
    assert who.bank == "chem" and who.user is not None
    assert site.requester(uid, {"attributes": {"system": {}}}).bank is None
    request = parse_request({"policy": "min-cost", "class": "qpu"})
    snaps = {d.name: DeviceSnapshot(d.name, DeviceStatus.ONLINE, queue_depth=0) for d in CATALOG}

    def run_job(jobid: int) -> str:
        """One job as the service runs it: exclude, select, reserve, create, settle."""
        token = f"fq-{jobid}-1-0-0"
        excluded = site.excluded(
            who, CATALOG.devices, token=token, jobid=jobid, shots=1000, t=JUNE_3
        )
        chosen = select_device(CATALOG.devices, snaps, request, excluded=excluded).device
        charge = site.charge(chosen, who, token=token, jobid=jobid, shots=1000, t=JUNE_3)
        assert site.reserve(charge).allowed
        site.settle(token, chosen, shots=1000, state="COMPLETED", now=JUNE_3 + 60)
        return chosen.name

    assert run_job(1) == "garnet"
    assert run_job(2) == "garnet"  # $3.50 of chem's $4.00
    with pytest.raises(NoDeviceError) as caught:
        run_job(3)
    message = str(caught.value)
    assert "forte1 not allowed: user" in message
    assert "garnet over quota: [quantum.quota] limit 1: bank chem, $4.00 a day;" in message
    assert site.job_cost(1) == pytest.approx(1.75)
    site.close()


def test_a_batch_is_checked_at_its_priciest_allowed_device(tmp_path: Path) -> None:
    """Before a batch's first task: every task at the priciest device the job may use,
    access refusals left out, nothing recorded."""
    quantum = {
        "access": {"rules": [{"devices": ["forte1"], "banks": ["chem"], "allow": False}]},
        "quota": {"limits": [{"bank": "*", "period": "day", "spend": 10.0}]},
    }
    site = SitePolicy.from_config(quantum, statedir=str(tmp_path))
    who = site.requester(os.getuid(), {"attributes": {"system": {"bank": "chem"}}})
    pool = [CATALOG.get("garnet"), CATALOG.get("forte1")]
    fields = dict(token="fq-9-1-0-0", jobid=9, shots=1000, t=JUNE_3)
    fits = site.check_batch(who, pool, tasks=5, **fields)  # 5 x $1.75 on garnet
    assert fits is not None and fits.allowed, fits
    over = site.check_batch(who, pool, tasks=6, **fields)
    assert over is not None and not over.allowed
    assert over.reason == (
        "over quota: [quantum.quota] limit 1: bank chem, $10.00 a day; $0.00 spent or reserved"
        " this day (2025-06-03), its 6 tasks may cost up to $10.50"
    )
    assert site.check_batch(who, [CATALOG.get("forte1")], tasks=6, **fields) is None
    assert site.job_cost(9) == 0.0  # checked, not reserved
    site.close()


def test_site_policy_settles_what_the_vendor_bills(tmp_path: Path) -> None:
    site = SitePolicy.from_config({"ledger": {"path": str(tmp_path / "l.db")}})
    who = site.requester(1000, {})
    for token, device in (("q-failed", GARNET), ("q-done", GARNET), ("s-done", SV1),
                          ("s-failed", SV1), ("s-nometa", SV1)):  # fmt: skip
        site.reserve(site.charge(device, who, token=token, jobid=1, shots=1000, t=JUNE_3))  # type: ignore[arg-type]
    costs = {
        "q-failed": site.settle("q-failed", GARNET, shots=1000, state="FAILED", now=JUNE_3),  # type: ignore[arg-type]
        "q-done": site.settle("q-done", GARNET, shots=1000, state="COMPLETED", now=JUNE_3),  # type: ignore[arg-type]
        "s-done": site.settle(
            "s-done",
            SV1,
            shots=1000,
            state="COMPLETED",
            now=JUNE_3,  # type: ignore[arg-type]
            billed_seconds=120.0,
        ),  # fmt: skip
        "s-failed": site.settle("s-failed", SV1, shots=1000, state="FAILED", now=JUNE_3),  # type: ignore[arg-type]
        "s-nometa": site.settle("s-nometa", SV1, shots=1000, state="COMPLETED", now=JUNE_3),  # type: ignore[arg-type]
    }
    assert {k: round(v.cost or 0, 5) for k, v in costs.items()} == {
        "q-failed": 0.0,
        "q-done": 1.75,
        "s-done": 0.15,
        "s-failed": 0.0,
        "s-nometa": 0.00375,  # the 3 s minimum
    }
    # a simulator's next estimate learns from its billed run times once there are three
    site.reserve(site.charge(SV1, who, token="s-more", jobid=1, shots=1, t=JUNE_3))  # type: ignore[arg-type]
    site.settle("s-more", SV1, shots=1, state="COMPLETED", now=JUNE_3 + 1, billed_seconds=120.0)  # type: ignore[arg-type]
    site.reserve(site.charge(SV1, who, token="s-more2", jobid=1, shots=1, t=JUNE_3))  # type: ignore[arg-type]
    site.settle("s-more2", SV1, shots=1, state="COMPLETED", now=JUNE_3 + 2, billed_seconds=60.0)  # type: ignore[arg-type]
    estimate = site.charge(SV1, who, token="next", jobid=1, shots=1, t=JUNE_3).estimate  # type: ignore[arg-type]
    assert estimate == pytest.approx(0.075 * 120 / 60)  # median of 120, 120, 60
    assert site.release("never", now=JUNE_3, reason="x") is None
    site.close()


# --- reserved windows (Braket Direct) ------------------------------------------------------

ARN = "arn:aws:braket:us-east-1:123456789012:reservation/a1b2c3d4-forte"
WINDOW = {
    "name": "forte-jun03",
    "device": "forte1",
    "arn": ARN,
    "start": {"iso-8601-ts": "2025-06-03T16:00:00Z"},  # as flux config get gives a date-time
    "end": "2025-06-03T18:00:00Z",
    "cost": 14000.0,
    "bank": "chem",
}
START = datetime(2025, 6, 3, 16, tzinfo=UTC).timestamp()


def site_with_windows(tmp_path: Path, quota: dict | None = None, **window) -> SitePolicy:  # type: ignore[type-arg]
    quantum = {
        "ledger": {"path": str(tmp_path / "ledger.db")},
        "reservations": [{**WINDOW, **window}],
        **({"quota": quota} if quota else {}),
    }
    return SitePolicy.from_config(quantum, devices={d.name: d for d in CATALOG})


def test_a_window_is_booked_once_as_the_sites_or_its_banks_spend(tmp_path: Path) -> None:
    site = site_with_windows(tmp_path)
    assert [w.name for w in site.reservations] == ["forte-jun03"]
    first = site.book_windows(JUNE_3)
    again = site.book_windows(JUNE_3 + DAY)
    assert first == again and len(first) == 1
    row = first[0]
    assert (row.token, row.userid, row.user, row.bank, row.jobid) == (
        f"window:{ARN}",
        -1,
        "(site)",
        "chem",
        0,
    )
    assert (row.device, row.vendor, row.device_class, row.shots) == ("forte1", "braket", "qpu", 0)
    assert (row.estimate, row.cost, row.state) == (14000.0, 14000.0, "settled")
    assert (row.reserved_at, row.settled_at, row.task_id) == (START, START, ARN)
    assert row.note == "reservation forte-jun03 2025-06-03T16:00:00Z..2025-06-03T18:00:00Z"
    assert row.site and row.reservation == "forte-jun03"
    rows = site.ledger.usage(UsageQuery(period="all"))
    assert [(r.user, r.bank, r.device, r.tasks, r.spent) for r in rows] == [
        ("(site)", "chem", "forte1", 0, 14000.0)
    ]
    assert site.ledger.window_use("forte-jun03") == (0, 0.0, 0.0)
    site.close()
    # a window no bank booked is the site's alone; booked again by a service whose
    # configuration changed it (same ARN), the first row stays
    unbanked = {k: v for k, v in WINDOW.items() if k != "bank"} | {"cost": 1.0}
    first_site = SitePolicy.from_config(
        {"ledger": {"path": str(tmp_path / "b.db")}, "reservations": [unbanked]}
    )
    assert first_site.book_windows(JUNE_3)[0].bank is None
    first_site.close()
    site = SitePolicy.from_config(
        {"ledger": {"path": str(tmp_path / "b.db")}, "reservations": [WINDOW]}
    )
    assert [(r.cost, r.bank, r.vendor) for r in site.book_windows(JUNE_3)] == [
        (1.0, None, "braket")
    ]
    assert len(site.ledger.usage(UsageQuery(period="all", group_by=("user",)))) == 1
    site.close()


def test_a_task_in_a_window_is_free_and_records_its_qpu_time_and_share(tmp_path: Path) -> None:
    # chem's month: 14,000 for the window leaves 5 of 14,005; alice 20 a day of her own
    quota = {
        "limits": [
            {"bank": "chem", "period": "month", "spend": 14005.0},
            {"user": "*", "period": "day", "spend": 20.0},
            {"user": "*", "period": "day", "tasks": 3},
        ]
    }
    site = site_with_windows(tmp_path, quota)
    site.book_windows(JUNE_3)
    window = site.reservations.lookup("forte-jun03")
    alice = Requester(1000, "alice", "chem")
    # outside the window a forte1 task of 1000 shots is 80.30: over the bank's month
    ordinary = site.charge(FORTE, alice, token="o1", jobid=5, shots=1000, t=JUNE_3)  # type: ignore[arg-type]
    refused = site.reserve(ordinary)
    assert not refused.allowed
    assert refused.decision.reason.startswith("over quota: [quantum.quota] limit 1: bank chem")
    # in it, nothing: neither the bank's spend (over because of the window) nor a job cap
    # refuses it; the users' task limit still counts it
    tokens = []
    for i in range(4):
        token = f"w{i}"
        held = site.charge(
            FORTE, alice, token=token, jobid=6, shots=1000, t=START, job_cap=0.0,  # type: ignore[arg-type]
            reservation=window,
        )  # fmt: skip
        assert (held.estimate, held.reservation) == (0.0, "forte-jun03")
        reserved = site.reserve(held)
        if i < 3:
            assert reserved.allowed, reserved.decision.reason
            assert reserved.decision.reason == (
                "within 3 limit(s); this task on forte1 would cost $0.00 (in reservation "
                "forte-jun03)"
            )
            tokens.append(token)
    assert not reserved.allowed
    assert "over quota: [quantum.quota] limit 3: user alice, 3 tasks a day" in (
        reserved.decision.reason
    )
    assert site.job_cost(6) == 0.0
    assert site.ledger.window_use("forte-jun03") == (3, 0.0, 0.0)  # reserved, not yet run
    first = site.settle(
        tokens[0], FORTE, shots=1000, state="COMPLETED", now=START + 900,  # type: ignore[arg-type]
        task_id="arn:task/1", reservation=window, qpu_seconds=1800.0,
    )  # fmt: skip
    assert (first.cost, first.reservation, first.qpu_seconds) == (0.0, "forte-jun03", 1800.0)
    assert first.share == pytest.approx(3500.0)  # a quarter of the two hours
    # settling twice changes nothing
    again = site.settle(
        tokens[0], FORTE, shots=1000, state="COMPLETED", now=START + 999,  # type: ignore[arg-type]
        reservation=window, qpu_seconds=5.0,
    )  # fmt: skip
    assert again == first
    site.settle(
        tokens[1], FORTE, shots=1000, state="CANCELLED", now=START + 7200,  # type: ignore[arg-type]
        reservation=window, qpu_seconds=None,
    )  # fmt: skip
    site.settle(
        tokens[2], FORTE, shots=1000, state="COMPLETED", now=START + 3600,  # type: ignore[arg-type]
        reservation=window, qpu_seconds=900.0,
    )  # fmt: skip
    tasks, seconds, share = site.window_use(window)
    assert (tasks, seconds) == (3, 2700.0) and share == pytest.approx(5250.0)
    assert site.ledger.record(tokens[1]).share == 0.0  # type: ignore[union-attr]
    # the per-window view: the window's cost and its tasks' time, per user
    rows = site.ledger.usage(UsageQuery(period="all", group_by=("user", "reservation")))
    assert [(r.user, r.reservation, r.tasks, r.spent, r.qpu_seconds) for r in rows] == [
        ("(site)", "forte-jun03", 0, 14000.0, 0.0),
        ("alice", "forte-jun03", 3, 0.0, 2700.0),  # the refused tasks left no row
    ]
    # a guest sees their own rows, never the site's
    assert [r.user for r in site.ledger.usage(restrict_to_caller(UsageQuery(), 1000, 1))] == [
        "alice"
    ]
    site.close()


def test_user_limits_never_count_the_sites_rows(tmp_path: Path) -> None:
    quota = {"limits": [{"user": "*", "period": "month", "spend": 10.0, "tasks": 2}]}
    site = site_with_windows(tmp_path, quota)
    site.book_windows(JUNE_3)  # 14,000 of the site's, to bank chem
    bob = Requester(1001, "bob", "chem")
    for token in ("b1", "b2"):
        charge_ = site.charge(GARNET, bob, token=token, jobid=9, shots=1000, t=START)  # type: ignore[arg-type]
        assert site.reserve(charge_).allowed  # 1.75 each, two tasks: within bob's month
    # a bank task limit does not count the window as a task
    quota = {"limits": [{"bank": "chem", "period": "month", "tasks": 1}]}
    bank = site_with_windows(tmp_path / "bank", quota)
    bank.book_windows(JUNE_3)
    charge_ = bank.charge(GARNET, bob, token="b1", jobid=9, shots=1000, t=START)  # type: ignore[arg-type]
    decision = bank.reserve(charge_).decision
    assert decision.allowed and decision.checks[0].used.tasks == 0
    assert decision.checks[0].used.spend == 14000.0
    site.close()
    bank.close()


def test_a_ledger_of_the_schema_before_windows_is_migrated_in_place(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    db = sqlite3.connect(old)
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('currency', 'USD')")
    db.execute(OLD_INSERT, ("a1", 7, 1000, "alice", "chem", "garnet", "braket", "qpu", 1000,
                            1.75, "reserved", JUNE_3, "2025-06-03", "2025-06", None))  # fmt: skip
    db.commit()
    db.close()
    # a reader of the file not yet migrated sees its rows and no window
    with Ledger(old, readonly=True) as reader:
        rows = reader.usage(UsageQuery(group_by=("user", "reservation")))
        assert [(r.user, r.reservation, r.tasks) for r in rows] == [("alice", "-", 1)]
        assert reader.window_use("forte-jun03") == (0, 0.0, 0.0)
        assert reader.record("a1").reservation is None  # type: ignore[union-attr]
    # the service opens it: the columns are added, its rows kept and settled as before
    site = SitePolicy.from_config(
        {"ledger": {"path": str(old)}, "reservations": [WINDOW]},
        devices={d.name: d for d in CATALOG},
    )
    columns = {row[1] for row in sqlite3.connect(old).execute("PRAGMA table_info(charges)")}
    assert {"reservation", "qpu_seconds", "share"} <= columns
    settled = site.ledger.settle("a1", 1.75, now=JUNE_3 + 60)
    assert (settled.state, settled.cost, settled.reservation) == ("settled", 1.75, None)
    site.book_windows(JUNE_3)
    window = site.reservations.lookup("forte-jun03")
    who = Requester(1000, "alice", "chem")
    held = site.charge(FORTE, who, token="w1", jobid=8, shots=10, t=START, reservation=window)  # type: ignore[arg-type]
    assert site.reserve(held).allowed
    site.settle("w1", FORTE, shots=10, state="COMPLETED", now=START + 60,  # type: ignore[arg-type]
                reservation=window, qpu_seconds=72.0)  # fmt: skip
    assert site.window_use(window) == (1, 72.0, pytest.approx(140.0))
    site.close()
    # opened again (a restart), nothing changes; an older flux-quantum's INSERT still works
    with Ledger(old) as again:
        assert again.window_use("forte-jun03") == (1, 72.0, pytest.approx(140.0))
        again._db.execute(OLD_INSERT, ("b1", 9, 1001, "bob", None, "garnet", "braket", "qpu",
                                       10, 0.3, "reserved", JUNE_3, "2025-06-03", "2025-06",
                                       None))  # fmt: skip
        assert again.record("b1").reservation is None  # type: ignore[union-attr]
        assert len(again.usage(UsageQuery(period="all", group_by=("user",)))) == 3


def test_usage_command_per_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flux_quantum.cli.main import main

    site = site_with_windows(tmp_path)
    site.book_windows(JUNE_3)
    window = site.reservations.lookup("forte-jun03")
    who = Requester(1000, "alice", "chem")
    held = site.charge(FORTE, who, token="w1", jobid=8, shots=10, t=START, reservation=window)  # type: ignore[arg-type]
    site.reserve(held)
    site.settle("w1", FORTE, shots=10, state="COMPLETED", now=START + 60,  # type: ignore[arg-type]
                reservation=window, qpu_seconds=720.0)  # fmt: skip
    site.close()
    path = str(tmp_path / "ledger.db")
    assert main(["usage", "--ledger", path]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PERIOD  USER   BANK DEVICE TASKS      SPENT RESERVED      TOTAL",
        "2025-06 (site) chem forte1     0 $14,000.00    $0.00 $14,000.00",
        "2025-06 alice  chem forte1     1      $0.00    $0.00      $0.00",
    ]
    assert main(["usage", "--ledger", path, "--by", "reservation", "--period", "all"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "PERIOD USER BANK DEVICE RESERVATION TASKS      SPENT RESERVED      TOTAL QPU_SECONDS"
        "     SHARE",
        "*      *    *    *      forte-jun03     1 $14,000.00    $0.00 $14,000.00         720"
        " $1,400.00",
    ]
    assert main(["usage", "--ledger", path, "--user", "(site)", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["user"], r["total"]) for r in rows] == [("(site)", 14000.0)]


# The ledger's schema before reserved windows (flux-quantum up to 8da4f73), to migrate.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    token TEXT PRIMARY KEY, jobid INTEGER NOT NULL, userid INTEGER NOT NULL, username TEXT,
    bank TEXT, device TEXT NOT NULL, vendor TEXT NOT NULL, class TEXT NOT NULL,
    shots INTEGER NOT NULL, estimate REAL NOT NULL, cost REAL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled', 'released')),
    reserved_at REAL NOT NULL, settled_at REAL, day TEXT NOT NULL, month TEXT NOT NULL,
    task_id TEXT, billed_seconds REAL, note TEXT
);
CREATE INDEX IF NOT EXISTS charges_user ON charges (userid, reserved_at);
CREATE INDEX IF NOT EXISTS charges_bank ON charges (bank, reserved_at);
CREATE INDEX IF NOT EXISTS charges_job ON charges (jobid);
CREATE INDEX IF NOT EXISTS charges_device ON charges (device, state, settled_at);
"""
OLD_INSERT = (
    "INSERT INTO charges (token, jobid, userid, username, bank, device, vendor,"
    " class, shots, estimate, state, reserved_at, day, month, note)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def test_a_bad_reservation_table_stops_the_site_policy_before_its_ledger(tmp_path: Path) -> None:
    from flux_quantum.site.reservations import ReservationConfigError

    path = tmp_path / "ledger.db"
    bad = {**WINDOW, "device": "nope"}
    with pytest.raises(ReservationConfigError, match=r"\.device 'nope' is not in the catalog"):
        SitePolicy.from_config(
            {"ledger": {"path": str(path)}, "reservations": [bad]},
            devices={d.name: d for d in CATALOG},
        )
    assert not path.exists()


# --- clusters, the schema's versions, [quantum.ledger] -------------------------------------


def test_an_old_ledger_is_migrated_and_its_rows_are_the_local_clusters(tmp_path: Path) -> None:
    """A ledger of the first schema (no windows, no clusters) opened by the service:
    the current version (3: the usage fed to flux-accounting), the schema_version
    table, its rows the configured cluster's, settled and recovered as before; usage by
    cluster shows them."""
    old = tmp_path / "old.db"
    db = sqlite3.connect(old)
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1'), ('currency', 'USD')")
    for token in ("a1", "a2"):
        db.execute(OLD_INSERT, (token, 7, 1000, "alice", "chem", "garnet", "braket", "qpu",
                                1000, 1.75, "reserved", JUNE_3, "2025-06-03", "2025-06", None))  # fmt: skip
    db.commit()
    db.close()
    site = SitePolicy.from_config({"ledger": {"path": str(old), "cluster": "hpc1"}})
    ledger = site.ledger
    assert (ledger.backend, ledger.cluster) == ("sqlite", "hpc1")
    assert [r.cluster for r in ledger.open_reservations()] == ["hpc1", "hpc1"]
    assert ledger.settle("a1", 1.5, now=JUNE_3 + 60).cluster == "hpc1"
    assert ledger.job_cost(7) == pytest.approx(3.25)
    rows = ledger.usage(UsageQuery(period="all", group_by=("cluster", "user")))
    assert [(r.cluster, r.user, r.tasks) for r in rows] == [("hpc1", "alice", 2)]
    assert rows[0].to_dict()["cluster"] == "hpc1"
    site.close()
    with closing(sqlite3.connect(old)) as check:
        assert check.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            "3",
        )
        versions = check.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
        assert versions == [(1,), (2,), (3,)]
    # a ledger of a newer flux-quantum is refused with the sentence that says what to do
    with closing(sqlite3.connect(old)) as newer:
        newer.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        newer.commit()
    with pytest.raises(LedgerError, match="ledger schema 4 is newer than this flux-quantum"):
        Ledger(old)


def test_usage_command_by_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flux_quantum.cli.main import main

    path = tmp_path / "ledger.db"
    for cluster, token in (("hpc1", "t1"), ("hpc2", "t2")):
        with Ledger(path, cluster=cluster) as ledger:
            ledger.reserve(charge(token), QUOTA)
    assert main(["usage", "--ledger", str(path), "--by", "cluster,user", "--period", "all"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "CLUSTER PERIOD USER  BANK DEVICE TASKS SPENT RESERVED TOTAL",
        "hpc1    *      alice *    *          1 $0.00    $1.75 $1.75",
        "hpc2    *      alice *    *          1 $0.00    $1.75 $1.75",
    ]
    assert main(["usage", "--ledger", str(path), "--cluster", "hpc2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["user"], r["total"]) for r in rows] == [("alice", 1.75)]
    assert "cluster" not in rows[0]  # not grouped by it: the rows as before


@pytest.mark.parametrize(
    ("table", "sentence"),
    [
        ({"url": "mysql://db/x"}, "[quantum.ledger] url must be postgresql://HOST:PORT/DATABASE"),
        ({"url": "postgresql://fq:secret@db/x"}, "[quantum.ledger] url must not contain a password"),
        ({"url": "postgresql://db/x?password=s"}, "[quantum.ledger] url must not contain a password"),
        ({"url": "postgresql://db:99999/x"}, "[quantum.ledger] url is not a URL"),
        ({"url": "postgresql://db/"}, "[quantum.ledger] url names no database"),
        ({"url": "postgresql://db/x", "path": "/l.db"}, "[quantum.ledger] path (a SQLite file) and url"),
        ({"credentials": "/c"}, "[quantum.ledger] credentials is the password of a PostgreSQL url"),
        ({"url": "postgresql://db/x", "credentials": "c"}, "[quantum.ledger] credentials must be an absolute path"),
        ({"cluster": "a b"}, "[quantum.ledger] cluster must be a name of letters"),
        ({"cluster": 3}, "[quantum.ledger] cluster must be a non-empty string, got 3"),
        ({"connect_timeout": 0}, "[quantum.ledger] connect_timeout must be whole seconds"),
        ({"host": "db"}, "[quantum.ledger] has no key 'host'"),
    ],
)  # fmt: skip
def test_a_bad_ledger_table_is_one_sentence_naming_the_key(table: dict, sentence: str) -> None:
    from flux_quantum.site.ledger import LedgerConfig, LedgerConfigError

    with pytest.raises(LedgerConfigError) as caught:
        LedgerConfig.from_config(table)
    assert str(caught.value).startswith(sentence)
    with pytest.raises(ValueError, match=r"^\[quantum.ledger\]"):
        SitePolicy.from_config({"ledger": table})


def test_the_credentials_file_must_be_the_services_and_private(tmp_path: Path) -> None:
    from flux_quantum.site.ledger_store import read_credentials

    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o640)
    with pytest.raises(LedgerError) as caught:
        read_credentials(str(secret))
    assert str(caught.value) == (
        f"[quantum.ledger] credentials {secret} must be owned by uid {os.geteuid()} (the "
        f"service's user) with no access for group or others (chmod 600); it is owned by uid "
        f"{os.geteuid()} with mode 0640"
    )
    secret.chmod(0o600)
    assert read_credentials(str(secret)) == "s3cret"
    with pytest.raises(LedgerError, match="must be owned by uid 4242"):
        read_credentials(str(secret), uid=4242)
    with pytest.raises(LedgerError, match="cannot open it: No such file or directory"):
        read_credentials(str(tmp_path / "none"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(LedgerError, match="its first line is empty"):
        read_credentials(str(empty))
    # the site policy refuses a PostgreSQL ledger whose credentials are readable by others
    secret.chmod(0o644)
    table = {"url": "postgresql://127.0.0.1:1/x?user=fq", "credentials": str(secret)}
    with pytest.raises(LedgerError, match="no access for group or others"):
        SitePolicy.from_config({"ledger": table})
