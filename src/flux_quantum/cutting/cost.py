"""What a cut may cost, bounded before any of its tasks exists.

Every program of a cut is one task of the job's shots. Before the first is created, the
cut's estimate is the number of programs times the highest price, for those shots, of
the devices its programs may land on (the request's candidates wide enough for its
widest fragment, and the simulators when it fails over to one): an upper bound of the
estimates the service reserves task by task, so that a cut refused for its cost is
refused whole, with no task created. Time-billed devices count their minimum billed
duration, as the service's estimate does. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flux_quantum.catalog import Device


@dataclass(frozen=True)
class CostBound:
    programs: int
    shots: int
    per_task: float  # the highest estimate of one task among ``devices``
    devices: tuple[str, ...]

    @property
    def total(self) -> float:
        return self.programs * self.per_task


def cost_bound(programs: int, shots: int, devices: Iterable[Device]) -> CostBound:
    chosen = tuple(devices)
    per_task = max((d.price.cost(shots) for d in chosen), default=0.0)
    return CostBound(programs, shots, per_task, tuple(d.name for d in chosen))
