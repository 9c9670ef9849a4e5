"""A real Flux instance for the flux tier: ``flux start --test-size=N`` in the
background, driven from the test with FLUX_URI, stoppable and restartable on
the same statedir; and ``until``, how a flux test waits for what the instance (or the
service in it) does next: polled, never a fixed sleep. A test that starts an instance
must be marked ``flux`` (t/tiers.py fails it otherwise)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flux_quantum.cli.plugin import instance_config

START_TIMEOUT = 60.0
ROLE_USER = 0x2
# Signs a jobspec (stdin) for the user argv[1] with security mechanism "none", which a
# test instance takes from its owner: a guest's submission as flux-core's tests make one.
SIGN_AS = (
    "import sys; from flux.security import SecurityContext; "
    "sys.stdout.write(SecurityContext().sign_wrap_as(int(sys.argv[1]), sys.stdin.read(), "
    'mech_type="none").decode())'
)


def until(what: Callable[[], Any], timeout: float = 30.0, step: float = 0.1) -> Any:
    """``what()``'s first true value, asked every ``step`` seconds; AssertionError
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


def quantum_config(**plugin_conf: int) -> str:
    """Instance TOML loading the quantum plugin and the ingest validator,
    exactly as ``flux quantum config`` prints it for a site."""
    return instance_config(plugin_conf)


def user_daily_limit(spend: float) -> str:
    """A ``[quantum.quota]`` table: every user may spend ``spend`` a day (limit 1,
    named 'user-daily')."""
    return (
        '\n[[quantum.quota.limits]]\nname = "user-daily"\nuser = "*"\nperiod = "day"\n'
        f"spend = {float(spend)}\n"
    )


class FluxInstance:
    """One test instance. ``run()`` executes a command inside it."""

    def __init__(
        self,
        workdir: Path,
        size: int = 1,
        config: str | None = None,
        statedir: bool = False,
        cores: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.size = size
        self.config = quantum_config() if config is None else config
        self.statedir = workdir / "state" if statedir else None
        self.cores = cores
        self.proc: subprocess.Popen[bytes] | None = None
        self.uri: str | None = None
        self.env: dict[str, str] = {}

    def start(self) -> FluxInstance:
        confdir = self.workdir / "conf"
        confdir.mkdir(parents=True, exist_ok=True)
        (confdir / "quantum.toml").write_text(self.config)
        urifile = self.workdir / "uri"
        stopfile = self.workdir / "stop"
        urifile.unlink(missing_ok=True)
        stopfile.unlink(missing_ok=True)
        cmd = ["flux", "start", f"--test-size={self.size}", "-c", str(confdir)]
        if self.statedir:
            self.statedir.mkdir(exist_ok=True)
            cmd.append(f"-Sstatedir={self.statedir}")
        if self.cores:
            cmd.append(f"--test-hosts=node[0-{self.size - 1}]")
        script = (
            f'echo "$FLUX_URI" > {shlex.quote(str(urifile))}.tmp && '
            f"mv {shlex.quote(str(urifile))}.tmp {shlex.quote(str(urifile))}; "
            f"while [ ! -e {shlex.quote(str(stopfile))} ]; do sleep 0.1; done"
        )
        cmd += ["sh", "-c", script]
        self.log = open(self.workdir / "broker.log", "ab")  # noqa: SIM115
        # The handler service keeps its ledger in XDG_STATE_HOME when the instance has
        # no statedir: one per test instance, never the developer's own.
        state_home = str(self.workdir / "xdg-state")
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, XDG_STATE_HOME=state_home),
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not urifile.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"flux start exited {self.proc.returncode}: {self.broker_log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"flux start did not come up: {self.broker_log()}")
            time.sleep(0.05)
        self.uri = urifile.read_text().strip()
        bindir = os.path.dirname(sys.executable)
        self.env = dict(os.environ, FLUX_URI=self.uri, XDG_STATE_HOME=state_home)
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        # Wait until the queue is up so the first submit is not racing rc1.
        self.run(["flux", "queue", "idle", "--quiet", "--timeout=30s"], check=False)
        return self

    def broker_log(self) -> str:
        path = self.workdir / "broker.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc is None:
            return 0
        (self.workdir / "stop").touch()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        self.log.close()
        return rc

    def restart(self) -> FluxInstance:
        self.stop()
        return self.start()

    def run(
        self,
        cmd: Sequence[str],
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(self.env)
        if env:
            full_env.update(env)
        proc = subprocess.run(
            list(cmd),
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            cwd=self.workdir,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{shlex.join(cmd)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def restart_job_manager(self) -> None:
        """Reload the job-manager the way flux-core's tests do (t2270), taking the
        modules that talk to it down and up around it."""
        loaded = self.run(["flux", "module", "list"]).stdout.split()
        dependents = [
            m
            for m in (
                "job-list",
                "job-exec",
                "sched-fluxion-feasibility",
                "sched-fluxion-qmanager",
                "sched-fluxion-resource",
                "sched-simple",
            )
            if m in loaded
        ]
        for name in dependents:
            self.run(["flux", "module", "remove", name])
        self.run(["flux", "module", "reload", "job-manager"])
        for name in reversed(dependents):
            self.run(["flux", "module", "load", name])

    def guest_env(self, userid: int) -> dict[str, str]:
        """Environment that makes flux commands act as guest USERID (test instances only)."""
        return {"FLUX_HANDLE_USERID": str(userid), "FLUX_HANDLE_ROLEMASK": str(ROLE_USER)}

    def submit(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        return self.run(["flux", "submit", *args], env=env).stdout.strip()

    def submit_as(
        self, userid: int, args: Sequence[str], env: Mapping[str, str]
    ) -> subprocess.CompletedProcess[str]:
        """``flux submit ARGS`` by guest ``userid``: the jobspec ``flux submit --dry-run``
        makes in ``env`` (the whole environment: its CLI plugins, what it copies into the
        job), signed for the guest (``SIGN_AS``) and sent with ``FLUX_HANDLE_USERID``.
        Needs flux-security's Python bindings (mark the test ``flux_security``)."""

        def run(cmd: Sequence[str], extra: Mapping[str, str], data: str | None = None) -> Any:
            return subprocess.run(
                list(cmd), env={**env, **extra}, input=data, capture_output=True, text=True
            )

        spec = run(["flux", "submit", "--dry-run", *args], {})
        if spec.returncode != 0:
            raise AssertionError(f"flux submit --dry-run {shlex.join(args)}: {spec.stderr}")
        signed = run(["flux", "python", "-c", SIGN_AS, str(userid)], {}, spec.stdout)
        if signed.returncode != 0:
            raise AssertionError(f"signing for {userid} failed: {signed.stderr}")
        path = self.workdir / f"signed-{userid}.json"
        path.write_text(signed.stdout)
        return run(
            ["flux", "job", "submit", "--flags=signed", str(path)],
            {"FLUX_HANDLE_USERID": str(userid)},
        )

    def wait_event(self, jobid: str, event: str, timeout: float = 30) -> str:
        return self.run(["flux", "job", "wait-event", "-t", str(timeout), jobid, event]).stdout

    def eventlog(self, jobid: str) -> list[dict[str, Any]]:
        out = self.run(["flux", "job", "eventlog", "-f", "json", jobid]).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def state(self, jobid: str) -> str:
        return self.run(["flux", "jobs", "-n", "-o", "{state}", jobid]).stdout.strip()

    def quantum(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None):
        return self.run(["flux", "quantum", *args], check=check, env=env)
