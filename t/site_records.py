"""The records bench/site.py's arms leave, made by hand for its summary's unit tests (the
bench's modules ``site_fleet``, ``site_jobs``, ``site_arms`` and ``site_report``): a day at
``FACTOR`` emulated seconds a wall second from ``ORIGIN``, a variational job of ``NODES``
nodes as one in-job loop or as a chain of steps, an ordinary job, an arm of them;
``site_steps`` the adaptive arm's plans."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
site_fleet = importlib.import_module("site_fleet")  # bench/site_fleet.py, on the path above
site_jobs = importlib.import_module("site_jobs")  # bench/site_jobs.py
site_arms = importlib.import_module("site_arms")  # bench/site_arms.py
site_report = importlib.import_module("site_report")  # bench/site_report.py
site_steps = importlib.import_module("site_steps")  # bench/site_steps.py
site_oracle = importlib.import_module("site_oracle")  # bench/site_oracle.py

JobRecord = site_fleet.JobRecord
FACTOR = 100.0  # emulated seconds per wall second
ORIGIN = 1000.0  # wall time of the day's start
NODES = 8


def wall(day_seconds: float) -> float:
    return ORIGIN + day_seconds / FACTOR


def variational(arm_step: int, jobid: int, **events: float) -> JobRecord:
    record = JobRecord(
        7,
        "hybrid",
        NODES,
        300.0,
        jobid=jobid,
        unit=7,
        pattern="variational",
        device="garnet",
        iterations=3,
        step=arm_step,
    )
    record.events = {name: wall(t) for name, t in events.items()}
    return record


def in_job_loop() -> JobRecord:
    """One job, 3 tasks: the first done before it runs, the later two waited for on its
    nodes for 600 and 1,200 seconds of the day."""
    r = variational(0, 1, submit=0.0, alloc=1000.0, start=1000.0, finish=3000.0)
    r.idle = [(wall(1100.0), wall(1700.0), 2), (wall(1800.0), wall(3000.0), 3)]
    r.work = [(wall(1000.0), wall(1100.0)), (wall(1700.0), wall(1800.0))]
    r.work.append((wall(2900.0), wall(3000.0)))
    r.results = [(1, wall(900.0), wall(1000.0)), (2, wall(1700.0), wall(1700.0))]
    r.results.append((3, wall(2900.0), wall(2900.0)))
    r.t_result = wall(2900.0)
    return r


def chain_loop(lag: float = 30.0) -> list[JobRecord]:
    """The same loop as three steps, each held until its task is done; step k's work
    starts ``lag`` seconds of the day after task k ended."""
    steps = []
    for k, (submit, ended) in enumerate(((0.0, 900.0), (1100.0, 1750.0), (1900.0, 3000.0)), 1):
        start = ended + lag
        r = variational(k, 10 + k, submit=submit, alloc=start, start=start, finish=start + 100)
        r.work = [(wall(start), wall(start + 100))]
        r.results = [(k, wall(ended), wall(start))]
        r.t_result = wall(start)
        steps.append(r)
    return steps


def ordinary() -> JobRecord:
    r = JobRecord(3, "ordinary", 4, 500.0, jobid=99)
    r.events = {name: wall(t) for name, t in {"submit": 10.0, "alloc": 70.0}.items()}
    r.events.update(start=wall(70.0), finish=wall(570.0))
    return r


def arm(name: str, records: list[JobRecord]) -> object:
    return site_arms.ArmRun(
        name, 0.2, 64, records, ORIGIN, FACTOR, 4000.0, 1.0, None, 1.0, 0, 0, [], []
    )
