"""bench/loop.py's arms and what a run of one records: the arms and their pairs, the
emulated devices (IBM's and Braket's), the busy queue's fillers, and ``Run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BACKEND = "heron"
BACKEND_ID = f"ibm_{BACKEND}"
TARGET = f"ibm:{BACKEND}"
ARMS = (
    "injob",
    "injob-session",
    "chain",
    "chain-session",
    "chain-braket",
    "chain-hybrid",
    "adaptive",
)
BRAKET = "garnet"
BRAKET_ARN = "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet"
BRAKET_TARGET = f"local:{BRAKET}"
HYBRID_ROLE = "arn:aws:iam::123456789012:role/flux-quantum-hybrid"
SHOT_SECONDS = 0.008
PAIRS = (("chain", "injob"), ("chain-session", "injob-session"))
HYBRID_PAIR = ("chain-hybrid", "chain-braket")
# A busy cluster (--cluster busy): ordinary jobs of 1..N nodes running FILL_SECONDS
# (uniform), FILL_QUEUE of them always queued, so that a step given its nodes back waits
# for them again.
FILL_SECONDS = (10.0, 60.0)
FILL_QUEUE = 4


def on_braket(arm: str) -> bool:
    """Whether the arm's device is the Braket QPU (else the IBM backend)."""
    return arm in HYBRID_PAIR


# -- the device and the vendor's clock ------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """The busy backend (and its Braket twin), in vendor seconds."""

    queue_minutes: float
    job_seconds: float
    shots: int
    fast: float
    hybrid_startup: float = 120.0
    hybrid_price: float = 0.36

    @property
    def depth(self) -> int:
        return max(1, round(self.queue_minutes * 60.0 / self.job_seconds))

    @property
    def run_seconds(self) -> float:
        return self.job_seconds + self.shots * SHOT_SECONDS

    def queue(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "arrival_rate": 1.0 / self.job_seconds,
            "service_time": self.job_seconds,
            "distribution": "fixed",
            "shot_time": SHOT_SECONDS,
        }

    def scenario(self) -> Any:
        from flux_quantum.emulator.ibm import IbmScenario

        backend = {"name": BACKEND_ID, "qubits": 20, "queue": self.queue()}
        return IbmScenario.from_dict({"plan": "paid", "backends": [backend]})

    def braket_scenario(self) -> Any:
        """The Braket twin: an IQM-Garnet-like QPU with the same queue, hybrid jobs that
        start in ``hybrid_startup`` seconds and bill ``hybrid_price`` an hour."""
        from flux_quantum.emulator import Scenario

        qpu = {
            "arn": BRAKET_ARN,
            "name": "Garnet",
            "qubits": 20,
            "cost": {"price": 0.00145, "unit": "shot", "task_price": 0.30},
            "shots": [1, 20000],
            "queue": self.queue(),
        }
        jobs = {"startup": self.hybrid_startup, "price_per_hour": self.hybrid_price}
        return Scenario.from_dict({"devices": [qpu], "hybrid_jobs": jobs}, source="bench")

    def catalog(self) -> str:
        return (
            "devices:\n"
            f"  - name: {BACKEND}\n    vendor: ibm\n    id: {BACKEND_ID}\n    class: qpu\n"
            "    qubits: 20\n    region: us-east-1\n    price: {per_minute: 96}\n"
            # The drain prior in wall seconds (the service's clock) through a race.
            f"    slots: 1\n    properties: {{drain_seconds_per_task: "
            f"{self.job_seconds / self.fast:.6g}}}\n"
            f"  - name: {BRAKET}\n    vendor: local\n    id: {BRAKET_ARN}\n    class: qpu\n"
            "    qubits: 20\n    price: {per_task: 0.30, per_shot: 0.00145}\n"
            f"    slots: 1\n    properties: {{drain_seconds_per_task: "
            f"{self.job_seconds / self.fast:.6g}}}\n"
            "vendors:\n"
            f"  local: {{hybrid_role_arn: '{HYBRID_ROLE}', hybrid_price: {self.hybrid_price:g}, "
            "hybrid_start_timeout: 600}\n"
        )


# -- one run ----------------------------------------------------------------------------------


@dataclass
class Run:
    arm: str
    repeat: int
    nodes: int
    k: int
    seed: int
    jobs: int = 0  # Flux jobs of the loop
    tasks: int = 0  # IBM jobs created
    sessions_opened: int = 0
    sessions_closed: int = 0
    session_jobs: int = 0  # tasks that rode a session
    calls: int = 0
    calls_create: int = 0
    calls_poll: int = 0
    calls_session: int = 0
    t_submit: float = 0.0
    t_end: float = 0.0
    ttr_wall: float = 0.0
    ttr: float = 0.0  # vendor seconds
    pending: float = 0.0  # vendor seconds a task of the loop was pending
    own: float = 0.0  # ttr - pending
    idle: float = 0.0  # node-seconds, vendor
    held: float = 0.0  # node-seconds, vendor
    wait_first: float = 0.0  # task 0 created -> ended, vendor s
    wait_later: float = 0.0  # median of the later tasks' created -> ended, vendor s
    gaps: str = ""  # task k ended -> task k+1 created, wall s, space-separated
    overheads: str = ""  # chains: task k ended -> step k start, wall s
    detects: str = ""  # chains: task k ended -> step k's qpu-release event, wall s
    startups: str = ""  # chains: step k's start -> its rank 0 journaled it runs, wall s
    step_seconds: str = ""  # chains: each step's start -> finish, wall s
    best: float | None = None  # the optimiser's best expected cut
    evaluated: int = 0
    cost: float = 0.0  # the Braket pair: the tasks' and the hybrid job's, dollars
    hybrid_cost: float = 0.0  # of it the hybrid job's instance time
    error: str = ""
    cluster: str = "idle"
    plans: str = ""  # adaptive: each later step's plan (keep, early, give-back)
    in_place: int = 0  # adaptive: iterations run in place, in the job of the step before
    node_waits: str = ""  # steps' release -> start, wall s (the wait for nodes)

    def floats(self, name: str) -> list[float]:
        """A space-separated column (``gaps``, ``overheads``, ...) as numbers."""
        return [float(x) for x in getattr(self, name).split()]
