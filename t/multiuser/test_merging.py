"""Merged tasks across real users (issue 22): the system instance's service merges
alice's and bob's programs into one vendor task only where the site allows it.

The image's configuration merges on local-garnet only, and lets users share a task
only within bank ``shared`` (``[quantum.merge] across_users = ["shared"]``). Two of
the test's own tasks on Garnet, created and cancelled around it, keep its queue from
being empty, so that the service pools the jobs instead of sending each at once to an
idle device. Alice's and bob's jobs in bank ``shared`` go out as one task, each
reading only its own program's counts through the service; in no bank they go alone.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest
from cluster import EMULATOR_ENV, USERS, eventlog, output, run, submit, wait_event

DEVICE_ARN = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
# Alice's program measures 00, bob's 11 (two x gates): the counts say whose each got.
PROGRAMS = {
    "alice": "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nc = measure q;\n",
    "bob": "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nx q[0];\nx q[1];\nc = measure q;\n",
}
EXPECTED = {"alice": {"00": 100}, "bob": {"11": 100}}
READ = "flux quantum task --json"


def _braket(script: str) -> str:
    """Run SCRIPT with the Braket SDK's boto3 against the emulator (Garnet's region)."""
    out = subprocess.run(
        ["/opt/flux-quantum/bin/python", "-c", script],
        capture_output=True,
        text=True,
        env={**EMULATOR_ENV, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def busy_garnet() -> Iterator[Callable[[], None]]:
    """Two tasks of the test's own queued on Garnet while the jobs are pooled; the test
    calls what it yields to cancel them once its tasks exist (and teardown does)."""
    arns = json.loads(
        _braket(
            "import json, boto3\n"
            "c = boto3.client('braket', aws_access_key_id='x', aws_secret_access_key='y',\n"
            "                 region_name='eu-north-1')\n"
            "prog = json.dumps({'braketSchemaHeader': {'name': 'braket.ir.openqasm.program',"
            " 'version': '1'}, 'source': 'OPENQASM 3.0; qubit[1] q; bit[1] c; c = measure q;'})\n"
            "arns = [c.create_quantum_task(clientToken=f'fq-busy-{i}', deviceArn="
            f"'{DEVICE_ARN}', shots=10, action=prog, outputS3Bucket="
            "'amazon-braket-flux-quantum-emulator', outputS3KeyPrefix='busy')"
            "['quantumTaskArn'] for i in range(2)]\n"
            "print(json.dumps(arns))\n"
        )
    )

    def cancel() -> None:
        # Those that ended already are left as they are.
        _braket(
            "import boto3\n"
            "c = boto3.client('braket', aws_access_key_id='x', aws_secret_access_key='y',\n"
            "                 region_name='eu-north-1')\n"
            f"for arn in {arns!r}:\n"
            "    if c.get_quantum_task(quantumTaskArn=arn)['status'] == 'QUEUED':\n"
            "        c.cancel_quantum_task(quantumTaskArn=arn, clientToken='fq-busy-cancel')\n"
        )

    yield cancel
    cancel()


def _program(user: str) -> str:
    path = f"/tmp/merge-{user}.qasm"
    run(user, "sh", "-c", f"umask 022; cat > {path} <<'EOF'\n{PROGRAMS[user]}EOF")
    return path


def _submit(user: str, *extra: str) -> str:
    return submit(
        user,
        "--setattr=qpu.device=local-garnet",
        "--setattr=qpu.shots=100",
        f"--setattr=qpu.program={_program(user)}",
        *extra,
        "-c1",
        "sh",
        "-c",
        READ,
    )


def _submitted(jobid: str) -> dict:
    return [e for e in eventlog(jobid) if e["name"] == "qpu-submit"][-1]["context"]


def _task(jobid: str) -> str:
    return [e for e in eventlog(jobid) if e["name"] == "qpu-task"][-1]["context"]["task"]


def test_alice_and_bob_share_a_task_only_within_a_shared_bank(busy_garnet):
    shared = {user: _submit(user, "--setattr=bank=shared") for user in USERS}
    for jobid in shared.values():
        wait_event(jobid, "qpu-task", timeout=120)
    # In no bank: each goes alone (after waiting its bound for company of its own; the
    # image gives local-garnet slots for all four tasks at once).
    alone = {user: _submit(user) for user in USERS}
    for jobid in alone.values():
        wait_event(jobid, "qpu-task", timeout=120)
    busy_garnet()  # no need to keep Garnet busy any more

    # One task for the two in bank shared, each in its own place, recorded first.
    slots = {user: _submitted(jobid)["merge"] for user, jobid in shared.items()}
    assert slots["alice"]["key"] == slots["bob"]["key"], slots
    assert sorted(s["index"] for s in slots.values()) == [0, 1], slots
    assert _task(shared["alice"]) == _task(shared["bob"])
    # Two tasks of their own for the others.
    assert all("merge" not in _submitted(jobid) for jobid in alone.values())
    assert _task(alone["alice"]) != _task(alone["bob"])
    assert _task(alone["alice"]) != _task(shared["alice"])

    # Each job, run as its user, read only its own program's counts through the service.
    for user, jobid in shared.items():
        wait_event(jobid, "clean", timeout=600)
        got = json.loads(output(jobid, user))
        assert got["state"] == "COMPLETED" and got["counts"] == EXPECTED[user], got
    for user, jobid in alone.items():
        wait_event(jobid, "clean", timeout=600)
        assert json.loads(output(jobid, user))["counts"] == EXPECTED[user]
