"""What is read of a program before any parser sees it: the cheap refusals, and the
OpenQASM dialects brought to the standard library.

This module owns the checks that need no parser, made first in the compile worker: a
program holding NUL bytes (a binary file), an ``include`` other than the standard
libraries (``stdgates.inc``, OpenQASM 2's ``qelib1.inc``: built in, taken by name, never
opened; no other file a program names is ever read), and the qubits it declares
(``width``: registers and physical qubits ``$n``), so that a program wider than the
device is refused before it is parsed. ``normalised`` brings an OpenQASM 3 program
written for Amazon Braket (its built-in gate names ``cnot``, ``phaseshift`` ..., its
``#pragma`` lines, no include) to the standard library Qiskit's importer reads. It is
pure: standard library only, no I/O.
"""

from __future__ import annotations

import re

from flux_quantum.compiler.errors import CompileError

STANDARD_INCLUDES = ("stdgates.inc", "qelib1.inc")
_INCLUDE = re.compile(r'^\s*include\s+"([^"]*)"\s*;', re.M)
_VERSION = re.compile(r"^\s*OPENQASM\s+(\d+)(?:\.\d+)?\s*;", re.M)
_REGISTER = re.compile(
    r"^\s*(?:qubit\s*(?:\[\s*(\d+)\s*\])?\s+\w+|qreg\s+\w+\s*(?:\[\s*(\d+)\s*\])?)\s*;", re.M
)
_PHYSICAL = re.compile(r"\$(\d+)")
_PRAGMA = re.compile(r"^\s*#pragma\b.*$", re.M)
_DEFINED = re.compile(r"\bgate\s+([A-Za-z_]\w*)")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# Amazon Braket's built-in gates that the standard library names otherwise, as gates of
# the standard library (Braket's "Supported gates" table).
_BRAKET_NAMES: dict[str, str] = {
    "cnot": "gate cnot a, b { cx a, b; }",
    "ccnot": "gate ccnot a, b, c { ccx a, b, c; }",
    "i": "gate i a { id a; }",
    "v": "gate v a { sx a; }",
    "vi": "gate vi a { sxdg a; }",
    "si": "gate si a { sdg a; }",
    "ti": "gate ti a { tdg a; }",
    "phaseshift": "gate phaseshift(l) a { p(l) a; }",
    "cphaseshift": "gate cphaseshift(l) a, b { cp(l) a, b; }",
    "xx": "gate xx(t) a, b { rxx(t) a, b; }",
    "yy": "gate yy(t) a, b { ryy(t) a, b; }",
    "zz": "gate zz(t) a, b { rzz(t) a, b; }",
}


def version(text: str) -> int:
    """The OpenQASM major version the program declares (3 when it declares none)."""
    match = _VERSION.search(text)
    return int(match.group(1)) if match else 3


def width(text: str) -> int:
    """The qubits ``text`` declares: its registers summed, or the highest physical qubit
    ``$n`` it names plus one, whichever is more."""
    text = _COMMENT.sub("", text)
    declared = sum(int(a or b or 1) for a, b in _REGISTER.findall(text))
    physical = max((int(n) + 1 for n in _PHYSICAL.findall(text)), default=0)
    return max(declared, physical)


def screen(text: str, qubits: int | None = None, device: str = "the device") -> None:
    """Refuse, in one sentence, a program that holds NUL bytes, includes a file that is
    not a standard library, or (``qubits``) declares more qubits than ``device`` has."""
    if "\0" in text:
        raise CompileError("the program is not OpenQASM text: it holds NUL bytes")
    for name in _INCLUDE.findall(text):
        if name not in STANDARD_INCLUDES:
            raise CompileError(
                f'include "{name}" is not supported: a program may include only '
                f"{' or '.join(STANDARD_INCLUDES)}, which are built in"
            )
    if qubits is not None:
        declared = width(text)
        if declared > qubits:
            raise CompileError(
                f"the program declares {declared} qubits and {device} has {qubits}",
                unfit=True,
            )


def normalised(text: str) -> str:
    """An OpenQASM 3 program in the standard library's names: ``#pragma`` lines dropped
    (Braket's result types and verbatim marks: no other vendor reads them), the standard
    library included when it is not, and Braket's built-in names it uses but does not
    define given as the standard gates they are. OpenQASM 2 is returned as it is."""
    if version(text) == 2:
        return text
    body = _PRAGMA.sub("", text)
    bare = _COMMENT.sub("", body)
    defined = set(_DEFINED.findall(bare))
    used = {
        name
        for name in _BRAKET_NAMES
        if name not in defined
        and re.search(rf"(?:^|[;{{}}])\s*{name}(?:\s*\([^)]*\))?\s+[A-Za-z_$]", bare, re.M)
    }
    header = [] if "stdgates.inc" in _INCLUDE.findall(bare) else ['include "stdgates.inc";']
    header += [_BRAKET_NAMES[name] for name in sorted(used)]
    if not header:
        return body
    match = _VERSION.search(body)
    at = match.end() if match else 0
    # On the version's own line: the program's line numbers stay those the user wrote.
    return body[:at] + " " + " ".join(header) + body[at:]
