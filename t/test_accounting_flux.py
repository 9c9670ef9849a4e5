"""Flux tier: the quantum plugin beside flux-accounting's ``mf_priority.so``, as a
production site runs them, in both load orders.

A real instance with Fluxion, the quantum plugin and mf_priority.so (before it, or after
it, in ``[job-manager] plugins``), a real flux-accounting database and service with a
parent bank and two sub-banks, and associations for the owner and two guests (alice,
bob) whose jobs are signed for them. Ordinary jobs take flux-accounting's priority
(fair-share: the user who used more comes lower); a released QPU job goes ahead of them
in either order and keeps its place through ``flux account-priority-update``; a held job
stays held; a user without an association is refused at submit with flux-accounting's
own sentence. Skipped with one loud line where flux-accounting is not installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from accounting import MISSING, Accounting, plugins_config
from fluxinstance import FluxInstance

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


def test_a_user_without_an_association_is_refused_at_submit_once(site) -> None:
    inst, acct, _ = site
    before = jobs(inst)
    res = acct.submit_as(NOBODY, ["--setattr=qpu=braket:sv1", *fake_run(1)])
    assert res.returncode != 0
    message = res.stderr.strip()
    assert f"cannot find user/bank or user/default bank entry for uid: {NOBODY}" in message
    assert len(message.splitlines()) == 1, message
    assert jobs(inst) == before  # nothing queued, nothing held
