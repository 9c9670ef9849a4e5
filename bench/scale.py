#!/usr/bin/env python3
"""One handler service at scale: 1,000 held jobs riding 100 quantum tasks on 5 devices.

Measured in one run on a throwaway ``flux start --test-size=4`` (Fluxion, the quantum
jobtap plugin and the ingest validator from ``flux quantum config``), with the vendor
emulator on 127.0.0.1 standing in for Amazon Braket:

0. Adoption: the service starts on a full queue and tracks every held job (the time from
   its process start to its status listing every job), creates the tasks; then it is
   stopped and started again, and the new one adopts every job and re-attaches every
   task (the plugin, loaded since the instance started, hands over each job's qpu
   history); then, after the throughput phases that unload and reload the plugin, a
   third service adopts them from their eventlogs (the plugin has no history of jobs
   held before it was loaded, as after an instance restart).
1. The handler service (``flux quantum service run``, a separate process so its CPU and
   memory are its own) with every job held: its CPU share (utime + stime from
   ``/proc/PID/stat``, as % of one core) and memory (VmRSS, VmHWM), the vendor calls it
   makes (per second, per task per ``--poll-min`` interval, the shortest gap between two
   polls of one task), while the emulated queues drain towards our tasks.
2. The release lag of every job: from the moment its task reached the release point
   (queue position 1, the emulator's own ``task_timeline().front``, or started if
   earlier, mapped to the wall clock) to the job's ``start`` event; split into
   front -> the poll that saw it -> ``qpu-release`` -> ``start``.
3. The plugin's submit throughput: plain jobs submitted (Python API, pipelined) with no
   job held, with the 1,000 jobs held (no service running yet), and with the same
   1,000 jobs left in DEPEND but the plugin unloaded (what Flux itself pays for them),
   in the order 0 held, held, (the first two adoptions,) unloaded, unloaded, held, (the
   third adoption and the rest,) 0 held, since an instance slows down as its KVS grows; each phase starts with the ingest validator's workers
   running (urgency-0 warm-up jobs).

The units: 100 units of 10 jobs, half a ``qpu.group`` of 10, half a leader with 9
``--dependency=qpu:LEADER`` followers; unit ``u`` names device ``u % 5``. Each device's
queue has a backlog ahead of our tasks, served FIFO in uniform [0.5, 1.5] x its mean
service time (40 to 80 emulated seconds per task), time sped up ``--speed`` times, so
no task reaches the front until the service has adopted every job and then held them
all for about ``--held-window`` seconds; then each device releases its 20 tasks one
after the other. The service starts after the jobs are submitted, so it adopts the
1,000 held jobs at once (as after a restart); the emulator's clock stands still until
the service starts (the throughput phases and the submission do not eat into the
queues). The catalog's drain priors are the devices' real-time means. Jobs run in the
job-exec test mode (no fork per job).

Targets (issue 13, for 10,000 held jobs on 1,000 tasks: ``--units 1000``): holding them
costs <= 5 % of a core and <= 10 kB per held job; adopting them all takes <= 5 s; release
lag p50 <= 0.25 s, p99 <= 1 s; submit throughput with every job held within the noise
(how far the first and last phases with nothing held differ) of none held; at most one
vendor call per task per poll interval.

    python bench/scale.py            # full run: 1,000 jobs, 100 tasks (about 4 minutes)
    python bench/scale.py --quick    # 200 jobs, 20 tasks (about 1.5 minutes)
    python bench/scale.py --quick --stall 10   # queues stand still 10 s after adoption
    python bench/scale.py --units 1000 --held-arm on --out bench/results/scale_10k
        # the held arm: every job held 60 s, metrics on (or off): the exporter's cost

Writes bench/results/scale.txt (the summary), scale.csv (one row per job) and scale.png
(release lag histogram and CDF, when matplotlib is importable); ``--quick`` writes under
/tmp unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import percentile, verdict

from flux_quantum.emulator.clock import ScaledClock
from flux_quantum.protocol import events
from flux_quantum.service.runner import service_name

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DEVICES = 5
# The targets for the service with every job held.
CPU_TARGET = 5.0  # % of one core
KB_PER_JOB_TARGET = 10.0  # VmRSS per held job
ADOPT_TARGET = 5.0  # seconds to adopt every held job (start or restart)
LAG_P50_TARGET = 0.25  # seconds, the task at its release point -> the job's start
LAG_P99_TARGET = 1.0
# Mean emulated service time per task on each device (seconds); uniform in [0.5, 1.5] x.
SERVICE_TIMES = (40.0, 50.0, 60.0, 70.0, 80.0)
ARN = "arn:aws:braket:us-east-1::device/qpu/emulator/ScaleQ{k}"
SERVICE_NAME = "qpu_handlers"
CLK_TCK = os.sysconf("SC_CLK_TCK")
WARM_UP_JOBS = 160
SUBMIT_BATCHES = 5


# --- small helpers --------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


# --- /proc sampling -------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_memory_kb(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) in kB."""
    rss = hwm = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def proc_children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def count_brokers(exclude: str | None = None) -> int:
    """flux-broker processes of other instances on this machine (they make timings
    noisy): brokers rename themselves flux-broker-RANK; ours have EXCLUDE (their
    config directory) on their command line."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if not (entry / "comm").read_text().startswith("flux-broker"):
                    continue
            except OSError:
                continue
            if exclude is None or exclude not in proc_cmdline(int(entry.name)):
                count += 1
    return count


@dataclass
class Sample:
    t: float
    cpu: float
    rss: int | None
    hwm: int | None


class Sampler(threading.Thread):
    """Reads CPU time and memory of some processes every ``interval`` seconds."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[Sample]] = {name: [] for name in pids}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        now = time.time()
        for name, pid in self.pids.items():
            cpu = proc_cpu_seconds(pid)
            if cpu is None:
                continue
            rss, hwm = proc_memory_kb(pid)
            self.samples[name].append(Sample(now, cpu, rss, hwm))

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
        self.sample()

    def cpu_share(self, name: str, t0: float, t1: float) -> float:
        """CPU of ``name`` between ``t0`` and ``t1`` as % of one core (nearest samples
        inside the window)."""
        inside = [s for s in self.samples[name] if t0 <= s.t <= t1]
        if len(inside) < 2 or inside[-1].t - inside[0].t <= 0:
            return float("nan")
        return 100.0 * (inside[-1].cpu - inside[0].cpu) / (inside[-1].t - inside[0].t)

    def memory_at(self, name: str, t: float) -> tuple[int | None, int | None]:
        before = [s for s in self.samples[name] if s.t <= t]
        if not before:
            return None, None
        return before[-1].rss, before[-1].hwm

    def peak(self, name: str) -> int | None:
        hwms = [s.hwm for s in self.samples[name] if s.hwm is not None]
        return max(hwms) if hwms else None


# --- scenario -------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    units: int
    jobs_per_unit: int
    speed: float
    held_window: float
    stall: float
    quick: bool
    poll_min: float
    throughput_jobs: int
    size: int

    @property
    def jobs(self) -> int:
        return self.units * self.jobs_per_unit

    @property
    def tasks_per_device(self) -> int:
        return math.ceil(self.units / DEVICES)

    @property
    def adopt_budget(self) -> float:
        """Wall seconds allowed for the service to adopt every job, create every task
        and be restarted (about 8 s for 200 jobs on 2 cores)."""
        return 10.0 + 0.02 * self.jobs

    def depth(self, k: int) -> int:
        """Backlog ahead of our first task on device k: it reaches the front about
        ``adopt_budget + held_window`` wall seconds after the service starts."""
        return math.ceil((self.adopt_budget + self.held_window) * self.speed / SERVICE_TIMES[k])

    def drain(self, k: int) -> float:
        """Real seconds per task on device k (the catalog's prior)."""
        return SERVICE_TIMES[k] / self.speed

    def expected_end(self) -> float:
        """Wall seconds after the clock starts until the last task should be released."""
        return max((self.depth(k) + self.tasks_per_device) * self.drain(k) for k in range(DEVICES))


def device_name(k: int) -> str:
    return f"scale-q{k}"


def scenario(plan: Plan) -> dict[str, Any]:
    return {
        "devices": [
            {
                "arn": ARN.format(k=k),
                "name": f"ScaleQ{k}",
                "qubits": 20,
                "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
                "queue": {
                    "depth": plan.depth(k),
                    "service_time": SERVICE_TIMES[k],
                    "distribution": "uniform",
                },
                "summary": "flux-quantum scale benchmark device",
            }
            for k in range(DEVICES)
        ]
    }


def catalog_text(plan: Plan) -> str:
    lines = ["# bench/scale.py: emulated QPUs served by the local vendor", "devices:"]
    for k in range(DEVICES):
        lines += [
            f"  - name: {device_name(k)}",
            "    vendor: local",
            f"    id: {ARN.format(k=k)}",
            "    class: qpu",
            "    qubits: 20",
            "    region: us-east-1",
            "    price: {per_task: 0.3, per_shot: 0.001}",
            f"    slots: {plan.tasks_per_device + 5}",
            f"    properties: {{drain_seconds_per_task: {plan.drain(k):g}}}",
        ]
    return "\n".join(lines) + "\n"


# --- jobs -----------------------------------------------------------------------------


def base_jobspec(cwd: Path) -> Any:
    from flux.job import JobspecV1

    js = JobspecV1.from_command(
        ["true"], cwd=str(cwd), environment={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    )
    # job-exec test mode: the job "runs" 10 ms without a job shell or a fork
    js.setattr("system.exec.test.run_duration", "0.01s")
    return js


@dataclass
class Unit:
    index: int
    kind: str  # "group" or "follow"
    device: str
    jobs: list[int] = field(default_factory=list)


def submit_scenario(h: Any, plan: Plan, cwd: Path) -> tuple[list[Unit], float]:
    """Submit every unit's jobs (held at once by the plugin); returns units and seconds."""
    from flux.job import submit_async
    from flux.job._utils import dependency_array_create

    units = [
        Unit(u, "group" if u % 2 == 0 else "follow", device_name(u % DEVICES))
        for u in range(plan.units)
    ]
    t0 = time.perf_counter()
    first: list[tuple[Unit, Any]] = []
    for unit in units:
        js = base_jobspec(cwd)
        # Released at position 1 (the task next to run), the release point the lag below
        # is measured from; the default, ``done``, would release at the task's end.
        qpu: dict[str, Any] = {"device": f"local:{unit.device}", "release_at": 1}
        if unit.kind == "group":
            qpu["group"] = f"u{unit.index:03d}"
            count = plan.jobs_per_unit
        else:
            count = 1
        js.setattr("system.qpu", qpu)
        encoded = js.dumps()
        first += [(unit, submit_async(h, encoded)) for _ in range(count)]
    for unit, future in first:
        unit.jobs.append(int(future.get_id()))
    rest: list[tuple[Unit, Any]] = []
    for unit in units:
        if unit.kind != "follow":
            continue
        js = base_jobspec(cwd)
        js.setattr("system.dependencies", dependency_array_create([f"qpu:{unit.jobs[0]}"]))
        encoded = js.dumps()
        rest += [(unit, submit_async(h, encoded)) for _ in range(plan.jobs_per_unit - 1)]
    for unit, future in rest:
        unit.jobs.append(int(future.get_id()))
    return units, time.perf_counter() - t0


def plugin_query(h: Any) -> dict[str, Any]:
    return h.rpc("job-manager.jobtap-query", {"name": "quantum.so"}).get()


def wait_until(what: str, test: Callable[[], bool], timeout: float, step: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


def wait_inactive(h: Any, ids: Iterable[int], timeout: float = 300.0) -> None:
    """Wait until none of IDS is active (job-list, polled every 0.1 s)."""
    wanted = set(ids)
    payload = {"max_entries": 0, "attrs": [], "constraint": {"states": ["active"]}}
    deadline = time.monotonic() + timeout
    while True:
        active = {j["id"] for j in h.rpc("job-list.list", payload).get()["jobs"]}
        if not wanted & active:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(wanted & active)} jobs still active after {timeout:g}s")
        time.sleep(0.1)


def purge(inst: Any) -> None:
    inst.run("flux", "job", "purge", "--force", "--num-limit=0", check=False)


def submit_phase(h: Any, inst: Any, njobs: int, cwd: Path) -> dict[str, Any]:
    """Submit NJOBS plain test-mode jobs (Python API) in SUBMIT_BATCHES batches, each
    pipelined and waited for: the accept rate of every batch (jobs/s), and the seconds
    from the first submit until every job is inactive."""
    from flux.job import submit_async

    encoded = base_jobspec(cwd).dumps()
    warm = warm_up(h, cwd)
    size = max(1, njobs // SUBMIT_BATCHES)
    ids: list[int] = []
    batch_rates = []
    t0 = time.perf_counter()
    for _ in range(SUBMIT_BATCHES):
        t = time.perf_counter()
        futures = [submit_async(h, encoded) for _ in range(size)]
        ids += [int(f.get_id()) for f in futures]
        batch_rates.append(size / (time.perf_counter() - t))
    t_submit = time.perf_counter() - t0
    wait_inactive(h, ids)
    t_done = time.perf_counter() - t0
    cancel(h, warm)
    purge(inst)
    return {"jobs": len(ids), "submit_s": t_submit, "done_s": t_done, "batches": batch_rates}


def warm_up(h: Any, cwd: Path) -> list[int]:
    """Start every ingest validator worker (they start one per 32 queued jobs, at most
    4, and stop after 5 s idle, so submits after a pause would pay for their start-up):
    submit jobs with urgency 0 (accepted, never scheduled); cancel them afterwards."""
    from flux.job import submit_async

    encoded = base_jobspec(cwd).dumps()
    return [
        int(f.get_id()) for f in [submit_async(h, encoded, urgency=0) for _ in range(WARM_UP_JOBS)]
    ]


def cancel(h: Any, ids: list[int]) -> None:
    from flux.job import cancel_async

    for future in [cancel_async(h, jobid) for jobid in ids]:
        future.get()
    wait_inactive(h, ids)


# --- the service process --------------------------------------------------------------


def python_pid(pid: int) -> int:
    """``flux quantum ...`` may exec the Python command in place or run it as a child:
    the process whose CPU is the service's."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "service run" in proc_cmdline(pid) and "flux-quantum" in proc_cmdline(pid):
            return pid
        for kid in proc_children(pid):
            if "service" in proc_cmdline(kid) and "run" in proc_cmdline(kid):
                return kid
        time.sleep(0.1)
    return pid


def start_service(cmd: list[str], inst: Any, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    with log.open("ab") as f:
        proc = subprocess.Popen(cmd, env=inst.env, cwd=inst.workdir, stdout=f, stderr=f)
    return proc, python_pid(proc.pid)


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def idle_baseline(h: Any, cmd: list[str], inst: Any, log: Path) -> dict[str, float]:
    """The service with nothing held: memory once the vendor SDK is imported, and CPU
    over a few idle seconds."""
    proc, pid = start_service(cmd, inst, log)
    try:
        wait_until("the service to come up", lambda: service_status(h) is not None, 60)
        last, deadline = -1, time.monotonic() + 30
        while time.monotonic() < deadline:  # until the SDK import settles
            time.sleep(1.0)
            rss = proc_memory_kb(pid)[0] or 0
            if abs(rss - last) < 512:
                break
            last = rss
        t0, c0 = time.time(), proc_cpu_seconds(pid) or 0.0
        time.sleep(5.0)
        t1, c1 = time.time(), proc_cpu_seconds(pid) or 0.0
        rss, _ = proc_memory_kb(pid)
        return {"rss_kb": float(rss or 0), "cpu_pct": 100.0 * (c1 - c0) / (t1 - t0)}
    finally:
        stop_service(proc)


def service_status(h: Any) -> dict[str, Any] | None:
    try:
        return h.rpc(f"{service_name(SERVICE_NAME)}.status", {}).get()
    except OSError:
        return None


def tracking(h: Any, plan: Plan) -> bool:
    status = service_status(h)
    return status is not None and status.get("jobs") == plan.jobs


def adoption_done(h: Any, plan: Plan) -> bool:
    status = service_status(h)
    if status is None or status.get("jobs") != plan.jobs:
        return False
    units = status.get("units", [])
    return len(units) == plan.units and all(
        t.get("task") and t.get("phase") == "track" for u in units for t in u["tasks"]
    )


# --- analysis -------------------------------------------------------------------------


@dataclass
class JobLag:
    jobid: int
    unit: int
    kind: str
    device: str
    task: str
    front: float  # wall time the task reached the release point
    detect: float  # wall time of the first poll of the task at or after it
    ready: float  # qpu-ready event
    release: float  # qpu-release event
    start: float

    @property
    def lag(self) -> float:
        return self.start - self.front


def eventlog(h: Any, jobid: int) -> list[events.Event]:
    rsp = h.rpc("job-info.lookup", {"id": jobid, "keys": ["eventlog"], "flags": 0}).get()
    return events.parse_eventlog(rsp["eventlog"])


def analyse_jobs(
    h: Any,
    units: list[Unit],
    emulator: Any,
    clock: ScaledClock,
    polls: dict[str, list[float]],
) -> tuple[list[JobLag], list[str]]:
    lags: list[JobLag] = []
    problems: list[str] = []
    fronts: dict[str, float] = {}
    for unit in units:
        for jobid in unit.jobs:
            log = eventlog(h, jobid)
            release = events.first(log, events.RELEASE)
            start = events.first(log, "start")
            ready = events.first(log, events.READY)
            if release is None or start is None:
                exc = events.first(log, "exception")
                why = exc.context.get("note") if exc else "not released"
                problems.append(f"job {jobid} (unit {unit.index}): {why}")
                continue
            task = release.context["task"]
            if task not in fronts:
                tl = emulator.task_timeline(task)
                points = [t for t in (tl.front, tl.started) if t is not None]
                fronts[task] = clock.wall(min(points)) if points else math.nan
            front = fronts[task]
            after = [t for t in polls.get(task, []) if t >= front]
            detect = after[0] if after else math.nan
            lags.append(
                JobLag(
                    jobid=jobid,
                    unit=unit.index,
                    kind=unit.kind,
                    device=unit.device,
                    task=task,
                    front=front,
                    detect=detect,
                    ready=ready.timestamp if ready else math.nan,
                    release=release.timestamp,
                    start=start.timestamp,
                )
            )
    return lags, problems


def poll_stats(polls: dict[str, list[float]], poll_min: float) -> tuple[list[float], list[float]]:
    """Per task, GetQuantumTask calls per poll-min interval over the time it was polled
    ((calls - 1) x poll-min / (last - first)); and every gap between two polls of a task."""
    ratios: list[float] = []
    gaps: list[float] = []
    for times in polls.values():
        ordered = sorted(times)
        if len(ordered) >= 2 and ordered[-1] > ordered[0]:
            ratios.append((len(ordered) - 1) * poll_min / (ordered[-1] - ordered[0]))
        gaps += [b - a for a, b in zip(ordered, ordered[1:], strict=False)]
    return ratios, gaps


# --- the run --------------------------------------------------------------------------


@dataclass
class Result:
    plan: Plan
    lines: list[str] = field(default_factory=list)
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    lags: list[JobLag] = field(default_factory=list)
    clock0: float = math.nan
    ok: bool = True


def run(plan: Plan, out: Path | None, plot: bool, command: str) -> Result:
    import flux

    from flux_quantum.cli.demo import Instance
    from flux_quantum.cli.plugin import instance_config
    from flux_quantum.emulator import Emulator, Scenario

    result = Result(plan)
    t_begin = time.monotonic()
    brokers_before = count_brokers()
    brokers_during = -1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="fq-scale-") as tmp:
        work = Path(tmp)
        (work / "conf").mkdir()
        (work / "conf" / "quantum.toml").write_text(instance_config())
        catalog = work / "backends.yaml"
        catalog.write_text(catalog_text(plan))
        clock = ScaledClock(plan.speed)
        calls: list[tuple[float, Any]] = []
        emulator = Emulator(
            Scenario.from_dict(scenario(plan), source="bench/scale.py"),
            clock=clock,
            on_call=lambda call: calls.append((time.time(), call)),
        )
        emulator.start()
        inst = None
        service: subprocess.Popen[bytes] | None = None
        sampler: Sampler | None = None
        try:
            say(
                f"bench/scale: {plan.jobs} jobs in {plan.units} units on {DEVICES} devices, "
                f"flux start --test-size={plan.size}, emulator x{plan.speed:g} at {emulator.url}"
            )
            inst = Instance(work, plan.size, [])
            h = flux.Flux(inst.env["FLUX_URI"])
            broker_pid = int(inst.run("flux", "getattr", "broker.pid").stdout.strip())

            cmd = [
                "flux", "quantum", "service", "run",
                f"--catalog={catalog}", f"--emulator-url={emulator.url}",
                f"--poll-min={plan.poll_min:g}",
            ]  # fmt: skip
            log = work / "service.log"

            # -- throughput A1: nothing held
            phases: list[tuple[str, dict[str, Any]]] = []
            phases.append(("none", submit_phase(h, inst, plan.throughput_jobs, work)))
            say(f"  submit {plan.throughput_jobs} plain jobs, 0 held: {_phase(phases[-1][1])}")

            # -- the service with nothing to do: its memory and CPU baseline
            idle = idle_baseline(h, cmd, inst, log)
            say(f"  idle service: VmRSS {_mb(int(idle['rss_kb']))}, CPU {idle['cpu_pct']:.1f} %")

            # -- the scenario's jobs, held by the plugin (no service yet)
            warm = warm_up(h, work)
            units, submit_s = submit_scenario(h, plan, work)
            wait_until(f"{plan.jobs} held jobs", lambda: plugin_query(h)["held"] >= plan.jobs, 120)
            cancel(h, warm)
            purge(inst)
            say(
                f"  submitted {plan.jobs} qpu jobs in {submit_s:.1f}s "
                f"({plan.jobs / submit_s:.0f} jobs/s), all held"
            )

            # -- throughput with every scenario job held: B1 here; C1, C2, B2 after the
            # service's first two adoptions (the plugin, loaded since the instance
            # started, has every job's history for them, as at a site), where C runs
            # with the plugin unloaded (the same jobs stay in DEPEND: what Flux itself
            # pays for them, so B / C is the plugin's own share)
            held_phases(h, inst, plan, work, phases, ("plugin",))

            # -- the service adopts the held jobs and creates every task; the queues run
            # (with --stall, they stand still until STALL seconds after the adoption)
            t_clock = math.nan if plan.stall else clock.start()
            t_service = time.time()
            service, service_pid = start_service(cmd, inst, log)
            sampler = Sampler({"service": service_pid, "broker": broker_pid})
            sampler.start()
            t_up, t_tracked = come_up(h, plan)
            wait_until(
                f"the service to create {plan.units} tasks",
                lambda: adoption_done(h, plan),
                300,
                step=0.5,
            )
            t_adopted = time.time()
            say(
                f"  service up in {t_up - t_service:.1f}s, tracked {plan.jobs} jobs "
                f"{t_tracked - t_up:.1f}s later, created {plan.units} tasks by "
                f"{t_adopted - t_service:.1f}s"
            )
            time.sleep(2.0)  # memos and first polls settle

            # -- a restart: a new service adopts every held job and re-attaches its task
            stop_service(service)
            service, t_restart, t_up2, t_retracked, t_readopted = readopt(
                h, inst, plan, cmd, log, sampler, "restarted"
            )
            time.sleep(2.0)

            # -- the service stopped: C1, C2 with the plugin unloaded, B2 with it loaded
            # again; then a third service adopts jobs held before the plugin was loaded
            # (as after an instance restart: no plugin history, every eventlog read)
            stop_service(service)
            held_phases(h, inst, plan, work, phases, ("noplugin", "noplugin", "plugin"))
            service, t_reload, t_up3, t_retracked3, t_readopted3 = readopt(
                h, inst, plan, cmd, log, sampler, "after the plugin reload"
            )
            time.sleep(2.0)
            if plan.stall:
                time.sleep(max(0.0, plan.stall - 2.0))
                t_clock = clock.start()
                say(f"  queues stalled {plan.stall:g}s after the adoption, now running")
            result.clock0 = t_clock
            t_held = time.time()
            brokers_during = count_brokers(exclude=str(work))

            # -- the queues drain: held window, then releases
            due = t_clock + plan.adopt_budget + plan.held_window - time.time()
            say(f"  every job held, tasks queued; first task due in ~{due:.0f}s")
            timeout = plan.expected_end() * 1.5 + 60
            try:
                wait_until("every job released", lambda: plugin_query(h)["held"] == 0, timeout, 1.0)
            except RuntimeError as exc:  # report what was released, then the rest
                say(f"  {exc}")
                stuck = [j["id"] for j in h.rpc("job-manager.quantum.list", {}).get()["jobs"]]
                cancel(h, stuck)
            t_released = time.time()
            wait_inactive(h, [j for u in units for j in u.jobs])
            t_done = time.time()
            say(f"  all {plan.jobs} jobs released and done {t_done - t_clock:.0f}s after the clock")
            time.sleep(3.0)  # the service with every unit finished: does its memory stay?
            status = service_status(h) or {}
            sampler.stop()
            stop_service(service)

            # -- analysis (before the jobs are purged)
            polls: dict[str, list[float]] = defaultdict(list)
            created: dict[str, float] = {}
            for wall, call in calls:
                if call.operation == "GetQuantumTask" and call.target:
                    polls[call.target].append(wall)
                elif call.operation == "CreateQuantumTask" and call.task:
                    created.setdefault(call.task, wall)
            lags, problems = analyse_jobs(h, units, emulator, clock, polls)
            result.lags = lags
            purge(inst)

            # -- throughput A2: nothing held again
            phases.append(("none", submit_phase(h, inst, plan.throughput_jobs, work)))
            say(f"  submit {plan.throughput_jobs} plain jobs, 0 held: {_phase(phases[-1][1])}")

            first_release = min((lag.release for lag in lags), default=t_released)
            last_release = max((lag.release for lag in lags), default=t_released)
            summarise(
                result,
                plan,
                sampler,
                calls,
                polls,
                created,
                lags,
                problems,
                phases,
                status,
                times={
                    "service": t_service,
                    "up": t_up,
                    "tracked": t_tracked,
                    "adopted": t_adopted,
                    "restart": t_restart,
                    "up2": t_up2,
                    "retracked": t_retracked,
                    "readopted": t_readopted,
                    "reload": t_reload,
                    "up3": t_up3,
                    "retracked3": t_retracked3,
                    "readopted3": t_readopted3,
                    "clock": t_clock,
                    "held": t_held,
                    "first_release": first_release,
                    "last_release": last_release,
                    "done": t_done,
                },
                submit_s=submit_s,
                idle=idle,
            )
        except BaseException:
            if (work / "service.log").exists():
                tail = (work / "service.log").read_text(errors="replace")[-3000:]
                say(f"bench/scale failed; the service's log ends with:\n{tail}")
            raise
        finally:
            if sampler is not None and sampler.is_alive():
                sampler.stop()
            if service is not None:
                stop_service(service)
            if inst is not None:
                rc = inst.stop()
                if rc != 0:
                    say(f"(flux start exited {rc}: {inst.broker_log()[-500:]})")
            emulator.stop()
    wall = time.monotonic() - t_begin
    brokers_after = count_brokers()
    header = [
        f"flux-quantum scale benchmark ({'quick' if plan.quick else 'full'} run)",
        f"command: {command}",
        f"date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}; "
        f"machine: {platform.node()}, {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), "
        f"{platform.machine()}, Python {platform.python_version()}",
        f"flux: {_flux_version()}; flux-quantum: {_git_version()}; "
        f"instance: flux start --test-size={plan.size} (Fluxion)",
        f"flux-broker processes of other instances on the machine: {brokers_before} before "
        f"the run, {brokers_during} while every job was held, {brokers_after} after; "
        "load average before: " + " ".join(f"{x:.2f}" for x in load_before),
        f"wall time of this run: {wall:.0f}s",
    ]
    result.lines = header + [""] + result.lines
    text = "\n".join(result.lines) + "\n"
    say()
    say(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".txt").write_text(text)
        write_csv(out.with_suffix(".csv"), result)
        if plot:
            say(plot_lags(out.with_suffix(".png"), result))
        say(f"wrote {out.with_suffix('.txt')}, {out.with_suffix('.csv')}")
    return result


# --- the held arm: the service's cost with every job held, metrics off or on ------------


def held_arm(
    plan: Plan, metrics: bool, label: str, scrape_every: float, out: Path | None
) -> dict[str, Any]:
    """The service (``flux quantum service run``) holding every job of the scenario for
    ``plan.held_window`` seconds with the queues standing still (the emulator's clock is
    never started), with ``[quantum.metrics]`` off or on. Measured: its CPU in the
    window (% of one core); with metrics on, a scrape every ``scrape_every`` seconds
    (wall time to the whole answer, its size), the reactor's CPU taking snapshots (the
    exporter's own histogram) and the service's CPU per scrape (20 scrapes back to back
    at the end). ``label`` names the arm in the results (``before``: the same arm run
    with an older flux-quantum installed)."""
    import urllib.request

    import flux

    from flux_quantum.cli.demo import Instance
    from flux_quantum.cli.plugin import instance_config
    from flux_quantum.emulator import Emulator, Scenario

    result: dict[str, Any] = {"arm": label, "metrics": metrics, "jobs": plan.jobs}
    with tempfile.TemporaryDirectory(prefix="fq-scale-arm-") as tmp:
        work = Path(tmp)
        (work / "conf").mkdir()
        config = instance_config()
        url = None
        if metrics:
            port = _free_port()
            url = f"http://127.0.0.1:{port}/metrics"
            config += f'\n[quantum.metrics]\nlisten = "127.0.0.1:{port}"\n'
        (work / "conf" / "quantum.toml").write_text(config)
        catalog = work / "backends.yaml"
        catalog.write_text(catalog_text(plan))
        emulator = Emulator(
            Scenario.from_dict(scenario(plan), source="bench/scale.py"),
            clock=ScaledClock(plan.speed),  # never started: the queues stand still
        )
        emulator.start()
        inst = None
        service: subprocess.Popen[bytes] | None = None
        sampler: Sampler | None = None
        try:
            say(
                f"bench/scale held arm '{label}': {plan.jobs} jobs, metrics {'on' if metrics else 'off'}"
            )
            inst = Instance(work, plan.size, [])
            h = flux.Flux(inst.env["FLUX_URI"])
            units, submit_s = submit_scenario(h, plan, work)
            wait_until(f"{plan.jobs} held jobs", lambda: plugin_query(h)["held"] >= plan.jobs, 300)
            cmd = [
                "flux", "quantum", "service", "run",
                f"--catalog={catalog}", f"--emulator-url={emulator.url}",
                f"--poll-min={plan.poll_min:g}",
            ]  # fmt: skip
            t_start = time.time()
            service, service_pid = start_service(cmd, inst, work / "service.log")
            sampler = Sampler({"service": service_pid})
            sampler.start()
            come_up(h, plan)
            wait_until("every task created", lambda: adoption_done(h, plan), 900, 1.0)
            result["adopted_s"] = round(time.time() - t_start, 1)
            say(
                f"  every job adopted and every task created {result['adopted_s']:.0f}s after start"
            )
            time.sleep(10.0)  # the first polls and memos settle
            t0 = time.time()
            scrapes: list[tuple[float, int]] = []
            while time.time() < t0 + plan.held_window:
                if url is not None:
                    scrapes.append(_scrape(urllib.request, url))
                time.sleep(scrape_every)
            t1 = time.time()
            time.sleep(1.0)
            result["cpu_pct"] = round(sampler.cpu_share("service", t0, t1), 2)
            result["rss_kb"] = sampler.memory_at("service", t1)[0]
            if url is not None:
                result.update(_metrics_cost(urllib.request, url, service_pid, scrapes, t1 - t0))
            status = service_status(h) or {}
            result["held"] = status.get("jobs")
            result["polls"] = (status.get("counters") or {}).get("polls")
            say("  " + json.dumps(result))
        finally:
            if sampler is not None and sampler.is_alive():
                sampler.stop()
            if service is not None:
                stop_service(service)
            if inst is not None:
                inst.run("flux", "cancel", "--all", check=False)
                inst.stop()
            emulator.stop()
    result["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    result["flux_quantum"] = _git_version()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if out is not None:
        path = out.parent / f"{out.name}_{label}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        say(f"wrote {path}")
    return result


def arms_summary(out: Path) -> str:
    """The held arms' runs side by side (``<out>_<arm>_r<N>.json``), written to
    ``<out>_arms.txt``: each arm's service CPU per run, and with metrics the scrapes and
    the exporter's cost."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(out.parent.glob(f"{out.name}_*_r*.json")):
        data = json.loads(path.read_text())
        runs[data["arm"].rsplit("_r", 1)[0]].append(data)
    lines = [
        f"flux-quantum: bench/scale.py's held arm, {out.name}_<arm>_r<N>.json side by side",
        "service CPU: % of one core over the window, every job held, the queues standing "
        "still; the arms run interleaved (before, off, on), one instance each",
        "",
    ]
    for arm, data in runs.items():
        cpu = [d["cpu_pct"] for d in data]
        lines.append(
            f"{arm}: {len(data)} runs of {data[0]['jobs']} held jobs: service CPU "
            + ", ".join(f"{c:.2f}" for c in cpu)
            + f" % (mean {statistics.mean(cpu):.2f}, spread {max(cpu) - min(cpu):.2f}); "
            + "VmRSS "
            + ", ".join(f"{(d['rss_kb'] or 0) / 1024:.0f}" for d in data)
            + " MB; load average after "
            + ", ".join(f"{d['load_after'][0]:.1f}" for d in data)
        )
        for d in data:
            if d.get("scrapes"):
                lines.append(
                    f"  {d['arm']}: {d['scrapes']} scrapes, one a second: p50 "
                    f"{d['scrape_p50_ms']} ms, p99 {d['scrape_p99_ms']} ms, max "
                    f"{d['scrape_max_ms']} ms ({d['scrape_bytes']} bytes); 20 back to back: "
                    f"max {d['burst_max_ms']} ms; snapshot {d['snapshot_ms']} ms, page "
                    f"{d.get('render_ms')} ms every 5 s; {d['cpu_per_scrape_ms']} ms of CPU "
                    f"a scrape; exporter {d['exporter_cpu_pct_15s']} % of a core at a scrape "
                    f"every 15 s, {d['exporter_cpu_pct_1s']} % at one a second"
                )
    text = "\n".join(lines) + "\n"
    path = out.parent / f"{out.name}_arms.txt"
    path.write_text(text)
    return text


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(request: Any, url: str) -> tuple[float, int]:
    """One scrape: seconds to the whole answer, and its size in bytes."""
    t = time.perf_counter()
    with request.urlopen(url, timeout=10) as rsp:
        body = rsp.read()
    return time.perf_counter() - t, len(body)


def _metrics_cost(
    request: Any, url: str, pid: int, scrapes: list[tuple[float, int]], window: float
) -> dict[str, Any]:
    """Scrape times, the snapshots' cost on the reactor, the CPU of one scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    with request.urlopen(url, timeout=10) as rsp:
        text = rsp.read().decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    snap_sum = values.get("flux_qpu_metrics_snapshot_duration_seconds_sum", 0.0)
    snap_count = values.get("flux_qpu_metrics_snapshot_duration_seconds_count", 0.0)
    # The page rendered on the exporter's thread (older exporters rendered per scrape).
    render_sum = values.get("flux_qpu_metrics_render_duration_seconds_sum", 0.0)
    render_count = values.get("flux_qpu_metrics_render_duration_seconds_count", 0.0)
    uptime = time.time() - values.get("flux_qpu_service_start_time_seconds", time.time())
    c0 = proc_cpu_seconds(pid) or 0.0
    burst = [_scrape(request, url) for _ in range(20)]
    c1 = proc_cpu_seconds(pid) or 0.0
    times = sorted(t for t, _ in scrapes)
    per_scrape = (c1 - c0) / len(burst)
    snap_pct = 100.0 * (snap_sum + render_sum) / uptime if uptime > 0 else float("nan")
    return {
        "scrapes": len(scrapes),
        "scrape_p50_ms": round(1000 * percentile(times, 0.5), 1),
        "scrape_p99_ms": round(1000 * percentile(times, 0.99), 1),
        "scrape_max_ms": round(1000 * max(times), 1),
        "scrape_bytes": scrapes[-1][1] if scrapes else None,
        "burst_max_ms": round(1000 * max(t for t, _ in burst), 1),
        "snapshots": int(snap_count),
        "snapshot_ms": round(1000 * snap_sum / snap_count, 2) if snap_count else None,
        "renders": int(render_count),
        "render_ms": round(1000 * render_sum / render_count, 2) if render_count else None,
        # Snapshots on the reactor and renderings on the exporter's thread.
        "snapshot_cpu_pct": round(snap_pct, 3),
        "cpu_per_scrape_ms": round(1000 * per_scrape, 1),
        # What the exporter costs the service: its snapshots, and one scrape every 15 s
        # (Prometheus' default interval) or every 1 s (this arm's).
        "exporter_cpu_pct_15s": round(snap_pct + 100.0 * per_scrape / 15.0, 3),
        "exporter_cpu_pct_1s": round(snap_pct + 100.0 * per_scrape, 3),
        "window_s": round(window, 1),
    }


def _phase(p: dict[str, Any]) -> str:
    rates = " ".join(f"{r:.0f}" for r in p["batches"])
    return (
        f"accepted in {p['submit_s']:.2f}s (batches {rates} jobs/s), "
        f"all inactive in {p['done_s']:.2f}s"
    )


def _git_version() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return proc.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--", "src", "jobtap")
    return commit + (" + uncommitted changes in src/ or jobtap/" if dirty else "")


def _flux_version() -> str:
    try:
        out = subprocess.run(["flux", "version"], capture_output=True, text=True).stdout
    except OSError:
        return "?"
    parts = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        parts[key.strip()] = value.strip()
    return f"flux-core {parts.get('libflux-core', '?')}"


def come_up(h: Any, plan: Plan) -> tuple[float, float]:
    """When the service's status first answered, and when it first listed every held
    job (the same answer when it did at once: a later request would wait behind the
    re-attaching of every task, and measure that instead)."""
    answer: list[dict[str, Any]] = []

    def answered() -> bool:
        status = service_status(h)
        if status is not None:
            answer.append(status)
        return status is not None

    wait_until("the service to come up", answered, 60, 0.05)
    t_up = time.time()
    if answer[0].get("jobs") != plan.jobs:
        wait_until(f"the service to track {plan.jobs} jobs", lambda: tracking(h, plan), 300, 0.1)
    return t_up, time.time()


def readopt(
    h: Any, inst: Any, plan: Plan, cmd: list[str], log: Path, sampler: Sampler, label: str
) -> tuple[subprocess.Popen[bytes], float, float, float, float]:
    """Start a service on the held jobs whose tasks exist; the service and the times it
    started, answered status, tracked every job and had every task re-attached."""
    t_start = time.time()
    service, service_pid = start_service(cmd, inst, log)
    sampler.pids["service"] = service_pid
    t_up, t_tracked = come_up(h, plan)
    wait_until("every task re-attached", lambda: adoption_done(h, plan), 300, 0.25)
    t_done = time.time()
    say(
        f"  {label}: up in {t_up - t_start:.1f}s, tracked {plan.jobs} jobs "
        f"{t_tracked - t_up:.1f}s later, every task tracked by {t_done - t_start:.1f}s"
    )
    return service, t_start, t_up, t_tracked, t_done


def held_phases(
    h: Any,
    inst: Any,
    plan: Plan,
    work: Path,
    phases: list[tuple[str, dict[str, Any]]],
    keys: Iterable[str],
) -> None:
    """Submit phases with every scenario job held: "plugin" loaded, "noplugin" not."""
    from flux_quantum.instance.plugin import plugin_path

    for key in keys:
        loaded = "quantum.so" in inst.run("flux", "jobtap", "list").stdout
        if key == "noplugin" and loaded:
            inst.run("flux", "jobtap", "remove", "quantum.so")
        elif key == "plugin" and not loaded:
            inst.run("flux", "jobtap", "load", str(plugin_path()))
            wait_until(
                "the plugin to hold the jobs again",
                lambda: plugin_query(h)["held"] >= plan.jobs,
                60,
            )
        phases.append((key, submit_phase(h, inst, plan.throughput_jobs, work)))
        say(
            f"  submit {plan.throughput_jobs} plain jobs, {plan.jobs} held"
            f"{' (plugin unloaded)' if key == 'noplugin' else ''}: {_phase(phases[-1][1])}"
        )


def summarise(
    result: Result,
    plan: Plan,
    sampler: Sampler,
    calls: list[tuple[float, Any]],
    polls: dict[str, list[float]],
    created: dict[str, float],
    lags: list[JobLag],
    problems: list[str],
    phases: list[tuple[str, dict[str, Any]]],
    status: dict[str, Any],
    times: dict[str, float],
    submit_s: float,
    idle: dict[str, float],
) -> None:
    rows = result.rows
    t_clock, t_first = times["clock"], times["first_release"]
    t_held = times["held"]  # every job adopted and its task created and polled
    held_s = t_first - t_held
    # -- CPU and memory
    cpu_held = sampler.cpu_share("service", t_held, t_first)
    cpu_adopt = sampler.cpu_share("service", times["service"], times["adopted"])
    cpu_readopt = sampler.cpu_share("service", times["up2"], times["readopted"])
    # From the process's start (its imports included) to a status listing every job.
    adopt_s = times["tracked"] - times["service"]
    readopt_s = times["retracked"] - times["restart"]
    reload_s = times["retracked3"] - times["reload"]
    cpu_reload = sampler.cpu_share("service", times["up3"], times["readopted3"])
    cpu_release = sampler.cpu_share("service", t_first, times["last_release"])
    broker_held = sampler.cpu_share("broker", t_held, t_first)
    rss_held, _ = sampler.memory_at("service", t_first)
    rss_end, _ = sampler.memory_at("service", math.inf)
    hwm = sampler.peak("service")
    # -- vendor calls while every job is held
    held_calls = [c for w, c in calls if t_held <= w < t_first]
    ops = Counter(c.operation for c in held_calls)
    ratios, gaps = poll_stats(polls, plan.poll_min)
    n_tasks = len(created)
    budget = n_tasks * held_s / plan.poll_min if held_s > 0 else math.nan
    share_of_budget = ops["GetQuantumTask"] / budget if budget else math.nan
    too_close = sum(1 for g in gaps if g < plan.poll_min * 0.98)
    min_gap = min(gaps) if gaps else math.nan
    all_ops = Counter(c.operation for _, c in calls)
    # -- release lag
    lag = [x.lag for x in lags]
    detect = [x.detect - x.front for x in lags if not math.isnan(x.detect)]
    handle = [x.release - x.detect for x in lags if not math.isnan(x.detect)]
    to_start = [x.start - x.release for x in lags]
    p50, p90, p99 = (percentile(lag, q) for q in (0.5, 0.9, 0.99))

    per_job_kb = ((rss_held or 0) - idle["rss_kb"]) / plan.jobs
    cpu_ok = cpu_held <= CPU_TARGET
    memory_ok = per_job_kb <= KB_PER_JOB_TARGET
    adopt_ok = max(readopt_s, adopt_s, reload_s) <= ADOPT_TARGET
    lag_ok = p50 <= LAG_P50_TARGET and p99 <= LAG_P99_TARGET
    calls_ok = too_close == 0 and share_of_budget <= 1.0
    rows += [
        ("held jobs / tasks / devices", f"{plan.jobs} / {n_tasks} / {DEVICES}", "", ""),
        (
            "window with every job held",
            f"{held_s:.1f} s",
            "",
            "",
        ),
        (
            "service CPU, every job held",
            f"{cpu_held:.1f} % of a core",
            f"<= {CPU_TARGET:g} %",
            verdict(cpu_ok),
        ),
        (
            f"adopt {plan.jobs} held jobs, service start (start -> all tracked)",
            f"{adopt_s:.1f} s",
            f"<= {ADOPT_TARGET:g} s",
            verdict(adopt_s <= ADOPT_TARGET),
        ),
        (
            "  start -> status answers / -> every task created and polled",
            f"{times['up'] - times['service']:.1f} / {times['adopted'] - times['service']:.1f} s "
            f"(CPU {_pct(cpu_adopt)})",
            "",
            "",
        ),
        (
            f"adopt {plan.jobs} held jobs after a restart (start -> all tracked)",
            f"{readopt_s:.1f} s",
            f"<= {ADOPT_TARGET:g} s",
            verdict(readopt_s <= ADOPT_TARGET),
        ),
        (
            "  start -> status answers / -> every task re-attached and polled",
            f"{times['up2'] - times['restart']:.1f} / "
            f"{times['readopted'] - times['restart']:.1f} s (CPU {_pct(cpu_readopt)})",
            "",
            "",
        ),
        (
            f"adopt {plan.jobs} held jobs after a plugin reload (eventlogs read)",
            f"{reload_s:.1f} s",
            f"<= {ADOPT_TARGET:g} s",
            verdict(reload_s <= ADOPT_TARGET),
        ),
        (
            "  start -> status answers / -> every task re-attached and polled",
            f"{times['up3'] - times['reload']:.1f} / "
            f"{times['readopted3'] - times['reload']:.1f} s (CPU {_pct(cpu_reload)})",
            "",
            "",
        ),
        ("service CPU, release phase", f"{cpu_release:.1f} %", "", ""),
        (
            "service VmRSS idle / held / after / VmHWM",
            f"{_mb(int(idle['rss_kb']))} / {_mb(rss_held)} / {_mb(rss_end)} / {_mb(hwm)}",
            "",
            "",
        ),
        (
            "  VmRSS held - idle, per held job",
            f"{per_job_kb:.1f} kB",
            f"<= {KB_PER_JOB_TARGET:g} kB",
            verdict(memory_ok),
        ),
        ("service CPU, idle (nothing held)", f"{idle['cpu_pct']:.1f} %", "", ""),
        ("broker rank 0 CPU, every job held", f"{broker_held:.1f} %", "", ""),
        (
            "vendor calls/s, every job held",
            f"{len(held_calls) / held_s:.2f}/s" if held_s > 0 else "-",
            "",
            "",
        ),
        (
            "  GetQuantumTask/s | GetDevice/s",
            f"{ops['GetQuantumTask'] / held_s:.2f} | {ops['GetDevice'] / held_s:.2f}"
            if held_s > 0
            else "-",
            "",
            "",
        ),
        (
            f"polls per task per {plan.poll_min:g}s interval (held)",
            f"{share_of_budget:.3f}",
            "<= 1",
            verdict(share_of_budget <= 1.0),
        ),
        (
            "  same, the busiest task (whole run)",
            f"{max(ratios):.3f}" if ratios else "-",
            "",
            "",
        ),
        (
            "shortest gap between polls of a task",
            f"{min_gap:.3f} s ({too_close} < poll-min)",
            f">= {plan.poll_min:g} s",
            verdict(too_close == 0),
        ),
        (
            "release lag p50 (front -> start)",
            f"{p50:.3f} s",
            f"<= {LAG_P50_TARGET:g} s",
            verdict(p50 <= LAG_P50_TARGET),
        ),
        ("release lag p90", f"{p90:.3f} s", "", ""),
        (
            "release lag p99",
            f"{p99:.3f} s",
            f"<= {LAG_P99_TARGET:g} s",
            verdict(p99 <= LAG_P99_TARGET),
        ),
        ("release lag max (min)", f"{max(lag):.3f} s ({min(lag):.3f})" if lag else "-", "", ""),
        (
            "  front -> detecting poll p50 / p99",
            f"{percentile(detect, 0.5):.3f} / {percentile(detect, 0.99):.3f} s",
            "",
            "",
        ),
        (
            "  poll -> qpu-release p50 / p99",
            f"{percentile(handle, 0.5):.3f} / {percentile(handle, 0.99):.3f} s",
            "",
            "",
        ),
        (
            "  qpu-release -> start p50 / p99",
            f"{percentile(to_start, 0.5):.3f} / {percentile(to_start, 0.99):.3f} s",
            "",
            "",
        ),
    ]
    # -- submit throughput: A B C C B ... A (sums over each kind)
    batches = f"median of {SUBMIT_BATCHES} x {plan.throughput_jobs // SUBMIT_BATCHES} per phase"

    def rates(key: str) -> tuple[float, float]:
        """Median accept rate of the kind's batches; jobs over summed pipeline time."""
        mine = [p for name, p in phases if name == key]
        return (
            statistics.median(r for p in mine for r in p["batches"]),
            sum(p["jobs"] for p in mine) / sum(p["done_s"] for p in mine),
        )

    free, free_done = rates("none")
    held, held_done = rates("plugin")
    bare, bare_done = rates("noplugin")
    # The noise: how far two phases of the same kind (0 held first and last; held;
    # plugin unloaded) differ, the largest of the three.
    noise = 0.0
    for kind in ("none", "plugin", "noplugin"):
        medians = [statistics.median(p["batches"]) for name, p in phases if name == kind]
        if len(medians) > 1:
            noise = max(noise, (max(medians) - min(medians)) / statistics.mean(medians))
    submit_ok = held / free >= 1.0 - noise
    rows += [
        (f"submit plain jobs, 0 held ({batches})", f"{free:.0f} jobs/s", "", ""),
        (f"submit plain jobs, {plan.jobs} held", f"{held:.0f} jobs/s", "", ""),
        ("  same, plugin unloaded (jobs still DEPEND)", f"{bare:.0f} jobs/s", "", ""),
        (
            "  ratio held / 0 held (noise: phases of one kind differ by)",
            f"{held / free:.2f} ({noise:.0%})",
            f">= {1 - noise:.2f}",
            verdict(submit_ok),
        ),
        ("  ratio plugin loaded / unloaded (held)", f"{held / bare:.2f}", "", ""),
        (
            "  submit -> all inactive: 0 / held / unloaded",
            f"{free_done:.0f} / {held_done:.0f} / {bare_done:.0f} jobs/s",
            "",
            "",
        ),
        (f"submit {plan.jobs} qpu jobs (held)", f"{plan.jobs / submit_s:.0f} jobs/s", "", ""),
    ]
    if held_s < 15:
        rows.append(("NOTE: held window shorter than 15 s", "(raise --held-window)", "", ""))
    result.ok = (
        cpu_ok and memory_ok and adopt_ok and lag_ok and submit_ok and calls_ok and not problems
    )

    lines = result.lines
    stall = (
        f"queues still until {plan.stall:g} s after the adoption"
        if plan.stall
        else "queues start with the service"
    )
    lines.append(
        f"design: {plan.units} units x {plan.jobs_per_unit} jobs (half qpu.group, half leader + "
        f"followers), unit u -> device u % {DEVICES}; emulator x{plan.speed:g}; "
        f"service times {', '.join(f'{t:g}' for t in SERVICE_TIMES)} emulated s "
        f"(uniform 0.5-1.5x); backlog {', '.join(str(plan.depth(k)) for k in range(DEVICES))} "
        f"tasks ahead ({stall}); service: flux quantum service run --poll-min={plan.poll_min:g} "
        "(other options default: scan 1 s, tick 0.2 s, poll-cold-max 30 s, 4 workers); "
        "jobs in job-exec test mode (10 ms)"
    )
    lines.append("")
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines.append(f"{'measure':<{width}}  {'value':>{vwidth}}  {'target':>9}  verdict")
    lines.append(f"{'-' * width}  {'-' * vwidth}  {'-' * 9}  -------")
    for name, value, target, v in rows:
        lines.append(f"{name:<{width}}  {value:>{vwidth}}  {target:>9}  {v}".rstrip())
    lines.append("")
    lines.append(
        "vendor calls, whole run: " + ", ".join(f"{op} {n}" for op, n in sorted(all_ops.items()))
    )
    counters = status.get("counters") or {}
    if counters:
        lines.append(
            "service counters: " + ", ".join(f"{k} {v}" for k, v in sorted(counters.items()))
        )
    lines.append(
        "throughput phases (accepted / inactive, s): "
        + "; ".join(f"{name}: {p['submit_s']:.2f} / {p['done_s']:.2f}" for name, p in phases)
        + "\n  accept rates of the batches (jobs/s): "
        + "; ".join(f"{name}: " + " ".join(f"{r:.0f}" for r in p["batches"]) for name, p in phases)
    )
    lines.append(
        "times after the clock started (s): first release "
        f"{t_first - t_clock:.1f}, last release {times['last_release'] - t_clock:.1f}, "
        f"all done {times['done'] - t_clock:.1f}"
    )
    by_device: dict[str, list[float]] = defaultdict(list)
    for x in lags:
        by_device[x.device].append(x.lag)
    lines.append(
        "release lag p50/p99 by device (s): "
        + "; ".join(
            f"{d} {percentile(v, 0.5):.2f}/{percentile(v, 0.99):.2f}"
            for d, v in sorted(by_device.items())
        )
    )
    lines.append(
        f"note: time runs x{plan.speed:g}, so the adaptive poller's long intervals are "
        f"{plan.speed:g}x shorter than on a real queue, but its poll-min phase (the task "
        "next-but-one, one per device at a time) is not: at real speed expect up to "
        f"{DEVICES} devices / {plan.poll_min:g} s = {DEVICES / plan.poll_min:.0f} "
        "GetQuantumTask/s near the fronts, however many jobs are held"
    )
    if problems:
        lines.append(f"PROBLEMS ({len(problems)} jobs): " + "; ".join(problems[:5]))


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f} %"


def _mb(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.0f} MB"


def write_csv(path: Path, result: Result) -> None:
    t0 = result.clock0
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "jobid", "unit", "kind", "device", "task", "front_s", "detect_s", "ready_s",
                "release_s", "start_s", "lag_s",
            ]
        )  # fmt: skip
        for x in sorted(result.lags, key=lambda x: (x.front, x.jobid)):
            w.writerow(
                [
                    x.jobid, x.unit, x.kind, x.device, x.task.rsplit("/", 1)[-1],
                    *(f"{v - t0:.4f}" for v in (x.front, x.detect, x.ready, x.release, x.start)),
                    f"{x.lag:.4f}",
                ]
            )  # fmt: skip


def plot_lags(path: Path, result: Result) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no plot: matplotlib is not importable ({exc})"
    lags = sorted(x.lag for x in result.lags)
    if not lags:
        return "no plot: no release lags"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.hist(lags, bins=40, color="#4472c4")
    ax1.set_xlabel("release lag: task at front -> job start (s)")
    ax1.set_ylabel("jobs")
    ax1.axvline(0.5, color="green", ls="--", label="p50 target 0.5 s")
    ax1.axvline(2.0, color="red", ls="--", label="p99 target 2 s")
    ax1.legend()
    ys = [(i + 1) / len(lags) for i in range(len(lags))]
    ax2.plot(lags, ys, color="#4472c4")
    ax2.set_xlabel("release lag (s)")
    ax2.set_ylabel("fraction of jobs")
    ax2.axhline(0.5, color="green", ls=":")
    ax2.axhline(0.99, color="red", ls=":")
    ax2.grid(True, alpha=0.3)
    fig.suptitle(
        f"flux-quantum: {result.plan.jobs} jobs, {result.plan.units} tasks, "
        f"{DEVICES} devices, poll-min {result.plan.poll_min:g} s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"wrote {path}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 jobs, 20 tasks, shorter waits")
    parser.add_argument("--units", type=int, help="tasks (units of jobs sharing one): 100")
    parser.add_argument("--jobs-per-unit", type=int, default=10)
    parser.add_argument("--speed", type=float, default=20.0, help="emulated time speed-up (20)")
    parser.add_argument(
        "--held-window", type=float, help="wall seconds before the first task is due (60)"
    )
    parser.add_argument("--poll-min", type=float, default=0.25, help="service --poll-min (0.25)")
    parser.add_argument("--throughput-jobs", type=int, help="plain jobs per submit phase (500)")
    parser.add_argument("--size", type=int, default=4, help="flux start --test-size (4)")
    parser.add_argument("--out", type=Path, help="results prefix (bench/results/scale)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--stall",
        type=float,
        default=0.0,
        help="keep the queues still until this many seconds after the service has "
        "created every task (a vendor queue stall; default 0: they run from its start)",
    )
    parser.add_argument(
        "--held-arm",
        choices=("off", "on"),
        help="instead of the full run: the service holding every job for --held-window "
        "seconds with [quantum.metrics] off or on (its CPU; with metrics, the scrapes' "
        "times and the exporter's cost); writes <out>_<label>.json",
    )
    parser.add_argument("--label", help="the held arm's name in its results (default: the arm)")
    parser.add_argument(
        "--arms-summary",
        action="store_true",
        help="write <out>_arms.txt from the held arms' <out>_<label>_r<N>.json, and stop",
    )
    parser.add_argument(
        "--scrape-every", type=float, default=1.0, help="held arm: seconds between scrapes (1)"
    )
    args = parser.parse_args()
    quick = args.quick
    plan = Plan(
        units=args.units or (20 if quick else 100),
        jobs_per_unit=args.jobs_per_unit,
        speed=args.speed,
        held_window=args.held_window or (25.0 if quick else 60.0),
        poll_min=args.poll_min,
        throughput_jobs=args.throughput_jobs or (200 if quick else 500),
        stall=args.stall,
        quick=quick,
        size=args.size,
    )
    if plan.jobs_per_unit < 2 or plan.units < DEVICES:
        parser.error(f"need --jobs-per-unit >= 2 and --units >= {DEVICES}")
    out = args.out
    if out is None:
        out = Path(tempfile.gettempdir()) / "fq-scale-quick" if quick else RESULTS / "scale"
    if args.arms_summary:
        say(arms_summary(args.out or RESULTS / "scale_10k"))
        return 0
    if args.held_arm is not None:
        label = args.label or f"metrics_{args.held_arm}"
        arm = held_arm(plan, args.held_arm == "on", label, args.scrape_every, args.out)
        return 0 if arm.get("held") == plan.jobs else 1
    command = shlex.join(["python", "bench/scale.py", *sys.argv[1:]])
    result = run(plan, out, not args.no_plot, command)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
