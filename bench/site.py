#!/usr/bin/env python3
"""A site's day at scale: what co-scheduling saves on a 1,024-node cluster.

One real Flux instance per arm: ``flux start`` whose resource set is a fake 1,024-node
cluster (flux-core's ``[fake-resources]`` rc1 task: a synthetic R, ranks forced up), in
which every job runs in job-exec's test mode (no job shell, no process: an ordinary job
"runs" for ``attributes.system.exec.test.run_duration``; a hybrid job runs in the test
mode's override mode, started and finished by this script acting as its application).
Fluxion schedules it for real with EASY backfill; the quantum jobtap plugin and the
ingest validator are loaded as ``flux quantum config`` prints them; the handler service
runs as a process (``flux-quantum service run``); the vendor is the project's emulator
(Braket's wire protocol on 127.0.0.1) with a fleet like the catalog's: three simulators
and three QPUs whose queues wander from minutes to hours over the day.

The day: 24 hours of the Lublin-Feitelson batch workload (``bench/workload.py``)
compressed ``--factor`` times (480: a day in 3 minutes). Vendor and cluster share one
clock: the emulator's clock is the wall clock since the day's start times the factor,
every job's run time and time limit are divided by it, and the service's intervals are
scaled down by it (with floors, ``service_options``). A share of the submissions (5 % and 20 %) is hybrid:
single evaluation, fan-out (a ``qpu.group`` of 2-4 jobs on one task) and variational
(3-5 tasks in a row, with a slice of the job's classical run time after each). Every arm replays
the same seeded trace against the same seeded vendor queues. The day's arrivals offer
0.9 of the machine's node-hours (``--load``), on top of a 2-hour backlog queued at the
start: a busy centre whose queue never empties (EASY packs rigid jobs to about 95 %);
at 1.0 the queue grows all day and the waits measure the day's length.

Arms:

ungated
    hybrid jobs are ordinary jobs: allocated when the scheduler gets to them, they create
    their task from their start (a fan-out group shares it through one client token) and
    wait for it on their nodes (bench/two_queue.py's baseline).
gated-1, gated-predict, gated-done
    ``--setattr=qpu...`` with ``qpu.release_at`` 1, predict or done: held in DEPEND by the
    plugin, the service submits the task at once and releases the job at that point.
reservation
    the flux-quantum prototype's approach as far as upstream Flux can express it: a scout
    (this script) submits the task when the job is submitted and, when the task is next
    to run (position 1), releases the job into the scheduler with the top priority, where
    Fluxion's EASY reservation for the queue's first job holds nodes for it from the
    earliest time they are free; the job waits there for its result. What upstream cannot
    express (a job kept in Fluxion's plan with a reservation and allocated only on an
    external release) is said in the results.
chain
    as ``gated-done``, but a variational job runs as a chain of held steps, as ``flux
    quantum loop`` runs it: step k is a held qpu job with the job's resources and a time
    limit of its own covering one step, whose task k the service creates; released when
    task k is done, the step runs the classical part of iteration k (the same slice of
    the job's run time as in the other arms) and, before it ends, submits step k+1 as a
    new held qpu job (job name ``loop-<index>.<k>``, ``user.qpu_loop`` and
    ``user.qpu_iteration`` set, k counted from 0). The submission is modelled: the step
    runs no process (job-exec's test mode), so this script, acting as its application,
    submits step k+1 at the end of step k's classical slice and then finishes step k.
    Nodes are free between steps. Single and fan-out jobs are as in ``gated-done``.
chain-predict
    as ``chain``, but every step, the first too, carries ``qpu.release_at=predict``, as
    ``flux quantum loop submit --release-at predict`` sets it on each step: the service
    releases a step when the expected wait for its result falls below the measured
    start-up of released jobs (their release -> run, nodes' wait included), so the wait
    for nodes overlaps the vendor queue; a step that runs before its result waits for it
    on its nodes. Single and fan-out jobs are as in ``gated-done``.
adaptive
    as ``chain``, but each step decides what follows it as ``flux quantum loop``'s steps
    do (``bench/site_steps.py``, with the loop's time weight ``--weight`` on every step):
    at the end of its slice it forecasts the wait for the next step's nodes from the
    instance's queue and the next result's from the loop's last task, then keeps its
    nodes (the next step, submitted waiting for this one, ``afterany``, gets its task
    from the service; when the result is there this step works that iteration in place
    and the next step's job is cancelled unrun; past the plan's bound it gives up and
    finishes), or gives them back, the service releasing the next step once its result
    is no farther than the forecast wait for its nodes (early) or at its result when the
    nodes are free. A step's time limit leaves room for one median wait of its device
    (at most an hour). The plans are put beside what happened (decisions against the
    hindsight best, forecast errors); the new targets hold it against ``gated-done``.

In every arm but the chains a variational job's later tasks are created from inside the
running job (by this script, acting as its application), which holds its nodes through
each of their vendor queues.

Measured per arm: node-hours idle waiting for quantum results (for the first task and
for the later tasks of variational jobs), utilisation by useful work, ordinary jobs'
mean and p95 wait and bounded slowdown, hybrid jobs' time to result, variational jobs'
time to their answer (submit of the first step -> the last step's end) and their
per-iteration overhead (task k done -> iteration k's classical work running, wall
seconds), what a release by prediction cost (jobs so released, the start-up lead they
were released by, their idle within that lead and past it, released jobs' release ->
run), vendor calls per hour and the service's CPU and memory; issue 19's targets for
each chain against ``gated-done`` (MISSED where missed); with both a gated-done and an
adaptive arm, the adaptive steps against hindsight and at other time weights
(``bench/site_oracle.py``); a table
(``site.txt``), a CSV of the arms (``site.csv``) and of every job (``site_jobs.csv``),
and plots (``site.png``: utilisation over the day per arm, idle node-hours by arm).

    python bench/site.py            # 1,024 nodes, 24 h at x480, shares 5 % and 20 %, 8 arms
    python bench/site.py --quick    # smoke test: 256 nodes, 4 h at x960, 20 %, 8 arms
    python bench/site.py --arms gated-done,chain,chain-predict --stem site_chain  # loops
    python bench/site.py --arms ungated,gated-done,chain,adaptive --seeds 1,2,3 \
        --stem site_adaptive     # adaptive steps: 3 seeds, medians and spread across them

The compression, x480 rather than x96: the arm runs (up to 8 arms x 2 shares) go one after
another on one 2-core machine, each a day plus a 2-hour tail and its setup; at x96 that
is about 3 h 40 min, at x480 about 50 minutes (the total is printed). What x480 costs in
fidelity: one wall second is 8 emulated minutes, so Flux's own latencies (tens of ms per
job event on a loaded 2-core machine) become 5-20 emulated seconds, and the service's
floors (``--tick`` 0.05 s, ``--poll-min`` 0.05 s, ``--scan-interval`` 0.1 s wall) are
24-48 emulated seconds, where a real service reacts in about a second. Both are far below
what the figures compare (QPU queues of minutes to hours, jobs of minutes to hours,
time limits of at least 5 minutes), and every arm pays them alike; the simulators' own
seconds-long service times are not resolved. ``--factor 96`` runs the same day slower.
``release_at=predict`` is the exception: its lead is the measured start-up of released
jobs in wall seconds, whose part that is those latencies (a second or so at real speed)
becomes minutes of the day, and a job that starts sooner than the lead waits out the
rest on its nodes (the summary splits its idle into the part within the lead and past
it, and gives released jobs' release -> run).
The per-iteration overhead is given in wall seconds, as issue 19's target is: on this
clock it holds the wait for a step's nodes too (one wall second of it is 8 emulated
minutes of the cluster's queue), which a real day would give in emulated time.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import os
import platform
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import PROGRAM, percentile, verdict
from site_oracle import IDLE_SHARE, MEDIAN_SLOWER, P95_SLOWER, InJob, JobRow, report_lines
from site_steps import Decision, Holding, StepPlanner, decision_lines, decisions, forecast_lines
from workload import POPULAR_LIMITS, Trace, TraceJob, make_trace

from flux_quantum.job.hold import Hold, HoldState
from flux_quantum.timing.step_plan import DEFAULT_WEIGHT, WEIGHT_ATTRIBUTE, StepAction

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
ARMS = (
    "ungated",
    "gated-1",
    "gated-predict",
    "gated-done",
    "reservation",
    "chain",
    "chain-predict",
    "adaptive",
)
# qpu.release_at of the arm's hybrid jobs (a chain's single and fan-out jobs too)
RELEASE_AT: dict[str, int | str] = {
    "gated-1": 1,
    "gated-predict": "predict",
    "gated-done": "done",
    "chain": "done",
    "chain-predict": "done",
    "adaptive": "done",
}
# The chain arms: qpu.release_at of every step of a loop (flux quantum loop submit
# --release-at; done is the loop's default).
LOOP_RELEASE_AT: dict[str, str] = {"chain": "done", "chain-predict": "predict", "adaptive": "done"}
# The arm whose steps decide what follows each (keep, release early, give back), with
# the loop's time weight (--weight) on every step.
ADAPTIVE = "adaptive"
# An adaptive step's time limit leaves room for one typical wait of its device (the day's
# median, at most this): a user who knows the device lets a step keep its nodes for it.
ADAPTIVE_ROOM_MAX = 3600.0
# The new targets, adaptive against the in-job loop (gated-done) of the same run: its
# variational time to result median and p95 at most this much longer, its later-task
# idle at most this share of the in-job loop's, the site's idle at most this share of
# ungated's, ordinary jobs' mean wait no longer than the plain chain's.
ADAPTIVE_TTR_MEDIAN_MAX = MEDIAN_SLOWER  # bench/site_oracle.py holds its oracle to them
ADAPTIVE_TTR_P95_MAX = P95_SLOWER
ADAPTIVE_LATER_IDLE_MAX = IDLE_SHARE
ADAPTIVE_IDLE_MAX = 0.01
HOLD_CHECK = 0.1  # wall seconds between reads of the service's forecast while a step holds
SERVICE_ARMS = frozenset(RELEASE_AT)  # the arms whose hybrid jobs the handler service holds
# Issue 19's targets for each chain, against the in-job loop (gated-done) of the same run.
LATER_IDLE_MAX = 0.10  # the chain's later-task idle node-hours / the in-job loop's
TTR_SLOWER_MAX = 0.10  # the chain's median time to the answer, at most this much longer
OVERHEAD_P50_MAX = 0.5  # wall seconds, task k done -> iteration k's classical work running
CORES_PER_NODE = 4
BSLD_TAU = 10.0  # seconds: the bounded slowdown's floor on run time
APP_POLL = 15.0  # vendor seconds between an application's polls (flux quantum task --wait)
BIN = 600.0  # seconds of the day per utilisation sample
# The service's reason for a release by prediction (service/release.py, timing/release_point.py):
# "predicted: expected wait for the result 0.42s <= job start-up 1.83s ..."
PREDICTED = re.compile(r"^predicted: .*?<= job start-up ([0-9.]+)s")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the vendor fleet -----------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One emulated device, like the catalog entry of the same name; vendor seconds."""

    name: str
    klass: str  # qpu | simulator
    service: float  # mean seconds per task
    load: float  # background utilisation of the device (arrival rate x service)
    depth: int  # tasks waiting at the start of the day
    distribution: str
    weight: float  # share of hybrid submissions naming it

    @property
    def arn(self) -> str:
        kind = "qpu" if self.klass == "qpu" else "quantum-simulator"
        return f"arn:aws:braket:us-east-1::device/{kind}/emulator/{self.name}"

    def scenario(self) -> dict[str, Any]:
        qpu = self.klass == "qpu"
        return {
            "arn": self.arn,
            "name": self.name,
            "type": "QPU" if qpu else "SIMULATOR",
            "qubits": 20,
            "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.3}
            if qpu
            else {"price": 0.075, "unit": "minute"},
            "queue": {
                "depth": self.depth,
                "arrival_rate": self.load / self.service,
                "service_time": self.service,
                "distribution": self.distribution,
            },
        }

    def catalog(self, factor: float) -> str:
        # The service runs on the wall clock: its drain prior is in wall seconds. Slots are
        # not the limit under test: as many as the day can use.
        price = (
            "{per_task: 0.30, per_shot: 0.00145}" if self.klass == "qpu" else "{per_minute: 0.075}"
        )
        return (
            f"  - name: {self.name}\n    vendor: local\n    id: {self.arn}\n"
            f"    class: {self.klass}\n    qubits: 20\n    region: us-east-1\n"
            f"    price: {price}\n    slots: 10000\n"
            f"    properties: {{drain_seconds_per_task: {self.service / factor:.6g}}}\n"
        )


FLEET = (
    Device("sv1", "simulator", 4.0, 0.5, 0, "uniform", 0.15),
    Device("dm1", "simulator", 8.0, 0.7, 0, "uniform", 0.10),
    Device("tn1", "simulator", 30.0, 0.9, 2, "exponential", 0.15),
    Device("forte1", "qpu", 120.0, 0.96, 20, "exponential", 0.20),
    Device("garnet", "qpu", 30.0, 0.97, 60, "exponential", 0.20),
    Device("ankaa3", "qpu", 15.0, 0.98, 200, "uniform", 0.20),
)
DEVICES = {d.name: d for d in FLEET}


def scenario(fleet: tuple[Device, ...]) -> Any:
    from flux_quantum.emulator import Scenario

    return Scenario.from_dict({"devices": [d.scenario() for d in fleet]})


def queue_profile(fleet: tuple[Device, ...], seed: int, day: float) -> dict[str, list[float]]:
    """The wait (vendor seconds) a task created at each BIN of the day meets from the
    background load alone: the same seeded queues the emulator serves, replayed offline."""
    from flux_quantum.emulator.queue import DeviceQueue

    profile = {}
    for spec, device in zip(scenario(fleet).devices, fleet, strict=True):
        q = DeviceQueue(spec, seed)
        profile[device.name] = [
            q.queue_size(k * BIN) * device.service for k in range(int(day // BIN) + 1)
        ]
    return profile


# --- Flux, the service, the process meter ---------------------------------------------


def instance_toml(nodes: int) -> str:
    """The project's instance configuration, a fake cluster, Fluxion with EASY backfill.
    Fluxion's default match format instead of ``rv1``: no QPU vertices are loaded here,
    and an rv1 R of a 128-node job carries a JGF of every vertex it holds."""
    from flux_quantum.cli.plugin import instance_config

    text = instance_config().replace('match-format = "rv1"', 'match-format = "rv1_nosched"')
    return (
        text
        + "\n[fake-resources]\n"
        + f'nnodes = {nodes}\ncores-per-node = {CORES_PER_NODE}\nhost-prefix = "node"\n'
        + '\n[sched-fluxion-qmanager]\nqueue-policy = "easy"\n'
    )


@dataclass
class Usage:
    """CPU seconds and memory of one process, read from /proc."""

    cpu: float = 0.0
    rss_kb: int = 0
    hwm_kb: int = 0

    @classmethod
    def of(cls, pid: int) -> Usage | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        ticks = stat[stat.rindex(")") + 2 :].split()[11:13]
        memory = {
            line.split(":")[0]: int(line.split()[1])
            for line in status.splitlines()
            if line.startswith(("VmRSS:", "VmHWM:"))
        }
        return cls(
            sum(int(t) for t in ticks) / CLK_TCK, memory.get("VmRSS", 0), memory.get("VmHWM", 0)
        )


def service_options(factor: float) -> list[str]:
    """The service's defaults scaled by the time compression, with floors where a
    shorter interval would only burn the 2 cores this runs on."""

    def scaled(default: float, floor: float) -> str:
        return f"{max(floor, default / factor):.4g}"

    return [
        f"--scan-interval={scaled(1.0, 0.1)}",
        f"--poll-min={scaled(0.5, 0.05)}",
        f"--poll-cold-max={scaled(30.0, 0.1)}",
        f"--poll-max={scaled(300.0, 0.2)}",
        f"--device-check-interval={scaled(15.0, 0.5)}",
        f"--cluster-interval={scaled(5.0, 0.5)}",
        f"--group-linger={scaled(60.0, 0.2)}",
        f"--retry-max={scaled(60.0, 0.5)}",
        f"--tick={scaled(0.2, 0.05)}",
        f"--startup-default={scaled(1.0, 0.05)}",
    ]


class Service:
    """``flux-quantum service run`` in the instance, a process of its own."""

    def __init__(self, inst: Any, catalog: Path, url: str, factor: float, log: Path) -> None:
        exe = Path(sys.executable).parent / "flux-quantum"
        argv = [str(exe), "service", "run", f"--catalog={catalog}", f"--emulator-url={url}"]
        self.log = open(log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*argv, *service_options(factor)],
            env=inst.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            status = subprocess.run(
                [str(exe), "service", "status", "--json"],
                env=inst.env,
                capture_output=True,
                text=True,
            )
            if status.returncode == 0 and json.loads(status.stdout).get("running", True):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the handler service did not start: {log.read_text()[-800:]}")
            time.sleep(0.2)
        self.pid = self.proc.pid

    def usage(self) -> Usage | None:
        return Usage.of(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- what happened to each job ----------------------------------------------------------


@dataclass
class JobRecord:
    """One job of one arm; times are wall-clock seconds (``time.time()``)."""

    index: int
    kind: str  # ordinary | hybrid
    nodes: int
    runtime: float  # emulated seconds of classical work
    jobid: int = 0
    unit: int = -1  # the trace index of its group's first job (hybrid)
    pattern: str = ""
    device: str = ""
    iterations: int = 0
    events: dict[str, float] = field(default_factory=dict)
    exception: str = ""
    task: str = ""  # the first task (from qpu-release, or made by the app/scout)
    why: str = ""  # why the service released it (its qpu-ready event)
    # allocated, waiting for a result: (from, to, iteration)
    idle: list[tuple[float, float, int]] = field(default_factory=list)
    work: list[tuple[float, float]] = field(default_factory=list)  # allocated, computing
    t_result: float | None = None  # the last quantum result in hand
    app_calls: int = 0  # vendor calls by the application or the scout (modelled polls)
    # the first task on the vendor's clock (seconds of the day): created, next to run,
    # started, ended; None: not (yet)
    timeline: tuple[float | None, ...] = (None, None, None, None)
    step: int = 0  # chain arms: the iteration (1-based) this job is the step of; 0: not a step
    # each quantum result: (iteration, wall time the task ended, wall time the classical
    # work of that iteration started)
    results: list[tuple[int, float, float]] = field(default_factory=list)
    # adaptive arm: the iteration the job works on now (a step runs more in place), and
    # the job whose task was its last one
    current: int = 0
    last_task_job: int = 0
    # adaptive arm: the plan the step before made for this step (StepPlan.to_dict(),
    # "t", wall, and "limit", the planning step's time limit, wall seconds); how the
    # step before held its nodes for it (wall from, to, outcome); the job that ran its
    # iteration in place (its own job was cancelled unrun); the service's first
    # expected wait for its task (wall time read, wall seconds)
    plan: dict[str, Any] = field(default_factory=dict)
    hold: tuple[float, float, str] | None = None
    ran_in: int = 0
    service_wait: tuple[float, float] | None = None


class Ledger:
    """Every job of the arm by Flux job id, filled by the submitter and the journal."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[int, JobRecord] = {}
        self.early: dict[int, dict[str, Any]] = {}  # events seen before the submit returned

    def add(self, record: JobRecord) -> list[str]:
        """Files the record; returns the names of its events seen before (the journal,
        finding no record then, has not handed them on)."""
        with self.lock:
            self.by_id[record.jobid] = record
            early = self.early.pop(record.jobid, {})
            for name, value in early.items():
                self._note(record, name, value)
            return list(early)

    def event(self, jobid: int, name: str, t: float, context: dict[str, Any]) -> JobRecord | None:
        with self.lock:
            record = self.by_id.get(jobid)
            if record is None:
                self.early.setdefault(jobid, {})[name] = (t, context)
                return None
            self._note(record, name, (t, context))
            return record

    @staticmethod
    def _note(record: JobRecord, name: str, value: tuple[float, dict[str, Any]]) -> None:
        t, context = value
        record.events.setdefault(name, t)
        if name == "exception" and context.get("severity", 1) == 0 and not record.exception:
            record.exception = str(context.get("type", "exception"))
        if name == "qpu-release" and context.get("task"):
            record.task = str(context["task"])
        if name == "qpu-ready" and context.get("tasks"):
            record.why = str(context["tasks"][0].get("why") or "")


class Journal(threading.Thread):
    """Every event of every job, from the job-manager's journal; a hybrid job's
    ``alloc`` is handed to the application."""

    def __init__(
        self, uri: str, ledger: Ledger, on_alloc: Callable[[JobRecord, float], None]
    ) -> None:
        super().__init__(daemon=True)
        import flux
        from flux.job import JournalConsumer

        self.ledger, self.on_alloc = ledger, on_alloc
        self.consumer = JournalConsumer(flux.Flux(uri), full=False)
        self.stop_flag = threading.Event()
        self.count = 0

    def run(self) -> None:
        self.consumer.start()
        while not self.stop_flag.is_set():
            try:
                event = self.consumer.poll(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:
                if self.stop_flag.is_set():
                    return
                continue
            if event is None:
                return
            self.count += 1
            record = self.ledger.event(
                int(event.jobid), event.name, event.timestamp, dict(event.context or {})
            )
            if record is not None and event.name == "alloc" and record.kind == "hybrid":
                self.on_alloc(record, event.timestamp)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=5)


# --- the hybrid jobs' application, and the prototype's scout ----------------------------


class Vendor:
    """What the application and the scout ask the emulator: creates go over the wire
    (Braket's CreateQuantumTask, counted); task progress is read from the emulator's
    own timeline in this process (the truth an application's polls would converge on;
    its polls are counted by the model APP_POLL, not made)."""

    def __init__(self, emulator: Any, clock: Any) -> None:
        self.emulator, self.clock = emulator, clock
        self.calls = 0
        self.lock = threading.Lock()

    def create(self, device: Device, token: str, shots: int) -> str:
        body = {
            "clientToken": token,
            "deviceArn": device.arn,
            "shots": shots,
            "action": json.dumps(
                {
                    "braketSchemaHeader": {"name": "braket.ir.openqasm.program", "version": "1"},
                    "source": PROGRAM,
                }
            ),
            "outputS3Bucket": self.emulator.bucket,
            "outputS3KeyPrefix": "site",
        }
        request = urllib.request.Request(
            self.emulator.url + "/quantum-task",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with self.lock:
            self.calls += 1
        with urllib.request.urlopen(request, timeout=60) as answer:
            return str(json.loads(answer.read())["quantumTaskArn"])

    def ended(self, arn: str) -> float | None:
        """The wall time the task's result became readable, None while it runs."""
        line = self.emulator.task_timeline(arn)
        return None if line.ended is None else self.clock.wall(line.ended)

    def at_front(self, arn: str) -> bool:
        line = self.emulator.task_timeline(arn)
        return line.front is not None or line.started is not None

    def created(self, arn: str) -> float:
        return self.clock.wall(self.emulator.task_timeline(arn).created)


def app_polls(wait_wall: float, factor: float) -> int:
    """Polls an application makes while waiting (one per APP_POLL vendor seconds) plus
    the result fetch."""
    return math.ceil(max(0.0, wait_wall) * factor / APP_POLL) + 1


@dataclass
class Step:
    """What a running hybrid job waits for next."""

    record: JobRecord
    iteration: int  # 1-based task number
    arn: str = ""
    since: float = 0.0  # wall: waiting since


class App(threading.Thread):
    """The application of every hybrid job (and the reservation arm's scout). On alloc it
    starts the job (job-exec override), waits on its nodes for each task's result, works
    for its share of the classical run time after each, and finishes it. A chain's step
    (``record.step``) waits for its one task, works its slice, submits the next step
    (``step_spec`` builds its jobspec; filed in ``ledger``) and finishes. An adaptive
    step first plans what follows it as a loop's rank 0 does (``StepPlanner`` with the
    loop's time ``weight``, on this thread's own handle; the step's wall time limit from
    ``step_limit``): a keep holds its nodes (``holdings``)
    until its successor's result is there and works that iteration in place (the
    successor's job, waiting for this one, is cancelled unrun), or gives up at the
    plan's bound and finishes."""

    def __init__(
        self,
        arm: str,
        uri: str,
        vendor: Vendor,
        factor: float,
        units: dict[int, list[JobRecord]],
        shots: dict[int, int],
        ledger: Ledger,
        step_spec: Callable[..., Any],
        weight: float = 0.0,
        step_limit: Callable[[JobRecord], float] | None = None,  # wall seconds
    ) -> None:
        super().__init__(daemon=True)
        import flux

        self.arm, self.vendor, self.factor = arm, vendor, factor
        self.handle = flux.Flux(uri)  # this thread's own: a handle is not shared
        self.units, self.shots = units, shots
        self.ledger, self.step_spec = ledger, step_spec
        self.planner = StepPlanner(self.handle, weight, CORES_PER_NODE) if arm == ADAPTIVE else None
        self.step_limit = step_limit
        self.holdings: list[Holding] = []
        self.unforecast: list[JobRecord] = []  # steps whose service forecast is not read
        self.forecasts_due = 0.0
        self.inbox: queue.Queue[tuple[JobRecord, float]] = queue.Queue()
        self.waiting: list[Step] = []
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = 0
        self.tasks: dict[str, str] = {}  # client token -> task
        self.scouted: dict[int, str] = {}  # reservation arm: unit -> task, not yet released
        self.stop_flag = threading.Event()
        self.errors: list[str] = []

    # the journal thread calls this
    def allocated(self, record: JobRecord, t: float) -> None:
        self.inbox.put((record, t))

    def scout(self, unit: int) -> None:
        """Reservation arm: the unit's jobs are all submitted; submit its task now."""
        first = self.units[unit][0]
        self.scouted[unit] = self._task(f"scout-{unit}-1", first)
        for record in self.units[unit]:
            record.task = self.scouted[unit]

    def run(self) -> None:
        from flux_quantum.instance.plugin import PluginClient

        plugin = PluginClient(self.handle)
        while not self.stop_flag.is_set():
            now = time.time()
            try:
                while True:
                    record, t = self.inbox.get_nowait()
                    self._start(record, t)
            except queue.Empty:
                pass
            while self.timers and self.timers[0][0] <= now:
                _, _, action = heapq.heappop(self.timers)
                action()
            for step in list(self.waiting):
                ended = self.vendor.ended(step.arn)
                if ended is not None:
                    self.waiting.remove(step)
                    self._result(step, ended)
            if self.planner is not None:
                self._check_holdings(now)
                self._read_forecasts(now)
            for unit, arn in list(self.scouted.items()):
                if self.vendor.at_front(arn):
                    ids = [r.jobid for r in self.units[unit]]
                    try:
                        plugin.release(ids, task=arn, device=self.units[unit][0].device)
                    except Exception:  # not yet in DEPEND: try again next round
                        continue
                    created = self.vendor.created(arn)
                    self.units[unit][0].app_calls += app_polls(time.time() - created, self.factor)
                    del self.scouted[unit]
            self.stop_flag.wait(0.02)

    def _later(self, when: float, action: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, action))

    def _task(self, token: str, record: JobRecord) -> str:
        if token not in self.tasks:
            self.tasks[token] = self.vendor.create(
                DEVICES[record.device], token, self.shots[record.unit]
            )
            record.app_calls += 1
        return self.tasks[token]

    def _start(self, record: JobRecord, t_alloc: float) -> None:
        for _ in range(100):
            try:
                self.handle.rpc(
                    "job-exec.override", {"jobid": record.jobid, "event": "start"}
                ).get()
                break
            except OSError as exc:
                if "not found" not in str(exc).lower():
                    self.errors.append(f"start {record.jobid}: {exc}")
                    return
                time.sleep(0.01)
        if self.arm == "ungated":
            arn = self._task(f"ungated-{record.unit}-1", record)
            record.task = arn
        else:
            arn = record.task
        if not arn:
            self.errors.append(f"job {record.jobid}: no task at alloc")
            return
        self.waiting.append(Step(record, record.step or 1, arn, t_alloc))

    def _result(self, step: Step, ended: float) -> None:
        record = step.record
        now = time.time()
        t_ready = max(ended, step.since)
        if t_ready > step.since:
            record.idle.append((step.since, t_ready, step.iteration))
        record.app_calls += app_polls(t_ready - step.since, self.factor)
        record.t_result = t_ready
        record.results.append((step.iteration, ended, now))
        record.current, record.last_task_job = step.iteration, record.jobid
        slice_wall = record.runtime / record.iterations / self.factor
        record.work.append((now, now + slice_wall))
        if record.step and step.iteration < record.iterations:
            self._later(now + slice_wall, lambda: self._next_step(record))
        elif step.iteration < record.iterations:
            nxt = step.iteration + 1

            def next_task() -> None:
                token = f"{self.arm}-{record.unit}-{record.index}-{nxt}"
                try:
                    arn = self._task(token, record)
                except Exception as exc:
                    self.errors.append(f"job {record.jobid}: create: {exc}")
                    return
                self.waiting.append(Step(record, nxt, arn, time.time()))

            self._later(now + slice_wall, next_task)
        else:
            self._later(now + slice_wall, lambda: self._finish(record))

    def _next_step(self, record: JobRecord) -> None:
        """The end of a chain's step: submit the next step (held until its task is
        done), then finish this one. An adaptive step plans first, and a keep holds
        its nodes instead of finishing (``_check_holdings``)."""
        import flux.job

        k = (record.current or record.step) + 1
        now = time.time()
        plan = None
        if self.planner is not None and self.step_limit is not None:
            work = record.runtime / record.iterations / self.factor
            plan = self.planner.plan(
                record.jobid,
                record.last_task_job or record.jobid,
                record.nodes,
                self.step_limit(record),
                work,
                now,
                self._turnaround(record.index),
            )
        keep = plan is not None and plan.action is StepAction.KEEP
        try:
            spec = self.step_spec(record, k, after=record.jobid if keep else None)
            jobid = int(flux.job.submit(self.handle, spec))
        except Exception as exc:
            self.errors.append(f"job {record.jobid}: submit step {k}: {exc}")
        else:
            nxt = JobRecord(
                record.index,
                "hybrid",
                record.nodes,
                record.runtime,
                jobid=jobid,
                unit=record.unit,
                pattern=record.pattern,
                device=record.device,
                iterations=record.iterations,
                step=k,
            )
            if plan is not None:
                limit = self.step_limit(record) if self.step_limit else None
                nxt.plan = {**plan.to_dict(), "t": now, "limit": limit}
                self.unforecast.append(nxt)
            early = self.ledger.add(nxt)
            if "alloc" in early:  # the journal saw it before the record was filed
                self.inbox.put((nxt, nxt.events["alloc"]))
            if keep:
                assert plan is not None
                hold = Hold(plan, record.jobid, jobid, now)
                self.holdings.append(Holding(record, nxt, hold))
                return
        self._finish(record)

    def _turnaround(self, index: int) -> float:
        """The quickest a released step of loop ``index`` went to running (wall s)."""
        with self.ledger.lock:
            steps = [r for r in self.ledger.by_id.values() if r.index == index and r.step]
        return min(
            (
                r.events["start"] - max(r.events["qpu-release"], r.events.get("depend", 0.0))
                for r in steps
                if "start" in r.events and "qpu-release" in r.events
            ),
            default=0.0,
        )

    def _check_holdings(self, now: float) -> None:
        """The steps keeping their nodes: the successor's result there (its job
        released and its task ended), run the iteration in place; past the bound (or
        the service's forecast says it will be), give up and finish."""
        import flux.job

        for holding in list(self.holdings):
            host, carrier = holding.host, holding.carrier
            ended = None
            if "qpu-release" in carrier.events and carrier.task:
                ended = self.vendor.ended(carrier.task)
            ready = ended is not None and ended <= now
            gone = bool(carrier.exception) or "clean" in carrier.events
            if not ready and not gone and now - holding.checked >= HOLD_CHECK:
                holding.checked = now
                assert self.planner is not None
                holding.vendor_left = self.planner.vendor_left(carrier.jobid)
            outcome = holding.hold.check(now, result_ready=ready, vendor_left=holding.vendor_left)
            if outcome.state is HoldState.HOLDING and not gone:
                continue
            self.holdings.remove(holding)
            since, k = holding.hold.since, carrier.step
            state = outcome.state.value if not gone else HoldState.GAVE_UP.value
            carrier.hold = (since, now, state)
            host.idle.append((since, now, k))
            if outcome.state is not HoldState.IN_PLACE or gone:
                self._finish(host)
                continue
            # The iteration runs here: its own job never will.
            try:
                flux.job.cancel(self.handle, carrier.jobid, "ran in place")
            except OSError as exc:
                self.errors.append(f"cancel {carrier.jobid}: {exc}")
            carrier.ran_in = host.jobid
            assert ended is not None
            host.app_calls += app_polls(now - since, self.factor)
            host.t_result = now
            host.results.append((k, ended, now))
            host.current, host.last_task_job = k, carrier.jobid
            slice_wall = host.runtime / host.iterations / self.factor
            host.work.append((now, now + slice_wall))
            if k < host.iterations:
                self._later(now + slice_wall, lambda h=host: self._next_step(h))
            else:
                self._later(now + slice_wall, lambda h=host: self._finish(h))

    def _read_forecasts(self, now: float) -> None:
        """The service's first expected wait for each new step's task (its memo)."""
        if now < self.forecasts_due or not self.unforecast:
            return
        self.forecasts_due = now + HOLD_CHECK
        assert self.planner is not None
        for record in list(self.unforecast):
            if "qpu-release" in record.events or record.exception:
                self.unforecast.remove(record)
            elif "qpu-task" in record.events:
                wait = self.planner.vendor_left(record.jobid)
                if wait is not None:
                    record.service_wait = (now, wait)
                    self.unforecast.remove(record)

    def _finish(self, record: JobRecord) -> None:
        try:
            self.handle.rpc(
                "job-exec.override", {"jobid": record.jobid, "event": "finish", "status": 0}
            ).get()
        except OSError as exc:  # killed at its time limit meanwhile: its exception says so
            if "not found" not in str(exc).lower():
                self.errors.append(f"finish {record.jobid}: {exc}")

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=10)
        now = time.time()
        for step in self.waiting:  # still waiting at the end: idle so far
            step.record.idle.append((step.since, now, step.iteration))
        self.waiting = []


# --- one arm --------------------------------------------------------------------------


@dataclass
class ArmRun:
    arm: str
    share: float
    nodes: int
    records: list[JobRecord]
    origin: float  # wall time of the day's start
    factor: float
    day: float
    wall_s: float
    service: Usage | None
    service_wall_s: float
    vendor_calls_total: int
    bench_calls: int
    loadavg: list[float]
    errors: list[str]
    weight: float = 0.0  # the adaptive arm's time weight
    seed: int = 1


def chained(job: TraceJob, arm: str) -> bool:
    """Whether the job runs as a chain of steps under the arm."""
    return arm in LOOP_RELEASE_AT and job.hybrid is not None and job.hybrid.pattern == "variational"


def job_limit(
    job: TraceJob, arm: str, allowance: dict[str, float], typical: dict[str, float] | None = None
) -> float:
    """The time limit a user asks for, emulated seconds: the classical limit plus, for
    every task whose result the job may wait for on its nodes under the arm's release
    rule, the device's longest wait of the day (a user who knows the device). A chain's
    step asks for the round value users pick at or above its share of the classical
    limit (its result is promised at its start), plus that wait where the loop releases
    its steps before the result (``predict``: the step may wait for it on its nodes);
    an adaptive step leaves room for one ``typical`` wait of its device (at most
    ``ADAPTIVE_ROOM_MAX``), to keep its nodes for the next result."""
    hybrid = job.hybrid
    if hybrid is None:
        return job.limit
    worst = allowance[hybrid.device]
    if chained(job, arm):
        wanted = job.limit / hybrid.iterations
        if LOOP_RELEASE_AT[arm] != "done":
            wanted += worst
        if arm == ADAPTIVE:
            wanted += min(ADAPTIVE_ROOM_MAX, (typical or {}).get(hybrid.device, 0.0))
        return next((v for v in POPULAR_LIMITS if v >= wanted), wanted)
    later = (hybrid.iterations - 1) * worst
    first = {
        "gated-done": 0.0,
        "chain": 0.0,
        "chain-predict": 0.0,
        ADAPTIVE: 0.0,
        "reservation": 3 * DEVICES[hybrid.device].service,
    }.get(arm, worst)
    return job.limit + first + later


def jobspec(
    job: TraceJob,
    arm: str,
    factor: float,
    program: Path,
    limit: float,
    step: int = 0,
    after: int | None = None,
    weight: float = 0.0,
) -> Any:
    """The job as the arm submits it; ``step``: a chain's step k (1-based); ``after``:
    the job it waits for (an adaptive step's predecessor keeping its nodes for it);
    ``weight``: the loop's time weight, on an adaptive step (``user.qpu_time_weight``)."""
    from flux.job import JobspecV1

    spec = JobspecV1.from_command(
        ["true"], num_tasks=job.nodes, num_nodes=job.nodes, exclusive=True
    )
    spec.duration = max(1.0, limit / factor)
    if job.hybrid is None:
        spec.setattr("system.exec.test", {"run_duration": f"{job.runtime / factor:.3f}s"})
        spec.setattr("system.job.name", "ordinary")
        return spec
    # Started and finished by the application (App): run_duration 0 means no timer.
    spec.setattr("system.exec.test", {"run_duration": "0", "override": 1})
    spec.setattr("system.job.name", f"hybrid-{job.hybrid.pattern}")
    if step:  # named as flux quantum loop names a step: <loop id>.<k>, k from 0
        spec.setattr("system.job.name", f"loop-{job.index}.{step - 1}")
        spec.setattr("user.qpu_loop", f"loop-{job.index}")
        spec.setattr("user.qpu_iteration", step - 1)
        if weight > 0:
            spec.setattr(f"user.{WEIGHT_ATTRIBUTE}", weight)
        if after is not None:
            spec.setattr("system.dependencies", [{"scheme": "afterany", "value": str(after)}])
    if arm != "ungated":
        request: dict[str, Any] = {
            "device": f"local:{job.hybrid.device}",
            "program": str(program),
            "shots": job.hybrid.shots,
            "release_at": LOOP_RELEASE_AT[arm] if step else RELEASE_AT.get(arm, 1),
        }
        if job.hybrid.group > 1:
            request["group"] = f"g{job.index - job.member}"
        spec.setattr("system.qpu", request)
    return spec


def run_arm(
    arm: str,
    share: float,
    trace: Trace,
    args: argparse.Namespace,
    work: Path,
    say: Callable[[str], None],
) -> ArmRun:
    import flux
    import flux.job

    from flux_quantum.cli.demo import Instance
    from flux_quantum.emulator import Emulator, ScaledClock

    factor, day = args.factor, trace.day
    work.mkdir(parents=True)
    (work / "conf").mkdir()
    (work / "conf" / "site.toml").write_text(instance_toml(trace.nodes))
    program = work / "program.qasm"
    program.write_text(PROGRAM)
    catalog = work / "backends.yaml"
    catalog.write_text("devices:\n" + "".join(d.catalog(factor) for d in FLEET))
    clock = ScaledClock(factor)  # frozen at 0 until the day starts
    emulator = Emulator(scenario(FLEET), clock=clock, seed=args.seed).start()
    t_setup = time.monotonic()
    inst = Instance(work, 1, [])
    service = None
    journal = app = None
    loads: list[float] = []
    try:
        uri = inst.env["FLUX_URI"]
        handle = flux.Flux(uri)
        modules = inst.run("flux", "module", "list").stdout
        policy = inst.run("flux", "config", "get", "sched-fluxion-qmanager.queue-policy").stdout
        nodes = sum(
            int(n) for n in inst.run("flux", "resource", "list", "-no", "{nnodes}").stdout.split()
        )
        if "sched-fluxion-qmanager" not in modules or policy.strip().strip('"') != "easy":
            raise RuntimeError(f"not Fluxion with EASY: {modules} {policy}")
        if nodes != trace.nodes:
            raise RuntimeError(f"the instance has {nodes} nodes, not {trace.nodes}")
        if arm in SERVICE_ARMS:
            service = Service(inst, catalog, emulator.url, factor, work / "service.log")
        ledger = Ledger()
        vendor = Vendor(emulator, clock)
        units: dict[int, list[JobRecord]] = {}
        shots: dict[int, int] = {}
        by_index = {j.index: j for j in trace.jobs}
        allowance = args.allowance

        typical = args.typical
        weight = args.weight if arm == ADAPTIVE else 0.0

        def step_spec(record: JobRecord, step: int, after: int | None = None) -> Any:
            j = by_index[record.index]
            limit = job_limit(j, arm, allowance, typical)
            return jobspec(j, arm, factor, program, limit, step, after, weight)

        def step_limit(record: JobRecord) -> float:
            """A step's time limit, wall seconds (the next step's is the same)."""
            j = by_index[record.index]
            return max(1.0, job_limit(j, arm, allowance, typical) / factor)

        app = App(arm, uri, vendor, factor, units, shots, ledger, step_spec, weight, step_limit)
        journal = Journal(uri, ledger, app.allocated)
        journal.start()
        app.start()
        # The backlog queues while the scheduler is stopped; the day starts with it.
        inst.run("flux", "queue", "stop", "--quiet", check=False)
        pending = sorted(trace.jobs, key=lambda j: (j.submit, j.index))
        backlog = [j for j in pending if j.backlog]
        day_jobs = [j for j in pending if not j.backlog]
        futures = [
            (j, flux.job.submit_async(handle, jobspec(j, arm, factor, program, j.limit)))
            for j in backlog
        ]
        for j, f in futures:
            record = JobRecord(j.index, "ordinary", j.nodes, j.runtime, jobid=int(f.get_id()))
            ledger.add(record)
        origin = clock.start()
        inst.run("flux", "queue", "start", "--quiet")
        service_cpu0 = service.usage() if service else None
        say(
            f"    day started: {len(backlog)} backlog jobs queued, setup {time.monotonic() - t_setup:.0f}s"
        )
        next_load = origin
        for j in day_jobs:
            due = origin + j.submit / factor
            while time.time() < due:
                time.sleep(min(0.05, max(0.0, due - time.time())))
            if time.time() >= next_load:
                loads.append(os.getloadavg()[0])
                next_load += 60.0
            limit = job_limit(j, arm, allowance, typical)
            step = 1 if chained(j, arm) else 0
            spec = jobspec(j, arm, factor, program, limit, step, weight=weight)
            jobid = int(flux.job.submit(handle, spec))
            record = JobRecord(j.index, "ordinary", j.nodes, j.runtime, jobid=jobid, step=step)
            if j.hybrid is not None:
                record.kind, record.pattern = "hybrid", j.hybrid.pattern
                record.device, record.iterations = j.hybrid.device, j.hybrid.iterations
                record.unit = j.index - j.member
                units.setdefault(record.unit, []).append(record)
                shots[record.unit] = j.hybrid.shots
            ledger.add(record)
            if arm == "reservation" and j.hybrid is not None and j.member == j.hybrid.group - 1:
                app.scout(record.unit)
        end = origin + (day + args.tail) / factor
        while time.time() < end:
            if time.time() >= next_load:
                loads.append(os.getloadavg()[0])
                next_load += 60.0
            time.sleep(0.2)
        service_cpu1 = service.usage() if service else None
        usage = None
        if service_cpu0 and service_cpu1:
            usage = Usage(
                service_cpu1.cpu - service_cpu0.cpu, service_cpu1.rss_kb, service_cpu1.hwm_kb
            )
        service_wall = time.time() - origin
        app.stop()
        journal.stop()
        records = sorted(ledger.by_id.values(), key=lambda r: (r.index, r.step))
        for r in records:
            if r.task:
                try:
                    line = emulator.task_timeline(r.task)
                except KeyError:
                    continue
                r.timeline = (line.created, line.front, line.started, line.ended)
        run = ArmRun(
            arm,
            share,
            trace.nodes,
            records,
            origin,
            factor,
            day,
            time.monotonic() - t_setup,
            usage,
            service_wall,
            emulator.call_count(),
            vendor.calls,
            loads,
            app.errors,
            weight,
            args.seed,
        )
    finally:
        if app is not None and app.is_alive():
            app.stop()
        if journal is not None and journal.is_alive():
            journal.stop()
        if service is not None:
            service.stop()
        inst.run("flux", "cancel", "--all", "--quiet", check=False)
        inst.stop()
        emulator.stop()
    return run


# --- what the arm measured --------------------------------------------------------------


def overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


@dataclass
class Summary:
    arm: str
    share: float
    jobs: int
    hybrid_jobs: int
    idle_node_h: float
    idle_first_node_h: float
    idle_later_node_h: float  # of the later tasks of variational jobs (idle - first)
    idle_node_h_all: float
    util_useful: float
    util_alloc: float
    ord_jobs: int
    ord_unstarted: int
    ord_wait_mean_s: float
    ord_wait_p95_s: float
    ord_bsld_mean: float
    ord_bsld_p95: float
    hyb_results: int
    hyb_unresolved: int
    hyb_failed: int
    hyb_lead: int
    hyb_ttr_median_s: float
    hyb_ttr_mean_s: float
    hyb_ttr_p95_s: float
    # submit (of the first step) -> the end of the last classical work (the last step's)
    hyb_done_median_s: float
    hyb_done_p95_s: float
    var_jobs: int
    var_results: int
    var_done_median_s: float
    var_done_p95_s: float
    step_jobs: int  # chain: the steps after the first, submitted by the steps
    # wall seconds, task k done -> iteration k's classical work running: k >= 2 and k = 1
    iter_overhead_n: int
    iter_overhead_p50_s: float
    iter_overhead_p99_s: float
    first_overhead_p50_s: float
    first_overhead_p99_s: float
    # released by prediction (release_at=predict): jobs and steps so released, the
    # start-up lead they were released by (wall seconds, median), their idle node-hours
    # and of it the part within the lead (release -> release + lead); released jobs'
    # release -> run (wall seconds, every job or step the service released)
    pred_released: int
    pred_lead_p50_s: float
    idle_pred_node_h: float
    idle_pred_lead_node_h: float
    release_run_p50_s: float
    release_run_p90_s: float
    vendor_calls_per_h: float
    service_calls_per_h: float
    app_calls_per_h: float
    service_cpu_s_per_h: float
    service_cpu_pct_wall: float
    service_rss_mb: float
    service_hwm_mb: float
    loadavg: float
    wall_s: float
    # the adaptive arm's plans (the later steps'): made, kept (and of them run in place),
    # released early, given back, agreeing with the hindsight best
    dec_n: int = 0
    dec_keep: int = 0
    dec_in_place: int = 0
    dec_early: int = 0
    dec_give_back: int = 0
    dec_agree: int = 0
    seed: int = 1


def predicted_lead(why: str) -> float | None:
    """The start-up lead (wall seconds) a job was released by when the service released
    it by prediction, from its release reason; None for any other release."""
    match = PREDICTED.match(why)
    return float(match.group(1)) if match else None


def summarize(run: ArmRun) -> tuple[Summary, dict[str, list[float]]]:
    f, origin, day = run.factor, run.origin, run.day

    def em(t: float) -> float:  # wall time -> seconds of the day
        return (t - origin) * f

    end = day + 0.0
    useful_bins = [0.0] * int(math.ceil(day / BIN))
    idle_bins = [0.0] * len(useful_bins)

    def spread(bins: list[float], a: float, b: float, nodes: int) -> None:
        for k in range(len(bins)):
            bins[k] += nodes * overlap(a, b, k * BIN, (k + 1) * BIN)

    useful = idle = idle_first = idle_all = alloc = 0.0
    waits, bslds, ttrs = [], [], []
    done: list[float] = []
    var_done: list[float] = []
    later_overheads: list[float] = []
    first_overheads: list[float] = []
    release_runs: list[float] = []  # wall seconds
    pred_leads: list[float] = []  # wall seconds
    idle_pred = idle_pred_lead = 0.0
    unstarted = unresolved = failed = lead = var_jobs = 0
    loops: dict[int, list[JobRecord]] = {}  # hybrid jobs by trace index: a chain's steps
    for r in run.records:
        ev = {k: em(v) for k, v in r.events.items()}
        t_alloc = ev.get("alloc")
        t_free = ev.get("free", ev.get("finish", ev.get("clean", end)))
        if t_alloc is not None:
            alloc += r.nodes * overlap(t_alloc, t_free, 0.0, end)
        if r.kind == "ordinary":
            if "start" in ev:
                stop = ev.get("finish", end)
                useful += r.nodes * overlap(ev["start"], stop, 0.0, end)
                spread(useful_bins, ev["start"], stop, r.nodes)
            submit = max(0.0, ev.get("submit", 0.0))
            if 0.0 <= ev.get("submit", -1.0) < day:  # the day's arrivals, not the backlog
                if t_alloc is None:
                    unstarted += 1
                    wait = end - submit
                else:
                    wait = t_alloc - submit
                waits.append(wait)
                bslds.append(max(1.0, (wait + r.runtime) / max(r.runtime, BSLD_TAU)))
            continue
        for a, b, iteration in r.idle:
            idle += r.nodes * overlap(em(a), em(b), 0.0, end)
            if iteration == 1:
                idle_first += r.nodes * overlap(em(a), em(b), 0.0, end)
            idle_all += r.nodes * (em(b) - em(a))
            spread(idle_bins, em(a), em(b), r.nodes)
        for a, b in r.work:
            stop = min(em(b), ev.get("finish", em(b)))
            useful += r.nodes * overlap(em(a), stop, 0.0, end)
            spread(useful_bins, em(a), stop, r.nodes)
        if r.why.startswith("classical lead"):
            lead += 1
        t_release = r.events.get("qpu-release")
        if t_release is not None and "start" in r.events:
            release_runs.append(r.events["start"] - t_release)
        predicted = predicted_lead(r.why)
        if predicted is not None:
            pred_leads.append(predicted)
            for a, b, _ in r.idle:
                idle_pred += r.nodes * overlap(em(a), em(b), 0.0, end)
                if t_release is not None:
                    lead_end = em(t_release) + predicted * f
                    idle_pred_lead += r.nodes * overlap(em(a), min(em(b), lead_end), 0.0, end)
        loops.setdefault(r.index, []).append(r)
    for steps in loops.values():
        steps.sort(key=lambda r: r.step)
        first = steps[0]
        # An adaptive step whose iteration ran in place (its job cancelled unrun) is not
        # where the loop ended, nor a failure.
        ran = [r for r in steps if not r.ran_in]
        last = max(ran, key=lambda r: max((i for i, _, _ in r.results), default=r.step))
        variational = first.pattern == "variational"
        var_jobs += variational
        if variational:
            for r in steps:
                for iteration, ended, working in r.results:
                    (first_overheads if iteration == 1 else later_overheads).append(working - ended)
        submit = em(first.events["submit"])
        if any(r.exception for r in ran):
            failed += 1
        elif last.t_result is not None and sum(len(r.work) for r in steps) >= first.iterations:
            ttrs.append(em(last.t_result) - submit)
            if "finish" in last.events:
                done.append(em(last.events["finish"]) - submit)
                if variational:
                    var_done.append(done[-1])
        else:
            unresolved += 1
    hours = day / 3600.0
    svc = run.service
    decided = decisions(run.records, origin, f, run.weight)
    app_calls = sum(r.app_calls for r in run.records)
    service_calls = run.vendor_calls_total - run.bench_calls if svc is not None else 0
    summary = Summary(
        arm=run.arm,
        share=run.share,
        jobs=len({r.index for r in run.records}),
        hybrid_jobs=len(loops),
        idle_node_h=idle / 3600.0,
        idle_first_node_h=idle_first / 3600.0,
        idle_later_node_h=(idle - idle_first) / 3600.0,
        idle_node_h_all=idle_all / 3600.0,
        util_useful=useful / (run.nodes * day),
        util_alloc=alloc / (run.nodes * day),
        ord_jobs=len(waits),
        ord_unstarted=unstarted,
        ord_wait_mean_s=statistics.fmean(waits) if waits else math.nan,
        ord_wait_p95_s=percentile(waits, 0.95),
        ord_bsld_mean=statistics.fmean(bslds) if bslds else math.nan,
        ord_bsld_p95=percentile(bslds, 0.95),
        hyb_results=len(ttrs),
        hyb_unresolved=unresolved,
        hyb_failed=failed,
        hyb_lead=lead,
        hyb_ttr_median_s=percentile(ttrs, 0.5),
        hyb_ttr_mean_s=statistics.fmean(ttrs) if ttrs else math.nan,
        hyb_ttr_p95_s=percentile(ttrs, 0.95),
        hyb_done_median_s=percentile(done, 0.5),
        hyb_done_p95_s=percentile(done, 0.95),
        var_jobs=var_jobs,
        var_results=len(var_done),
        var_done_median_s=percentile(var_done, 0.5),
        var_done_p95_s=percentile(var_done, 0.95),
        step_jobs=sum(1 for r in run.records if r.step > 1),
        iter_overhead_n=len(later_overheads),
        iter_overhead_p50_s=percentile(later_overheads, 0.5),
        iter_overhead_p99_s=percentile(later_overheads, 0.99),
        first_overhead_p50_s=percentile(first_overheads, 0.5),
        first_overhead_p99_s=percentile(first_overheads, 0.99),
        pred_released=len(pred_leads),
        pred_lead_p50_s=percentile(pred_leads, 0.5),
        idle_pred_node_h=idle_pred / 3600.0,
        idle_pred_lead_node_h=idle_pred_lead / 3600.0,
        release_run_p50_s=percentile(release_runs, 0.5),
        release_run_p90_s=percentile(release_runs, 0.9),
        vendor_calls_per_h=(service_calls + app_calls) / hours,
        service_calls_per_h=service_calls / hours,
        app_calls_per_h=app_calls / hours,
        service_cpu_s_per_h=svc.cpu / (run.service_wall_s * f / 3600.0) if svc else math.nan,
        service_cpu_pct_wall=100.0 * svc.cpu / run.service_wall_s if svc else math.nan,
        service_rss_mb=svc.rss_kb / 1024.0 if svc else math.nan,
        service_hwm_mb=svc.hwm_kb / 1024.0 if svc else math.nan,
        loadavg=statistics.fmean(run.loadavg) if run.loadavg else math.nan,
        wall_s=run.wall_s,
        dec_n=len(decided),
        dec_keep=sum(1 for d in decided if d.action == "keep"),
        dec_in_place=sum(1 for d in decided if d.outcome == "in place"),
        dec_early=sum(1 for d in decided if d.action == "early"),
        dec_give_back=sum(1 for d in decided if d.action == "give-back"),
        dec_agree=sum(1 for d in decided if d.agrees),
        seed=run.seed,
    )
    scale = run.nodes * BIN
    return summary, {
        "useful": [b / scale for b in useful_bins],
        "idle": [b / scale for b in idle_bins],
    }


# --- the report -------------------------------------------------------------------------


def git_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "status",
            "--porcelain",
            "--",
            "bench/site.py",
            "bench/workload.py",
            "bench/benchlib.py",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (out or "unknown") + (
        " (bench/site.py, workload.py or benchlib.py modified)" if dirty else ""
    )


def hours(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds / 3600:.2f}h" if seconds >= 3600 else f"{seconds / 60:.1f}m"


def report(
    summaries: list[Summary],
    traces: dict[float, Trace],
    profile: dict[str, list[float]],
    args: argparse.Namespace,
    wall: float,
    loads: tuple[float, float, float],
    decided: dict[tuple[float, str], list[Decision]] | None = None,
) -> str:
    first = next(iter(traces.values()))
    lines = [
        f"flux-quantum site benchmark: {first.nodes} emulated nodes x {CORES_PER_NODE} cores, "
        f"Fluxion EASY, {first.day / 3600:g} h day compressed x{args.factor:g} "
        f"({first.day / args.factor / 60:.1f} min per arm)",
        f"command: python bench/site.py {' '.join(sys.argv[1:])}",
        f"commit: {args.commit}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores; "
        f"Python {platform.python_version()}; flux-core {args.flux_version}",
        f"took {wall / 60:.1f} min; load average (1 min) during the arms: mean "
        f"{statistics.fmean(s.loadavg for s in summaries):.2f}; at the end {loads[0]:.2f} "
        f"{loads[1]:.2f} {loads[2]:.2f} (1, 5, 15 min)",
        "",
        f"workload: {first.model.describe()}",
        f"  machine of {first.model.nodes} nodes per stream, {round(first.nodes / first.model.nodes)}"
        f" streams merged, arrival rate x{first.rate:.3f} for an offered load of "
        f"{first.offered_load:.3f} over the day (target {args.load:g}); a backlog of "
        f"{args.backlog:g} h of arrivals queued at the start; seed {args.seed}",
    ]
    for share, trace in traces.items():
        day_jobs = [j for j in trace.jobs if not j.backlog]
        hybrid = trace.hybrid_jobs
        kinds = {
            p: sum(1 for j in hybrid if j.hybrid and j.hybrid.pattern == p)
            for p in ("single", "fan-out", "variational")
        }
        lines.append(
            f"  share {share:.0%}: {len(trace.jobs)} jobs ({len(trace.jobs) - len(day_jobs)} "
            f"backlog), {len(hybrid)} hybrid ({', '.join(f'{k} {v}' for k, v in kinds.items())} jobs)"
        )
    lines.append("")
    lines.append(
        "vendor fleet (emulator; background load alone, a task created at any 10 min of the day "
        "would wait): device class service load | min median max"
    )
    for d in FLEET:
        waits = profile[d.name]
        lines.append(
            f"  {d.name:<7} {d.klass:<9} {d.service:5.0f}s {d.load:4.2f} | {hours(min(waits)):>6} "
            f"{hours(statistics.median(waits)):>6} {hours(max(waits)):>6}"
        )
    for share in traces:
        rows = [s for s in summaries if s.share == share]
        if not rows:
            continue
        lines += ["", f"hybrid share {share:.0%}"]
        lines.append(
            f"{'arm':<14} {'idle':>8} {'1st':>6} {'useful':>7} {'alloc':>6} {'wait':>7} {'p95':>7} "
            f"{'bsld':>6} {'p95':>6} {'ttr med':>8} {'mean':>7} {'p95':>7} {'res/fail/open':>13} {'lead':>4} "
            f"{'calls/h':>8} {'svc':>6} {'app':>6} {'cpu s/h':>7} {'cpu%':>5} {'rss MB':>6} {'load':>5}"
        )
        for s in rows:
            lines.append(
                f"{s.arm:<14} {s.idle_node_h:>8.1f} {s.idle_first_node_h:>6.1f} {s.util_useful:>7.1%} {s.util_alloc:>6.1%} "
                f"{hours(s.ord_wait_mean_s):>7} {hours(s.ord_wait_p95_s):>7} {s.ord_bsld_mean:>6.1f} "
                f"{s.ord_bsld_p95:>6.1f} {hours(s.hyb_ttr_median_s):>8} {hours(s.hyb_ttr_mean_s):>7} "
                f"{hours(s.hyb_ttr_p95_s):>7} "
                f"{f'{s.hyb_results}/{s.hyb_failed}/{s.hyb_unresolved}':>13} {s.hyb_lead:>4} "
                f"{s.vendor_calls_per_h:>8.0f} {s.service_calls_per_h:>6.0f} {s.app_calls_per_h:>6.0f} "
                f"{s.service_cpu_s_per_h:>7.2f} {s.service_cpu_pct_wall:>5.1f} "
                f"{s.service_hwm_mb:>6.0f} {s.loadavg:>5.2f}"
            )
        lines += ["", loop_table(rows)]
        table = predict_table(rows, args.factor)
        if table:
            lines += ["", *table]
        for arm in (s.arm for s in rows if s.arm == ADAPTIVE):
            mine = (decided or {}).get((share, arm), [])
            if mine:
                lines += ["", *decision_lines(arm, mine), *forecast_lines(mine)]
    lines += [
        "",
        "idle: node-hours hybrid jobs held nodes waiting for a quantum result, within the day;",
        "  1st: of which waiting for the first task (the one the release rule is about);",
        "  later: the rest, the later tasks of variational jobs (created from inside the",
        "  running job, or by the service for a chain's held step)",
        "useful: node-time running ordinary jobs or hybrid jobs' classical work / the cluster's;",
        "  alloc: node-time allocated (useful + idle) / the cluster's",
        "wait, p95: ordinary jobs arriving in the day, submit -> alloc (still queued at the end:",
        f"  counted to the end); bsld: bounded slowdown max(1, (wait + run) / max(run, {BSLD_TAU:g} s))",
        "ttr: hybrid jobs, submit -> last quantum result readable; res/fail/open: jobs with every",
        "  result / ended by an exception / still waiting when the run stopped; lead: hybrid",
        "  jobs the service released before their release point by its classical lead (the",
        "  job's cores were expected to free up no sooner, running jobs trusted for the share",
        "  of their time limits that 9 in 10 finished jobs used at least)",
        "calls/h: vendor calls per hour of the day = svc (the handler service's, from the",
        f"  emulator's call log) + app (the jobs' own: creates, made; polls every {APP_POLL:g} vendor",
        "  seconds while waiting and the result fetch, modelled; the reservation scout's polls too)",
        "cpu s/h: the service's CPU seconds per emulated hour; cpu%: of one core, wall clock (the",
        "  day compressed: a real day spreads the same work over x the time); rss: VmHWM",
        "variational jobs: done = submit (of the first step) -> the end of the last classical",
        "  work (the job's or the last step's end), median / p95, and for all hybrid jobs;",
        "  overhead: task k done -> iteration k's classical work running, in WALL seconds",
        "  (k >= 2: the later iterations, where the arms differ; 1st: k = 1, a released job or",
        "  step waiting for nodes), p50 / p99; steps: jobs submitted by a chain's steps",
        f"targets (issue 19, set at 20 % hybrid): a chain's later idle <= {LATER_IDLE_MAX:.0%} of",
        f"  gated-done's, its variational median done <= {1 + TTR_SLOWER_MAX:.2f} x gated-done's, its",
        f"  overhead p50 <= {OVERHEAD_P50_MAX:g} s wall (chain: steps released at done; chain-predict:",
        "  every step released by prediction, as flux quantum loop submit --release-at predict)",
        "adaptive: every step plans what follows it as flux quantum loop's steps do, with the",
        f"  loop's time weight {args.weight:g} (a second of the loop's time is worth that many",
        "  seconds of idle nodes): keep its nodes while the next result is due within",
        "  w/(1+w) of the forecast wait for nodes, and run that iteration in place; else",
        "  give them back, the service releasing the next step once its result is no",
        "  farther than the forecast wait for its nodes (early), or at its result when the",
        "  nodes are free (give-back); a step's limit leaves room for one median wait of its",
        f"  device (at most {ADAPTIVE_ROOM_MAX / 3600:g} h). decisions: each plan, how kept steps",
        "  ended (in place, gave up), agreement with the hindsight best (keeping costs the",
        "  vendor wait in idle, releasing at the best time w x (node wait - vendor wait) in",
        "  delay; a kept step's node wait is its forecast: it never went to the queue), the",
        "  idle of those iterations and how long their results waited for nodes; forecast",
        "  errors: actual - forecast, for the wait for nodes (the plan's, against release ->",
        "  allocation) and per device for the vendor wait (the loop's last task's, and the",
        "  service's expected wait once the task existed, against the task's end)",
        f"targets (adaptive against gated-done): variational time to result median <= "
        f"{1 + ADAPTIVE_TTR_MEDIAN_MAX:.2f} x,",
        f"  p95 <= {1 + ADAPTIVE_TTR_P95_MAX:.2f} x; later-task idle <= "
        f"{ADAPTIVE_LATER_IDLE_MAX:.0%} of gated-done's; the site's idle <= "
        f"{ADAPTIVE_IDLE_MAX:.0%} of ungated's;",
        "  ordinary jobs' mean wait <= the plain chain's",
        "released by prediction (release_at=predict): n jobs and steps the service released",
        "  because the expected wait for the result was below the measured start-up of released",
        "  jobs, the lead; lead p50 in wall seconds and in the day's time (x the factor);",
        "  idle: their node-hours waiting for the result, in lead: of it within release ->",
        "  release + lead, past: after it (the task ended later than expected); release -> run:",
        "  every job or step the service released, qpu-release -> start, wall seconds (the lead",
        "  is the p90 of recent ones)",
        "Times are emulated (the day's) seconds, wall seconds x the factor, but the overhead.",
    ]
    return "\n".join(lines)


def secs(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:.2f}s"


def targets(rows: list[Summary]) -> list[str]:
    """Issue 19's targets for each chain arm against the in-job loop (gated-done)."""
    by_arm = {s.arm: s for s in rows}
    chains = [by_arm[arm] for arm in LOOP_RELEASE_AT if arm in by_arm]
    injob = by_arm.get("gated-done")
    if not chains:
        return []
    if injob is None:
        return ["targets: no gated-done arm in this run to hold the chain against"]
    idle_max = LATER_IDLE_MAX * injob.idle_later_node_h
    ttr_max = (1 + TTR_SLOWER_MAX) * injob.var_done_median_s
    lines = []
    for chain in chains:
        lines += [
            f"targets, {chain.arm} against gated-done:",
            f"  later-task idle {chain.idle_later_node_h:.1f} node-h <= {idle_max:.1f} "
            f"({LATER_IDLE_MAX:.0%} of {injob.idle_later_node_h:.1f}): "
            f"{verdict(chain.idle_later_node_h <= idle_max)}",
            f"  variational time to result median {hours(chain.var_done_median_s)} <= "
            f"{hours(ttr_max)} ({1 + TTR_SLOWER_MAX:.2f} x {hours(injob.var_done_median_s)}): "
            f"{verdict(chain.var_done_median_s <= ttr_max)}",
            f"  per-iteration overhead p50 {secs(chain.iter_overhead_p50_s)} <= "
            f"{OVERHEAD_P50_MAX:g}s wall: {verdict(chain.iter_overhead_p50_s <= OVERHEAD_P50_MAX)}",
        ]
    return lines


TARGET_METRICS = (
    "var_done_median_s",
    "var_done_p95_s",
    "idle_later_node_h",
    "idle_node_h",
    "ord_wait_mean_s",
)


def metrics_of(rows: list[Summary]) -> dict[str, dict[str, float]]:
    """What the adaptive targets compare, by arm."""
    return {s.arm: {m: getattr(s, m) for m in TARGET_METRICS} for s in rows}


def adaptive_targets(arms: dict[str, dict[str, float]], label: str = "") -> list[str]:
    """The adaptive arm against the in-job loop (gated-done), ungated and the plain
    chain of the same run (or the medians of the seeds: ``label`` says so)."""
    a, injob = arms.get(ADAPTIVE), arms.get("gated-done")
    if a is None:
        return []
    if injob is None:
        return ["targets: no gated-done arm in this run to hold the adaptive arm against"]
    lines = [f"new targets, adaptive against gated-done{label}:"]
    for name, metric, most in (
        ("median", "var_done_median_s", ADAPTIVE_TTR_MEDIAN_MAX),
        ("p95", "var_done_p95_s", ADAPTIVE_TTR_P95_MAX),
    ):
        mine, limit = a[metric], (1 + most) * injob[metric]
        lines.append(
            f"  variational time to result {name} {hours(mine)} <= {hours(limit)} "
            f"({1 + most:.2f} x {hours(injob[metric])}): {verdict(mine <= limit)}"
        )
    ungated = arms.get("ungated")
    for what, metric, base, name, share in (
        ("later-task idle", "idle_later_node_h", injob, "", ADAPTIVE_LATER_IDLE_MAX),
        ("the site's idle", "idle_node_h", ungated, "ungated's ", ADAPTIVE_IDLE_MAX),
    ):
        if base is None:
            continue
        limit = share * base[metric]
        lines.append(
            f"  {what} {a[metric]:.1f} node-h <= {limit:.1f} ({share:.0%} of {name}"
            f"{base[metric]:.1f}): {verdict(a[metric] <= limit)}"
        )
    chain = arms.get("chain")
    if chain is not None:
        lines.append(
            f"  ordinary jobs' mean wait {hours(a['ord_wait_mean_s'])} <= the chain's "
            f"{hours(chain['ord_wait_mean_s'])}: "
            f"{verdict(a['ord_wait_mean_s'] <= chain['ord_wait_mean_s'])}"
        )
    return lines


SEED_METRICS = (
    ("idle", "idle_node_h", 1.0),
    ("later", "idle_later_node_h", 1.0),
    ("useful", "util_useful", 100.0),
    ("ord wait", "ord_wait_mean_s", 1 / 3600),
    ("p95", "ord_wait_p95_s", 1 / 3600),
    ("var med", "var_done_median_s", 1 / 3600),
    ("var p95", "var_done_p95_s", 1 / 3600),
)


def seeds_lines(summaries: list[Summary]) -> list[str]:
    """Across seeds: each arm's median [min-max] per share, and the adaptive targets
    on the medians."""
    seeds = sorted({s.seed for s in summaries})
    lines = [
        f"across the seeds {', '.join(map(str, seeds))}: median [min-max] of the runs; idle "
        "in node-hours, useful in %, waits and variational times to result in hours"
    ]
    for share in sorted({s.share for s in summaries}):
        lines += ["", f"hybrid share {share:.0%}"]
        lines.append(f"{'arm':<14}" + "".join(f" {name:>20}" for name, _, _ in SEED_METRICS))
        medians: dict[str, dict[str, float]] = {}
        for arm in ARMS:
            rows = [s for s in summaries if s.share == share and s.arm == arm]
            if not rows:
                continue
            medians[arm] = {
                m: statistics.median(getattr(s, m) for s in rows) for m in TARGET_METRICS
            }
            cells = []
            for _, metric, scale in SEED_METRICS:
                values = [getattr(s, metric) * scale for s in rows]
                cells.append(
                    f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
                )
            lines.append(f"{arm:<14}" + "".join(f" {c:>20}" for c in cells))
        lines += adaptive_targets(medians, f", medians of {len(seeds)} seeds")
    return lines


def predict_table(rows: list[Summary], factor: float) -> list[str]:
    """What releasing by prediction cost, for the arms whose jobs the service held (the
    lead also in the day's time: x ``factor``); no lines where no job was released so."""
    held = [s for s in rows if not math.isnan(s.release_run_p50_s)]
    if not any(s.pred_released for s in held):
        return []
    lines = [
        f"{'':<14} {'released by prediction':<44} {'release -> run, wall':<20}",
        f"{'arm':<14} {'n':>4} {'lead p50':>8} {'= of day':>8} {'idle':>7} {'in lead':>7} "
        f"{'past':>6} {'p50':>9} {'p90':>9}",
    ]
    for s in held:
        lead = s.pred_lead_p50_s
        lines.append(
            f"{s.arm:<14} {s.pred_released:>4} {secs(lead):>8} "
            f"{hours(lead * factor):>8} "
            f"{s.idle_pred_node_h:>7.1f} {s.idle_pred_lead_node_h:>7.1f} "
            f"{s.idle_pred_node_h - s.idle_pred_lead_node_h:>6.1f} "
            f"{secs(s.release_run_p50_s):>9} {secs(s.release_run_p90_s):>9}"
        )
    return lines


def loop_table(rows: list[Summary]) -> str:
    """Variational jobs per arm: the later tasks' idle, time to result, overhead."""
    lines = [
        f"{'':<14} {'variational jobs':<29} {'all hybrid':<16} "
        f"{'overhead, wall (n)':<28} {'ordinary':<16}",
        f"{'arm':<14} {'later':>7} {'done med':>9} {'p95':>7} {'res':>3} "
        f"{'done med':>9} {'p95':>6} {'p50':>6} {'p99':>6} {'n':>4} {'1st p50':>8} "
        f"{'wait':>7} {'p95':>7} {'steps':>5}",
    ]
    for s in rows:
        lines.append(
            f"{s.arm:<14} {s.idle_later_node_h:>7.1f} {hours(s.var_done_median_s):>9} "
            f"{hours(s.var_done_p95_s):>7} {s.var_results:>3} {hours(s.hyb_done_median_s):>9} "
            f"{hours(s.hyb_done_p95_s):>6} {secs(s.iter_overhead_p50_s):>6} "
            f"{secs(s.iter_overhead_p99_s):>6} {s.iter_overhead_n:>4} "
            f"{secs(s.first_overhead_p50_s):>8} {hours(s.ord_wait_mean_s):>7} "
            f"{hours(s.ord_wait_p95_s):>7} {s.step_jobs:>5}"
        )
    return "\n".join(lines + targets(rows) + adaptive_targets(metrics_of(rows)))


def plot(
    series: dict[tuple[float, str], dict[str, list[float]]],
    summaries: list[Summary],
    profile: dict[str, list[float]],
    path: Path,
) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install '.[bench]'): plot skipped"
    shares = sorted({share for share, _ in series})
    fig, axes = plt.subplots(2, max(2, len(shares)), figsize=(6.0 * max(2, len(shares)), 8.0))
    colors = dict(
        zip(
            ARMS,
            (
                "tab:red",
                "tab:orange",
                "tab:green",
                "tab:blue",
                "tab:purple",
                "tab:brown",
                "tab:pink",
                "tab:olive",
            ),
            strict=True,
        )
    )
    for col, share in enumerate(shares):
        ax = axes[0][col]
        for arm in ARMS:
            data = series.get((share, arm))
            if not data:
                continue
            xs = [(k + 0.5) * BIN / 3600 for k in range(len(data["useful"]))]
            ax.plot(xs, [100 * u for u in data["useful"]], color=colors[arm], label=arm, lw=1.2)
            ax.plot(xs, [100 * i for i in data["idle"]], color=colors[arm], lw=0.8, ls=":")
        ax.set_title(
            f"hybrid share {share:.0%}: useful utilisation (solid), idle waiting (dotted)",
            fontsize=9,
        )
        ax.set_xlabel("hour of the day")
        ax.set_ylabel("% of the cluster's nodes")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7, loc="lower right")
    ax = axes[1][0]
    width = 0.8 / max(1, len(shares))
    arms = [a for a in ARMS if any(s.arm == a for s in summaries)]
    for k, share in enumerate(shares):
        rows = {s.arm: s for s in summaries if s.share == share}
        values = [rows[a].idle_node_h if a in rows else 0.0 for a in arms]
        bars = ax.bar(
            [i + k * width for i in range(len(arms))], values, width, label=f"{share:.0%} hybrid"
        )
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([i + width * (len(shares) - 1) / 2 for i in range(len(arms))], arms, fontsize=8)
    ax.set_ylabel("node-hours idle waiting for quantum results")
    ax.set_title("idle node-hours by arm (one day)", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1][1]
    for name, waits in profile.items():
        ax.plot([k * BIN / 3600 for k in range(len(waits))], [w / 60 for w in waits], label=name)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("hour of the day")
    ax.set_ylabel("queue wait a new task meets (min)")
    ax.set_title("vendor queues over the day (background load)", fontsize=9)
    ax.legend(fontsize=7)
    for extra in [*axes[0][len(shares) :], *axes[1][2:]]:
        extra.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot: {path}"


def jobs_csv_name(stem: str) -> str:
    """``site_jobs.csv``, ``site_jobs_quick.csv``: a smoke run's name ends ``_quick.*``."""
    base, quick, _ = stem.partition("_quick")
    return f"{base}_jobs{quick}.csv"


def write_csvs(
    summaries: list[Summary], runs: list[ArmRun], out: Path, stem: str, args: argparse.Namespace
) -> None:
    with open(out / f"{stem}.csv", "w", newline="") as f:
        names = list(asdict(summaries[0])) + ["factor", "commit", "command"]
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for s in summaries:
            writer.writerow(
                {
                    **asdict(s),
                    "factor": args.factor,
                    "commit": args.commit,
                    "command": "python bench/site.py " + " ".join(sys.argv[1:]),
                }
            )
    with open(out / jobs_csv_name(stem), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in fields(JobRow)])
        writer.writeheader()
        for run in runs:
            writer.writerows(asdict(row) for row in job_rows(run))


def job_rows(run: ArmRun) -> list[JobRow]:
    """The arm's jobs as rows of the jobs CSV (the day's seconds, to 0.1 s)."""

    def em(t: float | None) -> float | None:
        return None if t is None else round((t - run.origin) * run.factor, 1)

    def scaled(wall: float | None) -> float | None:
        return None if wall is None else round(wall * run.factor, 1)

    def day(t: float | None) -> float | None:
        return None if t is None else round(t, 1)

    rows = []
    for r in run.records:
        created, front, started, ended = (day(t) for t in r.timeline)
        rows.append(
            JobRow(
                share=run.share,
                arm=run.arm,
                index=r.index,
                step=r.step,
                kind=r.kind,
                pattern=r.pattern,
                device=r.device,
                nodes=r.nodes,
                runtime_s=round(r.runtime, 1),
                submit_s=em(r.events.get("submit")),
                alloc_s=em(r.events.get("alloc")),
                start_s=em(r.events.get("start")),
                finish_s=em(r.events.get("finish")),
                idle_s=round(sum(b - a for a, b, _ in r.idle) * run.factor, 1),
                result_s=em(r.t_result),
                exception=r.exception,
                app_calls=r.app_calls,
                task_created_s=created,
                task_front_s=front,
                task_started_s=started,
                task_ended_s=ended,
                release_why=r.why,
                release_s=em(r.events.get("qpu-release")),
                seed=run.seed,
                plan=r.plan.get("action", ""),
                plan_node_wait_s=scaled(r.plan.get("node_wait")),
                plan_vendor_wait_s=scaled(r.plan.get("vendor_wait")),
                held_s=None if r.hold is None else round((r.hold[1] - r.hold[0]) * run.factor, 1),
                hold="" if r.hold is None else r.hold[2],
                ran_in=str(r.ran_in or ""),
                plan_s=em(r.plan.get("t")),
                plan_limit_s=scaled(r.plan.get("limit")),
                plan_weight=r.plan.get("weight"),
            )
        )
    return rows


def oracle_lines(summaries: list[Summary], runs: list[ArmRun]) -> list[str]:
    """The adaptive arm against hindsight and at other time weights
    (``bench/site_oracle.py``), for the runs with a gated-done arm to hold it against."""
    injob = {
        (s.seed, s.share): InJob(s.var_done_median_s, s.var_done_p95_s, s.idle_later_node_h * 3600)
        for s in summaries
        if s.arm == "gated-done"
    }
    mine = [run for run in runs if run.arm in (ADAPTIVE, "gated-done")]
    if not injob or not any(run.arm == ADAPTIVE for run in mine):
        return []
    return report_lines([row for run in mine for row in job_rows(run)], injob)


def warm_up() -> None:
    """The emulator simulates every task it creates: import the simulator once now, not
    at the first task of the first arm."""
    from flux_quantum.emulator import Emulator, ManualClock

    with Emulator(scenario(FLEET), clock=ManualClock()) as emulator:
        Vendor(emulator, None).create(FLEET[0], "warm-up", 10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke test (< 5 minutes)")
    parser.add_argument("--nodes", type=int, help="cluster nodes (1024; quick 256)")
    parser.add_argument("--hours", type=float, help="length of the day (24; quick 4)")
    parser.add_argument("--factor", type=float, help="time compression (480; quick 960)")
    parser.add_argument("--shares", help="hybrid shares, comma list (0.05,0.2; quick 0.2)")
    parser.add_argument(
        "--arms", help=f"comma list of {','.join(ARMS)} (default all), e.g. gated-done,chain"
    )
    parser.add_argument("--load", type=float, default=0.9, help="offered load of the day (0.9)")
    parser.add_argument("--backlog", type=float, default=2.0, help="hours of arrivals queued at 0")
    parser.add_argument("--tail", type=float, help="emulated hours run after the day (2; quick 1)")
    parser.add_argument("--start-hour", type=float, default=8.0, help="hour the day starts (8)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--seeds",
        help="comma list of seeds: every arm and share once per seed, then the "
        "medians and spread across them (default: --seed)",
    )
    parser.add_argument(
        "--weight",
        type=float,
        default=DEFAULT_WEIGHT,
        help=f"the adaptive arm's time weight (flux quantum loop submit --time-weight; "
        f"default {DEFAULT_WEIGHT:g})",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--stem", default="site", help="name of the result files (site: site.txt, site.csv, ...)"
    )
    args = parser.parse_args(argv)
    if shutil.which("flux") is None:
        print("site: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    quick = args.quick
    args.nodes = args.nodes or (256 if quick else 1024)
    args.hours = args.hours or (4.0 if quick else 24.0)
    # quick: the day at twice the pace, so that its 8 arms take under 5 minutes
    args.factor = args.factor or (960.0 if quick else 480.0)
    args.tail = (args.tail if args.tail is not None else (1.0 if quick else 2.0)) * 3600.0
    shares = [float(x) for x in (args.shares or ("0.2" if quick else "0.05,0.2")).split(",")]
    arms = [a.strip() for a in (args.arms or ",".join(ARMS)).split(",")]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or len(set(arms)) != len(arms):
        parser.error(
            f"--arms {args.arms!r}: a comma list of distinct arms is accepted, from "
            f"{', '.join(ARMS)}"
        )
    day = args.hours * 3600.0
    args.commit = git_commit()
    args.flux_version = (
        subprocess.run(["flux", "version"], capture_output=True, text=True)
        .stdout.split("\n")[0]
        .split()[-1]
    )
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    weights = [(d.name, d.weight) for d in FLEET]
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(
        f"site: {args.nodes} nodes, {args.hours:g} h day x{args.factor:g} "
        f"({day / args.factor / 60:.1f} min per arm), arms {','.join(arms)}, shares "
        f"{','.join(f'{s:.0%}' for s in shares)}, seeds {','.join(map(str, seeds))}; "
        f"commit {args.commit}"
    )
    warm_up()
    t0 = time.monotonic()
    summaries: list[Summary] = []
    series: dict[tuple[float, str], dict[str, list[float]]] = {}
    runs: list[ArmRun] = []
    texts: list[str] = []
    first_profile: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fq-site-") as tmp:
        for seed in seeds:
            args.seed = seed
            profile = queue_profile(FLEET, seed, day)
            first_profile = first_profile or profile
            # A user who knows the device asks for its longest wait of the day, and some.
            args.allowance = {d.name: 1.5 * max(profile[d.name]) + 3 * d.service for d in FLEET}
            args.typical = {d.name: statistics.median(profile[d.name]) for d in FLEET}
            traces = {
                share: make_trace(
                    args.nodes,
                    day,
                    args.load,
                    share,
                    weights,
                    seed,
                    args.start_hour,
                    args.backlog * 3600.0,
                )
                for share in shares
            }
            decided: dict[tuple[float, str], list[Decision]] = {}
            t_seed = time.monotonic()
            for share, trace in traces.items():
                say(
                    f"seed {seed}, share {share:.0%}: {len(trace.jobs)} jobs, "
                    f"{len(trace.hybrid_jobs)} hybrid"
                )
                for arm in arms:
                    say(f"  {arm}")
                    work = Path(tmp) / f"{seed}-{share}-{arm}"
                    run = run_arm(arm, share, trace, args, work, say)
                    summary, data = summarize(run)
                    summaries.append(summary)
                    if seed == seeds[0]:
                        series[(share, arm)] = data
                    runs.append(run)
                    if arm == ADAPTIVE:
                        decided[(share, arm)] = decisions(
                            run.records, run.origin, run.factor, run.weight
                        )
                    say(
                        f"    idle {summary.idle_node_h:.1f} node-h (later tasks "
                        f"{summary.idle_later_node_h:.1f}), useful {summary.util_useful:.1%}, "
                        f"ordinary wait {hours(summary.ord_wait_mean_s)} (p95 "
                        f"{hours(summary.ord_wait_p95_s)}), ttr "
                        f"{hours(summary.hyb_ttr_median_s)}, variational done "
                        f"{hours(summary.var_done_median_s)} (p95 "
                        f"{hours(summary.var_done_p95_s)}), overhead p50 "
                        f"{secs(summary.iter_overhead_p50_s)}, "
                        f"{summary.vendor_calls_per_h:.0f} calls/h, {run.wall_s:.0f}s"
                        + (
                            f"; {len(run.errors)} app errors: {run.errors[:2]}"
                            if run.errors
                            else ""
                        )
                    )
            mine = [s for s in summaries if s.seed == seed]
            wall_seed = time.monotonic() - t_seed
            texts.append(report(mine, traces, profile, args, wall_seed, os.getloadavg(), decided))
    wall = time.monotonic() - t0
    stem = f"{args.stem}_quick" if quick else args.stem
    out = args.out_dir if not quick or args.out_dir != RESULTS else Path(tempfile.gettempdir())
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(texts)
    if len(seeds) > 1:
        loads = os.getloadavg()
        text += (
            f"\n\n{'=' * 88}\nall seeds: took {wall / 60:.1f} min; load average (1 min) during "
            f"the arms: mean {statistics.fmean(s.loadavg for s in summaries):.2f}, max "
            f"{max(s.loadavg for s in summaries):.2f}; at the end {loads[0]:.2f} {loads[1]:.2f} "
            f"{loads[2]:.2f}\n\n" + "\n".join(seeds_lines(summaries))
        )
    oracle = oracle_lines(summaries, runs)
    if oracle:
        text += f"\n\n{'=' * 88}\n" + "\n".join(oracle)
    (out / f"{stem}.txt").write_text(text + "\n")
    write_csvs(summaries, runs, out, stem, args)
    say("")
    say(text)
    first_seed = [s for s in summaries if s.seed == seeds[0]]
    say(plot(series, first_seed, first_profile, out / f"{stem}.png"))
    say(f"csv: {out / (stem + '.csv')}, {out / jobs_csv_name(stem)}")
    if quick:
        say(f"smoke test: {len(summaries)} arm runs in {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
