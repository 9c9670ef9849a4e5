"""Run a quantum task's OpenQASM 3 action on the Braket local simulator and build its results.

This module owns the one place where the emulator executes circuits: it parses the task's
``action`` (a ``braket.ir.openqasm.Program`` JSON string, or a
``braket.ir.openqasm.program_set`` of them), checks its size, runs it on the backend of
``braket.devices.LocalSimulator`` and returns what the real service writes: the
``GateModelTaskResult`` JSON of ``{outputS3Directory}/results.json`` for a program, each
executable's measurements for a program set (the service lays out the program set's
files). It must never run a program wider than the scenario's ``max_simulated_qubits``
(memory grows as 2^n) and never touch emulator state; errors come back as ``ProgramError``
with a message fit for a ValidationException (``ProgramSetError`` also says which program
and which inputs failed, as Braket's ``programSetValidationFailures`` do). A program's
includes and width are read first (``openqasm``): it never opens a file a program names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator import openqasm
from flux_quantum.emulator.openqasm import ProgramError as ProgramError
from flux_quantum.vendors.braket.sdk import sdk

OPENQASM_PROGRAM = "braket.ir.openqasm.program"
OPENQASM_PROGRAM_SET = "braket.ir.openqasm.program_set"
ACTIONS = (OPENQASM_PROGRAM, OPENQASM_PROGRAM_SET)


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


def simulate(request: SimulationRequest) -> dict[str, Any]:
    """Run the program; return the GateModelTaskResult document for results.json.

    The caller fills in ``taskMetadata`` (id, deviceId, times) when it publishes the result.
    """
    if action_type(request.action) != OPENQASM_PROGRAM:
        raise ProgramError(f"action type must be {OPENQASM_PROGRAM} here")
    return _run(_simulator(request.backend), request.action, request)


def simulate_program_set(
    programs: list[SetProgram], shots_per_executable: int, request: SimulationRequest
) -> list[list[dict[str, Any]]]:
    """Run every executable of ``programs`` for ``shots_per_executable`` shots; for each
    program, each executable's GateModelTaskResult document (``measurements``,
    ``measuredQubits``). ``request`` gives the backend and the qubit limits (its action and
    shots are not read). ProgramSetError naming every executable that cannot run."""
    simulator = _simulator(request.backend)
    failures: list[dict[str, Any]] = []
    results: list[list[dict[str, Any]]] = []
    for index, program in enumerate(programs):
        runs = []
        for inputs_index in range(program.executables):
            try:
                runs.append(
                    _run(simulator, program.executable(inputs_index), request, shots_per_executable)
                )
            except ProgramError as exc:
                with_inputs = inputs_index if program.inputs else None
                failures.append(_failure(index, str(exc), with_inputs))
        results.append(runs)
    if failures:
        raise ProgramSetError(_failed(failures), failures)
    return results


def _simulator(backend: str) -> Any:
    # Imported here: the Braket simulator costs seconds to import and only tasks need it.
    LocalSimulator = sdk("braket.devices").LocalSimulator

    # LocalSimulator wraps the simulator; the emulator needs its raw IR result (what the
    # managed service writes), not the SDK object LocalSimulator.run() wraps it in.
    return LocalSimulator(backend)._delegate


def _run(
    simulator: Any, action: str, request: SimulationRequest, shots: int | None = None
) -> dict[str, Any]:
    # The program as Braket's service reads it: its standard include taken as a name
    # (the simulator would open a file of that name), any other refused, and no wider
    # than the device it was sent to, as it declares itself.
    document = json.loads(action)
    source = openqasm.for_simulator(document["source"])
    openqasm.check_width(source, request.device_qubits)
    document["source"] = source
    program = sdk("braket.ir.openqasm").Program.parse_raw(json.dumps(document))
    try:
        qubits = simulator.parse_program(program).circuit.num_qubits
    except Exception as exc:
        raise ProgramError(f"the OpenQASM program does not parse: {exc}") from exc
    if qubits > request.device_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits but the device has {request.device_qubits}"
        )
    if qubits > request.max_qubits:
        raise ProgramError(
            f"the program uses {qubits} qubits; the emulator simulates at most "
            f"{request.max_qubits} (scenario field max_simulated_qubits)"
        )
    try:
        result = simulator.run(program, shots=request.shots if shots is None else shots)
    except Exception as exc:
        raise ProgramError(f"the program cannot run: {exc}") from exc
    return json.loads(result.json())


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
