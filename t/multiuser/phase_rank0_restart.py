"""The rank-0 broker restarted while alice's and bob's QPU jobs are held: nothing is
lost, the handler service comes back at boot, every job completes with exactly one
vendor task, and the promise checker finds no violation.

A restart of rank 0 ends node0's container, where this runs, so containers/check
drives it from the host, one test at a time:

1. ``test_before_the_restart`` (in node0): alice and bob each submit a site-account job
   on a QPU whose emulated queue holds the task for a while (``qpu.release_at=done``;
   local-garnet for alice, local-ankaa3 for bob: the site keeps one task in flight on
   each), and wait for its vendor task; the owner stops the
   service (``flux quantum service stop``, what the broker's own shutdown does first),
   then alice and bob each submit a job on local-sv1, which stays held with no task.
2. the host kills the rank-0 broker (SIGTERM); docker's restart policy starts it again
   on the same statedir (/var/lib/flux, kept by the container), as systemd's
   Restart=always does at a site; it waits for ``flux overlay status --summary`` to be
   ``full``.
3. ``test_after_the_restart`` (in node0): every job is still there, held or released,
   the service is running again (loaded at boot), every job completes, each with the
   one task it had before the restart or, when it had none, one task now.

The QPU jobs may have been released before the restart (a short queue that day):
that is reported, not failed; the sv1 jobs are held through it in every run.
"""

from __future__ import annotations

from cluster import USERS, output, owner, submit, wait_event
from phases import (
    check_ledger,
    check_promises,
    container_started,
    load,
    save,
    service_running,
    view,
    wait_ended,
    wait_service_idle,
)

STATE = "rank0-restart"
# One QPU each: the site keeps one task in flight per device (the catalog's slots).
QPUS = ("local-garnet", "local-ankaa3")
WHO = "id -un"


def test_before_the_restart():
    inflight = {
        user: submit(user, f"--setattr=qpu.device={device}", "-c1", "sh", "-c", WHO)
        for user, device in zip(USERS, QPUS, strict=True)
    }
    for jobid in inflight.values():
        wait_event(jobid, "qpu-task", timeout=180)
    service_running()
    owner("flux", "quantum", "service", "stop")
    held = {
        user: submit(user, "--setattr=qpu.device=local-sv1", "-c1", "sh", "-c", WHO)
        for user in USERS
    }
    for jobid in held.values():
        wait_event(jobid, "dependency-add")
    views = {jobid: view(jobid) for jobid in (*inflight.values(), *held.values())}
    for jobid in held.values():
        assert views[jobid].held and not views[jobid].tasks, views[jobid]
    for jobid in inflight.values():
        assert len(views[jobid].tasks) == 1, views[jobid]
    save(
        STATE,
        {
            "started": container_started(),
            "inflight": inflight,
            "held": held,
            "tasks": {jobid: list(views[jobid].tasks) for jobid in inflight.values()},
            "held_at_restart": sorted(j for j, v in views.items() if v.held),
        },
    )
    print(f"held before the restart: {sorted(j for j, v in views.items() if v.held)}")


def test_after_the_restart():
    state = load(STATE)
    assert container_started() != state["started"], "node0's container was not restarted"
    owners = {jobid: user for part in ("inflight", "held") for user, jobid in state[part].items()}
    views = {jobid: view(jobid) for jobid in owners}
    print(
        "after the restart: "
        + ", ".join(f"{j} {'held' if v.held else 'released'} ({v.state})" for j, v in views.items())
    )
    for jobid, v in views.items():
        assert v.held or v.released, f"{jobid} is neither held nor released: {v}"
        assert v.exception is None, f"{jobid}: {v.exception}"
    service_running()

    ended = wait_ended(owners)
    for jobid, v in ended.items():
        assert v.result == "COMPLETED", v
        assert output(jobid, owners[jobid]).strip() == owners[jobid]
        assert len(v.tasks) == 1, f"{jobid} has {len(v.tasks)} vendor tasks: {v.tasks}"
    for jobid, tasks in state["tasks"].items():
        assert list(ended[jobid].tasks) == tasks, "a task in flight was created again"

    wait_service_idle()
    check_ledger(ended)
    check_promises(owners)
