"""bench/scale.py's workload: the plan of a run (units, devices, speeds), the emulator's
scenario and the catalog for it, the units' jobs submitted, and the plain jobs of the
submit-throughput phases.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scale_probe import service_status, wait_inactive

DEVICES = 5
# Mean emulated service time per task on each device (seconds); uniform in [0.5, 1.5] x.
SERVICE_TIMES = (40.0, 50.0, 60.0, 70.0, 80.0)
ARN = "arn:aws:braket:us-east-1::device/qpu/emulator/ScaleQ{k}"
WARM_UP_JOBS = 160
SUBMIT_BATCHES = 5


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
