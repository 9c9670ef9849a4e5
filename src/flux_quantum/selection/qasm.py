"""A cheap gate and qubit count of an OpenQASM 3 program, for quality-aware selection.

This module owns :func:`count_program`: how many qubits a program declares, how many
one- and two-qubit gates it applies and how many qubits it measures, which is all the
``max-fidelity`` policy and ``qpu.min_fidelity`` need to estimate a program's expected
success on a device. It reads text only: it never runs, compiles or imports a quantum
SDK (the Braket parser costs seconds to import), never does I/O and never fails on a
program it does not understand; what it cannot read it counts conservatively and says
so in ``ProgramCounts.notes``.

The rules, close to what a vendor's compiler sees before it maps to native gates:

- ``qubit[n] q;``, ``qubit q;`` and OpenQASM 2's ``qreg q[n];`` declare qubits; physical
  qubits (``$3``) count once each.
- A gate call's arity is its number of qubit operands (``ctrl @`` modifiers included);
  an operand that is a whole register or a slice broadcasts the gate over its qubits.
  A gate on k >= 3 qubits counts as its textbook decomposition, Toffoli's: 6 two-qubit
  and 9 one-qubit gates per extra qubit (k - 2).
- A gate the program defines (``gate name a, b { ... }``) counts as its body.
- ``for`` over a range or a set multiplies its body; ``if``/``else``/``while``/``box``
  bodies count once.
- ``measure`` counts each qubit it reads; a program that measures nothing is measured
  whole (Braket measures every qubit then).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Statements that apply no gate.
_IGNORED = frozenset(
    {
        "OPENQASM",
        "include",
        "input",
        "output",
        "bit",
        "creg",
        "int",
        "uint",
        "float",
        "angle",
        "bool",
        "complex",
        "const",
        "let",
        "duration",
        "stretch",
        "array",
        "barrier",
        "reset",
        "delay",
        "gphase",
        "return",
        "extern",
        "break",
        "continue",
        "end",
        "pragma",
        "defcalgrammar",
    }
)
_BLOCKS_ONCE = ("if", "else", "while", "box")
_DEFINITIONS = ("def", "defcal", "cal")
_MODIFIER = re.compile(r"^(?:(?:inv|(?:neg)?ctrl(?:\s*\(\s*(\d+)\s*\))?|pow\s*\([^)]*\))\s*@\s*)")
_CALL = re.compile(r"^([A-Za-z_][\w]*)\s*(\([^;]*?\))?\s*(.*)$", re.S)
_OPERAND = re.compile(r"^(\$\d+|[A-Za-z_]\w*)\s*(?:\[(.*)\])?$", re.S)
_DECL = re.compile(r"^qubit\s*(?:\[\s*(\d+)\s*\])?\s+([A-Za-z_]\w*)$")
_QREG = re.compile(r"^qreg\s+([A-Za-z_]\w*)\s*\[\s*(\d+)\s*\]$")
_RANGE = re.compile(r"^\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]$")
_FOR = re.compile(r"^for\s+(?:\w+(?:\[[^\]]*\])?\s+)?\w+\s+in\s+(.*)$", re.S)
_MEASURE_ARROW = re.compile(r"^measure\s+(.*?)\s*->.*$", re.S)
_MEASURE_ASSIGN = re.compile(r"^[^=]*=\s*measure\s+(.*)$", re.S)
_MEASURE = re.compile(r"^measure\s+(.*)$", re.S)
_MEASURE_WORD = re.compile(r"\bmeasure\b")

TOFFOLI_TWO_QUBIT = 6
TOFFOLI_ONE_QUBIT = 9


@dataclass(frozen=True)
class ProgramCounts:
    """What a program asks of a device: qubits, gates by arity, qubits measured."""

    qubits: int
    one_qubit_gates: int
    two_qubit_gates: int
    measured: int
    notes: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        return (
            f"{self.qubits} qubits, {self.one_qubit_gates} 1q + {self.two_qubit_gates} 2q gates,"
            f" {self.measured} measured"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "qubits": self.qubits,
            "one_qubit_gates": self.one_qubit_gates,
            "two_qubit_gates": self.two_qubit_gates,
            "measured": self.measured,
            "notes": list(self.notes),
        }


# The handlers' default program when a request names none: a Bell pair.
BELL_COUNTS = ProgramCounts(qubits=2, one_qubit_gates=1, two_qubit_gates=1, measured=2)


@dataclass
class _Tally:
    one: int = 0
    two: int = 0
    measured: int = 0
    measure_seen: bool = False

    def add(self, other: _Tally, times: int = 1) -> None:
        self.one += other.one * times
        self.two += other.two * times
        self.measured += other.measured * times
        self.measure_seen = self.measure_seen or other.measure_seen


@dataclass
class _Scope:
    registers: dict[str, int] = field(default_factory=dict)
    physical: set[str] = field(default_factory=set)
    gates: dict[str, _Tally] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def count_program(text: str) -> ProgramCounts:
    """Qubits, one- and two-qubit gate applications and measured qubits of ``text``."""
    scope = _Scope()
    tally = _count_block(_strip_comments(text), scope, top=True)
    qubits = sum(scope.registers.values()) + len(scope.physical)
    measured = tally.measured if tally.measure_seen else qubits
    return ProgramCounts(
        qubits=qubits,
        one_qubit_gates=tally.one,
        two_qubit_gates=tally.two,
        measured=measured,
        notes=tuple(dict.fromkeys(scope.notes)),
    )


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _statements(text: str) -> list[tuple[str, str | None]]:
    """Split into (statement, block body or None) at the top level of ``text``."""
    items: list[tuple[str, str | None]] = []
    start = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char == ";":
            items.append((text[start:i].strip(), None))
            start = i + 1
        elif char == "{" and not _is_set_literal(text[start:i]):
            depth, j = 1, i + 1
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            items.append((text[start:i].strip(), text[i + 1 : j - 1]))
            start = i = j
            continue
        elif char == "#" and text.startswith("#pragma", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            items.append((text[start:i].strip(), None))
            start = i = end
            continue
        i += 1
    if text[start:].strip():
        items.append((text[start:].strip(), None))
    return [(head, body) for head, body in items if head or body is not None]


def _is_set_literal(head: str) -> bool:
    """``for i in {0, 2}`` and ``q[{0, 1}]`` open a set, not a block."""
    stripped = head.rstrip()
    return stripped.endswith(" in") or stripped.endswith("[") or stripped.endswith(",")


def _count_block(text: str, scope: _Scope, top: bool = False) -> _Tally:
    tally = _Tally()
    for head, body in _statements(text):
        words = head.split(None, 1)
        keyword = words[0] if words else ""
        if body is not None:
            _count_compound(head, keyword, body, scope, tally)
        elif _MEASURE_WORD.search(head) is not None:  # also "bit b = measure q[0]"
            tally.measure_seen = True
            tally.measured += _measured(head, scope)
        elif keyword in _IGNORED or head.startswith("#") or not head:
            continue
        elif (match := _DECL.match(head)) is not None:
            scope.registers[match.group(2)] = int(match.group(1) or 1)
        elif (match := _QREG.match(head)) is not None:
            scope.registers[match.group(1)] = int(match.group(2))
        elif "=" in head and "==" not in head:
            continue  # classical assignment
        else:
            _count_call(head, scope, tally)
    return tally


def _count_compound(head: str, keyword: str, body: str, scope: _Scope, tally: _Tally) -> None:
    if keyword == "gate":
        parts = head.split(None, 1)
        name_match = re.match(r"([A-Za-z_]\w*)", parts[1] if len(parts) > 1 else "")
        if name_match:
            scope.gates[name_match.group(1)] = _count_block(body, scope)
        return
    if keyword in _DEFINITIONS:
        scope.notes.append(f"'{keyword}' bodies are not counted")
        return
    inner = _count_block(body, scope)
    if keyword == "for":
        times = _iterations(head)
        if times is None:
            scope.notes.append("a for loop over an unknown range counts once")
            times = 1
        tally.add(inner, times)
        return
    if keyword not in _BLOCKS_ONCE and not head.startswith("else"):
        scope.notes.append(f"a block '{head[:20]}' counts once")
    tally.add(inner)


def _iterations(head: str) -> int | None:
    match = _FOR.match(head)
    if match is None:
        return None
    source = match.group(1).strip()
    if source.startswith("{") or source.endswith("{"):
        source = source.strip("{} ")
        return len([item for item in source.split(",") if item.strip()]) or None
    ranged = _RANGE.match(source)
    if ranged is None:
        return None
    start, stop = int(ranged.group(1)), int(ranged.group(2))
    step = int(ranged.group(3)) if ranged.group(3) else 1
    if ranged.group(3):  # [start:step:stop]
        step, stop = stop, step
    if step == 0:
        return None
    return max(0, (stop - start) // step + 1)


def _count_call(head: str, scope: _Scope, tally: _Tally) -> None:
    text = head
    while (modifier := _MODIFIER.match(text)) is not None:
        text = text[modifier.end() :]
    call = _CALL.match(text)
    if call is None:
        scope.notes.append(f"'{head[:20]}' is not read")
        return
    name, operands = call.group(1), _split_operands(call.group(3))
    if name in _IGNORED:
        return
    if not operands:
        scope.notes.append(f"'{head[:20]}' has no qubit operands")
        return
    widths = [_width(operand, scope) for operand in operands]
    broadcast = max(widths)
    arity = len(operands)
    defined = scope.gates.get(name)
    if defined is not None:
        tally.add(defined, broadcast)
    elif arity == 1:
        tally.one += broadcast
    elif arity == 2:
        tally.two += broadcast
    else:
        tally.two += broadcast * TOFFOLI_TWO_QUBIT * (arity - 2)
        tally.one += broadcast * TOFFOLI_ONE_QUBIT * (arity - 2)


def _split_operands(text: str) -> list[str]:
    operands: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        if char == "," and depth == 0:
            operands.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        operands.append("".join(current).strip())
    return [operand for operand in operands if operand]


def _width(operand: str, scope: _Scope) -> int:
    """How many qubits an operand names (a whole register or a slice broadcast)."""
    match = _OPERAND.match(operand)
    if match is None:
        return 1
    name, index = match.group(1), match.group(2)
    if name.startswith("$"):
        scope.physical.add(name)
        return 1
    size = scope.registers.get(name, 1)
    if index is None:
        return size
    index = index.strip()
    if index.startswith("{"):
        return len([item for item in index.strip("{} ").split(",") if item.strip()]) or 1
    if ":" in index:
        parts = [p.strip() for p in index.split(":")]
        try:
            numbers = [int(p) if p else None for p in parts]
        except ValueError:
            return size
        start = numbers[0] if numbers[0] is not None else 0
        stop = numbers[-1] if numbers[-1] is not None else size - 1
        step = numbers[1] if len(numbers) == 3 and numbers[1] else 1
        return max(1, (stop - start) // step + 1)
    return 1


def _measured(head: str, scope: _Scope) -> int:
    for pattern in (_MEASURE_ARROW, _MEASURE_ASSIGN, _MEASURE):
        match = pattern.match(head)
        if match is not None:
            return sum(_width(operand, scope) for operand in _split_operands(match.group(1)))
    return 0
