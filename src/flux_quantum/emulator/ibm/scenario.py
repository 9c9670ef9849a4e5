"""What the emulator's IBM Quantum side serves: backends, their queues, the plan, faults.

This module owns the IBM part of an emulator scenario (a YAML file or a dict, given to
``flux quantum emulator --ibm-scenario`` or ``Emulator(ibm=...)``), its validation and the
default IBM scenario. Queues use the emulator's shared model (``QueueSpec`` drained by
``DeviceQueue``), so every vendor's queues behave alike. It must never touch the network,
a clock or emulator state: an ``IbmScenario`` is an immutable description, and every
mistake is one ``ScenarioError`` naming the source, the backend and the field.

Format::

    plan: open | paid          # open: a dedicated session is refused with code 1352
    strict: true               # false: circuits outside a backend's ISA run anyway
    apikey: KEY                # the IAM API key the emulator accepts (default: any)
    crn: CRN                   # the service instance CRN it expects (default: any)
    price_per_second: 1.60     # what a completed job's usage seconds cost on the bill
                               # (default 1.60 on paid, $96/min Pay-As-You-Go; 0 on open)
    max_executions: 10000000   # a Sampler job's executions (its pubs' shots summed) at most
    max_input_bytes: 67108864  # a job's input (its params as compact JSON) at most
    backends:
      - name: ibm_fez
        qubits: 156
        processor: {family: Heron, revision: "2"}
        basis_gates: [cz, id, rz, sx, x]
        coupling_map: [[0, 1], ...]      # default: heavy-hex for 127/133/156 qubits, else a line
        queue: {depth: 30, service_time: 8, ...}   # as the Braket side's queue
        status: online | paused | offline
        paused: [[start, end], ...]     # emulated seconds; jobs queue but do not start
        calibration: {gate_error_1q: 2.5e-4, gate_error_2q: 3e-3, readout_error: 1.5e-2,
                      t1_us: 150, t2_us: 120}
    faults:
      - operation: CreateJob            # or a list; omitted: every operation
        backend: ibm_fez                # optional
        status: 503                     # an HTTP error with IBM's error body ...
        code: 1000                      #   ... and this IBM error code
        reset: true                     # or: close the connection without an answer
        delay: 5                        # or: answer after this many real seconds
        fail_job: "reason"              # or: CreateJob succeeds, the job ends Failed
        cancel_job: true                # or: CreateJob succeeds, IBM cancels the job when
                                        #   it would start (it ends Cancelled, not billed)
        after_commit: true              # apply the call first, then the error/reset/delay
                                        #   (a delay may go with an error or a reset);
                                        #   CreateJob + reset: a created job's answer lost
        calls: [1], first: N, after: N, every: N, rate: 0.1, start: T, end: T  # which calls
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator import topology
from flux_quantum.emulator.bill import IBM_PAID_PRICE_PER_SECOND
from flux_quantum.emulator.reading import (
    Reader,
    Record,
    ScenarioFile,
    device_list,
    fault_list,
    setting,
)
from flux_quantum.emulator.scenario import BaseFault, QueueSpec

PLANS = ("open", "paid")
# IBM's job validation: at most 10 million executions (circuits x shots, after the pubs'
# parameters are broadcast; summed over the pubs: the limit is per job, not per pub) in a
# Sampler job (the "Job limits" guide), and job inputs of at most 64 MB (Qiskit Runtime's
# documented input limit). Neither counts pubs: IBM sets no limit on their number (the
# configuration's ``max_experiments`` is no longer enforced).
MAX_EXECUTIONS = 10_000_000
MAX_INPUT_BYTES = 64 * 1024 * 1024
STATUSES = ("online", "paused", "offline")
OPERATIONS = (
    "IamToken",
    "ListBackends",
    "GetBackendStatus",
    "GetBackendConfiguration",
    "GetBackendProperties",
    "CreateJob",
    "GetJob",
    "ListJobs",
    "CancelJob",
    "DeleteJob",
    "GetJobResults",
    "GetJobLogs",
    "GetInstanceUsage",
    "CreateSession",
    "GetSession",
    "UpdateSession",
    "CloseSession",
)
# IBM error codes the emulator answers with, and the HTTP status it sends with each.
# 1000-1202 and 1352 are IBM's (its error code registry); 1217 and 1291 are the
# emulator's own, for refusals the registry gives no code the emulator could check.
ERROR_CODES: Mapping[int, tuple[int, str]] = {
    1000: (500, "API internal error."),
    1002: (400, "Error in the validation process of the job."),
    1004: (400, "The backend is not available."),
    1007: (404, "Backend not found."),
    1201: (401, "Invalid credentials."),
    1202: (429, "Too many requests received: the limit is 5 per minute."),
    1217: (409, "The session is closed and accepts no more jobs."),
    1291: (404, "Job not found."),
    1352: (403, "You are not authorized to run a session when using the open plan."),
}


@dataclass(frozen=True)
class Calibration:
    """Means of a backend's calibration data; each qubit and gate draws around them."""

    gate_error_1q: float = 2.5e-4
    gate_error_2q: float = 3.0e-3
    readout_error: float = 1.5e-2
    t1_us: float = 150.0
    t2_us: float = 120.0


@dataclass(frozen=True)
class Processor:
    """A backend's processor type, as IBM names it (both taken as written)."""

    family: str = setting("Heron", kind=str)
    revision: str = setting("2", kind=str)


@dataclass(frozen=True)
class IbmBackendSpec(Record):
    """One emulated IBM backend."""

    name: str
    qubits: int = 27
    processor: Processor = Processor()
    basis_gates: tuple[str, ...] = setting(
        ("cz", "id", "rz", "sx", "x"), noun="gate name", empty=True
    )
    queue: QueueSpec = QueueSpec()
    status: str = setting("online", choices=STATUSES)
    paused: tuple[tuple[float, float], ...] = ()
    calibration: Calibration = field(default_factory=Calibration)
    max_shots: int = 100_000
    clops: int = 250_000
    coupling_map: tuple[tuple[int, int], ...] = setting((), kind="pairs")

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """Its coupled qubit pairs (``topology.ibm``)."""
        return topology.ibm(self.qubits, self.coupling_map)

    @property
    def processor_family(self) -> str:
        return self.processor.family

    @property
    def processor_revision(self) -> str:
        return self.processor.revision

    @property
    def queue_key(self) -> str:
        """A Braket-shaped identifier, so the shared ``DeviceQueue`` can seed from it."""
        return f"arn:aws:braket:::device/qpu/ibm/{self.name}"


@dataclass(frozen=True)
class IbmFault(BaseFault):
    """One injected fault on the IBM side; see the module docstring for the fields."""

    backend: str | None = None
    status: int | None = None
    code: int | None = None
    fail_job: str | None = None
    cancel_job: bool = False

    @property
    def device(self) -> str | None:
        """The backend it hits, by the name the sides' shared fault selection reads."""
        return self.backend

    def http_status(self) -> int:
        if self.status is not None:
            return self.status
        return ERROR_CODES.get(self.code or 1000, (500, ""))[0]


def _fault(reader: Reader, raw: Any, index: int, backends: Sequence[str]) -> IbmFault:
    where = f"faults[{index}]"
    accepted = (
        "operation", "backend", "status", "code", "message", "after_commit", "delay",
        "fail_job", "cancel_job", "reset", "calls", "first", "after", "every", "rate",
        "start", "end",
    )  # fmt: skip
    f = reader.mapping(raw, where, accepted)
    ops = reader.operations(f, where, OPERATIONS)
    status = reader.integer(f["status"], f"{where}.status", 400) if "status" in f else None
    code = reader.integer(f["code"], f"{where}.code", 1) if "code" in f else None
    delay = reader.number(f.get("delay", 0.0), f"{where}.delay")
    fail_job = reader.optional(f, "fail_job", where)
    after_commit, reset, cancel_job = (
        reader.flag(f, key, where) for key in ("after_commit", "reset", "cancel_job")
    )
    error = status is not None or code is not None
    effects = [error, delay > 0, fail_job is not None, reset, cancel_job]
    late_pair = after_commit and delay > 0 and (error or reset) and sum(effects) == 2
    if sum(effects) != 1 and not late_pair:
        raise reader.fail(
            where, "needs exactly one effect: status/code, delay, reset, fail_job or cancel_job"
        )
    if (fail_job is not None or cancel_job) and ops != ["CreateJob"]:
        raise reader.fail(f"{where}.operation", "must be CreateJob with fail_job/cancel_job")
    if after_commit and (fail_job is not None or cancel_job):
        raise reader.fail(
            f"{where}.after_commit", "goes with status/code, reset or delay, not a job effect"
        )
    return IbmFault(
        operations=tuple(ops),
        backend=reader.target(f, "backend", where, backends),
        status=status,
        code=code,
        message=reader.optional(f, "message", where),
        after_commit=after_commit,
        delay=delay,
        fail_job=fail_job,
        reset=reset,
        cancel_job=cancel_job,
        **reader.selection(f, where),
    )


# The default: three Heron backends (names as IBM Quantum Platform lists them), loaded
# like a busy, a normal and a quiet day.
DEFAULT_IBM_SCENARIO: dict[str, Any] = {
    "plan": "paid",
    "backends": [
        {
            "name": "ibm_fez",
            "qubits": 156,
            "processor": {"family": "Heron", "revision": "2"},
            "queue": {
                "depth": 30,
                "arrival_rate": 0.05,
                "service_time": 8.0,
                "distribution": "exponential",
            },
        },
        {
            "name": "ibm_torino",
            "qubits": 133,
            "processor": {"family": "Heron", "revision": "1"},
            "queue": {"depth": 10, "arrival_rate": 0.05, "service_time": 5.0},
            "calibration": {"gate_error_2q": 5.0e-3, "readout_error": 2.5e-2},
        },
        {
            "name": "ibm_kingston",
            "qubits": 156,
            "processor": {"family": "Heron", "revision": "2"},
            "queue": {"depth": 2, "service_time": 4.0},
            "calibration": {"gate_error_2q": 2.0e-3, "readout_error": 1.0e-2},
        },
    ],
}


@dataclass(frozen=True)
class IbmScenario(ScenarioFile):
    """Everything the IBM side serves, immutable."""

    LABEL = "IBM"
    DEFAULT = DEFAULT_IBM_SCENARIO

    backends: tuple[IbmBackendSpec, ...] = device_list("backend")
    plan: str = setting("paid", choices=PLANS)
    apikey: str | None = None
    crn: str | None = None
    faults: tuple[IbmFault, ...] = fault_list(read=_fault)
    source: str = "<dict>"
    # Strict: a circuit not written in its backend's ISA fails with IBM's 1517.
    strict: bool = True
    # Open plan: 0; paid: IBM_PAID_PRICE_PER_SECOND unless the scenario says.
    price_per_second: float = IBM_PAID_PRICE_PER_SECOND
    max_executions: int = MAX_EXECUTIONS
    max_input_bytes: int = MAX_INPUT_BYTES

    @classmethod
    def completed(cls, values: dict[str, Any]) -> dict[str, Any]:
        if "price_per_second" in values:
            return values
        paid = values.get("plan", "paid") == "paid"
        return {**values, "price_per_second": IBM_PAID_PRICE_PER_SECOND if paid else 0.0}

    def backend(self, name: str) -> IbmBackendSpec | None:
        for spec in self.backends:
            if spec.name == name:
                return spec
        return None
