#!/usr/bin/env python3
"""Merged tasks: many small jobs' programs as one vendor task, against one task each.

N small jobs (one core each, ``-n1``; the broker's R has as many cores as jobs, at least
64) each ask for one tiny program (``bench/merge_job.py``: an rx-rotated Bell pair with
the job's number in tag qubits, ``--shots`` 100) on one busy device, submitted in one
burst (``flux submit --cc``). Every job reads its own result exactly as any job does
(``wait_result(current_task())``) and checks it got exactly its own program's shots.
Both arms run the same jobs on a real Flux (the quantum jobtap plugin, the job-shell
plugin and the handler service) against the project's emulator (the real
amazon-braket-sdk for Braket, the real qrmi client for IBM):

separate
    no ``[quantum.merge]`` table: one vendor task per job, as without merging.
merged
    ``[quantum.merge] enabled = true, max_wait = --max-wait`` (mapped to the wall
    clock, below): the service merges the held jobs' programs on the device into one
    task (a Braket program set; an IBM Sampler job of several pubs) and splits the
    results back per job.
opt-out (``--modes opt-out``; not run by default)
    the merged arm's table, every job ``--setattr=qpu.merge=no``: one task per job again.

Devices. ``braket``: an IQM-Garnet-like QPU on the emulator's Braket side ($0.30 a task
+ $0.00145 a shot; program sets of up to 100 executables), its public queue
``--queue-minutes`` of ``--task-seconds`` background tasks that never drains (as many
arrive as are served); our tasks take ``--task-seconds`` plus 1 ms a shot. ``ibm``: a
Heron-like backend on the emulator's IBM side (a paid plan, $1.60 a usage second, no
per-task fee), reached through qrmi (catalog vendor ``ibm``), the same kind of queue;
a job runs ``--ibm-job-seconds`` plus 1 ms a shot, billed for all of it. The catalog
gives each device ``slots`` = jobs, so the separate arm keeps every task in flight at
once (with the default slot a site's jobs would queue one task at a time).

Time. The emulator's clock runs ``--speed`` times the wall clock (x10; quick x20); the
service, Flux and the jobs are on the wall clock, mapped exactly: ``max_wait`` goes into
the site's table as ``--max-wait / --speed`` wall seconds, and the catalog's drain prior
is in wall seconds. The service's own pace counts ``--speed`` times over too: taking a
burst of 200 jobs into its pool takes it a few seconds of wall time, which at x20 is
longer than max_wait's 3 s, so a burst can be split over more tasks than it would be at
the real clock; the full run goes at x10 (6 s). Figures are in the vendor's seconds unless said otherwise. Flux's and
Python's own latencies (a job's start, its read) run uncompressed, so they count
``--speed`` times over on the vendor's clock: the time to the last result is taken
where the result exists (the vendor task that carries the job's program ended), with
the last release (vendor seconds) and the last job's read (wall seconds) beside it.

Measured per arm: vendor tasks created (the emulator's bill), jobs done with exactly
their own shots, total cost (the emulator's bill, and the ledger's sum of the jobs'
charges: they must agree to the cent), time from the first submit to the last job's
result, idle node-seconds (a job's node held while the task with its program is
pending), how long jobs were held back to be merged, vendor requests. Targets (issue 22):
tasks created <= N/50 for 100+ compatible jobs, cost >= 30 % lower on the Braket QPU at
100 shots a job (IBM bills time, not tasks: no cost target there), time to the last
result no worse. The table says met or MISSED.

    python bench/merge.py --quick   # Braket 100 jobs, IBM 20 (< 5 min)
    python bench/merge.py           # Braket 10, 50, 100, 200; IBM 100 -> bench/results/merge.*
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import flux_command, percentile, revision, verdict

from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
JOB = Path(__file__).resolve().parent / "merge_job.py"
MODES = ("separate", "merged")
OPT_OUT = "opt-out"  # [quantum.merge] on, every job --setattr=qpu.merge=no (not run by default)
KINDS = ("braket", "ibm")
BRAKET = "garnet"
BRAKET_ARN = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
IBM = "heron"
IBM_ID = "ibm_heron"
SHOT_SECONDS = 0.001
MIN_CORES = 64
# Targets (issue 22).
TASKS_PER_JOB = 1 / 50  # tasks created <= N/50 ...
TASKS_FROM = 100  # ... for 100+ compatible jobs
COST_CUT = 0.30  # cost >= 30 % lower on Braket QPUs


@dataclass(frozen=True)
class Device:
    """One busy device, in the vendor's seconds."""

    kind: str  # braket | ibm
    queue_minutes: float
    background_seconds: float  # a background task; ours take this + shots x SHOT_SECONDS
    per_task: float = 0.0
    per_shot: float = 0.0
    per_second: float = 0.0  # IBM: dollars a usage second
    max_executables: int = 100  # Braket program sets

    @property
    def name(self) -> str:
        return BRAKET if self.kind == "braket" else IBM

    @property
    def ident(self) -> str:
        return BRAKET_ARN if self.kind == "braket" else IBM_ID

    @property
    def depth(self) -> int:
        return max(1, round(self.queue_minutes * 60 / self.background_seconds))

    def task_seconds(self, shots: int) -> float:
        return self.background_seconds + shots * SHOT_SECONDS

    def queue(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "arrival_rate": 1.0 / self.background_seconds,
            "service_time": self.background_seconds,
            "distribution": "fixed",
            "shot_time": SHOT_SECONDS,
        }

    def braket_scenario(self) -> dict[str, Any]:
        """The emulator's Braket side: this device when it is the Braket one (else an
        idle one, never used)."""
        queue = self.queue() if self.kind == "braket" else {}
        return {
            "devices": [
                {
                    "arn": BRAKET_ARN,
                    "name": "Garnet",
                    "qubits": 20,
                    "cost": {
                        "price": self.per_shot,
                        "unit": "shot",
                        "task_price": self.per_task,
                    },
                    "shots": [1, 20000],
                    "queue": queue,
                    "program_sets": {
                        "max_executables": self.max_executables,
                        "max_total_shots": 20000,
                    },
                }
            ]
        }

    def ibm_scenario(self) -> dict[str, Any]:
        """The emulator's IBM side: a paid plan, this backend's queue when it is the
        IBM one."""
        queue = self.queue() if self.kind == "ibm" else {}
        backend = {"name": IBM_ID, "qubits": 20, "queue": queue}
        return {"plan": "paid", "price_per_second": self.per_second, "backends": [backend]}

    def catalog(self, speed: float, slots: int) -> str:
        """Both devices (the jobs name this one); the drain prior in wall seconds."""
        drain = self.background_seconds / speed
        return (
            "currency: USD\n"
            "devices:\n"
            f"  - name: {BRAKET}\n"
            "    vendor: local\n"
            f"    id: {BRAKET_ARN}\n"
            "    class: qpu\n"
            "    qubits: 20\n"
            f"    slots: {slots}\n"
            f"    price: {{per_task: {self.per_task if self.kind == 'braket' else 0.3}, "
            f"per_shot: {self.per_shot if self.kind == 'braket' else 0.00145}}}\n"
            f"    properties: {{drain_seconds_per_task: {drain:.6g}}}\n"
            f"  - name: {IBM}\n"
            "    vendor: ibm\n"
            f"    id: {IBM_ID}\n"
            "    class: qpu\n"
            "    qubits: 20\n"
            "    region: us-east-1\n"
            f"    slots: {slots}\n"
            f"    price: {{per_minute: {self.per_second * 60 if self.kind == 'ibm' else 96:g}}}\n"
            f"    properties: {{drain_seconds_per_task: {drain:.6g}}}\n"
        )

    def describe(self, shots: int) -> str:
        if self.kind == "braket":
            price = f"${self.per_task:g}/task + ${self.per_shot:g}/shot"
            what = f"emulated Braket QPU {BRAKET} (IQM-Garnet-like, program sets of "
            what += f"<= {self.max_executables} executables)"
        else:
            price = f"${self.per_second:g}/usage second, no per-task fee"
            what = f"emulated IBM backend {IBM_ID} (Heron-like, paid plan, through qrmi)"
        return (
            f"{what}: public queue {self.queue_minutes:g} min of {self.background_seconds:g} s "
            f"tasks at utilisation 1; a task of ours {self.task_seconds(shots):g} s at "
            f"{shots} shots; {price}"
        )


def merge_table(max_wait_wall: float) -> str:
    """The site's ``[quantum.merge]`` table for the merged arm (wall seconds)."""
    return (
        "[quantum.merge]\n"
        "enabled = true\n"
        "across_users = false\n"
        f'max_wait = "{max_wait_wall:.3f}s"\n'
    )


def core_count(jobs: int) -> int:
    """Cores of the broker's R: one a job, at least ``MIN_CORES``."""
    return max(MIN_CORES, jobs)


@dataclass
class Run:
    """One arm's figures (vendor seconds unless said otherwise)."""

    kind: str
    mode: str
    jobs: int
    speed: float
    jobs_done: int = 0  # exited 0 with exactly their own shots
    jobs_failed: int = 0
    own_shots: int = 0  # jobs whose counts were exactly their own program's shots
    tasks: int = 0  # vendor tasks created (the emulator's bill)
    tasks_done: int = 0
    largest: int = 0  # jobs in the largest task
    cost: float = 0.0  # the emulator's bill
    ledger: float = 0.0  # the ledger's sum of the jobs' charges
    ledger_rows: int = 0
    cost_events: float = 0.0  # qpu-cost shares posted on the jobs' eventlogs
    cost_event_jobs: int = 0
    ready_last: float = 0.0  # first submit -> the last job's task ended (vendor s)
    ready_median: float = 0.0
    released_last: float = 0.0  # first submit -> the last qpu-release (vendor s)
    read_last_wall: float = 0.0  # first submit -> the last job read its result (wall s)
    submit_wall: float = 0.0  # first -> last submit event (wall s)
    held_median: float = 0.0  # submit -> its qpu-submit: held back to be merged (vendor s)
    held_max: float = 0.0
    idle: float = 0.0  # node-seconds: a job's node held while its task is pending
    calls: int = 0
    creates: int = 0
    polls: int = 0
    reads: int = 0  # result downloads: S3 GetObject (Braket), GetJobResults (IBM)
    wall: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kind} N={self.jobs} {self.mode}"


def failure(record: Mapping[str, Any] | None, log: list[events.Event], stderr: Path) -> str | None:
    """Why a job is not done with exactly its own shots, naming the half that failed:
    its record (what the job read and checked, ``--out``) or its finish status (how
    Flux says it ended, from its eventlog ``log``); None when both say it is done."""
    if record is None:
        exception = events.first(log, "exception")
        if exception is not None and events.first(log, "start") is None:
            what = f"{exception.context.get('type')} exception: {exception.context.get('note')}"
            return f"no record: it never ran: {what}"
        return "no record: the job did not run, or did not get as far as reading its result"
    if not record.get("ok"):
        return f"its record: {record.get('why') or 'not ok'}"
    finish = events.first(log, "finish")
    if finish is None:
        return "its record is ok, but its eventlog has no finish event (read before it ended)"
    status = finish.context.get("status")
    if status != 0:
        lines = stderr.read_text(errors="replace").splitlines() if stderr.exists() else []
        said = f"; its stderr ends: {lines[-1].strip()}" if lines else ""
        return f"its record is ok, but it finished with wait status {status}{said}"
    return None


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def ledger_total(document: Any) -> tuple[float, int]:
    """What ``flux quantum usage --json`` says was spent (settled), and in how many
    rows of the ledger (one a job's charge)."""
    rows = document.get("rows") if isinstance(document, Mapping) else None
    rows = [row for row in rows or [] if isinstance(row, Mapping)]
    spent = sum(float(row.get("spent") or 0.0) for row in rows)
    tasks = sum(int(row.get("tasks") or 0) for row in rows)
    return spent, tasks


class Environ:
    """Set variables in ``os.environ`` (what the broker, the service and the jobs
    inherit) and put the old values back on ``restore``."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)

    def restore(self) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def instance_on(
    work: Path, emulator: Any, catalog: Path, broker_opts: Sequence[str] = ()
) -> tuple[Environ, Any]:
    """``flux start --test-size=1`` in ``work`` (``cli.demo.Instance``) whose broker,
    service and jobs inherit the environment that reaches ``emulator`` (QRMI's settings
    too), reads ``catalog`` and keeps the ledger under ``work/state``; and that
    environment, to ``restore`` when the instance is stopped. When the instance does not
    start, the environment is restored and ``emulator`` stopped."""
    from flux_quantum.cli.demo import Instance

    environ = Environ(
        {
            **emulator.env(),
            "FLUX_QUANTUM_BACKENDS": str(catalog),
            "XDG_STATE_HOME": str(work / "state"),
        }
    )
    try:
        return environ, Instance(work, 1, list(broker_opts))
    except BaseException:
        environ.restore()
        emulator.stop()
        raise


class OnInstance:
    """A bench world on an instance made by ``instance_on``: ``flux`` runs a command in
    it; ``close`` stops the service, the instance and the emulator and puts the
    environment back. Subclasses call ``start_instance`` once their catalog is written."""

    work: Path
    emulator: Any
    environ: Environ
    inst: Any
    env: dict[str, str]

    def start_instance(
        self, work: Path, emulator: Any, catalog: Path, broker_opts: Sequence[str] = ()
    ) -> None:
        self.work, self.emulator = work, emulator
        self.environ, self.inst = instance_on(work, emulator, catalog, broker_opts)
        self.env = dict(self.inst.env)

    def flux(self, *argv: str, check: bool = True, timeout: float = 120.0) -> str:
        return flux_command(self.env, self.work, argv, check=check, timeout=timeout)

    def close(self) -> None:
        try:
            self.flux("quantum", "service", "stop", check=False)
            self.inst.stop()
        finally:
            self.emulator.stop()
            self.environ.restore()


class Arm(OnInstance):
    """One Flux instance, emulator and service for one arm."""

    def __init__(
        self,
        work: Path,
        device: Device,
        mode: str,
        jobs: int,
        *,
        shots: int,
        speed: float,
        max_wait: float,
    ) -> None:
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario
        from flux_quantum.emulator.clock import ScaledClock
        from flux_quantum.emulator.ibm import IbmScenario
        from flux_quantum.job.consumer import shell_plugin_path

        if mode not in (*MODES, OPT_OUT):
            raise ValueError(f"mode must be one of {', '.join(MODES)}, {OPT_OUT}, got {mode!r}")
        self.work, self.device, self.mode, self.jobs = work, device, mode, jobs
        self.shots, self.speed, self.max_wait = shots, speed, max_wait
        for sub in ("conf", "out", "progs", "state"):
            (work / sub).mkdir(parents=True)
        r = subprocess.run(
            [
                "flux",
                "R",
                "encode",
                "--ranks=0",
                f"--cores=0-{core_count(jobs) - 1}",
                f"--hosts={socket.gethostname()}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (work / "R.json").write_text(r)
        config = instance_config() + f'\n[resource]\nnoverify = true\npath = "{work / "R.json"}"\n'
        (work / "conf" / "quantum.toml").write_text(config)
        if mode != "separate":
            (work / "conf" / "merge.toml").write_text(merge_table(max_wait / speed))
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(device.catalog(speed, slots=max(1, jobs)))
        self.calls: list[Any] = []
        self.clock = ScaledClock(speed)
        self.emulator = Emulator(
            scenario=Scenario.from_dict(device.braket_scenario(), source="bench"),
            ibm=IbmScenario.from_dict(device.ibm_scenario(), source="bench"),
            clock=self.clock,
            seed=1,
            on_call=self.calls.append,
        ).start()
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"], capture_output=True, text=True
        ).stdout.strip()
        opts = [f"-Sconf.shell_pluginpath={builtin}:{shell_plugin_path().parent}"]
        self.start_instance(work, self.emulator, self.catalog, opts)
        self._handle: Any = None

    def handle(self) -> Any:
        """A Flux handle on the instance (eventlogs of many jobs without a process each)."""
        if self._handle is None:
            import flux

            self._handle = flux.Flux(self.env["FLUX_URI"])
        return self._handle

    def close(self) -> None:
        self._handle = None
        super().close()

    def configure(self) -> None:
        """The clock starts, then the service."""
        self.t0 = self.clock.start()
        self.flux(
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            "--poll-min=0.1",
            "--poll-cold-max=1",
            "--poll-max=2",
            "--scan-interval=0.2",
            "--cluster-interval=0.5",
            "--device-check-interval=5",
            "--tick=0.05",
            "--startup-default=0.5",
            "--workers=8",
        )

    def submit_all(self) -> list[str]:
        """Every job in one burst (``flux submit --cc``), each with its own program."""
        from merge_job import program

        for j in range(self.jobs):
            (self.work / "progs" / f"p{j}.qasm").write_text(program(j, self.jobs))
        out = self.work / "out"
        lines = self.flux(
            "submit",
            f"--cc=0-{self.jobs - 1}",
            "-n1",
            "-t",
            "30m",
            "--job-name=merge{cc}",
            # The broker's R is made up (a core a job, at least 64, on any machine): its
            # cores are not this machine's, so the shell binds the job to none of them.
            "-o",
            "cpu-affinity=off",
            f"--output={out}/job{{cc}}.out",
            f"--error={out}/job{{cc}}.err",
            f"--setattr=qpu.device={self.device.name}",
            f"--setattr=qpu.shots={self.shots}",
            f"--setattr=qpu.program={self.work}/progs/p{{cc}}.qasm",
            *(["--setattr=qpu.merge=no"] if self.mode == OPT_OUT else []),
            sys.executable,
            str(JOB),
            "--index={cc}",
            f"--jobs={self.jobs}",
            f"--shots={self.shots}",
            f"--out={out}/job{{cc}}.json",
            timeout=300,
        )
        jobids = [line.strip() for line in lines.splitlines() if line.strip()]
        if len(jobids) != self.jobs:
            raise RuntimeError(f"flux submit --cc gave {len(jobids)} job ids, not {self.jobs}")
        return jobids

    def run(self, timeout: float) -> Run:
        run = Run(self.device.kind, self.mode, self.jobs, self.speed)
        wall = time.monotonic()
        jobids: list[str] = []
        try:
            self.configure()
            jobids = self.submit_all()
            self.flux("queue", "drain", f"--timeout={timeout:g}s", timeout=timeout + 30)
            self.flux("quantum", "service", "status", "--wait-idle=120", timeout=150)
            self.measure(run, jobids)
        except Exception as exc:  # a failed arm is reported, not hidden
            run.error = f"{type(exc).__name__}: {exc}"[:500]
            for jobid in jobids:
                self.flux("cancel", jobid, check=False)
        finally:
            # What the service said and holds, for whoever keeps the files (--work).
            (self.work / "dmesg.log").write_text(self.flux("dmesg", "-H", check=False))
            status = self.flux("quantum", "service", "status", "--json", check=False)
            (self.work / "status.json").write_text(status)
        run.wall = time.monotonic() - wall
        return run

    def eventlogs(self, jobids: list[str]) -> Iterator[list[events.Event]]:
        import flux.job

        h = self.handle()
        for jobid in jobids:
            found = flux.job.job_kvs_lookup(
                h, flux.job.JobID(jobid), keys=["eventlog"], decode=False
            )
            yield events.parse_eventlog((found or {}).get("eventlog"))

    def measure(self, run: Run, jobids: list[str]) -> None:
        clock = self.clock
        report = self.emulator.report()
        bill = report["bill"]
        rows = {row["id"]: row for row in bill["tasks"]}
        run.jobs = len(jobids)
        members: dict[str, int] = {}
        readies, helds, submits, releases, reads = [], [], [], [], []
        idle = 0.0
        for j, log in enumerate(self.eventlogs(jobids)):
            stamps = events.first_times(log)
            submits.append(stamps["submit"])
            out = self.work / "out" / f"job{j}.json"
            record = json.loads(out.read_text()) if out.exists() else None
            why = failure(record, log, self.work / "out" / f"job{j}.err")
            run.jobs_done += why is None
            run.jobs_failed += why is not None
            run.own_shots += bool(record and record.get("ok"))
            if why is not None and len(run.notes) < 3:
                run.notes.append(f"job {j} ({jobids[j]}): {why}")
            record = record or {}
            if events.SUBMIT in stamps:
                helds.append(clock.at(stamps[events.SUBMIT]) - clock.at(stamps["submit"]))
            if events.RELEASE in stamps:
                releases.append(stamps[events.RELEASE])
            if "read_at" in record:
                reads.append(float(record["read_at"]))
            cost = events.last(log, events.COST)
            if cost is not None and isinstance(cost.context.get("cost"), int | float):
                run.cost_events += float(cost.context["cost"])
                run.cost_event_jobs += 1
            found = events.first(log, events.TASK)
            task = str(found.context.get("task")) if found is not None else None
            row = rows.get(task) if task is not None else None
            if task is not None:
                members[task] = members.get(task, 0) + 1
            if row is None or row.get("ended") is None:
                continue
            readies.append(float(row["ended"]))
            if "start" in stamps:
                held = (clock.at(stamps["start"]), clock.at(stamps.get("finish", stamps["start"])))
                idle += overlap((float(row["created"]), float(row["ended"])), held)
        first = min(submits)
        zero = clock.at(first)
        run.idle = idle
        run.submit_wall = max(submits) - first
        if readies:
            run.ready_last = max(readies) - zero
            run.ready_median = percentile([r - zero for r in readies], 0.5)
        if releases:
            run.released_last = clock.at(max(releases)) - zero
        if reads:
            run.read_last_wall = max(reads) - first
        if helds:
            run.held_median = percentile(helds, 0.5)
            run.held_max = max(helds)
        run.largest = max(members.values(), default=0)
        tasks = list(bill["tasks"])
        run.tasks = len(tasks)
        run.tasks_done = sum(1 for row in tasks if row.get("state") == "COMPLETED")
        run.cost = float(bill["total"])
        usage = json.loads(self.flux("quantum", "usage", "--json", "--period", "all") or "{}")
        run.ledger, run.ledger_rows = ledger_total(usage)
        run.calls = len(self.calls)
        run.creates = sum(
            1 for c in self.calls if c.operation in ("CreateQuantumTask", "CreateJob")
        )
        run.polls = sum(1 for c in self.calls if c.operation in ("GetQuantumTask", "GetJob"))
        run.reads = sum(1 for c in self.calls if c.operation in ("GetObject", "GetJobResults"))


# -- the table ------------------------------------------------------------------------------


def pairs(runs: list[Run]) -> list[tuple[Run, Run]]:
    """(separate, merged) of each device and N, in the order they ran."""
    out = []
    for sep in runs:
        if sep.mode != "separate":
            continue
        for mer in runs:
            if (mer.mode, mer.kind, mer.jobs) == ("merged", sep.kind, sep.jobs):
                out.append((sep, mer))
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def ledger_agrees(run: Run) -> bool:
    """The ledger's sum is the bill's, to the cent a task (the ledger rounds each
    task's cost, and each merged job's share, to whole cents)."""
    return abs(run.ledger - run.cost) <= 0.01 * max(1, run.tasks) + 1e-9


def targets(sep: Run, mer: Run, device: Device, shots: int) -> list[str]:
    """The issue's targets for one pair, met or MISSED."""
    n = sep.jobs
    lines = [f"  {sep.kind} N={n}:"]
    if n >= TASKS_FROM:
        cap = n * TASKS_PER_JOB
        lines.append(
            f"    tasks created {mer.tasks} merged vs {sep.tasks} separate (<= N/50 = {cap:g} "
            f"for {TASKS_FROM}+ jobs): {verdict(mer.tasks <= cap)}"
        )
    else:
        lines.append(
            f"    tasks created {mer.tasks} merged vs {sep.tasks} separate (the N/50 target "
            f"is for {TASKS_FROM}+ jobs)"
        )
    cut = 1 - _ratio(mer.cost, sep.cost)
    if sep.kind == "braket":
        lines.append(
            f"    cost ${mer.cost:.2f} merged vs ${sep.cost:.2f} separate = {cut:.1%} lower "
            f"(>= 30 % lower at {shots} shots a job): {verdict(cut >= COST_CUT)}"
        )
    else:
        lines.append(
            f"    cost ${mer.cost:.2f} merged vs ${sep.cost:.2f} separate = {cut:.1%} lower "
            "(no target: IBM bills usage time, not tasks; merging bills one job's overhead "
            "time instead of N)"
        )
    lines.append(
        f"    time to the last result {mer.ready_last:,.0f} s merged vs {sep.ready_last:,.0f} s "
        f"separate (no worse): {verdict(mer.ready_last <= sep.ready_last)}"
    )
    if mer.ready_last > sep.ready_last:
        saved = (n - mer.tasks) * device.background_seconds
        lines.append(
            f"      merged jobs were held up to {mer.held_max:,.0f} s to be merged; merging "
            f"saved about {saved:,.0f} s of task overheads ({n} tasks of "
            f"{device.task_seconds(shots):g} s became {mer.tasks})"
        )
    return lines


def report(runs: list[Run], args: argparse.Namespace, wall: float) -> str:
    braket, ibm = args.devices["braket"], args.devices["ibm"]
    lines = [
        f"flux-quantum merged-tasks benchmark: {datetime.now(UTC):%Y-%m-%d}, commit "
        f"{args.revision}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"command: python bench/merge.py {' '.join(args.argv)}; took {wall / 60:.1f} min",
        f"braket: {braket.describe(args.shots)}",
        f"ibm: {ibm.describe(args.shots)}",
        f"workload: N jobs of 1 core, one program each ({args.shots} shots: a Bell pair with "
        "its own rx angle and the job's number in tag qubits), submitted in one burst "
        "(flux submit --cc); the default release point (done)",
        f"merged: [quantum.merge] enabled, max_wait {args.max_wait:g} s; clock x{args.speed:g} "
        f"(max_wait {args.max_wait / args.speed:.2f} s of wall time in the site's table)",
        "",
        f"{'arm':<24} {'jobs ok':>8} {'tasks':>5} {'largest':>7} {'bill $':>8} {'ledger $':>8} "
        f"{'$/job':>6} {'last result':>11} {'released':>8} {'read wall':>9} {'held p50':>8} "
        f"{'held max':>8} {'idle n-s':>8} {'creates':>7} {'polls':>6} {'reads':>6} "
        f"{'wall s':>6}",
    ]
    for run in runs:
        per_job = run.cost / run.jobs if run.jobs else 0.0
        lines.append(
            f"{run.label:<24} {run.jobs_done:>4}/{run.jobs:<3} {run.tasks:>5} {run.largest:>7} "
            f"{run.cost:>8.2f} {run.ledger:>8.2f} {per_job:>6.3f} {run.ready_last:>11,.0f} "
            f"{run.released_last:>8,.0f} {run.read_last_wall:>9.1f} {run.held_median:>8,.0f} "
            f"{run.held_max:>8,.0f} {run.idle:>8,.0f} {run.creates:>7} {run.polls:>6} "
            f"{run.reads:>6} {run.wall:>6.0f}"
        )
        if run.error:
            lines.append(f"  {run.label} FAILED: {run.error}")
        for note in run.notes:
            lines.append(f"  {run.label}: {note}")
    lines += [
        "",
        "jobs ok: exited 0 with exactly their own program's shots (merge_job.py checks the",
        "  tag bits); tasks: vendor tasks created (the emulator's bill); largest: jobs in the",
        "  largest task; bill: the emulator's; ledger: what the ledger settled for the jobs",
        "  (flux quantum usage); last result: first submit -> the last job's task ended",
        "  (vendor s); released: -> the last qpu-release (vendor s: Flux's and the service's",
        "  own latencies count x speed there); read wall: -> the last job read its result",
        "  (wall s); held: a job's submit -> its qpu-submit (vendor s: the wait to be merged,",
        "  and the service's own latency); idle n-s: node-seconds a job's node was held while",
        "  its task was pending (none with release point done: merged jobs wait with no node",
        "  too); creates, polls, reads: vendor requests to create tasks, poll them and",
        "  download results (S3 objects on Braket, GetJobResults on IBM)",
    ]
    checks = [
        f"  {run.label}: ledger ${run.ledger:.2f}, bill ${run.cost:.2f}; qpu-cost shares on "
        f"{run.cost_event_jobs} jobs' eventlogs ${run.cost_events:.2f}: "
        f"{verdict(ledger_agrees(run))}"
        for run in runs
        if not run.error
    ]
    if checks:
        lines += ["", "the ledger's charges add up to the bill (to the cent a task):"]
        lines += checks
    done = [pair for pair in pairs(runs) if not pair[0].error and not pair[1].error]
    if done:
        lines += ["", "targets (issue 22):"]
        for sep, mer in done:
            lines += targets(sep, mer, args.devices[sep.kind], args.shots)
        every = all(r.jobs_done == r.jobs for pair in done for r in pair)
        lines.append(f"  every job got exactly its own shots, in every arm: {verdict(every)}")
    return "\n".join(lines) + "\n"


def plan(quick: bool, braket_jobs: str | None, ibm_jobs: str | None) -> list[tuple[str, int]]:
    """(device, N) of every pair of arms, in the order they run."""

    def counts(text: str | None, default: str) -> list[int]:
        return [int(x) for x in (text if text is not None else default).split(",") if x.strip()]

    out = [("braket", n) for n in counts(braket_jobs, "100" if quick else "10,50,100,200")]
    out += [("ibm", n) for n in counts(ibm_jobs, "20" if quick else "100")]
    return list(dict.fromkeys(out))  # each pair of arms once


def devices(args: argparse.Namespace) -> dict[str, Device]:
    return {
        "braket": Device(
            "braket",
            queue_minutes=args.queue_minutes,
            background_seconds=args.task_seconds,
            per_task=0.30,
            per_shot=0.00145,
        ),
        "ibm": Device(
            "ibm",
            queue_minutes=args.queue_minutes,
            background_seconds=args.ibm_job_seconds,
            per_second=1.60,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Braket 100 jobs, IBM 20 (< 5 min)")
    parser.add_argument("--braket-jobs", help="comma list of N (10,50,100,200; quick 100)")
    parser.add_argument("--ibm-jobs", help="comma list of N (100; quick 20; '' for none)")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma list of {', '.join(MODES)}, {OPT_OUT} ([quantum.merge] on, every job "
        "qpu.merge=no)",
    )
    parser.add_argument("--shots", type=int, default=100)
    parser.add_argument("--queue-minutes", type=float, help="public queue (10; quick 5)")
    parser.add_argument("--task-seconds", type=float, default=5.0, help="Braket task (5)")
    parser.add_argument("--ibm-job-seconds", type=float, default=2.0, help="IBM job (2)")
    parser.add_argument("--max-wait", type=float, default=60.0, help="vendor seconds (60)")
    parser.add_argument("--speed", type=float, help="the emulator's clock (x10; quick x20)")
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument("--work", type=Path, help="keep the arms' files here (a new directory)")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall seconds per arm")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    quick = args.quick
    args.queue_minutes = args.queue_minutes or (5.0 if quick else 10.0)
    args.speed = args.speed or (20.0 if quick else 10.0)
    args.devices = devices(args)
    modes = args.modes.split(",")
    if any(m not in (*MODES, OPT_OUT) for m in modes):
        parser.error(f"--modes: accepted {', '.join(MODES)}, {OPT_OUT}")
    if shutil.which("flux") is None:
        print("merge: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    args.revision = revision(REPO, ("src", "bench"))
    out = args.out or (None if quick else RESULTS)
    started = time.monotonic()
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        if args.work is not None:
            args.work.mkdir(parents=True)
            tmp = args.work
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fq-merge-")))
        for kind, n in plan(quick, args.braket_jobs, args.ibm_jobs):
            for mode in modes:
                print(f"-- {kind} N={n} {mode} (clock x{args.speed:g})", flush=True)
                bench = Arm(
                    tmp / f"{kind}-{n}-{mode}",
                    args.devices[kind],
                    mode,
                    n,
                    shots=args.shots,
                    speed=args.speed,
                    max_wait=args.max_wait,
                )
                try:
                    run = bench.run(args.timeout)
                finally:
                    bench.close()
                runs.append(run)
                print(
                    f"   {run.jobs_done}/{run.jobs} jobs ok, {run.tasks} tasks, "
                    f"${run.cost:.2f}, last result {run.ready_last:,.0f} s, {run.wall:.0f} s "
                    f"wall {run.error}",
                    flush=True,
                )
    text = report(runs, args, time.monotonic() - started)
    print(text, end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "merge.txt").write_text(text)
        setup = {
            "devices": {k: asdict(d) for k, d in args.devices.items()},
            "shots": args.shots,
            "max_wait": args.max_wait,
            "speed": args.speed,
            "command": "python bench/merge.py " + " ".join(args.argv),
            "commit": args.revision,
        }
        (out / "merge.json").write_text(
            json.dumps({"setup": setup, "runs": [asdict(r) for r in runs]}, indent=1) + "\n"
        )
        print(f"written: {out / 'merge.txt'}, {out / 'merge.json'}")
    return 1 if any(r.error for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
