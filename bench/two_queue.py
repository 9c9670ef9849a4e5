#!/usr/bin/env python3
"""The two-queue problem on a real Flux: idle node-seconds, time to result, release lag.

Reproduces the Fluence experiment (one quantum task shared by a group of N nodes;
consumers idle until its result is readable) on ``flux start --test-size=8`` with
Fluxion, the quantum jobtap plugin, the handler service (a broker module) and the
vendor emulator on the wall clock, time compressed per device. Every hybrid job is run
both ways:

gated
    ``flux submit -N n --setattr=qpu.device=... app``: held in DEPEND, its task created
    by the handler service at submit, released at the release point (``--release``).
ungated
    the same job without the hold (the Kubernetes default-scheduler baseline): it is
    allocated like any job, creates its task from its own start and polls the vendor.

Both run the same consumer on every node: it polls the emulator's Braket REST API (the
wire protocol, stdlib only, so N Python start-ups stay cheap) until the task is
COMPLETED and reads ``results.json`` from the emulator's S3. Per run:

idle
    consumer idle node-seconds: N x (result readable - job start), where "readable" is
    the task's end on the vendor's clock (the emulator's timeline) mapped to the wall
    clock; 0 when the job starts after it. ``idle_inhand`` adds the program's own
    start-up and fetch (N x (result in hand - job start), summed over ranks).
time to result
    job submit -> result in hand on the last rank.
release lag
    the task reached the release point (position <= 1: it became next to run; running:
    it started; from the emulator's timeline) -> the job's ``start`` event (gated only).

Every case runs on an idle instance and on a busy one, where ordinary jobs (30-120 s,
scaled by ``--filler-scale``) keep every node occupied and the queue never empties; the
ungated baseline then waits for nodes too, the gated job is released early by the
expected classical wait (the service's cluster view) and jumps the queue with the
plugin's release priority. Fluxion runs EASY backfill (the recommended setting).

Devices (vendor seconds; ``speed``: emulated seconds per wall second):

- sv1-like, dm1-like: simulators, 10 s per task (uniform 50-150 %: the paper's ungated
  consumers idled ~10.7 s each at N = 8), light background arrivals;
- tn1-like: simulator, 12.7 s service (the paper's figure), a task ahead and arrivals;
- qpu-long: a QPU with 80 tasks of ~120 s ahead: 2.66 h, the paper's iqm_emerald queue;
- ibm-heron-like: an IBM backend (the emulator's IBM side, reached through the real qrmi
  client) with 40 jobs of ~60 s pending: no queue position, so the service releases by
  the job's state (``done``, ``running``) or by its estimated place (``1``, ``predict``).
  Its consumers poll IBM's REST API (jobs, results); the ungated job's first rank creates
  its IBM job (IBM's create has no idempotency token) and the others read its id.

All durations are reported in wall seconds of the compressed run; ``vendor_s`` columns
multiply the vendor-side wait by ``speed`` for comparison with the paper. Compression
makes the ungated/gated ratio conservative (Flux's own latencies are not compressed).

    python bench/two_queue.py                    # full: 4 devices x N=2,4,8 x 10 x idle/busy
    python bench/two_queue.py --quick            # sv1 and qpu, N=2,8, 1 repeat (< 3 min)
    python bench/two_queue.py --timing           # release timing: 1 vs running vs predict
    python bench/two_queue.py --timing --quick
    python bench/two_queue.py --devices ibm --repeats 3 --out-dir bench/results/ibm
    python bench/two_queue.py --devices ibm --timing --repeats 3 --out-dir bench/results/ibm
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import PROGRAM, percentile, read_rows, verdict

from flux_quantum.emulator.clock import ScaledClock
from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
SIZE = 8


# The application on every node: stdlib only (a Braket client in 30 lines of the wire
# protocol), so eight ranks starting at once do not spend seconds importing an SDK.
CONSUMER = r"""
import json, os, sys, time, urllib.parse, urllib.request
t_app = time.time()
url, mode, poll = sys.argv[1], sys.argv[2], float(sys.argv[3])

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as rsp:
        return rsp.read()

if mode == "ungated":
    # The baseline creates its task from its own start; every rank sends the same
    # clientToken, so the vendor makes one task and answers each with its ARN.
    body = {"clientToken": "ungated-" + os.environ["FLUX_JOB_ID"],
            "deviceArn": sys.argv[4], "shots": 100,
            "action": json.dumps({"braketSchemaHeader": {"name": "braket.ir.openqasm.program",
                                                         "version": "1"},
                                  "source": open(sys.argv[5]).read()}),
            "outputS3Bucket": sys.argv[6], "outputS3KeyPrefix": "ungated"}
    arn = json.loads(call("POST", "/quantum-task", body))["quantumTaskArn"]
else:
    arn = os.environ["FLUX_QPU_TASK"]  # set by flux-quantum's job-shell plugin
while True:
    task = json.loads(call("GET", "/quantum-task/" + urllib.parse.quote(arn, safe="")))
    if task["status"] == "COMPLETED":
        break
    if task["status"] in ("FAILED", "CANCELLED"):
        sys.exit("task " + task["status"])
    time.sleep(poll)
result = json.loads(call("GET", "/s3/%s/%s/results.json" % (task["outputS3Bucket"],
                                                            task["outputS3Directory"])))
print(json.dumps({"rank": int(os.environ.get("FLUX_TASK_RANK", 0)), "arn": arn,
                  "t_app": t_app, "t_result": time.time(),
                  "shots": len(result.get("measurements") or []) or None}), flush=True)
"""

# The same application against IBM's REST API (stdlib only): a job id instead of an ARN.
IBM_CONSUMER = r"""
import json, os, sys, time, urllib.parse, urllib.request
t_app = time.time()
url, mode, poll = sys.argv[1], sys.argv[2], float(sys.argv[3])
api = url + "/ibm/api/v1"

def token():
    form = urllib.parse.urlencode({"grant_type": "urn:ibm:params:oauth:grant-type:apikey",
                                   "apikey": "flux-quantum-emulator"}).encode()
    with urllib.request.urlopen(url + "/ibm/identity/token", form, timeout=30) as rsp:
        return json.loads(rsp.read())["access_token"]

bearer = {"Authorization": "Bearer " + token(), "Service-CRN": "crn:v1:flux-quantum:emulator:::"}

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **bearer})
    with urllib.request.urlopen(req, timeout=30) as rsp:
        return rsp.read()

rank = int(os.environ.get("FLUX_TASK_RANK", 0))
if mode == "ungated":
    # IBM's create takes no idempotency token: rank 0 creates, the others read its id.
    shared = sys.argv[6]
    if rank == 0:
        pub = [open(sys.argv[5]).read()]
        body = {"program_id": "sampler", "backend": sys.argv[4],
                "params": {"pubs": [pub], "shots": 100, "version": 2}}
        job = json.loads(call("POST", "/jobs", body))["id"]
        open(shared + ".tmp", "w").write(job)
        os.rename(shared + ".tmp", shared)
    while not os.path.exists(shared):
        time.sleep(0.01)
    job = open(shared).read()
else:
    job = os.environ["FLUX_QPU_TASK"]  # set by flux-quantum's job-shell plugin
while True:
    doc = json.loads(call("GET", "/jobs/" + urllib.parse.quote(job, safe="")))
    if doc["status"] == "Completed":
        break
    if doc["status"] in ("Failed", "Cancelled"):
        sys.exit("job " + doc["status"])
    time.sleep(poll)
result = call("GET", "/jobs/%s/results" % urllib.parse.quote(job, safe=""))
print(json.dumps({"rank": rank, "arn": job, "t_app": t_app, "t_result": time.time(),
                  "shots": 100 if result else None}), flush=True)
"""


@dataclass(frozen=True)
class Shape:
    """One emulated device; times in vendor seconds."""

    name: str
    label: str
    klass: str
    service: float
    speed: float
    depth: int = 0
    arrival: float = 0.0
    price: str = "{per_minute: 0.075}"
    fast: float = 0.0  # > 0: two-speed time (Gear)
    near: int = 6
    ibm: bool = False  # the emulator's IBM side (a backend, no queue position)

    @property
    def arn(self) -> str:
        """The device's vendor id: a Braket ARN, or an IBM backend name."""
        if self.ibm:
            return f"ibm_{self.name}"
        kind = "qpu" if self.klass == "qpu" else "quantum-simulator"
        return f"arn:aws:braket:us-east-1::device/{kind}/emulator/{self.name}"

    def ibm_scenario(self) -> dict[str, Any]:
        queue = {"depth": self.depth, "service_time": self.service, "distribution": "uniform"}
        return {"backends": [{"name": self.arn, "qubits": 20, "queue": queue}]}

    def scenario(self) -> dict[str, Any]:
        return {
            "arn": self.arn,
            "name": self.name,
            "qubits": 20,
            "cost": {"price": 0.075, "unit": "minute"}
            if self.klass == "simulator"
            else {"price": 0.00145, "unit": "shot", "task_price": 0.3},
            "queue": {
                "depth": self.depth,
                "arrival_rate": self.arrival,
                "service_time": self.service,
                "distribution": "uniform",
            },
        }

    def catalog(self) -> str:
        # The drain prior in wall seconds: the service's clock is the wall clock.
        return (
            f"  - name: {self.name}\n    vendor: local\n    id: {self.arn}\n"
            f"    class: {self.klass}\n    qubits: 20\n    region: us-east-1\n"
            f"    price: {self.price}\n    slots: 1\n"
            f"    properties: {{drain_seconds_per_task: {self.service / self.speed:.6g}}}\n"
        )


SHAPES = {
    "sv1": Shape("sv1", "sv1-like", "simulator", 10.0, 8.0, arrival=0.01),
    "dm1": Shape("dm1", "dm1-like", "simulator", 10.0, 8.0, arrival=0.02),
    "tn1": Shape("tn1", "tn1-like", "simulator", 12.7, 10.0, depth=1, arrival=0.03),
    "qpu": Shape(
        "qpu",
        "qpu-long (2.66 h)",
        "qpu",
        120.0,
        120.0,
        depth=79,
        fast=6000.0,
        near=2,
        price="{per_task: 0.30, per_shot: 0.00145}",
    ),
    "ibm": Shape(
        "heron",
        "ibm-heron-like (40 min)",
        "qpu",
        60.0,
        240.0,
        depth=39,
        price="{per_minute: 96}",
        ibm=True,
    ),
}


def task_ids(emulator: Any, shape: Shape) -> list[str]:
    """Every task (Braket) or job (IBM) created on the emulator so far, oldest first."""
    return emulator.ibm.job_ids() if shape.ibm else emulator.task_arns()


def timeline(emulator: Any, shape: Shape, task_id: str) -> Any:
    """A task's created/front/started/ended on the emulator's clock."""
    return emulator.ibm.job_timeline(task_id) if shape.ibm else emulator.task_timeline(task_id)


class Gear(threading.Thread):
    """The vendor's clock for one run. It stands still until our task is created, so
    every task, gated or not, meets the device as the scenario describes it (a queue
    that drained while a baseline job waited for nodes would favour late creators).
    Then it runs at the device's speed; for a long queue (``fast``) at ``fast`` through
    the bulk of the queue and at the device's speed again from about ``near`` tasks
    before our task's turn, so the end game (polls, release, start) plays at a pace the
    service's real-time polling can follow; the boring hours pass in seconds."""

    def __init__(self, emulator: Any, clock: ScaledClock, shape: Shape) -> None:
        super().__init__(daemon=True)
        self.emulator, self.clock, self.shape = emulator, clock, shape
        self.done = threading.Event()

    def run(self) -> None:
        shape = self.shape
        while not task_ids(self.emulator, shape):
            if self.done.wait(0.005):
                return
        created = timeline(self.emulator, shape, task_ids(self.emulator, shape)[0]).created
        if not shape.fast:
            self.clock.set_speed(shape.speed)
            return
        self.clock.set_speed(shape.fast)
        slow_at = created + max(0, shape.depth + 1 - shape.near) * shape.service
        while self.clock.now() < slow_at:
            if self.done.wait(0.005):
                return
        self.clock.set_speed(shape.speed)


@dataclass
class Run:
    device: str
    state: str
    n: int
    mode: str
    release: str
    repeat: int
    speed: float
    t_submit: float = 0.0
    t_start: float = 0.0
    t_release: float | None = None
    t_point: float | None = None
    t_depend: float | None = None
    t_select: float | None = None
    t_token: float | None = None
    t_created: float = 0.0
    t_readable: float = 0.0
    t_result: float = 0.0
    t_app: float = 0.0
    idle: float = 0.0
    idle_inhand: float = 0.0
    ttr: float = 0.0
    ttr_vendor: float = 0.0
    lag: float | None = None
    early: float | None = None
    vendor_wait_s: float = 0.0
    idle_vendor_s: float = 0.0
    why: str = ""
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class VendorSide:
    """The emulator of the device under test, restarted on its port for every run."""

    def __init__(self, scenario: Any, speed: float, emulator: Any, ibm: Any = None) -> None:
        self.scenario = scenario
        self.ibm = ibm
        self.speed = speed
        self.emulator = emulator
        self.port = int(emulator.url.rsplit(":", 1)[1])

    def fresh(self, seed: int) -> tuple[Any, ScaledClock]:
        from flux_quantum.emulator import Emulator

        self.emulator.stop()
        clock = ScaledClock(self.speed)
        self.emulator = Emulator(
            self.scenario, clock=clock, port=self.port, seed=seed, ibm=self.ibm
        )
        self.emulator.start()
        return self.emulator, clock


class Filler:
    """Keeps every node busy with ordinary single-node jobs of 30-120 s (scaled), and
    one more waiting, so the queue never empties; each has a time limit so EASY
    backfill can plan around them."""

    def __init__(self, bench: Bench, scale: float, seed: int) -> None:
        self.bench = bench
        self.scale = scale
        self.rng = random.Random(seed)
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.submitted = 0

    def start(self) -> Filler:
        self.thread.start()
        return self

    def _active(self) -> int:
        import flux.constants

        states = flux.constants.FLUX_JOB_STATE_PENDING | flux.constants.FLUX_JOB_STATE_RUNNING
        payload = {
            "max_entries": 0,
            "attrs": ["name"],
            "constraint": {"and": [{"states": [states]}, {"name": ["filler"]}]},
        }
        return len(self.bench.handle.rpc("job-list.list", payload).get()["jobs"])

    def _run(self) -> None:
        import flux.job

        while not self.stop_flag.is_set():
            try:
                missing = SIZE + 1 - self._active()
            except OSError:
                missing = 0
            for _ in range(max(0, missing)):
                duration = self.rng.uniform(30.0, 120.0) * self.scale
                spec = flux.job.JobspecV1.from_command(["sleep", f"{duration:.2f}"], num_nodes=1)
                spec.duration = duration + 1.0
                spec.setattr("system.job.name", "filler")
                spec.cwd = str(self.bench.work)
                spec.environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                flux.job.submit(self.bench.handle, spec)
                self.submitted += 1
            self.stop_flag.wait(0.2)

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=10)
        self.bench.flux("cancel", "--all", check=False)
        self.bench.flux("queue", "drain", "--timeout=120s", check=False)


class Bench:
    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        from flux_quantum.cli.demo import Instance
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.job.consumer import shell_plugin_path

        self.work = work
        self.args = args
        (work / "conf").mkdir()
        (work / "out").mkdir()
        (work / "conf" / "quantum.toml").write_text(
            instance_config() + '\n[sched-fluxion-qmanager]\nqueue-policy = "easy"\n'
        )
        (work / "program.qasm").write_text(PROGRAM)
        (work / "consumer.py").write_text(CONSUMER)
        (work / "ibm_consumer.py").write_text(IBM_CONSUMER)
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"], capture_output=True, text=True
        ).stdout.strip()
        opts = [f"-Sconf.shell_pluginpath={builtin}:{shell_plugin_path().parent}"]
        self.inst = Instance(work, SIZE, opts)
        import flux

        self.handle = flux.Flux(self.inst.env["FLUX_URI"])

    def flux(self, *args: str, check: bool = True) -> str:
        return self.inst.run("flux", *args, check=check).stdout

    def close(self) -> None:
        self.flux("quantum", "service", "stop", check=False)
        self.inst.stop()

    # -- one device at a time: its own emulator and a fresh service

    def device(self, shape: Shape, release_modes: list[str]) -> list[Run]:
        from flux_quantum.emulator import Emulator, Scenario
        from flux_quantum.emulator.ibm import IbmScenario

        # An IBM backend lives in the emulator's IBM scenario (its Braket side: the default).
        scenario = None if shape.ibm else Scenario.from_dict({"devices": [shape.scenario()]})
        ibm = IbmScenario.from_dict(shape.ibm_scenario()) if shape.ibm else None
        clock = ScaledClock(shape.speed, paused=False)
        emulator = Emulator(scenario, clock=clock, seed=11, ibm=ibm).start()
        self.vendor = VendorSide(scenario, shape.speed, emulator, ibm)
        catalog = self.work / f"backends-{shape.name}.yaml"
        catalog.write_text("devices:\n" + shape.catalog())
        rows: list[Run] = []
        try:
            self.flux("quantum", "service", "stop", check=False)
            self.flux(
                "quantum",
                "service",
                "start",
                f"--catalog={catalog}",
                f"--emulator-url={emulator.url}",
                "--poll-min=0.1",
                "--poll-cold-max=1",
                "--poll-max=10",
                "--scan-interval=0.1",
                "--cluster-interval=0.5",
                "--device-check-interval=5",
                "--tick=0.05",
            )
            # One run per device before measuring: the service's first vendor calls
            # (imports, connections, the drain prior) are not what we measure.
            warm = Run(shape.label, "warm-up", 1, "gated", release_modes[0], -1, shape.speed)
            self._one(warm, shape, catalog)
            for state in self.args.states:
                filler = (
                    Filler(self, self.args.filler_scale, seed=7).start()
                    if state == "busy"
                    else None
                )
                try:
                    if filler is not None:
                        time.sleep(2.0)  # let the fillers take every node
                    rows += self._cases(shape, state, catalog, release_modes)
                finally:
                    if filler is not None:
                        filler.stop()
        finally:
            self.flux("quantum", "service", "stop", check=False)
            self.vendor.emulator.stop()
        return rows

    def _cases(
        self, shape: Shape, state: str, catalog: Path, release_modes: list[str]
    ) -> list[Run]:
        rows = []
        modes = [("gated", r) for r in release_modes]
        if not self.args.timing:
            modes.append(("ungated", "-"))
        for n in self.args.sizes:
            for repeat in range(self.args.repeats):
                order = modes if repeat % 2 == 0 else list(reversed(modes))
                for mode, release in order:
                    run = Run(shape.label, state, n, mode, release, repeat, shape.speed)
                    try:
                        self._one(run, shape, catalog)
                    except Exception as exc:  # a failed run is reported, not hidden
                        run.error = f"{type(exc).__name__}: {exc}"[:300]
                    rows.append(run)
                    self._say(run)
        return rows

    def _say(self, run: Run) -> None:
        if run.error:
            print(f"  {run.device:<18} {run.state:<4} N={run.n} {run.mode:<7} ERROR {run.error}")
            return
        lag = "" if run.lag is None else f" lag {run.lag:.3f}s"
        print(
            f"  {run.device:<18} {run.state:<4} N={run.n} {run.mode:<7} rel={run.release:<7}"
            f" idle {run.idle:7.2f} node-s  ttr {run.ttr:7.2f}s{lag}",
            flush=True,
        )

    def _one(self, run: Run, shape: Shape, catalog: Path) -> None:
        # Every run meets the device as the scenario describes it (the paper's queue),
        # not as the previous runs left it: a fresh emulator on the same endpoint.
        # Gated and ungated runs of one repeat meet the same seeded queue.
        seed = 1000 * run.repeat + 10 * run.n + (run.state == "busy")
        emulator, clock = self.vendor.fresh(seed)
        out = (
            self.work
            / "out"
            / f"{shape.name}-{run.state}-{run.n}-{run.mode}-{run.release}-{run.repeat}"
        )
        argv = [
            "submit",
            f"-N{run.n}",
            "--exclusive",
            "-t",
            "10m",
            f"--output={out}.out",
            f"--error={out}.err",
            f"--job-name=hybrid-{run.mode}",
        ]
        script = "ibm_consumer.py" if shape.ibm else "consumer.py"
        consumer = [sys.executable, str(self.work / script), emulator.url]
        if run.mode == "gated":
            argv += [
                f"--setattr=qpu.device=local:{shape.name}",
                f"--setattr=qpu.program={self.work / 'program.qasm'}",
                "--setattr=qpu.shots=100",
                f"--setattr=qpu.release_at={run.release}",
            ]
            consumer += ["gated", str(self.args.app_poll)]
        else:
            consumer += [
                "ungated",
                str(self.args.app_poll),
                shape.arn,
                str(self.work / "program.qasm"),
                f"{out}.jobid" if shape.ibm else emulator.bucket,
            ]
        gear = Gear(emulator, clock, shape)
        gear.start()
        try:
            jobid = self.flux(*argv, *consumer).strip()
            self.flux("job", "wait-event", "-t", str(self.args.run_timeout), jobid, "clean")
        finally:
            gear.done.set()
            gear.join()
        log = events.parse_eventlog(self.flux("job", "eventlog", "-f", "json", jobid))
        stamp = events.first_times(log)
        finish = events.first(log, "finish")
        if finish is None or finish.context.get("status", 0) != 0:
            raise RuntimeError(f"job {jobid} failed: {Path(str(out) + '.err').read_text()[-300:]}")
        results = [
            json.loads(line)
            for line in Path(str(out) + ".out").read_text().splitlines()
            if line.startswith("{")
        ]
        if len(results) != run.n:
            raise RuntimeError(f"job {jobid}: {len(results)} of {run.n} ranks printed a result")
        arn = results[0]["arn"]
        line = timeline(emulator, shape, arn)
        run.t_submit, run.t_start = stamp["submit"], stamp["start"]
        run.t_release = stamp.get(events.RELEASE)
        run.t_depend, run.t_select = stamp.get("dependency-add"), stamp.get(events.SELECT)
        run.t_token = stamp.get(events.SUBMIT)
        run.t_created = clock.wall(line.created)
        run.t_readable = clock.wall(line.ended)
        run.t_result = max(r["t_result"] for r in results)
        run.t_app = max(r["t_app"] for r in results)
        run.idle = run.n * max(0.0, run.t_readable - run.t_start)
        run.idle_inhand = sum(max(0.0, r["t_result"] - run.t_start) for r in results)
        run.ttr = run.t_result - run.t_submit
        # The same with the vendor's part uncompressed (Flux's part is real time).
        run.ttr_vendor = run.ttr + (line.ended - line.created) - (run.t_readable - run.t_created)
        run.vendor_wait_s = (line.ended - line.created) if line.ended is not None else 0.0
        run.idle_vendor_s = run.n * max(0.0, line.ended - clock.at(run.t_start))
        run.early = run.t_readable - run.t_start  # > 0: started before the result existed
        if run.mode == "gated":
            found = events.first(log, events.READY)
            ready = events.decode(found) if found else None
            if isinstance(ready, events.Ready) and ready.tasks:
                run.why = str(ready.tasks[0].get("why", ""))[:80]
            ended = {"predict": line.ended, "done": line.ended}
            point = {"running": line.started, **ended}.get(run.release, line.front)
            if point is not None:
                run.t_point = clock.wall(point)
                run.lag = run.t_start - run.t_point
        self.flux("job", "purge", "--force", "--num-limit=200", check=False)


# -- reporting -------------------------------------------------------------------------


def _median(rows: list[Run], attr: str) -> float:
    values = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
    return statistics.median(values) if values else float("nan")


def summarize(rows: list[Run]) -> list[dict[str, Any]]:
    good = [r for r in rows if not r.error]
    table = []
    keys = sorted(
        {(r.device, r.state, r.n) for r in good}, key=lambda k: (k[0], k[1] != "idle", k[2])
    )
    for device, state, n in keys:
        case = [r for r in good if (r.device, r.state, r.n) == (device, state, n)]
        gated = [r for r in case if r.mode == "gated"]
        ungated = [r for r in case if r.mode == "ungated"]
        g_idle, u_idle = _median(gated, "idle_vendor_s"), _median(ungated, "idle_vendor_s")
        g_ttr, u_ttr = _median(gated, "ttr_vendor"), _median(ungated, "ttr_vendor")
        table.append(
            {
                "device": device,
                "state": state,
                "n": n,
                "runs": len(gated),
                "gated_idle": g_idle,
                "ungated_idle": u_idle,
                "ratio": u_idle / g_idle if g_idle > 0 else float("inf"),
                "gated_idle_wall": _median(gated, "idle"),
                "ungated_idle_wall": _median(ungated, "idle"),
                "gated_idle_inhand": _median(gated, "idle_inhand"),
                "gated_ttr_wall": _median(gated, "ttr"),
                "ungated_ttr_wall": _median(ungated, "ttr"),
                "gated_ttr": g_ttr,
                "ungated_ttr": u_ttr,
                "ttr_change_pct": (g_ttr / u_ttr - 1.0) * 100.0 if u_ttr else float("nan"),
            }
        )
    return table


def report(rows: list[Run], args: argparse.Namespace, wall: float) -> str:
    lines = [header(args, wall), ""]
    errors = [r for r in rows if r.error]
    table = summarize(rows)
    lines.append(
        f"{'device':<18} {'state':<5} {'N':>2} {'runs':>4} {'idle gated':>10} {'ungated':>9} "
        f"{'ratio':>7} {'wall: gated':>11} {'ungated':>8} {'ttr gated':>10} {'ungated':>9} "
        f"{'ttr chg':>8}"
    )
    for t in table:
        ratio = "inf" if t["ratio"] == float("inf") else f"{t['ratio']:.0f}x"
        lines.append(
            f"{t['device']:<18} {t['state']:<5} {t['n']:>2} {t['runs']:>4} "
            f"{t['gated_idle']:>10.2f} {t['ungated_idle']:>9.1f} {ratio:>7} "
            f"{t['gated_idle_wall']:>11.2f} {t['ungated_idle_wall']:>8.2f} "
            f"{t['gated_ttr']:>10.1f} {t['ungated_ttr']:>9.1f} {t['ttr_change_pct']:>+7.1f}%"
        )
    lines.append("")
    lines += [
        "idle: median node-seconds per job from its start to the result readable, in vendor",
        "  seconds (the paper's units: the interval read on the vendor's clock, so Flux's own",
        "  latencies count x speed, against flux-quantum); ratio: ungated / gated",
        "wall: the same medians in wall seconds of the compressed run",
        "ttr: median submit -> result in hand, seconds, with the task's own time uncompressed",
        "  (Flux's part is real time either way); chg: gated vs ungated",
    ]
    gated = [r for r in rows if r.mode == "gated" and not r.error]
    # On an idle instance the lag is the handler's and Flux's; on a busy one it also
    # holds the wait for nodes (the classical lead aims to hide it), shown apart.
    lags = [r.lag for r in gated if r.lag is not None and r.state == "idle"]
    busy_lags = [r.lag for r in gated if r.lag is not None and r.state == "busy"]
    lines.append("")
    lines.append("targets")
    worst_idle = max((t["gated_idle"] for t in table), default=float("nan"))
    lines.append(
        f"  median gated idle <= 1 node-second, every device and N: worst {worst_idle:.2f}"
        f"  {verdict(worst_idle <= 1.0)}"
    )
    sv1 = [t for t in table if t["device"].startswith("sv1") and t["n"] == 8]
    for t in sv1:
        ratio = "inf" if t["ratio"] == float("inf") else f"{t['ratio']:.0f}x"
        lines.append(
            f"  ungated/gated idle >= 50x at N=8 on sv1-like ({t['state']}): "
            f"{ratio}  {verdict(t['ratio'] >= 50)}"
        )
    worst_ttr = max((t["ttr_change_pct"] for t in table), default=float("nan"))
    lines.append(
        f"  gated time to result within 5% of ungated: worst {worst_ttr:+.1f}%  "
        f"{verdict(worst_ttr <= 5.0)}"
    )
    if lags:
        p50, p99 = percentile(lags, 0.5), percentile(lags, 0.99)
        lines.append(
            f"  release lag p50 <= 0.5 s: {p50:.3f} s  {verdict(p50 <= 0.5)}; "
            f"p99 <= 2 s: {p99:.3f} s  {verdict(p99 <= 2.0)}  ({len(lags)} runs, idle instance)"
        )
    if busy_lags:
        lines.append(
            f"  busy instance, release point -> start (includes waiting for nodes): p50 "
            f"{percentile(busy_lags, 0.5):.3f} s, p90 {percentile(busy_lags, 0.9):.3f} s, "
            f"p99 {percentile(busy_lags, 0.99):.3f} s ({len(busy_lags)} runs)"
        )
    if errors:
        lines.append("")
        lines.append(f"{len(errors)} runs failed:")
        lines += [f"  {r.device} {r.state} N={r.n} {r.mode}: {r.error}" for r in errors[:10]]
    return "\n".join(lines)


def timing_report(rows: list[Run], args: argparse.Namespace, wall: float) -> str:
    lines = [header(args, wall), ""]
    lines.append(
        f"{'device':<18} {'N':>2} {'release':<8} {'runs':>4} {'idle med':>8} {'idle p90':>8} "
        f"{'ttr med':>8} {'lag med':>8} {'lag p99':>8} {'start-result med':>16}"
    )
    good = [r for r in rows if not r.error]
    keys = sorted({(r.device, r.n, r.release) for r in good})
    for device, n, release in keys:
        case = [r for r in good if (r.device, r.n, r.release) == (device, n, release)]
        lags = [r.lag for r in case if r.lag is not None]
        early = [r.early for r in case if r.early is not None]
        lines.append(
            f"{device:<18} {n:>2} {release:<8} {len(case):>4} {_median(case, 'idle_vendor_s'):>8.1f} "
            f"{percentile([r.idle_vendor_s for r in case], 0.9):>8.1f} "
            f"{_median(case, 'ttr_vendor'):>8.1f} "
            f"{percentile(lags, 0.5):>8.3f} {percentile(lags, 0.99):>8.3f} "
            f"{-statistics.median(early) if early else float('nan'):>+16.3f}"
        )
    lines.append("")
    lines.append(
        "idle: node-seconds from job start to result readable (vendor time); ttr: submit ->"
    )
    lines.append(
        "  result in hand (s, the task's own time uncompressed); lag, start-result: wall s"
    )
    lines.append(
        "lag: release point (1: task next to run; running: started; predict, done: ended) -> start"
    )
    lines.append(
        "start-result: job start minus result readable (< 0: the job idled; > 0: it was late)"
    )
    errors = [r for r in rows if r.error]
    if errors:
        lines.append(f"{len(errors)} runs failed: " + "; ".join(r.error for r in errors[:5]))
    return "\n".join(lines)


def header(args: argparse.Namespace, wall: float) -> str:
    speeds = ", ".join(f"{SHAPES[d].label} x{SHAPES[d].speed:g}" for d in args.devices)
    if args.from_csv:
        return (
            f"flux-quantum two-queue benchmark{' (release timing)' if args.timing else ''}: "
            f"flux start --test-size={SIZE}, Fluxion EASY\n"
            f"runs read from {args.from_csv} (python bench/two_queue.py --from-csv); "
            f"devices: {speeds}"
        )
    return (
        f"flux-quantum two-queue benchmark{' (release timing)' if args.timing else ''}: "
        f"flux start --test-size={SIZE}, Fluxion EASY, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}\n"
        f"command: python bench/two_queue.py {' '.join(sys.argv[1:])}\n"
        f"devices (time compression): {speeds}; repeats {args.repeats}; sizes "
        f"{','.join(map(str, args.sizes))}; states {','.join(args.states)}; "
        f"fillers 30-120 s x{args.filler_scale:g}; took {wall / 60:.1f} min"
    )


def plot(rows: list[Run], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install '.[bench]'): plot skipped"
    good = [r for r in rows if not r.error and r.mode in ("gated", "ungated")]
    devices = list(dict.fromkeys(r.device for r in good))
    states = list(dict.fromkeys(r.state for r in good))
    fig, axes = plt.subplots(
        len(states), len(devices), figsize=(3.2 * len(devices), 3.0 * len(states)), squeeze=False
    )
    for i, state in enumerate(states):
        for j, device in enumerate(devices):
            ax = axes[i][j]
            for mode, color in (("ungated", "tab:red"), ("gated", "tab:blue")):
                case = [r for r in good if (r.state, r.device, r.mode) == (state, device, mode)]
                sizes = sorted({r.n for r in case})
                data = [[max(r.idle_vendor_s, 1e-2) for r in case if r.n == n] for n in sizes]
                if not data:
                    continue
                offset = -0.15 if mode == "ungated" else 0.15
                pos = [k + offset for k in range(len(sizes))]
                ax.boxplot(
                    data,
                    positions=pos,
                    widths=0.25,
                    patch_artist=True,
                    boxprops={"facecolor": color, "alpha": 0.5},
                    medianprops={"color": "black"},
                )
                ax.plot([], [], color=color, label=mode)
                ax.set_xticks(range(len(sizes)), [str(n) for n in sizes])
            ax.set_yscale("log")
            ax.set_title(f"{device}, {state}", fontsize=9)
            ax.set_xlabel("group size N")
            if j == 0:
                ax.set_ylabel("idle node-s, vendor time (0 at 0.01)")
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.suptitle("Consumer idle until the quantum result is readable: flux-quantum vs ungated")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def read_csv(path: Path) -> list[Run]:
    """Runs from a CSV this script wrote (types restored from ``Run``'s fields)."""
    return read_rows(path, Run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (< 3 minutes)")
    parser.add_argument("--timing", action="store_true", help="compare release points")
    parser.add_argument("--devices", default=None, help="comma list of sv1,dm1,tn1,qpu,ibm")
    parser.add_argument("--sizes", default=None, help="group sizes (2,4,8)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per case (10)")
    parser.add_argument("--states", default=None, help="idle,busy")
    parser.add_argument("--release", default="done", help="gated release point (done)")
    parser.add_argument("--filler-scale", type=float, default=0.05, help="filler length x (0.05)")
    parser.add_argument("--app-poll", type=float, default=0.05, help="consumer poll seconds")
    parser.add_argument("--run-timeout", type=float, default=300.0)
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--from-csv", type=Path, help="report and plot the runs of an earlier CSV again"
    )
    args = parser.parse_args(argv)
    if args.from_csv:
        rows = read_csv(args.from_csv)
        labels = {s.label: name for name, s in SHAPES.items()}
        args.devices = [labels[d] for d in dict.fromkeys(r.device for r in rows)]
        args.timing = any(r.release in ("1", "running") for r in rows)
        text = (timing_report if args.timing else report)(rows, args, 0.0)
        stem = args.from_csv.stem
        (args.out_dir / f"{stem}.txt").write_text(text + "\n")
        print(text)
        if not args.timing:
            print(plot(rows, args.out_dir / f"{stem}.png"))
        return 0
    if shutil.which("flux") is None:
        print("two_queue: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    if args.timing:
        defaults = ("sv1,qpu", "8", 10, "idle") if not args.quick else ("sv1,qpu", "8", 2, "idle")
    else:
        defaults = ("sv1,dm1,tn1,qpu", "2,4,8", 10, "idle,busy")
        if args.quick:
            defaults = ("sv1,qpu", "2,8", 1, "idle,busy")
    args.devices = (args.devices or defaults[0]).split(",")
    args.sizes = [int(n) for n in (args.sizes or defaults[1]).split(",")]
    args.repeats = args.repeats or defaults[2]
    args.states = (args.states or defaults[3]).split(",")
    unknown = [d for d in args.devices if d not in SHAPES]
    if unknown:
        parser.error(f"--devices: unknown {unknown}; accepted: {', '.join(SHAPES)}")
    if any(n < 1 or n > SIZE for n in args.sizes):
        parser.error(f"--sizes: each must be 1..{SIZE}")
    releases = ["1", "running", "predict", "done"] if args.timing else [args.release]
    t0 = time.monotonic()
    rows: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="fq-two-queue-") as tmp:
        bench = Bench(Path(tmp), args)
        try:
            for name in args.devices:
                print(f"{SHAPES[name].label}: speed x{SHAPES[name].speed:g}", flush=True)
                rows += bench.device(SHAPES[name], releases)
        finally:
            bench.close()
    wall = time.monotonic() - t0
    stem = "release_timing" if args.timing else "two_queue"
    if args.quick:
        stem += "_quick"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with open(args.out_dir / f"{stem}.csv", "w", newline="") as f:
        names = [k for k in asdict(rows[0]) if k != "extra"] if rows else []
        writer = csv.DictWriter(f, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: v for k, v in asdict(r).items() if k != "extra"})
    text = (timing_report if args.timing else report)(rows, args, wall)
    (args.out_dir / f"{stem}.txt").write_text(text + "\n")
    print()
    print(text)
    if not args.timing:
        print(plot(rows, args.out_dir / f"{stem}.png"))
    print(f"csv: {args.out_dir / (stem + '.csv')}")
    return 1 if rows and all(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
