"""Programs for IQM: OpenQASM 3 translated to IQM's native gates, or IQM's own JSON circuit.

The compile stage (``flux_quantum.compiler``, on by default) sends IQM its JSON circuit
already mapped onto the device (``native``: Qiskit's layout and routing onto the
published couplers). The translation below is kept for OpenQASM 3 that reaches the
vendor as written (the site turned the stage off, or a direct call of the vendor): it
does what Qiskit's transpiler does not do for IQM's JSON form (the gates one by one, z
rotations as frames, measurement keys per classical bit) and nothing it does (no
layout, no routing).

This module owns which programs a job may send to an IQM quantum computer and the IQM
``circuit`` job payload (a RunRequest: ``{"circuits": [CIRCUIT], "shots": N}``) built from
one. It is pure: no I/O, no clock, no qrmi.

- IQM JSON: a circuit ``{"name", "instructions": [{"name", "qubits", "args"}]}`` or a
  RunRequest holding exactly one. Instructions: ``prx`` (``angle_t``, ``phase_t`` in full
  turns: R(θ, φ) = exp(-iθ/2 (cos φ X + sin φ Y)) with θ = 2π angle_t, φ = 2π phase_t),
  ``cz``, ``measure`` (``key``, unique) and ``barrier``, on physical qubits ``QB1``...
- OpenQASM 3: ``qubit``/``bit`` registers (or ``qreg``/``creg``), the gates ``x y z h s sdg
  t tdg sx sxdg rx ry rz p id cx cnot cz swap barrier`` and ``measure`` (``c[i] = measure
  q[j];``, ``c = measure q;``, ``measure q[j] -> c[i];``) at the end of the circuit.
  z rotations are virtual (a frame carried into later ``prx`` phases, as IQM's compiler
  does); every other gate becomes ``prx`` and ``cz``. Logical qubit i (registers in order)
  is placed on ``QB{i+1}``, and nothing is routed: the program's two-qubit gates must act
  on pairs the device couples. Each measured bit is its own ``measure`` with key
  ``REG_I`` (register and index), emitted in classical-bit order.
- Counts (``counts_from_measurements``): per shot the bits of every measure key in the
  circuit's order (a translated program: its classical bits, bit 0 first, as Braket and
  the IBM vendor write them).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

NATIVE = ("prx", "cz", "measure", "barrier")
ACCEPTED = (
    "OpenQASM 3 (qubit/bit registers, standard gates x y z h s sdg t tdg sx sxdg rx ry rz "
    "p id cx cz swap, measurements at the end) or IQM's JSON circuit (prx, cz, measure, "
    "barrier on QB1...)"
)
TAU = 2 * math.pi
_QUBIT = re.compile(r"^QB([1-9]\d*)$")


class ProgramError(ValueError):
    """The program cannot run on IQM; the message is one sentence saying why."""


# -- the entry points ------------------------------------------------------------------


def check(program_text: str, qubits: int) -> str | None:
    """None when ``program_text`` can run on a device of ``qubits`` qubits, else one
    sentence naming the program and what is accepted. IQM's JSON is validated whole;
    OpenQASM (2 or 3) only for its width: the compile stage maps any standard gate onto
    the device (``native``), which the translation here could not."""
    text = program_text.strip() if isinstance(program_text, str) else ""
    head = _strip_comments(text).lstrip()
    if re.match(r"OPENQASM\s+[23](\.\d+)?\s*;", head):
        width = sum(
            int(size or 1)
            for size in re.findall(
                r"(?m)^\s*(?:qubit\s*(?:\[\s*(\d+)\s*\])?\s+\w+|qreg\s+\w+\s*\[\s*(\d+)\s*\])\s*;",
                head,
            )
            for size in [size[0] or size[1]]
        )
        if width > qubits:
            return f"the program uses {width} qubits but the device has {qubits}"
        return None
    try:
        circuit(program_text, qubits)
    except ProgramError as exc:
        return str(exc)
    return None


def circuit(program_text: str, qubits: int) -> dict[str, Any]:
    """The IQM circuit of ``program_text`` (OpenQASM 3 or IQM JSON), checked against a
    device of ``qubits`` qubits; ProgramError otherwise."""
    if not isinstance(program_text, str) or not program_text.strip():
        raise ProgramError(f"the program is empty; IQM takes {ACCEPTED}")
    text = program_text.strip()
    if text.startswith("{"):
        return _json_circuit(text, qubits)
    head = _strip_comments(text).lstrip()
    if re.match(r"OPENQASM\s+3(\.\d+)?\s*;", head):
        return translate(text, qubits)
    if re.match(r"OPENQASM\s+2", head):
        raise ProgramError(f"the program is OpenQASM 2; IQM takes {ACCEPTED}")
    raise ProgramError(f"the program is neither OpenQASM 3 nor IQM JSON; IQM takes {ACCEPTED}")


def run_request(program_text: str, shots: int, qubits: int) -> str:
    """The ``circuit`` job payload (JSON text) running ``program_text`` for ``shots``."""
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
        raise ProgramError(f"shots must be an integer >= 1, got {shots!r}")
    return json.dumps({"circuits": [circuit(program_text, qubits)], "shots": shots})


def validate_circuit(document: Any, qubits: int, where: str = "the circuit") -> dict[str, Any]:
    """``document`` checked as an IQM circuit on a device of ``qubits`` qubits."""
    if not isinstance(document, dict) or not isinstance(document.get("instructions"), list):
        raise ProgramError(f"{where} has no 'instructions' list; IQM takes {ACCEPTED}")
    keys: set[str] = set()
    measured: set[str] = set()
    for i, ins in enumerate(document["instructions"]):
        at = f"{where}'s instruction {i}"
        if not isinstance(ins, dict):
            raise ProgramError(f"{at} is not an object")
        name = ins.get("name")
        if name not in NATIVE:
            raise ProgramError(
                f"{at} is {name!r}, not one of IQM's native {', '.join(NATIVE)}; "
                "send OpenQASM 3 to have it translated"
            )
        names = ins.get("qubits")
        if not isinstance(names, list) or not names or not all(isinstance(q, str) for q in names):
            raise ProgramError(f"{at} needs a list of qubit names")
        for q in names:
            match = _QUBIT.match(q)
            if match is None:
                raise ProgramError(f"{at} names qubit {q!r}; IQM's qubits are QB1, QB2, ...")
            if int(match.group(1)) > qubits:
                raise ProgramError(f"{at} uses {q} but the device has {qubits} qubits")
        if len(set(names)) != len(names):
            raise ProgramError(f"{at} names a qubit twice")
        args = ins.get("args") or {}
        if not isinstance(args, dict):
            raise ProgramError(f"{at} has args that are not an object")
        if name == "prx":
            if len(names) != 1:
                raise ProgramError(f"{at} (prx) acts on one qubit")
            for arg in ("angle_t", "phase_t"):
                value = args.get(arg)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ProgramError(f"{at} (prx) needs a number {arg}")
        elif name == "cz" and len(names) != 2:
            raise ProgramError(f"{at} (cz) acts on two qubits")
        elif name == "measure":
            key = args.get("key")
            if not isinstance(key, str) or not key:
                raise ProgramError(f"{at} (measure) needs a key")
            if key in keys:
                raise ProgramError(f"{at} repeats the measurement key {key!r}")
            if measured & set(names):
                raise ProgramError(f"{at} measures a qubit that was measured before")
            keys.add(key)
            measured.update(names)
        if name in ("prx", "cz") and measured & set(names):
            raise ProgramError(f"{at} acts on a qubit after its measurement")
    if not keys:
        raise ProgramError(f"{where} measures nothing")
    return document


def counts_from_measurements(measurements: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, int]:
    """Counts of one circuit's ``measurements`` artifact (key -> one row of bits per shot),
    each shot the keys' bits in the artifact's key order."""
    keys = list(measurements)
    if not keys:
        raise ValueError("a circuit result with no measurement key")
    rows = [measurements[k] for k in keys]
    shots = {len(r) for r in rows}
    if len(shots) != 1:
        raise ValueError("measurement keys with different numbers of shots")
    counts: dict[str, int] = {}
    for shot in zip(*rows, strict=True):
        bits = "".join(str(int(b)) for row in shot for b in row)
        counts[bits] = counts.get(bits, 0) + 1
    return counts


# -- IQM JSON --------------------------------------------------------------------------


def _json_circuit(text: str, qubits: int) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError:
        raise ProgramError(
            f"the program looks like JSON but does not parse; IQM takes {ACCEPTED}"
        ) from None
    if isinstance(document, dict) and "circuits" in document:
        circuits = document["circuits"]
        if not isinstance(circuits, list) or len(circuits) != 1:
            raise ProgramError(
                "the IQM run request must hold exactly one circuit (one job, one program)"
            )
        document = circuits[0]
    circuit = validate_circuit(document, qubits, "the IQM JSON circuit")
    return {
        "name": str(circuit.get("name") or "circuit"),
        "instructions": [
            {"name": i["name"], "qubits": list(i["qubits"]), "args": dict(i.get("args") or {})}
            for i in circuit["instructions"]
        ],
    }


# -- OpenQASM 3 ------------------------------------------------------------------------

_OPS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_CONSTANTS = {"pi": math.pi, "π": math.pi, "tau": TAU, "τ": TAU, "e": math.e}


def _angle(text: str) -> float:
    """An angle expression (numbers, pi, + - * / **, parentheses)."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError(text)

    try:
        return value(ast.parse(text.replace("π", "pi").strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        raise ProgramError(
            f"the angle {text.strip()!r} is not a number this translation reads"
        ) from None


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


class _Builder:
    """The IQM circuit being built, with each qubit's virtual z frame."""

    def __init__(self) -> None:
        self.instructions: list[dict[str, Any]] = []
        self.frame: dict[int, float] = {}
        self.measured: set[int] = set()

    def _live(self, *qubits: int) -> None:
        if self.measured & set(qubits):
            raise ProgramError(
                "the program acts on a qubit after measuring it; IQM runs measurements at the end"
            )

    def rz(self, q: int, angle: float) -> None:
        self._live(q)
        self.frame[q] = self.frame.get(q, 0.0) + angle

    def prx(self, q: int, theta: float, phi: float) -> None:
        # R(θ, φ) after RZ(λ) equals RZ(λ) after R(θ, φ - λ): the frame moves past it.
        self._live(q)
        phase = (phi - self.frame.get(q, 0.0)) / TAU
        angle = theta / TAU
        self.instructions.append(
            {
                "name": "prx",
                "qubits": [f"QB{q + 1}"],
                "args": {"angle_t": _tidy(angle), "phase_t": _tidy(phase % 1.0)},
            }
        )

    def h(self, q: int) -> None:
        # H = RY(π/2) Z (up to a global phase).
        self.rz(q, math.pi)
        self.prx(q, math.pi / 2, math.pi / 2)

    def cz(self, a: int, b: int) -> None:
        self._live(a, b)
        if a == b:
            raise ProgramError("the program applies a two-qubit gate to one qubit twice")
        self.instructions.append({"name": "cz", "qubits": [f"QB{a + 1}", f"QB{b + 1}"], "args": {}})

    def cx(self, control: int, target: int) -> None:
        self.h(target)
        self.cz(control, target)
        self.h(target)


def _tidy(value: float) -> float:
    rounded = round(value, 12)
    return 0.0 if rounded == 0 or rounded == 1.0 else rounded


_DECL = re.compile(r"^(qubit|bit)\s*(?:\[\s*(\d+)\s*\])?\s+([A-Za-z_]\w*)$")
_OLD_DECL = re.compile(r"^(qreg|creg)\s+([A-Za-z_]\w*)\s*\[\s*(\d+)\s*\]$")
_GATE = re.compile(r"^([A-Za-z_]\w*)\s*(?:\((.*)\))?\s+(.+)$", re.S)
_MEASURE_ASSIGN = re.compile(r"^(.+?)\s*=\s*measure\s+(.+)$")
_MEASURE_ARROW = re.compile(r"^measure\s+(.+?)\s*->\s*(.+)$")
_ONE_QUBIT: dict[str, Callable[[_Builder, int, list[float]], None]] = {
    "x": lambda b, q, p: b.prx(q, math.pi, 0.0),
    "y": lambda b, q, p: b.prx(q, math.pi, math.pi / 2),
    "z": lambda b, q, p: b.rz(q, math.pi),
    "h": lambda b, q, p: b.h(q),
    "s": lambda b, q, p: b.rz(q, math.pi / 2),
    "sdg": lambda b, q, p: b.rz(q, -math.pi / 2),
    "t": lambda b, q, p: b.rz(q, math.pi / 4),
    "tdg": lambda b, q, p: b.rz(q, -math.pi / 4),
    "sx": lambda b, q, p: b.prx(q, math.pi / 2, 0.0),
    "sxdg": lambda b, q, p: b.prx(q, -math.pi / 2, 0.0),
    "rx": lambda b, q, p: b.prx(q, p[0], 0.0),
    "ry": lambda b, q, p: b.prx(q, p[0], math.pi / 2),
    "rz": lambda b, q, p: b.rz(q, p[0]),
    "p": lambda b, q, p: b.rz(q, p[0]),
    "phase": lambda b, q, p: b.rz(q, p[0]),
    "id": lambda b, q, p: None,
}
_PARAMS = {"rx": 1, "ry": 1, "rz": 1, "p": 1, "phase": 1}


def translate(text: str, qubits: int) -> dict[str, Any]:
    """The IQM circuit of an OpenQASM 3 program (see the module docstring)."""
    qregs: dict[str, tuple[int, int]] = {}  # name -> (first logical qubit, size)
    cregs: dict[str, int] = {}
    width = 0
    builder = _Builder()
    measures: dict[tuple[str, int], int] = {}  # (register, bit) -> logical qubit
    statements = [s.strip() for s in _strip_comments(text).split(";")]
    for number, statement in enumerate(statements):
        statement = " ".join(statement.split())
        if not statement or statement.startswith(("OPENQASM", "include")):
            continue
        at = f"statement {number + 1} ({statement[:40]!r})"
        decl = _DECL.match(statement) or _OLD_DECL.match(statement)
        if decl is not None:
            if decl.re is _DECL:
                kind, size, name = decl.group(1), int(decl.group(2) or 1), decl.group(3)
            else:
                kind, name, size = decl.group(1), decl.group(2), int(decl.group(3))
            if kind in ("qubit", "qreg"):
                qregs[name] = (width, size)
                width += size
                if width > qubits:
                    raise ProgramError(
                        f"the program uses {width} qubits but the device has {qubits}"
                    )
            else:
                cregs[name] = size
            continue
        try:
            _statement(statement, builder, qregs, cregs, measures)
        except ProgramError as exc:
            raise ProgramError(f"the OpenQASM program's {at}: {exc}") from None
    if not measures:
        raise ProgramError("the OpenQASM program measures nothing")
    order = {name: i for i, name in enumerate(cregs)}
    for (register, bit), q in sorted(measures.items(), key=lambda m: (order[m[0][0]], m[0][1])):
        builder.measured.add(q)
        builder.instructions.append(
            {"name": "measure", "qubits": [f"QB{q + 1}"], "args": {"key": f"{register}_{bit}"}}
        )
    return {"name": "circuit", "instructions": builder.instructions}


def _operands(text: str, regs: Mapping[str, tuple[int, int]], what: str) -> list[list[int]]:
    """Each comma-separated operand as its list of indices (a whole register: all of them)."""
    result = []
    for operand in (o.strip() for o in text.split(",")):
        match = re.fullmatch(r"([A-Za-z_]\w*)(?:\s*\[\s*(\d+)\s*\])?", operand)
        if match is None or match.group(1) not in regs:
            raise ProgramError(f"{operand!r} is not a declared {what}")
        first, size = regs[match.group(1)]
        if match.group(2) is None:
            result.append([first + i for i in range(size)])
            continue
        index = int(match.group(2))
        if index >= size:
            raise ProgramError(f"{operand!r} is outside its {what} register of {size}")
        result.append([first + index])
    return result


def _measurement(statement: str) -> tuple[str, str] | None:
    """(bits, qubits) of ``c = measure q`` or ``measure q -> c``; None for anything else."""
    if assign := _MEASURE_ASSIGN.match(statement):
        return assign.group(1), assign.group(2)
    if arrow := _MEASURE_ARROW.match(statement):
        return arrow.group(2), arrow.group(1)
    return None


def _statement(
    statement: str,
    builder: _Builder,
    qregs: Mapping[str, tuple[int, int]],
    cregs: Mapping[str, int],
    measures: dict[tuple[str, int], int],
) -> None:
    measured = _measurement(statement)
    if measured is not None:
        target, source = measured
        bits = _bit_operands(target, cregs)
        (qs,) = _operands(source, qregs, "qubit")
        if len(bits) != len(qs):
            raise ProgramError("the measurement's bits and qubits differ in number")
        for bit, q in zip(bits, qs, strict=True):
            if bit in measures:
                raise ProgramError(f"bit {bit[0]}[{bit[1]}] is measured twice")
            if q in measures.values():
                raise ProgramError("a qubit is measured twice")
            measures[bit] = q
        return
    match = _GATE.match(statement)
    if match is None:
        raise ProgramError("this translation does not read it")
    name, params_text, operands_text = match.group(1), match.group(2), match.group(3)
    if name == "measure":
        raise ProgramError("a measurement needs a target bit")
    if measures and name != "barrier":
        touched = {q for group in _operands(operands_text, qregs, "qubit") for q in group}
        if touched & set(measures.values()):
            builder.measured.update(measures.values())
            builder._live(*touched)
    params = [_angle(p) for p in params_text.split(",")] if params_text else []
    if len(params) != _PARAMS.get(name, 0):
        raise ProgramError(f"gate {name} takes {_PARAMS.get(name, 0)} parameter(s)")
    operands = _operands(operands_text, qregs, "qubit")
    if name == "barrier":
        flat = [q for group in operands for q in group]
        builder.instructions.append(
            {"name": "barrier", "qubits": [f"QB{q + 1}" for q in flat], "args": {}}
        )
        return
    if name in _ONE_QUBIT:
        if len(operands) != 1:
            raise ProgramError(f"gate {name} acts on one qubit")
        for q in operands[0]:
            _ONE_QUBIT[name](builder, q, params)
        return
    if name in ("cx", "cnot", "cz", "swap"):
        if len(operands) != 2:
            raise ProgramError(f"gate {name} acts on two qubits")
        a, b = operands
        if len(a) != len(b) and 1 not in (len(a), len(b)):
            raise ProgramError(f"gate {name}'s registers differ in size")
        n = max(len(a), len(b))
        for i in range(n):
            x, y = a[i if len(a) > 1 else 0], b[i if len(b) > 1 else 0]
            if name == "cz":
                builder.cz(x, y)
            elif name == "swap":
                builder.cx(x, y)
                builder.cx(y, x)
                builder.cx(x, y)
            else:
                builder.cx(x, y)
        return
    raise ProgramError(f"gate {name!r} is not one this translation knows ({ACCEPTED})")


def _bit_operands(text: str, cregs: Mapping[str, int]) -> list[tuple[str, int]]:
    match = re.fullmatch(r"([A-Za-z_]\w*)(?:\s*\[\s*(\d+)\s*\])?", text.strip())
    if match is None or match.group(1) not in cregs:
        raise ProgramError(f"{text.strip()!r} is not a declared bit register")
    name, size = match.group(1), cregs[match.group(1)]
    if match.group(2) is None:
        return [(name, i) for i in range(size)]
    index = int(match.group(2))
    if index >= size:
        raise ProgramError(f"{text.strip()!r} is outside its bit register of {size}")
    return [(name, index)]
