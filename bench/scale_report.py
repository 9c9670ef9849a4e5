"""bench/scale.py's report on a run: every job's release lag from its eventlog, the vendor
calls per task, the summary against issue 13's targets, the CSV and the plot, and the
held arm's summary.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import percentile, verdict
from scale_plan import DEVICES, SERVICE_TIMES, SUBMIT_BATCHES, Plan, Unit
from scale_probe import Sampler

from flux_quantum.emulator.clock import ScaledClock
from flux_quantum.protocol import events

REPO = Path(__file__).resolve().parent.parent
# The targets for the service with every job held.
CPU_TARGET = 5.0  # % of one core
KB_PER_JOB_TARGET = 10.0  # VmRSS per held job
ADOPT_TARGET = 5.0  # seconds to adopt every held job (start or restart)
LAG_P50_TARGET = 0.25  # seconds, the task at its release point -> the job's start
LAG_P99_TARGET = 1.0


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


def phase_line(p: dict[str, Any]) -> str:
    rates = " ".join(f"{r:.0f}" for r in p["batches"])
    return (
        f"accepted in {p['submit_s']:.2f}s (batches {rates} jobs/s), "
        f"all inactive in {p['done_s']:.2f}s"
    )


def git_version() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return proc.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--", "src", "jobtap")
    return commit + (" + uncommitted changes in src/ or jobtap/" if dirty else "")


def flux_version() -> str:
    try:
        out = subprocess.run(["flux", "version"], capture_output=True, text=True).stdout
    except OSError:
        return "?"
    parts = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        parts[key.strip()] = value.strip()
    return f"flux-core {parts.get('libflux-core', '?')}"


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
            f"{mb(int(idle['rss_kb']))} / {mb(rss_held)} / {mb(rss_end)} / {mb(hwm)}",
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


def mb(kb: int | None) -> str:
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
