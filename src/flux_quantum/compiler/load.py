"""A program's text read into a Qiskit circuit by a real OpenQASM parser.

This module owns which parser reads which program: OpenQASM 2 with Qiskit's
``qiskit.qasm2`` (``qelib1.inc`` built in, the legacy gates Qiskit's exporter writes,
no include path: nothing is read from the file system), OpenQASM 3 with
``qiskit.qasm3`` (the ``qiskit-qasm3-import`` package; ``stdgates.inc`` built in, any
other include refused by the importer and, before it, by ``screen``). A program the
parser refuses is one ``CompileError`` naming the parser's reason. Runs in a compile
worker: the parser may take a hostile program's time and memory there.
"""

from __future__ import annotations

import re
from typing import Any

from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.screen import normalised, version

_POSITION = re.compile(r"^(\d+),\d+: ")
_UNDEFINED = re.compile(r"gate '(\w+)' is not defined")
# What CPython and PyO3 raise (SystemError) when native code failed without a Python
# exception: under the worker's address-space limit, an allocation that failed below
# Python (both seen when a program's gate definitions double past the limit), so the
# memory limit's.
NATIVE_FAILED = (
    "attempted to fetch exception but none was set",
    "error return without exception set",
)


def native_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is native code failing without an exception (``NATIVE_FAILED``)."""
    return isinstance(exc, SystemError) and any(m in str(exc) for m in NATIVE_FAILED)


class Unread(CompileError):
    """Qiskit's parsers do not read the program (a gate or a feature they do not know):
    a vendor that reads its own dialect (Braket's ``iswap``, its verbatim boxes) may."""


def load(text: str) -> Any:
    """The ``QuantumCircuit`` of the OpenQASM program ``text``."""
    import qiskit.qasm2
    import qiskit.qasm3

    major = version(text)
    try:
        if major == 2:
            return qiskit.qasm2.loads(
                text,
                include_path=(),
                custom_instructions=qiskit.qasm2.LEGACY_CUSTOM_INSTRUCTIONS,
            )
        if major != 3:
            raise CompileError(f"OPENQASM {major} is not a version this site reads (2 or 3)")
        return qiskit.qasm3.loads(normalised(text))
    except (CompileError, MemoryError):
        raise
    except SystemError as exc:
        if native_failure(exc):
            raise MemoryError(str(exc)) from None
        raise
    except RecursionError:
        raise CompileError("the program nests too deeply to be read") from None
    except Exception as exc:  # the parsers' errors have no common base worth naming
        detail = " ".join(str(exc).split()).strip("'\"") or type(exc).__name__
        detail = _POSITION.sub(r"line \1: ", detail)
        undefined = _UNDEFINED.search(detail)
        if undefined and re.search(rf"\bgate\s+{re.escape(undefined.group(1))}\b", text):
            raise CompileError(
                f"gate {undefined.group(1)} is defined in terms of itself: a gate's body may "
                "only call gates defined before it"
            ) from None
        raise Unread(f"the program is not valid OpenQASM {major}: {detail}") from None
