"""flux-accounting v0.60.0 in the system instance beside flux-quantum, as a site runs
them: ``mf_priority.so`` loaded before ``quantum.so``, its database (banks root ->
physics (alice), chemistry (bob), shared (both), ops (flux); carol has none), its
service on rank 0, and its update cycle from flux cron with the QPU spend fed in its
place (``/etc/flux/system/cron.d/accounting``: ``flux quantum accounting update``;
``[quantum.accounting] qpu_weight = 3600``: $1 of QPU is a node-hour).

As real users: a user without an association is refused at submit and leaves nothing
behind; alice's settled QPU spend counts in her fair-share after one cycle by what the
weight says (beside bob, who ran the same job without a QPU), so bob's ordinary jobs go
ahead of hers while a released QPU job goes ahead of both; a max-running-jobs limit holds
a QPU job beside the qpu hold, each removed by its owner, and it runs and reads its
task's result. Every change to flux-accounting's settings is undone at the end."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing

from cluster import job, output, owner, run, submit, wait_event, wait_for

DB = "/var/lib/flux/FluxAccounting.db"
WEIGHT = 3600.0  # the image's [quantum.accounting] qpu_weight
SV1 = "--setattr=qpu.device=local-sv1"
CONSUMER = "flux quantum task --json"
MAX = 4294967295
MRJ = "max-running-jobs-user-limit"
CATALOG = "/etc/flux-quantum/backends.yaml"
EMULATOR = "http://emulator:8080"


def association(user: str, bank: str) -> tuple[float, float]:
    """flux-accounting's job usage and fair-share of USER in BANK (its database)."""
    with closing(sqlite3.connect(f"file:{DB}?mode=ro", uri=True)) as db:
        row = db.execute(
            "SELECT job_usage, fairshare FROM association_table WHERE username = ? AND bank = ?",
            (user, bank),
        ).fetchone()
    assert row is not None, f"no association {user} in {bank}"
    return float(row[0]), float(row[1])


def cycle() -> str:
    """One turn of the site's update cycle, as flux cron runs it (as the owner)."""
    return owner("flux", "quantum", "accounting", "update", timeout=300).stdout


def feeds() -> list[dict]:
    out = owner("flux", "quantum", "accounting", "feeds", "--json").stdout
    return json.loads(out)["feeds"]


def spent(user: str) -> float:
    """USER's settled spend, as USER sees it."""
    out = run(user, "flux", "quantum", "usage", "--json", "--by=user", "--period=all").stdout
    return sum(r["spent"] for r in json.loads(out)["rows"])


def node_seconds(jobid: str) -> float:
    """What flux-accounting counts of a classical job: nodes x (t_inactive - t_run)."""
    record = job(jobid)
    return (record["t_inactive"] - record["t_run"]) * record["nnodes"]


def dependencies(jobid: str, user: str) -> set[str]:
    shown = run(user, "flux", "jobs", "-n", "-o", "{dependencies}", jobid).stdout.strip()
    return set(shown.split(",")) if shown and shown != "-" else set()


@contextlib.contextmanager
def queue_stopped() -> Iterator[None]:
    owner("flux", "queue", "stop")
    try:
        yield
    finally:
        owner("flux", "queue", "start")


def test_the_site_runs_flux_accounting_beside_the_quantum_plugin() -> None:
    plugins = owner("flux", "jobtap", "list").stdout.split()
    assert plugins.index("mf_priority.so") < plugins.index("quantum.so"), plugins
    entries = owner("flux", "cron", "list").stdout.splitlines()[1:]
    commands = [owner("flux", "cron", "dump", line.split()[0]).stdout for line in entries]
    assert any('command = "flux quantum accounting update"' in c for c in commands), commands
    tree = owner("flux", "account", "view-bank", "root", "-t").stdout
    for bank in ("physics", "chemistry", "shared", "ops"):
        assert bank in tree, tree
    # the order that spares priority events: the plugin never had to say otherwise
    assert "load quantum.so after that plugin" not in owner("flux", "dmesg").stdout


def test_a_user_without_an_association_is_refused_and_leaves_nothing() -> None:
    res = run("carol", "flux", "submit", SV1, "true", check=False)
    assert res.returncode != 0
    message = res.stderr.strip()
    assert "cannot find user/bank or user/default bank entry for uid: 1003" in message
    assert len(message.splitlines()) == 1, message
    assert run("carol", "flux", "jobs", "-a", "-n", "-o", "{id}").stdout.strip() == ""
    rows = json.loads(
        owner("flux", "quantum", "usage", "--json", "--user=carol", "--period=all").stdout
    )["rows"]
    assert rows == []


def test_alices_qpu_spend_lowers_her_fair_share_after_one_cycle() -> None:
    # Both start at nothing (an admin's clear-usage), then run the same one-core job;
    # only alice's asks for a QPU.
    owner("flux", "account", "clear-usage", "physics", "chemistry")
    cycle()
    assert association("alice", "physics")[0] == association("bob", "chemistry")[0] == 0.0
    fed_before = {f["feed"] for f in feeds()}
    paid = spent("alice")
    qpu = submit("alice", SV1, "-c1", "sh", "-c", CONSUMER)
    plain = submit("bob", "-c1", "sh", "-c", "true")
    for jobid in (qpu, plain):
        wait_event(jobid, "clean", timeout=300)
    wait_for(lambda: spent("alice") > paid, 120, "alice's task settled")

    cycle()
    new = [f for f in feeds() if f["feed"] not in fed_before]
    (fed,) = [f for f in new if (f["user"], f["bank"]) == ("alice", "physics")]
    assert fed["usage"] == round(fed["spend"] * WEIGHT, 5)
    alice, bob = association("alice", "physics"), association("bob", "chemistry")
    assert abs(alice[0] - (fed["usage"] + node_seconds(qpu))) < 0.01, (alice, fed)
    assert abs(bob[0] - node_seconds(plain)) < 0.01, bob
    assert alice[1] < bob[1], (alice, bob)
    # flux-accounting's record of it, and flux quantum usage beside its own view
    assert fed["jobid"] in owner("flux", "account", "view-job-records", "-u", "alice").stdout
    rows = json.loads(
        run("alice", "flux", "quantum", "usage", "--json", "--by=user,bank", "--period=all",
            "--accounting").stdout
    )["rows"]  # fmt: skip
    (row,) = [r for r in rows if r["bank"] == "physics"]
    assert abs(row["job_usage"] - alice[0]) < 1e-4

    # fair-share orders ordinary jobs: bob's first; a released QPU job goes ahead of both
    with queue_stopped():
        ordinary = {user: submit(user, "-c1", "true") for user in ("alice", "bob")}
        released = submit("alice", SV1, "-c1", "sh", "-c", CONSUMER)
        wait_event(released, "qpu-release", timeout=300)
        for jobid in ordinary.values():
            wait_event(jobid, "priority")
        prio = {user: int(job(jobid)["priority"]) for user, jobid in ordinary.items()}
        assert int(job(released)["priority"]) == MAX > prio["bob"] > prio["alice"], prio
    for jobid in (*ordinary.values(), released):
        wait_event(jobid, "clean", timeout=300)
    assert json.loads(output(released, "alice"))["state"] == "COMPLETED"


def test_a_qpu_job_under_a_running_jobs_limit_waits_for_both_holds() -> None:
    owner("flux", "account", "edit-user", "alice", "--bank=physics", "--max-running-jobs=1")
    owner("flux", "account-priority-update")
    service_stopped = False
    try:
        busy = submit("alice", "-c1", "sleep", "600")
        wait_event(busy, "start")
        # the owner stops the service while it is submitted: both holds are seen at once
        owner("flux", "quantum", "service", "stop")
        service_stopped = True
        qpu = submit("alice", SV1, "-c1", "sh", "-c", CONSUMER)
        wait_for(lambda: dependencies(qpu, "alice") == {"qpu", MRJ}, 60, "both holds")
        owner("flux", "quantum", "service", "start", "--catalog", CATALOG,
              "--emulator-url", EMULATOR, timeout=120)  # fmt: skip
        service_stopped = False
        # the task done, the service releases it: flux-accounting's hold is left
        wait_event(qpu, "qpu-release", timeout=300)
        assert job(qpu)["state"] == "DEPEND" and dependencies(qpu, "alice") == {MRJ}
        run("alice", "flux", "cancel", busy)
        wait_event(qpu, "clean", timeout=300)
        task = json.loads(output(qpu, "alice"))
        assert task["state"] == "COMPLETED" and sum(task["counts"].values()) > 0
    finally:
        if service_stopped:
            owner("flux", "quantum", "service", "start", "--catalog", CATALOG,
                  "--emulator-url", EMULATOR, timeout=120, check=False)  # fmt: skip
        owner("flux", "account", "edit-user", "alice", "--bank=physics", "--max-running-jobs=100")
        owner("flux", "account-priority-update")
