"""The system instance of the container cluster, seen from rank 0 (node0) as
real Unix users: every command runs through ``runuser -u USER`` against the
system instance's local URI, so the broker authenticates the caller by uid and
flux-security signs jobs with munge, exactly as at a site.

``flux`` is the instance owner; ``alice`` and ``bob`` are ordinary users
(guests).  The test process itself runs as root inside node0 and only uses
root to become those users.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OWNER = "flux"
# The commands below run with a user's PATH, which has no sbin: found here, once.
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"
USERS = ("alice", "bob")
NODES = ("node0", "node1", "node2")
URI = "local:///run/flux/local"
EMULATOR_URL = "http://emulator:8080"
# Every vendor client started by a test talks to the emulator container, never
# to a real endpoint (the network is internal anyway: this only makes it fail fast).
EMULATOR_ENV = {
    "AWS_ENDPOINT_URL_BRAKET": EMULATOR_URL,
    "BRAKET_ENDPOINT": EMULATOR_URL,
    "AWS_ENDPOINT_URL_S3": f"{EMULATOR_URL}/s3",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AMZN_BRAKET_OUT_S3_BUCKET": "amazon-braket-flux-quantum-emulator",
    "FLUX_QUANTUM_EMULATOR_URL": EMULATOR_URL,
}


@dataclass(frozen=True)
class Result:
    """What one command printed and how it exited."""

    args: tuple[str, ...]
    user: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandFailed(AssertionError):
    pass


def run(
    user: str,
    *argv: str,
    check: bool = True,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> Result:
    """Run ARGV as USER (runuser, no login shell) against the system instance."""
    base = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "FLUX_URI": URI,
        "HOME": os.path.expanduser(f"~{user}"),
        "LANG": "C.UTF-8",
        "USER": user,
        "LOGNAME": user,
        **EMULATOR_ENV,
    }
    if env:
        base.update(env)
    cmd = [RUNUSER, "-u", user, "--", *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=base, cwd="/")
    result = Result(tuple(argv), user, proc.returncode, proc.stdout, proc.stderr)
    if check and not result.ok:
        raise CommandFailed(
            f"as {user}: {' '.join(argv)} exited {proc.returncode}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return result


def owner(*argv: str, **kw: Any) -> Result:
    """Run as the instance owner (user flux)."""
    return run(OWNER, *argv, **kw)


def submit(user: str, *args: str, env: dict[str, str] | None = None) -> str:
    """``flux submit ARGS`` as USER; the job id (f58)."""
    return run(user, "flux", "submit", *args, env=env).stdout.strip()


def submit_qpu(user: str, *command: str, qpu: str = "sv1", extra: Sequence[str] = ()) -> str:
    """Submit a job that asks for a QPU on the user's own account: the plugin holds it
    in DEPEND and, with no handler service of the user's own running, it stays held
    until released by hand (the system service leaves user-account jobs alone)."""
    return submit(
        user,
        f"--setattr=qpu.device={qpu}",
        "--setattr=qpu.account=user",
        *extra,
        *(command or ("true",)),
    )


def wait_event(jobid: str, event: str, timeout: float = 60, user: str = OWNER) -> None:
    run(user, "flux", "job", "wait-event", "-t", str(timeout), jobid, event, timeout=timeout + 30)


def eventlog(jobid: str, user: str = OWNER) -> list[dict[str, Any]]:
    out = run(user, "flux", "job", "eventlog", "--format=json", jobid).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def event_names(jobid: str) -> list[str]:
    return [e["name"] for e in eventlog(jobid)]


def job(jobid: str, user: str = OWNER) -> dict[str, Any]:
    """The job's record from job-list (state, userid, nodelist, dependencies...)."""
    out = run(user, "flux", "jobs", "--json", jobid).stdout
    return json.loads(out)


def state(jobid: str) -> str:
    return job(jobid)["state"]


def held_ids(user: str = OWNER) -> set[int]:
    """Jobs the quantum plugin holds, as USER may see them (flux quantum jobs)."""
    out = run(user, "flux", "quantum", "jobs", "--json").stdout
    return {int(j["id"]) for j in json.loads(out)}


def jobid_int(jobid: str) -> int:
    return int(run(OWNER, "flux", "job", "id", "--to=dec", jobid).stdout.strip())


def release(jobid: str, user: str = OWNER, check: bool = True) -> Result:
    return run(
        user,
        "flux",
        "quantum",
        "release",
        jobid,
        "--task",
        "arn:aws:braket:us-east-1:123456789012:quantum-task/multiuser-test",
        "--device",
        "sv1",
        check=check,
    )


def rpc(user: str, topic: str, payload: dict[str, Any]) -> Result:
    """One RPC to the system instance as USER, through the flux-quantum venv's bindings."""
    script = "import json, sys, flux\nflux.Flux().rpc(sys.argv[1], json.loads(sys.argv[2])).get()\n"
    return run(
        user, "/opt/flux-quantum/bin/python", "-c", script, topic, json.dumps(payload), check=False
    )


def give_credentials(user: str, secret: str, token: str | None = None) -> None:
    """Braket credentials holding marker values in USER's own ~/.aws (0600)."""
    lines = f"[default]\\naws_access_key_id = AKIAFLUXQMARKER\\naws_secret_access_key = {secret}\\n"
    if token:
        lines += f"aws_session_token = {token}\\n"
    run(user, "sh", "-c", f"umask 077; mkdir -p ~/.aws; printf '{lines}' > ~/.aws/credentials")


def brokers_full() -> bool:
    """Every broker of the instance has joined (rank 0 runs no jobs: its resources are
    excluded, so the overlay is asked, not the resource list)."""
    out = owner("flux", "overlay", "status", "--summary", check=False)
    return out.stdout.strip() == "full"


def resources_up(host: str) -> bool:
    """Whether the scheduler counts HOST's resources up (a restarted broker's come back
    a moment after the overlay counts it again)."""
    out = owner(
        "flux", "resource", "list", "--states=up", f"--include={host}", "--no-header",
        "--format={nodelist}", check=False,
    )  # fmt: skip
    return out.returncode == 0 and out.stdout.split() == [host]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5) -> None:
    """Poll PREDICATE until it is true; fail naming WHAT after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def output(jobid: str, user: str) -> str:
    """The job's standard output, read by its owner once it has finished."""
    return run(user, "flux", "job", "attach", jobid, timeout=120).stdout
