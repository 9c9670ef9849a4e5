#!/usr/bin/env python3
"""Braket's task events instead of polls: vendor calls per job and release lag.

N small jobs (``-n1``, ``true``) each ask for one task on one busy Braket QPU, submitted
in one burst, with the default release point (``done``: a job is released when its task
has ended). Every arm runs the same jobs on a real Flux (the quantum jobtap plugin and
the handler service) against the project's emulator (the real amazon-braket-sdk, and
boto3's SQS client for the events):

polls
    no events queue: every task is polled on the service's adaptive schedule.
events
    the catalog names the emulator's events queue (``vendors.local.events_queue``): the
    service long-polls it in one worker; an event wakes the poll of the task it names,
    and while events are heard a task is polled only a little after its end is due
    (at most every ``--events-poll`` wall seconds).
events-faults
    the same, and the emulator loses ``--lose`` of the events and sends ``--duplicate``
    of them twice (the copy up to 30 vendor seconds late, so after the next state's).

The device: an IQM-Garnet-like QPU ($0.30 a task + $0.00145 a shot), a public queue of
``--queue-minutes`` of ``--task-seconds`` background tasks at utilisation 1 (as many
arrive as are served); ours take ``--task-seconds`` plus 1 ms a shot. The catalog gives
it ``slots`` = jobs, so every task is in flight at once. The emulator's clock runs
``--speed`` times the wall clock; the service, Flux and the jobs are on the wall clock
(the catalog's drain prior is in wall seconds).

Measured per arm: vendor calls per job (GetQuantumTask; every Braket call; the SQS
calls of the events arms apart), release lag (a job's ``qpu-release``, mapped to the
vendor's clock, minus the moment its task ended in the emulator: p50, p95, max, in
vendor seconds), and that nothing was lost: every job released exactly once and
finished with exit 0, and the promise checker (``flux_quantum.testing.promises``) finds
no violation (one task a request, no job lost). The targets: the events arms make fewer
calls per job and lower release lag than polls, and lose nothing.

    python bench/events.py --quick   # 30 jobs, x20 (< 5 min), to a temp dir
    python bench/events.py           # 100 jobs, x10 -> bench/results/events.{txt,json}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import percentile, revision, verdict
from merge import OnInstance, core_count

from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
ARMS = ("polls", "events", "events-faults")
DEVICE = "garnet"
ARN = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
SHOT_SECONDS = 0.001
QUEUE = "braket-events"
BRAKET_READS = ("GetQuantumTask",)
SQS_CALLS = ("GetQueueUrl", "ReceiveMessage", "DeleteMessageBatch", "DeleteMessage")


@dataclass
class Run:
    """One arm's figures (vendor seconds unless said otherwise)."""

    arm: str
    jobs: int
    speed: float
    jobs_ok: int = 0  # finished with exit 0
    released_once: int = 0  # exactly one qpu-release on the eventlog
    tasks: int = 0
    polls: int = 0  # GetQuantumTask
    braket_calls: int = 0  # every Braket request (creates, polls, devices, tags, S3)
    sqs_calls: int = 0
    lag_p50: float = 0.0
    lag_p95: float = 0.0
    lag_max: float = 0.0
    events: dict[str, int] = field(default_factory=dict)  # the emulator's: sent, lost, twice
    heard: dict[str, int] = field(default_factory=dict)  # the service's counts
    violations: dict[str, int] = field(default_factory=dict)
    worst: list[tuple[str, str, float]] = field(default_factory=list)  # (job, task, lag)
    wall: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def polls_per_job(self) -> float:
        return self.polls / self.jobs if self.jobs else 0.0

    @property
    def calls_per_job(self) -> float:
        return self.braket_calls / self.jobs if self.jobs else 0.0

    @property
    def all_per_job(self) -> float:
        """Every vendor request a job, the events queue's included."""
        return (self.braket_calls + self.sqs_calls) / self.jobs if self.jobs else 0.0

    @property
    def lost_nothing(self) -> bool:
        return (
            not self.error
            and self.jobs_ok == self.released_once == self.jobs
            and not any(self.violations.values())
        )


def scenario(args: argparse.Namespace, arm: str) -> dict[str, Any]:
    """The emulator's Braket side: the busy QPU, and the events' faults of the arm."""
    depth = max(1, round(args.queue_minutes * 60 / args.task_seconds))
    out: dict[str, Any] = {
        "devices": [
            {
                "arn": ARN,
                "name": "Garnet",
                "qubits": 20,
                "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.30},
                "shots": [1, 20000],
                "queue": {
                    "depth": depth,
                    "arrival_rate": 1.0 / args.task_seconds,
                    "service_time": args.task_seconds,
                    "distribution": "fixed",
                    "shot_time": SHOT_SECONDS,
                },
            }
        ],
        "events": {"queue": QUEUE},
    }
    if arm == "events-faults":
        out["events"].update(lose=args.lose, duplicate=args.duplicate, late=30.0)
    return out


def catalog(args: argparse.Namespace, arm: str, jobs: int) -> str:
    drain = args.task_seconds / args.speed
    text = (
        "currency: USD\n"
        "devices:\n"
        f"  - name: {DEVICE}\n"
        "    vendor: local\n"
        f"    id: {ARN}\n"
        "    class: qpu\n"
        "    qubits: 20\n"
        f"    slots: {max(1, jobs)}\n"
        "    price: {per_task: 0.30, per_shot: 0.00145}\n"
        f"    properties: {{drain_seconds_per_task: {drain:.6g}}}\n"
    )
    if arm != "polls":
        text += (
            "vendors:\n"
            f"  local: {{events_queue: {QUEUE}, events_poll: {args.events_poll:g}, "
            "events_silence: 900}\n"
        )
    return text


class Arm(OnInstance):
    """One Flux instance, emulator and service for one arm."""

    def __init__(self, work: Path, args: argparse.Namespace, arm: str) -> None:
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario
        from flux_quantum.emulator.clock import ScaledClock

        self.work, self.args, self.arm, self.jobs = work, args, arm, args.jobs
        for sub in ("conf", "state"):
            (work / sub).mkdir(parents=True)
        r = subprocess.run(
            [
                "flux",
                "R",
                "encode",
                "--ranks=0",
                f"--cores=0-{core_count(self.jobs) - 1}",
                f"--hosts={socket.gethostname()}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (work / "R.json").write_text(r)
        config = instance_config() + f'\n[resource]\nnoverify = true\npath = "{work / "R.json"}"\n'
        (work / "conf" / "quantum.toml").write_text(config)
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(catalog(args, arm, self.jobs))
        self.calls: list[Any] = []
        self.clock = ScaledClock(args.speed)
        self.emulator = Emulator(
            scenario=Scenario.from_dict(scenario(args, arm), source="bench"),
            clock=self.clock,
            seed=args.seed,
            on_call=self.calls.append,
        ).start()
        self.start_instance(work, self.emulator, self.catalog)

    def run(self, timeout: float) -> Run:
        run = Run(self.arm, self.jobs, self.args.speed)
        wall = time.monotonic()
        jobids: list[str] = []
        try:
            self.clock.start()
            self.flux(
                "quantum",
                "service",
                "start",
                f"--catalog={self.catalog}",
                f"--emulator-url={self.emulator.url}",
                "--poll-min=0.1",
                "--poll-cold-max=1",
                "--poll-max=2",
                "--scan-interval=0.2",
                "--cluster-interval=0.5",
                "--device-check-interval=5",
                "--tick=0.05",
                "--workers=8",
            )
            out = self.flux(
                "submit",
                f"--cc=0-{self.jobs - 1}",
                "-n1",
                "-t",
                "30m",
                "--job-name=events{cc}",
                f"--setattr=qpu.device={DEVICE}",
                f"--setattr=qpu.shots={self.args.shots}",
                "true",
                timeout=300,
            )
            jobids = [line.strip() for line in out.splitlines() if line.strip()]
            self.flux("queue", "drain", f"--timeout={timeout:g}s", timeout=timeout + 30)
            self.flux("quantum", "service", "status", "--wait-idle=120", timeout=150)
            self.measure(run, jobids)
        except Exception as exc:  # a failed arm is reported, not hidden
            run.error = f"{type(exc).__name__}: {exc}"[:500]
            for jobid in jobids:
                self.flux("cancel", jobid, check=False)
        finally:
            (self.work / "dmesg.log").write_text(self.flux("dmesg", "-H", check=False))
            status = self.flux("quantum", "service", "status", "--json", check=False)
            (self.work / "status.json").write_text(status)
            with contextlib.suppress(ValueError):
                feeds = json.loads(status or "{}").get("events") or {}
                run.heard = dict((feeds.get("local") or {}).get("counts") or {})
        run.wall = time.monotonic() - wall
        return run

    def measure(self, run: Run, jobids: list[str]) -> None:
        import flux
        import flux.job

        from flux_quantum.testing import promises

        report = self.emulator.report()
        ended = {row["id"]: row.get("ended") for row in report["bill"]["tasks"]}
        run.tasks = len(ended)
        handle = flux.Flux(self.env["FLUX_URI"])
        lags: list[float] = []
        timed: list[tuple[str, str, float]] = []
        for jobid in jobids:
            found = flux.job.job_kvs_lookup(
                handle, flux.job.JobID(jobid), keys=["eventlog"], decode=False
            )
            log = events.parse_eventlog((found or {}).get("eventlog"))
            releases = [e for e in log if e.name == events.RELEASE]
            run.released_once += len(releases) == 1
            finish = events.first(log, "finish")
            run.jobs_ok += finish is not None and finish.context.get("status", 1) == 0
            task = events.first(log, events.TASK)
            end = ended.get(str(task.context.get("task"))) if task is not None else None
            if releases and end is not None and task is not None:
                lags.append(self.clock.at(releases[0].timestamp) - float(end))
                timed.append((jobid, str(task.context.get("task")), lags[-1]))
            elif len(run.notes) < 3:
                run.notes.append(f"job {jobid}: no release or no ended task to time it by")
        run.worst = sorted(timed, key=lambda item: -item[2])[:5]
        if lags:
            run.lag_p50 = percentile(lags, 0.5)
            run.lag_p95 = percentile(lags, 0.95)
            run.lag_max = max(lags)
        run.polls = sum(1 for c in self.calls if c.operation in BRAKET_READS)
        run.sqs_calls = sum(1 for c in self.calls if c.operation in SQS_CALLS)
        run.braket_calls = len(self.calls) - run.sqs_calls
        faults = report["faults"].get("braket") or {}
        run.events = {k: v for k, v in faults.items() if k.startswith("events_")}
        facts = promises.gather(
            uri=self.env["FLUX_URI"],
            emulator_url=self.emulator.url,
            ledger=None,
            jobs=[int(flux.job.JobID(j)) for j in jobids],
        )
        findings = promises.check(facts)
        run.violations = {
            k: v for k, v in findings.counts().items() if k in ("one_task", "no_lost_job")
        }


def report(runs: list[Run], args: argparse.Namespace, wall: float) -> str:
    lines = [
        f"flux-quantum events benchmark: {datetime.now(UTC):%Y-%m-%d}, commit {args.revision}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        f"command: python bench/events.py {' '.join(args.argv)}; took {wall / 60:.1f} min",
        f"device: emulated Braket QPU {DEVICE} (IQM-Garnet-like): public queue "
        f"{args.queue_minutes:g} min of {args.task_seconds:g} s tasks at utilisation 1; a task "
        f"of ours {args.task_seconds + args.shots * SHOT_SECONDS:g} s at {args.shots} shots",
        f"workload: {args.jobs} jobs of 1 core, one task each, submitted in one burst; "
        f"release point done; clock x{args.speed:g}; events arms: events_poll "
        f"{args.events_poll:g} s (wall); faults arm: {args.lose:.0%} of events lost, "
        f"{args.duplicate:.0%} sent twice (the copy up to 30 s late)",
        "",
        f"{'arm':<14} {'ok':>7} {'once':>7} {'polls':>6} {'polls/job':>9} {'calls/job':>9} "
        f"{'sqs':>5} {'all/job':>7} {'lag p50':>8} {'lag p95':>8} {'lag max':>8} "
        f"{'violations':>10} {'wall s':>6}",
    ]
    for run in runs:
        lines.append(
            f"{run.arm:<14} {run.jobs_ok:>3}/{run.jobs:<3} {run.released_once:>3}/{run.jobs:<3} "
            f"{run.polls:>6} {run.polls_per_job:>9.2f} {run.calls_per_job:>9.2f} "
            f"{run.sqs_calls:>5} {run.all_per_job:>7.2f} {run.lag_p50:>8.2f} "
            f"{run.lag_p95:>8.2f} {run.lag_max:>8.2f} {sum(run.violations.values()):>10} "
            f"{run.wall:>6.0f}"
        )
        if run.error:
            lines.append(f"  {run.arm} FAILED: {run.error}")
        for note in run.notes:
            lines.append(f"  {run.arm}: {note}")
    lines += [
        "",
        "ok: jobs that finished with exit 0; once: jobs with exactly one qpu-release;",
        "  polls: GetQuantumTask requests; calls/job: every Braket request (creates, polls,",
        "  GetDevice, S3) a job; sqs: the events arms' SQS requests (long polls and deletes);",
        "  all/job: both a job; lag: a job's qpu-release minus its task's end (vendor s; the",
        "  service's and Flux's own latencies count x speed there); violations: the promise",
        "  checker's one_task and no_lost_job",
    ]
    for run in runs:
        if run.events or run.heard:
            lines.append(
                f"  {run.arm}: the emulator's events {run.events}; the service's {run.heard}"
            )
    polls = next((r for r in runs if r.arm == "polls" and not r.error), None)
    if polls is not None:
        lines += ["", "targets:"]
        for run in runs:
            if run is polls or run.error:
                continue
            fewer = run.all_per_job < polls.all_per_job
            lines += [
                f"  {run.arm}: vendor requests per job, the queue's included, "
                f"{run.all_per_job:.2f} vs {polls.all_per_job:.2f} (polls "
                f"{run.polls_per_job:.2f} vs {polls.polls_per_job:.2f}): {verdict(fewer)}",
                f"  {run.arm}: release lag p50 {run.lag_p50:.2f} s vs {polls.lag_p50:.2f} s: "
                f"{verdict(run.lag_p50 <= polls.lag_p50)}",
                f"  {run.arm}: release lag p95 {run.lag_p95:.2f} s vs {polls.lag_p95:.2f} s: "
                f"{verdict(run.lag_p95 <= polls.lag_p95)}",
                f"  {run.arm}: nothing lost (every job released once, exit 0, no violation): "
                f"{verdict(run.lost_nothing)}",
            ]
            if run.arm == "events-faults" and run.worst:
                job, _, lag = run.worst[0]
                lines.append(
                    f"    the slowest release ({job}, {lag:.1f} s): its events were lost; the "
                    "poll planned a little after the task's expected end (or after as long "
                    "again as it had run) found it"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 jobs, x20 (< 5 min)")
    parser.add_argument("--jobs", type=int, help="jobs an arm (100; quick 30)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma list of {', '.join(ARMS)}")
    parser.add_argument("--shots", type=int, default=100)
    parser.add_argument("--queue-minutes", type=float, default=5.0, help="public queue (5)")
    parser.add_argument("--task-seconds", type=float, default=5.0, help="a task (5)")
    parser.add_argument("--speed", type=float, help="the emulator's clock (x10; quick x20)")
    parser.add_argument("--events-poll", type=float, default=30.0, help="wall s (30)")
    parser.add_argument("--lose", type=float, default=0.2, help="faults arm (0.2)")
    parser.add_argument("--duplicate", type=float, default=0.3, help="faults arm (0.3)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument("--work", type=Path, help="keep the arms' files here (a new directory)")
    parser.add_argument("--timeout", type=float, default=900.0, help="wall seconds per arm")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    args.jobs = args.jobs or (30 if args.quick else 100)
    args.speed = args.speed or (20.0 if args.quick else 10.0)
    arms = args.arms.split(",")
    if any(a not in ARMS for a in arms):
        parser.error(f"--arms: accepted {', '.join(ARMS)}")
    if shutil.which("flux") is None:
        print("events: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    args.revision = revision(REPO, ("src", "bench"))
    out = args.out or (None if args.quick else RESULTS)
    started = time.monotonic()
    runs: list[Run] = []
    with contextlib.ExitStack() as stack:
        if args.work is not None:
            args.work.mkdir(parents=True)
            tmp = args.work
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fq-events-")))
        for arm in arms:
            print(f"-- {arm}: {args.jobs} jobs (clock x{args.speed:g})", flush=True)
            bench = Arm(tmp / arm, args, arm)
            try:
                run = bench.run(args.timeout)
            finally:
                bench.close()
            runs.append(run)
            print(
                f"   {run.jobs_ok}/{run.jobs} ok, {run.polls} polls, lag p50 {run.lag_p50:.2f} s, "
                f"{run.wall:.0f} s wall {run.error}",
                flush=True,
            )
    text = report(runs, args, time.monotonic() - started)
    print(text, end="")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "events.txt").write_text(text)
        setup = {k: v for k, v in vars(args).items() if k not in ("argv", "out", "work")}
        setup["command"] = "python bench/events.py " + " ".join(args.argv)
        document = {"setup": setup, "runs": [asdict(r) for r in runs]}
        (out / "events.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
        print(f"written: {out / 'events.txt'}, {out / 'events.json'}")
    ok = all(r.lost_nothing for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
