"""Worker threads for the service's blocking calls (vendor I/O, program files).

``VendorWorkers`` runs calls in daemon threads and hands each result back to the reactor
thread through a pipe the reactor watches (``fileno()``, then ``drain()``); its ``lane``
gives one kind of long call (compiling) threads and a queue of their own, answered the
same way, so that a burst of them never holds a vendor call back. ``Workers`` is the
shape the service relies on, so the unit tier can run the same calls inline. A worker
never touches a Flux handle or the service's state: it only runs the call it was given.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

Done = Callable[[Any, BaseException | None], None]


class Workers(Protocol):
    """Where the service sends blocking calls; ``done`` runs later on the reactor."""

    busy: int
    queued: int

    def submit(self, call: Callable[[], Any], done: Done) -> None: ...

    def drain(self) -> list[tuple[Done, Any, BaseException | None]]: ...

    def stop(self) -> None: ...


Submit = Callable[[Callable[[], Any], Done], None]


class _Threads:
    """Daemon threads serving one queue of calls; each answer goes to ``deliver``."""

    def __init__(
        self,
        count: int,
        name: str,
        deliver: Callable[[Done, Any, BaseException | None], None],
        stopped: threading.Event,
    ) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._deliver = deliver
        self._stopped = stopped
        self._lock = threading.Lock()
        self.busy = 0
        self.queued = 0
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[], Any], done: Done) -> None:
        with self._lock:
            self.queued += 1
        self._calls.put((call, done))

    def _run(self) -> None:
        while not self._stopped.is_set():
            item = self._calls.get()
            if item is None:
                return
            call, done = item
            with self._lock:
                self.queued -= 1
                self.busy += 1
            try:
                result, error = call(), None
            except BaseException as exc:  # handed to the reactor, which decides
                result, error = None, exc
            with self._lock:
                self.busy -= 1
            if self._stopped.is_set():
                return
            self._deliver(done, result, error)

    def _end(self) -> None:
        for _ in self._threads:
            self._calls.put(None)


class Lane(_Threads):
    """Threads of their own for one kind of long call (the compile stage's), answered
    through the ``VendorWorkers`` that made it (``lane``): such a call never waits
    behind vendor calls, and a burst of them never holds a vendor call (a poll, a
    create) back. Stopped with its ``VendorWorkers``."""


class VendorWorkers(_Threads):
    """Daemon threads for blocking calls; results come back on the reactor thread.

    ``submit(call, done)`` runs ``call()`` in a worker; ``done(result, error)`` runs
    later inside ``drain()``, which the host calls from the reactor when ``fileno()``
    is readable. Daemon threads: a call stuck in a vendor socket never blocks exit.
    ``lane(count, name)`` adds threads with a queue of their own, answered the same way.
    """

    def __init__(self, count: int) -> None:
        self._done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lanes: list[Lane] = []
        super().__init__(count, "qpu-worker", self._put, threading.Event())

    def fileno(self) -> int:
        return self._read

    def lane(self, count: int, name: str) -> Lane:
        """``count`` more threads with a queue of their own, for calls that may take
        long (compiling); their answers come back through ``drain`` as any."""
        lane = Lane(count, name, self._put, self._stopped)
        self._lanes.append(lane)
        return lane

    def _put(self, done: Done, result: Any, error: BaseException | None) -> None:
        self._done.put((done, result, error))
        # A full pipe means the reactor is already woken.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write, b"\0")

    def drain(self) -> list[tuple[Done, Any, BaseException | None]]:
        """Completed calls, oldest first (reactor thread)."""
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._stopped.set()
        for threads in (self, *self._lanes):
            threads._end()
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
