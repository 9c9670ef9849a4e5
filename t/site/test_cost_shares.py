"""Merged tasks' bill shares (flux_quantum.site.cost_shares): the per-task fee divided
equally, each job its own shots (or its part of a time-billed task in proportion to its
shots), whole cents that add up to the task's bill exactly, ties to the earlier job, and
the sentences that refuse bad amounts."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from money import bill_cents, cents

from flux_quantum.catalog import PriceModel
from flux_quantum.site.cost_shares import (
    apportion,
    cost_shares,
    price_shares,
    task_bill,
    usage_shares,
)


def test_the_fee_is_divided_and_each_pays_its_own_shots():
    # IonQ Forte on Braket: $0.30 a task and $0.08 a shot
    assert cost_shares(0.30, 0.08, [100, 100, 100]) == [8.10, 8.10, 8.10]
    assert task_bill(0.30, 0.08, [100, 100, 100]) == 24.30
    assert cost_shares(0.30, 0.08, [100, 200]) == [8.15, 16.15]
    # IQM Garnet: $0.00145 a shot; 0.1 + 0.145 = 0.245 each, the bill 0.735 -> 0.74:
    # 24 cents each, the 2 cents left to the first two
    assert task_bill(0.30, 0.00145, [100] * 3) == 0.74
    assert cost_shares(0.30, 0.00145, [100] * 3) == [0.25, 0.25, 0.24]
    # one job alone pays the whole bill
    assert cost_shares(0.30, 0.08, [50]) == [task_bill(0.30, 0.08, [50])] == [4.30]
    # the fee of $1 among 3: 33.33... cents each, the cent left to the first
    assert cost_shares(1.0, 0.0, [1, 1, 1]) == [0.34, 0.33, 0.33]
    assert cost_shares(0.0, 0.0, [5, 7]) == [0.0, 0.0]


def test_cost_shares_add_up_to_the_bill_exactly():
    rng = random.Random(99)
    prices = [(0.30, 0.08), (0.30, 0.00145), (0.30, 0.0009), (0.30, 0.03), (0.0, 0.01),
              (1.0, 0.0), (0.3, 0.000425), (0.07, 0.0333)]  # fmt: skip
    for _ in range(3000):
        fee, per_shot = rng.choice(prices)
        n = rng.choice([1, 2, 3, 7, 10, 33, 100, 200])
        shots = [rng.choice([1, 10, 100, 101, 250, 1000, rng.randint(1, 5000)]) for _ in range(n)]
        shares = cost_shares(fee, per_shot, shots)
        bill = task_bill(fee, per_shot, shots)
        assert sum(cents(shares)) == round(bill * 100)
        assert round(math.fsum(shares), 2) == bill
        exact_bill = Fraction(repr(fee)) + Fraction(repr(per_shot)) * sum(shots)
        assert abs(Fraction(round(bill * 100), 100) - exact_bill) <= Fraction(1, 200)
        for share, s in zip(shares, shots, strict=True):
            exact = Fraction(repr(fee)) / n + Fraction(repr(per_shot)) * s
            assert abs(Fraction(round(share * 100), 100) - exact) < Fraction(1, 100)
            assert share >= 0 and share == round(share, 2)
            if n > 1 and fee >= 0.07:
                # merged, nobody pays more than its own task would have cost
                assert share <= task_bill(fee, per_shot, [s])
        assert cost_shares(fee, per_shot, shots) == shares  # deterministic


def test_ties_go_to_the_earlier_job():
    assert apportion([Fraction(1, 3)] * 3, Fraction(1)) == [1, 0, 0]
    assert apportion([Fraction(1, 2)] * 4, Fraction(1)) == [1, 1, 0, 0]
    assert apportion([Fraction(1, 4), Fraction(3, 4), Fraction(1, 2)], Fraction(1)) == [0, 1, 1]
    assert apportion([Fraction(5, 4), Fraction(5, 4)], Fraction(1)) == [2, 1]  # 2.5 -> 3
    assert apportion([Fraction(1, 8)] * 3, Fraction(1)) == [0, 0, 0]  # 0.375 -> 0


def test_usage_is_split_in_proportion_to_shots():
    assert usage_shares(7.0, [1, 1, 1]) == [2.34, 2.33, 2.33]
    assert usage_shares(12.5, [100, 300], quantum=0.001) == [3.125, 9.375]
    assert usage_shares(0.0, [5]) == [0.0]
    rng = random.Random(17)
    for _ in range(2000):
        total = rng.choice([0.0, 1.0, 2.5, 3.0, 17.123, 60.0, rng.uniform(0, 500)])
        shots = [rng.randint(1, 10_000) for _ in range(rng.randint(1, 50))]
        for quantum in (0.01, 0.001):
            shares = usage_shares(total, shots, quantum=quantum)
            units = [round(s / quantum) for s in shares]
            exact = Fraction(repr(total))
            assert sum(units) == math.floor(exact / Fraction(repr(quantum)) + Fraction(1, 2))
            for unit, s in zip(units, shots, strict=True):
                share = exact * s / sum(shots)
                assert abs(unit * Fraction(repr(quantum)) - share) < Fraction(repr(quantum))


def test_price_shares_follow_the_catalog_s_price():
    braket = PriceModel(per_task=0.30, per_shot=0.00145)
    assert price_shares(braket, [100] * 3) == cost_shares(0.30, 0.00145, [100] * 3)
    per_minute = PriceModel(per_minute=96.0)  # IBM: $1.60 a usage second
    # 10 s billed: $16 in proportion to 100 and 300 shots
    assert price_shares(per_minute, [100, 300], seconds=10.0) == [4.0, 12.0]
    minimum = PriceModel(per_minute=0.075, min_seconds=3.0)  # 3 s at least: $0.00375
    assert price_shares(minimum, [1, 1]) == [0.0, 0.0]
    assert price_shares(minimum, [1, 1], seconds=100) == [0.07, 0.06]  # $0.125
    mixed = PriceModel(per_task=0.3, per_shot=0.01, per_minute=6.0)
    rng = random.Random(4)
    for _ in range(500):
        shots = [rng.randint(1, 500) for _ in range(rng.randint(1, 20))]
        seconds = rng.uniform(0, 120)
        shares = price_shares(mixed, shots, seconds)
        assert sum(cents(shares)) == bill_cents(mixed, sum(shots), seconds)
        assert abs(sum(cents(shares)) - mixed.cost(sum(shots), seconds) * 100) <= 0.5 + 1e-9


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cost_shares(0.3, 0.1, []), "shots must be one or more integers >= 1, got []"),
        (lambda: cost_shares(0.3, 0.1, [5, 0]), "shots must be one or more integers >= 1"),
        (lambda: cost_shares(0.3, 0.1, [True]), "shots must be one or more integers >= 1"),
        (lambda: cost_shares(-0.3, 0.1, [5]), "fee must be a number >= 0, got -0.3"),
        (lambda: cost_shares(0.3, math.nan, [5]), "per_shot must be a number >= 0, got nan"),
        (lambda: cost_shares(0.3, 0.1, [5], quantum=0), "quantum must be > 0, got 0"),
        (lambda: usage_shares(math.inf, [5]), "total must be a number >= 0, got inf"),
        (lambda: usage_shares("3", [5]), "total must be a number >= 0, got '3'"),
        (lambda: price_shares(PriceModel(per_minute=1.0), [1], -1.0),
         "seconds must be a number >= 0, got -1.0"),
    ],
)  # fmt: skip
def test_bad_amounts_are_refused(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert str(raised.value).startswith(message)
