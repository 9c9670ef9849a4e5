"""bench/loop.py's report on the runs: the medians per arm, the pairs' figures and
targets, the hybrid pair's, the break-even, the header, the CSV and the line per run.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import statistics
import sys
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import percentile, verdict
from loop_arms import ARMS, FILL_QUEUE, FILL_SECONDS, HYBRID_PAIR, PAIRS, SHOT_SECONDS, Device, Run

from flux_quantum.timing.step_plan import DEFAULT_WEIGHT

# The adaptive arm's targets against the in-job loop: time to result within +2 %, idle
# within 5 % of the in-job loop's.
ADAPTIVE_TTR_MAX = 2.0
ADAPTIVE_IDLE_MAX = 5.0


# -- reporting -------------------------------------------------------------------------------


def _median(rows: list[Run], attr: str) -> float:
    values = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
    return statistics.median(values) if values else float("nan")


def summarize(rows: list[Run]) -> dict[str, dict[str, Any]]:
    """Per arm: medians over its runs, percentiles over every iteration of them."""
    good = [r for r in rows if not r.error]
    table: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        case = [r for r in good if r.arm == arm]
        if not case:
            continue
        gaps = [g for r in case for g in r.floats("gaps")]
        overheads = [o for r in case for o in r.floats("overheads")]
        detects = [d for r in case for d in r.floats("detects")]
        steps = [s for r in case for s in r.floats("step_seconds")]
        startups = [s for r in case for s in r.floats("startups")]
        node_waits = [w for r in case for w in r.floats("node_waits")]
        plans = [a for r in case for a in r.plans.split()]
        table[arm] = {
            "runs": len(case),
            "k": case[0].k,
            "tasks": sorted({r.tasks for r in case}),
            "idle": _median(case, "idle"),
            "held": _median(case, "held"),
            "ttr": _median(case, "ttr"),
            "ttr_wall": _median(case, "ttr_wall"),
            "own": _median(case, "own"),
            "wait_first": _median(case, "wait_first"),
            "wait_later": _median(case, "wait_later"),
            "gap_p50": percentile(gaps, 0.5),
            "gap_p99": percentile(gaps, 0.99),
            "overhead_p50": percentile(overheads, 0.5),
            "overhead_p99": percentile(overheads, 0.99),
            "overheads": len(overheads),
            "detect_p50": percentile(detects, 0.5),
            "step_p50": percentile(steps, 0.5),
            "startup_p50": percentile(startups, 0.5),
            "calls": _median(case, "calls"),
            "calls_create": _median(case, "calls_create"),
            "calls_poll": _median(case, "calls_poll"),
            "calls_session": _median(case, "calls_session"),
            "sessions": f"{sum(r.sessions_opened for r in case)}/"
            f"{sum(r.sessions_closed for r in case)}",
            "session_jobs": _median(case, "session_jobs"),
            "best": _median(case, "best"),
            "node_wait_p50": percentile(node_waits, 0.5),
            "node_wait_max": max(node_waits, default=float("nan")),
            "plans": {a: plans.count(a) for a in ("keep", "early", "give-back") if a in plans},
            "in_place": sum(r.in_place for r in case),
            "cost": _median(case, "cost"),
            "hybrid_cost": _median(case, "hybrid_cost"),
        }
    return table


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def report(rows: list[Run], args: argparse.Namespace, wall: float) -> str:
    table = summarize(rows)
    lines = [header(args, wall), ""]
    lines.append(
        f"{'arm':<14} {'runs':>4} {'tasks':>5} {'idle node-s':>11} {'held node-s':>11} "
        f"{'ttr':>8} {'ttr wall':>8} {'own':>7} {'wait 1st':>8} {'later':>7} "
        f"{'gap p50':>7} {'calls':>6} {'creates':>7} {'sessions':>8} {'best':>6}"
    )
    for arm, t in table.items():
        tasks = ",".join(map(str, t["tasks"]))
        lines.append(
            f"{arm:<14} {t['runs']:>4} {tasks:>5} {_fmt(t['idle'], 1):>11} {_fmt(t['held'], 1):>11} "
            f"{_fmt(t['ttr']):>8} {_fmt(t['ttr_wall'], 1):>8} {_fmt(t['own'], 1):>7} "
            f"{_fmt(t['wait_first']):>8} {_fmt(t['wait_later']):>7} {_fmt(t['gap_p50'], 2):>7} "
            f"{_fmt(t['calls']):>6} {_fmt(t['calls_create']):>7} {t['sessions']:>8} "
            f"{_fmt(t['best'], 3):>6}"
        )
    lines += [
        "",
        "medians over the runs; node-seconds and seconds on the vendor's clock unless 'wall'",
        "idle: nodes held while a task of the loop is pending; held: all node time of its jobs",
        "ttr: first submit -> last job's finish; own: ttr minus the time a task was pending",
        "wait 1st / later: task 0's and the later tasks' (median) create -> end, queue and run",
        "gap p50: task k ended -> task k+1 created, wall s, over every iteration of every run",
        "calls: vendor requests in the run (polls scale with wall time); creates: IBM jobs made",
        "sessions: opened/closed over all runs (closed by the end of each run); best: the",
        "  optimiser's best expected cut (maximum cut 7)",
    ]
    chains = [a for a in ("chain", "chain-session", "adaptive") if a in table]
    if chains:
        lines += ["", "per-iteration overhead of the chains (task k done -> step k start, wall s)"]
        for arm in chains:
            t = table[arm]
            lines.append(
                f"  {arm:<14} p50 {_fmt(t['overhead_p50'], 3)}  p99 {_fmt(t['overhead_p99'], 3)}"
                f"  ({t['overheads']} steps); of it done -> released p50 "
                f"{_fmt(t['detect_p50'], 3)}; a step's start -> finish p50 "
                f"{_fmt(t['step_p50'], 2)} s, of it start -> its rank 0 runs "
                f"{_fmt(t['startup_p50'], 2)} s"
            )
    if chains:
        lines += ["", "the steps' wait for nodes (release -> start, wall s) and the adaptive plans"]
        for arm in chains:
            t = table[arm]
            said = (
                ", ".join(f"{n} {a}" for a, n in t["plans"].items())
                or "none (every step gave back)"
            )
            lines.append(
                f"  {arm:<14} wait for nodes p50 {_fmt(t['node_wait_p50'], 2)} max "
                f"{_fmt(t['node_wait_max'], 2)}; plans: {said}; in place {t['in_place']}"
            )
    lines += ["", "targets (issue 19)"]
    for chain, injob in PAIRS:
        if chain not in table or injob not in table:
            continue
        c, j = table[chain], table[injob]
        share = c["idle"] / j["idle"] * 100 if j["idle"] > 0 else float("nan")
        change = (c["ttr"] / j["ttr"] - 1) * 100 if j["ttr"] > 0 else float("nan")
        p50 = c["overhead_p50"]
        lines.append(
            f"  {chain} idle <= 10 % of {injob}'s: {_fmt(c['idle'])} vs {_fmt(j['idle'])} node-s"
            f" = {share:.1f} %  {verdict(share <= 10.0)}"
        )
        lines.append(
            f"  {chain} time to result within +10 % of {injob}'s: {_fmt(c['ttr'])} vs "
            f"{_fmt(j['ttr'])} s = {change:+.1f} %  {verdict(change <= 10.0)}"
        )
        lines.append(
            f"  {chain} per-iteration overhead p50 <= 0.5 s wall: {_fmt(p50, 3)} s  "
            f"{verdict(p50 <= 0.5)}"
        )
    if "adaptive" in table and "injob" in table:
        c, j = table["adaptive"], table["injob"]
        share = c["idle"] / j["idle"] * 100 if j["idle"] > 0 else float("nan")
        change = (c["ttr"] / j["ttr"] - 1) * 100 if j["ttr"] > 0 else float("nan")
        lines += [
            "targets (adaptive against the in-job loop)",
            f"  adaptive time to result within +{ADAPTIVE_TTR_MAX:g} % of injob's: "
            f"{_fmt(c['ttr'])} vs {_fmt(j['ttr'])} s = {change:+.1f} %  "
            f"{verdict(change <= ADAPTIVE_TTR_MAX)}",
            f"  adaptive idle <= {ADAPTIVE_IDLE_MAX:g} % of injob's: {_fmt(c['idle'])} vs "
            f"{_fmt(j['idle'])} node-s = {share:.1f} %  {verdict(share <= ADAPTIVE_IDLE_MAX)}",
        ]
    lines += break_even(table)
    lines += hybrid_targets(table)
    bad = [r for r in rows if not r.error and r.tasks != r.k]
    open_sessions = [r for r in rows if not r.error and r.sessions_closed != r.sessions_opened]
    lines.append(
        f"  exactly K tasks in every run: {verdict(not bad)}; every session closed: "
        f"{verdict(not open_sessions)}"
    )
    errors = [r for r in rows if r.error]
    if errors:
        lines += ["", f"{len(errors)} runs failed:"]
        lines += [f"  {r.arm} repeat {r.repeat}: {r.error}" for r in errors[:10]]
    return "\n".join(lines)


def hybrid_targets(table: dict[str, dict[str, Any]]) -> list[str]:
    """The Braket pair: a hybrid job's priority against plain tasks in the public queue,
    in time to result, node time held and what it costs."""
    hybrid, plain = HYBRID_PAIR
    if hybrid not in table or plain not in table:
        return []
    h, p = table[hybrid], table[plain]
    change = (h["ttr"] / p["ttr"] - 1) * 100 if p["ttr"] > 0 else float("nan")
    extra = h["cost"] - p["cost"]
    return [
        "",
        "Braket: a hybrid job's priority against plain tasks on the busy QPU",
        f"  time to result {_fmt(h['ttr'])} vs {_fmt(p['ttr'])} s = {change:+.1f} %; the "
        f"later tasks' wait {_fmt(h['wait_later'])} vs {_fmt(p['wait_later'])} s; the first "
        f"{_fmt(h['wait_first'])} vs {_fmt(p['wait_first'])} s (after the job started)",
        f"  held node-s {_fmt(h['held'], 1)} vs {_fmt(p['held'], 1)}; cost "
        f"${h['cost']:.2f} vs ${p['cost']:.2f} (+${extra:.2f}: the job's instance "
        f"${h['hybrid_cost']:.4f}, the tasks as before)",
        f"  shorter time to result: {verdict(change < 0)}",
    ]


def break_even(table: dict[str, dict[str, Any]]) -> list[str]:
    """When the chain wins, from the measured per-iteration figures of the pair without
    sessions: its extra turnaround per iteration against the vendor wait."""
    if "chain" not in table or "injob" not in table:
        return []
    c, j = table["chain"], table["injob"]
    extra = c["gap_p50"] - j["gap_p50"]  # what a step adds between two tasks
    step = c["step_p50"]  # what a step holds its nodes for
    wait_ttr = 10 * extra - j["gap_p50"]
    return [
        "",
        "break-even (per iteration, from the medians above; W: the vendor wait of a task)",
        f"  a step adds {extra:.2f} s between two tasks (gap {c['gap_p50']:.2f} vs "
        f"{j['gap_p50']:.2f} s) and holds its nodes {step:.2f} s",
        f"  chain time to result within 10 % of the in-job loop's when W >= {wait_ttr:.0f} s",
        f"  chain holds fewer node-seconds when W > {max(0.0, step - j['gap_p50']):.1f} s",
    ]


def header(args: argparse.Namespace, wall: float) -> str:
    k = 1 + 2 * args.iterations
    cluster = getattr(args, "cluster", "idle")
    weight = getattr(args, "time_weight", DEFAULT_WEIGHT)
    if args.from_csv:
        return (
            f"flux-quantum variational loop benchmark: runs read from {args.from_csv} "
            f"(python bench/loop.py --from-csv); K = {k}, {args.repeats} repeat(s); the "
            "runs' own header names their command and commit"
        )
    return (
        f"flux-quantum variational loop benchmark: flux start --test-size={args.nodes}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{datetime.now(UTC):%Y-%m-%d}, commit {args.revision}\n"
        f"command: python bench/loop.py {' '.join(sys.argv[1:])}\n"
        f"QAOA MaxCut (examples/qaoa), SPSA {args.iterations} iterations: K = {k} tasks of "
        f"{args.shots} shots on N = {args.nodes} nodes; {args.repeats} repeat(s); took "
        f"{wall / 60:.1f} min\n"
        f"device: emulated IBM backend (qrmi), public queue {args.queue_minutes:g} min of "
        f"{args.job_seconds:g} s jobs at utilisation 1, our jobs run "
        f"{args.job_seconds + args.shots * SHOT_SECONDS:g} s; dedicated sessions modelled "
        f"(interactive TTL 60 s); its Braket twin (the Braket pair) the same queue, hybrid "
        f"jobs starting in {getattr(args, 'hybrid_startup', Device.hybrid_startup):g} s at "
        f"${getattr(args, 'hybrid_price', Device.hybrid_price):g}/h; clock x1 between tasks, "
        f"x{args.fast:g} through each task and a hybrid job's start-up\n"
        f"service: --poll-min={args.poll_min:g} --scan-interval={args.scan_interval:g}; a "
        "shared 2-core machine: compare by ratios and medians\n"
        f"cluster: {cluster}"
        + (
            f" (ordinary jobs of 1-{args.nodes} nodes running {FILL_SECONDS[0]:g}-"
            f"{FILL_SECONDS[1]:g} s, {FILL_QUEUE} always queued)"
            if cluster == "busy"
            else " (nothing else runs)"
        )
        + f"; adaptive: --time-weight={weight:g}, the chains --time-weight=0"
    )


def write_csv(rows: list[Run], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[f.name for f in fields(Run)])
        writer.writeheader()
        for r in rows:
            writer.writerow(asdict(r))


def say(run: Run) -> None:
    if run.error:
        print(f"  {run.arm:<14} #{run.repeat} ERROR {run.error}", flush=True)
        return
    extra = ""
    if run.overheads:
        extra = f", overhead p50 {percentile(run.floats('overheads'), 0.5):.3f} s"
    print(
        f"  {run.arm:<14} #{run.repeat} tasks {run.tasks} idle {run.idle:9,.0f} node-s "
        f"ttr {run.ttr:7,.0f} s ({run.ttr_wall:5.1f} s wall) gap p50 "
        f"{percentile(run.floats('gaps'), 0.5):.2f} s{extra}",
        flush=True,
    )
