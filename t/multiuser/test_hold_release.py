"""Guests' QPU jobs in the system instance: held in DEPEND by the quantum
jobtap plugin, released by the instance owner, run under their own uids on
nodes other than rank 0 (rank 0 is the management node: [resource] exclude)."""

from __future__ import annotations

import pwd

import pytest
from cluster import USERS, event_names, output, release, state, submit_qpu, wait_event

# What every job prints: who it ran as and where; FLUX_QPU_TASK comes from the
# quantum job-shell plugin once the job is released.
REPORT = 'echo "$(id -un) $(id -u) $(hostname) ${FLUX_QPU_TASK:-none}"'


@pytest.mark.parametrize("user", USERS)
def test_qpu_job_held_released_and_run_as_its_user(user):
    jobid = submit_qpu(user, "sh", "-c", REPORT)
    wait_event(jobid, "dependency-add")
    assert state(jobid) == "DEPEND"
    release(jobid)
    wait_event(jobid, "clean", timeout=90)
    names = event_names(jobid)
    assert "qpu-release" in names and names.index("qpu-release") < names.index("alloc")
    name, uid, host, task = output(jobid, user).split()
    assert (name, int(uid)) == (user, pwd.getpwnam(user).pw_uid)
    assert host in ("node1", "node2"), f"{user}'s job ran on {host}"
    assert task.endswith("quantum-task/multiuser-test")


def test_jobs_of_both_users_spread_over_both_compute_nodes():
    """Two 2-core jobs at once: one per compute node, each under its user's uid."""
    jobs = {
        user: submit_qpu(user, "sh", "-c", REPORT + "; sleep 2", extra=["-c2"]) for user in USERS
    }
    for jobid in jobs.values():
        wait_event(jobid, "dependency-add")
    for jobid in jobs.values():
        release(jobid)
    hosts = set()
    for user, jobid in jobs.items():
        wait_event(jobid, "clean", timeout=90)
        name, _uid, host, _task = output(jobid, user).split()
        assert name == user
        hosts.add(host)
    assert hosts == {"node1", "node2"}


def test_guest_releases_her_own_job():
    """The plugin lets a job's own user act on it (her own handlers may release it)."""
    jobid = submit_qpu("alice", "true")
    wait_event(jobid, "dependency-add")
    release(jobid, user="alice")
    wait_event(jobid, "clean", timeout=90, user="alice")
