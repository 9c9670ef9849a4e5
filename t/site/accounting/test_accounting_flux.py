"""Flux tier: the quantum plugin beside flux-accounting's ``mf_priority.so``, as a
production site runs them, in both load orders.

A real instance with Fluxion, the quantum plugin and mf_priority.so (before it, or after
it, in ``[job-manager] plugins``), a real flux-accounting database and service with a
parent bank and two sub-banks, and associations for the owner and two guests (alice,
bob) whose jobs are signed for them. Ordinary jobs take flux-accounting's priority
(fair-share: the user who used more comes lower); a released QPU job goes ahead of them
in either order and keeps its place through ``flux account-priority-update``; a held job
stays held; a user without an association is refused at submit with flux-accounting's
own sentence.

Then the same with the handler service and the vendor emulator, as a site runs them
(mf_priority.so first; [quantum.accounting] naming flux-accounting's database): a user
without an association leaves nothing at the vendor or in the ledger; a QPU job is
charged to its flux-accounting bank while still held (its default bank, or the one it
names); alice's settled QPU spend, through ``flux quantum accounting update``, lowers
her fair-share as much as carol's one-node job of as many node-seconds lowers hers, and
bob's stays; ``flux quantum usage --accounting`` agrees with ``flux account view-user``
and ``view-bank``; under a max-running-jobs limit a QPU job waits for both holds, each
removed by its owner in either order, runs, and its task's result is alice's to read.
Guests' jobs run in job-exec's test mode (they have no Unix account here), so alice
reads her result with ``flux quantum task`` as herself (FLUX_HANDLE_USERID) through the
service, as a guest's site-account job does. Skipped with one loud line where
flux-accounting is not installed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from accounting import MISSING, Accounting, plugins_config
from fluxinstance import FluxInstance
from qpu_setup import Qpu, catalog_text

pytestmark = [pytest.mark.flux, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

ALICE, BOB, NOBODY = 5011, 5012, 5013
MAX = 4294967295
TESTEXEC = "\n[exec.testexec]\nallow-guests = true\n"


def fake_run(seconds: float) -> list[str]:
    """A job the test exec module 'runs' for ``seconds`` without a process (a guest of a
    test instance has no Unix account to run as)."""
    return [f"--setattr=system.exec.test.run_duration={seconds}s", "-n1", "true"]


@pytest.fixture(scope="module", params=["before", "after"], ids=["mf-first", "quantum-first"])
def site(request, tmp_path_factory) -> Iterator[tuple[FluxInstance, Accounting, str]]:
    """``mf_priority.so`` loaded ``before`` or ``after`` the quantum plugin."""
    order = request.param
    inst = FluxInstance(
        tmp_path_factory.mktemp(f"accounting-{order}"),
        size=1,
        config=plugins_config(order) + TESTEXEC,
    ).start()
    acct = Accounting(inst).start()
    try:
        acct.banks("root", "physics", "chemistry")
        acct.user("owner", os.getuid(), "physics")
        acct.user("alice", ALICE, "physics")
        acct.user("bob", BOB, "chemistry")
        acct.update()
        yield inst, acct, order
    finally:
        acct.stop()
        assert inst.stop() == 0, inst.broker_log()


def jobs(inst: FluxInstance) -> set[str]:
    """Every job the instance knows, active or not."""
    return set(inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split())


def priority(inst: FluxInstance, jobid: str) -> int:
    return int(inst.run(["flux", "jobs", "-n", "-o", "{priority}", jobid]).stdout)


def wait_priority(inst: FluxInstance, jobid: str, value: int, count: int) -> None:
    """Until the job's eventlog has ``count`` priority events giving ``value``."""
    inst.run(
        ["flux", "job", "wait-event", "-q", "-t", "30", "-c", str(count), "-m",
         f"priority={value}", jobid, "priority"]
    )  # fmt: skip


def submitted(res) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_a_released_qpu_job_goes_ahead_of_fair_share_ordered_work(site) -> None:
    inst, acct, order = site
    # alice uses the machine; after one update cycle her fair-share is below bob's.
    used = [submitted(acct.submit_as(ALICE, fake_run(2))) for _ in range(3)]
    for jobid in used:
        inst.wait_event(jobid, "clean")
    acct.update()
    inst.run(["flux", "queue", "stop"])
    try:
        alice = submitted(acct.submit_as(ALICE, fake_run(1)))
        bob = submitted(acct.submit_as(BOB, fake_run(1)))
        qpu = submitted(acct.submit_as(ALICE, ["--setattr=qpu=braket:sv1", *fake_run(1)]))
        held = submitted(acct.submit_as(BOB, ["--setattr=qpu=braket:sv1", *fake_run(1)]))
        for jobid in (alice, bob):
            inst.wait_event(jobid, "priority")
        inst.wait_event(held, "dependency-add")
        assert priority(inst, bob) > priority(inst, alice), "bob used less: he goes first"

        inst.quantum("release", qpu, "--task", "arn:accounting", "--device", "sv1")
        wait_priority(inst, qpu, MAX, 1)
        assert priority(inst, qpu) == MAX
        assert priority(inst, alice) < MAX and priority(inst, bob) < MAX

        # The site's update cycle reprioritizes every job: the release stays, the held
        # job stays held, the others keep flux-accounting's order.
        for cycle in (2, 3):
            acct.update()
            if order == "after":  # taken away by mf_priority.so, then set back
                wait_priority(inst, qpu, MAX, cycle)
        events = [e for e in inst.eventlog(qpu) if e["name"] == "priority"]
        assert events[-1]["context"]["priority"] == MAX
        assert priority(inst, qpu) == MAX
        shown = inst.run(["flux", "jobs", "-n", "-o", "{state} {dependencies}", held]).stdout
        assert shown.split() == ["DEPEND", "qpu"]
        assert priority(inst, bob) > priority(inst, alice)
        query = json.loads(inst.run(["flux", "jobtap", "query", "quantum.so"]).stdout)
        if order == "before":
            # quantum.so after mf_priority.so: it overrides released jobs only.
            assert query["priority-restored"] == 0
            assert sum(e["context"]["priority"] != MAX for e in events) == 0
        else:
            # mf_priority.so last takes the place away; quantum.so sets it back, and
            # says once which order spares that.
            assert query["priority-restored"] >= 2
            log = inst.run(["flux", "dmesg"]).stdout
            assert log.count("load quantum.so after that plugin") == 1
    finally:
        inst.run(["flux", "queue", "start"])
        inst.run(["flux", "cancel", "--all", "--user=all"], check=False)


def refused_once(inst: FluxInstance, acct: Accounting, qpu_args: list[str]) -> None:
    """NOBODY's QPU job is refused at submit with flux-accounting's one sentence, and
    nothing is queued or held."""
    before = jobs(inst)
    res = acct.submit_as(NOBODY, [*qpu_args, *fake_run(1)])
    assert res.returncode != 0
    message = res.stderr.strip()
    assert f"cannot find user/bank or user/default bank entry for uid: {NOBODY}" in message
    assert len(message.splitlines()) == 1, message
    assert jobs(inst) == before  # nothing queued, nothing held


def test_a_user_without_an_association_is_refused_at_submit_once(site) -> None:
    inst, acct, _ = site
    refused_once(inst, acct, ["--setattr=qpu=braket:sv1"])


# --- with the handler service and the vendor emulator ------------------------------------
#
# One instance, mf_priority.so first (the order that spares priority events), the
# service serving guests' QPU jobs on the site's accounts ([quantum.accounts] site =
# ["local"]) against the emulator, flux-accounting's database named in
# [quantum.accounting] (the one source of banks; qpu_weight set by the test), and the
# ledger in the test's directory. Banks root -> physics (alice, carol), chemistry (bob),
# ops (the owner). The tests run in file order: the fair-share one needs everyone's
# usage at nothing.

CAROL = 5014
SITE_TABLES = """
[quantum.accounts]
site = ["local"]

[quantum.accounting]
db = "{db}"
qpu_weight = {weight!r}

[quantum.ledger]
path = "{ledger}"
"""
QPU = ["--setattr=qpu.device=local:q-delta", "--setattr=qpu.release_at=1"]
# Held until the test steps the vendor clock on (Slow has 100 tasks of 10 s queued).
QUEUED = ["--setattr=qpu.device=local:q-slow", "--setattr=qpu.release_at=1"]
MRJ = "max-running-jobs-user-limit"


class QpuSite:
    """The instance, flux-accounting, the emulator and the service, and what the tests
    read of them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.db = workdir / "FluxAccounting.db"
        self.ledger = workdir / "ledger.db"
        self.base = plugins_config("before") + TESTEXEC
        self.inst = FluxInstance(workdir, size=1, config=self.tables(0.0))
        self.acct = Accounting(self.inst)
        self.qpu: Qpu | None = None

    def tables(self, weight: float) -> str:
        return self.base + SITE_TABLES.format(db=self.db, weight=weight, ledger=self.ledger)

    def start(self) -> QpuSite:
        self.inst.start()
        self.acct.start()
        self.acct.banks("root", "physics", "chemistry", "ops")
        self.acct.user("owner", os.getuid(), "ops")
        self.acct.user("alice", ALICE, "physics")
        self.acct.user("carol", CAROL, "physics")
        self.acct.user("bob", BOB, "chemistry")
        self.acct.update()
        catalog = self.workdir / "backends.yaml"
        catalog.write_text(catalog_text())
        self.qpu = Qpu(self.inst, catalog)
        self.qpu.start_service()
        return self

    def stop(self) -> None:
        if self.qpu is not None:
            self.qpu.close()
        self.acct.stop()
        assert self.inst.stop() == 0, self.inst.broker_log()

    def weigh(self, weight: float) -> None:
        """``[quantum.accounting] qpu_weight = weight``, as an admin changes it."""
        (self.workdir / "conf" / "quantum.toml").write_text(self.tables(weight))
        self.inst.run(["flux", "config", "reload"])

    def cycle(self) -> str:
        """The site's update cycle, as its cron runs it."""
        return self.inst.quantum("accounting", "update").stdout

    def usage(self, *by: str, guest: int | None = None) -> list[dict[str, Any]]:
        env = self.inst.guest_env(guest) if guest is not None else None
        out = self.inst.quantum(
            "usage", "--json", "--period=all", "--accounting", f"--by={','.join(by)}", env=env
        ).stdout
        return json.loads(out)["rows"]

    def row(self, user: str, bank: str) -> dict[str, Any]:
        return next(r for r in self.usage("user", "bank") if (r["user"], r["bank"]) == (user, bank))

    def fa(self, user: str, field: str = "job_usage") -> float:
        """``flux account view-user``'s value of ``field`` (one association each here)."""
        return float(self.acct.account("view-user", user, "-o", f"{{{field}}}").stdout.split()[-1])

    def fa_bank(self, bank: str) -> float:
        out = self.acct.account("view-bank", bank, "-o", "{job_usage}").stdout
        return float(out.split()[-1])

    def spend_only(self, userid: int) -> float:
        """A QPU job of ``userid`` whose task completes and is settled, cancelled before
        it runs (the queue stopped while it is released): its user's spend grows by the
        task's cost, their usage by nothing. The settled spend."""
        assert self.qpu is not None
        user = str(userid)  # the ledger's name of a uid without an account here
        spent = sum(r["spent"] for r in self.usage("user") if r["user"] == user)
        self.inst.run(["flux", "queue", "stop"])
        try:
            job = submitted(
                self.acct.submit_as(userid, ["--setattr=qpu.device=local:q-delta", *fake_run(1)])
            )
            self.qpu.wait_event(job, "qpu-task")
            self.qpu.advance(30)  # the task runs and completes; the job is released on it
            self.qpu.wait_event(job, "qpu-release")
            total = self.qpu.until(
                lambda: (
                    sum(r["spent"] for r in self.usage("user") if r["user"] == user) > spent
                    and sum(r["spent"] for r in self.usage("user") if r["user"] == user)
                ),
                60,
            )
            self.inst.run(["flux", "cancel", job])
        finally:
            self.inst.run(["flux", "queue", "start"])
        return float(total) - spent

    def times(self, jobid: str) -> tuple[float, float]:
        """t_run and t_inactive as job-list has them (what the fetch stores), once
        job-list lists the job inactive: a moment after its ``clean`` event, and only
        then does a fetch take it (a cycle run in that moment misses it)."""
        from flux.constants import FLUX_JOB_STATE_INACTIVE
        from flux.job import JobID

        assert self.qpu is not None
        payload = {
            "id": int(JobID(jobid)),
            "attrs": ["t_run", "t_inactive"],
            "state": FLUX_JOB_STATE_INACTIVE,
        }
        job = self.qpu.handle.rpc("job-list.list-id", payload).get()["job"]
        return float(job["t_run"]), float(job["t_inactive"])


@pytest.fixture(scope="module")
def qpu_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QpuSite]:
    site = QpuSite(tmp_path_factory.mktemp("accounting-qpu")).start()
    try:
        yield site
    finally:
        site.stop()


def test_a_user_without_an_association_leaves_nothing_at_the_vendor_or_in_the_ledger(
    qpu_site: QpuSite,
) -> None:
    assert qpu_site.qpu is not None
    creates = qpu_site.qpu.emu.call_count("CreateQuantumTask")
    refused_once(qpu_site.inst, qpu_site.acct, QPU)
    time.sleep(1.5)  # several of the service's scans (0.3 s)
    assert qpu_site.qpu.emu.call_count("CreateQuantumTask") == creates
    assert [r for r in qpu_site.usage("user") if r["user"] in (str(NOBODY), "nobody")] == []
    with closing(sqlite3.connect(qpu_site.ledger)) as ledger:
        assert ledger.execute(
            "SELECT COUNT(*) FROM charges WHERE userid = ?", (NOBODY,)
        ).fetchone() == (0,)


def test_qpu_spend_lowers_fair_share_after_one_cycle_as_a_classical_job_does(
    qpu_site: QpuSite,
) -> None:
    """alice's settled QPU spend, at the weight that makes it carol's one-node job's
    node-seconds, gives her carol's usage and fair-share after one cycle; bob, who used
    nothing, keeps his; her ordinary jobs then go after bob's. Her QPU job is cancelled
    before it runs (the queue stopped), so her usage is her QPU spend alone."""
    inst, acct = qpu_site.inst, qpu_site.acct
    spend = qpu_site.spend_only(ALICE)
    twin = submitted(acct.submit_as(CAROL, fake_run(1)))
    inst.wait_event(twin, "clean")
    t_run, t_inactive = qpu_site.times(twin)
    weight = (t_inactive - t_run) / spend  # node_weight 1: usage is node-seconds
    qpu_site.weigh(weight)
    before = {
        user: (qpu_site.fa(user), qpu_site.fa(user, "fairshare"))
        for user in ("alice", "bob", "carol")
    }
    assert before["alice"] == before["bob"] == (0.0, before["bob"][1])

    said = qpu_site.cycle()
    assert "fed alice (physics)" in said and "job record" in said, said
    after = {
        user: (qpu_site.fa(user), qpu_site.fa(user, "fairshare"))
        for user in ("alice", "bob", "carol")
    }
    assert after["alice"][0] == pytest.approx(spend * weight, abs=1e-4)
    assert after["alice"] == pytest.approx(after["carol"], abs=1e-4)  # usage and fair-share
    assert after["alice"][1] < before["alice"][1] and after["alice"][1] < after["bob"][1]
    assert after["bob"][0] == before["bob"][0] == 0.0

    # ordinary jobs: alice's and carol's go after bob's now
    inst.run(["flux", "queue", "stop"])
    try:
        ordinary = {who: submitted(acct.submit_as(uid, fake_run(1)))
                    for who, uid in (("alice", ALICE), ("bob", BOB), ("carol", CAROL))}  # fmt: skip
        for jobid in ordinary.values():
            inst.wait_event(jobid, "priority")
        prio = {who: priority(inst, jobid) for who, jobid in ordinary.items()}
        assert prio["alice"] == prio["carol"] < prio["bob"]
    finally:
        inst.run(["flux", "queue", "start"])
        for jobid in ordinary.values():
            inst.wait_event(jobid, "clean")

    # flux-accounting's own views show the record: its job id is the one the ledger fed
    feeds = json.loads(inst.quantum("accounting", "feeds", "--json").stdout)["feeds"]
    (fed,) = [f for f in feeds if f["user"] == "alice"]  # flux-accounting's name of 5011
    records = acct.account("view-job-records", "-u", "alice").stdout
    assert fed["jobid"] in records
    # another cycle feeds nothing twice and recomputes nothing away (her ordinary job
    # adds its own node-seconds)
    t_run, t_inactive = qpu_site.times(ordinary["alice"])
    qpu_site.cycle()
    assert [
        f for f in json.loads(inst.quantum("accounting", "feeds", "--json").stdout)["feeds"]
    ] == feeds
    assert qpu_site.fa("alice") == pytest.approx(spend * weight + t_inactive - t_run, abs=1e-3)


def test_flux_quantum_usage_and_flux_accountings_views_agree(qpu_site: QpuSite) -> None:
    """Per association and per bank: the spend fed, the usage it became, and
    flux-accounting's own job usage (``view-user``, ``view-bank``) side by side."""
    inst, acct = qpu_site.inst, qpu_site.acct
    spend = qpu_site.spend_only(BOB)
    before = qpu_site.fa("bob")
    qpu_site.cycle()
    feeds = json.loads(inst.quantum("accounting", "feeds", "--json").stdout)["feeds"]
    weight = next(f for f in feeds if f["user"] == "bob")["usage"] / spend
    bob = qpu_site.row(str(BOB), "chemistry")  # the ledger names a uid without an account
    assert bob["fed"] == pytest.approx(spend) and bob["spent"] == pytest.approx(spend)
    assert bob["qpu_usage"] == pytest.approx(spend * weight, abs=1e-4)
    assert bob["job_usage"] == pytest.approx(qpu_site.fa("bob"), abs=1e-4)
    assert qpu_site.fa("bob") - before == pytest.approx(bob["qpu_usage"], abs=1e-4)
    alice = qpu_site.row(str(ALICE), "physics")  # her QPU spend and her ordinary job
    assert alice["fed"] == pytest.approx(alice["spent"])
    assert alice["job_usage"] == pytest.approx(qpu_site.fa("alice"), abs=1e-4)
    assert alice["job_usage"] > alice["qpu_usage"] > 0
    banks = {r["bank"]: r for r in qpu_site.usage("bank")}
    for bank in ("physics", "chemistry"):
        assert banks[bank]["job_usage"] == pytest.approx(qpu_site.fa_bank(bank), abs=1e-4)
    assert banks["chemistry"]["qpu_usage"] == pytest.approx(bob["qpu_usage"], abs=1e-4)
    assert qpu_site.fa_bank("root") == pytest.approx(
        sum(qpu_site.fa_bank(b) for b in ("physics", "chemistry", "ops")), abs=1e-3
    )
    # bob sees his own rows only, with what they became
    (own,) = qpu_site.usage("user", "bank", guest=BOB)
    assert (own["user"], own["qpu_usage"]) == (str(BOB), bob["qpu_usage"])
    # the table a site reads
    text = inst.quantum("usage", "--by=bank", "--period=all", "--accounting").stdout
    header, *lines = text.splitlines()
    assert header.split()[-3:] == ["FED", "QPU_USAGE", "JOB_USAGE"]
    del acct


def test_a_held_qpu_job_is_charged_to_its_flux_accounting_bank(qpu_site: QpuSite) -> None:
    """Reserved before its release: a job naming no bank is charged to its user's default
    bank (mf_priority.so wrote it into the jobspec at job.new), one naming another of
    the user's banks to that one."""
    inst, acct, qpu = qpu_site.inst, qpu_site.acct, qpu_site.qpu
    assert qpu is not None
    acct.user("alice", ALICE, "chemistry")  # her second bank; physics stays her default
    acct.update()
    default = submitted(acct.submit_as(ALICE, [*QUEUED, *fake_run(1)]))
    named = submitted(acct.submit_as(ALICE, ["--setattr=system.bank=chemistry", *QUEUED,
                                             *fake_run(1)]))  # fmt: skip
    try:
        for jobid in (default, named):
            qpu.wait_event(jobid, "qpu-task")
        reserved = qpu.until(
            lambda: {
                (r["user"], r["bank"]): r["reserved"]
                for r in qpu_site.usage("user", "bank")
                if r["reserved"] > 0
            }
        )
        assert reserved == {(str(ALICE), "physics"): 1.3, (str(ALICE), "chemistry"): 1.3}
        for jobid in (default, named):
            assert inst.state(jobid) == "DEPEND"  # still held
        spec = json.loads(inst.run(["flux", "job", "info", default, "jobspec"]).stdout)
        assert spec["attributes"]["system"]["bank"] == "physics"
    finally:
        inst.run(["flux", "cancel", default, named], check=False)
        for jobid in (default, named):
            inst.wait_event(jobid, "clean")


def test_a_qpu_job_under_a_running_jobs_limit_waits_for_both_holds(qpu_site: QpuSite) -> None:
    """alice may run one job at a time: her QPU job waits for its task (``qpu``) and for
    her running job to end (mf_priority.so's dependency), each removed by its owner, in
    either order; then it runs, and its task's result is hers to read (through the
    service, as a guest's site-account job reads it: ``flux quantum task`` as alice)."""
    inst, acct, qpu = qpu_site.inst, qpu_site.acct, qpu_site.qpu
    assert qpu is not None
    acct.account("edit-user", "alice", "--bank=physics", "--max-running-jobs=1")
    acct.update()

    def dependencies(jobid: str) -> set[str]:
        shown = inst.run(["flux", "jobs", "-n", "-o", "{dependencies}", jobid]).stdout.strip()
        return set(shown.split(",")) if shown and shown != "-" else set()

    try:
        # the qpu hold goes first: released on its task, still waiting for the limit (the
        # service is stopped while it is submitted, so both holds are seen at once)
        running = submitted(acct.submit_as(ALICE, fake_run(120)))
        inst.wait_event(running, "start")
        qpu.stop_service()
        first = submitted(acct.submit_as(ALICE, [*QPU, *fake_run(1)]))
        qpu.until(lambda: dependencies(first) == {"qpu", MRJ})
        qpu.start_service()
        qpu.wait_event(first, "qpu-release")
        assert inst.state(first) == "DEPEND" and dependencies(first) == {MRJ}
        inst.run(["flux", "cancel", running])
        inst.wait_event(first, "start")
        inst.wait_event(first, "clean")
        qpu.advance(30)  # its task completes at the vendor
        read = inst.quantum("task", first, "--wait", "--json", "--timeout=60",
                            env=inst.guest_env(ALICE))  # fmt: skip
        task = json.loads(read.stdout)
        assert task["state"] == "COMPLETED" and sum(task["counts"].values()) == 1000

        # the limit goes first: its running job ends while the task is still queued
        running = submitted(acct.submit_as(ALICE, fake_run(120)))
        inst.wait_event(running, "start")
        second = submitted(acct.submit_as(ALICE, [*QUEUED, *fake_run(1)]))
        qpu.until(lambda: dependencies(second) == {"qpu", MRJ})
        qpu.wait_event(second, "qpu-task")
        # A limit is not an input (docs/workflows.md): the task was created while it held.
        assert MRJ in dependencies(second) and "qpu-inputs" not in qpu.names(second)
        inst.run(["flux", "cancel", running])
        qpu.until(lambda: dependencies(second) == {"qpu"})
        assert inst.state(second) == "DEPEND"
        qpu.advance(1100)  # Slow's queued tasks run: it is next
        qpu.wait_event(second, "qpu-release")
        inst.wait_event(second, "clean")
        assert inst.run(["flux", "job", "status", second], check=False).returncode == 0
    finally:
        acct.account("edit-user", "alice", "--bank=physics", "--max-running-jobs=5")
        acct.update()


def test_a_qpu_job_over_a_max_active_jobs_limit_is_refused_with_nothing_spent(
    qpu_site: QpuSite,
) -> None:
    """flux-accounting's other kind of limit refuses at submit: alice may have one active
    job; her QPU job beside it is refused with flux-accounting's sentence, and nothing
    reaches the vendor or the ledger."""
    inst, acct, qpu = qpu_site.inst, qpu_site.acct, qpu_site.qpu
    assert qpu is not None
    acct.account("edit-user", "alice", "--bank=physics", "--max-active-jobs=1")
    acct.update()
    try:
        running = submitted(acct.submit_as(ALICE, fake_run(120)))
        inst.wait_event(running, "start")
        creates = qpu.emu.call_count("CreateQuantumTask")
        charged = charges(qpu_site)
        before = jobs(inst)
        res = acct.submit_as(ALICE, [*QPU, *fake_run(1)])
        assert res.returncode != 0
        assert "user has max active jobs" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert jobs(inst) == before
        time.sleep(1.0)  # several of the service's scans (0.3 s)
        assert qpu.emu.call_count("CreateQuantumTask") == creates
        assert charges(qpu_site) == charged
        inst.run(["flux", "cancel", running])
        inst.wait_event(running, "clean")
    finally:
        acct.account("edit-user", "alice", "--bank=physics", "--max-active-jobs=1000")
        acct.update()


def charges(site: QpuSite) -> int:
    """The ledger's rows (none before the first charge: no file yet)."""
    if not site.ledger.exists():
        return 0
    with closing(sqlite3.connect(site.ledger)) as ledger:
        return int(ledger.execute("SELECT COUNT(*) FROM charges").fetchone()[0])
