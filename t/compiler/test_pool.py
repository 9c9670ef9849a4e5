"""Compile workers: answers through the pipe, the time limit, the memory limit, and
the service's other callers served meanwhile."""

from __future__ import annotations

import os
import threading
import time

import pytest

from flux_quantum.compiler import CompileError, CompileLimits, CompilePool, DeviceTarget
from flux_quantum.compiler.worker import NICENESS
from flux_quantum.emulator import topology

BELL = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
FEZ = DeviceTarget.build("fez", 156, ("cz", "id", "rz", "sx", "x"), topology.heavy_hex(156))


def big(qubits: int = 120, layers: int = 40) -> str:
    body = "".join(
        f"cx q[{i}], q[{(i * 37 + layer + 1) % qubits}];\n"
        for layer in range(layers)
        for i in range(qubits)
        if i != (i * 37 + layer + 1) % qubits
    )
    return f'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[{qubits}] q;\n{body}'


def test_a_worker_compiles_and_is_kept():
    pool = CompilePool(CompileLimits(workers=1))
    try:
        first = pool.compile(BELL, FEZ, "mapped")
        again = pool.compile(BELL, FEZ, "mapped")
        assert first.text == again.text and first.layout == again.layout
        with pytest.raises(CompileError, match="NUL bytes"):
            pool.compile("OPENQASM 3.0;\0", FEZ, "mapped")
        assert pool.compile(BELL, FEZ, "mapped").text == first.text  # the same worker goes on
    finally:
        pool.close()


def test_a_worker_runs_at_a_lower_priority_than_its_service():
    # The service's reactor, the broker and the jobs go first when a burst compiles.
    pool = CompilePool(CompileLimits(workers=1))
    try:
        pool.warm()
        (worker,) = pool._idle
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, worker.process.pid) == min(19, mine + NICENESS)
        assert pool.compile(BELL, FEZ, "checked").text == BELL
    finally:
        pool.close()


def test_the_time_limit_kills_the_worker_and_the_next_program_compiles():
    pool = CompilePool(CompileLimits(timeout=0.2, workers=1))
    try:
        pool.warm()
        start = time.monotonic()
        with pytest.raises(CompileError, match="took longer than the limit of 0.2 s"):
            pool.compile(big(), FEZ, "mapped")
        assert time.monotonic() - start < 5
        assert pool.compile(BELL, FEZ, "checked").text == BELL
    finally:
        pool.close()


def test_the_memory_limit_fails_the_program_not_the_pool():
    # A worker takes about 1.5 GiB of address space once warm; this program's gate
    # definitions double 26 times: 2**27 operations once read.
    doubling = "gate a0 q { h q; t q; }\n" + "".join(
        f"gate a{k} q {{ a{k - 1} q; a{k - 1} q; }}\n" for k in range(1, 27)
    )
    program = f'OPENQASM 3.0;\ninclude "stdgates.inc";\n{doubling}qubit q;\na26 q;\n'
    pool = CompilePool(CompileLimits(timeout=120, memory_mb=2048, workers=1))
    try:
        with pytest.raises(CompileError, match="more memory than the limit of 2048 MiB"):
            pool.compile(program, FEZ, "mapped")
        assert pool.compile(BELL, FEZ, "checked").text == BELL
    finally:
        pool.close()


def test_one_slow_program_does_not_hold_another_callers():
    pool = CompilePool(CompileLimits(timeout=30, workers=2))
    try:
        pool.warm()
        answers: list[object] = []

        def compile_slowly() -> None:
            try:
                answers.append(pool.compile(big(80, 10), FEZ, "mapped"))
            except CompileError as exc:
                answers.append(exc)

        slow = threading.Thread(target=compile_slowly)
        slow.start()
        start = time.monotonic()
        pool.compile(BELL, FEZ, "checked")
        quick = time.monotonic() - start
        slow.join()
        assert quick < 10 and len(answers) == 1
    finally:
        pool.close()
