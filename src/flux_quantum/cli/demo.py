"""``flux quantum demo``: the whole co-scheduling story in one command, no credentials.

This module owns the demo: it starts the vendor emulator (a busy QPU, time sped up), a
throwaway ``flux start --test-size=4`` instance with Fluxion, the quantum jobtap plugin
and the ingest validator (``flux quantum config``), and the handler service; submits a
fan-out hybrid job (four nodes, one quantum task); shows the task's queue position
counting down while no node is allocated (the job is released when the task has
ended, the default release point); lets the job run and print its result on every
node; and ends with the node-seconds the nodes idled waiting for the quantum
result, gated versus what an ungated job (allocated at submit) would have idled. It
never reaches anything but loopback, never needs a credential and cleans up after
itself whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import HeldMemo

NODES = 4
DEVICE = "demo-qpu"
PROGRAM = """OPENQASM 3.0;
bit[3] c;
qubit[3] q;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
c = measure q;
"""

# The busy device: one task running and DEPTH waiting, each taking SERVICE emulated seconds.
SERVICE = 30.0

# What every node of the hybrid job runs once released: read the shared task's result
# (the consumer helper waits for the task to complete) and say when it arrived.
CONSUMER = r"""
import json, os, time
from flux_quantum.job.consumer import wait_result
result = wait_result(poll_interval=0.2)
print(json.dumps({
    "rank": int(os.environ.get("FLUX_TASK_RANK", 0)),
    "env_task": os.environ.get("FLUX_QPU_TASK"),
    "task": result.task.task_id,
    "counts": dict(sorted(result.counts.items())),
    "ended": (result.raw or {}).get("taskMetadata", {}).get("endedAt"),
}), flush=True)
"""


def _scenario(depth: int) -> dict[str, Any]:
    return {
        "devices": [
            {
                "arn": "arn:aws:braket:us-east-1::device/qpu/emulator/Demo",
                "name": "Demo QPU",
                "qubits": 12,
                "cost": {"price": 0.01, "unit": "shot", "task_price": 0.3},
                "queue": {"depth": depth, "service_time": SERVICE},
                "summary": "a busy QPU for flux quantum demo",
            }
        ]
    }


CATALOG = """# flux quantum demo: one emulated QPU, served by the local vendor (no credentials)
devices:
  - name: {device}
    vendor: local
    id: arn:aws:braket:us-east-1::device/qpu/emulator/Demo
    class: qpu
    qubits: 12
    region: us-east-1
    price: {{per_task: 0.30, per_shot: 0.01}}
    slots: 1
    properties: {{drain_seconds_per_task: {drain:g}}}
"""


class Instance:
    """``flux start --test-size=N`` in the background, driven through its FLUX_URI."""

    def __init__(self, workdir: Path, size: int, broker_opts: list[str]) -> None:
        self.workdir = workdir
        self.urifile = workdir / "uri"
        self.stopfile = workdir / "stop"
        script = (
            f'echo "$FLUX_URI" > {shlex.quote(str(self.urifile))}.tmp && '
            f"mv {shlex.quote(str(self.urifile))}.tmp {shlex.quote(str(self.urifile))}; "
            f"while [ ! -e {shlex.quote(str(self.stopfile))} ]; do sleep 0.1; done"
        )
        cmd = ["flux", "start", f"--test-size={size}", "-c", str(workdir / "conf")]
        cmd += [*broker_opts, "sh", "-c", script]
        self.log = open(workdir / "broker.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self.urifile.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CommandError(f"flux start failed: {self.broker_log()}")
            time.sleep(0.05)
        bindir = os.path.dirname(sys.executable)
        self.env = dict(os.environ, FLUX_URI=self.urifile.read_text().strip())
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        self.run("flux", "queue", "idle", "--quiet", "--timeout=30s", check=False)

    def broker_log(self) -> str:
        return (self.workdir / "broker.log").read_text(errors="replace")[-2000:]

    def run(
        self, *cmd: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            list(cmd),
            env={**self.env, **(env or {})},
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise CommandError(f"{shlex.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def stop(self) -> int:
        self.stopfile.touch()
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


def _say(text: str = "") -> None:
    print(text, flush=True)


def _events(inst: Instance, jobid: str) -> list[events.Event]:
    return events.parse_eventlog(inst.run("flux", "job", "eventlog", "-f", "json", jobid).stdout)


def _why(inst: Instance, jobid: str) -> str:
    """Why the job was released, from its ``qpu-ready`` event: the task's state
    (``COMPLETED``: the result is there) or the queue position it reached."""
    found = events.last(_events(inst, jobid), events.READY)
    ready = events.decode(found) if found else None
    why = ready.tasks[0].get("why") if isinstance(ready, events.Ready) and ready.tasks else None
    return f"task {why}" if why else "task ready"


def _progress(handle: Any, jobid: int) -> tuple[str, HeldMemo]:
    payload = {"id": jobid, "attrs": ["state", "annotations", "nnodes", "ranks"]}
    job = handle.rpc("job-list.list-id", payload).get()["job"]
    memo = HeldMemo.decode((job.get("annotations") or {}).get("user"))
    from flux.job.info import statetostr

    return statetostr(job["state"]), memo


def _allocated_nodes(handle: Any) -> int:
    from flux_quantum.instance.graph import expand_idset

    status = handle.rpc("sched.resource-status", {}).get()
    allocated = status.get("allocated") or {}
    ranks: set[int] = set()
    for entry in allocated.get("execution", {}).get("R_lite", []):
        ranks.update(expand_idset(str(entry.get("rank", ""))))
    return len(ranks)


def run_demo(args: argparse.Namespace) -> int:
    if shutil.which("flux") is None:
        raise CommandError("the demo needs Flux (flux-core and Fluxion) with `flux` on PATH")
    from flux_quantum.cli.plugin import instance_config
    from flux_quantum.emulator import Emulator, ScaledClock, Scenario

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flux-quantum-demo-") as tmp:
        work = Path(tmp)
        (work / "conf").mkdir()
        (work / "conf" / "quantum.toml").write_text(instance_config())
        catalog = work / "backends.yaml"
        # Drain in real seconds: the handlers' clock is the wall clock.
        catalog.write_text(CATALOG.format(device=DEVICE, drain=SERVICE / args.speed))
        (work / "ghz.qasm").write_text(PROGRAM)
        (work / "consumer.py").write_text(CONSUMER)
        broker_opts = []
        try:
            from flux_quantum.job.consumer import shell_broker_option

            broker_opts.append(shell_broker_option())
        except CommandError:
            pass  # no job-shell plugin built: consumers still read the jobspec

        # Frozen until the job is submitted: the queue starts draining when the story does.
        clock = ScaledClock(args.speed)
        emulator = Emulator(Scenario.from_dict(_scenario(args.depth)), clock=clock)
        emulator.start()
        inst = None
        try:
            _say(
                f"flux quantum demo: emulated QPU '{DEVICE}' running one task with "
                f"{args.depth} waiting (--depth), {SERVICE:g}s each (time x{args.speed:g}), at {emulator.url}"
            )
            _say(f"starting flux start --test-size={NODES} with Fluxion and the quantum plugin")
            inst = Instance(work, NODES, broker_opts)
            inst.run(
                "flux",
                "quantum",
                "service",
                "start",
                f"--catalog={catalog}",
                f"--emulator-url={emulator.url}",
                "--poll-min=0.25",
                "--poll-cold-max=1",
                "--poll-max=2",
                "--scan-interval=0.5",
            )
            _say("handler service started (flux quantum service start)")
            job_env = {"FLUX_QUANTUM_EMULATOR_URL": emulator.url}
            clock.start()  # the busy QPU's queue starts draining now
            jobid = inst.run(
                "flux",
                "submit",
                f"-N{NODES}",
                "--job-name=hybrid",
                f"--setattr=qpu.device=local:{DEVICE}",
                "--setattr=qpu.program=ghz.qasm",
                "--setattr=qpu.shots=200",
                sys.executable,
                str(work / "consumer.py"),
                env=job_env,
            ).stdout.strip()
            _say(
                f"submitted {jobid}: {NODES} nodes, one quantum task shared by every node "
                "(fan-out)\n"
            )
            _watch(inst, jobid, args.timeout)
            inst.run("flux", "job", "wait-event", "-t", "120", jobid, "clean")
            _report(inst, jobid, t0, clock)
            inst.run("flux", "quantum", "service", "stop", check=False)
        finally:
            if inst is not None:
                rc = inst.stop()
                if rc != 0:
                    _say(f"(flux start exited {rc}: {inst.broker_log()})")
            emulator.stop()
    return 0


def _watch(inst: Instance, jobid: str, timeout: float) -> None:
    import flux
    from flux.job import JobID

    handle = flux.Flux(inst.env["FLUX_URI"])
    number = int(JobID(jobid))
    deadline = time.monotonic() + timeout
    shown: tuple[Any, ...] = ()
    start = time.monotonic()
    while time.monotonic() < deadline:
        state, memo = _progress(handle, number)
        if state not in ("DEPEND", "NEW", "PRIORITY"):
            _say(
                f"  {time.monotonic() - start:5.1f}s  {state:<7} released ({_why(inst, jobid)}): "
                f"Fluxion allocates {NODES} nodes now"
            )
            return
        line = (state, memo.position, memo.state)
        if line != shown and memo.task:
            shown = line
            wait_text = "-" if memo.wait is None else f"{memo.wait}s"
            position = "-" if memo.position is None else memo.position
            _say(
                f"  {time.monotonic() - start:5.1f}s  {state:<7} device {memo.device}"
                f"  position {position}  expected wait {wait_text}"
                f"  ({memo.state})  nodes allocated: {_allocated_nodes(handle)}"
            )
        time.sleep(0.25)
    raise CommandError(
        f"job {jobid} was not released within {timeout:g}s: {_not_released(inst, jobid)}"
    )


def _not_released(inst: Instance, jobid: str) -> str:
    """Why a job is still held, in the words of whoever knows: the service if it is not
    running, else the job's last qpu-* event that says what it waits for."""
    out = inst.run("flux", "quantum", "service", "status", "--json", check=False)
    try:
        status = json.loads(out.stdout)
    except ValueError:
        return f"the handler service does not answer ({out.stderr.strip() or 'no reply'})"
    if not status.get("running"):
        supervisor = status.get("supervisor") or {}
        why = supervisor.get("error") or supervisor.get("last_exit") or supervisor.get("state")
        return f"the handler service is not running ({why})"
    log = _events(inst, jobid)
    for event in reversed(log):
        record = events.decode(event)
        if isinstance(record, events.Wait):
            return f"no device can take its task yet: {record.reason}"
        if isinstance(record, events.Retry):
            return f"a vendor call keeps failing: {record.operation}: {record.message}"
        if isinstance(record, events.QueueMilestone | events.TaskCreated):
            return f"its task is still queued (last position seen: {_last_position(log)})"
    if status.get("last_error"):
        return f"the service reports: {status['last_error']}"
    return "the service has not picked the job up yet"


def _last_position(log: list[events.Event]) -> str:
    position = events.replay(log).position
    return "-" if position is None else str(position)


def _report(inst: Instance, jobid: str, t0: float, clock: Any) -> None:
    out = inst.run("flux", "job", "attach", jobid, check=False)
    results = []
    for line in out.stdout.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            continue
    if not results:
        raise CommandError(f"job {jobid} printed no result: {out.stderr.strip()}")
    _say("\nresult, as each node of the job read it:")
    for r in sorted(results, key=lambda r: r["rank"]):
        env = " (FLUX_QPU_TASK set)" if r.get("env_task") == r["task"] else ""
        _say(f"  rank {r['rank']}: task ...{r['task'][-12:]}{env} counts {r['counts']}")
    stamps = events.first_times(_events(inst, jobid))
    t_submit = stamps.get("submit", 0.0)
    t_start = stamps.get("start", t_submit)
    # when the quantum result existed (the task ended at the vendor), on the wall clock
    t_result = max(clock.real_time(r["ended"]) for r in results if r.get("ended"))
    gated = NODES * max(0.0, t_result - t_start)
    ungated = NODES * max(0.0, t_result - t_submit)
    _say(
        f"\nnode-seconds idle waiting for the quantum result: gated {gated:.1f} "
        f"vs ungated {ungated:.1f} (nodes held from submit)"
    )
    saved = ungated - gated
    share = 100.0 * saved / ungated if ungated else 0.0
    _say(f"saved {saved:.1f} node-seconds ({share:.0f}%); demo took {time.monotonic() - t0:.0f}s")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the co-scheduling demo on a throwaway instance (no credentials)",
        description=(
            "Start an emulated busy QPU, a throwaway Flux instance with the quantum plugin "
            "and the handler service, submit a 4-node hybrid job, show it held while its "
            "quantum task waits, release it just in time and compare idle node-seconds."
        ),
    )
    p.add_argument("--speed", type=float, default=20.0, help="emulated time speed-up (20)")
    p.add_argument("--depth", type=int, default=12, help="tasks waiting ahead on the QPU (12)")
    p.add_argument("--timeout", type=float, default=90.0, help="give up after this (90s)")
    p.set_defaults(func=run_demo)
