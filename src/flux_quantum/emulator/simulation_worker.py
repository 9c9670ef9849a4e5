"""A simulation worker process: runs OpenQASM 3 programs on the Braket local simulator and
writes each result as the managed service's ``results.json`` would carry it.

This module owns what runs inside a worker process the emulator's ``SimulationPool``
starts (``python -m flux_quantum.emulator.simulation_worker --memory BYTES``): one job at
a time read as a JSON line on stdin, its answer written as one JSON line on the pipe the
worker was started with (``{"ok": ...}`` or ``{"error": message}``); a job ``qpy``
reads a Sampler pub's QPY circuit into OpenQASM 3 (for ``ibm.pubs``), Qiskit's native code
kept out of the emulator's process as the simulator's is. A program's answer is
its ``GateModelTaskResult`` document with every result type's value, as Amazon Braket's
managed simulators give them: computed from the measurements when shots > 0 (as the SDK
computes them), exact when shots = 0 (complex numbers as ``[re, im]`` pairs), no
measurements when shots = 0, and an ``adjoint_gradient`` result (its expectation and the
gradient by the parameter-shift rule) which the local simulator does not compute. The
local simulator forces numba's ``workqueue`` threading layer, which aborts a process used
by two threads at once: this worker runs one job at a time in one thread, and the process
is bounded in memory (``RLIMIT_AS``) so that a program too big for the machine fails its
job instead of the emulator. It must never write anything but answers on its answer pipe,
never read emulator state, and never run two jobs at once.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import os
import re
import resource
import sys
import zlib
from typing import Any

from flux_quantum.vendors.braket.sdk import sdk

ADJOINT_GRADIENT = re.compile(
    r"^\s*#pragma\s+braket\s+result\s+adjoint_gradient\s+expectation\((?P<observable>.*)\)"
    r"\s*(?P<parameters>[^)]*?)\s*$",
    re.MULTILINE,
)
_PRAGMA_MID_LINE = re.compile(r"(?<=\S)[ \t]*#pragma")
_FACTOR = r"[xyzhi]\s*\(\s*(?:q\s*\[\s*\d+\s*\]|\$\d+)\s*\)"
_TERM = re.compile(
    rf"(?P<sign>[+-])?\s*(?:(?P<coef>\d*\.?\d+(?:[eE][+-]?\d+)?)\s*\*\s*)?"
    rf"(?P<factors>{_FACTOR}(?:\s*@\s*{_FACTOR})*)\s*"
)
_FACTOR_PARTS = re.compile(r"([xyzhi])\s*\(\s*(q\s*\[\s*(\d+)\s*\]|\$(\d+))\s*\)")
# Each differentiable gate's generator A, G(angle) = exp(-i angle A) (Braket's gate
# definitions), as a function of the numpy module: dG/dangle = -i A G.
_GENERATORS = {
    "RotX": lambda np: np.array([[0, 1], [1, 0]], dtype=complex) / 2,
    "RotY": lambda np: np.array([[0, -1j], [1j, 0]], dtype=complex) / 2,
    "RotZ": lambda np: np.array([[1, 0], [0, -1]], dtype=complex) / 2,
    "PhaseShift": lambda np: -np.diag([0, 1]).astype(complex),
    "CPhaseShift": lambda np: -np.diag([0, 0, 0, 1]).astype(complex),
    "CPhaseShift00": lambda np: -np.diag([1, 0, 0, 0]).astype(complex),
    "CPhaseShift01": lambda np: -np.diag([0, 1, 0, 0]).astype(complex),
    "CPhaseShift10": lambda np: -np.diag([0, 0, 1, 0]).astype(complex),
    "XX": lambda np: np.kron([[0, 1], [1, 0]], [[0, 1], [1, 0]]).astype(complex) / 2,
    "YY": lambda np: np.kron([[0, -1j], [1j, 0]], [[0, -1j], [1j, 0]]).astype(complex) / 2,
    "ZZ": lambda np: np.diag([1, -1, -1, 1]).astype(complex) / 2,
}
_PAULI = {
    "x": [[0, 1], [1, 0]],
    "y": [[0, -1j], [1j, 0]],
    "z": [[1, 0], [0, -1]],
    "h": [[2**-0.5, 2**-0.5], [2**-0.5, -(2**-0.5)]],
    "i": [[1, 0], [0, 1]],
}


class JobError(Exception):
    """The job cannot run; its message is what the task's failure (or refusal) says."""


# -- values on the wire ----------------------------------------------------------------------


def wire_value(value: Any) -> Any:
    """``value`` as JSON: arrays as lists, complex numbers as ``[re, im]``."""
    np = sdk("numpy")
    if isinstance(value, np.ndarray):
        return [wire_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): wire_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_value(v) for v in value]
    if isinstance(value, complex | np.complexfloating):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        return float(value)
    return value


def _result_type_document(result_type: Any) -> dict[str, Any]:
    """A ``ResultTypeValue`` (or its bare spec) as the wire carries it."""
    spec = result_type.type if hasattr(result_type, "value") else result_type
    document = json.loads(spec.json(exclude_none=True))
    return {"type": document, "value": wire_value(result_type.value)}


def _with_values(result: Any, shots: int) -> dict[str, Any]:
    """The result document with every result type's value, as the managed service
    writes it (the local simulator leaves them to the SDK when shots > 0)."""
    gate_model = sdk("braket.tasks.gate_model_quantum_task_result").GateModelQuantumTaskResult
    result_types = result.resultTypes or []
    if shots > 0 and result_types and not hasattr(result_types[0], "value"):
        np = sdk("numpy")
        measurements = np.asarray(result.measurements, dtype=int)
        specs = json.dumps({"results": [json.loads(rt.json()) for rt in result_types]})
        result_types = gate_model._calculate_result_types(
            specs, measurements, result.measuredQubits
        )
    document = json.loads(result.json(exclude={"resultTypes"}))
    document["resultTypes"] = [_result_type_document(rt) for rt in result_types] or None
    if shots == 0:
        document["measurements"] = None
        document["measuredQubits"] = None
    return document


# -- programs ---------------------------------------------------------------------------------


def _simulator(backend: str) -> Any:
    # The raw simulator, not the SDK's LocalSimulator wrapper: the service's result
    # document is its IR result, not the SDK object LocalSimulator.run() makes of it.
    return sdk("braket.devices").LocalSimulator(backend)._delegate


def pragmas_on_lines(source: str) -> str:
    """The source with each ``#pragma`` starting a line: Braket reads a pragma that
    follows a statement on the same line (a program written on one line), the local
    simulator's parser would take the rest of the line as one pragma."""
    return _PRAGMA_MID_LINE.sub("\n#pragma", source)


def run_program(action: str, shots: int, backend: str, sent: str | None = None) -> dict[str, Any]:
    """The results.json document of one ``braket.ir.openqasm.program`` action (as the
    simulator reads it; ``sent``: as it was sent, what the result shows)."""
    program = sdk("braket.ir.openqasm").Program.parse_raw(action)
    shown = sdk("braket.ir.openqasm").Program.parse_raw(sent) if sent else program
    if ADJOINT_GRADIENT.search(program.source):
        document = adjoint_gradient(program, shots, backend)
        document["additionalMetadata"]["action"] = json.loads(shown.json())
        return document
    as_read = program.copy(update={"source": pragmas_on_lines(program.source)})
    try:
        result = _simulator(backend).run(as_read, shots=shots)
    except MemoryError as exc:
        raise JobError(
            "the program needs more memory than the emulator's simulation worker may use"
        ) from exc
    except Exception as exc:
        raise JobError(f"the program cannot run: {exc}") from exc
    document = _with_values(result, shots)
    document["additionalMetadata"]["action"] = json.loads(shown.json())
    return document


def run_program_set(executables: list[list[str]], shots: int, backend: str) -> dict[str, Any]:
    """Each program's executables run for ``shots`` shots: ``{"runs": [[doc, ...], ...],
    "failures": [{"programIndex", "inputsIndex", "errors"}, ...]}``."""
    runs: list[list[dict[str, Any]]] = []
    failures: list[dict[str, Any]] = []
    for index, actions in enumerate(executables):
        documents = []
        for inputs_index, action in enumerate(actions):
            try:
                documents.append(run_program(action, shots, backend))
            except JobError as exc:
                failures.append(
                    {"programIndex": index, "inputsIndex": inputs_index, "errors": [str(exc)]}
                )
        runs.append(documents)
    return {"runs": runs, "failures": failures}


# -- adjoint gradient --------------------------------------------------------------------------


def _terms(observable: str) -> list[tuple[float, str, list[tuple[str, int]]]]:
    """The Hamiltonian's terms: (coefficient, the factors as a pragma's observable,
    each factor's (operator, qubit))."""
    terms = []
    position = 0
    text = observable.strip()
    while position < len(text):
        match = _TERM.match(text, position)
        if match is None or match.end() == position:
            raise JobError(
                f"the adjoint_gradient observable {observable!r} is not a sum of "
                "Pauli/Hadamard products the emulator reads"
            )
        coefficient = float(match["coef"]) if match["coef"] else 1.0
        if match["sign"] == "-":
            coefficient = -coefficient
        factors = [
            (operator, int(register or physical))
            for operator, _, register, physical in _FACTOR_PARTS.findall(match["factors"])
        ]
        terms.append((coefficient, match["factors"], factors))
        position = match.end()
    return terms


def adjoint_gradient(program: Any, shots: int, backend: str) -> dict[str, Any]:
    """The result of a program whose result is ``adjoint_gradient``: the expectation of
    its observable and its derivative by each named parameter (every input when it names
    ``all``), exact at shots = 0, by the adjoint method on the program's state vector."""
    if shots != 0:
        raise JobError("adjoint gradient result types are supported only with shots = 0")
    if backend != "braket_sv":
        raise JobError("the adjoint gradient result type is supported only on SV1")
    match = ADJOINT_GRADIENT.search(program.source)
    assert match is not None
    if len(ADJOINT_GRADIENT.findall(program.source)) > 1:
        raise JobError("a program may request only one adjoint_gradient result")
    observable, named = match["observable"], match["parameters"].strip()
    terms = _terms(observable)
    inputs = dict(program.inputs or {})
    parameters = (
        sorted(inputs)
        if named in ("", "all")
        else [p.strip() for p in named.split(",") if p.strip()]
    )
    for parameter in parameters:
        if parameter not in inputs:
            raise JobError(f"the adjoint_gradient parameter {parameter!r} is not an input")
    body = program.source[: match.start()] + program.source[match.end() :]
    pragmas = "\n".join(f"#pragma braket result expectation {factors}" for _, factors, _ in terms)
    base = body.rstrip("\n") + "\n" + pragmas
    result = _run_exact(base, inputs, backend)
    value = sum(
        c * float(rt.value) for (c, _, _), rt in zip(terms, result.resultTypes, strict=True)
    )
    gradient = _adjoint(base, inputs, terms, parameters)
    document = json.loads(result.json(exclude={"resultTypes"}))
    document["additionalMetadata"]["action"] = json.loads(program.json())
    targets = [[qubit for _, qubit in factors] for _, _, factors in terms]
    spec = {
        "observable": _observable_words(terms),
        "targets": targets,
        "parameters": parameters,
        "type": "adjoint_gradient",
    }
    document["resultTypes"] = [
        {"type": spec, "value": {"expectation": value, "gradient": gradient}}
    ]
    document["measurements"] = None
    document["measuredQubits"] = None
    return document


def _run_exact(source: str, inputs: dict[str, Any], backend: str) -> Any:
    program = sdk("braket.ir.openqasm").Program(source=source, inputs=inputs)
    try:
        return _simulator(backend).run(program, shots=0)
    except Exception as exc:
        raise JobError(f"the program cannot run: {exc}") from exc


def _instructions(source: str, inputs: dict[str, Any]) -> Any:
    program = sdk("braket.ir.openqasm").Program(source=source, inputs=inputs)
    return _simulator("braket_sv").parse_program(program).circuit


def _apply(np: Any, matrix: Any, state: Any, targets: tuple[int, ...]) -> Any:
    """``matrix`` applied to the qubits ``targets`` of ``state`` (a tensor of 2s)."""
    k = len(targets)
    tensor = np.reshape(matrix, [2] * (2 * k))
    moved = np.tensordot(tensor, state, axes=(list(range(k, 2 * k)), list(targets)))
    return np.moveaxis(moved, list(range(k)), list(targets))


def _adjoint(
    source: str,
    inputs: dict[str, Any],
    terms: list[tuple[float, str, list[tuple[str, int]]]],
    parameters: list[str],
) -> dict[str, float]:
    """d<H>/dp for each parameter p: the gates whose angle moves with p found by parsing
    the program at p and at p +- 1/2 (an angle must be linear in p), then one backward
    sweep: g += 2 Re <lambda| dG |phi> at each such gate."""
    np = sdk("numpy")
    circuit = _instructions(source, inputs)
    operations = list(circuit.instructions)
    qubits = sorted(circuit.qubit_set) if circuit.qubit_set else list(range(circuit.num_qubits))
    index = {q: i for i, q in enumerate(qubits)}
    width = len(qubits)
    slopes: dict[str, list[float]] = {}
    for parameter in parameters:
        moved = []
        for delta in (0.5, -0.5):
            shifted = dict(inputs, **{parameter: float(inputs[parameter]) + delta})
            moved.append(list(_instructions(source, shifted).instructions))
        rates = []
        for number, operation in enumerate(operations):
            angle = getattr(operation, "_angle", None)
            up = getattr(moved[0][number], "_angle", None)
            down = getattr(moved[1][number], "_angle", None)
            if angle is None or up is None or down is None or up == angle == down:
                rates.append(0.0)
                continue
            # The slope of an angle like 2 * theta, read back from two parses (rounded:
            # the parses add and subtract in floating point).
            rate = round((float(up) - float(angle)) / 0.5, 9)
            linear = math.isclose(float(angle) - float(down), rate * 0.5, abs_tol=1e-12)
            name = type(operation).__name__
            plain = not operation._ctrl_modifiers and operation._power == 1
            if not linear or name not in _GENERATORS or not plain:
                raise JobError(
                    f"the emulator differentiates {parameter!r} only in angles linear in it "
                    f"of {', '.join(sorted(_GENERATORS))} (without modifiers)"
                )
            rates.append(rate)
        slopes[parameter] = rates
    state = np.zeros([2] * width, dtype=complex)
    state[(0,) * width] = 1.0
    for operation in operations:
        state = _apply(np, operation.matrix, state, tuple(index[t] for t in operation.targets))
    # lambda = H |psi>
    image = np.zeros_like(state)
    for coefficient, _, factors in terms:
        term = state
        for operator, qubit in factors:
            if qubit not in index:
                raise JobError(f"the adjoint_gradient observable acts on qubit {qubit}, unused")
            term = _apply(np, np.array(_PAULI[operator], dtype=complex), term, (index[qubit],))
        image = image + coefficient * term
    gradient = dict.fromkeys(parameters, 0.0)
    phi, lam = state, image
    for number in range(len(operations) - 1, -1, -1):
        operation = operations[number]
        targets = tuple(index[t] for t in operation.targets)
        for parameter in parameters:
            rate = slopes[parameter][number]
            if rate:
                # phi is the state just after this gate: dG phi_before = -i A phi.
                generator = _GENERATORS[type(operation).__name__](np)
                mu = _apply(np, -0.5j * (2 * generator), phi, targets)
                gradient[parameter] += rate * 2 * float(np.real(np.vdot(lam, mu)))
        inverse = np.conjugate(np.transpose(operation.matrix))
        phi = _apply(np, inverse, phi, targets)
        lam = _apply(np, inverse, lam, targets)
    return gradient


def _observable_words(terms: list[tuple[float, str, list[tuple[str, int]]]]) -> str:
    """The observable without its qubits, as Braket's result names it ("-6 * y @ i")."""
    words = []
    for index, (coefficient, _, factors) in enumerate(terms):
        product = " @ ".join(operator for operator, _ in factors)
        magnitude = abs(coefficient)
        shown = f"{int(magnitude)}" if magnitude.is_integer() else f"{magnitude}"
        if index == 0:
            words.append(f"{'-' if coefficient < 0 else ''}{shown} * {product}")
        else:
            words.append(f"{'-' if coefficient < 0 else '+'} {shown} * {product}")
    return " ".join(words)


# -- Sampler pubs in QPY ----------------------------------------------------------------------


def qpy_to_openqasm(encoded: str, bound: list[list[float]]) -> str:
    """A RuntimeEncoder QPY circuit (base64 of zlib) with its parameters bound to the one
    set of values ``bound``, as OpenQASM 3 (``JobError``: it cannot be)."""
    try:
        from qiskit import qasm3, qpy
    except ImportError as exc:  # qiskit is what reads QPY
        raise JobError("the emulator reads QPY circuits only where qiskit is installed") from exc
    try:
        raw = zlib.decompress(base64.standard_b64decode(encoded))
        [loaded] = qpy.load(io.BytesIO(raw))
    except Exception as exc:
        raise JobError(f"the pub's QPY circuit cannot be read: {exc}") from exc
    if loaded.num_parameters:
        if len(bound) != 1 or len(bound[0]) != loaded.num_parameters:
            raise JobError(
                f"the circuit has {loaded.num_parameters} parameters: the emulator binds one "
                "set of values per pub"
            )
        loaded = loaded.assign_parameters(bound[0])
    elif bound:
        raise JobError("parameter values were given for a circuit without parameters")
    text: str = qasm3.dumps(loaded)
    return text


# -- the process ------------------------------------------------------------------------------


def answer(job: dict[str, Any]) -> dict[str, Any]:
    """One job's answer: ``{"ok": ...}`` or ``{"error": message}``."""
    try:
        match job.get("op"):
            case "program":
                action, sent = job["action"], job.get("sent")
                return {"ok": run_program(action, int(job["shots"]), job["backend"], sent)}
            case "program_set":
                return {
                    "ok": run_program_set(job["executables"], int(job["shots"]), job["backend"])
                }
            case "qpy":
                return {"ok": qpy_to_openqasm(job["circuit"], job["values"])}
            case "ping":
                return {"ok": "pong"}
            case other:
                return {"error": f"unknown job {other!r}"}
    except JobError as exc:
        return {"error": str(exc)}
    except MemoryError:
        return {
            "error": "the program needs more memory than the emulator's simulation worker may use"
        }
    except Exception as exc:  # a simulator bug fails the job, not the worker
        return {"error": f"the program cannot run: {exc!r}"}


def serve(answers: Any, jobs: Any) -> None:
    """Answer jobs until stdin closes (the emulator stopped or went away)."""
    for line in jobs:
        if not line.strip():
            continue
        try:
            job = json.loads(line)
        except ValueError:
            reply: dict[str, Any] = {"error": "the job is not JSON"}
        else:
            reply = answer(job if isinstance(job, dict) else {})
        try:
            text = json.dumps(reply, allow_nan=False)
        except ValueError:
            text = json.dumps({"error": "the result holds a value JSON cannot carry (NaN)"})
        answers.write(text + "\n")
        answers.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--memory", type=int, default=0, help="address-space limit in bytes")
    args = parser.parse_args(argv)
    if args.memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    # Answers go on a private copy of stdout; whatever the simulator or numba prints goes
    # to stderr, so it can never corrupt an answer.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    # Import the simulator before the first job, so that a job's time limit is its own.
    _simulator("braket_sv")
    _simulator("braket_dm")
    answers.write(json.dumps({"ok": "ready", "pid": os.getpid()}) + "\n")
    answers.flush()
    serve(answers, sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
