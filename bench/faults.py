#!/usr/bin/env python3
"""Faults at scale: does flux-quantum keep its promises when the vendors and the site fail?

This module owns the fault campaign: a seeded fault plan for the emulator, a seeded
workload of hybrid jobs of every pattern, seeded disruptions of the site, the run in a
real Flux instance, and the figures. It never fixes what it finds: it counts, prints and
writes what the promise checker (``flux_quantum.testing.promises``) says, and it exits 0 only
when that checker finds no violation. It never reaches anything but loopback.

The set-up, per arm: the project's emulator in this process (Braket-like QPUs and a
simulator, IBM backends with small queues; ``ScaledClock`` at ``--speed``, 20: one wall
second is 20 vendor seconds) with a generated scenario whose rate faults cover every
kind the emulator knows (throttling, internal errors, connection resets, a create applied
but its answer lost, slow answers, tasks that fail or that the vendor cancels, S3 and
IBM result download errors, a device offline mid-queue, an IBM backend paused); a
``flux start --test-size=1`` instance with a statedir (so it can be restarted), the
quantum plugin and validator as ``flux quantum config`` prints them, the job-shell
plugin (``flux quantum config --broker-opts``), a site ledger (``[quantum.ledger]
path``); the handler service under its supervisor (``flux quantum service start``, its
intervals scaled by the speed) with a catalog whose prices equal the scenario's, so the
ledger and the vendor's bill must agree to the cent. Two secrets sit in the broker's
environment (an AWS secret key and an IBM API key, as a site exports them): no log,
eventlog or memo may show them.

The workload (``--jobs``, arriving over ``--window`` seconds): single jobs, fan-out groups
(``qpu.group``), batches (a ``qpu.program`` list), variational loops (``flux quantum loop
submit``), IBM jobs with a session (``qpu.session``), some with ``qpu.failover=next``, and
``release_at`` done / running / a queue position / predict; a few are cancelled by the
campaign while held. The disruptions, at seeded moments inside the window: ``kill -9`` of
the service process (its supervisor restarts it), a restart of the whole instance while
jobs are held (the broker shut down, started again on the same statedir, the service
started again as a site's rc does), and the ledger's writer killed mid-write (the service
stopped with SIGSTOP until ``/proc/locks`` shows it holding SQLite's WAL write lock on the
ledger, then SIGKILL; otherwise SIGCONT and a retry a few ms later). After the drain (no
active job, the service idle: no session open, nothing settling) the checker gathers
Flux's eventlogs, the emulator's report and the ledger and counts violations per promise.

Figures: faults injected by kind (the emulator's report), violations by promise (target 0
each), jobs completed / failed by reason, the time until the service is back at full work
(every job held at the moment is tracked by it again) after a kill -9 (target 5 s) and
after an instance restart (target 30 s from the broker being up), and vendor calls per
QPU job against a no-fault arm running the same workload without faults or disruptions.

    python bench/faults.py --quick     # < 5 min: 30 submissions an arm, 1 disruption of each kind
    python bench/faults.py             # 240 submissions an arm (~400 jobs), ~10 min on 2 cores:
                                       # bench/results/faults.{txt,csv,json}

The quick run writes its files only with ``--out-dir``; both exit 0 only when the checker
found no violation in either arm.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import verdict

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PATTERNS = ("single", "fanout", "batch", "loop", "session")
DISRUPTIONS = ("kill", "restart", "ledger")
KILL_TARGET_S = 5.0  # back at full work after a kill -9 of the service
RESTART_TARGET_S = 30.0  # back at full work after the broker of a restarted instance is up
STATE_DEPEND = 2
STATES_ACTIVE = 1 | 2 | 4 | 8 | 16 | 32
PROGRAMS = (
    "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n",
    "OPENQASM 3.0;\nbit[3] c;\nqubit[3] q;\nh q[0];\ncnot q[0], q[1];\ncnot q[1], q[2];\n"
    "c = measure q;\n",
    "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nx q[0];\nh q[1];\nc = measure q;\n",
)
# A loop's step: reads task k's result through the service, asks for the same program
# again; the loop ends at --max-iterations.
STEP = """import sys
from flux_quantum.job.loop import Step
step = Step.current()
if step is not None:
    counts = step.result(timeout=120).counts
    total = sum(counts.values()) or 1
    step.next(step.program, value=counts.get("00", 0) / total)
"""


def is_qpu_name(name: str) -> bool:
    """A job the campaign submitted with a qpu request, by its name (a pattern's job, or
    a variational loop's)."""
    return name.startswith(PATTERNS) or name.startswith("fq-loop-")


# --- the vendors: devices, prices, faults ----------------------------------------------


@dataclass(frozen=True)
class Device:
    """One emulated device and its catalog twin (vendor ``local``); vendor seconds."""

    name: str  # catalog name
    vendor: str  # braket | ibm: which side of the emulator serves it
    klass: str  # qpu | simulator
    service: float  # mean vendor seconds a task runs
    depth: int  # tasks queued at the start
    load: float  # background utilisation

    @property
    def ident(self) -> str:
        """The Braket device ARN, or the IBM backend name."""
        if self.vendor == "ibm":
            return f"ibm_{self.name}"
        kind = "qpu" if self.klass == "qpu" else "quantum-simulator"
        return f"arn:aws:braket:us-east-1::device/{kind}/emulator/{self.name}"

    def queue(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "arrival_rate": self.load / self.service,
            "service_time": self.service,
            "distribution": "exponential",
        }

    def catalog(self, speed: float) -> str:
        if self.vendor == "ibm":
            price = "{per_minute: 96}"
        elif self.klass == "qpu":
            price = "{per_task: 0.30, per_shot: 0.00145}"
        else:
            price = "{per_minute: 0.075, min_seconds: 3}"
        return (
            f"  - name: {self.name}\n    vendor: local\n    id: {self.ident}\n"
            f"    class: {self.klass}\n    qubits: 20\n    region: us-east-1\n"
            f"    price: {price}\n    slots: 100\n"
            f"    properties: {{drain_seconds_per_task: {self.service / speed:.4g}}}\n"
        )


FLEET = (
    Device("qpu-a", "braket", "qpu", 20.0, 3, 0.5),
    Device("qpu-b", "braket", "qpu", 10.0, 2, 0.5),
    Device("sim", "braket", "simulator", 4.0, 0, 0.3),
    Device("heron", "ibm", "qpu", 12.0, 2, 0.5),
    Device("eagle", "ibm", "qpu", 8.0, 1, 0.5),
)
BRAKET = tuple(d for d in FLEET if d.vendor == "braket")
IBM = tuple(d for d in FLEET if d.vendor == "ibm")
IBM_PRICE_PER_SECOND = 1.60  # the catalog's per_minute 96


@dataclass(frozen=True)
class FaultSpec:
    """One fault of the plan: which side, its kind (how the report counts it) and the
    scenario entry."""

    vendor: str  # braket | ibm
    kind: str
    entry: Mapping[str, Any]


# Real seconds an answer takes to time out the service's vendor clients (their read
# timeout is 20 s for Braket and IBM).
TIMED_OUT = 22.0


def fault_plan(scale: float = 1.0, horizon: float = 3600.0) -> tuple[FaultSpec, ...]:
    """Rate faults of every kind, scaled by ``scale`` (0: none). Which calls they hit is
    seeded by the emulator's seed (``random.Random(f"{seed}:fault:{index}:{n}")``), so the
    same seed injects the same faults into the same calls. ``horizon``: vendor seconds the
    arm lasts, where the offline / paused windows fall."""
    if scale <= 0:
        return ()

    def r(rate: float) -> float:
        return round(min(1.0, rate * scale), 4)

    create, get, ibm_create = "CreateQuantumTask", "GetQuantumTask", "CreateJob"
    qb, eagle = "arn:aws:braket:us-east-1::device/qpu/emulator/qpu-b", "ibm_eagle"
    off = (round(horizon * 0.3), round(horizon * 0.3 + 60))
    return (
        FaultSpec(
            "braket",
            "error:ThrottlingException",
            {"operation": create, "error": "ThrottlingException", "rate": r(0.05)},
        ),
        FaultSpec(
            "braket",
            "error:InternalServiceException",
            {"operation": [create, get], "error": "InternalServiceException", "rate": r(0.03)},
        ),
        FaultSpec(
            "braket",
            "error:ThrottlingException",
            {"operation": "GetDevice", "error": "ThrottlingException", "rate": r(0.05)},
        ),
        FaultSpec("braket", "reset", {"operation": [create, get], "reset": True, "rate": r(0.03)}),
        FaultSpec(
            "braket",
            "lost",
            {"operation": create, "reset": True, "after_commit": True, "rate": r(0.04)},
        ),
        FaultSpec("braket", "delay", {"operation": get, "delay": 1.0, "rate": r(0.02)}),
        # Past the clients' 20 s read timeout: a poll that times out, and a create applied
        # whose answer comes too late (lost by a timeout, not a reset).
        FaultSpec("braket", "delay", {"operation": get, "delay": TIMED_OUT, "rate": r(0.002)}),
        FaultSpec(
            "braket",
            "delay",
            {"operation": create, "delay": TIMED_OUT, "after_commit": True, "rate": r(0.01)},
        ),
        FaultSpec("braket", "fail_task", {"fail_task": "injected: device error", "rate": r(0.04)}),
        FaultSpec("braket", "cancel_task", {"cancel_task": True, "rate": r(0.03)}),
        FaultSpec(
            "braket",
            "s3:InternalError",
            {"operation": "GetObject", "error": "InternalError", "rate": r(0.05)},
        ),
        FaultSpec(
            "braket",
            "s3:SlowDown",
            {"operation": "GetObject", "error": "SlowDown", "rate": r(0.03)},
        ),
        FaultSpec(
            "braket",
            "offline",
            {"device": qb, "offline": [{"start": off[0], "end": off[1]}]},
        ),
        FaultSpec("ibm", "error:503", {"operation": ibm_create, "status": 503, "rate": r(0.05)}),
        FaultSpec("ibm", "error:500", {"operation": ["GetJob"], "status": 500, "rate": r(0.03)}),
        FaultSpec(
            "ibm",
            "lost",
            {"operation": ibm_create, "reset": True, "after_commit": True, "rate": r(0.04)},
        ),
        FaultSpec("ibm", "reset", {"operation": "GetJob", "reset": True, "rate": r(0.02)}),
        FaultSpec(
            "ibm", "error:500", {"operation": "GetJobResults", "status": 500, "rate": r(0.05)}
        ),
        FaultSpec(
            "ibm",
            "fail_job",
            {"operation": ibm_create, "fail_job": "injected: backend error", "rate": r(0.04)},
        ),
        FaultSpec(
            "ibm", "cancel_job", {"operation": ibm_create, "cancel_job": True, "rate": r(0.03)}
        ),
        FaultSpec("ibm", "delay", {"operation": "GetJob", "delay": 1.0, "rate": r(0.02)}),
        FaultSpec(
            "ibm",
            "delay",
            {"operation": ibm_create, "delay": TIMED_OUT, "after_commit": True, "rate": r(0.01)},
        ),
        FaultSpec("ibm", "paused", {"backend": eagle, "paused": [off[0] + 30, off[1] + 30]}),
    )


def scenarios(plan: Sequence[FaultSpec]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The Braket and IBM scenario dicts for ``plan``, and the faults this emulator does
    not know (dropped, each said in one line): every fault is checked on its own, so one
    the emulator refuses leaves the others in."""
    from flux_quantum.emulator import Scenario
    from flux_quantum.emulator.ibm import IbmScenario
    from flux_quantum.emulator.scenario import ScenarioError

    devices = {
        d.ident: {
            "arn": d.ident,
            "name": d.name,
            "type": "QPU" if d.klass == "qpu" else "SIMULATOR",
            "qubits": 20,
            "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.3}
            if d.klass == "qpu"
            else {"price": 0.075, "unit": "minute"},
            "queue": d.queue(),
        }
        for d in BRAKET
    }
    backends = {d.ident: {"name": d.ident, "qubits": 20, "queue": d.queue()} for d in IBM}
    braket: dict[str, Any] = {"devices": list(devices.values()), "faults": []}
    ibm: dict[str, Any] = {
        "plan": "paid",
        "price_per_second": IBM_PRICE_PER_SECOND,
        "backends": list(backends.values()),
        "faults": [],
    }
    dropped: list[str] = []

    def accepted(build: Callable[[], Any]) -> str | None:
        try:
            build()
        except (ScenarioError, ValueError, TypeError) as exc:
            return str(exc).splitlines()[0]
        return None

    base_ibm = {"backends": list(backends.values())}
    if accepted(lambda: IbmScenario.from_dict({**base_ibm, "price_per_second": 1.6})):
        del ibm["price_per_second"]  # the emulator's own default for plan paid is 1.60
        dropped.append("ibm price_per_second (the emulator's default is used)")
    for fault in plan:
        entry = dict(fault.entry)
        if fault.kind == "offline":
            device = dict(devices[entry["device"]], offline=entry["offline"])
            why = accepted(lambda d=device: Scenario.from_dict({"devices": [d]}))
            if why is None:
                devices[entry["device"]]["offline"] = entry["offline"]
        elif fault.kind == "paused":
            backend = dict(backends[entry["backend"]], paused=[entry["paused"]])
            why = accepted(lambda b=backend: IbmScenario.from_dict({"backends": [b]}))
            if why is None:
                backends[entry["backend"]]["paused"] = [entry["paused"]]
        elif fault.vendor == "braket":
            why = accepted(
                lambda e=entry: Scenario.from_dict(
                    {"devices": list(devices.values()), "faults": [e]}
                )
            )
            if why is None:
                braket["faults"].append(entry)
        else:
            why = accepted(lambda e=entry: IbmScenario.from_dict({**base_ibm, "faults": [e]}))
            if why is None:
                ibm["faults"].append(entry)
        if why is not None:
            dropped.append(f"{fault.vendor} {fault.kind}: {why}")
    braket["devices"] = list(devices.values())
    ibm["backends"] = list(backends.values())
    return braket, ibm, dropped


def catalog(speed: float) -> str:
    return "currency: USD\ndevices:\n" + "".join(d.catalog(speed) for d in FLEET)


# --- the workload and the disruptions -----------------------------------------------------


@dataclass(frozen=True)
class JobPlan:
    """One submission of the campaign: a job, a fan-out group or a loop."""

    index: int
    at: float  # wall seconds after the arm's start
    pattern: str  # one of PATTERNS
    device: str  # catalog name, or "any" (failover next picks among the same class)
    release_at: str | int
    failover: bool = False
    members: int = 1  # fan-out: jobs in the group
    programs: int = 1  # batch: programs in the list
    iterations: int = 0  # loop: steps
    session: bool = False
    shots: int = 100
    cancel_after: float | None = None  # wall seconds after submit the campaign cancels it

    def request(self, programs: Sequence[Path]) -> dict[str, Any]:
        """The job's ``system.qpu`` table (not for loops: ``flux quantum loop submit``)."""
        out: dict[str, Any] = {"shots": self.shots, "release_at": self.release_at}
        if self.device == "any":
            out.update(device="local:any", policy="min-wait", **{"class": "qpu"})
        else:
            out["device"] = f"local:{self.device}"
        out["program"] = (
            [str(p) for p in programs[: self.programs]]
            if self.pattern == "batch"
            else str(programs[self.index % len(programs)])
        )
        if self.failover:
            out["failover"] = "next"
        if self.pattern == "fanout":
            out["group"] = f"g{self.index}"
        if self.session:
            out["session"] = "dedicated"
        return out


def workload(seed: int, n: int, window: float) -> tuple[JobPlan, ...]:
    """``n`` submissions over ``window`` wall seconds, every pattern at least once (the
    first five are one of each), the rest drawn by weight; seeded."""
    rng = random.Random(f"{seed}:workload")
    weights = {"single": 0.35, "fanout": 0.2, "batch": 0.2, "loop": 0.1, "session": 0.15}
    kinds = list(PATTERNS) + rng.choices(
        list(weights), weights=list(weights.values()), k=max(0, n - len(PATTERNS))
    )
    kinds = kinds[:n]
    times = sorted(rng.uniform(0.0, window) for _ in kinds)
    plans = []
    for i, (kind, at) in enumerate(zip(kinds, times, strict=True)):
        release: str | int = rng.choice(["done", "done", "done", "running", 1, 2, "predict"])
        failover = kind != "loop" and rng.random() < 0.25
        if kind == "session":
            device = rng.choice([d.name for d in IBM])
        elif failover:
            device = "any"
        else:
            device = rng.choice([d.name for d in FLEET])
        plans.append(
            JobPlan(
                index=i,
                at=round(at, 3),
                pattern=kind,
                device=device,
                release_at="done" if kind == "loop" else release,
                failover=failover,
                members=rng.randint(2, 4) if kind == "fanout" else 1,
                programs=rng.randint(2, 3) if kind == "batch" else 1,
                iterations=rng.randint(2, 3) if kind == "loop" else 0,
                session=kind == "session" or (kind == "loop" and device in {d.name for d in IBM}),
                shots=rng.choice([50, 100, 200]),
                cancel_after=round(rng.uniform(0.2, 2.0), 3)
                if kind in ("single", "batch") and rng.random() < 0.05
                else None,
            )
        )
    return tuple(plans)


@dataclass(frozen=True)
class Disruption:
    at: float  # wall seconds after the arm's start
    kind: str  # one of DISRUPTIONS


def disruption_plan(
    seed: int, window: float, kills: int, restarts: int, ledger: int
) -> tuple[Disruption, ...]:
    """Seeded moments inside the window's middle 80 %, at least 8 s apart so each
    recovery is measured on its own."""
    rng = random.Random(f"{seed}:disruptions")
    kinds = ["kill"] * kills + ["restart"] * restarts + ["ledger"] * ledger
    rng.shuffle(kinds)
    if not kinds:
        return ()
    lo, hi = 0.1 * window, 0.9 * window
    slot = (hi - lo) / len(kinds)
    out = []
    for k, kind in enumerate(kinds):
        start = lo + k * slot
        out.append(Disruption(round(start + rng.uniform(0, max(0.0, slot - 8.0)), 3), kind))
    return tuple(out)


# --- one instance: Flux, the service, the disruptions -------------------------------------


class Broker:
    """``flux start --test-size=1`` with a statedir, in the background; restartable."""

    def __init__(self, work: Path, env: Mapping[str, str], broker_opts: Sequence[str]) -> None:
        self.work, self.base_env, self.opts = work, dict(env), list(broker_opts)
        self.statedir = work / "state"
        self.statedir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.incarnation = 0

    def start(self) -> float:
        """Start the broker; the wall time its URI was up."""
        urifile, stopfile = self.work / "uri", self.work / "stop"
        urifile.unlink(missing_ok=True)
        stopfile.unlink(missing_ok=True)
        script = (
            f'echo "$FLUX_URI" > {shlex.quote(str(urifile))}.tmp && '
            f"mv {shlex.quote(str(urifile))}.tmp {shlex.quote(str(urifile))}; "
            f"while [ ! -e {shlex.quote(str(stopfile))} ]; do sleep 0.05; done"
        )
        cmd = ["flux", "start", "--test-size=1", "-c", str(self.work / "conf")]
        cmd += [f"-Sstatedir={self.statedir}", *self.opts, "sh", "-c", script]
        self.incarnation += 1
        self.log = open(self.work / f"broker-{self.incarnation}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.base_env
        )
        deadline = time.monotonic() + 60
        while not urifile.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"flux start failed: {self.logs()[-1500:]}")
            time.sleep(0.02)
        up = time.time()
        uri = urifile.read_text().strip()
        self.env = dict(os.environ, FLUX_URI=uri, XDG_STATE_HOME=str(self.work / "xdg"))
        self.env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + self.env["PATH"]
        if self.incarnation == 1:  # not after a restart: running jobs may wait for the service
            self.run("flux", "queue", "idle", "--quiet", "--timeout=30s", check=False)
        return up

    def logs(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted(self.work.glob("broker-*.log"))
        )

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            list(cmd),
            env=self.env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)}: {(proc.stderr or proc.stdout).strip()}")
        return proc

    def stop(self) -> None:
        """An orderly shutdown, the statedir kept (what ``flux shutdown`` or ``systemctl
        restart flux`` does to a system instance)."""
        if self.proc is None:
            return
        with contextlib.suppress(Exception):  # the service's log, before it goes
            dmesg = self.run("flux", "dmesg", check=False, timeout=30).stdout
            (self.work / f"dmesg-{self.incarnation}.log").write_text(dmesg)
        (self.work / "stop").touch()
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()


def service_options(speed: float) -> list[str]:
    """The service's defaults scaled by the vendor clock's speed, with floors."""

    def scaled(default: float, floor: float) -> str:
        return f"{max(floor, default / speed):.4g}"

    return [
        f"--scan-interval={scaled(1.0, 0.1)}",
        f"--poll-min={scaled(0.5, 0.05)}",
        f"--poll-cold-max={scaled(30.0, 0.2)}",
        f"--poll-max={scaled(300.0, 0.5)}",
        f"--device-check-interval={scaled(15.0, 0.5)}",
        f"--cluster-interval={scaled(5.0, 0.5)}",
        f"--group-linger={scaled(60.0, 1.0)}",
        f"--loop-linger={scaled(5.0, 1.0)}",
        f"--retry-max={scaled(60.0, 1.0)}",
        f"--tick={scaled(0.2, 0.05)}",
        f"--startup-default={scaled(1.0, 0.05)}",
    ]


def python_for_service(work: Path) -> str:
    """The interpreter the supervisor starts the service with. The supervisor scrubs
    PYTHONPATH, so when this flux_quantum is not the one ``sys.executable`` imports
    (a worktree run with PYTHONPATH), a wrapper puts it back for the service only."""
    import flux_quantum

    src = str(Path(flux_quantum.__file__).resolve().parent.parent)
    probe = subprocess.run(
        [sys.executable, "-I", "-c", "import flux_quantum; print(flux_quantum.__file__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0 and Path(probe.stdout.strip()).resolve().parent.parent == Path(src):
        return sys.executable
    wrapper = work / "python"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH={shlex.quote(src)} exec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def write_locks(pid: int, paths: Iterable[Path]) -> list[str]:
    """The POSIX WRITE locks ``pid`` holds on ``paths`` (by inode), from /proc/locks: SQLite
    holds one on byte 120 of the -shm file (WAL_WRITE_LOCK) for the whole of a write
    transaction, and on the database file in rollback mode."""
    inodes = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            inodes[st.st_ino] = path.name
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        # 1: POSIX  ADVISORY  WRITE 1234 08:01:5678 120 120
        if len(parts) < 8 or parts[1] != "POSIX" or parts[3] != "WRITE":
            continue
        if parts[4] != str(pid):
            continue
        inode = int(parts[5].rsplit(":", 1)[1])
        if inode not in inodes:
            continue
        name = inodes[inode]
        start, end = parts[6], parts[7]
        on_write_byte = name.endswith("-shm") and int(start) <= 120 <= (
            int(end) if end != "EOF" else 1 << 62
        )
        if on_write_byte or not name.endswith(("-shm", "-wal")):
            held.append(f"{name} {start}-{end}")
    return held


@dataclass
class Recovery:
    kind: str  # kill | restart | ledger
    at: float  # wall seconds after the arm's start
    seconds: float | None  # to full work; None: not back within the limit
    held: int  # jobs held at the moment
    note: str = ""


@dataclass
class ArmResult:
    arm: str
    seed: int
    jobs: dict[str, int] = field(default_factory=dict)  # submitted per pattern
    qpu_jobs: int = 0  # jobs with a qpu request (loop steps and group members included)
    recoveries: list[Recovery] = field(default_factory=list)
    report: dict[str, Any] | None = None
    findings: dict[str, Any] | None = None
    calls: int = 0
    wall_s: float = 0.0
    drained: bool = True
    dropped: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def calls_per_job(self) -> float:
        return self.calls / self.qpu_jobs if self.qpu_jobs else float("nan")


class Arm:
    """One arm: an emulator, an instance, the service, the workload and the disruptions."""

    def __init__(
        self,
        name: str,
        work: Path,
        args: argparse.Namespace,
        plan: Sequence[FaultSpec],
        disruptions: Sequence[Disruption],
        say: Callable[[str], None],
    ) -> None:
        self.name, self.work, self.args, self.say = name, work, args, say
        self.plan, self.disruptions = plan, disruptions
        self.secrets = (
            "fqsec-" + secrets.token_hex(12),  # AWS_SECRET_ACCESS_KEY
            "fqkey-" + secrets.token_hex(12),  # the IBM API key
        )
        self.result = ArmResult(name, args.seed)
        self.jobids: list[int] = []
        self.loops: list[str] = []
        self.cancels: list[tuple[float, int]] = []
        self._local = threading.local()
        self.last_status: dict[str, Any] | None = None
        self.backoff: float | None = None
        self.watch: threading.Thread | None = None

    # -- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, ScaledClock, Scenario
        from flux_quantum.emulator.ibm import IbmScenario

        work, args = self.work, self.args
        (work / "conf").mkdir(parents=True)
        self.ledger = work / "ledger.db"
        (work / "conf" / "quantum.toml").write_text(
            instance_config() + f'\n[quantum.ledger]\npath = "{self.ledger}"\n'
        )
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(catalog(args.speed))
        self.programs = []
        for k, text in enumerate(PROGRAMS):
            path = work / f"program{k}.qasm"
            path.write_text(text)
            self.programs.append(path)
        (work / "step.py").write_text(STEP)
        braket, ibm, dropped = scenarios(self.plan)
        self.result.dropped = dropped
        (work / "scenario.json").write_text(json.dumps({"braket": braket, "ibm": ibm}, indent=1))
        self.clock = ScaledClock(args.speed, paused=False, epoch=datetime.now(UTC))
        self.emulator = Emulator(
            Scenario.from_dict(braket),
            clock=self.clock,
            seed=args.seed,
            ibm=IbmScenario.from_dict(ibm),
        ).start()
        exe = Path(sys.executable).parent / "flux-quantum"
        broker_opts = subprocess.run(
            [str(exe), "config", "--broker-opts"], capture_output=True, text=True, check=True
        ).stdout.split()
        # What a site exports for its service: the broker's environment carries the
        # secrets; the campaign's own (that of the jobs it submits) does not.
        env = {
            **os.environ,
            "AWS_SECRET_ACCESS_KEY": self.secrets[0],
            "AWS_ACCESS_KEY_ID": "AKIAFQCAMPAIGN",
            "QRMI_IBM_QCS_IAM_APIKEY": self.secrets[1],
            "FLUX_QUANTUM_EMULATOR_URL": self.emulator.url,
            "XDG_STATE_HOME": str(work / "xdg"),
        }
        self.broker = Broker(work, env, broker_opts)
        self.broker.start()
        self.python = python_for_service(work)
        # The jobs' environment: the campaign's own, never the broker's secrets.
        self.job_env = {
            k: v
            for k, v in self.broker.env.items()
            if k in ("PATH", "PYTHONPATH", "HOME", "LANG", "XDG_STATE_HOME")
        }
        self.start_service()

    def start_service(self) -> None:
        self.broker.run(
            "flux",
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--emulator-url={self.emulator.url}",
            f"--python={self.python}",
            *service_options(self.args.speed),
            timeout=120,
        )

    def _h(self) -> Any:
        """This thread's Flux handle on the current broker (the ledger watch runs in a
        thread of its own; a restarted broker has a new URI)."""
        import flux

        uri = self.broker.env["FLUX_URI"]
        if getattr(self._local, "uri", None) != uri:
            self._local.handle, self._local.uri = flux.Flux(uri), uri
        return self._local.handle

    # -- Flux ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        # The supervisor relays the request to the service: while a killed service is
        # being replaced the answer can take seconds, so ask often and give up soon.
        try:
            self.last_status = dict(self._h().rpc("qpu_handlers.status", {}).wait_for(0.5).get())
        except (OSError, TimeoutError):
            self.last_status = None
        return self.last_status

    def jobs(self, states: int) -> list[int]:
        payload = {"max_entries": 0, "attrs": [], "states": states, "results": 0, "userid": -1}
        try:
            answer = self._h().rpc("job-list.list", payload).get()
        except OSError:
            return []
        return [int(j["id"]) for j in answer["jobs"]]

    def held(self) -> set[int]:
        return set(self.jobs(STATE_DEPEND))

    def full_work(self, held: set[int], old_pid: int | None) -> bool:
        """The service is back: a new process answers, and every job held at the moment
        of the disruption that is still held is tracked again."""
        status = self.status()
        if not status or not status.get("running", True):
            return False
        if old_pid is not None and status.get("pid") == old_pid:
            return False
        tracked = {int(j) for unit in status.get("units", []) for j in unit.get("jobs", [])}
        return not self.still_held(held - tracked)

    def still_held(self, jobids: Iterable[int]) -> set[int]:
        """Which of ``jobids`` are held now, asked one by one: after a restart job-list
        fills up slowly, and a job it does not know yet counts as held."""
        out = set()
        for jobid in jobids:
            try:
                future = self._h().rpc("job-list.list-id", {"id": jobid, "attrs": ["state"]})
                state = future.wait_for(0.5).get()["job"]["state"]
            except (OSError, TimeoutError):
                out.add(jobid)
                continue
            if state == STATE_DEPEND:
                out.add(jobid)
        return out

    def wait_full(self, held: set[int], old_pid: int | None, limit: float) -> float | None:
        """Seconds until ``full_work``; None past ``limit``. ``self.backoff``: the
        supervisor's restart delay, as its status announced it (None: not seen)."""
        t0 = time.monotonic()
        self.backoff: float | None = None
        while time.monotonic() - t0 < limit:
            if self.full_work(held, old_pid):
                return time.monotonic() - t0
            supervisor = (self.last_status or {}).get("supervisor") or {}
            if supervisor.get("restart_in") is not None and self.backoff is None:
                self.backoff = time.monotonic() - t0 + float(supervisor["restart_in"])
            time.sleep(0.05)
        return None

    def submit(self, job: JobPlan) -> None:
        import flux.job
        from flux.job import JobspecV1

        if job.pattern == "loop":
            self._loop(job)
            return
        request = job.request(self.programs)
        # A job released before its task is done reads its result as an application
        # does (and fails, saying why, when the task does); one released at done has it.
        command = ["true"]
        if job.release_at != "done":
            exe = str(Path(sys.executable).parent / "flux-quantum")
            command = [exe, "task", "--wait", "--timeout=600", "--interval=0.2"]
        for member in range(job.members):
            spec = JobspecV1.from_command(command, num_tasks=1, cores_per_task=1)
            spec.duration = 600
            spec.environment = self.job_env
            spec.cwd = str(self.work)
            spec.setattr("system.job.name", f"{job.pattern}-{job.index}.{member}")
            spec.setattr("system.qpu", request)
            jobid = int(flux.job.submit(self._h(), spec))
            self.jobids.append(jobid)
            if job.cancel_after is not None:
                self.cancels.append((time.monotonic() + job.cancel_after, jobid))

    def _loop(self, job: JobPlan) -> None:
        name = f"fq-loop-{job.index}"
        cmd = [
            "flux",
            "quantum",
            "loop",
            "submit",
            f"--qpu=local:{job.device}" if job.device != "any" else "--qpu=local:any",
            f"--program={self.programs[job.index % len(self.programs)]}",
            f"--shots={job.shots}",
            f"--max-iterations={job.iterations}",
            f"--name={name}",
            f"--dir={self.work / 'loops' / name}",
            *(["--session=dedicated"] if job.session else []),
            "-n1",
            "-t",
            "10m",
            sys.executable,
            str(self.work / "step.py"),
        ]
        proc = self.broker.run(*cmd, check=False)
        if proc.returncode != 0:
            self.result.errors.append(f"loop {job.index}: {(proc.stderr or proc.stdout).strip()}")
        else:
            self.loops.append(name)

    # -- disruptions ----------------------------------------------------------------------

    def disrupt(self, d: Disruption, at: float) -> Recovery | None:
        """Do ``d``; its recovery, or None for the ledger writer's kill, which a thread
        of its own watches for (the campaign goes on meanwhile: it makes the writes)."""
        self.join_watch()
        held = self.held()
        status = self.status() or {}
        pid = status.get("pid")
        if d.kind == "restart":
            self.broker.stop()
            up = self.broker.start()
            self.start_service()
            t_full = self.wait_full(held, None, 120.0)
            seconds = None if t_full is None else time.time() - up
            return Recovery("restart", at, seconds, len(held), "from the broker up")
        if not pid:
            return Recovery(d.kind, at, None, len(held), "no service pid")
        if d.kind == "ledger":

            def watch(pid: int = int(pid)) -> None:
                note, t_kill = self._stop_mid_write(pid)
                held = self.held()  # the jobs held at the kill
                t_full = self.wait_full(held, pid, 120.0)
                seconds = None if t_full is None else time.monotonic() - t_kill
                rec = Recovery("ledger", at, seconds, len(held), note + self._backoff_note())
                self.result.recoveries.append(rec)
                self.say(
                    f"    ledger writer at {at:.0f}s: {rec.note}; back in "
                    + ("-" if seconds is None else f"{seconds:.2f}s")
                )

            self.watch = threading.Thread(target=watch, daemon=True)
            self.watch.start()
            return None
        os.kill(int(pid), signal.SIGKILL)
        t_kill = time.monotonic()
        t_full = self.wait_full(held, int(pid), 120.0)
        seconds = None if t_full is None else time.monotonic() - t_kill
        return Recovery(d.kind, at, seconds, len(held), self._backoff_note().lstrip("; "))

    def _backoff_note(self) -> str:
        if self.backoff is None:
            return ""
        return f"; supervisor restart delay ~{self.backoff:.1f}s"

    def join_watch(self) -> None:
        if self.watch is not None:
            self.watch.join()
            self.watch = None

    def _stop_mid_write(self, pid: int, limit: float = 40.0) -> tuple[str, float]:
        """Kill the service while it holds the ledger's write lock, proven: watch
        /proc/locks until the service holds SQLite's write lock on the ledger, SIGSTOP it,
        read /proc/locks again and SIGKILL it if it still holds the lock (stopped inside
        the transaction), else SIGCONT it and watch on; a plain kill -9 when no write is
        caught within ``limit`` seconds. What happened, and the monotonic time of the kill."""
        paths = [self.ledger, Path(f"{self.ledger}-wal"), Path(f"{self.ledger}-shm")]
        deadline = time.monotonic() + limit
        stops = 0
        while time.monotonic() < deadline:
            if not write_locks(pid, paths):
                time.sleep(0.0002)
                continue
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return "the service exited first", time.monotonic()
            stops += 1
            locks = write_locks(pid, paths)
            if locks:
                os.kill(pid, signal.SIGKILL)
                t_kill = time.monotonic()
                os.kill(pid, signal.SIGCONT)
                return f"killed mid-write, stopped holding {', '.join(locks)}", t_kill
            os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return (
            f"no ledger write caught in {limit:g}s ({stops} stop(s)): plain kill -9",
            time.monotonic(),
        )

    # -- the run -----------------------------------------------------------------------------

    def run(self, plan: Sequence[JobPlan]) -> ArmResult:
        t0 = time.monotonic()
        self.say(f"  {self.name}: {len(plan)} submissions over {self.args.window:g}s")
        pending = sorted(
            [(j.at, 0, j) for j in plan] + [(d.at, 1, d) for d in self.disruptions],
            key=lambda x: (x[0], x[1]),
        )
        for at, _, item in pending:
            while time.monotonic() - t0 < at:
                self._cancel_due()
                time.sleep(min(0.05, max(0.0, at - (time.monotonic() - t0))))
            if isinstance(item, JobPlan):
                try:
                    self.submit(item)
                except Exception as exc:  # a refusal is the campaign's error: said, not fatal
                    self.result.errors.append(f"submit {item.index}: {exc}")
                self.result.jobs[item.pattern] = self.result.jobs.get(item.pattern, 0) + 1
            else:
                rec = self.disrupt(item, round(time.monotonic() - t0, 1))
                if rec is None:
                    continue
                self.result.recoveries.append(rec)
                took = "not back" if rec.seconds is None else f"{rec.seconds:.2f}s"
                self.say(
                    f"    {rec.kind} at {rec.at:.0f}s: {rec.held} held, back in {took}"
                    + (f" ({rec.note})" if rec.note else "")
                )
        while self.cancels:
            self._cancel_due()
            time.sleep(0.05)
        self.join_watch()
        self.drain()
        self.result.wall_s = time.monotonic() - t0
        return self.result

    def _cancel_due(self) -> None:
        import flux.job

        now = time.monotonic()
        for due, jobid in [c for c in self.cancels if c[0] <= now]:
            self.cancels.remove((due, jobid))
            with contextlib.suppress(Exception):  # already ended: nothing to cancel
                flux.job.cancel(self._h(), jobid, "cancelled by the fault campaign")

    def drain(self) -> None:
        """Until no job is active, then the service idle (sessions closed, costs settled)."""
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline and self.jobs(STATES_ACTIVE):
            time.sleep(0.5)
        active = self.jobs(STATES_ACTIVE)
        left = max(10.0, deadline - time.monotonic())
        idle = self.broker.run(
            "flux",
            "quantum",
            "service",
            "status",
            "--wait-idle",
            f"{left:g}",
            "--json",
            check=False,
            timeout=left + 60,
        )
        self.result.drained = not active and idle.returncode == 0
        if not self.result.drained:
            self.say(
                f"    drain: {len(active)} job(s) still active"
                + ("" if idle.returncode == 0 else f"; {(idle.stderr or idle.stdout).strip()}")
            )

    def collect(self) -> None:
        """The checker's findings, the emulator's report, the calls."""
        res = self.result
        with contextlib.suppress(Exception):
            dmesg = self.broker.run("flux", "dmesg", check=False, timeout=30).stdout
            (self.work / f"dmesg-{self.broker.incarnation}.log").write_text(dmesg)
        res.qpu_jobs = self.qpu_job_count()
        try:
            res.report = self.emulator.report()  # type: ignore[attr-defined]
        except AttributeError:
            res.report = None
        res.calls = self.emulator.call_count()
        texts = {p.name: p.read_text(errors="replace") for p in sorted(self.work.glob("*.log"))}
        for loopdir in sorted((self.work / "loops").glob("*")):
            journal = loopdir / "journal.jsonl"
            if journal.exists():
                texts[f"{loopdir.name}/journal.jsonl"] = journal.read_text(errors="replace")
        try:
            from flux_quantum.testing import promises  # type: ignore[attr-defined]
        except ImportError:
            res.errors.append("the promise checker flux_quantum.testing.promises is not available")
            return
        res.findings = promises.check(self.gather_facts(texts)).to_dict()
        res.evidence = self.evidence(res.findings.get("violations") or [], texts)

    def qpu_job_count(self) -> int:
        """The instance's jobs with a qpu request, as job-list knows them."""
        return sum(1 for j in self.jobs(STATES_ACTIVE | 64) if self._is_qpu(j))

    def gather_facts(self, texts: Mapping[str, str]) -> Any:
        """What the promise checker judges: every job Flux knows, the emulator's bill,
        the ledger and ``texts`` (``flux_quantum.testing.promises.gather``)."""
        from flux_quantum.testing import promises

        return promises.gather(
            uri=self.broker.env["FLUX_URI"],
            emulator_url=self.emulator.url,
            ledger=self.ledger,
            texts=texts,
            secrets=self.secrets,
        )

    def eventlog_lines(self, jobid: int) -> list[str]:
        """Job ``jobid``'s eventlog as ``flux job eventlog`` prints it."""
        proc = self.broker.run("flux", "job", "eventlog", str(jobid), check=False)
        return proc.stdout.splitlines()

    def evidence(
        self, violations: Sequence[Mapping[str, Any]], texts: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """For each violation: the eventlog of every job it names and the log lines that
        name its job, task or session ids (the lead reads these, not the bench)."""
        out = []
        for v in violations[:50]:
            said = f"{v.get('subject', '')} {v.get('detail', '')}"
            jobs = sorted({int(j) for j in re.findall(r"\b(\d{8,})\b", said)})
            ids = set(re.findall(r"arn:aws:braket:\S*quantum-task/[0-9a-f-]+", said))
            ids |= set(re.findall(r"\b[a-z0-9]{20}\b|\b[0-9a-f]{12}\b", said))
            ids |= {str(j) for j in jobs}
            eventlogs = {}
            for jobid in jobs[:4]:
                eventlogs[str(jobid)] = self.eventlog_lines(jobid)[-40:]
            lines = [
                f"{name}: {line}"
                for name, text in texts.items()
                if name.startswith(("dmesg", "broker"))
                for line in text.splitlines()
                if any(i in line for i in ids) and ".debug" not in line
            ]
            out.append({**v, "eventlogs": eventlogs, "log": lines[:40]})
        return out

    def _is_qpu(self, jobid: int) -> bool:
        try:
            job = (
                self._h()
                .rpc("job-list.list-id", {"id": jobid, "attrs": ["annotations", "name"]})
                .get()["job"]
            )
        except OSError:
            return False
        return is_qpu_name(str(job.get("name", "")))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.broker.run("flux", "cancel", "--all", "--quiet", check=False, timeout=30)
        with contextlib.suppress(Exception):
            self.broker.run("flux", "quantum", "service", "stop", check=False, timeout=60)
        with contextlib.suppress(Exception):
            self.broker.stop()
        with contextlib.suppress(Exception):
            self.emulator.stop()


# --- figures ------------------------------------------------------------------------------


PROMISE_NAMES = (
    "one_task",
    "no_lost_job",
    "sessions_closed",
    "ledger_matches",
    "no_secret",
    "honest_failure",
)


def faults_by_kind(report: Mapping[str, Any] | None) -> dict[str, int]:
    """``{"braket error:ThrottlingException": n, ...}`` from the emulator's report."""
    if not report:
        return {}
    out = {}
    for vendor, kinds in sorted((report.get("faults") or {}).items()):
        for kind, n in sorted((kinds or {}).items()):
            out[f"{vendor} {kind}"] = int(n)
    return out


def violations_by_promise(findings: Mapping[str, Any] | None) -> dict[str, int | None]:
    """Every promise -> its count of violations (None: not checked)."""
    counts = dict((findings or {}).get("counts") or {})
    checked = dict((findings or {}).get("checked") or {})
    return {
        p: int(counts[p]) if counts.get(p) is not None and checked.get(p, True) else None
        for p in PROMISE_NAMES
    }


def reason_class(reason: str) -> str:
    """A failure's reason without what differs from job to job (task ids, job ids, times,
    amounts), so that equal reasons count together."""
    text = " ".join(reason.split())
    text = re.sub(r"arn:aws:braket:\S*quantum-task/[0-9a-f-]+", "<task>", text)
    text = re.sub(r"\b[a-z0-9]{20}\b", "<task>", text)
    text = re.sub(r"\b\d{6,}\b", "<job>", text)
    text = re.sub(r"\d+(\.\d+)?s\b", "<t>", text)
    text = re.sub(r"^(qpu: )+", "qpu: ", text)
    return text[:100]


def outcomes(findings: Mapping[str, Any] | None) -> dict[str, int]:
    """``{"completed": n, "failed: <reason>": n, ...}`` (reasons cut at 60 characters)."""
    tally: Counter[str] = Counter()
    jobs = (findings or {}).get("jobs")
    if not isinstance(jobs, list):
        jobs = (findings or {}).get("outcomes")
    for o in jobs if isinstance(jobs, list) else []:
        outcome = str(o.get("outcome"))
        reason = o.get("reason")
        if outcome in ("completed",) or not reason:
            tally[outcome] += 1
        else:
            tally[f"{outcome}: {reason_class(str(reason))}"] += 1
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))


def calls_by_operation(report: Mapping[str, Any] | None) -> dict[str, int]:
    """The emulator's call counts by operation, most first."""
    calls = (report or {}).get("calls") or {}
    return dict(sorted(((str(k), int(v)) for k, v in calls.items()), key=lambda kv: -kv[1]))


def recovery_line(kind: str, seconds: Sequence[float | None], target: float) -> str:
    if not seconds:
        return f"  {kind:<18} none in this run (target {target:g}s)"
    back = [s for s in seconds if s is not None]
    worst = max(back) if back else float("nan")
    ok = len(back) == len(seconds) and worst <= target
    median = statistics.median(back) if back else float("nan")
    return (
        f"  {kind:<18} n {len(seconds)}, median {median:.2f}s, max {worst:.2f}s"
        + (f", {len(seconds) - len(back)} not back" if len(back) < len(seconds) else "")
        + f" <= {target:g}s: {verdict(ok)}"
    )


def ok(result: ArmResult) -> bool:
    """The verdict: the checker ran and found no violation."""
    if result.findings is None:
        return False
    return all(not n for n in violations_by_promise(result.findings).values())


def summary(runs: Sequence[ArmResult], header: Sequence[str]) -> str:
    """The text the campaign prints and writes (faults.txt)."""
    lines = list(header)
    for r in runs:
        lines.append("")
        lines.append(
            f"arm {r.arm}: {sum(r.jobs.values())} submissions "
            f"({', '.join(f'{k} {v}' for k, v in sorted(r.jobs.items()))}), "
            f"{r.qpu_jobs} QPU jobs, {r.wall_s:.0f}s" + ("" if r.drained else ", NOT DRAINED")
        )
        faults = faults_by_kind(r.report)
        if r.report is None:
            lines.append("faults injected: (this emulator has no report)")
        else:
            lines.append(f"faults injected: {sum(faults.values())}")
            lines += [f"  {k:<40} {v:>5}" for k, v in faults.items()]
        if r.dropped:
            lines.append("faults this emulator does not know (left out):")
            lines += [f"  {d}" for d in r.dropped]
        lines.append("violations by promise (target 0 each):")
        for promise, n in violations_by_promise(r.findings).items():
            shown = "not checked" if n is None else f"{n}"
            lines.append(f"  {promise:<18} {shown:>5}  {verdict(n == 0) if n is not None else ''}")
        for v in ((r.findings or {}).get("violations") or [])[:40]:
            lines.append(f"    {v.get('promise')}: {v.get('subject')}: {v.get('detail')}"[:300])
        lines.append("jobs by outcome:")
        lines += [f"  {k:<70} {v:>5}" for k, v in outcomes(r.findings).items()]
        if r.findings:
            lines.append(
                f"bill total {r.findings.get('billed_total', 0):.2f} USD, ledger total "
                + (
                    "not checked"
                    if r.findings.get("ledger_total") is None
                    else f"{r.findings['ledger_total']:.2f} USD"
                )
            )
        kills = [x.seconds for x in r.recoveries if x.kind in ("kill", "ledger")]
        restarts = [x.seconds for x in r.recoveries if x.kind == "restart"]
        lines.append("back at full work (every held job tracked again):")
        lines.append(recovery_line("after kill -9", kills, KILL_TARGET_S))
        lines.append(recovery_line("after restart", restarts, RESTART_TARGET_S))
        for x in r.recoveries:
            if x.kind == "ledger":
                lines.append(f"  ledger writer: {x.note}")
        lines.append(f"vendor calls: {r.calls} total, {r.calls_per_job:.1f} per QPU job")
        ops = calls_by_operation(r.report)
        if ops:
            lines.append(
                "  by operation: " + ", ".join(f"{k} {v}" for k, v in list(ops.items())[:10])
            )
        if r.errors:
            lines.append(f"campaign errors: {len(r.errors)}")
            lines += [f"  {e[:200]}" for e in r.errors[:10]]
    by_arm = {r.arm: r for r in runs}
    if "faults" in by_arm and "clean" in by_arm:
        f, c = by_arm["faults"], by_arm["clean"]
        lines.append("")
        lines.append(
            f"vendor calls per QPU job: {f.calls_per_job:.1f} with faults, "
            f"{c.calls_per_job:.1f} without (x{f.calls_per_job / c.calls_per_job:.2f})"
            if c.calls_per_job
            else "vendor calls per QPU job: no clean jobs"
        )
    verdicts = [f"{r.arm} {'0 violations' if ok(r) else 'VIOLATIONS or not checked'}" for r in runs]
    lines.append("verdict: " + "; ".join(verdicts))
    return "\n".join(lines)


def rows(runs: Sequence[ArmResult]) -> list[dict[str, Any]]:
    """faults.csv: one row per (arm, figure, key)."""
    out: list[dict[str, Any]] = []
    for r in runs:

        def add(figure: str, key: str, value: Any, arm: str = r.arm) -> None:
            out.append({"arm": arm, "figure": figure, "key": key, "value": value})

        for k, v in sorted(r.jobs.items()):
            add("submissions", k, v)
        add("qpu_jobs", "", r.qpu_jobs)
        for k, v in faults_by_kind(r.report).items():
            add("faults", k, v)
        for k, v in violations_by_promise(r.findings).items():
            add("violations", k, "" if v is None else v)
        for k, v in outcomes(r.findings).items():
            add("outcomes", k, v)
        for x in r.recoveries:
            add(
                f"recovery_{x.kind}", f"{x.at:.1f}", "" if x.seconds is None else f"{x.seconds:.3f}"
            )
        add("vendor_calls", "total", r.calls)
        for k, v in calls_by_operation(r.report).items():
            add("vendor_calls", k, v)
        add("vendor_calls", "per_qpu_job", f"{r.calls_per_job:.3f}")
        add("wall_s", "", f"{r.wall_s:.1f}")
    return out


def git_commit() -> str:
    proc = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    commit = proc.stdout.strip() or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return commit + ("+dirty" if dirty else "")


def run_arm(
    name: str,
    args: argparse.Namespace,
    plan: Sequence[JobPlan],
    faults: Sequence[FaultSpec],
    disruptions: Sequence[Disruption],
    tmp: Path,
    say: Callable[[str], None],
) -> ArmResult:
    arm = Arm(name, tmp / name, args, faults, disruptions, say)
    try:
        arm.setup()
        arm.run(plan)
        arm.collect()
    except Exception as exc:
        arm.result.errors.append(f"{type(exc).__name__}: {exc}")
        say(f"    {name}: {type(exc).__name__}: {exc}")
    finally:
        arm.close()
        if args.keep:
            say(f"    {name}: work kept in {arm.work}")
    return arm.result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (< 5 minutes)")
    parser.add_argument("--jobs", type=int, help="submissions per arm (240; quick 30)")
    parser.add_argument("--window", type=float, help="wall seconds of arrivals (300; quick 60)")
    parser.add_argument("--speed", type=float, default=20.0, help="vendor clock speed (20)")
    parser.add_argument("--kills", type=int, help="kill -9 of the service (4; quick 1)")
    parser.add_argument("--restarts", type=int, help="instance restarts (2; quick 1)")
    parser.add_argument("--ledger-kills", type=int, help="ledger writer kills (2; quick 1)")
    parser.add_argument("--fault-scale", type=float, default=1.0, help="multiplies fault rates")
    parser.add_argument("--no-clean", action="store_true", help="skip the no-fault arm")
    parser.add_argument(
        "--drain", type=float, help="seconds to wait for the drain (240; quick 120)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if shutil.which("flux") is None:
        print("faults: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    try:
        import flux_quantum  # noqa: F401
    except ImportError:
        print(
            "faults: needs flux-quantum importable (pip install -e . in this Python, or "
            "PYTHONPATH=src)",
            file=sys.stderr,
        )
        return 1
    quick = args.quick
    args.jobs = args.jobs or (30 if quick else 240)
    args.window = args.window or (60.0 if quick else 300.0)
    args.kills = args.kills if args.kills is not None else (1 if quick else 4)
    args.restarts = args.restarts if args.restarts is not None else (1 if quick else 2)
    args.ledger_kills = args.ledger_kills if args.ledger_kills is not None else (1 if quick else 2)
    args.drain = args.drain or (120.0 if quick else 240.0)
    for name in ("jobs", "window", "speed", "drain"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    commit = git_commit()
    command = " ".join(["python bench/faults.py", *(sys.argv[1:] if argv is None else argv)])
    say = lambda text: print(text, flush=True)  # noqa: E731
    header = [
        "faults at scale: flux-quantum's promises under vendor faults and site disruptions",
        f"command: {command}",
        f"commit: {commit}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores",
        f"seed {args.seed}, {args.jobs} submissions over {args.window:g}s, vendor clock "
        f"x{args.speed:g}, fault scale {args.fault_scale:g}; disruptions: {args.kills} kill -9, "
        f"{args.restarts} instance restarts, {args.ledger_kills} ledger writer kills",
    ]
    say("\n".join(header))
    plan = workload(args.seed, args.jobs, args.window)
    horizon = (args.window + args.drain) * args.speed
    faults = fault_plan(args.fault_scale, horizon)
    disruptions = disruption_plan(
        args.seed, args.window, args.kills, args.restarts, args.ledger_kills
    )
    t0 = time.monotonic()
    runs = []
    with contextlib.ExitStack() as stack:
        if args.keep:
            tmp = tempfile.mkdtemp(prefix="fq-faults-")
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="fq-faults-"))
        runs.append(run_arm("faults", args, plan, faults, disruptions, Path(tmp), say))
        if not args.no_clean:
            # The same workload without faults or disruptions: what the faults cost in calls.
            runs.append(run_arm("clean", args, plan, (), (), Path(tmp), say))
    header.append(f"wall {(time.monotonic() - t0) / 60:.1f} min")
    text = summary(runs, header)
    say("")
    say(text)
    if not quick or args.out_dir != RESULTS:
        out = args.out_dir
        out.mkdir(parents=True, exist_ok=True)
        stem = "faults_quick" if quick else "faults"
        (out / f"{stem}.txt").write_text(text + "\n")
        with open(out / f"{stem}.csv", "w", newline="") as f:
            writer = csv.DictWriter(
                f, fieldnames=["arm", "figure", "key", "value", "commit", "command"]
            )
            writer.writeheader()
            for row in rows(runs):
                writer.writerow({**row, "commit": commit, "command": command})
        (out / f"{stem}.json").write_text(
            json.dumps(
                {"command": command, "commit": commit, "runs": [asdict(r) for r in runs]},
                indent=1,
                default=str,
            )
            + "\n"
        )
        say(f"results: {out / stem}.{{txt,csv,json}}")
    return 0 if runs and ok(runs[0]) and all(ok(r) for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
