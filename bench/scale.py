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

``scale_plan.py`` (the workload), ``scale_probe.py`` (the processes measured) and
this file (the phases of a run, the held arm) run the workload; ``scale_report.py``
reports on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scale_plan import (
    DEVICES,
    Plan,
    adoption_done,
    cancel,
    catalog_text,
    purge,
    scenario,
    submit_phase,
    submit_scenario,
    tracking,
    warm_up,
)
from scale_probe import (
    Sampler,
    count_brokers,
    free_port,
    idle_baseline,
    metrics_cost,
    plugin_query,
    say,
    scrape,
    service_status,
    start_service,
    stop_service,
    wait_inactive,
    wait_until,
)
from scale_report import (
    REPO,
    Result,
    analyse_jobs,
    arms_summary,
    flux_version,
    git_version,
    mb,
    phase_line,
    plot_lags,
    summarise,
    write_csv,
)

from flux_quantum.emulator.clock import ScaledClock

RESULTS = REPO / "bench" / "results"


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
            say(f"  submit {plan.throughput_jobs} plain jobs, 0 held: {phase_line(phases[-1][1])}")

            # -- the service with nothing to do: its memory and CPU baseline
            idle = idle_baseline(h, cmd, inst, log)
            say(f"  idle service: VmRSS {mb(int(idle['rss_kb']))}, CPU {idle['cpu_pct']:.1f} %")

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
            say(f"  submit {plan.throughput_jobs} plain jobs, 0 held: {phase_line(phases[-1][1])}")

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
        f"flux: {flux_version()}; flux-quantum: {git_version()}; "
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
            port = free_port()
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
                    scrapes.append(scrape(urllib.request, url))
                time.sleep(scrape_every)
            t1 = time.time()
            time.sleep(1.0)
            result["cpu_pct"] = round(sampler.cpu_share("service", t0, t1), 2)
            result["rss_kb"] = sampler.memory_at("service", t1)[0]
            if url is not None:
                result.update(metrics_cost(urllib.request, url, service_pid, scrapes, t1 - t0))
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
    result["flux_quantum"] = git_version()
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if out is not None:
        path = out.parent / f"{out.name}_{label}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        say(f"wrote {path}")
    return result


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
            f"{' (plugin unloaded)' if key == 'noplugin' else ''}: {phase_line(phases[-1][1])}"
        )


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
