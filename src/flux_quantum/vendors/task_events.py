"""What a vendor's event feed delivers: task and device state changes, read, never trusted.

A vendor that publishes its tasks' state changes (Amazon Braket's "Braket Task State
Change" events, routed by the site to a queue it owns) gives the service an
``EventSource`` (``Vendor.event_source``). This module owns the vendor-neutral shapes of
what such a source delivers: ``TaskEvent`` (a task's new state), ``DeviceEvent`` (a
device's new status) and ``EventBatch`` (one read of the feed, with the receipts that
acknowledge it), the ``EventSource`` protocol itself, and the order task states move in
(``state_rank``: an event that does not move a task forward is stale). An event is a
hint to look again, not the truth: the service confirms it with the vendor before it
acts. This module never reads a feed, never calls a vendor and keeps no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from flux_quantum.vendors.task_state import TaskState

# How far along a task is: a state change moves it up, never down. The three ends are
# one rank: once ended, no event moves a task anywhere.
_RANKS = {
    TaskState.CREATED: 0,
    TaskState.QUEUED: 1,
    TaskState.RUNNING: 2,
    TaskState.CANCELLING: 3,
    TaskState.COMPLETED: 4,
    TaskState.FAILED: 4,
    TaskState.CANCELLED: 4,
}


def state_rank(state: TaskState) -> int:
    """How far along ``state`` is (CREATED 0 ... ended 4)."""
    return _RANKS[state]


@dataclass(frozen=True)
class TaskEvent:
    """A vendor said task ``task_id`` (on device ``device_id``) moved to ``state`` at
    ``t`` (epoch seconds, None when it did not say). ``event_id`` is the vendor's id of
    the event: a copy delivered twice has the same one."""

    event_id: str
    task_id: str
    state: TaskState
    device_id: str | None = None
    t: float | None = None


@dataclass(frozen=True)
class DeviceEvent:
    """A vendor said device ``device_id`` is now ``status`` (its own word for it)."""

    event_id: str
    device_id: str
    status: str
    t: float | None = None


@dataclass(frozen=True)
class EventBatch:
    """One read of a feed: the task and device events it held, the receipts that
    acknowledge them (handed back to the next ``receive``), how many of its messages
    were not events this reader knows (``unreadable``) and how many receipts of the
    previous read the feed would not take (``unacknowledged``: their messages come
    again, harmlessly)."""

    tasks: tuple[TaskEvent, ...] = ()
    devices: tuple[DeviceEvent, ...] = ()
    receipts: tuple[str, ...] = ()
    unreadable: int = 0
    unacknowledged: int = 0

    @property
    def messages(self) -> int:
        """Messages read: every receipt is one."""
        return len(self.receipts)


class EventSource(Protocol):
    """A vendor's feed of state changes, read by one caller at a time.

    ``receive`` first acknowledges the receipts of the previous batch (its messages are
    gone for good once handled), then waits up to the source's own bound for new ones;
    it raises ``VendorError`` when the feed cannot be read (``NotFound``: it is gone).
    ``safety_poll``: seconds between polls of a task while the feed is heard;
    ``silence``: seconds without a message, while tasks are live, after which the feed
    counts as lost. ``name`` says which feed it is, for messages."""

    @property
    def name(self) -> str: ...

    @property
    def safety_poll(self) -> float: ...

    @property
    def silence(self) -> float: ...

    def receive(self, acknowledge: Sequence[str] = ()) -> EventBatch: ...
