#!/usr/bin/env python3
"""Cost of the quantum jobtap plugin on a real Flux instance.

Measured in one run on ``flux start --test-size=4`` (Fluxion):

1. Throughput of N plain jobs (no qpu request) with and without the plugin
   loaded, in ABBA order (without, with, with, without, ...) so that noise and
   the instance's own slow-down as its KVS grows hit both; the overhead is the
   ratio of the summed phase times.  Jobs run through the
   full pipeline (ingest, validator, job-manager, Fluxion, job-exec) with
   the job-exec test mode (``system.exec.test.run_duration``) so the figure
   is the scheduling pipeline's, not fork/exec's.
2. Release -> start latency of M held jobs: each job is released by its own
   ``job-manager.quantum.release`` RPC, paced at a fixed rate (a handler
   releases jobs as their vendor tasks become ready), and the latency is the
   job's ``start`` event timestamp minus the client time just before the RPC.
   A burst (all M in one RPC) is reported too: time until the last starts.

Targets (issue #2): overhead <= 3 %, release->start p50 <= 50 ms, p99 <= 250 ms.

    python bench/plugin_overhead.py            # full run (2000 jobs, 500 held)
    python bench/plugin_overhead.py --quick    # a smaller run for a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import percentile

REPO = Path(__file__).resolve().parent.parent


def flux(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["flux", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"flux {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def run_phase(njobs: int, qpu: bool = False) -> float:
    """Submit NJOBS test-mode jobs at once and return seconds until all are inactive."""
    args = [
        "submit",
        f"--cc=1-{njobs}",
        "--quiet",
        "--setattr=system.exec.test.run_duration=0.001s",
    ]
    if qpu:
        args.append("--setattr=qpu=sv1")
    t0 = time.perf_counter()
    flux(*args, "true")
    flux("queue", "drain", "--timeout=600s")
    return time.perf_counter() - t0


def throughput(njobs: int, rounds: int, plugin: str) -> dict[str, float]:
    times: dict[str, list[float]] = {"without": [], "with": []}
    # ABBA order: an instance slows down as its KVS grows, so a fixed order
    # would bill that drift to whichever phase always runs second.
    for r in range(rounds):
        for mode in ("without", "with") if r % 2 == 0 else ("with", "without"):
            loaded = "quantum.so" in flux("jobtap", "list")
            if mode == "with" and not loaded:
                flux("jobtap", "load", plugin)
            if mode == "without" and loaded:
                flux("jobtap", "remove", "quantum.so")
            times[mode].append(run_phase(njobs))
            flux("job", "purge", "--force", "--num-limit=0", check=False)
    flux("jobtap", "load", plugin) if "quantum.so" not in flux("jobtap", "list") else None
    without = statistics.median(times["without"])
    with_ = statistics.median(times["with"])
    # Over whole ABBA pairs a linear drift cancels in the sums.
    overhead = (sum(times["with"]) / sum(times["without"]) - 1.0) * 100.0
    return {
        "jobs": njobs,
        "rounds": rounds,
        "without_s": without,
        "with_s": with_,
        "without_jobs_per_s": njobs / without,
        "with_jobs_per_s": njobs / with_,
        "overhead_pct": overhead,
        "all_without_s": times["without"],
        "all_with_s": times["with"],
    }


def wait_held(h, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        held = h.rpc("job-manager.jobtap-query", {"name": "quantum.so"}).get()["held"]
        if held >= count:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"only {held} of {count} jobs held after {timeout}s")
        time.sleep(0.2)


def submit_held(njobs: int) -> list[int]:
    from flux.job import JobID

    out = flux(
        "submit",
        f"--cc=1-{njobs}",
        "--setattr=qpu=sv1",
        "--setattr=system.exec.test.run_duration=0.001s",
        "true",
    )
    return [int(JobID(x)) for x in out.split()]


def start_times(h, ids: list[int]) -> dict[int, float]:
    import flux.job

    return {jobid: flux.job.event_wait(h, jobid, "start").timestamp for jobid in ids}


def release_latency(njobs: int, rate: float) -> dict[str, float]:
    import flux

    h = flux.Flux()
    ids = submit_held(njobs)
    wait_held(h, njobs)
    t_release: dict[int, float] = {}
    rpc_s: list[float] = []
    interval = 1.0 / rate
    next_t = time.time()
    for jobid in ids:
        now = time.time()
        if now < next_t:
            time.sleep(next_t - now)
        next_t += interval
        t0 = time.time()
        h.rpc("job-manager.quantum.release", {"id": jobid, "task": f"t{jobid}"}).get()
        rpc_s.append(time.time() - t0)
        t_release[jobid] = t0
    starts = start_times(h, ids)
    lat = [(starts[j] - t_release[j]) * 1000.0 for j in ids]
    flux_cmd_drain()
    return {
        "jobs": njobs,
        "rate_per_s": rate,
        "p50_ms": percentile(lat, 0.5),
        "p90_ms": percentile(lat, 0.9),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": max(lat),
        "rpc_p50_ms": percentile(rpc_s, 0.5) * 1000.0,
    }


def flux_cmd_drain() -> None:
    flux("queue", "drain", "--timeout=600s")
    flux("job", "purge", "--force", "--num-limit=0", check=False)


def release_burst(njobs: int) -> dict[str, float]:
    import flux

    h = flux.Flux()
    ids = submit_held(njobs)
    wait_held(h, njobs)
    t0 = time.time()
    h.rpc("job-manager.quantum.release", {"ids": ids, "task": "burst"}).get()
    rpc = time.time() - t0
    starts = start_times(h, ids)
    flux_cmd_drain()
    return {"jobs": njobs, "rpc_ms": rpc * 1000.0, "last_start_s": max(starts.values()) - t0}


def inner(args: argparse.Namespace) -> int:
    plugin = args.plugin
    tp = throughput(args.jobs, args.rounds, plugin)
    lat = release_latency(args.held, args.rate)
    burst = release_burst(args.held)
    result = {"throughput": tp, "release_latency": lat, "release_burst": burst}
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def report(result: dict, size: int) -> None:
    tp, lat, burst = result["throughput"], result["release_latency"], result["release_burst"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(
        f"flux-quantum plugin overhead (flux start --test-size={size}, Fluxion, {os.cpu_count()} cores)"
    )
    print()
    print(f"{'measure':<44} {'value':>14}  {'target':>12}  verdict")
    print(f"{'-' * 44} {'-' * 14}  {'-' * 12}  -------")
    rows = [
        (
            f"{tp['jobs']} plain jobs, no plugin (median of {tp['rounds']})",
            f"{tp['without_jobs_per_s']:.0f} jobs/s",
            "",
            "",
        ),
        (f"{tp['jobs']} plain jobs, plugin loaded", f"{tp['with_jobs_per_s']:.0f} jobs/s", "", ""),
        (
            "throughput overhead (ABBA)",
            f"{tp['overhead_pct']:+.1f} %",
            "<= 3 %",
            verdict(tp["overhead_pct"] <= 3.0),
        ),
        (
            f"release->start p50 ({lat['jobs']} jobs, {lat['rate_per_s']:.0f}/s)",
            f"{lat['p50_ms']:.1f} ms",
            "<= 50 ms",
            verdict(lat["p50_ms"] <= 50),
        ),
        ("release->start p90", f"{lat['p90_ms']:.1f} ms", "", ""),
        (
            "release->start p99",
            f"{lat['p99_ms']:.1f} ms",
            "<= 250 ms",
            verdict(lat["p99_ms"] <= 250),
        ),
        ("release->start max", f"{lat['max_ms']:.1f} ms", "", ""),
        ("release RPC p50", f"{lat['rpc_p50_ms']:.2f} ms", "", ""),
        (f"burst: {burst['jobs']} jobs released by one RPC", f"{burst['rpc_ms']:.0f} ms", "", ""),
        ("burst: release -> last job started", f"{burst['last_start_s']:.2f} s", "", ""),
    ]
    for name, value, target, v in rows:
        print(f"{name:<44} {value:>14}  {target:>12}  {v}")
    print()
    print("phase times (s) without:", " ".join(f"{t:.2f}" for t in tp["all_without_s"]))
    print("phase times (s) with:   ", " ".join(f"{t:.2f}" for t in tp["all_with_s"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="400 jobs, 100 held, 2 rounds (ABBA needs an even count)",
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--held", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4, help="an even number (ABBA order)")
    parser.add_argument("--rate", type=float, default=20.0, help="paced releases per second")
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the raw JSON result too")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plugin", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.held, args.rounds = 400, 100, 2
    if args.inner:
        return inner(args)

    from flux_quantum.instance.plugin import plugin_path, validator_path

    plugin = str(plugin_path())
    with tempfile.TemporaryDirectory(prefix="fq-bench-") as tmp:
        conf = Path(tmp) / "conf"
        conf.mkdir()
        # The plugin is loaded by the bench itself (phases with and without);
        # the validator stays in both phases: it is part of ingest either way.
        (conf / "bench.toml").write_text(
            f'[ingest.validator]\nplugins = ["jobspec", "{validator_path()}"]\n'
        )
        out = Path(tmp) / "result.json"
        cmd = [
            "flux", "start", f"--test-size={args.size}", "-c", str(conf),
            sys.executable, __file__, "--inner", "--plugin", plugin, "--out", str(out),
            "--jobs", str(args.jobs), "--held", str(args.held),
            "--rounds", str(args.rounds), "--rate", str(args.rate),
        ]  # fmt: skip
        proc = subprocess.run(cmd)
        if proc.returncode != 0 or not out.exists():
            print(f"bench: flux start exited {proc.returncode}", file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
    report(result, args.size)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
