"""The worker processes where the emulator's simulations run, bounded in time and memory.

This module owns the emulator's simulation processes (``SimulationPool``): up to
``workers`` long-lived ``simulation_worker`` processes, started when first needed, each
answering one job at a time over its pipes; a caller's job goes to an idle worker (or
waits for one), and its answer comes back, or a ``SimulationFailed`` saying why not: the
job's own error, the worker's time limit (the worker is killed and replaced), or the
worker's death (a signal, the memory limit). The Braket local simulator forces numba's
``workqueue`` threading layer, which aborts a process that two threads simulate in at
once: in a worker that is one job at a time, and a worker lost is a failed job, never a
lost emulator. The process-wide pool (``shared_pool()``) is shared by every emulator of
the process (a worker costs seconds of imports), and its workers end with the process
(their stdin closes). It must never run a job in the caller's process, never give one
worker two jobs at once, and never wait for a worker past a job's time limit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Defaults of the shared pool: two workers (the machine's cores are shared with the
# clients the emulator serves), 4 GiB of address space each (a 17-qubit density matrix
# needs 256 GiB: such a program fails its task, not the machine), 600 s a job.
WORKERS = 2
MEMORY = 4 << 30
JOB_SECONDS = 600.0
# A worker imports the Braket simulator (seconds, more on a loaded machine) before it
# says it is ready.
START_SECONDS = 180.0


class SimulationFailed(Exception):
    """A job did not run to its answer; the message says why, fit for a task's failure."""


class _Worker:
    """One worker process and the buffer of what it wrote but was not read yet."""

    def __init__(self, memory: int) -> None:
        command = [sys.executable, "-m", "flux_quantum.emulator.simulation_worker"]
        # The worker imports flux_quantum from where this process did (a test may have
        # put it on sys.path by hand).
        home = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=home + (os.pathsep + path if path else ""))
        self.process = subprocess.Popen(
            [*command, "--memory", str(memory)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buffer = b""
        self.ready = False  # it has said so (its first line)

    def read_line(self, deadline: float) -> bytes | None:
        """The worker's next line, or None: it closed its pipe before one (died), or the
        deadline passed."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def send(self, job: dict[str, Any]) -> bool:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(job).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def death(self) -> str:
        """Why the worker is gone, in words (it is killed first if it still runs)."""
        self.kill()
        code = self.process.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the emulator's simulation worker died ({name})"
        return f"the emulator's simulation worker exited (status {code})"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class SimulationPool:
    """Jobs answered by up to ``workers`` worker processes, from any number of threads."""

    def __init__(
        self,
        workers: int = WORKERS,
        memory: int = MEMORY,
        job_seconds: float = JOB_SECONDS,
    ) -> None:
        if workers < 1:
            raise ValueError("a simulation pool needs at least one worker")
        self.workers = workers
        self.memory = memory
        self.job_seconds = job_seconds
        self._changed = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0  # workers alive or starting
        self._closed = False
        # For the report and the benchmarks: jobs answered, failed, workers lost.
        self.stats = {"jobs": 0, "failed": 0, "workers_started": 0, "workers_lost": 0}

    def run(self, job: dict[str, Any], seconds: float | None = None) -> Any:
        """The answer of ``job`` (``{"op": ...}``, see ``simulation_worker``), or
        SimulationFailed; waits for an idle worker first."""
        worker = self._acquire()
        limit = self.job_seconds if seconds is None else seconds
        try:
            reply = self._call(worker, job, limit)
        except SimulationFailed:
            self._lose(worker)
            raise
        self._release(worker)
        with self._changed:
            self.stats["jobs"] += 1
            if "error" in reply:
                self.stats["failed"] += 1
        if "error" in reply:
            raise SimulationFailed(str(reply["error"]))
        return reply.get("ok")

    def _call(self, worker: _Worker, job: dict[str, Any], limit: float) -> dict[str, Any]:
        if not worker.ready:
            self._confirm(worker)
        if not worker.send(job):
            raise SimulationFailed(worker.death())
        line = worker.read_line(time.monotonic() + limit)
        if line is None:
            if worker.process.poll() is None:
                worker.kill()
                raise SimulationFailed(
                    f"the simulation ran longer than the emulator's limit of {limit:g} s"
                )
            raise SimulationFailed(worker.death())
        try:
            reply = json.loads(line)
        except ValueError:
            raise SimulationFailed(worker.death()) from None
        return reply if isinstance(reply, dict) else {"error": "the worker's answer is no object"}

    # -- the workers ------------------------------------------------------------------------

    def _acquire(self) -> _Worker:
        with self._changed:
            while True:
                if self._closed:
                    raise SimulationFailed("the emulator's simulation pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.workers:
                    self._count += 1
                    break
                self._changed.wait()
        try:
            return self._start()
        except BaseException:
            with self._changed:
                self._count -= 1
                self._changed.notify()
            raise

    def _start(self) -> _Worker:
        """A new worker, once it says it is ready (SimulationFailed if it does not)."""
        worker = _Worker(self.memory)
        try:
            self._confirm(worker)
        except SimulationFailed:
            worker.kill()
            raise
        return worker

    def _confirm(self, worker: _Worker) -> None:
        """Wait for a starting worker to say it is ready (SimulationFailed if it does not)."""
        line = worker.read_line(time.monotonic() + START_SECONDS)
        if line is None:
            raise SimulationFailed(f"could not start a simulation worker: {worker.death()}")
        worker.ready = True
        with self._changed:
            self.stats["workers_started"] += 1

    def prestart(self, count: int = 1) -> None:
        """Have ``count`` workers started and ready (the first emulator of a process waits
        for a worker's imports once, so that no client's first result waits for them
        past its read timeout; later ones find it ready)."""
        with self._changed:
            missing = 0 if self._closed else max(0, min(count, self.workers) - self._count)
            self._count += missing
            starting = [w for w in self._idle if not w.ready]
        started = []
        try:
            for _ in range(missing):
                started.append(_Worker(self.memory))
        finally:
            with self._changed:
                self._count -= missing - len(started)
                self._idle.extend(started)
                self._changed.notify_all()
        for worker in [*starting, *started]:
            with contextlib.suppress(SimulationFailed):  # a job will say why, if it must
                self._confirm_idle(worker)

    def _confirm_idle(self, worker: _Worker) -> None:
        """Confirm an idle worker ready, unless a job took it meanwhile (then the job does)."""
        with self._changed:
            if worker not in self._idle or worker.ready:
                return
            self._idle.remove(worker)
        try:
            self._confirm(worker)
        except SimulationFailed:
            self._lose(worker)
            raise
        self._release(worker)

    def _release(self, worker: _Worker) -> None:
        with self._changed:
            if self._closed:
                self._count -= 1
                worker.kill()
            else:
                self._idle.append(worker)
            self._changed.notify()

    def _lose(self, worker: _Worker) -> None:
        worker.kill()
        with self._changed:
            self._count -= 1
            self.stats["workers_lost"] += 1
            self._changed.notify()

    def pids(self) -> list[int]:
        """The idle workers' process ids (for tests)."""
        with self._changed:
            return [w.process.pid for w in self._idle]

    def close(self) -> None:
        """Stop the idle workers; busy ones stop when their job ends. Safe to call twice."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._changed.notify_all()
        for worker in idle:
            worker.kill()


_SHARED: SimulationPool | None = None
_SHARED_LOCK = threading.Lock()


def shared_pool() -> SimulationPool:
    """The process's pool (started on first use, closed when the process exits)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = SimulationPool()
            atexit.register(_SHARED.close)
        return _SHARED
