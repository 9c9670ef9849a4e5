"""The compile workers a service keeps, and the one call that compiles through them.

``CompilePool`` owns up to ``CompileLimits.workers`` worker processes (``worker``),
started when first needed (or by ``warm``) and kept: each imported Qiskit once and
keeps its cache of targets. ``compile`` hands one program to an idle worker and waits
for its answer at most ``timeout`` seconds; a worker that does not answer in time is
killed, and one that died (over its memory limit) is replaced, the program failing
with one sentence either way. It blocks only the thread that calls it (the service's
vendor workers call it), never the service's loop. No worker outlives ``close``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

from flux_quantum.compiler.compiled import Compiled
from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.limits import CompileLimits
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.compiler.worker import over_memory

STARTUP_SECONDS = 120.0  # importing Qiskit on a loaded machine


class _Stopped(Exception):
    """The worker is gone (killed, out of memory) or did not answer in time."""


class _Worker:
    def __init__(self, memory: int) -> None:
        env = {**os.environ, "RAYON_NUM_THREADS": "1", "QISKIT_PARALLEL": "FALSE"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flux_quantum.compiler.worker", str(memory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
            env=env,
        )
        self._buffer = b""
        self.ready = False

    def read(self, deadline: float) -> dict[str, Any]:
        """The next answer line, by the monotonic ``deadline``."""
        out = self.process.stdout
        assert out is not None
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Stopped("timeout")
            readable, _, _ = select.select([out], [], [], left)
            if not readable:
                continue
            chunk = os.read(out.fileno(), 1 << 16)
            if not chunk:
                raise _Stopped("died")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def start(self) -> None:
        if not self.ready:
            self.read(time.monotonic() + STARTUP_SECONDS)
            self.ready = True

    def ask(self, request: dict[str, Any], seconds: float) -> dict[str, Any]:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError:
            raise _Stopped("died") from None
        return self.read(time.monotonic() + seconds)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


class CompilePool:
    def __init__(self, limits: CompileLimits | None = None) -> None:
        self.limits = limits or CompileLimits()
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.limits.workers)
        self._closed = False

    def warm(self) -> None:
        """Start every worker now (their Qiskit imports, side by side), so that no job
        waits for one."""
        starting = []
        for _ in range(self.limits.workers):
            if not self._slots.acquire(blocking=False):
                break
            starting.append(self._take())
        for worker in starting:
            try:
                worker.start()
            except _Stopped:
                worker.stop()
            else:
                self._give(worker)
            finally:
                self._slots.release()

    def compile(
        self, text: str, target: DeviceTarget, form: str, writer: str | None = None
    ) -> Compiled:
        """``text`` compiled for ``target`` in ``form`` by a worker; CompileError says
        why not (the program's fault, a device that cannot take it, or a limit)."""
        request = {"text": text, "target": target.to_dict(), "form": form, "writer": writer}
        seconds = self.limits.timeout
        with self._slots:
            worker = self._take()
            try:
                worker.start()
                answer = worker.ask(request, seconds)
            except _Stopped as stopped:
                worker.stop()
                if stopped.args[0] == "timeout":
                    raise CompileError(
                        f"compiling the program for {target.device} took longer than the "
                        f"limit of {seconds:g} s"
                    ) from None
                raise CompileError(
                    f"the compiler stopped on the program for {target.device}: "
                    f"{over_memory(self.limits.memory_bytes)}"
                ) from None
            if "compiled" in answer:
                self._give(worker)
                return Compiled.from_dict(answer["compiled"])
            if worker.process.poll() is None:
                self._give(worker)
            else:
                worker.stop()
            raise CompileError(str(answer.get("error")), unfit=bool(answer.get("unfit")))

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise CompileError("the compile stage is stopping")
            if self._idle:
                return self._idle.pop()
        return _Worker(self.limits.memory_bytes)

    def _give(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        worker.stop()

    def close(self) -> None:
        """Stop every idle worker; one busy now stops when its call ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()
