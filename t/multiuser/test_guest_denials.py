"""Every guest denial enforced today, with real users: bob cannot release,
fail, post events to, set memos on, cancel or even see alice's held job, and
nothing about the job changes when he tries."""

from __future__ import annotations

import json

import pytest
from cluster import (
    held_ids,
    job,
    jobid_int,
    owner,
    release,
    rpc,
    run,
    state,
    submit_qpu,
    wait_event,
)

PLUGIN_DENIAL = "belongs to another user"


@pytest.fixture
def alices_job():
    jobid = submit_qpu("alice", "true")
    wait_event(jobid, "dependency-add")
    yield jobid
    if state(jobid) == "DEPEND":
        owner("flux", "cancel", jobid, check=False)


def assert_untouched(jobid: str) -> None:
    assert state(jobid) == "DEPEND"
    assert jobid_int(jobid) in held_ids()
    assert job(jobid).get("dependencies") == ["qpu"]


def test_bob_cannot_release(alices_job):
    res = release(alices_job, user="bob", check=False)
    assert not res.ok and PLUGIN_DENIAL in res.stderr
    assert_untouched(alices_job)


def test_bob_cannot_fail(alices_job):
    res = run("bob", "flux", "quantum", "fail", alices_job, "--note", "bob was here", check=False)
    assert not res.ok and PLUGIN_DENIAL in res.stderr
    assert_untouched(alices_job)


@pytest.mark.parametrize(
    "method, payload",
    [
        ("event", {"name": "qpu-forged", "context": {}}),
        ("release", {"task": "arn:forged", "device": "sv1"}),
        ("fail", {"note": "forged"}),
    ],
)
def test_bob_cannot_call_the_plugin_services_directly(alices_job, method, payload):
    """The same checks without the CLI: forged requests straight to the services."""
    res = rpc("bob", f"job-manager.quantum.{method}", {"id": jobid_int(alices_job), **payload})
    assert not res.ok and PLUGIN_DENIAL in res.stderr
    assert_untouched(alices_job)
    assert "forged" not in owner("flux", "job", "eventlog", alices_job).stdout


def test_bob_cannot_set_memos(alices_job):
    res = run("bob", "flux", "job", "memo", alices_job, "qpu_position=0", check=False)
    assert not res.ok
    assert "qpu_position" not in str(job(alices_job).get("annotations"))
    assert_untouched(alices_job)


def test_bob_cannot_cancel(alices_job):
    res = run("bob", "flux", "cancel", alices_job, check=False)
    assert not res.ok
    assert_untouched(alices_job)


def test_bob_sees_only_his_own_held_jobs(alices_job):
    bobs = submit_qpu("bob", "true")
    wait_event(bobs, "dependency-add")
    try:
        assert held_ids("bob") == {jobid_int(bobs)}
        assert jobid_int(alices_job) in held_ids("alice")
        assert jobid_int(bobs) not in held_ids("alice")
        assert {jobid_int(alices_job), jobid_int(bobs)} <= held_ids()
    finally:
        owner("flux", "cancel", bobs, check=False)


def test_bob_cannot_read_alices_jobspec(alices_job):
    res = run("bob", "flux", "job", "info", alices_job, "jobspec", check=False)
    assert not res.ok


def test_the_quantum_commands_work_for_a_guest_and_show_only_what_is_theirs(alices_job):
    """bob sees the device list and status like everyone, and nothing of alice's."""
    backends = run("bob", "flux", "quantum", "backends")
    assert "local-sv1" in backends.stdout
    select = run("bob", "flux", "quantum", "select", "local:any", "--explain")
    assert "local-" in select.stdout
    status = run("bob", "flux", "quantum", "service", "status", "--json")
    view = json.loads(status.stdout)
    assert view.get("running") is True
    shown = json.dumps(view)
    assert alices_job not in shown and str(jobid_int(alices_job)) not in shown
    res = run("bob", "flux", "quantum", "task", alices_job, check=False)
    assert not res.ok
    assert alices_job not in run("bob", "flux", "quantum", "jobs").stdout
