"""bench/site.py's site: the emulated vendor fleet and its queues, the instance, the handler
service and its CPU and memory, the jobs' records, the journal that follows their events,
and an application's vendor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import PROGRAM

CORES_PER_NODE = 4
APP_POLL = 15.0  # vendor seconds between an application's polls (flux quantum task --wait)
BIN = 600.0  # seconds of the day per utilisation sample
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
