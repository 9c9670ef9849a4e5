"""The circuits a cut takes: a small, checked subset of OpenQASM 3, read and written.

A circuit to cut declares one qubit register (``qubit[n] q;`` or ``qreg q[n];``), applies
gates of the standard library to constant indices of it, and may measure it at the end
(the measurements are dropped: a cut measures what its observables need). Gates take
constant parameters written with numbers, ``pi``, ``+ - * /`` and parentheses. Anything
else (several registers, classical control, loops, gate definitions, mid-circuit
measurement or reset) is refused with one sentence naming the line: a cut must know
every operation it moves into a fragment. ``Circuit.fragment`` writes a fragment back as
OpenQASM 3 with the same names, which every gate-based device takes. Standard library
only, and pure: no I/O.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flux_quantum.errors import FluxQuantumError

# The standard gates a cut circuit may use: name -> (qubits, parameters).
GATES: dict[str, tuple[int, int]] = {
    "id": (1, 0),
    "x": (1, 0),
    "y": (1, 0),
    "z": (1, 0),
    "h": (1, 0),
    "s": (1, 0),
    "sdg": (1, 0),
    "t": (1, 0),
    "tdg": (1, 0),
    "sx": (1, 0),
    "rx": (1, 1),
    "ry": (1, 1),
    "rz": (1, 1),
    "p": (1, 1),
    "cx": (2, 0),
    "cnot": (2, 0),
    "cy": (2, 0),
    "cz": (2, 0),
    "swap": (2, 0),
    "rzz": (2, 1),
    "cp": (2, 1),
    "ccx": (3, 0),
}
MAX_QUBITS = 200
MAX_GATES = 20_000

_HEADER = re.compile(r"OPENQASM\s+[23](\.\d+)?")
_INCLUDE = re.compile(r'include\s+"(stdgates\.inc|qelib1\.inc)"')
_QUBITS = re.compile(
    r"(?:qubit\s*\[\s*(\d+)\s*\]\s*([A-Za-z_]\w*)|qreg\s+([A-Za-z_]\w*)\s*\[\s*(\d+)\s*\])"
)
_BITS = re.compile(r"(?:bit\s*\[\s*\d+\s*\]\s*[A-Za-z_]\w*|creg\s+[A-Za-z_]\w*\s*\[\s*\d+\s*\])")
_MEASURE = re.compile(
    r"(?:[A-Za-z_]\w*(?:\s*\[\s*\d+\s*\])?\s*=\s*measure\s+.+|measure\s+.+?(?:->\s*.+)?)"
)
_BARRIER = re.compile(r"barrier\b.*")
_GATE = re.compile(r"([a-z][a-z0-9_]*)\s*(?:\((.*)\))?\s+(.+)")
_OPERAND = re.compile(r"([A-Za-z_]\w*)\s*\[\s*(\d+)\s*\]")

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class CircuitError(FluxQuantumError, ValueError):
    """A circuit a cut cannot take; the message names the line."""


@dataclass(frozen=True)
class Gate:
    """One gate: its standard name, the qubits it acts on, its parameters."""

    name: str
    qubits: tuple[int, ...]
    params: tuple[float, ...] = ()

    def text(self, index: Callable[[int], str]) -> str:
        """The gate as an OpenQASM statement, its qubits named by ``index``."""
        params = "(" + ", ".join(repr(p) for p in self.params) + ")" if self.params else ""
        return f"{self.name}{params} " + ", ".join(index(q) for q in self.qubits) + ";"


@dataclass(frozen=True)
class Circuit:
    """A circuit of ``qubits`` qubits: its gates in order."""

    qubits: int
    gates: tuple[Gate, ...]

    def two_qubit(self) -> list[tuple[int, Gate]]:
        """The gates on two or more qubits, with their positions."""
        return [(i, g) for i, g in enumerate(self.gates) if len(g.qubits) > 1]


def fragment_text(width: int, body: Sequence[str]) -> str:
    """A fragment's OpenQASM 3 program: ``width`` qubits, ``body``, all qubits measured."""
    lines = [
        "OPENQASM 3.0;",
        'include "stdgates.inc";',
        f"qubit[{width}] q;",
        f"bit[{width}] c;",
        *body,
        "c = measure q;",
    ]
    return "\n".join(lines) + "\n"


def parse_circuit(text: str) -> Circuit:
    """The circuit of OpenQASM ``text``; CircuitError naming the line it cannot take."""
    register: str | None = None
    size = 0
    gates: list[Gate] = []
    measured = False
    for number, statement in _statements(text):
        where = f"line {number}"
        if _HEADER.fullmatch(statement) or _INCLUDE.fullmatch(statement):
            continue
        if match := _QUBITS.fullmatch(statement):
            if register is not None:
                raise CircuitError(f"{where}: a circuit to cut declares one qubit register")
            register = match.group(2) or match.group(3)
            size = int(match.group(1) or match.group(4))
            if not 1 <= size <= MAX_QUBITS:
                raise CircuitError(f"{where}: a circuit to cut has 1 to {MAX_QUBITS} qubits")
            continue
        if _BITS.fullmatch(statement) or _BARRIER.fullmatch(statement):
            continue
        if _MEASURE.fullmatch(statement):
            measured = True
            continue
        if register is None:
            raise CircuitError(f"{where}: {statement!r} comes before the qubit register")
        if measured:
            raise CircuitError(
                f"{where}: a circuit to cut measures only at its end, {statement!r} follows a measurement"
            )
        gates.append(_gate(statement, where, register, size))
        if len(gates) > MAX_GATES:
            raise CircuitError(f"{where}: a circuit to cut has at most {MAX_GATES} gates")
    if register is None:
        raise CircuitError("the circuit declares no qubit register (qubit[n] q;)")
    return Circuit(size, tuple(gates))


def _statements(text: str) -> list[tuple[int, str]]:
    """The statements of ``text`` with the line each starts on, comments dropped."""
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        if not pending:
            start = number
        pending = f"{pending} {line}".strip()
        while ";" in pending:
            statement, _, pending = pending.partition(";")
            if statement.strip():
                out.append((start, " ".join(statement.split())))
            pending = pending.strip()
            start = number
    if pending:
        raise CircuitError(f"line {start}: {pending!r} does not end with ';'")
    return out


def _gate(statement: str, where: str, register: str, size: int) -> Gate:
    match = _GATE.fullmatch(statement)
    if match is None:
        raise CircuitError(f"{where}: a circuit to cut cannot take {statement!r}")
    name, params_text, operands_text = match.groups()
    if name not in GATES:
        known = ", ".join(sorted(GATES))
        raise CircuitError(f"{where}: gate {name!r} is not one a cut takes ({known})")
    arity, nparams = GATES[name]
    params = tuple(_value(p, where) for p in _split(params_text)) if params_text else ()
    if len(params) != nparams:
        raise CircuitError(f"{where}: {name} takes {nparams} parameter(s), got {len(params)}")
    qubits: list[int] = []
    for operand in operands_text.split(","):
        found = _OPERAND.fullmatch(operand.strip())
        if found is None or found.group(1) != register:
            raise CircuitError(
                f"{where}: {operand.strip()!r} is not a qubit of {register} such as {register}[0]"
            )
        index = int(found.group(2))
        if index >= size:
            raise CircuitError(f"{where}: {register}[{index}] is past the register's {size} qubits")
        qubits.append(index)
    if len(qubits) != arity or len(set(qubits)) != arity:
        raise CircuitError(f"{where}: {name} acts on {arity} distinct qubit(s)")
    name = "cx" if name == "cnot" else name
    return Gate(name, tuple(qubits), params)


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    parts.append(current)
    return parts


def _value(text: str, where: str) -> float:
    """A constant parameter: numbers, pi, + - * / and parentheses."""
    expression = text.strip().replace("π", "pi")
    try:
        tree = ast.parse(expression, mode="eval")
        value = _evaluate(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
        raise CircuitError(
            f"{where}: parameter {text.strip()!r} is not a constant of numbers, pi and + - * /"
        ) from None
    if not math.isfinite(value):
        raise CircuitError(f"{where}: parameter {text.strip()!r} is not finite")
    return value


def _evaluate(node: ast.expr) -> float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id in ("pi", "tau", "euler"):
        return {"pi": math.pi, "tau": math.tau, "euler": math.e}[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError("not a constant")
