"""Faults at scale: does flux-quantum keep its promises when the vendors and the site fail?

This module owns the fault campaign: a seeded fault plan for the emulator, a seeded
workload of hybrid jobs of every pattern, seeded disruptions of the site, the run in a
real Flux instance, and the figures. It never fixes what it finds: it counts, prints and
writes what the promise checker (``flux_quantum.testing.promises``) says, and it exits 0 only
when that checker finds no violation. It never reaches anything but loopback.

The set-up, per arm: the project's emulator in this process (Braket-like QPUs and a
simulator, IBM backends with small queues; ``ScaledClock`` at ``--speed``, 20: one wall
second is 20 vendor seconds) with a generated scenario whose rate faults cover every
kind the emulator knows (throttling, internal errors, connection resets, a create applied
but its answer lost, slow answers, tasks that fail or that the vendor cancels, S3 and
IBM result download errors, a device offline mid-queue, an IBM backend paused); a
``flux start --test-size=1`` instance with a statedir (so it can be restarted), the
quantum plugin and validator as ``flux quantum config`` prints them, the job-shell
plugin (``flux quantum config --broker-opts``), a site ledger (``[quantum.ledger]
path``); the handler service under its supervisor (``flux quantum service start``, its
intervals scaled by the speed) with a catalog whose prices equal the scenario's, so the
ledger and the vendor's bill must agree to the cent. Two secrets sit in the broker's
environment (an AWS secret key and an IBM API key, as a site exports them): no log,
eventlog or memo may show them.

The workload (``--jobs``, arriving over ``--window`` seconds): single jobs, fan-out groups
(``qpu.group``), batches (a ``qpu.program`` list), variational loops (``flux quantum loop
submit``), IBM jobs with a session (``qpu.session``), some with ``qpu.failover=next``, and
``release_at`` done / running / a queue position / predict; a few are cancelled by the
campaign while held. The disruptions, at seeded moments inside the window: ``kill -9`` of
the service process (its supervisor restarts it), a restart of the whole instance while
jobs are held (the broker shut down, started again on the same statedir, the service
started again as a site's rc does), and the ledger's writer killed mid-write (the service
stopped with SIGSTOP until ``/proc/locks`` shows it holding SQLite's WAL write lock on the
ledger, then SIGKILL; otherwise SIGCONT and a retry a few ms later). After the drain (no
active job, the service idle: no session open, nothing settling) the checker gathers
Flux's eventlogs, the emulator's report and the ledger and counts violations per promise.

Figures: faults injected by kind (the emulator's report), violations by promise (target 0
each), jobs completed / failed by reason, the time until the service is back at full work
(every job held at the moment is tracked by it again) after a kill -9 (target 5 s) and
after an instance restart (target 30 s from the broker being up), and vendor calls per
QPU job against a no-fault arm running the same workload without faults or disruptions.

    python bench/faults.py --quick     # < 5 min: 30 submissions an arm, 1 disruption of each kind
    python bench/faults.py             # 240 submissions an arm (~400 jobs), ~10 min on 2 cores:
                                       # bench/results/faults.{txt,csv,json}

The quick run writes its files only with ``--out-dir``; both exit 0 only when the checker
found no violation in either arm.

``faults_plan.py`` (the seeded plan) and ``faults_arm.py`` (an arm's run) run the
workload; ``faults_report.py`` reports on it; this file parses the command and runs the
arms.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from faults_arm import Arm, ArmResult
from faults_plan import Disruption, FaultSpec, JobPlan, disruption_plan, fault_plan, workload
from faults_report import REPO, git_commit, ok, rows, summary

RESULTS = REPO / "bench" / "results"


def run_arm(
    name: str,
    args: argparse.Namespace,
    plan: Sequence[JobPlan],
    faults: Sequence[FaultSpec],
    disruptions: Sequence[Disruption],
    tmp: Path,
    say: Callable[[str], None],
) -> ArmResult:
    arm = Arm(name, tmp / name, args, faults, disruptions, say)
    try:
        arm.setup()
        arm.run(plan)
        arm.collect()
    except Exception as exc:
        arm.result.errors.append(f"{type(exc).__name__}: {exc}")
        say(f"    {name}: {type(exc).__name__}: {exc}")
    finally:
        arm.close()
        if args.keep:
            say(f"    {name}: work kept in {arm.work}")
    return arm.result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (< 5 minutes)")
    parser.add_argument("--jobs", type=int, help="submissions per arm (240; quick 30)")
    parser.add_argument("--window", type=float, help="wall seconds of arrivals (300; quick 60)")
    parser.add_argument("--speed", type=float, default=20.0, help="vendor clock speed (20)")
    parser.add_argument("--kills", type=int, help="kill -9 of the service (4; quick 1)")
    parser.add_argument("--restarts", type=int, help="instance restarts (2; quick 1)")
    parser.add_argument("--ledger-kills", type=int, help="ledger writer kills (2; quick 1)")
    parser.add_argument("--fault-scale", type=float, default=1.0, help="multiplies fault rates")
    parser.add_argument("--no-clean", action="store_true", help="skip the no-fault arm")
    parser.add_argument(
        "--drain", type=float, help="seconds to wait for the drain (240; quick 120)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if shutil.which("flux") is None:
        print("faults: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    try:
        import flux_quantum  # noqa: F401
    except ImportError:
        print(
            "faults: needs flux-quantum importable (pip install -e . in this Python, or "
            "PYTHONPATH=src)",
            file=sys.stderr,
        )
        return 1
    quick = args.quick
    args.jobs = args.jobs or (30 if quick else 240)
    args.window = args.window or (60.0 if quick else 300.0)
    args.kills = args.kills if args.kills is not None else (1 if quick else 4)
    args.restarts = args.restarts if args.restarts is not None else (1 if quick else 2)
    args.ledger_kills = args.ledger_kills if args.ledger_kills is not None else (1 if quick else 2)
    args.drain = args.drain or (120.0 if quick else 240.0)
    for name in ("jobs", "window", "speed", "drain"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    commit = git_commit()
    command = " ".join(["python bench/faults.py", *(sys.argv[1:] if argv is None else argv)])
    say = lambda text: print(text, flush=True)  # noqa: E731
    header = [
        "faults at scale: flux-quantum's promises under vendor faults and site disruptions",
        f"command: {command}",
        f"commit: {commit}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores",
        f"seed {args.seed}, {args.jobs} submissions over {args.window:g}s, vendor clock "
        f"x{args.speed:g}, fault scale {args.fault_scale:g}; disruptions: {args.kills} kill -9, "
        f"{args.restarts} instance restarts, {args.ledger_kills} ledger writer kills",
    ]
    say("\n".join(header))
    plan = workload(args.seed, args.jobs, args.window)
    horizon = (args.window + args.drain) * args.speed
    faults = fault_plan(args.fault_scale, horizon)
    disruptions = disruption_plan(
        args.seed, args.window, args.kills, args.restarts, args.ledger_kills
    )
    t0 = time.monotonic()
    runs = []
    with contextlib.ExitStack() as stack:
        if args.keep:
            tmp = tempfile.mkdtemp(prefix="fq-faults-")
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="fq-faults-"))
        runs.append(run_arm("faults", args, plan, faults, disruptions, Path(tmp), say))
        if not args.no_clean:
            # The same workload without faults or disruptions: what the faults cost in calls.
            runs.append(run_arm("clean", args, plan, (), (), Path(tmp), say))
    header.append(f"wall {(time.monotonic() - t0) / 60:.1f} min")
    text = summary(runs, header)
    say("")
    say(text)
    if not quick or args.out_dir != RESULTS:
        out = args.out_dir
        out.mkdir(parents=True, exist_ok=True)
        stem = "faults_quick" if quick else "faults"
        (out / f"{stem}.txt").write_text(text + "\n")
        with open(out / f"{stem}.csv", "w", newline="") as f:
            writer = csv.DictWriter(
                f, fieldnames=["arm", "figure", "key", "value", "commit", "command"]
            )
            writer.writeheader()
            for row in rows(runs):
                writer.writerow({**row, "commit": commit, "command": command})
        (out / f"{stem}.json").write_text(
            json.dumps(
                {"command": command, "commit": commit, "runs": [asdict(r) for r in runs]},
                indent=1,
                default=str,
            )
            + "\n"
        )
        say(f"results: {out / stem}.{{txt,csv,json}}")
    return 0 if runs and ok(runs[0]) and all(ok(r) for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
