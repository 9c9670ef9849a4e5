"""Guests' QPU jobs handled end to end (issue 10, parts 1 and 5): a site-account
job handled by the system instance's service (run by user flux with the site's
credentials), a user-account job handled by alice's own service with her own
credentials, the demo run by alice, and one vendor task per request across a
compute node's restart.

The site account is the instance owner's credentials file (~flux/.aws/credentials,
0600 flux, written by the image's setup.sh) and ``[quantum.accounts] site =
["local"]``; the user account is alice's own ~/.aws/credentials, read only by her
own processes.  Both hold marker values, so the secret scan proves neither leaks."""

from __future__ import annotations

import json
import subprocess

from cluster import (
    EMULATOR_ENV,
    EMULATOR_URL,
    RUNUSER,
    URI,
    brokers_full,
    event_names,
    eventlog,
    give_credentials,
    jobid_int,
    output,
    owner,
    rpc,
    run,
    submit,
    wait_event,
    wait_for,
)
from secret_scan import collect, describe, scan

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


def start_agent(user: str) -> subprocess.Popen:
    """USER's own handler service (``flux quantum service run``) in the background, as
    on a login node: it handles only USER's qpu.account=user jobs."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "FLUX_URI": URI,
        "HOME": f"/home/{user}",
        "USER": user,
        **EMULATOR_ENV,
    }
    return subprocess.Popen(
        [
            RUNUSER,
            "-u",
            user,
            "--",
            "flux",
            "quantum",
            "service",
            "run",
            "--catalog",
            "/etc/flux-quantum/backends.yaml",
            "--emulator-url",
            EMULATOR_URL,
        ],
        env=env,
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def write_program(user: str) -> str:
    """USER's program, in a file USER owns that the site's service (user flux) can read:
    the service reads a guest's program only from a file the guest owns."""
    path = f"/tmp/bell-{user}.qasm"
    run(user, "sh", "-c", f"umask 022; cat > {path} <<'EOF'\n{PROGRAM}EOF")
    return path


def run_consumer(user: str, *qpu: str) -> str:
    """Submit a one-core consumer of a Bell-pair task as USER and wait for it to end."""
    program = write_program(user)
    jobid = submit(user, *qpu, f"--setattr=qpu.program={program}", "-c1", "sh", "-c", CONSUMER)
    wait_event(jobid, "clean", timeout=300)
    return jobid


def test_site_account_job_for_alice():
    """The system service selects, submits, releases; alice's job reads its task's
    result through the service (she has no vendor credentials)."""
    jobid = run_consumer("alice", "--setattr=qpu.device=local-sv1")
    names = event_names(jobid)
    assert "qpu-task" in names and names.index("qpu-task") < names.index("alloc")
    lines = output(jobid, "alice").splitlines()
    first = lines[0].split()
    assert first[0] == "alice" and first[1] in ("node1", "node2") and first[2].startswith("arn:")
    # flux quantum task --json, as alice: state and counts read through the service.
    task = json.loads("\n".join(lines[1:]))
    assert task["task"] == first[2] and task["state"] == "COMPLETED"
    assert sum(task["counts"].values()) > 0
    hits = scan(collect(), [SITE_SECRET])
    assert not hits, describe(hits)


def test_bob_cannot_read_alices_task_through_the_service():
    jobid = run_consumer("alice", "--setattr=qpu.device=local-sv1")
    res = rpc("bob", "qpu_handlers.task", {"id": jobid_int(jobid), "op": "result"})
    assert not res.ok and "is not yours" in res.stderr


def test_user_account_job_for_alice():
    """Alice's own service (her credentials, her process) handles her user-account
    job; the system service leaves it alone."""
    give_credentials("alice", USER_SECRET)
    agent = start_agent("alice")
    try:
        jobid = run_consumer(
            "alice", "--setattr=qpu.device=local-sv1", "--setattr=qpu.account=user"
        )
    finally:
        agent.terminate()
        agent.wait(timeout=30)
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
            "--setattr=qpu.device=local-sv1",
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
    wait_for(brokers_full, 180, "node2's broker to rejoin")
    for jobid in jobs:
        wait_event(jobid, "clean", timeout=300)
    assert len(set(vendor_tasks()) - before) == len(jobs)
