"""A compile worker: a process of its own that compiles programs one at a time, under a
memory limit, for as long as its pool keeps it.

This module owns the worker's side of the pool's pipe (``python -m
flux_quantum.compiler.worker BYTES``): it limits its own address space to ``BYTES``
(``RLIMIT_AS``: a program that needs more fails with MemoryError, or the process dies,
and only this process), writes no core file, lowers its own priority (``NICENESS``),
imports Qiskit once, says ``ready``, then
answers each request line (JSON: ``text``, ``target``, ``form``, ``writer``) with one
line: ``{"compiled": ...}`` or ``{"error": SENTENCE, "unfit": BOOL}``. Its time limit
is the pool's: a worker that does not answer in time is killed. Nothing but answers is
written to the pipe (the process's own stdout goes to stderr).
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any, BinaryIO

# Compiling is batch work: a worker yields the CPU to the service, the broker and the
# jobs on its node, so that a burst of programs to compile (each taking a core for up to
# seconds) delays no other job's release (bench/compile.py, its release-lag arm).
NICENESS = 10
WARM_UP = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'


def serve(requests: BinaryIO, answers: BinaryIO, memory: int) -> int:
    """Answer ``requests`` on ``answers`` until the pipe closes (0) or memory ran out (1)."""
    from flux_quantum.compiler.compiled import Compiled
    from flux_quantum.compiler.errors import CompileError
    from flux_quantum.compiler.load import native_failure
    from flux_quantum.compiler.program import compile_program
    from flux_quantum.protocol.targets import DeviceTarget

    def answer(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message).encode() + b"\n")
        answers.flush()

    # Qiskit's imports and first transpile take a second: once, before ready.
    warm = DeviceTarget.build("warm-up", 2, ("cz", "rz", "sx", "x"), [(0, 1)])
    compile_program(WARM_UP, warm, "mapped")
    answer({"ready": True})
    for line in requests:
        try:
            request = json.loads(line)
            compiled: Compiled = compile_program(
                request["text"],
                DeviceTarget.from_dict(request["target"]),
                request.get("form") or "mapped",
                request.get("writer"),
            )
            answer({"compiled": compiled.to_dict()})
        except CompileError as exc:
            answer({"error": str(exc), "unfit": exc.unfit})
        except MemoryError:
            answer({"error": over_memory(memory), "unfit": False, "leaving": True})
            return 1  # the heap may be in any state: the pool starts another worker
        except RecursionError:
            answer({"error": "the program nests too deeply to be compiled", "unfit": False})
        except Exception as exc:  # the SDK's own failures: the program is what it failed on
            if native_failure(exc):
                # Native code (Qiskit's Rust) could not allocate: the memory limit.
                answer({"error": over_memory(memory), "unfit": False, "leaving": True})
                return 1
            detail = " ".join(str(exc).split()) or type(exc).__name__
            answer({"error": f"the compiler failed on the program: {detail}", "unfit": False})
    return 0


def over_memory(memory: int) -> str:
    return f"compiling the program needs more memory than the limit of {memory >> 20} MiB"


def main(argv: list[str]) -> int:
    memory = int(argv[1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.nice(NICENESS)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints of the SDK go to stderr, never into the pipe
    sys.stdout = sys.stderr
    sys.setrecursionlimit(10_000)
    return serve(sys.stdin.buffer, answers, memory)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
