"""bench/site.py's arms and what each submits: the arms, their release rules, a job's time
limit and jobspec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from site_fleet import DEVICES
from workload import POPULAR_LIMITS, TraceJob

from flux_quantum.timing.step_plan import WEIGHT_ATTRIBUTE

ARMS = (
    "ungated",
    "gated-1",
    "gated-predict",
    "gated-done",
    "reservation",
    "chain",
    "chain-predict",
    "adaptive",
)
# qpu.release_at of the arm's hybrid jobs (a chain's single and fan-out jobs too)
RELEASE_AT: dict[str, int | str] = {
    "gated-1": 1,
    "gated-predict": "predict",
    "gated-done": "done",
    "chain": "done",
    "chain-predict": "done",
    "adaptive": "done",
}
# The chain arms: qpu.release_at of every step of a loop (flux quantum loop submit
# --release-at; done is the loop's default).
LOOP_RELEASE_AT: dict[str, str] = {"chain": "done", "chain-predict": "predict", "adaptive": "done"}
# The arm whose steps decide what follows each (keep, release early, give back), with
# the loop's time weight (--weight) on every step.
ADAPTIVE = "adaptive"
# An adaptive step's time limit leaves room for one typical wait of its device (the day's
# median, at most this): a user who knows the device lets a step keep its nodes for it.
ADAPTIVE_ROOM_MAX = 3600.0
SERVICE_ARMS = frozenset(RELEASE_AT)  # the arms whose hybrid jobs the handler service holds


def chained(job: TraceJob, arm: str) -> bool:
    """Whether the job runs as a chain of steps under the arm."""
    return arm in LOOP_RELEASE_AT and job.hybrid is not None and job.hybrid.pattern == "variational"


def job_limit(
    job: TraceJob, arm: str, allowance: dict[str, float], typical: dict[str, float] | None = None
) -> float:
    """The time limit a user asks for, emulated seconds: the classical limit plus, for
    every task whose result the job may wait for on its nodes under the arm's release
    rule, the device's longest wait of the day (a user who knows the device). A chain's
    step asks for the round value users pick at or above its share of the classical
    limit (its result is promised at its start), plus that wait where the loop releases
    its steps before the result (``predict``: the step may wait for it on its nodes);
    an adaptive step leaves room for one ``typical`` wait of its device (at most
    ``ADAPTIVE_ROOM_MAX``), to keep its nodes for the next result."""
    hybrid = job.hybrid
    if hybrid is None:
        return job.limit
    worst = allowance[hybrid.device]
    if chained(job, arm):
        wanted = job.limit / hybrid.iterations
        if LOOP_RELEASE_AT[arm] != "done":
            wanted += worst
        if arm == ADAPTIVE:
            wanted += min(ADAPTIVE_ROOM_MAX, (typical or {}).get(hybrid.device, 0.0))
        return next((v for v in POPULAR_LIMITS if v >= wanted), wanted)
    later = (hybrid.iterations - 1) * worst
    first = {
        "gated-done": 0.0,
        "chain": 0.0,
        "chain-predict": 0.0,
        ADAPTIVE: 0.0,
        "reservation": 3 * DEVICES[hybrid.device].service,
    }.get(arm, worst)
    return job.limit + first + later


def jobspec(
    job: TraceJob,
    arm: str,
    factor: float,
    program: Path,
    limit: float,
    step: int = 0,
    after: int | None = None,
    weight: float = 0.0,
) -> Any:
    """The job as the arm submits it; ``step``: a chain's step k (1-based); ``after``:
    the job it waits for (an adaptive step's predecessor keeping its nodes for it);
    ``weight``: the loop's time weight, on an adaptive step (``user.qpu_time_weight``)."""
    from flux.job import JobspecV1

    spec = JobspecV1.from_command(
        ["true"], num_tasks=job.nodes, num_nodes=job.nodes, exclusive=True
    )
    spec.duration = max(1.0, limit / factor)
    if job.hybrid is None:
        spec.setattr("system.exec.test", {"run_duration": f"{job.runtime / factor:.3f}s"})
        spec.setattr("system.job.name", "ordinary")
        return spec
    # Started and finished by the application (App): run_duration 0 means no timer.
    spec.setattr("system.exec.test", {"run_duration": "0", "override": 1})
    spec.setattr("system.job.name", f"hybrid-{job.hybrid.pattern}")
    if step:  # named as flux quantum loop names a step: <loop id>.<k>, k from 0
        spec.setattr("system.job.name", f"loop-{job.index}.{step - 1}")
        spec.setattr("user.qpu_loop", f"loop-{job.index}")
        spec.setattr("user.qpu_iteration", step - 1)
        if weight > 0:
            spec.setattr(f"user.{WEIGHT_ATTRIBUTE}", weight)
        if after is not None:
            spec.setattr("system.dependencies", [{"scheme": "afterany", "value": str(after)}])
    if arm != "ungated":
        request: dict[str, Any] = {
            "device": f"local:{job.hybrid.device}",
            "program": str(program),
            "shots": job.hybrid.shots,
            "release_at": LOOP_RELEASE_AT[arm] if step else RELEASE_AT.get(arm, 1),
        }
        if job.hybrid.group > 1:
            request["group"] = f"g{job.index - job.member}"
        spec.setattr("system.qpu", request)
    return spec
