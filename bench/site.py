"""A site's day at scale: what co-scheduling saves on a 1,024-node cluster.

One real Flux instance per arm: ``flux start`` whose resource set is a fake 1,024-node
cluster (flux-core's ``[fake-resources]`` rc1 task: a synthetic R, ranks forced up), in
which every job runs in job-exec's test mode (no job shell, no process: an ordinary job
"runs" for ``attributes.system.exec.test.run_duration``; a hybrid job runs in the test
mode's override mode, started and finished by this script acting as its application).
Fluxion schedules it for real with EASY backfill; the quantum jobtap plugin and the
ingest validator are loaded as ``flux quantum config`` prints them; the handler service
runs as a process (``flux-quantum service run``); the vendor is the project's emulator
(Braket's wire protocol on 127.0.0.1) with a fleet like the catalog's: three simulators
and three QPUs whose queues wander from minutes to hours over the day.

The day: 24 hours of the Lublin-Feitelson batch workload (``bench/workload.py``)
compressed ``--factor`` times (480: a day in 3 minutes). Vendor and cluster share one
clock: the emulator's clock is the wall clock since the day's start times the factor,
every job's run time and time limit are divided by it, and the service's intervals are
scaled down by it (with floors, ``service_options``). A share of the submissions (5 % and 20 %) is hybrid:
single evaluation, fan-out (a ``qpu.group`` of 2-4 jobs on one task) and variational
(3-5 tasks in a row, with a slice of the job's classical run time after each). Every arm replays
the same seeded trace against the same seeded vendor queues. The day's arrivals offer
0.9 of the machine's node-hours (``--load``), on top of a 2-hour backlog queued at the
start: a busy centre whose queue never empties (EASY packs rigid jobs to about 95 %);
at 1.0 the queue grows all day and the waits measure the day's length.

Arms:

ungated
    hybrid jobs are ordinary jobs: allocated when the scheduler gets to them, they create
    their task from their start (a fan-out group shares it through one client token) and
    wait for it on their nodes (bench/two_queue.py's baseline).
gated-1, gated-predict, gated-done
    ``--setattr=qpu...`` with ``qpu.release_at`` 1, predict or done: held in DEPEND by the
    plugin, the service submits the task at once and releases the job at that point.
reservation
    the flux-quantum prototype's approach as far as upstream Flux can express it: a scout
    (this script) submits the task when the job is submitted and, when the task is next
    to run (position 1), releases the job into the scheduler with the top priority, where
    Fluxion's EASY reservation for the queue's first job holds nodes for it from the
    earliest time they are free; the job waits there for its result. What upstream cannot
    express (a job kept in Fluxion's plan with a reservation and allocated only on an
    external release) is said in the results.
chain
    as ``gated-done``, but a variational job runs as a chain of held steps, as ``flux
    quantum loop`` runs it: step k is a held qpu job with the job's resources and a time
    limit of its own covering one step, whose task k the service creates; released when
    task k is done, the step runs the classical part of iteration k (the same slice of
    the job's run time as in the other arms) and, before it ends, submits step k+1 as a
    new held qpu job (job name ``loop-<index>.<k>``, ``user.qpu_loop`` and
    ``user.qpu_iteration`` set, k counted from 0). The submission is modelled: the step
    runs no process (job-exec's test mode), so this script, acting as its application,
    submits step k+1 at the end of step k's classical slice and then finishes step k.
    Nodes are free between steps. Single and fan-out jobs are as in ``gated-done``.
chain-predict
    as ``chain``, but every step, the first too, carries ``qpu.release_at=predict``, as
    ``flux quantum loop submit --release-at predict`` sets it on each step: the service
    releases a step when the expected wait for its result falls below the measured
    start-up of released jobs (their release -> run, nodes' wait included), so the wait
    for nodes overlaps the vendor queue; a step that runs before its result waits for it
    on its nodes. Single and fan-out jobs are as in ``gated-done``.
adaptive
    as ``chain``, but each step decides what follows it as ``flux quantum loop``'s steps
    do (``bench/site_steps.py``, with the loop's time weight ``--weight`` on every step):
    at the end of its slice it forecasts the wait for the next step's nodes from the
    instance's queue and the next result's from the loop's last task, then keeps its
    nodes (the next step, submitted waiting for this one, ``afterany``, gets its task
    from the service; when the result is there this step works that iteration in place
    and the next step's job is cancelled unrun; past the plan's bound it gives up and
    finishes), or gives them back, the service releasing the next step once its result
    is no farther than the forecast wait for its nodes (early) or at its result when the
    nodes are free. A step's time limit leaves room for one median wait of its device
    (at most an hour). The plans are put beside what happened (decisions against the
    hindsight best, forecast errors); the new targets hold it against ``gated-done``.

In every arm but the chains a variational job's later tasks are created from inside the
running job (by this script, acting as its application), which holds its nodes through
each of their vendor queues.

Measured per arm: node-hours idle waiting for quantum results (for the first task and
for the later tasks of variational jobs), utilisation by useful work, ordinary jobs'
mean and p95 wait and bounded slowdown, hybrid jobs' time to result, variational jobs'
time to their answer (submit of the first step -> the last step's end) and their
per-iteration overhead (task k done -> iteration k's classical work running, wall
seconds), what a release by prediction cost (jobs so released, the start-up lead they
were released by, their idle within that lead and past it, released jobs' release ->
run), vendor calls per hour and the service's CPU and memory; issue 19's targets for
each chain against ``gated-done`` (MISSED where missed); with both a gated-done and an
adaptive arm, the adaptive steps against hindsight and at other time weights
(``bench/site_oracle.py``); a table
(``site.txt``), a CSV of the arms (``site.csv``) and of every job (``site_jobs.csv``),
and plots (``site.png``: utilisation over the day per arm, idle node-hours by arm).

    python bench/site.py            # 1,024 nodes, 24 h at x480, shares 5 % and 20 %, 8 arms
    python bench/site.py --quick    # smoke test: 256 nodes, 4 h at x960, 20 %, 8 arms
    python bench/site.py --arms gated-done,chain,chain-predict --stem site_chain  # loops
    python bench/site.py --arms ungated,gated-done,chain,adaptive --seeds 1,2,3 \
        --stem site_adaptive     # adaptive steps: 3 seeds, medians and spread across them

The compression, x480 rather than x96: the arm runs (up to 8 arms x 2 shares) go one after
another on one 2-core machine, each a day plus a 2-hour tail and its setup; at x96 that
is about 3 h 40 min, at x480 about 50 minutes (the total is printed). What x480 costs in
fidelity: one wall second is 8 emulated minutes, so Flux's own latencies (tens of ms per
job event on a loaded 2-core machine) become 5-20 emulated seconds, and the service's
floors (``--tick`` 0.05 s, ``--poll-min`` 0.05 s, ``--scan-interval`` 0.1 s wall) are
24-48 emulated seconds, where a real service reacts in about a second. Both are far below
what the figures compare (QPU queues of minutes to hours, jobs of minutes to hours,
time limits of at least 5 minutes), and every arm pays them alike; the simulators' own
seconds-long service times are not resolved. ``--factor 96`` runs the same day slower.
``release_at=predict`` is the exception: its lead is the measured start-up of released
jobs in wall seconds, whose part that is those latencies (a second or so at real speed)
becomes minutes of the day, and a job that starts sooner than the lead waits out the
rest on its nodes (the summary splits its idle into the part within the lead and past
it, and gives released jobs' release -> run).
The per-iteration overhead is given in wall seconds, as issue 19's target is: on this
clock it holds the wait for a step's nodes too (one wall second of it is 8 emulated
minutes of the cluster's queue), which a real day would give in emulated time.

``site_fleet.py`` (the vendor fleet, the instance, the service, the jobs' records),
``site_jobs.py`` (the arms and what each submits), ``site_app.py`` (an application's
thread), ``site_arms.py`` (one arm's run) run the workload; ``site_report.py`` reports
on it (with ``site_oracle.py`` and ``site_steps.py``); this file parses the command and
runs the arms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from site_arms import ArmRun, run_arm, warm_up
from site_fleet import FLEET, queue_profile
from site_jobs import ADAPTIVE, ARMS
from site_report import (
    REPO,
    Summary,
    git_commit,
    hours,
    jobs_csv_name,
    oracle_lines,
    plot,
    report,
    secs,
    seeds_lines,
    summarize,
    write_csvs,
)
from site_steps import Decision, decisions
from workload import make_trace

from flux_quantum.timing.step_plan import DEFAULT_WEIGHT

RESULTS = REPO / "bench" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke test (< 5 minutes)")
    parser.add_argument("--nodes", type=int, help="cluster nodes (1024; quick 256)")
    parser.add_argument("--hours", type=float, help="length of the day (24; quick 4)")
    parser.add_argument("--factor", type=float, help="time compression (480; quick 960)")
    parser.add_argument("--shares", help="hybrid shares, comma list (0.05,0.2; quick 0.2)")
    parser.add_argument(
        "--arms", help=f"comma list of {','.join(ARMS)} (default all), e.g. gated-done,chain"
    )
    parser.add_argument("--load", type=float, default=0.9, help="offered load of the day (0.9)")
    parser.add_argument("--backlog", type=float, default=2.0, help="hours of arrivals queued at 0")
    parser.add_argument("--tail", type=float, help="emulated hours run after the day (2; quick 1)")
    parser.add_argument("--start-hour", type=float, default=8.0, help="hour the day starts (8)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--seeds",
        help="comma list of seeds: every arm and share once per seed, then the "
        "medians and spread across them (default: --seed)",
    )
    parser.add_argument(
        "--weight",
        type=float,
        default=DEFAULT_WEIGHT,
        help=f"the adaptive arm's time weight (flux quantum loop submit --time-weight; "
        f"default {DEFAULT_WEIGHT:g})",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--stem", default="site", help="name of the result files (site: site.txt, site.csv, ...)"
    )
    args = parser.parse_args(argv)
    if shutil.which("flux") is None:
        print("site: needs Flux (flux-core and Fluxion) with `flux` on PATH", file=sys.stderr)
        return 1
    quick = args.quick
    args.nodes = args.nodes or (256 if quick else 1024)
    args.hours = args.hours or (4.0 if quick else 24.0)
    # quick: the day at twice the pace, so that its 8 arms take under 5 minutes
    args.factor = args.factor or (960.0 if quick else 480.0)
    args.tail = (args.tail if args.tail is not None else (1.0 if quick else 2.0)) * 3600.0
    shares = [float(x) for x in (args.shares or ("0.2" if quick else "0.05,0.2")).split(",")]
    arms = [a.strip() for a in (args.arms or ",".join(ARMS)).split(",")]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or len(set(arms)) != len(arms):
        parser.error(
            f"--arms {args.arms!r}: a comma list of distinct arms is accepted, from "
            f"{', '.join(ARMS)}"
        )
    day = args.hours * 3600.0
    args.commit = git_commit()
    args.flux_version = (
        subprocess.run(["flux", "version"], capture_output=True, text=True)
        .stdout.split("\n")[0]
        .split()[-1]
    )
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    weights = [(d.name, d.weight) for d in FLEET]
    say = lambda text: print(text, flush=True)  # noqa: E731
    say(
        f"site: {args.nodes} nodes, {args.hours:g} h day x{args.factor:g} "
        f"({day / args.factor / 60:.1f} min per arm), arms {','.join(arms)}, shares "
        f"{','.join(f'{s:.0%}' for s in shares)}, seeds {','.join(map(str, seeds))}; "
        f"commit {args.commit}"
    )
    warm_up()
    t0 = time.monotonic()
    summaries: list[Summary] = []
    series: dict[tuple[float, str], dict[str, list[float]]] = {}
    runs: list[ArmRun] = []
    texts: list[str] = []
    first_profile: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fq-site-") as tmp:
        for seed in seeds:
            args.seed = seed
            profile = queue_profile(FLEET, seed, day)
            first_profile = first_profile or profile
            # A user who knows the device asks for its longest wait of the day, and some.
            args.allowance = {d.name: 1.5 * max(profile[d.name]) + 3 * d.service for d in FLEET}
            args.typical = {d.name: statistics.median(profile[d.name]) for d in FLEET}
            traces = {
                share: make_trace(
                    args.nodes,
                    day,
                    args.load,
                    share,
                    weights,
                    seed,
                    args.start_hour,
                    args.backlog * 3600.0,
                )
                for share in shares
            }
            decided: dict[tuple[float, str], list[Decision]] = {}
            t_seed = time.monotonic()
            for share, trace in traces.items():
                say(
                    f"seed {seed}, share {share:.0%}: {len(trace.jobs)} jobs, "
                    f"{len(trace.hybrid_jobs)} hybrid"
                )
                for arm in arms:
                    say(f"  {arm}")
                    work = Path(tmp) / f"{seed}-{share}-{arm}"
                    run = run_arm(arm, share, trace, args, work, say)
                    summary, data = summarize(run)
                    summaries.append(summary)
                    if seed == seeds[0]:
                        series[(share, arm)] = data
                    runs.append(run)
                    if arm == ADAPTIVE:
                        decided[(share, arm)] = decisions(
                            run.records, run.origin, run.factor, run.weight
                        )
                    say(
                        f"    idle {summary.idle_node_h:.1f} node-h (later tasks "
                        f"{summary.idle_later_node_h:.1f}), useful {summary.util_useful:.1%}, "
                        f"ordinary wait {hours(summary.ord_wait_mean_s)} (p95 "
                        f"{hours(summary.ord_wait_p95_s)}), ttr "
                        f"{hours(summary.hyb_ttr_median_s)}, variational done "
                        f"{hours(summary.var_done_median_s)} (p95 "
                        f"{hours(summary.var_done_p95_s)}), overhead p50 "
                        f"{secs(summary.iter_overhead_p50_s)}, "
                        f"{summary.vendor_calls_per_h:.0f} calls/h, {run.wall_s:.0f}s"
                        + (
                            f"; {len(run.errors)} app errors: {run.errors[:2]}"
                            if run.errors
                            else ""
                        )
                    )
            mine = [s for s in summaries if s.seed == seed]
            wall_seed = time.monotonic() - t_seed
            texts.append(report(mine, traces, profile, args, wall_seed, os.getloadavg(), decided))
    wall = time.monotonic() - t0
    stem = f"{args.stem}_quick" if quick else args.stem
    out = args.out_dir if not quick or args.out_dir != RESULTS else Path(tempfile.gettempdir())
    out.mkdir(parents=True, exist_ok=True)
    text = "\n\n".join(texts)
    if len(seeds) > 1:
        loads = os.getloadavg()
        text += (
            f"\n\n{'=' * 88}\nall seeds: took {wall / 60:.1f} min; load average (1 min) during "
            f"the arms: mean {statistics.fmean(s.loadavg for s in summaries):.2f}, max "
            f"{max(s.loadavg for s in summaries):.2f}; at the end {loads[0]:.2f} {loads[1]:.2f} "
            f"{loads[2]:.2f}\n\n" + "\n".join(seeds_lines(summaries))
        )
    oracle = oracle_lines(summaries, runs)
    if oracle:
        text += f"\n\n{'=' * 88}\n" + "\n".join(oracle)
    (out / f"{stem}.txt").write_text(text + "\n")
    write_csvs(summaries, runs, out, stem, args)
    say("")
    say(text)
    first_seed = [s for s in summaries if s.seed == seeds[0]]
    say(plot(series, first_seed, first_profile, out / f"{stem}.png"))
    say(f"csv: {out / (stem + '.csv')}, {out / jobs_csv_name(stem)}")
    if quick:
        say(f"smoke test: {len(summaries)} arm runs in {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
