"""Check a quantum task's OpenQASM 3 action and have it run on the Braket local simulator.

This module owns what every vendor side asks of a circuit: its ``action`` (a
``braket.ir.openqasm.Program`` JSON string, or a ``braket.ir.openqasm.program_set`` of
them) checked in the caller's process as the service checks it at the create (it
parses, fits the device and the scenario's ``max_simulated_qubits``, measures all its
qubits where the device requires it, asks for result types its shots can give), then
run in a simulation worker process (``simulation_pool``), whose answer is what the real
service writes: the ``GateModelTaskResult`` JSON of ``{outputS3Directory}/results.json``
for a program (result types with their values), each executable's measurements for a
program set (the service lays out the program set's files). It must never simulate in
the caller's process (numba's ``workqueue`` layer aborts a process two threads simulate
in) and never touch emulator state; errors come back as ``ProgramError`` with a message
fit for a ValidationException or a task's failure (``ProgramSetError`` also says which
program and which inputs failed, as Braket's ``programSetValidationFailures`` do). A
program's includes and width are read first (``openqasm``): it never opens a file a
program names, and the worker runs the program as the simulator reads it while the result
shows it as it was sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from flux_quantum.emulator import openqasm
from flux_quantum.emulator.openqasm import ProgramError as ProgramError
from flux_quantum.emulator.simulation_pool import SimulationFailed, shared_pool
from flux_quantum.emulator.simulation_worker import ADJOINT_GRADIENT, pragmas_on_lines
from flux_quantum.vendors.braket.sdk import sdk

OPENQASM_PROGRAM = "braket.ir.openqasm.program"
OPENQASM_PROGRAM_SET = "braket.ir.openqasm.program_set"
ACTIONS = (OPENQASM_PROGRAM, OPENQASM_PROGRAM_SET)
# Braket's refusal of a program that measures only some of its qubits on a device whose
# capabilities say requiresAllQubitsMeasurement (SV1, DM1, IonQ).
PARTIAL_MEASUREMENT = (
    "Device requires all qubits in the program to be measured. This may be caused by "
    "declaring non-contiguous qubits or measuring partial qubits"
)


class ProgramSetError(ProgramError):
    """Programs of a program set cannot run: ``failures`` are Braket's
    ``ProgramSetValidationFailure`` records (``programIndex``, ``inputsIndex`` when one
    executable is at fault, ``errors``)."""

    def __init__(self, message: str, failures: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.failures = failures


@dataclass(frozen=True)
class SimulationRequest:
    """Everything needed to run one task's program."""

    action: str
    shots: int
    backend: str
    device_qubits: int
    max_qubits: int
    measure_all: bool = False  # the device refuses a program that measures some qubits
    # The action as it was sent, when ``action`` is it as the simulator reads it (``check``).
    sent: str | None = None


@dataclass(frozen=True)
class SetProgram:
    """One program of a program set: its source, its inputs (name -> one value per
    executable) and how many executables it makes (1 without inputs)."""

    source: str
    inputs: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def executables(self) -> int:
        return len(next(iter(self.inputs.values()))) if self.inputs else 1

    def document(self) -> dict[str, Any]:
        """The program as a ``braket.ir.openqasm.program`` document (its program.json)."""
        return {
            "braketSchemaHeader": {"name": OPENQASM_PROGRAM, "version": "1"},
            "source": self.source,
            "inputs": self.inputs,
        }

    def executable(self, index: int) -> str:
        """Executable ``index`` as a program action: the source with one value per input."""
        document = self.document()
        document["inputs"] = {name: values[index] for name, values in self.inputs.items()}
        return json.dumps(document)


def action_type(action: str) -> str:
    """The ``braketSchemaHeader.name`` of an action, checking it is JSON we can run."""
    try:
        document = json.loads(action)
    except (TypeError, ValueError) as exc:
        raise ProgramError("action is not a JSON document") from exc
    header = document.get("braketSchemaHeader") if isinstance(document, dict) else None
    name = header.get("name") if isinstance(header, dict) else None
    if name not in ACTIONS:
        raise ProgramError(
            f"action type {name!r} is not supported by the emulator (only {' and '.join(ACTIONS)})"
        )
    if name == OPENQASM_PROGRAM and not isinstance(document.get("source"), str):
        raise ProgramError("action has no OpenQASM 'source' string")
    if name == OPENQASM_PROGRAM_SET and not isinstance(document.get("programs"), list):
        raise ProgramError("program set action has no 'programs' list")
    return name


def read_program_set(action: str) -> list[SetProgram]:
    """The programs of a program set action (possibly none: the caller says what an empty
    set is); ProgramSetError naming each program that is not an OpenQASM program whose
    inputs are lists of one length (Braket's rule for inputs in a program set)."""
    action_type(action)
    failures: list[dict[str, Any]] = []
    programs: list[SetProgram] = []
    for index, entry in enumerate(json.loads(action)["programs"]):
        source = entry.get("source") if isinstance(entry, dict) else None
        inputs = (entry.get("inputs") if isinstance(entry, dict) else None) or {}
        if not isinstance(source, str) or not source.strip():
            failures.append(_failure(index, "the program has no OpenQASM 'source' string"))
            continue
        if not isinstance(inputs, dict) or not all(isinstance(v, list) for v in inputs.values()):
            failures.append(_failure(index, "all program inputs must be lists in a program set"))
            continue
        if len({len(v) for v in inputs.values()}) > 1:
            failures.append(
                _failure(index, "all program inputs must have the same length in a program set")
            )
            continue
        if any(len(v) == 0 for v in inputs.values()):
            failures.append(_failure(index, "program inputs must not be empty lists"))
            continue
        programs.append(SetProgram(source, {str(k): list(v) for k, v in inputs.items()}))
    if failures:
        raise ProgramSetError(_failed(failures), failures)
    return programs


def check(request: SimulationRequest) -> SimulationRequest:
    """Refuse, as the service does at the create, a program that cannot run here (it
    names a file to include, does not parse, is too wide, measures only some qubits where
    the device measures all, asks for result types its shots cannot give); otherwise the
    request to run (``run_checked``): its action as the simulator reads it, ``sent`` as
    it was sent. Parsing runs in the caller's process; nothing is simulated."""
    if action_type(request.action) != OPENQASM_PROGRAM:
        raise ProgramError(f"action type must be {OPENQASM_PROGRAM} here")
    return replace(request, action=_check(request.action, request), sent=request.action)


def simulate(request: SimulationRequest) -> dict[str, Any]:
    """Check the program, then run it in a simulation worker; the GateModelTaskResult
    document for results.json (result types with their values). The caller fills in
    ``taskMetadata`` (id, deviceId, times) when it publishes the result."""
    return run_checked(check(request))


def run_checked(request: SimulationRequest) -> dict[str, Any]:
    """Run a program ``check`` accepted in a simulation worker (ProgramError: the
    simulation failed, the message says why)."""
    job = {"op": "program", "action": request.action, "sent": request.sent, "shots": request.shots}
    try:
        result: dict[str, Any] = shared_pool().run({**job, "backend": request.backend})
    except SimulationFailed as exc:
        raise ProgramError(str(exc)) from exc
    return result


def simulate_program_set(
    programs: list[SetProgram], shots_per_executable: int, request: SimulationRequest
) -> list[list[dict[str, Any]]]:
    """Check, then run every executable of ``programs`` for ``shots_per_executable``
    shots; for each program, each executable's GateModelTaskResult document
    (``measurements``, ``measuredQubits``). ``request`` gives the backend and the qubit
    limits (its action and shots are not read). ProgramSetError naming every executable
    that cannot run."""
    readable = check_programs(programs, request)
    return run_program_set(readable, shots_per_executable, request)


def check_programs(programs: list[SetProgram], request: SimulationRequest) -> list[SetProgram]:
    """ProgramSetError naming every executable of ``programs`` that ``check`` refuses;
    otherwise the programs as the simulator reads them (``run_program_set`` runs those)."""
    failures: list[dict[str, Any]] = []
    for index, program in enumerate(programs):
        for inputs_index in range(program.executables):
            try:
                _check(program.executable(inputs_index), request)
            except ProgramError as exc:
                with_inputs = inputs_index if program.inputs else None
                failures.append(_failure(index, str(exc), with_inputs))
    if failures:
        raise ProgramSetError(_failed(failures), failures)
    return [SetProgram(openqasm.for_simulator(p.source), p.inputs) for p in programs]


def run_program_set(
    programs: list[SetProgram], shots_per_executable: int, request: SimulationRequest
) -> list[list[dict[str, Any]]]:
    """Run checked ``programs`` in a simulation worker (ProgramSetError naming the
    executables whose simulation failed, ProgramError when the worker failed)."""
    job = {
        "op": "program_set",
        "executables": [[p.executable(i) for i in range(p.executables)] for p in programs],
        "shots": shots_per_executable,
        "backend": request.backend,
    }
    try:
        answer = shared_pool().run(job)
    except SimulationFailed as exc:
        raise ProgramError(str(exc)) from exc
    failures = answer["failures"]
    for failure in failures:
        if not programs[failure["programIndex"]].inputs:
            failure.pop("inputsIndex", None)
    if failures:
        raise ProgramSetError(_failed(failures), failures)
    runs: list[list[dict[str, Any]]] = answer["runs"]
    return runs


def _simulator(backend: str) -> Any:
    # Imported here: the Braket simulator costs seconds to import and only tasks need it.
    LocalSimulator = sdk("braket.devices").LocalSimulator

    # The raw simulator, whose parser and checks the SDK's LocalSimulator wraps.
    return LocalSimulator(backend)._delegate


def _check(action: str, request: SimulationRequest) -> str:
    """The action as the simulator reads it, or the ProgramError saying why it cannot run.
    As Braket's service reads it: its standard include taken as a name (the simulator
    would open a file of that name), any other refused, no wider than the device it was
    sent to as it declares itself."""
    document = json.loads(action)
    readable = openqasm.for_simulator(document["source"])
    openqasm.check_width(readable, request.device_qubits)
    document["source"] = readable
    program = sdk("braket.ir.openqasm").Program.parse_raw(json.dumps(document))
    simulator = _simulator(request.backend)
    adjoint = ADJOINT_GRADIENT.search(program.source)
    source = pragmas_on_lines(program.source)
    if adjoint is not None:
        # The local simulator's parser does not know this result type; the worker
        # computes it (simulation_worker.adjoint_gradient): check the rest.
        source = program.source[: adjoint.start()] + program.source[adjoint.end() :]
        if request.shots != 0:
            raise ProgramError("adjoint gradient result types are supported only with shots = 0")
        if request.backend != "braket_sv":
            raise ProgramError("the adjoint gradient result type is supported only on SV1")
    try:
        parsed = simulator.parse_program(program.copy(update={"source": source}))
        circuit = parsed.circuit
    except Exception as exc:
        raise ProgramError(f"the OpenQASM program does not parse: {exc}") from exc
    qubits = circuit.num_qubits
    if qubits > request.device_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits but the device has {request.device_qubits}"
        )
    if qubits > request.max_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits; the emulator simulates at most "
            f"{request.max_qubits} (scenario field max_simulated_qubits)"
        )
    measured = circuit.measured_qubits
    if request.measure_all and measured and sorted(set(measured)) != sorted(circuit.qubit_set):
        raise ProgramError(PARTIAL_MEASUREMENT)
    if adjoint is not None:
        return json.dumps(document)
    try:
        circuit.validate_single_measured_register()
        simulator._validate_ir_results_compatibility(
            circuit.results, device_action_type=_openqasm_action()
        )
        simulator._validate_input_provided(circuit)
        simulator._validate_shots_and_ir_results(request.shots, circuit.results, qubits)
    except Exception as exc:
        raise ProgramError(f"the program cannot run: {exc}") from exc
    return json.dumps(document)


def _openqasm_action() -> Any:
    return sdk("braket.device_schema").DeviceActionType.OPENQASM


def _failure(program: int, error: str, inputs: int | None = None) -> dict[str, Any]:
    failure: dict[str, Any] = {"programIndex": program, "errors": [error]}
    if inputs is not None:
        failure["inputsIndex"] = inputs
    return failure


def _failed(failures: list[dict[str, Any]]) -> str:
    first = failures[0]
    where = f"program {first['programIndex']}"
    if "inputsIndex" in first:
        where += f" (inputs {first['inputsIndex']})"
    more = f" and {len(failures) - 1} more" if len(failures) > 1 else ""
    return f"Program set validation failed in {where}{more}: {first['errors'][0]}"
