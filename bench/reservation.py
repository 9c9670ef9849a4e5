#!/usr/bin/env python3
"""Reserved QPU time: a Braket Direct window co-allocated with the cluster, against the public queue.

A busy Braket QPU (IonQ-Forte-like prices: $0.30 a task + $0.08 a shot on demand, $7,000
an hour reserved) whose public queue holds ``--queue-hours`` of other customers' tasks
and never drains (as many arrive as are served). ``--jobs`` hybrid jobs, each a
variational loop that iterates from inside (``bench/reservation_job.py``): its first task
is the job's qpu request, then ``--tasks`` - 1 more that the job creates itself with the
Braket SDK after ``--think`` seconds of classical work each, waiting for every one on its
node. Both arms run the same jobs on a real Flux (one broker whose R has 64 cores: a job
is one core and stands for one node, ``-n1``), the quantum jobtap plugin, the job-shell
plugin and the handler service, against the project's emulator (Braket's wire protocol,
the real amazon-braket-sdk in the jobs and the service):

on-demand
    ``--setattr=qpu.device=local-forte``: held until its first task is done (the default
    release point), then every later task joins the public queue from the back.
reservation
    the site booked one window of ``--window-minutes`` on the device, opening
    ``--opens-in`` minutes after the start (``[[quantum.reservations]]``, ``jobs = 2``);
    every job asks for it (``--setattr=qpu.reservation=forte-window``, and
    ``qpu.reservation_end=fail``: a job the window cannot take fails rather than wait
    hours). The service holds each job with no node until the window opens within its
    lead, admits two at a time (their first task created with the reservation's ARN,
    QUEUED until the window opens), releases them at top priority, and the jobs' own
    later tasks carry the ARN through the SDK's ``DirectReservation`` variables, which
    the job-shell plugin sets.

Time. The emulator's clock runs ``--speed`` times the wall clock (a separate speed per
arm: the public queue's hours pass quickly; the window runs slower, so that Flux's own
latencies stay small against the tasks' seconds), and the service and the site's window
are on the wall clock, mapped exactly (one linear segment per arm). Every figure is in
the vendor's seconds unless said otherwise.

Measured per arm: idle node-seconds (a job's node held while one of its tasks is pending:
created and not ended), jobs and tasks completed, time to result (submit -> the job's
end), the window's utilisation (QPU seconds of the reservation's tasks that ran in it /
its length, from the emulator's bill) and its tasks started outside it (must be none),
the cost per completed task (the bill / tasks; the window costs its price whatever runs),
vendor calls. Targets (issue 21): idle node-seconds with the reservation <= 1 % of
on-demand's; window utilisation >= 80 % (enough work waits: ``--jobs`` x ``--tasks``
tasks exceed the window); zero tasks sent with the window's ARN outside it. The table
says met or MISSED.

    python bench/reservation.py --quick   # 8 jobs, a 20-minute window (< 5 min)
    python bench/reservation.py           # 16 jobs, a one-hour window -> bench/results/reservation.*
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import flux_command, revision, verdict

from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
JOB = Path(__file__).resolve().parent / "reservation_job.py"
DEVICE = "local-forte"
DEVICE_ARN = "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1"
WINDOW = "forte-window"
WINDOW_ARN = "arn:aws:braket:us-east-1:123456789012:reservation/forte-window-bench"
ARMS = ("on-demand", "reservation")
CORES = 64


@dataclass(frozen=True)
class Setup:
    """The device and the workload, in the vendor's seconds."""

    queue_hours: float
    background_seconds: float
    task_seconds: float  # one of our tasks, shots included
    shots: int
    per_task: float
    per_shot: float
    per_hour: float
    jobs: int
    tasks: int
    think: float
    window_minutes: float
    opens_in: float  # minutes after the arm starts
    window_jobs: int

    @property
    def shot_seconds(self) -> float:
        return (self.task_seconds - self.background_seconds) / self.shots

    def scenario(self, window: tuple[float, float] | None) -> dict[str, Any]:
        depth = round(self.queue_hours * 3600 / self.background_seconds)
        data: dict[str, Any] = {
            "devices": [
                {
                    "arn": DEVICE_ARN,
                    "name": "Forte 1",
                    "qubits": 36,
                    "cost": {"price": self.per_shot, "unit": "shot", "task_price": self.per_task},
                    "shots": [1, 10000],
                    "queue": {
                        "depth": depth,
                        "arrival_rate": 1.0 / self.background_seconds,
                        "service_time": self.background_seconds,
                        "distribution": "fixed",
                        "shot_time": self.shot_seconds,
                    },
                }
            ]
        }
        if window is not None:
            data["reservations"] = [
                {
                    "arn": WINDOW_ARN,
                    "device": DEVICE_ARN,
                    "start": window[0],
                    "end": window[1],
                    "price_per_hour": self.per_hour,
                }
            ]
        return data

    def catalog(self, speed: float) -> str:
        # The service learns the drain from positions; its prior is in wall seconds.
        drain = self.background_seconds / speed
        return (
            "currency: USD\n"
            "devices:\n"
            f"  - name: {DEVICE}\n"
            "    vendor: local\n"
            f"    id: {DEVICE_ARN}\n"
            "    class: qpu\n"
            "    qubits: 36\n"
            f"    price: {{per_task: {self.per_task}, per_shot: {self.per_shot}}}\n"
            f"    properties: {{drain_seconds_per_task: {drain:.6g}}}\n"
        )


@dataclass
class Run:
    """One arm's figures (vendor seconds unless said otherwise)."""

    arm: str
    speed: float
    jobs: int = 0
    jobs_done: int = 0
    jobs_failed: int = 0
    jobs_cut: int = 0  # on nodes, stopped early (a task refused or cancelled at the end)
    jobs_held: int = 0  # never on nodes (the window's end rule failed them while held)
    tasks: int = 0
    tasks_done: int = 0
    idle: float = 0.0
    idle_first: float = 0.0
    ttr_median: float = 0.0
    ttr_max: float = 0.0
    pending_median: float = 0.0  # per completed job: its tasks' vendor time (created -> ended)
    window_seconds: float = 0.0
    window_used: float = 0.0
    utilisation: float = 0.0
    outside: int = 0
    overrun: float = 0.0
    cost: float = 0.0
    cost_per_task: float = 0.0
    calls: int = 0
    wall: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


class Arm:
    """One Flux instance, emulator and service for one arm."""

    def __init__(self, work: Path, setup: Setup, arm: str, speed: float) -> None:
        from flux_quantum.cli.demo import Instance
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario
        from flux_quantum.emulator.clock import ScaledClock
        from flux_quantum.job.consumer import shell_plugin_path

        self.work, self.setup, self.arm, self.speed = work, setup, arm, speed
        for sub in ("conf", "out"):
            (work / sub).mkdir(parents=True)
        r = subprocess.run(
            [
                "flux",
                "R",
                "encode",
                "--ranks=0",
                f"--cores=0-{CORES - 1}",
                f"--hosts={socket.gethostname()}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (work / "R.json").write_text(r)
        (work / "conf" / "quantum.toml").write_text(
            instance_config() + f'\n[resource]\nnoverify = true\npath = "{work / "R.json"}"\n'
        )
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(setup.catalog(speed))
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"], capture_output=True, text=True
        ).stdout.strip()
        opts = [f"-Sconf.shell_pluginpath={builtin}:{shell_plugin_path().parent}"]
        self.inst = Instance(work, 1, opts)
        self.calls: list[Any] = []
        self.clock = ScaledClock(speed)
        opens = setup.opens_in * 60
        self.window = (opens, opens + setup.window_minutes * 60) if arm == "reservation" else None
        self.emulator = Emulator(
            scenario=Scenario.from_dict(setup.scenario(self.window), source="bench"),
            clock=self.clock,
            seed=1,
            on_call=self.calls.append,
        ).start()
        self.env = dict(
            self.inst.env,
            FLUX_QUANTUM_EMULATOR_URL=self.emulator.url,
            FLUX_QUANTUM_BACKENDS=str(self.catalog),
        )

    def flux(self, *argv: str, check: bool = True, timeout: float = 120.0) -> str:
        return flux_command(self.env, self.work, argv, check=check, timeout=timeout)

    def close(self) -> None:
        try:
            self.flux("quantum", "service", "stop", check=False)
            self.inst.stop()
        finally:
            self.emulator.stop()

    def configure(self) -> None:
        """The clock starts; the site's window goes into the instance's configuration
        on the wall clock (what an admin writes from the booking), then the service."""
        self.t0 = self.clock.start()
        if self.window is not None:
            start, end = (self.clock.wall(t) for t in self.window)
            (self.work / "conf" / "reservations.toml").write_text(
                "[[quantum.reservations]]\n"
                f'name = "{WINDOW}"\n'
                f'device = "{DEVICE}"\n'
                f'arn = "{WINDOW_ARN}"\n'
                f"start = {start:.3f}\n"
                f"end = {end:.3f}\n"
                f"cost = {self.setup.per_hour * self.setup.window_minutes / 60:.2f}\n"
                'on_end = "fail"\n'
                f"jobs = {self.setup.window_jobs}\n"
            )
            self.flux("config", "reload")
        scan = max(0.05, min(1.0, 30 / self.speed))
        self.flux(
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            "--poll-min=0.1",
            "--poll-cold-max=1",
            "--poll-max=2",
            f"--scan-interval={scan:g}",
            "--cluster-interval=0.5",
            "--device-check-interval=5",
            "--tick=0.05",
            "--startup-default=0.5",
        )

    def submit_all(self) -> list[str]:
        setup = self.setup
        think = setup.think / self.speed
        # A job polls its own tasks every few vendor seconds in a window, every few
        # vendor minutes in an hours-long public queue (a poll is a process's CPU here).
        poll = 0.05 if self.arm == "reservation" else 0.25
        attrs = (
            [f"--setattr=qpu.device={DEVICE}"]
            if self.arm == "on-demand"
            else [f"--setattr=qpu.reservation={WINDOW}", "--setattr=qpu.reservation_end=fail"]
        )
        jobids = []
        for j in range(setup.jobs):
            out = self.work / "out" / f"job{j}"
            jobids.append(
                self.flux(
                    "submit",
                    "-n1",
                    "-t",
                    "2h",
                    f"--job-name=hybrid{j}",
                    f"--output={out}.out",
                    f"--error={out}.err",
                    *attrs,
                    f"--setattr=qpu.shots={setup.shots}",
                    sys.executable,
                    str(JOB),
                    f"--tasks={setup.tasks}",
                    f"--think={think:.4f}",
                    f"--shots={setup.shots}",
                    f"--poll={poll:g}",
                    f"--out={out}.json",
                ).strip()
            )
        return jobids

    def run(self, timeout: float) -> Run:
        run = Run(self.arm, self.speed)
        wall = time.monotonic()
        jobids: list[str] = []
        try:
            self.configure()
            jobids = self.submit_all()
            deadline = time.monotonic() + timeout
            for jobid in jobids:
                left = max(1.0, deadline - time.monotonic())
                self.flux("job", "wait-event", "-t", f"{left:g}", jobid, "clean", timeout=left + 30)
            self.flux("quantum", "service", "status", "--wait-idle=60", timeout=90)
            self.measure(run, jobids)
        except Exception as exc:  # a failed arm is reported, not hidden
            run.error = f"{type(exc).__name__}: {exc}"[:500]
            for jobid in jobids:
                self.flux("cancel", jobid, check=False)
        run.wall = time.monotonic() - wall
        return run

    def measure(self, run: Run, jobids: list[str]) -> None:
        clock = self.clock
        report = self.emulator.report()
        bill = report["bill"]
        rows = {row["id"]: row for row in bill["tasks"]}
        run.jobs = len(jobids)
        ttrs, pendings, idle, idle_first = [], [], 0.0, 0.0
        for j, jobid in enumerate(jobids):
            log = events.parse_eventlog(self.flux("job", "eventlog", "-f", "json", jobid))
            stamps = events.first_times(log)
            out = self.work / "out" / f"job{j}.json"
            record = json.loads(out.read_text()) if out.exists() else None
            finish = events.first(log, "finish")
            ok = (
                record is not None
                and finish is not None
                and finish.context.get("status", 1) == 0
                and record["stopped"] is None
            )
            run.jobs_done += ok
            run.jobs_failed += not ok
            if "start" not in stamps or record is None:
                run.jobs_held += not ok
                continue
            run.jobs_cut += not ok
            pending_sum = 0.0
            held = (clock.at(stamps["start"]), clock.at(stamps.get("finish", stamps["start"])))
            for k, task in enumerate(record["tasks"]):
                row = rows.get(task["id"])
                if row is None or row.get("ended") is None:
                    continue
                pending_sum += float(row["ended"]) - float(row["created"])
                pending = overlap((float(row["created"]), float(row["ended"])), held)
                idle += pending
                idle_first += pending if k == 0 else 0.0
            if ok:
                ttrs.append(clock.at(stamps["finish"]) - clock.at(stamps["submit"]))
                pendings.append(pending_sum)
        run.idle, run.idle_first = idle, idle_first
        if ttrs:
            ttrs.sort()
            run.ttr_median = ttrs[len(ttrs) // 2]
            run.ttr_max = ttrs[-1]
            pendings.sort()
            run.pending_median = pendings[len(pendings) // 2]
        ours = list(bill["tasks"])
        run.tasks = len(ours)
        run.tasks_done = sum(1 for row in ours if row.get("state") == "COMPLETED")
        run.cost = float(bill["total"])
        run.cost_per_task = run.cost / run.tasks_done if run.tasks_done else 0.0
        run.calls = len(self.calls)
        if self.window is not None:
            start, end = self.window
            run.window_seconds = end - start
            windows = [w for w in bill.get("reservations", []) if w.get("arn") == WINDOW_ARN]
            run.window_used = float(windows[0]["used_seconds"]) if windows else 0.0
            run.utilisation = run.window_used / run.window_seconds
            for row in ours:
                if row.get("reservation") != WINDOW_ARN:
                    continue
                started = row.get("started")
                if float(row["created"]) >= end or (
                    started is not None and not start <= float(started) < end
                ):
                    run.outside += 1
                if row.get("ended") is not None:
                    run.overrun = max(run.overrun, float(row["ended"]) - end)
        else:
            run.notes.append(
                "no window booked: every task joined the public queue of "
                f"{self.setup.queue_hours:g} h"
            )


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def report(runs: dict[str, Run], setup: Setup, args: argparse.Namespace, wall: float) -> str:
    od, rs = runs.get("on-demand"), runs.get("reservation")
    lines = [
        f"flux-quantum reserved-window benchmark: {datetime.now(UTC):%Y-%m-%d}, commit "
        f"{args.revision}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"command: python bench/reservation.py {' '.join(sys.argv[1:])}; took {wall / 60:.1f} min",
        f"device: emulated Braket QPU {DEVICE} (Forte-like), public queue {setup.queue_hours:g} h "
        f"of {setup.background_seconds:g} s tasks at utilisation 1; our tasks "
        f"{setup.task_seconds:g} s ({setup.shots} shots); on demand ${setup.per_task:g}/task + "
        f"${setup.per_shot:g}/shot; reserved ${setup.per_hour:g}/h",
        f"workload: {setup.jobs} jobs of 1 node, {setup.tasks} tasks each (the first the "
        f"job's request, the rest created from inside after {setup.think:g} s of classical "
        f"work); window {setup.window_minutes:g} min opening {setup.opens_in:g} min after "
        f"the start, {setup.window_jobs} jobs on nodes at once; clock x{args.speed_on_demand:g} "
        f"(on-demand) and x{args.speed_window:g} (reservation)",
        "",
        f"{'arm':<12} {'jobs ok':>8} {'tasks':>6} {'idle node-h':>12} {'1st-task idle':>14} "
        f"{'ttr median':>11} {'ttr max':>9} {'window use':>11} {'outside':>8} "
        f"{'$/task':>8} {'bill $':>9} {'calls':>6} {'wall s':>7}",
    ]
    for run in runs.values():
        use = f"{run.utilisation:.1%}" if run.window_seconds else "-"
        lines.append(
            f"{run.arm:<12} {run.jobs_done:>4}/{run.jobs:<3} {run.tasks_done:>6} "
            f"{run.idle / 3600:>12.3f} {run.idle_first / 3600:>14.3f} {_h(run.ttr_median):>11} "
            f"{_h(run.ttr_max):>9} {use:>11} {run.outside:>8} {run.cost_per_task:>8.2f} "
            f"{run.cost:>9.2f} {run.calls:>6} {run.wall:>7.0f}"
        )
        if run.error:
            lines.append(f"  {run.arm} FAILED: {run.error}")
        if run.jobs_failed:
            lines.append(
                f"  {run.arm}: {run.jobs_failed} job(s) not done: {run.jobs_cut} stopped on "
                f"their nodes (a task refused or cancelled at the window's end), "
                f"{run.jobs_held} failed while held (no task fitted before the end)"
            )
        for note in run.notes:
            lines.append(f"  {run.arm}: {note}")
    lines.append("")
    if od is not None and rs is not None and not od.error and not rs.error:
        ratio = rs.idle / od.idle if od.idle else float("inf")
        lines += [
            "targets (issue 21):",
            f"  idle node-seconds, reservation / on-demand = {rs.idle:.0f} / {od.idle:.0f} = "
            f"{ratio:.2%} (<= 1 %): {verdict(ratio <= 0.01)}",
            f"  window utilisation {rs.utilisation:.1%} (>= 80 %, {setup.jobs} x {setup.tasks} "
            f"tasks of {setup.task_seconds:g} s waiting for {setup.window_minutes:g} min): "
            f"{verdict(rs.utilisation >= 0.80)}",
            f"  tasks with the window's ARN sent or started outside it: {rs.outside} (0): "
            f"{verdict(rs.outside == 0)}",
        ]
        if rs.overrun > 0:
            lines.append(
                f"  a task running at the window's end ran on {rs.overrun:.0f} s past it "
                "(Braket cancels queued work at the end; a task already running finishes)"
            )
        speedup = od.ttr_median / rs.ttr_median if rs.ttr_median else 0.0
        lines.append(
            f"  time to result (median): {_h(od.ttr_median)} on demand, {_h(rs.ttr_median)} in "
            f"the window ({speedup:.1f}x); cost per task ${od.cost_per_task:.2f} vs "
            f"${rs.cost_per_task:.2f}"
        )
        lines.append(
            f"  of which the tasks' own vendor time (created -> ended, summed per job; the "
            f"rest is Flux and Python at x{args.speed_on_demand:g}, where a wall second is "
            f"{args.speed_on_demand / 60:g} vendor minutes): {_h(od.pending_median)} on "
            f"demand, {_h(rs.pending_median)} in the window"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 jobs, 20-minute window (< 5 min)")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--window-minutes", type=float)
    parser.add_argument("--opens-in", type=float, default=5.0, help="minutes (5)")
    parser.add_argument("--queue-hours", type=float, default=3.0)
    parser.add_argument("--think", type=float, default=30.0, help="vendor seconds (30)")
    parser.add_argument("--shots", type=int, default=1000)
    parser.add_argument(
        "--speed-on-demand", type=float, help="the on-demand arm's clock (x600; quick x1200)"
    )
    parser.add_argument("--speed-window", type=float, default=30.0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall seconds per arm")
    args = parser.parse_args(argv)
    quick = args.quick
    args.jobs = args.jobs or (8 if quick else 16)
    args.tasks = args.tasks or (4 if quick else 6)
    args.window_minutes = args.window_minutes or (20.0 if quick else 60.0)
    args.speed_on_demand = args.speed_on_demand or (1200.0 if quick else 600.0)
    args.revision = revision(REPO, ("src", "bench"))
    setup = Setup(
        queue_hours=args.queue_hours,
        background_seconds=20.0,
        task_seconds=20.0 + 0.03 * args.shots,
        shots=args.shots,
        per_task=0.30,
        per_shot=0.08,
        per_hour=7000.0,
        jobs=args.jobs,
        tasks=args.tasks,
        think=args.think,
        window_minutes=args.window_minutes,
        opens_in=args.opens_in,
        window_jobs=2,
    )
    out = args.out or (None if quick else RESULTS)
    started = time.monotonic()
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="fq-reservation-") as tmp:
        for arm in args.arms.split(","):
            speed = args.speed_on_demand if arm == "on-demand" else args.speed_window
            print(f"-- {arm} (clock x{speed:g})", flush=True)
            bench = Arm(Path(tmp) / arm, setup, arm, speed)
            try:
                runs[arm] = bench.run(args.timeout)
            finally:
                bench.close()
            r = runs[arm]
            print(
                f"   {r.jobs_done}/{r.jobs} jobs, {r.tasks_done} tasks, idle "
                f"{r.idle / 3600:.3f} node-h, {r.wall:.0f} s {r.error}",
                flush=True,
            )
    text = report(runs, setup, args, time.monotonic() - started)
    print(text, end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "reservation.txt").write_text(text)
        (out / "reservation.json").write_text(
            json.dumps(
                {"setup": asdict(setup), "runs": [asdict(r) for r in runs.values()]}, indent=1
            )
            + "\n"
        )
        print(f"written: {out / 'reservation.txt'}, {out / 'reservation.json'}")
    failed = any(r.error for r in runs.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
