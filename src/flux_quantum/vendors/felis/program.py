"""Programs for Alice & Bob's Felis: human-readable QIR, and the histogram a job gives back.

This module owns which programs a job may send to a Felis target and how its output reads
as counts. It is pure: no I/O, no clock, no qrmi. The emulator's Felis side runs the same
reading of a program (``gates``) on its simulator.

- Programs: Felis takes human-readable QIR only (``HUMAN_QIR``: LLVM IR text calling
  ``@__quantum__qis__*`` on ``%Qubit*`` and ``%Result*``, as the Alice & Bob Qiskit
  provider sends it), base profile: qubits and results are ``null`` (0) or ``inttoptr
  (i64 N to %Qubit*)``. flux-quantum sends it as written; it does not translate OpenQASM.
- ``gates``: the calls of the program's entry point in order, each as (name, qubits,
  parameters, result): ``h``, ``cnot``, ``mz`` ... (``__body`` dropped, ``__adj`` kept as a
  suffix ``_adj``).
- Counts (``counts_from_histogram``): Felis's ``HISTOGRAM`` output is CSV rows
  ``BITS,COUNT`` with the bits in Qiskit's order (the last result first, as the Qiskit
  provider reads them: ``int(BITS, 2)``); the counts are written result 0 first, the order
  Braket's counts and the other vendors' use here.
"""

from __future__ import annotations

import csv
import io
import re

from flux_quantum.protocol.programs import is_qir

ACCEPTED = "human-readable QIR (LLVM IR text calling @__quantum__qis__* on %Qubit* and %Result*)"
_CALL = re.compile(r"call\s+void\s+@__quantum__qis__(\w+?)__(body|adj)\s*\((.*)\)")
_POINTER = re.compile(r"%(Qubit|Result)\*\s+(?:null|inttoptr\s*\(\s*i64\s+(\d+)\s+to\s+%\1\*\s*\))")
_DOUBLE = re.compile(r"\bdouble\s+([-+0-9.eE]+)")


class ProgramError(ValueError):
    """The program cannot run on Felis; the message is one sentence saying why."""


Gate = tuple[str, list[int], list[float], int | None]


def check(program_text: str, qubits: int) -> str | None:
    """None when ``program_text`` can run on a target of ``qubits`` qubits, else one
    sentence naming the program and what is accepted."""
    try:
        used = gates(program_text)
    except ProgramError as exc:
        return str(exc)
    widest = max((q for _n, qs, _p, _r in used for q in qs), default=-1) + 1
    if widest > qubits:
        return f"the program uses {widest} qubits and the device has {qubits}"
    return None


def gates(program_text: str) -> list[Gate]:
    """The program's QIS calls in order (ProgramError: not human QIR, or a call whose
    arguments do not read)."""
    if not isinstance(program_text, str) or not is_qir(program_text):
        raise ProgramError(f"the program is not QIR; Felis takes {ACCEPTED}")
    found: list[Gate] = []
    for line in program_text.splitlines():
        match = _CALL.search(line)
        if not match:
            continue
        name = match.group(1) + ("_adj" if match.group(2) == "adj" else "")
        qubits: list[int] = []
        result = None
        for kind, index in _POINTER.findall(match.group(3)):
            if kind == "Qubit":
                qubits.append(int(index or 0))
            else:
                result = int(index or 0)
        params = [float(v) for v in _DOUBLE.findall(match.group(3))]
        if not qubits:
            raise ProgramError(f"the QIR call {name} acts on no qubit the program names")
        found.append((name, qubits, params, result))
    if not found:
        raise ProgramError("the QIR program calls no quantum instruction")
    return found


def histogram(counts: dict[str, int]) -> str:
    """Felis's ``HISTOGRAM`` CSV of ``counts`` written result 0 first."""
    return "".join(f"{bits[::-1]},{n}\n" for bits, n in sorted(counts.items()))


def counts_from_histogram(text: str) -> dict[str, int]:
    """The counts, result 0 first, of Felis's ``HISTOGRAM`` CSV (ValueError: unreadable)."""
    counts: dict[str, int] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        bits, count = row[0].strip(), int(row[1])
        if not bits or set(bits) - {"0", "1"} or count < 0:
            raise ValueError(f"a histogram row is not BITS,COUNT: {row!r}")
        counts[bits[::-1]] = counts.get(bits[::-1], 0) + count
    return counts
