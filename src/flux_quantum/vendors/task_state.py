"""A vendor task's state, the same for every vendor: ``TaskState``.

This module owns the states a task moves through (Braket's names: CREATED, QUEUED,
RUNNING, CANCELLING and the three ends) and which of them are ends. ``base`` hands it on
with the records that carry it; ``task_events`` orders it. It holds no state and calls
nothing.
"""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    CREATED = "CREATED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED)
