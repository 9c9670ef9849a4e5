"""No credential shows anywhere the instance keeps or shows things: the
secret-scan harness (secret_scan.py) over a real multi-user flow."""

from __future__ import annotations

from cluster import give_credentials, owner, release, run, submit_qpu, wait_event
from secret_scan import collect, describe, scan

ALICE_SECRET = "FLUXQ-MARKER-alice-secret-7f3a9c"
ALICE_TOKEN = "FLUXQ-MARKER-alice-session-1b2e8d"
PLANTED = "FLUXQ-MARKER-planted-memo-5c6d"


def test_harness_finds_a_planted_marker():
    """The harness is only worth its silence if it finds what is there: a memo
    alice sets on her own held job reaches job-list and the KVS eventlog."""
    jobid = submit_qpu("alice", "true")
    wait_event(jobid, "dependency-add")
    run("alice", "flux", "job", "memo", jobid, f"note={PLANTED}")
    # The job-manager answers before the memo event reaches the KVS (its writes are
    # batched): wait for the event, or the dump may run first.
    wait_event(jobid, "memo")
    try:
        hits = scan(collect(), [PLANTED])
        where = {h.artifact.split()[0] for h in hits}
        assert "flux" in where, describe(hits)  # flux jobs --json (memos)
        assert "eventlog" in where, describe(hits)
        assert any(h.artifact.startswith("kvs ") for h in hits), describe(hits)
    finally:
        owner("flux", "cancel", jobid, check=False)


def test_alices_credentials_stay_hers_through_a_qpu_flow():
    give_credentials("alice", ALICE_SECRET, ALICE_TOKEN)
    # The job, running as alice, can read her credentials; nothing else may show them.
    jobid = submit_qpu("alice", "sh", "-c", "test -r ~/.aws/credentials")
    wait_event(jobid, "dependency-add")
    release(jobid)
    wait_event(jobid, "clean", timeout=90)
    hits = scan(collect(), [ALICE_SECRET, ALICE_TOKEN])
    assert not hits, describe(hits)


def test_credentials_in_the_submit_environment_never_enter_the_instance():
    """flux submit copies the submitter's whole environment into the jobspec; a QPU job
    carrying a vendor credential is refused at submit (the ingest validator), before
    the jobspec reaches the KVS, saying how to submit without it."""
    res = run(
        "alice",
        "flux",
        "submit",
        "--setattr=qpu.device=sv1",
        "--setattr=qpu.account=user",
        "true",
        env={"AWS_SECRET_ACCESS_KEY": ALICE_SECRET},
        check=False,
    )
    assert not res.ok
    assert "--env=-AWS_SECRET_ACCESS_KEY" in res.stderr and ALICE_SECRET not in res.stderr
    hits = scan(collect(), [ALICE_SECRET])
    assert not hits, describe(hits)
