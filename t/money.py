"""Money in tests, exactly: amounts as whole cents, and a price model's bill computed
with fractions (no float rounding), for checking that cost shares add up to the bill."""

from __future__ import annotations

import math
from fractions import Fraction

from flux_quantum.catalog import PriceModel


def cents(amounts: list[float]) -> list[int]:
    return [round(a * 100) for a in amounts]


def bill_cents(price: PriceModel, shots: int, seconds: float | None = None) -> int:
    """``price.cost(shots, seconds)`` in whole cents, rounded half up, computed exactly."""
    billed = max(Fraction(repr(float(seconds or 0.0))), Fraction(repr(price.min_seconds)))
    exact = (
        Fraction(repr(price.per_task))
        + Fraction(repr(price.per_shot)) * shots
        + Fraction(repr(price.per_minute)) * billed / 60
    )
    return math.floor(exact * 100 + Fraction(1, 2))
