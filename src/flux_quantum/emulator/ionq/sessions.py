"""IonQ sessions as the emulator keeps them: one backend, and the limits IonQ enforces.

This module owns an ``IonqSession`` (its backend, its settings as created: job count,
cost in US dollars, duration in minutes; its jobs and what they cost) and the one rule a
job's create passes through (``admit``): a session that has ended, is on another
backend, has run its job count, or whose cost limit the job would exceed refuses the job
with IonQ's 400 and one sentence naming the limit. It must never hold a lock or read a
clock: the service passes ``now`` (emulated seconds) and holds its own lock.

Assumed (IonQ documents the limits, not the refusal): a job over a limit is refused at
its create with ``400 Bad Request`` and IonQ's error body, and nothing is created; a
session's cost counts every job in it that was not canceled before it ran or failed
(those IonQ does not bill).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator.ionq.wire import IonqRefusal


@dataclass
class IonqSession:
    """One session: created on ``backend`` at ``created_t`` with its limits."""

    id: str
    backend: str
    created_t: float
    job_count_limit: int | None = None
    cost_limit: float | None = None
    cost_unit: str = "usd"
    duration_limit_min: int | None = None
    ended_t: float | None = None
    jobs: dict[str, float] = field(default_factory=dict)  # job id -> its cost

    @classmethod
    def create(cls, session_id: str, backend: str, now: float, settings: Any) -> IonqSession:
        """A session from a create's ``settings`` (IonQ's 400 for a bad one)."""
        settings = settings or {}
        if not isinstance(settings, Mapping):
            raise IonqRefusal(400, "settings must be an object")
        count = settings.get("job_count_limit")
        duration = settings.get("duration_limit_min")
        for name, bound in (("job_count_limit", count), ("duration_limit_min", duration)):
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 1
            ):
                raise IonqRefusal(400, f"settings.{name} must be an integer >= 1")
        limit = settings.get("cost_limit")
        cost: float | None = None
        if limit is not None:
            value = limit.get("value") if isinstance(limit, Mapping) else None
            unit = limit.get("unit", "usd") if isinstance(limit, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise IonqRefusal(400, "settings.cost_limit.value must be a number > 0")
            if unit != "usd":
                raise IonqRefusal(400, "settings.cost_limit.unit must be usd")
            cost = float(value)
        return cls(session_id, backend, now, count, cost, "usd", duration)

    def ended(self, now: float) -> bool:
        if self.ended_t is not None and self.ended_t <= now:
            return True
        limit = self.duration_limit_min
        return limit is not None and now >= self.created_t + 60.0 * limit

    def end(self, now: float) -> None:
        if self.ended_t is None:
            self.ended_t = now

    def spent(self, billed: Mapping[str, bool]) -> float:
        """What its jobs cost so far (``billed``: whether each job counts)."""
        return round(sum(cost for job, cost in self.jobs.items() if billed.get(job, True)), 6)

    def admit(self, backend: str, cost: float, now: float, billed: Mapping[str, bool]) -> None:
        """Refuse a job of ``cost`` on ``backend`` the session cannot take (IonQRefusal)."""
        if self.ended(now):
            raise IonqRefusal(400, "The session has ended and takes no more jobs.")
        if backend != self.backend:
            raise IonqRefusal(400, f"The session is on {self.backend}; the job targets {backend}.")
        if self.job_count_limit is not None and len(self.jobs) >= self.job_count_limit:
            raise IonqRefusal(
                400,
                f"The session has reached its job count limit of {self.job_count_limit}.",
            )
        spent = self.spent(billed)
        if self.cost_limit is not None and spent + cost > self.cost_limit + 1e-9:
            raise IonqRefusal(
                400,
                f"Session cost limit exceeded: the job would cost ${cost:.2f} and "
                f"the session has ${spent:.2f} of its ${self.cost_limit:.2f} limit spent.",
            )

    def status(self, now: float) -> str:
        if self.ended(now):
            return "ended"
        return "started" if self.jobs else "created"
