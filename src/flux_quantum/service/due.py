"""What is due when: the queue that drives the service's steps.

Every tracked attempt that is not waiting for a worker has a time its next step is due
(``Attempt.due``: a poll, a retry, a create after a selection). ``DueQueue`` keeps them
in a heap ordered by that time. An entry remembers the attempt and the due time it was
queued for; when an attempt's due time changes it is simply queued again, and an entry
that no longer matches its program's current attempt, its due time or an active unit is
dropped when it comes up (nothing is searched or removed in between). The service
queues an attempt after each step and each completed call, and queues every attempt
afresh at each full pass (``reset``), so an attempt whose due time another part changed
is found there at the latest. An attempt that found nothing to start when it was due
(a batch's program waiting for the one before it) is queued again ``retry_after``
seconds later, never at once: the service must not spin on it. It never steps anything
itself and never reads a clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable

from flux_quantum.service.state import Attempt, Program, Unit


class DueQueue:
    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        self._heap: list[tuple[float, int, float, Unit, Program, Attempt]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, unit: Unit, program: Program, now: float | None = None) -> None:
        """Queue the program's attempt for its due time (``now`` given: an attempt due
        already that was just stepped without starting anything comes up again only
        ``retry_after`` later). Busy attempts and inactive units are not queued: their
        completion queues them again."""
        attempt = program.attempt
        if attempt.busy or not unit.active:
            return
        at = attempt.due
        if now is not None and at <= now:
            at = now + self.retry_after
        heapq.heappush(self._heap, (at, next(self._seq), attempt.due, unit, program, attempt))

    def reset(self, entries: Iterable[tuple[Unit, Program]]) -> None:
        """Forget every entry and queue ``entries`` afresh (a full pass)."""
        self._heap = []
        for unit, program in entries:
            attempt = program.attempt
            if attempt.busy or not unit.active:
                continue
            self._heap.append((attempt.due, next(self._seq), attempt.due, unit, program, attempt))
        heapq.heapify(self._heap)

    def pop_due(self, now: float) -> list[tuple[Unit, Program]]:
        """The attempts due at ``now``, each once, oldest due first; stale entries go."""
        out: list[tuple[Unit, Program]] = []
        seen: set[int] = set()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, due, unit, program, attempt = heapq.heappop(heap)
            if (
                program.attempt is not attempt
                or attempt.due != due
                or attempt.busy
                or not unit.active
                or id(program) in seen
            ):
                continue
            seen.add(id(program))
            out.append((unit, program))
        return out

    def next_due(self) -> float:
        """When the first queued entry comes up (stale ones included: waking for one
        costs a look), or infinity."""
        return self._heap[0][0] if self._heap else math.inf
