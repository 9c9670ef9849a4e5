"""A compute node's broker stopped and restarted while alice's and bob's jobs
are held: nothing is lost.  The broker on node2 is stopped (SIGTERM, an
orderly stop; its container exits) and docker's restart policy starts it again,
as systemd's Restart=always does at a site; the held jobs stay held, and once
released they run, one on each compute node: bob's asks for node2
(--requires=host:node2), so it runs only once node2's resources are back, and
the test waits for them as the scheduler counts them (the broker rejoining the
overlay comes first). Without asking, both fit on node1, and the scheduler put
them there.

(A restart of rank 0 ends the container this suite runs in, so it is not done
from here.)"""

from __future__ import annotations

from cluster import (
    USERS,
    brokers_full,
    held_ids,
    jobid_int,
    output,
    owner,
    release,
    resources_up,
    state,
    submit_qpu,
    wait_event,
    wait_for,
)

REPORT = 'echo "$(id -un) $(hostname)"; sleep 1'


def container_started(rank: str) -> str:
    """Start time of PID 1 (docker-init) of the node: it changes when the container restarts."""
    res = owner(
        "flux", "exec", "-r", rank, "cut", "-d", " ", "-f", "22", "/proc/1/stat", check=False
    )
    return res.stdout.strip()


HOST = {"alice": "node1", "bob": "node2"}


def test_held_jobs_survive_a_compute_node_restart():
    jobs = {
        user: submit_qpu(user, "sh", "-c", REPORT, extra=["-c2", f"--requires=host:{HOST[user]}"])
        for user in USERS
    }
    for jobid in jobs.values():
        wait_event(jobid, "dependency-add")
    before = container_started("2")
    assert before

    owner(
        "flux", "exec", "-r", "2", "sh", "-c", "kill -TERM $(flux getattr broker.pid)", check=False
    )
    wait_for(lambda: container_started("2") not in ("", before), 180, "node2 to restart")
    wait_for(brokers_full, 180, "node2's broker to rejoin")
    wait_for(lambda: resources_up("node2"), 180, "node2's resources to be up again")

    for jobid in jobs.values():
        assert state(jobid) == "DEPEND"
    assert {jobid_int(j) for j in jobs.values()} <= held_ids()

    for jobid in jobs.values():
        release(jobid)
    for user, jobid in jobs.items():
        wait_event(jobid, "clean", timeout=120)
        assert output(jobid, user).split() == [user, HOST[user]]
