"""A variational loop on a busy QPU: one job that loops, against a chain of held steps.

One QAOA MaxCut optimisation (``examples/qaoa``: SPSA, ``--iterations I`` SPSA
iterations, so K = 1 + 2 I evaluations, each one quantum task) on N nodes, run four ways
on a real Flux (``flux start --test-size=N`` with the quantum jobtap plugin, the
job-shell plugin and the handler service) against the emulator's IBM side (a Heron-like
backend reached through the real qrmi client, a paid plan so dedicated sessions exist):

injob
    ``examples/qaoa/injob.py`` as one job of N nodes: its first program is the job's qpu
    request (held with no node until task 0 is done, ``release_at=done``); every later
    program is a task the job creates itself on that device and waits for, holding its
    N nodes through each vendor queue.
injob-session
    the same, submitted with ``qpu.session=dedicated`` and run with ``--session``: the
    first task opens an IBM dedicated session and the job's later tasks ride it
    (``flux quantum task --session-env``'s variables).
chain
    ``flux quantum loop submit -N N ... python examples/qaoa/step.py``: step k is a held
    qpu job whose task k the service creates; it runs once task k is done, folds result
    k into the SPSA state and writes program k + 1; rank 0 submits step k + 1 before
    step k ends. Nodes are free between steps.
chain-session
    the same with ``--session dedicated``: the service keeps one session for every
    step's task (``qpu.loop``).
chain-braket, chain-hybrid (the Braket pair)
    the chain on an emulated Braket QPU with the same busy queue (``local:garnet``,
    the real amazon-braket-sdk): plain tasks, each through the public queue; and with
    ``--session dedicated`` where the catalog names a hybrid job's role: the service runs
    one Braket hybrid job for the loop (``--hybrid-startup`` seconds to start, its
    instance billed ``--hybrid-price`` an hour, per second, while the loop lasts) and
    every step's task carries its token and runs ahead of the public queue. Measured
    as the others, plus the cost (the tasks' and the job's instance time).
adaptive
    ``flux quantum loop submit --time-weight W`` (``--time-weight``, default the loop's
    default): each step decides what follows it, keeping its nodes for the next result
    and running that iteration in place, or giving them back with the next step released
    by the forecast wait for its nodes, or at its result. The chains run with
    ``--time-weight=0``: every step gives its nodes back, as they always did.

The cluster (``--cluster``). ``idle``: nothing else runs, a released step starts at
once. ``busy``: ordinary jobs of 1..N nodes running 10-60 s each, four of them always
queued, so a step given its nodes back waits for them again (a released step is
scheduled first, but waits for N nodes to be free at once). Its waits are wall time,
which the vendor's clock runs at outside a task: give ``--fast 1`` and a short queue
(``--queue-minutes 0.5``) so that a task's wait is wall time too, and the steps'
decisions (made on the wall clock the service and Flux run on) weigh the two as they
are; at ``--fast 1200`` a 40-minute queue passes in two wall seconds, and a step keeps
its nodes through it.

The device. A backend whose queue never drains: ``--queue-minutes`` (40) of background
jobs of ``--job-seconds`` (0.5, fixed) ahead at the start and as many arriving as are
served (Poisson, utilisation 1), so every task that joins the public queue waits about
that long; our jobs run ``--job-seconds`` + ``--shots`` x 8 ms (10 s at 1000 shots). The
emulator models IBM's dedicated sessions: the session's first job waits its turn; from
its start the backend runs only the session's jobs, each later one at once, until no job
of the session waited or ran for the interactive TTL (60 s), when the public queue moves
on and the session's next job waits its turn again.

The clock (the vendor's time, the emulator's timeline). It runs at wall speed (x1)
whenever no task of the loop is pending, so everything Flux, Python and the optimiser
do between tasks takes its real time on the vendor's clock too (and a session's
interactive TTL is measured against it faithfully); from a task's creation it runs at
``--fast`` (x1200) up to the end the emulator forecasts for that task, and at x1 again
from exactly that end. A 40-minute queue passes in 2 s of wall time, and the moment a
result exists is exact. Pollers see the compression: a loop that backs off while a task
waits (the in-job loop's ``watch_task``: 1 s growing to 15 s) has backed off less here
than it would through 40 real minutes, so its detection lag is a lower bound; the
service polls IBM at a fixed ``--poll-min`` (IBM gives no queue position to plan by).

Measured per run, on the vendor's clock unless said otherwise:

idle node-seconds
    N x the time the loop's jobs hold their nodes while one of its tasks is pending
    (created, not ended): the in-job loop's later tasks, and for a chain the moment
    between a step submitting its successor and ending. ``held``: N x all the time the
    loop's jobs hold nodes (the classical work and start-ups too).
time to result
    the first job's submit -> the last job's ``finish`` (its optimiser printed the
    answer), vendor seconds; ``ttr wall`` the same on the wall clock of the compressed
    run; ``own``: time to result minus the time a task was pending, i.e. what the loop
    itself puts on the critical path (start-ups, scheduling, the optimiser, polling).
per-iteration overhead (chains)
    task k done (the emulator's end, mapped to the wall clock) -> step k's ``start``
    event, wall seconds, p50 and p99 over every step of every run; ``gap``: task k done
    -> task k + 1 created (every arm; the loop's whole turnaround between two tasks).
vendor calls
    every request the emulator answered during the run (IAM, backends, jobs, polls,
    results, sessions), with creates and polls apart; polls scale with wall time, so
    under compression they are not what a real run would make.
tasks, sessions
    IBM jobs created (must be K in every arm), sessions opened and closed by the end of
    the run (the service closes a loop's session ``loop_linger`` after its last step).

Targets (issue 19): the chain's idle node-seconds <= 10 % of the in-job loop's; the
chain's time to result (median of the repeats) no worse than the in-job loop's by more
than 10 %; the chain's per-iteration overhead p50 <= 0.5 s of wall time. The table says
met or MISSED, for the pair without sessions (the issue's) and with sessions.

Runs share this machine's cores with whatever else runs on it: compare arms by ratios
and medians. Arms alternate order between repeats; each run gets a fresh emulator (the
same seed for every arm of one repeat) and one warm-up run comes first.

    python bench/loop.py --quick          # K=5, 1 repeat, N=4 (< 5 min), to a temp dir
    python bench/loop.py --repeats 3      # K=9, N=4 -> bench/results/loop.{txt,csv}
    python bench/loop.py --from-csv bench/results/loop.csv   # the table again
    python bench/loop.py --arms injob,chain,adaptive --out bench/results/loop_adaptive
    python bench/loop.py --arms injob,chain,adaptive --cluster busy --fast 1 \
        --queue-minutes 0.5 --out bench/results/loop_adaptive_busy

``loop_arms.py`` (the arms, the devices, a run's record) and this file (the vendor's
clock, the fillers, the bench) run the workload; ``loop_report.py`` reports on it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import read_rows, revision
from loop_arms import ARMS, BRAKET_TARGET, FILL_QUEUE, FILL_SECONDS, TARGET, Device, Run, on_braket
from loop_report import report, say, write_csv

from flux_quantum.protocol import events
from flux_quantum.timing.step_plan import DEFAULT_WEIGHT

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
EXAMPLE = REPO / "examples" / "qaoa"


class GearClock:
    """The emulator's clock for one run: x1 (wall speed) but while ``race`` runs it at
    ``fast`` up to a given emulated time, from which it goes on at x1. ``at(wall)`` and
    ``wall(emulated)`` map between the wall clock (``time.time()``) and emulated seconds.
    Thread-safe; emulated time never runs backwards."""

    def __init__(self, fast: float, wall_clock: Callable[[], float] = time.time) -> None:
        self.fast = fast
        self._wall_clock = wall_clock
        self.epoch = datetime.now(UTC).replace(microsecond=0)
        self._lock = threading.Lock()
        # (wall, emulated, speed, until) at the start of each segment: ``speed`` up to
        # emulated ``until``, x1 after it.
        self._segments: list[tuple[float, float, float, float]] = [
            (wall_clock(), 0.0, 1.0, math.inf)
        ]

    @staticmethod
    def _emulated(segment: tuple[float, float, float, float], wall: float) -> float:
        w0, e0, speed, until = segment
        emulated = e0 + (wall - w0) * speed
        if emulated <= until:
            return emulated
        return until + wall - (w0 + (until - e0) / speed)

    def now(self) -> float:
        return self.at(self._wall_clock())

    def at(self, wall: float) -> float:
        """The emulated time at ``wall``."""
        with self._lock:
            segments = list(self._segments)
        for segment in reversed(segments):
            if wall >= segment[0]:
                return self._emulated(segment, wall)
        return 0.0

    def wall(self, emulated: float) -> float:
        """The wall time at which the clock reads ``emulated``."""
        with self._lock:
            segments = list(self._segments)
        for w0, e0, speed, until in reversed(segments):
            if emulated >= e0:
                if emulated <= until:
                    return w0 + (emulated - e0) / speed
                return w0 + (until - e0) / speed + (emulated - until)
        return segments[0][0]

    def race(self, until: float) -> None:
        """Run at ``fast`` from now until the clock reads ``until``, then at x1."""
        with self._lock:
            wall = self._wall_clock()
            emulated = self._emulated(self._segments[-1], wall)
            if until > emulated:
                self._segments.append((wall, emulated, self.fast, until))


class Gear(threading.Thread):
    """Races the clock through each of the loop's tasks as soon as it is created, up to
    the end the emulator forecasts for it (the loop's tasks come one at a time)."""

    def __init__(self, emulator: Any, clock: GearClock) -> None:
        super().__init__(daemon=True)
        self.emulator, self.clock = emulator, clock
        self.done = threading.Event()

    def run(self) -> None:
        seen: set[str] = set()
        while not self.done.wait(0.002):
            for job in self.emulator.ibm.job_ids():
                if job in seen:
                    continue
                seen.add(job)
                ended = self.emulator.ibm.job_forecast(job).ended
                if ended is not None:
                    self.clock.race(ended)
            # The Braket pair: its tasks, and a hybrid job's start-up.
            for task in self.emulator.task_arns():
                if task in seen:
                    continue
                seen.add(task)
                ended = self.emulator.task_forecast(task).ended
                if ended is not None:
                    self.clock.race(ended)
            for job, starts in self.emulator.hybrid_job_starts().items():
                if job not in seen:
                    seen.add(job)
                    self.clock.race(starts)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def _join(values: list[float]) -> str:
    return " ".join(f"{v:.4f}" for v in values)


def held_while_pending(
    allocation: tuple[float, float], task: tuple[float, float], clock: GearClock, own: bool
) -> tuple[float, float, float]:
    """How a job's allocation and a task's pending time overlap (both in wall time), as
    (wall seconds of the allocation, their real seconds, real seconds idle). Real: a
    job waiting for its ``own`` task waits the vendor's time (the clock raced through
    it); a job ending while another job's task is pending (a step's tail after its
    successor's task was created) takes its wall time, and idles only as long as that
    task would really still be pending."""
    start = max(allocation[0], task[0])
    if not own:
        tail = max(0.0, allocation[1] - start) if start < task[1] else 0.0
        return tail, tail, min(tail, max(0.0, clock.at(task[1]) - clock.at(start)))
    end = min(allocation[1], task[1])
    if end <= start:
        return 0.0, 0.0, 0.0
    real = clock.at(end) - clock.at(start) if task[1] <= allocation[1] else end - start
    return end - start, real, real


class Filler(threading.Thread):
    """A busy cluster: ordinary jobs of 1..``nodes`` nodes, each running a time drawn
    from ``FILL_SECONDS``, submitted so that ``FILL_QUEUE`` of them are always queued."""

    def __init__(self, uri: str, nodes: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.uri, self.nodes = uri, nodes
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.ready = threading.Event()
        self.jobs: list[int] = []

    def run(self) -> None:
        import flux
        import flux.constants
        import flux.job

        handle = flux.Flux(self.uri)
        payload = {
            "max_entries": 0,
            "attrs": ["name"],
            "since": 0.0,
            "constraint": {"states": [flux.constants.FLUX_JOB_STATE_PENDING]},
        }
        while not self.done.is_set():
            try:
                jobs = handle.rpc("job-list.list", payload).get().get("jobs", [])
            except OSError:
                self.done.wait(0.5)
                continue
            waiting = sum(1 for j in jobs if j.get("name") == "filler")
            for _ in range(max(0, FILL_QUEUE - waiting)):
                seconds = self.rng.uniform(*FILL_SECONDS)
                size = self.rng.randint(1, self.nodes)
                spec = flux.job.JobspecV1.from_command(
                    ["sleep", f"{seconds:.1f}"], num_tasks=size, num_nodes=size
                )
                spec.duration = seconds + 10.0
                spec.setattr("system.job.name", "filler")
                self.jobs.append(int(flux.job.submit(handle, spec)))
            if waiting >= FILL_QUEUE:
                self.ready.set()
            self.done.wait(0.5)

    def stop(self) -> None:
        if not self.is_alive():
            return
        self.done.set()
        self.join(timeout=10)
        import flux
        import flux.job

        handle = flux.Flux(self.uri)
        for jobid in self.jobs:
            with contextlib.suppress(OSError):
                flux.job.cancel(handle, jobid)


class Bench:
    """One Flux instance of N nodes with the handler service; a fresh emulator per run."""

    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        from flux_quantum.cli.demo import Instance
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator
        from flux_quantum.job.consumer import shell_plugin_path

        self.work, self.args = work, args
        self.device = Device(
            args.queue_minutes,
            args.job_seconds,
            args.shots,
            args.fast,
            args.hybrid_startup,
            args.hybrid_price,
        )
        for sub in ("conf", "out", "loops", "state"):
            (work / sub).mkdir()
        (work / "conf" / "quantum.toml").write_text(instance_config())
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(self.device.catalog())
        self.clock = GearClock(args.fast)
        self.emulator = Emulator(
            self.device.braket_scenario(), clock=self.clock, ibm=self.device.scenario()
        ).start()
        self.port = int(self.emulator.url.rsplit(":", 1)[1])
        # What the service and the jobs inherit: QRMI's settings reaching the emulator's
        # IBM side, and where the local vendor finds its Braket side (the same port every
        # run), where loops are registered.
        os.environ.update(self.emulator.ibm.env(self.emulator.url))
        os.environ["FLUX_QUANTUM_EMULATOR_URL"] = self.emulator.url
        os.environ["XDG_STATE_HOME"] = str(work / "state")
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"], capture_output=True, text=True
        ).stdout.strip()
        opts = [f"-Sconf.shell_pluginpath={builtin}:{shell_plugin_path().parent}"]
        self.inst = Instance(work, args.nodes, opts)

    def start_service(self) -> None:
        """A fresh service for every run: what it learns of the device (its drain) from
        one run's emulator must not carry over to the next run's fresh queue."""
        self.flux("quantum", "service", "stop", check=False)
        self.flux(
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--poll-min={self.args.poll_min:g}",
            "--poll-cold-max=1",
            "--poll-max=10",
            f"--scan-interval={self.args.scan_interval:g}",
            "--cluster-interval=0.5",
            "--device-check-interval=30",
            "--tick=0.05",
        )

    def flux(self, *argv: str, check: bool = True, timeout: float = 120.0) -> str:
        proc = subprocess.run(
            ["flux", *argv],
            env=self.inst.env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"flux {' '.join(argv)}: {(proc.stderr or proc.stdout)[-600:]}")
        return proc.stdout

    def close(self) -> None:
        try:
            self.flux("quantum", "service", "stop", check=False)
            self.inst.stop()
        finally:
            self.emulator.stop()

    def fresh(self, seed: int) -> Any:
        """A new emulator on the same port: every run meets the device as described."""
        from flux_quantum.emulator import Emulator

        calls: list[Any] = []
        self.emulator.stop()
        self.clock = GearClock(self.args.fast)
        self.emulator = Emulator(
            self.device.braket_scenario(),
            clock=self.clock,
            port=self.port,
            seed=seed,
            ibm=self.device.scenario(),
            on_call=calls.append,
        ).start()
        return calls

    # -- the arms

    def run(self, arm: str, repeat: int, iterations: int, seed: int) -> Run:
        run = Run(arm, repeat, self.args.nodes, 1 + 2 * iterations, seed)
        calls = self.fresh(seed)
        self.start_service()
        gear = Gear(self.emulator, self.clock)
        gear.start()
        filler = Filler(self.inst.env["FLUX_URI"], self.args.nodes, seed)
        run.cluster = self.args.cluster
        if self.args.cluster == "busy":
            filler.start()
            filler.ready.wait(60)
        jobids: list[str] = []
        journal = None
        try:
            if arm.startswith("injob"):
                state = self._injob(run, iterations, jobids)
            else:
                state, journal = self._chain(run, iterations, jobids)
            self.flux("quantum", "service", "status", "--wait-idle=60", "--json", timeout=90)
            self._measure(run, jobids, calls, state, journal)
        except Exception as exc:  # a failed run is reported, not hidden
            run.error = f"{type(exc).__name__}: {exc}"[:500]
            for jobid in jobids:
                self.flux("cancel", jobid, check=False)
        finally:
            gear.stop()
            filler.stop()
            self.flux("job", "purge", "--force", "--num-limit=0", check=False)
        return run

    def _injob(self, run: Run, iterations: int, jobids: list[str]) -> dict[str, Any]:
        session = run.arm.endswith("session")
        out = self.work / "out" / f"{run.arm}-{run.repeat}"
        argv = [
            "submit",
            f"-N{run.nodes}",
            f"-n{run.nodes}",
            "-t",
            "30m",
            # rank 0 loops while the others are done: not killed 30 s after they exit
            # (a task of the busy cluster's x1 clock takes longer than that)
            "-o",
            "exit-timeout=none",
            f"--output={out}.out",
            f"--error={out}.err",
            f"--job-name=loop-{run.arm}",
            f"--setattr=qpu.device={TARGET}",
            f"--setattr=qpu.program={EXAMPLE / 'start.qasm'}",
            f"--setattr=qpu.shots={self.args.shots}",
            "--setattr=qpu.release_at=done",
            *(["--setattr=qpu.session=dedicated"] if session else []),
            sys.executable,
            str(EXAMPLE / "injob.py"),
            "--iterations",
            str(iterations),
            "--state",
            f"{out}.state.json",
            *(["--session"] if session else []),
        ]
        jobids.append(self.flux(*argv).strip())
        timeout = self.args.run_timeout
        self.flux(
            "job", "wait-event", "-t", f"{timeout:g}", jobids[0], "clean", timeout=timeout + 30
        )
        log = events.parse_eventlog(self.flux("job", "eventlog", "-f", "json", jobids[0]))
        finish = events.first(log, "finish")
        if finish is None or finish.context.get("status", 0) != 0:
            err = Path(f"{out}.err").read_text(errors="replace")[-400:]
            raise RuntimeError(f"job {jobids[0]} failed: {err}")
        return json.loads(Path(f"{out}.state.json").read_text())

    def _chain(self, run: Run, iterations: int, jobids: list[str]) -> tuple[dict[str, Any], Path]:
        from flux_quantum.job.loop import LoopDir

        directory = self.work / "loops" / f"{run.arm}-{run.repeat}"
        argv = [
            "quantum",
            "loop",
            "submit",
            f"--qpu={BRAKET_TARGET if on_braket(run.arm) else TARGET}",
            f"--program={EXAMPLE / 'start.qasm'}",
            f"--shots={self.args.shots}",
            *(["--session=dedicated"] if run.arm.endswith(("session", "hybrid")) else []),
            # the plain chains give every step's nodes back; adaptive decides each step
            f"--time-weight={self.args.time_weight if run.arm == 'adaptive' else 0:g}",
            "--maximize",
            f"--max-iterations={run.k}",
            f"--dir={directory}",
            f"--name=bench-{run.arm}-{run.repeat}-{run.seed}",
            f"-N{run.nodes}",
            "-t",
            "10m",
            sys.executable,
            str(EXAMPLE / "step.py"),
            "--iterations",
            str(iterations),
        ]
        loop_id = self.flux(*argv).strip()
        timeout = self.args.run_timeout
        waited = subprocess.run(
            ["flux", "quantum", "loop", "wait", loop_id, "--timeout", f"{timeout:g}"],
            env=self.inst.env,
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        loop = LoopDir.open(directory)
        history = loop.history()
        jobids += [str(j) for _, j in sorted(history.submitted.items())]
        if waited.returncode != 0:
            raise RuntimeError(f"loop {loop_id}: {(waited.stdout + waited.stderr).strip()[-400:]}")
        for jobid in jobids:  # every step has ended, the last one too
            self.flux("job", "wait-event", "-t", "60", jobid, "clean", timeout=90)
        return json.loads(loop.state_file.read_text()), directory / "journal.jsonl"

    # -- what a run measured

    def _measure_braket(self, run: Run, calls: list[Any]) -> None:
        """The Braket pair's sessions (hybrid jobs), calls and cost: the tasks' and each
        hybrid job's instance time (the emulator's bill)."""
        bill = self.emulator.report()["bill"]
        jobs = [s for s in bill["sessions"] if s["mode"] == "hybrid"]
        run.sessions_opened = len(jobs)
        run.sessions_closed = sum(1 for s in jobs if s["state"] == "closed")
        run.session_jobs = sum(len(s["jobs"]) for s in jobs)
        run.calls = len(calls)
        run.calls_create = sum(1 for c in calls if c.operation == "CreateQuantumTask")
        run.calls_poll = sum(1 for c in calls if c.operation == "GetQuantumTask")
        run.calls_session = sum(
            1 for c in calls if c.operation in ("CreateJob", "GetJob", "CancelJob")
        )
        run.hybrid_cost = sum(float(s["cost"]) for s in jobs)
        run.cost = float(bill["total"]) + run.hybrid_cost

    @staticmethod
    def _owners(
        run: Run, tasks: list[str], logs: list[list[Any]], holders: list[int]
    ) -> dict[str, int]:
        """Which job (index among the jobs that ran) each task is for: every task of an
        in-job loop is its one job's; a chain's task k is step k's (its ``qpu-task``
        event), ``holders[j]``: the job that waited for job j's task (the step before,
        when iteration j ran in place)."""
        if run.arm.startswith("injob"):
            return dict.fromkeys(tasks, 0)
        owners = {}
        for j, log in enumerate(logs):
            found = events.first(log, events.TASK)
            if found is not None and holders[j] >= 0:
                owners[str(found.context.get("task"))] = holders[j]
        return owners

    @staticmethod
    def _journal(path: Path | None) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path else []

    def _measure(
        self,
        run: Run,
        jobids: list[str],
        calls: list[Any],
        state: dict[str, Any],
        journal: Path | None,
    ) -> None:
        from flux.job import JobID

        ibm, clock = self.emulator.ibm, self.clock
        braket = on_braket(run.arm)
        tasks = self.emulator.task_arns() if braket else ibm.job_ids()
        timeline = self.emulator.task_timeline if braket else ibm.job_timeline
        lines = [timeline(t) for t in tasks]
        if any(line.ended is None for line in lines):
            raise RuntimeError("a task of the loop has not ended")
        pending = [(line.created, line.ended) for line in lines]
        logs = [
            events.parse_eventlog(self.flux("job", "eventlog", "-f", "json", j)) for j in jobids
        ]
        stamps = [events.first_times(log) for log in logs]
        # An adaptive step whose iteration ran in place never started: the job before
        # it waited for its task on its nodes.
        ran = [j for j, stamp in enumerate(stamps) if "start" in stamp]
        allocations = [(stamps[j]["start"], stamps[j]["finish"]) for j in ran]
        records = self._journal(journal)
        host_of = {  # a step's job -> the job that ran its iteration in place
            r["jobid"]: h
            for r in records
            if r.get("name") == "submitted"
            for h in [
                next(
                    (
                        x["jobid"]
                        for x in records
                        if x.get("name") == "started" and x["iteration"] == r["iteration"]
                    ),
                    r["jobid"],
                )
            ]
            if h != r["jobid"]
        }
        ids = [int(JobID(j)) for j in jobids]
        where = {ids[j]: n for n, j in enumerate(ran)}
        holders = [where.get(host_of.get(ids[j], ids[j]), -1) for j in range(len(jobids))]
        run.jobs, run.tasks = len(jobids), len(tasks)
        run.t_submit, run.t_end = stamps[0]["submit"], max(b for _, b in allocations)
        run.ttr_wall = run.t_end - run.t_submit
        run.ttr = clock.at(run.t_end) - clock.at(run.t_submit)
        run.pending = sum(e - c for c, e in pending)
        run.own = run.ttr - run.pending
        ends = [clock.wall(e) for _, e in pending]
        creates = [clock.wall(c) for c, _ in pending]
        owners = self._owners(run, tasks, logs, holders)
        overlaps = [
            held_while_pending(a, task, clock, owners.get(t) == n)
            for n, a in enumerate(allocations)
            for t, task in zip(tasks, zip(creates, ends, strict=True), strict=True)
        ]
        run.idle = run.nodes * sum(idle for _, _, idle in overlaps)
        # A job's other time passed at x1 (no task of its own pending): its wall time.
        allocated = sum(b - a for a, b in allocations)
        run.held = run.nodes * (allocated + sum(real - w for w, real, _ in overlaps))
        run.wait_first = pending[0][1] - pending[0][0]
        if len(pending) > 1:
            run.wait_later = statistics.median(e - c for c, e in pending[1:])
        run.gaps = _join([c - e for e, c in zip(ends, creates[1:], strict=False)])
        if not run.arm.startswith("injob"):
            index = {task: k for k, task in enumerate(tasks)}
            overheads, detects, steps, waits = [], [], [], []
            for log, stamp in zip(logs, stamps, strict=True):
                if "start" not in stamp:
                    continue
                found = events.first(log, events.TASK)
                task = found.context.get("task") if found else None
                if task in index:
                    overheads.append(stamp["start"] - ends[index[task]])
                    detects.append(stamp[events.RELEASE] - ends[index[task]])
                if events.RELEASE in stamp:
                    entered = max(stamp[events.RELEASE], stamp.get("depend", 0.0))
                    waits.append(stamp["start"] - entered)
                steps.append(stamp["finish"] - stamp["start"])
            run.overheads, run.detects = _join(overheads), _join(detects)
            run.node_waits = _join(waits)
            started = {}  # jobid -> when its rank 0 journaled that the step runs
            for record in records:
                if record.get("name") == "started":
                    started.setdefault(int(record["jobid"]), float(record["t"]))
            run.startups = _join(
                [
                    started[ids[j]] - stamps[j]["start"]
                    for j in ran
                    if ids[j] in started and started[ids[j]] >= stamps[j]["start"]
                ]
            )
            run.step_seconds = _join(steps)
            plans = [r["plan"]["action"] for r in records if r.get("name") == "planned"]
            run.plans = " ".join(plans)
            run.in_place = sum(
                1 for r in records if r.get("name") == "held" and r.get("outcome") == "in place"
            )
        if braket:
            self._measure_braket(run, calls)
        else:
            sessions = ibm.session_ids()
            run.sessions_opened = len(sessions)
            run.sessions_closed = sum(1 for s in sessions if ibm.session_state(s) == "closed")
            run.session_jobs = sum(len(ibm.session_jobs(s)) for s in sessions)
            run.calls = len(calls)
            run.calls_create = sum(1 for c in calls if c.operation == "CreateJob")
            run.calls_poll = sum(1 for c in calls if c.operation in ("GetJob", "ListJobs"))
            run.calls_session = sum(1 for c in calls if "Session" in c.operation)
        best = state.get("best")
        run.best = float(best["value"]) if isinstance(best, dict) else None
        run.evaluated = int(state.get("evaluated") or 0)
        if run.tasks != run.k or run.evaluated != run.k:
            raise RuntimeError(f"{run.tasks} tasks and {run.evaluated} evaluations, not {run.k}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K=5, 1 repeat (< 5 minutes)")
    parser.add_argument("--iterations", type=int, help="SPSA iterations: K = 1 + 2 I (4; 2)")
    parser.add_argument("--repeats", type=int, help="runs per arm (3; quick 1)")
    parser.add_argument("--nodes", type=int, default=4, help="N: nodes of the loop (4)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma list of " + ",".join(ARMS))
    parser.add_argument("--shots", type=int, default=1000, help="shots per task (1000)")
    parser.add_argument("--queue-minutes", type=float, default=40.0, help="public queue (40)")
    parser.add_argument("--job-seconds", type=float, default=0.5, help="a background job (0.5)")
    parser.add_argument("--fast", type=float, default=1200.0, help="clock speed in a task")
    parser.add_argument(
        "--hybrid-startup", type=float, default=120.0, help="a hybrid job's start, s (120)"
    )
    parser.add_argument(
        "--hybrid-price", type=float, default=0.36, help="its instance, $/h (0.36, assumed)"
    )
    parser.add_argument("--poll-min", type=float, default=0.1, help="service's IBM poll (0.1)")
    parser.add_argument("--scan-interval", type=float, default=0.1, help="service scan (0.1)")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument(
        "--cluster",
        choices=("idle", "busy"),
        default="idle",
        help="idle: nothing else runs; busy: ordinary jobs keep the nodes busy and queued",
    )
    parser.add_argument(
        "--time-weight",
        type=float,
        default=DEFAULT_WEIGHT,
        help=f"the adaptive arm's loop time weight (default {DEFAULT_WEIGHT:g})",
    )
    parser.add_argument("--out", type=Path, help="results stem (bench/results/loop)")
    parser.add_argument("--from-csv", type=Path, help="the table of an earlier CSV again")
    parser.add_argument("--work", type=Path, help="keep the runs' files here (a new directory)")
    args = parser.parse_args(argv)
    if args.from_csv:
        rows = read_rows(args.from_csv, Run)
        args.iterations = (rows[0].k - 1) // 2 if rows else 0
        args.repeats = max((r.repeat for r in rows), default=-1) + 1
        text = report(rows, args, 0.0)
        print(text)
        return 0
    args.iterations = args.iterations or (2 if args.quick else 4)
    args.repeats = args.repeats or (1 if args.quick else 3)
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {unknown}; accepted: {', '.join(ARMS)}")
    if args.iterations < 1 or args.nodes < 1 or args.repeats < 1:
        parser.error("--iterations, --nodes and --repeats must be integers >= 1")
    if shutil.which("flux") is None:
        print("loop: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    if args.out is None:
        quick = Path(tempfile.gettempdir()) / "fq-loop-quick" / "loop"
        args.out = quick if args.quick else RESULTS / "loop"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.revision = revision(REPO)
    t0 = time.monotonic()
    rows: list[Run] = []
    with contextlib.ExitStack() as stack:
        if args.work is not None:
            args.work.mkdir(parents=True)
            work = args.work
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fq-loop-")))
        bench = Bench(work, args)
        try:
            # One run first, not measured: imports, connections, the simulator's start.
            warm = bench.run("chain-session", -1, 1, seed=1)
            print(f"warm-up: {warm.error or 'ok'} ({warm.ttr_wall:.1f} s wall)", flush=True)
            for repeat in range(args.repeats):
                order = arms if repeat % 2 == 0 else list(reversed(arms))
                for arm in order:
                    run = bench.run(arm, repeat, args.iterations, seed=100 + repeat)
                    rows.append(run)
                    say(run)
        finally:
            bench.close()
    wall = time.monotonic() - t0
    write_csv(rows, args.out.with_suffix(".csv"))
    text = report(rows, args, wall)
    args.out.with_suffix(".txt").write_text(text + "\n")
    print()
    print(text)
    print(f"\nwritten: {args.out.with_suffix('.txt')}, {args.out.with_suffix('.csv')}")
    return 1 if not rows or any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
