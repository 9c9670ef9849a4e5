"""A compute node lost while one QPU job runs on it and others are held: the held jobs
are not lost, the running one ends saying why, the promise checker finds no
violation, and the node joins again.

containers/check drives it from the host, one test at a time:

1. ``test_before_losing_node2`` (in node0): alice's QPU job is released and runs on
   both compute nodes (``-N2``: node1 and node2); the owner stops the service, then
   alice and bob each submit a QPU job, held with no task.
2. the host kills node2's container (``docker kill``: the broker and every job shell
   there die at once, as in a power loss).
3. ``test_after_losing_node2`` (in node0): the running job has ended with an
   exception naming the lost node; the held jobs are still held; the owner starts the
   service again, and they are released and complete on the node that is left.
4. the host starts node2 again (or docker's restart policy has) and waits for the
   overlay to be ``full``; ``test_node2_back`` (in node0) runs a job on both nodes.
"""

from __future__ import annotations

from cluster import USERS, owner, submit, wait_event
from phases import (
    check_ledger,
    check_promises,
    load,
    save,
    service_running,
    view,
    wait_ended,
    wait_service_idle,
)

STATE = "node-loss"
CATALOG = "/etc/flux-quantum/backends.yaml"
EMULATOR = "http://emulator:8080"


def test_before_losing_node2():
    running = submit("alice", "--setattr=qpu.device=local-sv1", "-N2", "-n2", "-c1", "sleep", "900")
    wait_event(running, "start", timeout=300)
    service_running()
    owner("flux", "quantum", "service", "stop")
    held = {
        user: submit(user, "--setattr=qpu.device=local-sv1", "-c1", "hostname") for user in USERS
    }
    for jobid in held.values():
        wait_event(jobid, "dependency-add")
        assert view(jobid).held
    save(STATE, {"running": running, "held": held})


def test_after_losing_node2():
    state = load(STATE)
    running = state["running"]
    lost = wait_ended([running], timeout=300)[running]
    print(f"the running job ended: {lost.result}, {lost.exception}")
    assert lost.result != "COMPLETED" and lost.exception, lost
    assert "qpu-release" in lost.names and len(lost.tasks) == 1, lost

    held = list(state["held"].values())
    for jobid in held:
        v = view(jobid)
        assert v.held and not v.tasks and v.exception is None, v

    owner(
        "flux",
        "quantum",
        "service",
        "start",
        "--catalog",
        CATALOG,
        "--emulator-url",
        EMULATOR,
        timeout=120,
    )
    ended = wait_ended(held, timeout=300)
    for v in ended.values():
        assert v.result == "COMPLETED" and len(v.tasks) == 1, v
    wait_service_idle()
    check_ledger({running: lost, **ended})
    check_promises([running, *held])


def test_node2_back():
    """After the node joined again, a job spans both compute nodes."""
    jobid = submit("bob", "-N2", "-n2", "hostname")
    wait_event(jobid, "clean", timeout=180)
    assert view(jobid).result == "COMPLETED"
