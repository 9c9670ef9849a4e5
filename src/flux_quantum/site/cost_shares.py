"""What each job of a merged task pays: the task's bill split into whole cents.

When several jobs' programs run as one vendor task (:mod:`flux_quantum.site.merging`),
the ledger settles a row per job. The rule: the per-task fee divided equally among the
merged jobs, each job its own shots (and, on a device billed by time, the task's billed
time in proportion to its shots); the task's bill is rounded to the cent and the shares
are whole cents that add up to it exactly (``apportion``). This module owns that
arithmetic, done exactly on the amounts as written (0.3 is 3/10): ``task_bill``,
``cost_shares``, ``usage_shares`` and ``price_shares`` (a catalog price). It only
computes: it never reads the ledger, a vendor or the clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from flux_quantum.catalog import PriceModel
from flux_quantum.site.access import shown

CENT = 0.01


def _exact(value: float, what: str) -> Fraction:
    """``value`` as the decimal it is written as (0.3 is 3/10, not the nearest double)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"{what} must be a number >= 0, got {shown(value, 60)}")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def _check_shots(shots: Sequence[int]) -> None:
    if (
        isinstance(shots, str | bytes)
        or not shots
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shots)
    ):
        raise ValueError(f"shots must be one or more integers >= 1, got {shown(shots, 60)}")


def _quantum(quantum: float) -> Fraction:
    q = _exact(quantum, "quantum")
    if q <= 0:
        raise ValueError(f"quantum must be > 0, got {quantum!r}")
    return q


def apportion(exact: Sequence[Fraction], quantum: Fraction) -> list[int]:
    """Whole ``quantum``s for parts of exact sizes ``exact`` that add up to their sum
    rounded to a ``quantum`` (half up): each part first gets its own rounded down, then
    the ``quantum``s left go one each to the parts with the largest remainders, ties to
    the earlier part (the largest remainder method). Each part is then within one
    ``quantum`` of its exact size."""
    total = sum(exact, Fraction(0))
    units = math.floor(total / quantum + Fraction(1, 2))
    floors = [math.floor(part / quantum) for part in exact]
    left = units - sum(floors)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] / quantum - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


def _shares(exact: Sequence[Fraction], quantum: float) -> list[float]:
    q = _quantum(quantum)
    return [float(units * q) for units in apportion(exact, q)]


def task_bill(fee: float, per_shot: float, shots: Sequence[int], *, quantum: float = CENT) -> float:
    """The bill of one task running ``shots`` (all its programs'): ``fee`` plus
    ``per_shot`` each, rounded to the cent (half up)."""
    _check_shots(shots)
    q = _quantum(quantum)
    exact = _exact(fee, "fee") + _exact(per_shot, "per_shot") * sum(shots)
    return float(math.floor(exact / q + Fraction(1, 2)) * q)


def cost_shares(
    fee: float, per_shot: float, shots: Sequence[int], *, quantum: float = CENT
) -> list[float]:
    """Each merged job's share of a task's bill, in the order of ``shots``.

    The rule: the per-task ``fee`` divided equally among the jobs, each job paying its own
    shots at ``per_shot``. The task's bill (``task_bill``) is rounded to the cent; each
    share is a whole number of cents within a cent of its exact part, and the shares add
    up to the bill exactly: every job gets its exact part rounded down, and the cents left
    go one each to the jobs with the largest remainders, the earlier job first on a tie
    (``apportion``).
    """
    _check_shots(shots)
    part = _exact(fee, "fee") / len(shots)
    price = _exact(per_shot, "per_shot")
    return _shares([part + price * s for s in shots], quantum)


def usage_shares(total: float, shots: Sequence[int], *, quantum: float = CENT) -> list[float]:
    """``total`` (a task's billed usage seconds, or its cost, on a device billed by time:
    IBM) split among the merged jobs in proportion to their ``shots``, in whole
    ``quantum``s that add up to ``total`` rounded to a ``quantum`` exactly (as
    ``cost_shares`` rounds)."""
    _check_shots(shots)
    whole = _exact(total, "total")
    weight = sum(shots)
    return _shares([whole * s / weight for s in shots], quantum)


def price_shares(
    price: PriceModel, shots: Sequence[int], seconds: float | None = None
) -> list[float]:
    """Each merged job's share of what ``price`` bills a task of all ``shots`` that ran
    ``seconds`` (``PriceModel.cost``): the per-task fee divided equally, each job its own
    shots, the time-billed part (at least ``min_seconds``) in proportion to shots; whole
    cents adding up to the task's cost rounded to the cent."""
    _check_shots(shots)
    n, weight = len(shots), sum(shots)
    billed = max(_exact(seconds or 0.0, "seconds"), _exact(price.min_seconds, "min_seconds"))
    timed = _exact(price.per_minute, "per_minute") * billed / 60
    fee = _exact(price.per_task, "per_task") / n
    per_shot = _exact(price.per_shot, "per_shot")
    return _shares([fee + per_shot * s + timed * s / weight for s in shots], CENT)
