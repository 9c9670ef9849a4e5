"""bench/site.py's arm run: one arm's day on a fresh instance, its service and fleet, and
the records it leaves (``ArmRun``).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import PROGRAM
from site_app import App
from site_fleet import (
    FLEET,
    JobRecord,
    Journal,
    Ledger,
    Service,
    Usage,
    Vendor,
    instance_toml,
    scenario,
)
from site_jobs import ADAPTIVE, SERVICE_ARMS, chained, job_limit, jobspec
from workload import Trace

# --- one arm --------------------------------------------------------------------------


@dataclass
class ArmRun:
    arm: str
    share: float
    nodes: int
    records: list[JobRecord]
    origin: float  # wall time of the day's start
    factor: float
    day: float
    wall_s: float
    service: Usage | None
    service_wall_s: float
    vendor_calls_total: int
    bench_calls: int
    loadavg: list[float]
    errors: list[str]
    weight: float = 0.0  # the adaptive arm's time weight
    seed: int = 1


def run_arm(
    arm: str,
    share: float,
    trace: Trace,
    args: argparse.Namespace,
    work: Path,
    say: Callable[[str], None],
) -> ArmRun:
    import flux
    import flux.job

    from flux_quantum.cli.demo import Instance
    from flux_quantum.emulator import Emulator, ScaledClock

    factor, day = args.factor, trace.day
    work.mkdir(parents=True)
    (work / "conf").mkdir()
    (work / "conf" / "site.toml").write_text(instance_toml(trace.nodes))
    program = work / "program.qasm"
    program.write_text(PROGRAM)
    catalog = work / "backends.yaml"
    catalog.write_text("devices:\n" + "".join(d.catalog(factor) for d in FLEET))
    clock = ScaledClock(factor)  # frozen at 0 until the day starts
    emulator = Emulator(scenario(FLEET), clock=clock, seed=args.seed).start()
    t_setup = time.monotonic()
    inst = Instance(work, 1, [])
    service = None
    journal = app = None
    loads: list[float] = []
    try:
        uri = inst.env["FLUX_URI"]
        handle = flux.Flux(uri)
        modules = inst.run("flux", "module", "list").stdout
        policy = inst.run("flux", "config", "get", "sched-fluxion-qmanager.queue-policy").stdout
        nodes = sum(
            int(n) for n in inst.run("flux", "resource", "list", "-no", "{nnodes}").stdout.split()
        )
        if "sched-fluxion-qmanager" not in modules or policy.strip().strip('"') != "easy":
            raise RuntimeError(f"not Fluxion with EASY: {modules} {policy}")
        if nodes != trace.nodes:
            raise RuntimeError(f"the instance has {nodes} nodes, not {trace.nodes}")
        if arm in SERVICE_ARMS:
            service = Service(inst, catalog, emulator.url, factor, work / "service.log")
        ledger = Ledger()
        vendor = Vendor(emulator, clock)
        units: dict[int, list[JobRecord]] = {}
        shots: dict[int, int] = {}
        by_index = {j.index: j for j in trace.jobs}
        allowance = args.allowance

        typical = args.typical
        weight = args.weight if arm == ADAPTIVE else 0.0

        def step_spec(record: JobRecord, step: int, after: int | None = None) -> Any:
            j = by_index[record.index]
            limit = job_limit(j, arm, allowance, typical)
            return jobspec(j, arm, factor, program, limit, step, after, weight)

        def step_limit(record: JobRecord) -> float:
            """A step's time limit, wall seconds (the next step's is the same)."""
            j = by_index[record.index]
            return max(1.0, job_limit(j, arm, allowance, typical) / factor)

        app = App(arm, uri, vendor, factor, units, shots, ledger, step_spec, weight, step_limit)
        journal = Journal(uri, ledger, app.allocated)
        journal.start()
        app.start()
        # The backlog queues while the scheduler is stopped; the day starts with it.
        inst.run("flux", "queue", "stop", "--quiet", check=False)
        pending = sorted(trace.jobs, key=lambda j: (j.submit, j.index))
        backlog = [j for j in pending if j.backlog]
        day_jobs = [j for j in pending if not j.backlog]
        futures = [
            (j, flux.job.submit_async(handle, jobspec(j, arm, factor, program, j.limit)))
            for j in backlog
        ]
        for j, f in futures:
            record = JobRecord(j.index, "ordinary", j.nodes, j.runtime, jobid=int(f.get_id()))
            ledger.add(record)
        origin = clock.start()
        inst.run("flux", "queue", "start", "--quiet")
        service_cpu0 = service.usage() if service else None
        say(
            f"    day started: {len(backlog)} backlog jobs queued, setup {time.monotonic() - t_setup:.0f}s"
        )
        next_load = origin
        for j in day_jobs:
            due = origin + j.submit / factor
            while time.time() < due:
                time.sleep(min(0.05, max(0.0, due - time.time())))
            if time.time() >= next_load:
                loads.append(os.getloadavg()[0])
                next_load += 60.0
            limit = job_limit(j, arm, allowance, typical)
            step = 1 if chained(j, arm) else 0
            spec = jobspec(j, arm, factor, program, limit, step, weight=weight)
            jobid = int(flux.job.submit(handle, spec))
            record = JobRecord(j.index, "ordinary", j.nodes, j.runtime, jobid=jobid, step=step)
            if j.hybrid is not None:
                record.kind, record.pattern = "hybrid", j.hybrid.pattern
                record.device, record.iterations = j.hybrid.device, j.hybrid.iterations
                record.unit = j.index - j.member
                units.setdefault(record.unit, []).append(record)
                shots[record.unit] = j.hybrid.shots
            ledger.add(record)
            if arm == "reservation" and j.hybrid is not None and j.member == j.hybrid.group - 1:
                app.scout(record.unit)
        end = origin + (day + args.tail) / factor
        while time.time() < end:
            if time.time() >= next_load:
                loads.append(os.getloadavg()[0])
                next_load += 60.0
            time.sleep(0.2)
        service_cpu1 = service.usage() if service else None
        usage = None
        if service_cpu0 and service_cpu1:
            usage = Usage(
                service_cpu1.cpu - service_cpu0.cpu, service_cpu1.rss_kb, service_cpu1.hwm_kb
            )
        service_wall = time.time() - origin
        app.stop()
        journal.stop()
        records = sorted(ledger.by_id.values(), key=lambda r: (r.index, r.step))
        for r in records:
            if r.task:
                try:
                    line = emulator.task_timeline(r.task)
                except KeyError:
                    continue
                r.timeline = (line.created, line.front, line.started, line.ended)
        run = ArmRun(
            arm,
            share,
            trace.nodes,
            records,
            origin,
            factor,
            day,
            time.monotonic() - t_setup,
            usage,
            service_wall,
            emulator.call_count(),
            vendor.calls,
            loads,
            app.errors,
            weight,
            args.seed,
        )
    finally:
        if app is not None and app.is_alive():
            app.stop()
        if journal is not None and journal.is_alive():
            journal.stop()
        if service is not None:
            service.stop()
        inst.run("flux", "cancel", "--all", "--quiet", check=False)
        inst.stop()
        emulator.stop()
    return run


def warm_up() -> None:
    """The emulator simulates every task it creates: import the simulator once now, not
    at the first task of the first arm."""
    from flux_quantum.emulator import Emulator, ManualClock

    with Emulator(scenario(FLEET), clock=ManualClock()) as emulator:
        Vendor(emulator, None).create(FLEET[0], "warm-up", 10)
