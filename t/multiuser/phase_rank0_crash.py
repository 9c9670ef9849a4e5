"""The rank-0 broker crashed (SIGKILL: an OOM kill, a power loss) while alice's and
bob's QPU jobs are held: what the KVS had checkpointed is kept, so jobs submitted
before the last checkpoint are still held after the restart, then complete, and the
promise checker finds no violation.

A broker that is killed writes no final checkpoint: on its restart the KVS is the
last one it wrote.  Without ``[kvs] checkpoint-period`` that is the one of the last
orderly shutdown, and every job since then is gone (measured on this cluster: a job
held 15 s before the SIGKILL was not found after it).  This phase therefore runs only
where the instance sets ``kvs.checkpoint-period``; elsewhere it is skipped with one
line saying what to configure, and containers/check does not kill the broker.

containers/check drives it from the host:

1. ``test_before_the_crash`` (in node0): the owner stops the service; alice and bob
   each submit a QPU job on local-sv1, held with no task; the test waits for a KVS
   checkpoint of the KVS root that holds them (or a later one).
2. the host kills the rank-0 broker with SIGKILL; docker's restart policy starts it
   again; the host waits for the overlay to be ``full``.
3. ``test_after_the_crash`` (in node0): the jobs are there, held or released, the
   service is back, they complete with one task each, the checker finds no violation.
"""

from __future__ import annotations

import pytest
from cluster import USERS, output, owner, submit, wait_event, wait_for
from phases import (
    STATE_DIR,
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

STATE = "rank0-crash"
WHO = "id -un"


def checkpoint_period() -> str | None:
    """The instance's kvs.checkpoint-period (flux config get prints a string bare)."""
    res = owner("flux", "config", "get", "kvs.checkpoint-period", check=False)
    return res.stdout.strip() or None if res.ok else None


def kvs_sequence() -> int:
    """The primary KVS root's sequence number now."""
    return int(owner("flux", "kvs", "getroot", "--sequence").stdout)


def checkpointed_sequence() -> int:
    """The highest KVS root sequence the content store holds a checkpoint of."""
    script = (
        "import flux, json\n"
        "v = flux.Flux().rpc('content.checkpoint-get', {}).get()['value']\n"
        "print(json.dumps(max(c['sequence'] for c in v)))\n"
    )
    return int(owner("/opt/flux-quantum/bin/python", "-c", script).stdout)


def test_before_the_crash():
    (STATE_DIR / f"{STATE}.json").unlink(missing_ok=True)
    period = checkpoint_period()
    if not period:
        pytest.skip(
            "rank-0 crash phase SKIPPED: the instance sets no [kvs] checkpoint-period, so a "
            "killed rank-0 broker loses every job since the last orderly shutdown"
        )
    service_running()
    owner("flux", "quantum", "service", "stop")
    held = {
        user: submit(user, "--setattr=qpu.device=local-sv1", "-c1", "sh", "-c", WHO)
        for user in USERS
    }
    for jobid in held.values():
        wait_event(jobid, "dependency-add")
        assert view(jobid).held
    # The checkpoint that keeps the jobs is one of this root or a later one. (Not one
    # taken after some moment: the periodic checkpoint is skipped while the root does
    # not change, and with the service stopped nothing may change it again.)
    held_in = kvs_sequence()
    wait_for(
        lambda: checkpointed_sequence() >= held_in,
        600,
        f"a KVS checkpoint (every {period}) of root {held_in} or later",
        1,
    )
    save(STATE, {"started": container_started(), "held": held})


def test_after_the_crash():
    state = load(STATE)
    assert container_started() != state["started"], "node0's container was not restarted"
    owners = {jobid: user for user, jobid in state["held"].items()}
    for jobid in owners:
        v = view(jobid)
        assert (v.held or v.released) and v.exception is None, v
    service_running()
    ended = wait_ended(owners)
    for jobid, v in ended.items():
        assert v.result == "COMPLETED" and len(v.tasks) == 1, v
        assert output(jobid, owners[jobid]).strip() == owners[jobid]
    wait_service_idle()
    check_ledger(ended)
    check_promises(owners)
