"""What needs the redesigned handler service (issue 10, parts 1 and 5): the
system instance's service handling guests' jobs with a site account and with a
user account, the demo run by alice, and one vendor task per request across a
node restart.  Marked ``needs_service``: skipped (and said so) until the
lead's supervisor module serves every user's jobs; run them with
FLUXQ_PYTEST_ARGS='-m needs_service' containers/check.

The site account is the instance owner's credentials file (0600 flux) named
in the service's configuration; the user account is alice's own
~/.aws/credentials, read only by her own processes.  Both hold marker values,
so the secret scan below proves neither leaks."""

from __future__ import annotations

import json
import subprocess

import pytest
from cluster import (
    EMULATOR_ENV,
    event_names,
    eventlog,
    give_credentials,
    nodes_up,
    output,
    owner,
    run,
    submit,
    wait_event,
    wait_for,
)
from secret_scan import collect, describe, scan

pytestmark = pytest.mark.needs_service

SITE_SECRET = "FLUXQ-MARKER-site-secret-42e1"
USER_SECRET = "FLUXQ-MARKER-alice-user-secret-9d07"
PROGRAM = "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"
CONSUMER = 'echo "$(id -un) $(hostname) $FLUX_QPU_TASK"; flux quantum task --json'


def vendor_tasks() -> list[str]:
    """Every task the emulator has been asked to create (SearchQuantumTasks)."""
    script = (
        "import json, boto3\n"
        "c = boto3.client('braket', aws_access_key_id='x', aws_secret_access_key='y')\n"
        "f = [{'name': 'status', 'operator': 'EQUAL', 'values': [s]} for s in\n"
        "     ('QUEUED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLING', 'CANCELLED')]\n"
        "arns = []\n"
        "for one in f:\n"
        "    for page in c.get_paginator('search_quantum_tasks').paginate(filters=[one]):\n"
        "        arns += [t['quantumTaskArn'] for t in page['quantumTasks']]\n"
        "print(json.dumps(arns))\n"
    )
    out = subprocess.run(
        ["/opt/flux-quantum/bin/python", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**EMULATOR_ENV, "PATH": "/usr/bin:/bin"},
    ).stdout
    return json.loads(out)


def write_program(user: str) -> str:
    path = f"/home/{user}/bell.qasm"
    run(user, "sh", "-c", f"cat > {path} <<'EOF'\n{PROGRAM}EOF")
    return path


def run_consumer(user: str, *qpu: str) -> str:
    """Submit a one-core consumer of a Bell-pair task as USER and wait for it to end."""
    program = write_program(user)
    jobid = submit(user, *qpu, f"--setattr=qpu.program={program}", "-c1", "sh", "-c", CONSUMER)
    wait_event(jobid, "clean", timeout=300)
    return jobid


def test_site_account_job_for_alice():
    jobid = run_consumer("alice", "--setattr=qpu.device=braket:sv1")
    names = event_names(jobid)
    assert "qpu-task" in names and names.index("qpu-task") < names.index("alloc")
    first = output(jobid, "alice").splitlines()[0].split()
    assert first[0] == "alice" and first[1] in ("node1", "node2") and first[2].startswith("arn:")
    hits = scan(collect(), [SITE_SECRET])
    assert not hits, describe(hits)


def test_user_account_job_for_alice():
    give_credentials("alice", USER_SECRET)
    jobid = run_consumer("alice", "--setattr=qpu.device=braket:sv1", "--setattr=qpu.account=user")
    task = [e for e in eventlog(jobid) if e["name"] == "qpu-task"][0]["context"]["task"]
    assert task in vendor_tasks()
    hits = scan(collect(), [USER_SECRET])
    assert not hits, describe(hits)


def test_demo_run_by_alice():
    res = run("alice", "flux", "quantum", "demo", timeout=600)
    assert "released" in res.stdout


def test_one_vendor_task_per_request_across_a_node_restart():
    program = write_program("bob")
    before = set(vendor_tasks())
    jobs = [
        submit(
            "bob",
            "--setattr=qpu.device=local-forte1",
            f"--setattr=qpu.program={program}",
            "-c1",
            "true",
        )
        for _ in range(2)
    ]
    for jobid in jobs:
        wait_event(jobid, "qpu-task", timeout=120)
    owner(
        "flux", "exec", "-r", "2", "sh", "-c", "kill -TERM $(flux getattr broker.pid)", check=False
    )
    wait_for(lambda: nodes_up() == 3, 180, "node2's broker to rejoin")
    for jobid in jobs:
        wait_event(jobid, "clean", timeout=300)
    assert len(set(vendor_tasks()) - before) == len(jobs)
