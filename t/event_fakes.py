"""A fake vendor event feed for the service's unit tier: the scripted vendor's task state
changes, published as a site's queue would deliver them, with the faults a test asks for.

``EventFeed`` is an ``EventSource`` on the manual clock: each ``receive`` publishes the
state changes of the ``ScriptedVendor``'s tasks since the last one (as Braket's events
would come), plus whatever a test ``inject``s (another account's task, a forged event),
minus what it ``lose``s, and twice what it ``duplicate``s; ``failing`` makes reads raise
(the queue is gone); ``quiet`` makes it deliver nothing (a broken rule). Every receive
and every acknowledgement is recorded. ``EventedVendor`` is the scripted vendor with such
a feed; ``evented_harness`` is a ``Harness`` around one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from service_fakes import FAST, Clock, FakeFlux, Harness, QueueModel, ScriptedVendor

from flux_quantum.service import ServiceOptions
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.task_events import DeviceEvent, EventBatch, TaskEvent

# The Harness's own queues (alpha: 3 tasks ahead of each new task, 10 s each, ...).
QUEUES = {
    "alpha": QueueModel(3),
    "beta": QueueModel(5),
    "solo": QueueModel(1),
    "sim": QueueModel(0, service=1.0),
    "fez": QueueModel(3),
}


class EventFeed:
    """The scripted vendor's state changes as a queue of events (an ``EventSource``)."""

    name = "fake events queue"

    def __init__(
        self, vendor: ScriptedVendor, *, safety_poll: float = 60.0, silence: float = 900.0
    ) -> None:
        self.vendor = vendor
        self.safety_poll = safety_poll
        self.silence = silence
        self._ids = itertools.count(1)
        self._published: set[tuple[str, TaskState]] = set()
        self.pending: list[TaskEvent | DeviceEvent] = []
        self.lose: Callable[[TaskEvent], bool] = lambda event: False
        self.duplicate: Callable[[TaskEvent], bool] = lambda event: False
        self.failing: BaseException | None = None
        self.quiet = False
        self.receives = 0
        self.acknowledged: list[str] = []
        self.delivered: list[TaskEvent | DeviceEvent] = []
        self.lost: list[TaskEvent] = []

    def event_id(self) -> str:
        return f"event-{next(self._ids)}"

    def inject(self, event: TaskEvent | DeviceEvent) -> None:
        """Deliver ``event`` at the next receive, as it is (a forged one too)."""
        self.pending.append(event)

    def publish(self) -> None:
        """Queue every state change of the vendor's tasks not queued yet."""
        for task_id, fake in self.vendor.tasks.items():
            state, _ = self.vendor.state_of(fake)
            if (task_id, state) in self._published:
                continue
            self._published.add((task_id, state))
            event = TaskEvent(self.event_id(), task_id, state, fake.ref.device, self.vendor.clock())
            if self.lose(event):
                self.lost.append(event)
                continue
            self.pending.append(event)
            if self.duplicate(event):
                self.pending.append(event)

    def receive(self, acknowledge: Sequence[str] = ()) -> EventBatch:
        self.receives += 1
        self.acknowledged.extend(acknowledge)
        if self.failing is not None:
            raise self.failing
        if self.quiet:
            return EventBatch()
        self.publish()
        out, self.pending = self.pending, []
        self.delivered.extend(out)
        return EventBatch(
            tasks=tuple(e for e in out if isinstance(e, TaskEvent)),
            devices=tuple(e for e in out if isinstance(e, DeviceEvent)),
            receipts=tuple(f"receipt-{e.event_id}-{i}" for i, e in enumerate(out)),
        )


class EventedVendor(ScriptedVendor):
    """The scripted vendor, its state changes also published on ``feed``."""

    def __init__(
        self, clock: Clock, queues: Mapping[str, QueueModel], journal: list, **feed: Any
    ) -> None:
        super().__init__(clock, queues, journal)
        self.feed = EventFeed(self, **feed)

    def event_source(self) -> EventFeed:
        return self.feed


def evented_harness(
    queues: Mapping[str, QueueModel] | None = None,
    options: ServiceOptions = FAST,
    **feed: Any,
) -> Harness:
    """A Harness whose ``local`` vendor has an event feed (``h.vendor.feed``)."""
    clock = Clock()
    flux = FakeFlux(clock)
    vendor = EventedVendor(clock, {**QUEUES, **(queues or {})}, flux.journal, **feed)
    return Harness(options=options, flux=flux, vendor=vendor, clock=clock)
