"""The simulations of the Braket side's quantum tasks, run after the create has been answered.

This module owns each task's simulation from its start to its outcome: the create hands
over a checked program (``start``), which runs in the process's simulation workers
(``simulation_pool``) from a few threads of its own while the task waits in its
device's queue, as the service answers the create before it simulates; its outcome is
the task's result document or the message its task fails with. A reader that needs a
task's outcome waits for it outside the side's lock (``wait``) and then takes what has
finished (``finished``). It must never simulate in the emulator's process, never hold
the side's lock while it waits, and never leave its threads running after ``close``.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from typing import Any

from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.simulation_pool import JOB_SECONDS, shared_pool

# A reader gives up on an outcome after the pool's own limit has surely passed.
_WAIT_SECONDS = JOB_SECONDS + 60.0


class Simulations:
    """Every task's simulation, by task ARN, from any number of threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._futures: dict[str, concurrent.futures.Future[dict[str, Any]]] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._failures: dict[str, str] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def start(self, arn: str, run: Callable[[], dict[str, Any]]) -> None:
        """Run ``run`` (which simulates in a worker) for task ``arn``."""
        with self._guard:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=shared_pool().workers, thread_name_prefix="braket-simulation"
                )
            self._futures[arn] = self._executor.submit(run)

    def pending(self) -> list[str]:
        """The tasks whose outcome has not been taken yet."""
        with self._guard:
            return list(self._futures)

    def wait(self, arns: Iterable[str]) -> None:
        """Wait until the simulations of ``arns`` have ended (never with the side's lock)."""
        with self._guard:
            futures = [self._futures[a] for a in arns if a in self._futures]
        if futures:
            concurrent.futures.wait(futures, timeout=_WAIT_SECONDS)

    def finished(self) -> list[tuple[str, str | None]]:
        """Take the outcomes that have come in: (task ARN, the failure or None)."""
        taken = []
        with self._guard:
            for arn, future in list(self._futures.items()):
                if not future.done():
                    continue
                del self._futures[arn]
                failure = _failure(future)
                if failure is None:
                    self._results[arn] = future.result()
                else:
                    self._failures[arn] = failure
                taken.append((arn, failure))
        return taken

    def result(self, arn: str) -> dict[str, Any] | None:
        """The task's result document (None: not simulated yet, or it failed)."""
        with self._guard:
            return self._results.get(arn)

    def failure(self, arn: str) -> str | None:
        """Why the task's simulation failed (None: it did not, or not yet)."""
        with self._guard:
            return self._failures.get(arn)

    def close(self) -> None:
        """Drop the simulations not started; those running end with their job (a task
        created later starts the threads again)."""
        with self._guard:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def _failure(future: concurrent.futures.Future[dict[str, Any]]) -> str | None:
    if future.cancelled():
        return "the emulator stopped before the task was simulated"
    error = future.exception()
    if error is None:
        return None
    if isinstance(error, ProgramError):
        return str(error)
    return f"the emulator could not simulate the task: {error!r}"
