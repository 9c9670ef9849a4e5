"""What the emulator's Alice & Bob Felis side serves: targets, their queues and faults.

This module owns the Felis scenario format (YAML or a plain dict), its validation and the
default scenario. It must never touch the network, the clock or any emulator state: a
``FelisScenario`` is an immutable description, and every mistake in one is a
``ScenarioError`` naming the file and the field in one sentence.

Shape (every key but ``targets`` optional)::

    username: emulator-felis         # the API key is base64("username:password"), sent
    password: emulator-felis-secret  #   by QRMI as HTTP Basic credentials
    price_per_second: 0.50           # US dollars per QPU second (no public list price)
    targets:
      - name: "QPU:1Q:BOSON_4A"      # Felis's target name; QRMI's resource id is
        qubits: 1                    #   ab_qpu_1q_boson_4a (lower case, ':' -> '_')
        queue: {depth: 2, service_time: 5}
        instructions: [x, mz]        # the QIR calls it runs (default: GATES); another
                                     #   fails the job's transpilation
    faults:
      - operation: CreateJob         # or a list; see OPERATIONS
        target: "QPU:1Q:BOSON_4A"
        status: 503                  # answered with Felis's error body ...
        calls: [1]                   # ... on these matching calls (first/after/every,
                                     #   rate, start/end in emulated seconds)
      - operation: CreateJob
        fail_job: "qubit lost"       # the job is created and its execution fails
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.reading import Record, ScenarioFile, device_list, fault_list, setting
from flux_quantum.emulator.scenario import JobFault, QueueSpec

OPERATIONS = ("ListTargets", "CreateJob", "UploadInput", "GetJob", "CancelJob", "DownloadOutput")
# The QIR calls a target runs unless the scenario lists its own (``felis_program.gates``
# names, ``_adj`` for adjoints).
GATES = (
    "h", "x", "y", "z", "s", "s_adj", "t", "t_adj", "cnot", "cx", "cz", "swap",
    "rx", "ry", "rz", "mz", "m", "reset",
)  # fmt: skip
_TARGET = re.compile(r"^[A-Z0-9]+:[A-Z0-9]+:[A-Z0-9_]+$")


def _target_name(name: str) -> str | None:
    # QRMI turns the resource id's first two '_' into ':' (ab_emu_6q_physical_cats).
    return None if _TARGET.match(name) else f"must read KIND:SIZE:NAME in capitals, got {name!r}"


@dataclass(frozen=True)
class FelisTargetSpec(Record):
    """One emulated Felis target (a QPU or one of Alice & Bob's emulators)."""

    name: str = setting(check=_target_name)
    qubits: int = 1
    queue: QueueSpec = QueueSpec(service_time=2.0)
    instructions: tuple[str, ...] = setting(GATES, choices=GATES, noun="QIR call")
    max_shots: int = 100_000

    @property
    def resource_id(self) -> str:
        """QRMI's resource id of the target (``EMU:6Q:PHYSICAL_CATS`` ->
        ``ab_emu_6q_physical_cats``)."""
        return "ab_" + self.name.replace(":", "_").lower()

    @property
    def queue_key(self) -> str:
        return f"felis:{self.name}"


FelisFault = JobFault  # the side's faults (see JobFault)


# The default: a one-cat-qubit QPU with a queue, and the 6-qubit physical-cats emulator.
DEFAULT_FELIS_SCENARIO: dict[str, Any] = {
    "targets": [
        {"name": "QPU:1Q:BOSON_4A", "qubits": 1, "instructions": ["x", "mz", "reset"],
         "queue": {"depth": 2, "service_time": 6.0}},
        {"name": "EMU:6Q:PHYSICAL_CATS", "qubits": 6, "queue": {"service_time": 1.0}},
    ],
}  # fmt: skip


@dataclass(frozen=True)
class FelisScenario(ScenarioFile):
    """Everything the Felis side serves, immutable."""

    LABEL = "Felis"
    DEFAULT = DEFAULT_FELIS_SCENARIO

    targets: tuple[FelisTargetSpec, ...] = device_list("target")
    username: str = "emulator-felis"
    password: str = "emulator-felis-secret"
    price_per_second: float = 0.50
    max_simulated_qubits: int = 20
    faults: tuple[FelisFault, ...] = fault_list(OPERATIONS, "CreateJob")
    source: str = "<dict>"

    def target(self, name: str) -> FelisTargetSpec | None:
        return next((t for t in self.targets if t.name == name), None)
