"""What the emulator reads of an OpenQASM program before it runs it: includes, width, operations.

This module owns the emulator's reading of a program's text, for every side that takes
OpenQASM: its includes (only ``stdgates.inc`` and OpenQASM 2's ``qelib1.inc``, the
standard libraries, are taken, as a name, never as a file: any other include is refused
in one sentence, and no file a program names is ever opened), the program in the dialect
the Braket local simulator runs (``for_simulator``: the standard library's names it
lacks defined from its own), the qubits it declares (``width``: its registers and the
physical qubits ``$n`` it names), and its quantum operations with the physical qubits
each acts on (``operations``, read with the ``openqasm3`` parser; a register's qubit
``q[i]`` is physical qubit ``offset + i``, registers laid out in declaration order).
It must never hold state, do I/O, or run a program; a program it cannot read is one
``ProgramError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

STANDARD_INCLUDES = ("stdgates.inc", "qelib1.inc")
_INCLUDE = re.compile(r'^\s*include\s+"([^"]*)"\s*;[ \t]*$', re.M)
_REGISTER = re.compile(
    r"^\s*(?:qubit\s*(?:\[\s*(\d+)\s*\])?\s+\w+|qreg\s+\w+\s*(?:\[\s*(\d+)\s*\])?)\s*;", re.M
)
_PHYSICAL = re.compile(r"\$(\d+)")
# The standard library's names the Braket simulator does not know, as Braket gates.
_STDGATE_ALIASES: dict[str, str] = {
    "sx": "gate sx a { v a; }",
    "sxdg": "gate sxdg a { vi a; }",
    "cx": "gate cx a, b { cnot a, b; }",
    "CX": "gate CX a, b { cnot a, b; }",
    "ccx": "gate ccx a, b, c { ccnot a, b, c; }",
    "sdg": "gate sdg a { si a; }",
    "tdg": "gate tdg a { ti a; }",
    "id": "gate id a { i a; }",
    "p": "gate p(l) a { phaseshift(l) a; }",
    "cp": "gate cp(l) a, b { cphaseshift(l) a, b; }",
    "rzz": "gate rzz(t) a, b { zz(t) a, b; }",
    "rxx": "gate rxx(t) a, b { xx(t) a, b; }",
    "ryy": "gate ryy(t) a, b { yy(t) a, b; }",
}


class ProgramError(ValueError):
    """The program cannot run here; the message is what the vendor's refusal says."""


@dataclass(frozen=True)
class Operation:
    """One quantum operation: its name (a gate's, with its modifiers: ``ctrl @ x``;
    ``measure``, ``reset``, ``barrier``, ``delay``) and the physical qubits it acts on
    (None when an index is not a constant, as a loop variable's)."""

    name: str
    qubits: tuple[int, ...] | None


def includes(source: str) -> list[str]:
    """The files ``source`` includes; ProgramError for one that is not a standard
    library (the emulator never opens a file a program names)."""
    named = _INCLUDE.findall(source)
    for name in named:
        if name not in STANDARD_INCLUDES:
            raise ProgramError(
                f'include "{name}" is not supported: a program may include only '
                f"{' or '.join(STANDARD_INCLUDES)}, which are built in"
            )
    return named


def for_simulator(source: str, library: bool = False) -> str:
    """``source`` in the dialect the Braket simulator runs: its standard includes
    dropped (any other refused) and, when it includes the standard library (or the
    vendor always knows it: ``library``), the library's names the simulator lacks
    defined from its own."""
    library = bool(includes(source)) or library
    body = _INCLUDE.sub("", source)
    if not library:
        return body
    definitions = []
    for name, definition in _STDGATE_ALIASES.items():
        used = re.search(rf"(^|[;{{}}])\s*{name}\s*[\s(]", body, re.M)
        defined = re.search(rf"\bgate\s+{name}\b", body)
        if used and not defined:
            definitions.append(definition)
    if not definitions:
        return body
    lines = body.splitlines()
    # Definitions go after the version line (which must stay first).
    at = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("OPENQASM")), 0)
    return "\n".join(lines[:at] + definitions + lines[at:]) + "\n"


def width(source: str) -> int:
    """How many qubits ``source`` declares: its registers' sizes summed, or one past the
    highest physical qubit it names, whichever is more."""
    declared = sum(int(a or b or 1) for a, b in _REGISTER.findall(source))
    physical = max((int(n) + 1 for n in _PHYSICAL.findall(source)), default=0)
    return max(declared, physical)


def check_width(source: str, device_qubits: int) -> None:
    """ProgramError when ``source`` declares more qubits than the device has."""
    wanted = width(source)
    if wanted > device_qubits:
        raise ProgramError(
            f"the program declares {wanted} qubits but the device has {device_qubits}"
        )


def operations(source: str) -> list[Operation]:
    """The quantum operations of ``source``, in order, loop and branch bodies included."""
    includes(source)
    try:
        from openqasm3 import ast, parse

        program = parse(source)
    except ImportError as exc:  # pragma: no cover - the parser ships with Braket's simulator
        raise ProgramError(f"the emulator cannot read OpenQASM here: {exc}") from exc
    except Exception as exc:
        raise ProgramError(f"the OpenQASM program does not parse: {exc}") from exc
    return list(_Reader(ast).statements(program.statements))


class _Reader:
    """A walk over a parsed program's statements, registers laid out as declared."""

    def __init__(self, ast: Any) -> None:
        self.ast = ast
        self.offsets: dict[str, tuple[int, int]] = {}  # register -> (first qubit, size)
        self.next = 0

    def statements(self, statements: list[Any]) -> Iterator[Operation]:
        for node in statements:
            yield from self.statement(node)

    def statement(self, node: Any) -> Iterator[Operation]:
        ast = self.ast
        if isinstance(node, ast.QubitDeclaration):
            size = node.size.value if isinstance(node.size, ast.IntegerLiteral) else 1
            self.offsets[node.qubit.name] = (self.next, size)
            self.next += size
        elif isinstance(node, ast.QuantumGate):
            modifiers = "".join(f"{m.modifier.name.lower()} @ " for m in node.modifiers)
            yield from self.acting(modifiers + node.name.name, node.qubits)
        elif isinstance(node, ast.QuantumMeasurementStatement):
            yield from self.acting("measure", [node.measure.qubit])
        elif isinstance(node, ast.QuantumReset):
            yield from self.acting("reset", [node.qubits])
        elif isinstance(node, ast.QuantumBarrier):
            yield Operation("barrier", self.together(node.qubits))
        elif isinstance(node, ast.DelayInstruction):
            yield Operation("delay", self.together(node.qubits))
        elif isinstance(node, ast.QuantumPhase):
            yield Operation("gphase", ())
        else:
            for body in ("block", "if_block", "else_block", "body"):
                inner = getattr(node, body, None)
                if isinstance(inner, list):
                    yield from self.statements(inner)

    def acting(self, name: str, operands: list[Any]) -> Iterator[Operation]:
        """One operation per qubit tuple: a whole register broadcasts, index by index."""
        resolved = [self.qubits(operand) for operand in operands]
        if any(r is None for r in resolved):
            yield Operation(name, None)
            return
        sizes = {len(r) for r in resolved if r is not None and len(r) != 1}
        for i in range(max(sizes, default=1)):
            yield Operation(name, tuple(r[0] if len(r) == 1 else r[i] for r in resolved if r))

    def together(self, operands: list[Any]) -> tuple[int, ...] | None:
        qubits: list[int] = []
        for operand in operands:
            resolved = self.qubits(operand)
            if resolved is None:
                return None
            qubits.extend(resolved)
        return tuple(qubits)

    def qubits(self, operand: Any) -> list[int] | None:
        """The physical qubits an operand names (None: not a constant index)."""
        ast = self.ast
        if isinstance(operand, ast.Identifier):
            if operand.name.startswith("$"):
                return [int(operand.name[1:])]
            first, size = self.offsets.get(operand.name, (0, 0))
            return list(range(first, first + size)) or None
        if isinstance(operand, ast.IndexedIdentifier):
            first, size = self.offsets.get(operand.name.name, (0, 0))
            picked: list[int] = []
            for index in operand.indices:
                for item in index if isinstance(index, list) else [index]:
                    if not isinstance(item, ast.IntegerLiteral):
                        return None
                    picked.append(first + item.value)
            return picked
        return None
