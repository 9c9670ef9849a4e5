"""Unit tier: the site policy inside the handler service (``service/charges.py``), end
to end through ``QuantumService`` on the fakes of the outside world (Flux in memory, a
scripted vendor, a manual clock) and a real SQLite ledger in a temporary directory.

Who may use which device comes from the job's owner as Flux reports it; a task's
estimate is reserved before its create (a refusal fails the job and the vendor never
hears of it); a task that ends is settled at its cost, posted as ``qpu-cost`` and shown
as the ``qpu_cost`` memo; a restarted service counts every task once."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from service_fakes import OWNER, Clock, Harness, QueueModel, ScriptedVendor, at_front

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import select_device
from flux_quantum.service import compact_explanation
from flux_quantum.site.ledger import Ledger, UsageQuery
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import Charge
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus, TaskRef, TaskResult
from flux_quantum.vendors.braket.parsing import execution_seconds
from flux_quantum.vendors.errors import InvalidRequest

# alpha: $0.30 + $0.001 x 1000 shots = $1.30 a task; beta $2.30; solo $1.30.
ALPHA = 1.3


class BillingVendor(ScriptedVendor):
    """The scripted vendor, whose simulator results report a billed run time."""

    run_seconds = 12.0

    def result(self, task: TaskRef) -> TaskResult:
        self._call("result", task.task_id)
        raw = {"additionalMetadata": {"simulatorMetadata": {"executionDuration": 12000}}}
        return TaskResult(task, {"00": 1}, raw)

    def billed_seconds(self, task: TaskRef) -> float | None:
        return execution_seconds(self.result(task).raw)


class SiteHarness(Harness):
    """A Harness whose service enforces ``quantum`` (the ``[quantum]`` table) with a
    ledger at ``ledger``."""

    def __init__(self, ledger: Path, quantum: dict[str, Any] | None = None, **kw: Any) -> None:
        clock = kw.pop("clock", None) or Clock()
        flux = kw.get("flux")
        journal = flux.journal if flux is not None else []
        vendor = kw.pop("vendor", None) or BillingVendor(clock, DEFAULT_QUEUES, journal)
        site = site_policy(ledger, quantum)
        super().__init__(clock=clock, vendor=vendor, site=site, vendor_names=("local",), **kw)
        if flux is None:
            self.flux.journal = vendor.journal
        self.ledger_path = ledger
        self.quantum = quantum
        self.site = site

    def restart_site(self, quantum: dict[str, Any] | None = None) -> SiteHarness:
        """A new service on the same world and ledger file (the old one is gone)."""
        self.site.close()
        return SiteHarness(
            self.ledger_path,
            self.quantum if quantum is None else quantum,
            flux=self.flux,
            vendor=self.vendor,
            clock=self.clock,
            catalog=self.catalog,
        )

    def rows(self) -> dict[str, Any]:
        """The ledger's rows by token."""
        if not self.ledger_path.exists():
            return {}
        with closing(sqlite3.connect(self.ledger_path)) as db:
            tokens = [row[0] for row in db.execute("SELECT token FROM charges")]
        with Ledger(self.ledger_path, readonly=True) as ledger:
            return {token: ledger.record(token) for token in tokens}

    def submits(self) -> int:
        return self.vendor.count("submit")


DEFAULT_QUEUES = {
    "alpha": QueueModel(3),
    "beta": QueueModel(5),
    "solo": QueueModel(1),
    "sim": QueueModel(0, service=1.0),
}


def site_policy(path: Path, quantum: dict[str, Any] | None) -> SitePolicy:
    table = dict(quantum or {})
    table["ledger"] = {"path": str(path)}
    return SitePolicy.from_config(table)


def limit(spend: float, **who: Any) -> dict[str, Any]:
    return {"quota": {"limits": [{"period": "day", "spend": spend, **(who or {"user": "*"})}]}}


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "state" / "ledger.db"


def verdicts_of(h: Harness, job: int) -> dict[str, str]:
    """The qpu-select explanation's verdict per device."""
    candidates = h.flux.last(job, events.SELECT).explanation["candidates"]
    return {c["device"]: c["verdict"] for c in candidates}


# --- access -------------------------------------------------------------------------------


def test_a_device_the_owner_may_not_use_is_never_probed_and_the_job_fails_naming_the_rule(
    ledger,
):
    rules = {
        "rules": [{"name": "no-alpha", "devices": ["alpha"], "users": [OWNER], "allow": False}]
    }
    h = SiteHarness(ledger, {"access": rules})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "failed")
    note = h.flux.jobs[job].note
    assert "may not use device alpha" in note
    assert "[quantum.access] rule 1 'no-alpha' denies devices alpha" in note
    assert ("probe", "alpha") not in h.vendor.calls
    assert h.submits() == 0


def test_the_requester_is_the_jobs_owner_not_what_its_jobspec_claims(ledger):
    """Root may use alpha, nobody else; a job whose jobspec claims to be root's is
    still its owner's (the plugin's list says who submitted it)."""
    rules = {
        "default": "deny",
        "rules": [{"devices": ["alpha"], "users": [0, "root"], "allow": True}],
    }
    h = SiteHarness(ledger, {"access": rules})
    job = h.flux.submit(at_front("alpha"))
    h.flux.jobs[job].jobspec["attributes"]["system"].update(user="root", userid=0)
    h.until(lambda: h.state(job) == "failed")
    assert f"user {h.site.requester(OWNER, {}).user or OWNER}" in h.flux.jobs[job].note
    assert "may not use device alpha" in h.flux.jobs[job].note
    assert h.submits() == 0


def test_policy_selection_considers_only_the_devices_the_owner_may_use(ledger):
    # min-cost would pick alpha (or solo, as cheap); the site allows beta and sim only.
    rules = {"default": "deny", "rules": [{"devices": ["beta", "sim"], "allow": True}]}
    h = SiteHarness(ledger, {"access": rules})
    job = h.flux.submit({"device": "any", "class": "qpu", "policy": "min-cost", "release_at": 1})
    h.until(lambda: h.state(job) == "released")
    assert h.flux.jobs[job].release["device"] == "beta"
    probed = {what for op, what in h.vendor.calls if op == "probe"}
    assert probed == {"beta"}
    verdicts = verdicts_of(h, job)
    assert verdicts["alpha"].startswith("dropped: not allowed:")


def test_the_bank_comes_from_the_current_jobspec(ledger):
    """flux-accounting fills in the bank after submit: the rule on the bank applies to
    what the jobspec says when the service reads it."""
    rules = {"rules": [{"banks": ["chem"], "classes": ["qpu"], "allow": False}]}
    h = SiteHarness(ledger, {"access": rules})
    job = h.flux.submit(at_front("alpha"))
    h.flux.jobs[job].jobspec["attributes"]["system"]["bank"] = "chem"
    h.until(lambda: h.state(job) == "failed")
    assert "(bank chem) may not use device alpha" in h.flux.jobs[job].note


# --- quotas: reserve before the create ------------------------------------------------------


def test_over_quota_fails_with_the_limit_and_the_vendor_never_hears_of_it(ledger):
    h = SiteHarness(ledger, limit(1.0))
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "failed")
    note = h.flux.jobs[job].note
    assert "over quota: [quantum.quota] limit 1" in note
    assert "$1.00 a day" in note and "$0.00 spent or reserved" in note
    assert "this task on alpha would cost $1.30" in note
    assert h.submits() == 0
    assert h.rows() == {}


def test_two_jobs_racing_for_the_last_headroom_one_is_created_the_other_fails(ledger):
    """Both pass the check at selection; the reservation before the create is the one
    that counts, so the second fails with the limit and is never created."""
    h = SiteHarness(ledger, limit(2.0))
    first = h.flux.submit(at_front("alpha"))
    second = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(second) == "failed" and h.state(first) == "released")
    assert "over quota" in h.flux.jobs[second].note
    assert "$1.30 spent or reserved" in h.flux.jobs[second].note
    assert h.submits() == 1
    assert events.SUBMIT not in h.flux.names(second)
    (row,) = h.rows().values()
    assert row.jobid == first and row.task_id == h.flux.jobs[first].release["task"]


def test_any_request_over_quota_on_one_device_picks_another_that_fits(ledger):
    """A limit on alpha only: a policy request goes to solo (as cheap) and says why."""
    quota = {
        "quota": {"limits": [{"user": "*", "period": "day", "spend": 1.0, "devices": ["alpha"]}]}
    }
    h = SiteHarness(ledger, quota)
    job = h.flux.submit({"device": "any", "class": "qpu", "policy": "min-cost", "release_at": 1})
    h.until(lambda: h.state(job) == "released")
    assert h.flux.jobs[job].release["device"] == "solo"
    verdicts = verdicts_of(h, job)
    assert verdicts["alpha"].startswith("dropped: over quota: [quantum.quota] limit 1")


def test_a_bank_limit_counts_every_users_tasks(ledger):
    """bob (another user, same bank) spent $1.30 today; the owner's first task fits the
    bank's $3.50, the second does not. The per-user limit ($3.00) counts only the
    owner's own tasks, so it is the bank's limit that refuses."""
    quantum = {
        "quota": {
            "limits": [
                {"name": "each-user", "user": "*", "period": "day", "spend": 3.0},
                {"name": "chem", "bank": "chem", "period": "day", "spend": 3.5},
            ]
        }
    }
    h = SiteHarness(ledger, quantum)
    bob = Charge(
        token="bob-1", jobid=1, userid=1001, user="bob", bank="chem", device="beta",
        vendor="local", device_class="qpu", shots=1000, estimate=1.0, t=h.clock(),
    )  # fmt: skip
    assert h.site.reserve(bob).allowed
    h.site.settle("bob-1", h.catalog.get("beta"), shots=500, state="COMPLETED", now=h.clock())
    first = h.flux.submit(at_front("alpha"))
    h.flux.jobs[first].jobspec["attributes"]["system"]["bank"] = "chem"
    h.until(lambda: h.state(first) == "released")
    second = h.flux.submit(at_front("alpha"))
    h.flux.jobs[second].jobspec["attributes"]["system"]["bank"] = "chem"
    h.until(lambda: h.state(second) == "failed")
    note = h.flux.jobs[second].note
    assert "[quantum.quota] limit 2 'chem': bank chem, $3.50 a day" in note
    assert "$2.60 spent or reserved" in note
    assert h.submits() == 1


# --- settlement -----------------------------------------------------------------------------


def test_a_finished_task_is_settled_posted_as_qpu_cost_and_shown_as_a_memo(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit({"device": "local:alpha"})  # released when done
    h.until(lambda: h.state(job) == "released")
    cost = h.flux.last(job, events.COST)
    task = h.flux.last(job, events.TASK)
    assert (cost.device, cost.state, cost.task, cost.token) == (
        "alpha", "COMPLETED", task.task, task.token,
    )  # fmt: skip
    assert cost.cost == pytest.approx(ALPHA) and cost.currency == "USD"
    assert h.flux.jobs[job].memo["qpu_cost"] == pytest.approx(ALPHA)
    row = h.rows()[task.token]
    assert (row.state, row.task_id, row.jobid) == ("settled", task.task, job)


def test_a_simulator_is_settled_at_its_billed_run_time(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit({"device": "local:sim"})
    h.until(lambda: h.flux.decoded(job, events.COST))
    cost = h.flux.last(job, events.COST)
    # $0.075 a minute for the 12 s the result reports, not the catalog's estimate.
    assert cost.billed_seconds == 12.0
    assert cost.cost == pytest.approx(0.075 * 12 / 60)
    assert cost.estimate == pytest.approx(h.catalog.get("sim").price.cost(1000))
    assert cost.estimate < cost.cost


def test_a_task_released_early_is_settled_when_it_ends_after_the_release(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    assert not h.flux.decoded(job, events.COST)
    token = h.flux.last(job, events.TASK).token
    assert h.rows()[token].state == "reserved"
    h.until(lambda: h.flux.decoded(job, events.COST))
    assert h.rows()[token].state == "settled"
    assert h.flux.last(job, events.COST).cost == pytest.approx(ALPHA)


def test_a_failed_task_costs_nothing_and_its_replacement_is_reserved_anew(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit(at_front("alpha", failover="next"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    first = h.flux.last(job, events.TASK)
    h.vendor.tasks[first.task].failed = "calibration drifted"
    h.until(lambda: h.state(job) == "released")
    rows = h.rows()
    assert rows[first.token].state == "settled" and rows[first.token].cost == 0.0
    second = h.flux.last(job, events.TASK)
    assert rows[second.token].state == "reserved" and second.token != first.token
    assert h.flux.decoded(job, events.COST)[0].state == "FAILED"


def test_a_refused_create_releases_the_reservation(ledger):
    h = SiteHarness(ledger)
    h.vendor.fail("submit", InvalidRequest("bad program", vendor="local", vendor_code="Validation"))
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "failed")
    (row,) = h.rows().values()
    assert row.state == "released" and row.cost == 0.0


def test_a_cancelled_job_cancels_its_task_which_is_settled_at_nothing(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit(at_front("beta"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    token = h.flux.last(job, events.TASK).token
    h.flux.cancel(job)
    h.until(lambda: h.rows()[token].state == "settled")
    assert h.vendor.count("cancel") == 1
    assert h.rows()[token].cost == 0.0


# --- restart ---------------------------------------------------------------------------------


def test_a_restarted_service_counts_a_recovered_task_once(ledger):
    # The limit fits one task: after the restart the recovered task must not be
    # refused (it exists) nor counted twice (the usage stays one task).
    h = SiteHarness(ledger, limit(1.5))
    job = h.flux.submit(at_front("alpha", release_at=0))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h2 = h.restart_site()
    h2.until(lambda: h2.state(job) == "released")
    rows = h2.rows()
    assert len(rows) == 1
    (row,) = rows.values()
    assert row.note is None and row.estimate == pytest.approx(ALPHA)
    assert h2.vendor.count("submit") == 1


def test_a_restart_adopts_recorded_tasks_without_a_memo_and_counts_them_at_the_end(ledger):
    """The ledger already has the task (and its id): the restarted service's adoption
    sends no memo (the qpu_cost memo outlived the restart), and the task it found is
    still its to settle."""
    h = SiteHarness(ledger)
    jobs = [h.flux.submit(at_front("alpha", group="g")) for _ in range(3)]
    h.until(lambda: h.flux.decoded(jobs[0], events.TASK))
    h.run(2.0)
    token = h.flux.last(jobs[0], events.TASK).token
    assert [h.flux.jobs[j].memo["qpu_cost"] for j in jobs] == [pytest.approx(ALPHA)] * 3
    h2 = h.restart_site()
    mark = len(h2.flux.journal)
    h2.service.tick()  # the scan adopts the three jobs and their unit
    assert h2.service.units.job_count == 3
    assert not [e for e in h2.flux.journal[mark:] if e[0] == "memos"]
    h2.until(lambda: all(h2.state(j) == "released" for j in jobs))
    h2.until(lambda: h2.rows()[token].state == "settled")
    assert len(h2.rows()) == 1 and h2.vendor.count("submit") == 1


def test_a_task_found_after_the_ledger_was_lost_is_recorded_past_the_quota(ledger, tmp_path):
    h = SiteHarness(ledger, limit(1.0, user=str(OWNER)))
    h.site.quota = h.site.quota.__class__()  # the first service ran without the limit
    job = h.flux.submit(at_front("alpha", release_at=0))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.site.close()
    fresh = tmp_path / "restored" / "ledger.db"
    h.ledger_path = fresh  # a ledger restored from a backup without this task
    h2 = h.restart_site()
    h2.until(lambda: h2.state(job) == "released")
    (row,) = h2.rows().values()
    assert row.note is not None and row.note.startswith("recorded past the quota: over quota")
    assert h2.vendor.count("submit") == 1


def test_after_a_restart_a_released_tasks_reservation_is_settled_by_the_new_service(ledger):
    h = SiteHarness(ledger)
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    token = h.flux.last(job, events.TASK).token
    h2 = h.restart_site()
    h2.until(lambda: h2.rows()[token].state == "settled")
    assert h2.rows()[token].cost == pytest.approx(ALPHA)
    assert h2.flux.last(job, events.COST).token == token
    assert ("attach", h2.rows()[token].task_id) in h2.vendor.calls


def test_after_a_restart_a_reservation_whose_job_left_without_a_task_is_released(ledger):
    h = SiteHarness(ledger)
    stale = Charge(
        token="fq-gone", jobid=4242, userid=OWNER, user=None, bank=None, device="alpha",
        vendor="local", device_class="qpu", shots=1000, estimate=ALPHA, t=h.clock(),
    )  # fmt: skip
    assert h.site.reserve(stale).allowed
    h2 = h.restart_site()
    h2.run(2.0)
    assert h2.rows()["fq-gone"].state == "released"
    with Ledger(ledger, readonly=True) as book:
        assert book.usage(UsageQuery(period="all"))[0].tasks == 0


def test_the_qpu_select_event_shows_the_sites_refusals_before_other_drops():
    """An eventlog entry keeps a few candidates: the devices the site dropped come
    before those the request itself rules out, whatever the catalog's order."""
    catalog = parse_catalog(
        """
devices:
  - {name: a-sim, vendor: local, id: "arn:aws:braket:::device/quantum-simulator/x/a", class: simulator, qubits: 30, price: {per_minute: 0.075}}
  - {name: b-qpu, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/x/b", class: qpu, qubits: 20, price: {per_task: 0.3}}
  - {name: c-qpu, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/x/c", class: qpu, qubits: 20, price: {per_task: 0.3}}
"""
    )
    snapshots = {
        d.name: DeviceSnapshot(d.name, DeviceStatus.ONLINE, queue_depth=0, price=d.price)
        for d in catalog.devices
    }
    refused = {"b-qpu": "not allowed: the site says no"}
    request = parse_request({"device": "any", "class": "qpu"})
    selection = select_device(catalog.devices, snapshots, request, excluded=refused)
    compact = compact_explanation(selection.explanation, limit=2, site=refused)
    shown = [(c["device"], c["verdict"]) for c in compact["candidates"]]
    assert shown == [
        ("c-qpu", "chosen: shortest expected wait"),
        ("b-qpu", "dropped: not allowed: the site says no"),
    ]
    assert compact["more"] == 1


def test_a_task_whose_job_was_cancelled_while_no_service_ran_is_cancelled_after_the_restart(
    ledger,
):
    """Nobody will read the result of a job that left while held: the restarted service
    cancels its task, as a live one would have (it used to follow it to its end and
    settle its full price; found by the promise checker's flux test)."""
    h = SiteHarness(ledger)
    job = h.flux.submit(at_front("beta"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    token = h.flux.last(job, events.TASK).token
    h.flux.cancel(job)  # while no service runs: nobody is told
    h2 = h.restart_site()
    h2.until(lambda: h2.rows()[token].state == "settled")
    assert h2.vendor.count("cancel") == 1
    assert h2.rows()[token].cost == 0.0


# --- the ledger unreachable -----------------------------------------------------------------


class Outage:
    """A ledger store that can be made unreachable, as a PostgreSQL server that is down
    (t/site/test_ledger_pg.py does it with a real one)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.down = False
        self.kind, self.where, self.columns = store.kind, store.where, store.columns

    def _check(self) -> None:
        from flux_quantum.site.ledger import LedgerUnavailable

        if self.down:
            raise LedgerUnavailable("ledger: the ledger's database is unavailable: refused")

    def rows(self, *args: Any) -> Any:
        self._check()
        return self.store.rows(*args)

    def dicts(self, *args: Any) -> Any:
        self._check()
        return self.store.dicts(*args)

    def execute(self, *args: Any) -> Any:
        self._check()
        return self.store.execute(*args)

    def meta(self, key: str) -> Any:
        self._check()
        return self.store.meta(key)

    def write(self, locks: Any = ()) -> Any:
        self._check()
        return self.store.write(locks)

    def close(self) -> None:
        self.store.close()


def test_an_unreachable_ledger_holds_jobs_with_no_task_until_it_is_back(ledger):
    """No task without its reservation: the job waits held, its memo and the status say
    why, the warning is said once; back, the task is created and reserved once, and a
    settlement that came during a second outage is written when it ends."""
    h = SiteHarness(ledger, limit(10.0))
    outage = Outage(h.site.ledger._store)
    h.site.ledger._store = outage  # type: ignore[assignment]
    outage.down = True
    job = h.flux.submit(at_front("alpha", release_at=2))
    h.run(120)
    assert h.state(job) == "held" and h.submits() == 0
    assert (
        h.flux.jobs[job]
        .memo["qpu_state"]
        .startswith(
            "waiting: the site's ledger is unavailable: no task is created before its reservation"
        )
    )
    status = h.service.status()["ledger"]
    assert status["unavailable"].endswith("the ledger's database is unavailable: refused")
    assert status["reservations_put_off"] >= 3
    warnings = [m for level, m in h.logs if level <= 4 and "unavailable" in m]
    assert len(warnings) == 1 and "QPU jobs wait held with no task" in warnings[0]
    outage.down = False
    h.until(lambda: h.submits() == 1)
    assert h.service.status()["ledger"]["unavailable"] is None
    assert any("ledger: reachable again" in m for _, m in h.logs)
    (row,) = h.rows().values()
    assert row.state == "reserved" and row.jobid == job
    # down again while the task runs: its settlement waits, then is written once
    outage.down = True
    h.until(lambda: h.state(job) == "released")
    h.run(60)
    assert h.service.status()["ledger"]["backlog"] == 1  # its settlement, kept
    assert next(iter(h.rows().values())).state == "reserved"
    outage.down = False
    h.until(lambda: next(iter(h.rows().values())).state == "settled", limit=900)
    (row,) = h.rows().values()
    assert row.cost == pytest.approx(ALPHA)
    assert h.service.status()["ledger"]["backlog"] == 0


def test_service_status_shows_the_ledger_unreachable(ledger, monkeypatch, capsys):
    """``flux quantum service status`` prints the outage in one line."""
    import argparse

    from flux_quantum.cli import service as cli

    h = SiteHarness(ledger, limit(10.0))
    outage = Outage(h.site.ledger._store)
    h.site.ledger._store = outage  # type: ignore[assignment]
    outage.down = True
    h.flux.submit(at_front("alpha", release_at=2))
    h.run(30)
    status = {**h.service.status(), "running": True, "pid": 1}
    monkeypatch.setattr(cli, "_status", lambda name, handle=None: status)
    args = argparse.Namespace(name="qpu_handlers", wait_idle=None, json=False)
    assert cli.cmd_status(args) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "ledger UNAVAILABLE" in x)
    assert line.startswith("  ledger UNAVAILABLE for 3")  # 30-odd seconds
    assert "the ledger's database is unavailable: refused; QPU jobs wait held with no task" in line
    assert (
        "waiting: the site's ledger is unavailable: no task is created before its reservation"
        in out
    )
