"""bench/faults.py's campaign plan, seeded: the fleet, the faults each vendor's emulator
injects and when, the workload of jobs by pattern, the disruptions (kills, restarts, a
locked ledger), and the emulators' scenarios and the catalog for them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATTERNS = ("single", "fanout", "batch", "loop", "session")
DISRUPTIONS = ("kill", "restart", "ledger")
STATE_DEPEND = 2
STATES_ACTIVE = 1 | 2 | 4 | 8 | 16 | 32
PROGRAMS = (
    "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n",
    "OPENQASM 3.0;\nbit[3] c;\nqubit[3] q;\nh q[0];\ncnot q[0], q[1];\ncnot q[1], q[2];\n"
    "c = measure q;\n",
    "OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\nx q[0];\nh q[1];\nc = measure q;\n",
)
# A loop's step: reads task k's result through the service, asks for the same program
# again; the loop ends at --max-iterations.
STEP = """import sys
from flux_quantum.job.loop import Step
step = Step.current()
if step is not None:
    counts = step.result(timeout=120).counts
    total = sum(counts.values()) or 1
    step.next(step.program, value=counts.get("00", 0) / total)
"""


def is_qpu_name(name: str) -> bool:
    """A job the campaign submitted with a qpu request, by its name (a pattern's job, or
    a variational loop's)."""
    return name.startswith(PATTERNS) or name.startswith("fq-loop-")


# --- the vendors: devices, prices, faults ----------------------------------------------


@dataclass(frozen=True)
class Device:
    """One emulated device and its catalog twin (vendor ``local``); vendor seconds."""

    name: str  # catalog name
    vendor: str  # braket | ibm: which side of the emulator serves it
    klass: str  # qpu | simulator
    service: float  # mean vendor seconds a task runs
    depth: int  # tasks queued at the start
    load: float  # background utilisation

    @property
    def ident(self) -> str:
        """The Braket device ARN, or the IBM backend name."""
        if self.vendor == "ibm":
            return f"ibm_{self.name}"
        kind = "qpu" if self.klass == "qpu" else "quantum-simulator"
        return f"arn:aws:braket:us-east-1::device/{kind}/emulator/{self.name}"

    def queue(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "arrival_rate": self.load / self.service,
            "service_time": self.service,
            "distribution": "exponential",
        }

    def catalog(self, speed: float) -> str:
        if self.vendor == "ibm":
            price = "{per_minute: 96}"
        elif self.klass == "qpu":
            price = "{per_task: 0.30, per_shot: 0.00145}"
        else:
            price = "{per_minute: 0.075, min_seconds: 3}"
        return (
            f"  - name: {self.name}\n    vendor: local\n    id: {self.ident}\n"
            f"    class: {self.klass}\n    qubits: 20\n    region: us-east-1\n"
            f"    price: {price}\n    slots: 100\n"
            f"    properties: {{drain_seconds_per_task: {self.service / speed:.4g}}}\n"
        )


FLEET = (
    Device("qpu-a", "braket", "qpu", 20.0, 3, 0.5),
    Device("qpu-b", "braket", "qpu", 10.0, 2, 0.5),
    Device("sim", "braket", "simulator", 4.0, 0, 0.3),
    Device("heron", "ibm", "qpu", 12.0, 2, 0.5),
    Device("eagle", "ibm", "qpu", 8.0, 1, 0.5),
)
BRAKET = tuple(d for d in FLEET if d.vendor == "braket")
IBM = tuple(d for d in FLEET if d.vendor == "ibm")
IBM_PRICE_PER_SECOND = 1.60  # the catalog's per_minute 96


@dataclass(frozen=True)
class FaultSpec:
    """One fault of the plan: which side, its kind (how the report counts it) and the
    scenario entry."""

    vendor: str  # braket | ibm
    kind: str
    entry: Mapping[str, Any]


# Real seconds an answer takes to time out the service's vendor clients (their read
# timeout is 20 s for Braket and IBM).
TIMED_OUT = 22.0


def fault_plan(scale: float = 1.0, horizon: float = 3600.0) -> tuple[FaultSpec, ...]:
    """Rate faults of every kind, scaled by ``scale`` (0: none). Which calls they hit is
    seeded by the emulator's seed (``random.Random(f"{seed}:fault:{index}:{n}")``), so the
    same seed injects the same faults into the same calls. ``horizon``: vendor seconds the
    arm lasts, where the offline / paused windows fall."""
    if scale <= 0:
        return ()

    def r(rate: float) -> float:
        return round(min(1.0, rate * scale), 4)

    create, get, ibm_create = "CreateQuantumTask", "GetQuantumTask", "CreateJob"
    qb, eagle = "arn:aws:braket:us-east-1::device/qpu/emulator/qpu-b", "ibm_eagle"
    off = (round(horizon * 0.3), round(horizon * 0.3 + 60))
    return (
        FaultSpec(
            "braket",
            "error:ThrottlingException",
            {"operation": create, "error": "ThrottlingException", "rate": r(0.05)},
        ),
        FaultSpec(
            "braket",
            "error:InternalServiceException",
            {"operation": [create, get], "error": "InternalServiceException", "rate": r(0.03)},
        ),
        FaultSpec(
            "braket",
            "error:ThrottlingException",
            {"operation": "GetDevice", "error": "ThrottlingException", "rate": r(0.05)},
        ),
        FaultSpec("braket", "reset", {"operation": [create, get], "reset": True, "rate": r(0.03)}),
        FaultSpec(
            "braket",
            "lost",
            {"operation": create, "reset": True, "after_commit": True, "rate": r(0.04)},
        ),
        FaultSpec("braket", "delay", {"operation": get, "delay": 1.0, "rate": r(0.02)}),
        # Past the clients' 20 s read timeout: a poll that times out, and a create applied
        # whose answer comes too late (lost by a timeout, not a reset).
        FaultSpec("braket", "delay", {"operation": get, "delay": TIMED_OUT, "rate": r(0.002)}),
        FaultSpec(
            "braket",
            "delay",
            {"operation": create, "delay": TIMED_OUT, "after_commit": True, "rate": r(0.01)},
        ),
        FaultSpec("braket", "fail_task", {"fail_task": "injected: device error", "rate": r(0.04)}),
        FaultSpec("braket", "cancel_task", {"cancel_task": True, "rate": r(0.03)}),
        FaultSpec(
            "braket",
            "s3:InternalError",
            {"operation": "GetObject", "error": "InternalError", "rate": r(0.05)},
        ),
        FaultSpec(
            "braket",
            "s3:SlowDown",
            {"operation": "GetObject", "error": "SlowDown", "rate": r(0.03)},
        ),
        FaultSpec(
            "braket",
            "offline",
            {"device": qb, "offline": [{"start": off[0], "end": off[1]}]},
        ),
        FaultSpec("ibm", "error:503", {"operation": ibm_create, "status": 503, "rate": r(0.05)}),
        FaultSpec("ibm", "error:500", {"operation": ["GetJob"], "status": 500, "rate": r(0.03)}),
        FaultSpec(
            "ibm",
            "lost",
            {"operation": ibm_create, "reset": True, "after_commit": True, "rate": r(0.04)},
        ),
        FaultSpec("ibm", "reset", {"operation": "GetJob", "reset": True, "rate": r(0.02)}),
        FaultSpec(
            "ibm", "error:500", {"operation": "GetJobResults", "status": 500, "rate": r(0.05)}
        ),
        FaultSpec(
            "ibm",
            "fail_job",
            {"operation": ibm_create, "fail_job": "injected: backend error", "rate": r(0.04)},
        ),
        FaultSpec(
            "ibm", "cancel_job", {"operation": ibm_create, "cancel_job": True, "rate": r(0.03)}
        ),
        FaultSpec("ibm", "delay", {"operation": "GetJob", "delay": 1.0, "rate": r(0.02)}),
        FaultSpec(
            "ibm",
            "delay",
            {"operation": ibm_create, "delay": TIMED_OUT, "after_commit": True, "rate": r(0.01)},
        ),
        FaultSpec("ibm", "paused", {"backend": eagle, "paused": [off[0] + 30, off[1] + 30]}),
    )


def scenarios(plan: Sequence[FaultSpec]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The Braket and IBM scenario dicts for ``plan``, and the faults this emulator does
    not know (dropped, each said in one line): every fault is checked on its own, so one
    the emulator refuses leaves the others in."""
    from flux_quantum.emulator import Scenario
    from flux_quantum.emulator.ibm import IbmScenario
    from flux_quantum.emulator.scenario import ScenarioError

    devices = {
        d.ident: {
            "arn": d.ident,
            "name": d.name,
            "type": "QPU" if d.klass == "qpu" else "SIMULATOR",
            "qubits": 20,
            "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.3}
            if d.klass == "qpu"
            else {"price": 0.075, "unit": "minute"},
            "queue": d.queue(),
        }
        for d in BRAKET
    }
    backends = {d.ident: {"name": d.ident, "qubits": 20, "queue": d.queue()} for d in IBM}
    braket: dict[str, Any] = {"devices": list(devices.values()), "faults": []}
    ibm: dict[str, Any] = {
        "plan": "paid",
        "price_per_second": IBM_PRICE_PER_SECOND,
        "backends": list(backends.values()),
        "faults": [],
    }
    dropped: list[str] = []

    def accepted(build: Callable[[], Any]) -> str | None:
        try:
            build()
        except (ScenarioError, ValueError, TypeError) as exc:
            return str(exc).splitlines()[0]
        return None

    base_ibm = {"backends": list(backends.values())}
    if accepted(lambda: IbmScenario.from_dict({**base_ibm, "price_per_second": 1.6})):
        del ibm["price_per_second"]  # the emulator's own default for plan paid is 1.60
        dropped.append("ibm price_per_second (the emulator's default is used)")
    for fault in plan:
        entry = dict(fault.entry)
        if fault.kind == "offline":
            device = dict(devices[entry["device"]], offline=entry["offline"])
            why = accepted(lambda d=device: Scenario.from_dict({"devices": [d]}))
            if why is None:
                devices[entry["device"]]["offline"] = entry["offline"]
        elif fault.kind == "paused":
            backend = dict(backends[entry["backend"]], paused=[entry["paused"]])
            why = accepted(lambda b=backend: IbmScenario.from_dict({"backends": [b]}))
            if why is None:
                backends[entry["backend"]]["paused"] = [entry["paused"]]
        elif fault.vendor == "braket":
            why = accepted(
                lambda e=entry: Scenario.from_dict(
                    {"devices": list(devices.values()), "faults": [e]}
                )
            )
            if why is None:
                braket["faults"].append(entry)
        else:
            why = accepted(lambda e=entry: IbmScenario.from_dict({**base_ibm, "faults": [e]}))
            if why is None:
                ibm["faults"].append(entry)
        if why is not None:
            dropped.append(f"{fault.vendor} {fault.kind}: {why}")
    braket["devices"] = list(devices.values())
    ibm["backends"] = list(backends.values())
    return braket, ibm, dropped


def catalog(speed: float) -> str:
    return "currency: USD\ndevices:\n" + "".join(d.catalog(speed) for d in FLEET)


# --- the workload and the disruptions -----------------------------------------------------


@dataclass(frozen=True)
class JobPlan:
    """One submission of the campaign: a job, a fan-out group or a loop."""

    index: int
    at: float  # wall seconds after the arm's start
    pattern: str  # one of PATTERNS
    device: str  # catalog name, or "any" (failover next picks among the same class)
    release_at: str | int
    failover: bool = False
    members: int = 1  # fan-out: jobs in the group
    programs: int = 1  # batch: programs in the list
    iterations: int = 0  # loop: steps
    session: bool = False
    shots: int = 100
    cancel_after: float | None = None  # wall seconds after submit the campaign cancels it

    def request(self, programs: Sequence[Path]) -> dict[str, Any]:
        """The job's ``system.qpu`` table (not for loops: ``flux quantum loop submit``)."""
        out: dict[str, Any] = {"shots": self.shots, "release_at": self.release_at}
        if self.device == "any":
            out.update(device="local:any", policy="min-wait", **{"class": "qpu"})
        else:
            out["device"] = f"local:{self.device}"
        out["program"] = (
            [str(p) for p in programs[: self.programs]]
            if self.pattern == "batch"
            else str(programs[self.index % len(programs)])
        )
        if self.failover:
            out["failover"] = "next"
        if self.pattern == "fanout":
            out["group"] = f"g{self.index}"
        if self.session:
            out["session"] = "dedicated"
        return out


def workload(seed: int, n: int, window: float) -> tuple[JobPlan, ...]:
    """``n`` submissions over ``window`` wall seconds, every pattern at least once (the
    first five are one of each), the rest drawn by weight; seeded."""
    rng = random.Random(f"{seed}:workload")
    weights = {"single": 0.35, "fanout": 0.2, "batch": 0.2, "loop": 0.1, "session": 0.15}
    kinds = list(PATTERNS) + rng.choices(
        list(weights), weights=list(weights.values()), k=max(0, n - len(PATTERNS))
    )
    kinds = kinds[:n]
    times = sorted(rng.uniform(0.0, window) for _ in kinds)
    plans = []
    for i, (kind, at) in enumerate(zip(kinds, times, strict=True)):
        release: str | int = rng.choice(["done", "done", "done", "running", 1, 2, "predict"])
        failover = kind != "loop" and rng.random() < 0.25
        if kind == "session":
            device = rng.choice([d.name for d in IBM])
        elif failover:
            device = "any"
        else:
            device = rng.choice([d.name for d in FLEET])
        plans.append(
            JobPlan(
                index=i,
                at=round(at, 3),
                pattern=kind,
                device=device,
                release_at="done" if kind == "loop" else release,
                failover=failover,
                members=rng.randint(2, 4) if kind == "fanout" else 1,
                programs=rng.randint(2, 3) if kind == "batch" else 1,
                iterations=rng.randint(2, 3) if kind == "loop" else 0,
                session=kind == "session" or (kind == "loop" and device in {d.name for d in IBM}),
                shots=rng.choice([50, 100, 200]),
                cancel_after=round(rng.uniform(0.2, 2.0), 3)
                if kind in ("single", "batch") and rng.random() < 0.05
                else None,
            )
        )
    return tuple(plans)


@dataclass(frozen=True)
class Disruption:
    at: float  # wall seconds after the arm's start
    kind: str  # one of DISRUPTIONS


def disruption_plan(
    seed: int, window: float, kills: int, restarts: int, ledger: int
) -> tuple[Disruption, ...]:
    """Seeded moments inside the window's middle 80 %, at least 8 s apart so each
    recovery is measured on its own."""
    rng = random.Random(f"{seed}:disruptions")
    kinds = ["kill"] * kills + ["restart"] * restarts + ["ledger"] * ledger
    rng.shuffle(kinds)
    if not kinds:
        return ()
    lo, hi = 0.1 * window, 0.9 * window
    slot = (hi - lo) / len(kinds)
    out = []
    for k, kind in enumerate(kinds):
        start = lo + k * slot
        out.append(Disruption(round(start + rng.uniform(0, max(0.0, slot - 8.0)), 3), kind))
    return tuple(out)
