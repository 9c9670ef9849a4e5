#!/usr/bin/env python3
"""Reading one task from 64 ranks: through the handler service vs each rank from the vendor.

One hybrid job of ``--ranks`` ranks (64) rides one quantum task; every rank runs
``flux quantum task --wait --json`` and prints the task's counts. Two arms, the same job
but for one variable in its environment:

service
    the default: each rank reads the task's state and result through the instance
    owner's handler service (``qpu_info.read_via``: ``qpu_handlers.task``), which asks
    the vendor once per task for all readers (in-flight reads joined, a finished task's
    poll and counts answered from memory; ``service/taskread.py``).
vendor
    ``FLUX_QPU_READ=vendor``: each rank reads the vendor itself (``--direct``).

The instance: ``flux start --test-size=4 --test-hosts=fanout[0-3]`` with Fluxion, the
quantum jobtap plugin and the job-shell plugin (built from ``jobtap/`` into the run's
directory when it starts), the validator, its resources a ``[[resource.config]]`` of 4
hosts x 16 cores (``noverify``: the brokers share this machine's cores), so ``flux
submit -N4 -n64`` starts 16 real rank processes under each broker (``-o
exit-timeout=none``: 64 ranks sharing the machine's cores may end minutes apart, and
Flux would kill the rest 30 s after the first). The vendor: the emulator, in this
process, one QPU-class device with no queue (each task runs ``--task-seconds``, priced
per task and shot, so the service's own tracking is polls only: a per-minute simulator
would also make the service fetch the result once to settle its cost). The job is
released at ``--release`` (``done``: the task has ended when the ranks start).

Measured per run:

vendor calls
    every request the emulator answered for the run's task, by who made it: a rank
    (its botocore User-Agent carries ``app/fanout-r<RANK>``: each rank's command runs
    with ``AWS_SDK_UA_APP_ID`` set) or the service (every other request in the run; the
    bench makes none until the job is clean). GetQuantumTask (a poll, and the status
    check a result read starts with) and S3 GetObject of ``results.json`` (the result)
    apart; the service's before the job's ``start`` event are its own tracking, after
    it (with ``--release done`` the task has ended, the tracking too) what the readers
    caused. With an earlier release the service keeps tracking the task after ``start``:
    its calls after ``start`` then hold its own polls too, as many as the vendor arm's
    row for the service shows.
wall
    the job's ``start`` event -> the last rank has printed its counts, and ``start`` ->
    ``finish``.
CPU, memory
    each rank's user + system CPU and peak RSS (of its ``flux quantum task`` process);
    the service process's and rank 0's broker's CPU over the run.

Each rank runs ``flux quantum task --wait --json`` as the child of a 7-line wrapper
(standard library Python, ``-I -S``) that sets the rank's tag and, once the command has
exited, prints the time, its exit status, CPU and peak RSS (``RUSAGE_CHILDREN``).

Every rank must print the task's counts, identical for all ranks and equal to the
result the bench reads from the emulator after the run, in both arms; a run where one
does not fails the benchmark.

    python bench/fanout_read.py               # 64 ranks, 5 runs per arm
    python bench/fanout_read.py --quick       # 16 ranks, 2 runs per arm (< 5 min)
    python bench/fanout_read.py --ranks 32 --repeats 3 --out /tmp/fanout32

Writes ``--out``.txt (the table) and .csv (one row per run); the full run
``bench/results/fanout_read``, ``--quick`` ``/tmp/fq-fanout-read-quick``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import PROGRAM

from flux_quantum.emulator import Call, Emulator, Scenario
from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BROKERS = 4
HOSTS = f"fanout[0-{BROKERS - 1}]"
DEVICE = "fanout-qpu"
ARN = f"arn:aws:braket:us-east-1::device/qpu/emulator/{DEVICE}"
SHOTS = 100
ARMS = ("service", "vendor")
RANK_TAG = "fanout-r"

# What every rank runs: the command under test, as a child of this wrapper (standard
# library only), which tags the command's vendor calls with the rank (botocore adds
# AWS_SDK_UA_APP_ID to its User-Agent) and prints, once it has exited, when, its exit
# status, its user + system CPU and its peak RSS.
WRAPPER = r"""
import os, resource, subprocess, sys, time
env = dict(os.environ, AWS_SDK_UA_APP_ID="fanout-r" + os.environ.get("FLUX_TASK_RANK", "?"))
rc = subprocess.call(sys.argv[1:], env=env)
t = time.time()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"fanout-done {t:.6f} {rc} {ru.ru_utime + ru.ru_stime:.3f} {ru.ru_maxrss}", flush=True)
sys.exit(rc)
"""
COMMAND = ["flux", "quantum", "task", "--wait", "--json"]
_APP = re.compile(r"\bapp/(\S+)")


@dataclass(frozen=True)
class Seen:
    """One request the emulator answered: when (wall clock), who, what."""

    t: float
    who: str  # "r<RANK>" or "service"
    call: Call


class TaggedEmulator(Emulator):
    """The emulator, noting with every call the botocore ``app/`` id of its caller."""

    def __init__(self, scenario: Scenario) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self.seen: list[Seen] = []
        super().__init__(scenario, seed=17, on_call=self._note)

    def _handle(self, request: Any) -> Any:
        found = _APP.search(request.headers.get("user-agent", ""))
        app = found.group(1) if found else ""
        self._local.who = app[len(RANK_TAG) - 1 :] if app.startswith(RANK_TAG) else "service"
        return super()._handle(request)

    def _note(self, call: Call) -> None:
        seen = Seen(time.time(), getattr(self._local, "who", "service"), call)
        with self._lock:
            self.seen.append(seen)

    def since(self, mark: int) -> list[Seen]:
        with self._lock:
            return self.seen[mark:]

    def mark(self) -> int:
        with self._lock:
            return len(self.seen)


@dataclass
class Run:
    arm: str
    repeat: int
    ranks: int
    jobid: str = ""
    task: str = ""
    t_submit: float = 0.0
    t_release: float = 0.0
    t_start: float = 0.0
    t_finish: float = 0.0
    t_clean: float = 0.0
    t_first: float = 0.0  # first rank printed
    t_last: float = 0.0  # last rank printed
    wall: float = 0.0  # start -> last rank printed
    wall_finish: float = 0.0  # start -> finish event
    rank_cpu_median: float = 0.0
    rank_cpu_sum: float = 0.0
    rank_rss_median: float = 0.0  # MB
    service_cpu: float = 0.0
    broker_cpu: float = 0.0
    rank_polls: int = 0  # GetQuantumTask by the ranks
    rank_gets: int = 0  # S3 GetObject of the result by the ranks
    ranks_calling: int = 0  # ranks that called the vendor at all
    read_polls: int = 0  # GetQuantumTask by the service after the job's start
    read_gets: int = 0  # GetObject by the service after the job's start
    track_polls: int = 0  # GetQuantumTask by the service before the job's start
    track_gets: int = 0
    other_calls: int = 0  # device probes and the like, not about the task
    counts: str = ""
    error: str = ""

    @property
    def reader_calls(self) -> int:
        """Vendor calls the readers caused: their own and the service's for them."""
        return self.rank_polls + self.rank_gets + self.read_polls + self.read_gets


def proc_cpu(pid: int | None) -> float:
    """utime + stime of a process, seconds; NaN if it is not there."""
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def instance_toml(cores: int, plugin: Path) -> str:
    from flux_quantum.cli.plugin import instance_config, plugin_path

    return (
        instance_config().replace(str(plugin_path()), str(plugin))
        + "\n[resource]\nnoverify = true\n\n[[resource.config]]\n"
        + f'hosts = "{HOSTS}"\ncores = "0-{cores - 1}"\n'
    )


def catalog_text(task_seconds: float) -> str:
    return (
        "devices:\n"
        f"  - name: {DEVICE}\n    vendor: local\n    id: {ARN}\n    class: qpu\n"
        "    qubits: 20\n    region: us-east-1\n"
        "    price: {per_task: 0.30, per_shot: 0.00145}\n    slots: 1\n"
        f"    properties: {{drain_seconds_per_task: {task_seconds:g}}}\n"
    )


def scenario(task_seconds: float) -> Scenario:
    device = {
        "arn": ARN,
        "name": DEVICE,
        "qubits": 20,
        "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.3},
        "queue": {"depth": 0, "arrival_rate": 0.0, "service_time": task_seconds},
    }
    return Scenario.from_dict({"devices": [device]})


def own_plugins(outdir: Path) -> tuple[Path, Path, str]:
    """The jobtap plugin, the job-shell plugin's directory and where they came from:
    built from this checkout's ``jobtap/`` into OUTDIR (the instance runs the plugins of
    the commit the header names, and a rebuild in the checkout during the run replaces
    no library under the broker), else copies of the installed ones."""
    from flux_quantum.cli.plugin import plugin_path
    from flux_quantum.job.consumer import shell_plugin_path

    sys.path.insert(0, str(REPO / "jobtap"))
    try:
        import build_plugin

        plugin, why = build_plugin.build(outdir)
        shell, why_shell = build_plugin.build_shell(outdir)
    finally:
        sys.path.pop(0)
    if plugin is not None and shell is not None:
        return plugin, shell.parent, "built from jobtap/ when the run started"
    outdir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(plugin_path(), outdir / plugin_path().name)
    shutil.copytree(shell_plugin_path().parent, outdir / "shell", dirs_exist_ok=True)
    reason = why if plugin is None else why_shell
    return (
        outdir / plugin_path().name,
        outdir / "shell",
        f"copies of the installed plugins (building them failed: {reason})",
    )


class Bench:
    def __init__(self, work: Path, args: argparse.Namespace, say: Callable[[str], None]) -> None:
        from flux_quantum.cli.demo import Instance

        self.work, self.args, self.say = work, args, say
        (work / "conf").mkdir()
        (work / "out").mkdir()
        self.cores = max(16, math.ceil(args.ranks / BROKERS))
        plugin, shell_dir, args.plugins = own_plugins(work / "plugins")
        (work / "conf" / "quantum.toml").write_text(instance_toml(self.cores, plugin))
        (work / "program.qasm").write_text(PROGRAM)
        self.wrapper = work / "rank.py"
        self.wrapper.write_text(WRAPPER)
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(catalog_text(args.task_seconds))
        self.emulator = TaggedEmulator(scenario(args.task_seconds)).start()
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"], capture_output=True, text=True
        ).stdout.strip()
        opts = [
            f"--test-hosts={HOSTS}",
            f"-Sconf.shell_pluginpath={builtin}:{shell_dir}",
        ]
        # The service and the jobs must not inherit a tag or a read mode from our caller.
        for name in ("AWS_SDK_UA_APP_ID", "FLUX_QPU_READ"):
            os.environ.pop(name, None)
        self.inst = Instance(work, BROKERS, opts)
        self.broker_pid = int(self.flux("getattr", "broker.pid").strip())
        self.flux(
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--emulator-url={self.emulator.url}",
            "--poll-min=0.1",
            "--poll-cold-max=1",
            "--poll-max=2",
            "--scan-interval=0.1",
            "--cluster-interval=0.5",
            "--device-check-interval=30",
            "--tick=0.05",
        )
        status = json.loads(self.flux("quantum", "service", "status", "--json"))
        self.service_pid: int | None = status.get("pid")

    def flux(self, *args: str, check: bool = True) -> str:
        return self.inst.run("flux", *args, check=check).stdout

    def wait_clean(self, jobid: str, timeout: float) -> None:
        """Until JOBID's ``clean`` event (``flux job wait-event``; no 120 s cap as in
        ``Instance.run``: 64 ranks importing the Braket SDK on a busy machine take longer)."""
        proc = subprocess.run(
            ["flux", "job", "wait-event", "-t", f"{timeout:g}", jobid, "clean"],
            env=self.inst.env,
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"job {jobid}: no clean event in {timeout:g} s: {proc.stderr}")

    def alive(self) -> bool:
        """The instance still runs (a run's error says nothing of the next one if not)."""
        return self.inst.proc.poll() is None

    def close(self) -> None:
        try:
            self.flux("quantum", "service", "stop", check=False)
            rc = self.inst.stop()
            if rc != 0:
                self.say(f"(flux start exited {rc}: {self.inst.broker_log()[-500:]})")
        finally:
            self.emulator.stop()

    def run(self, arm: str, repeat: int, ranks: int | None = None) -> Run:
        run = Run(arm, repeat, ranks or self.args.ranks)
        try:
            self._one(run)
        except Exception as exc:  # reported in the table, and the bench fails
            run.error = f"{type(exc).__name__}: {exc}"[:400]
            if run.jobid and self.alive():  # the next run must not share the machine
                self.flux("cancel", run.jobid, check=False)
                with contextlib.suppress(Exception):
                    self.wait_clean(run.jobid, 120)
        return run

    def _one(self, run: Run) -> None:
        out = self.work / "out" / f"{run.arm}-{run.repeat}"
        read = "--env=FLUX_QPU_READ=vendor" if run.arm == "vendor" else "--env=-FLUX_QPU_READ"
        argv = [
            "submit",
            f"-N{min(BROKERS, run.ranks)}",
            f"-n{run.ranks}",
            "-o",
            "cpu-affinity=off",
            # Flux kills a job's other tasks 30 s after its first exits; ranks that
            # share two cores finish minutes apart here.
            "-o",
            "exit-timeout=none",
            "--label-io",
            "-t",
            "10m",
            f"--output={out}.out",
            f"--error={out}.err",
            f"--job-name=fanout-{run.arm}",
            f"--setattr=qpu.device=local:{DEVICE}",
            f"--setattr=qpu.program={self.work / 'program.qasm'}",
            f"--setattr=qpu.shots={SHOTS}",
            f"--setattr=qpu.release_at={self.args.release}",
            f"--env=FLUX_QUANTUM_EMULATOR_URL={self.emulator.url}",
            read,
            sys.executable,
            "-I",
            "-S",
            str(self.wrapper),
            *COMMAND,
        ]
        mark = self.emulator.mark()
        cpu0 = proc_cpu(self.service_pid), proc_cpu(self.broker_pid)
        run.jobid = self.flux(*argv).strip()
        self.wait_clean(run.jobid, self.args.run_timeout)
        cpu1 = proc_cpu(self.service_pid), proc_cpu(self.broker_pid)
        seen = self.emulator.since(mark)  # the bench's own read below comes after
        run.service_cpu, run.broker_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        log = events.parse_eventlog(self.flux("job", "eventlog", "-f", "json", run.jobid))
        stamp = events.first_times(log)
        finish = events.first(log, "finish")
        exception = events.first(log, "exception")
        if exception is not None:
            raise RuntimeError(f"job {run.jobid}: exception {exception.context}")
        if finish is None or finish.context.get("status", 0) != 0:
            err = Path(f"{out}.err").read_text(errors="replace")[-400:]
            raise RuntimeError(f"job {run.jobid} failed: {err}")
        run.t_submit, run.t_start, run.t_finish = stamp["submit"], stamp["start"], stamp["finish"]
        run.t_clean = stamp["clean"]
        run.t_release = stamp.get(events.RELEASE, float("nan"))
        ranks = parse_output(Path(f"{out}.out").read_text(errors="replace"), run.ranks)
        run.task = ranks[0]["task"]
        self._check(run, ranks)
        self._count(run, seen)
        printed = [r["t_done"] for r in ranks.values()]
        cpus = [r["cpu"] for r in ranks.values()]
        run.rank_rss_median = statistics.median(r["rss_kb"] for r in ranks.values()) / 1024
        run.t_first, run.t_last = min(printed), max(printed)
        run.wall = run.t_last - run.t_start
        run.wall_finish = run.t_finish - run.t_start
        run.rank_cpu_median = statistics.median(cpus)
        run.rank_cpu_sum = sum(cpus)
        self.flux("job", "purge", "--force", "--num-limit=50", check=False)

    def _check(self, run: Run, ranks: dict[int, dict[str, Any]]) -> None:
        """Every rank printed the same counts, and they are the task's result."""
        from flux_quantum.vendors.base import TaskRef
        from flux_quantum.vendors.local.vendor import LocalVendor

        tasks = {r["task"] for r in ranks.values()}
        if tasks != {run.task}:
            raise RuntimeError(f"job {run.jobid}: ranks read different tasks: {sorted(tasks)}")
        states = {r["state"] for r in ranks.values()}
        if states != {"COMPLETED"}:
            raise RuntimeError(f"job {run.jobid}: ranks saw states {sorted(states)}")
        distinct = {json.dumps(r["counts"], sort_keys=True) for r in ranks.values()}
        if len(distinct) != 1:
            raise RuntimeError(f"job {run.jobid}: ranks printed {len(distinct)} different counts")
        vendor = LocalVendor.from_emulator(self.emulator)
        truth = vendor.result(TaskRef(vendor="local", device=DEVICE, task_id=run.task)).counts
        got = ranks[0]["counts"]
        if got != truth or sum(truth.values()) != SHOTS:
            raise RuntimeError(
                f"job {run.jobid}: ranks printed {got}, the task's result is {truth}"
            )
        run.counts = " ".join(f"{k}={v}" for k, v in sorted(got.items()))

    def _count(self, run: Run, seen: list[Seen]) -> None:
        callers = set()
        for s in seen:
            op, target = s.call.operation, s.call.target or ""
            poll = op == "GetQuantumTask" and target == run.task
            get = op == "GetObject" and target.endswith("/results.json")
            if not (poll or get):
                run.other_calls += 1
            elif s.who != "service":
                callers.add(s.who)
                run.rank_polls += poll
                run.rank_gets += get
            elif s.t >= run.t_start:
                run.read_polls += poll
                run.read_gets += get
            else:
                run.track_polls += poll
                run.track_gets += get
        run.ranks_calling = len(callers)


def parse_output(text: str, n: int) -> dict[int, dict[str, Any]]:
    """Each rank's JSON answer, the time it printed, its CPU and peak RSS, from
    ``--label-io`` output; RuntimeError unless every rank printed all of it and exited 0."""
    ranks: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        label, sep, rest = line.partition(": ")
        if not sep or not label.strip().isdigit():
            continue
        rank = int(label)
        entry = ranks.setdefault(rank, {})
        if rest.startswith("{"):
            doc = json.loads(rest)
            entry.update(task=doc["task"], state=doc["state"], counts=doc["counts"])
        elif rest.startswith("fanout-done "):
            _, stamp, rc, cpu, rss = rest.split()
            entry.update(t_done=float(stamp), rc=int(rc), cpu=float(cpu), rss_kb=int(rss))
    complete = [r for r, e in ranks.items() if {"counts", "t_done", "cpu"} <= e.keys()]
    failed = [r for r, e in ranks.items() if e.get("rc", 0) != 0]
    if failed or len(complete) != n:
        raise RuntimeError(
            f"{len(complete)} of {n} ranks printed counts, a time and their CPU"
            + (f"; ranks {failed[:8]} exited non-zero" if failed else "")
        )
    return ranks


# -- reporting -------------------------------------------------------------------------


def med(rows: list[Run], key: Callable[[Run], float]) -> float:
    values = [key(r) for r in rows if not math.isnan(key(r))]
    return statistics.median(values) if values else float("nan")


def report(rows: list[Run], args: argparse.Namespace, wall: float) -> str:
    good = {arm: [r for r in rows if r.arm == arm and not r.error] for arm in ARMS}
    lines = [header(args, wall), ""]
    # (row, value, format, whether the ratio means anything)
    cols: list[tuple[str, Callable[[Run], float], str, bool]] = [
        ("vendor calls the readers caused", lambda r: r.reader_calls, "{:.0f}", True),
        ("  GetQuantumTask by the ranks", lambda r: r.rank_polls, "{:.0f}", False),
        ("  GetObject by the ranks", lambda r: r.rank_gets, "{:.0f}", False),
        ("  GetQuantumTask by the service for them", lambda r: r.read_polls, "{:.0f}", False),
        ("  GetObject by the service for them", lambda r: r.read_gets, "{:.0f}", False),
        ("ranks that called the vendor", lambda r: r.ranks_calling, "{:.0f}", False),
        ("service's own tracking polls (before start)", lambda r: r.track_polls, "{:.0f}", False),
        ("start -> last rank printed, s", lambda r: r.wall, "{:.2f}", True),
        ("start -> first rank printed, s", lambda r: r.t_first - r.t_start, "{:.2f}", True),
        ("start -> finish event, s", lambda r: r.wall_finish, "{:.2f}", True),
        ("CPU per rank (median), s", lambda r: r.rank_cpu_median, "{:.3f}", True),
        ("CPU of all ranks, s", lambda r: r.rank_cpu_sum, "{:.1f}", True),
        ("peak RSS per rank (median), MB", lambda r: r.rank_rss_median, "{:.0f}", True),
        ("submit -> clean, s", lambda r: r.t_clean - r.t_submit, "{:.2f}", False),
        ("service process CPU, submit -> clean, s", lambda r: r.service_cpu, "{:.3f}", False),
        ("rank 0 broker CPU, submit -> clean, s", lambda r: r.broker_cpu, "{:.2f}", False),
    ]
    width = max(len(c[0]) for c in cols)
    lines.append(
        f"{'median of ' + str(args.repeats) + ' runs per arm':<{width}} "
        f"{'service':>10} {'vendor':>10} {'vendor/service':>15}"
    )
    for name, key, fmt, with_ratio in cols:
        s, v = med(good["service"], key), med(good["vendor"], key)
        ratio_text = "-"
        if with_ratio and s > 0 and not math.isnan(v):
            ratio_text = f"{v / s:.1f}x"
        lines.append(f"{name:<{width}} {fmt.format(s):>10} {fmt.format(v):>10} {ratio_text:>15}")
    lines.append("")
    lines.append("every run (arm, repeat: reader calls, start -> last printed, counts):")
    for r in rows:
        if r.error:
            lines.append(f"  {r.arm:<7} {r.repeat}: ERROR {r.error}")
            continue
        lines.append(
            f"  {r.arm:<7} {r.repeat}: {r.reader_calls:>4} calls, {r.wall:6.2f} s, "
            f"rank CPU {r.rank_cpu_median:.3f} s median, counts {r.counts}"
        )
    lines += [
        "",
        "vendor calls: requests the emulator answered about the run's task (GetQuantumTask of",
        "  it, S3 GetObject of its results.json), by the ranks (User-Agent app/fanout-rN) and by",
        "  the service after the job's start event; its own tracking polls came before start.",
        "  A result read is a GetQuantumTask (the status) and a GetObject.",
        *(
            []
            if args.release == "done"
            else [
                f"  release_at={args.release}: the service tracks the task after the job's start",
                "  too; its calls after start hold its own polls (the vendor arm's service row).",
            ]
        ),
        "start -> last rank printed: the job's start event to the latest time a rank's",
        "  `flux quantum task --wait --json` had printed its counts and exited; every rank",
        "  printed the task's counts, the same for all, equal to the task's result read",
        "  after the run.",
        "CPU, peak RSS per rank: user + system, ru_maxrss of its `flux quantum task`.",
        "service and broker CPU: over the whole run, idle ticks included (a longer run costs",
        "  more whatever it does); no ratio.",
    ]
    return "\n".join(lines)


def git_version() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return proc.stdout

    commit = git("rev-parse", "--short", "HEAD").strip() or "?"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src", "jobtap").splitlines()]
    if not dirty:
        return commit
    return f"{commit} + uncommitted changes in {', '.join(dirty)}"


def header(args: argparse.Namespace, wall: float) -> str:
    flux_version = subprocess.run(["flux", "version"], capture_output=True, text=True).stdout
    core = re.search(r"libflux-core:\s*(\S+)", flux_version)
    return "\n".join(
        [
            f"flux-quantum fan-out read benchmark ({'quick' if args.quick else 'full'} run): "
            f"{args.ranks} ranks read one task, through the service vs each from the vendor",
            f"command: python bench/fanout_read.py {' '.join(sys.argv[1:])}".rstrip(),
            f"commit: {args.commit} when the run started, {args.commit_end} when it ended",
            f"plugins: {getattr(args, 'plugins', '?')}",
            f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores, "
            f"{platform.machine()}, Python {platform.python_version()}, "
            f"flux-core {core.group(1) if core else '?'}, Fluxion",
            f"instance: flux start --test-size={BROKERS} --test-hosts={HOSTS}, "
            f"[[resource.config]] {BROKERS} hosts x {max(16, math.ceil(args.ranks / BROKERS))} "
            f"cores (noverify); job: flux submit -N{min(BROKERS, args.ranks)} -n{args.ranks} "
            "-o cpu-affinity=off -o exit-timeout=none",
            f"vendor: the emulator (in-process), one QPU-class device, no queue, a task runs "
            f"{args.task_seconds:g} s; release_at={args.release}; {args.repeats} runs per arm "
            f"(alternating) after one warm-up run each; took {wall / 60:.1f} min",
            "load average (1 min) before / after the run: "
            f"{args.load[0]:.2f} / {os.getloadavg()[0]:.2f} (machine shared with other work)",
        ]
    )


def write_csv(path: Path, rows: list[Run]) -> None:
    names = [*asdict(rows[0]), "reader_calls"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({**asdict(r), "reader_calls": r.reader_calls})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 ranks, 2 runs per arm")
    parser.add_argument("--ranks", type=int, default=None, help="ranks of the job (64)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per arm (5)")
    parser.add_argument("--release", default="done", help="the job's qpu.release_at (done)")
    parser.add_argument(
        "--task-seconds", type=float, default=1.0, help="how long the task runs (1)"
    )
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None, help="output path without suffix")
    args = parser.parse_args(argv)
    args.ranks = args.ranks or (16 if args.quick else 64)
    args.repeats = args.repeats or (2 if args.quick else 5)
    if args.ranks < 1 or args.repeats < 1:
        parser.error("--ranks and --repeats must be >= 1")
    out = args.out or (Path("/tmp/fq-fanout-read-quick") if args.quick else RESULTS / "fanout_read")
    if shutil.which("flux") is None:
        print(
            "fanout_read: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr
        )
        return 1

    def say(text: str = "") -> None:
        print(text, flush=True)

    args.load = os.getloadavg()
    args.commit = git_version()
    t0 = time.monotonic()
    rows: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="fq-fanout-") as tmp:
        bench = Bench(Path(tmp), args, say)
        try:
            for arm in ARMS:  # warm-up: page cache, the service's first vendor calls
                warm = bench.run(arm, -1, min(args.ranks, 2 * BROKERS))
                say(f"warm-up {arm}: {warm.error or f'{warm.wall:.2f} s'}")
                if warm.error:
                    rows.append(warm)
            plan = [
                (arm, repeat)
                for repeat in range(args.repeats)
                for arm in (ARMS if repeat % 2 == 0 else tuple(reversed(ARMS)))
            ]
            for arm, repeat in plan:
                if not bench.alive():
                    say(f"the instance has exited: {bench.inst.broker_log()[-300:]}")
                    rows.append(Run(arm, repeat, args.ranks, error="the instance has exited"))
                    break
                run = bench.run(arm, repeat)
                rows.append(run)
                say(
                    f"{arm:<7} {repeat}: "
                    + (
                        f"ERROR {run.error}"
                        if run.error
                        else f"{run.reader_calls} vendor calls by readers, "
                        f"start -> last printed {run.wall:.2f} s, "
                        f"rank CPU {run.rank_cpu_median:.3f} s median"
                    )
                )
        finally:
            bench.close()
    wall = time.monotonic() - t0
    args.commit_end = git_version()
    text = report(rows, args, wall)
    failed = [r for r in rows if r.error]
    if failed:  # never in place of a good result
        out = Path(tempfile.gettempdir()) / f"{out.name}-FAILED"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(text + "\n")
    if rows:
        write_csv(out.with_suffix(".csv"), rows)
    say()
    say(text)
    say(f"wrote {out.with_suffix('.txt')}, {out.with_suffix('.csv')}")
    if failed:
        say(f"FAILED: {len(failed)} runs did not give every rank the task's counts")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
