from __future__ import annotations

import pytest

from flux_quantum.cutting.observables import (
    ObservableError,
    basis,
    groups,
    parse_observable,
    parse_observables,
)


def test_dense_and_sparse_forms() -> None:
    assert parse_observable("xiz", 3) == "XIZ"
    assert parse_observable("X0 Z2", 3) == "XIZ"
    assert parse_observable("Y1*Z2", 3) == "IYZ"


@pytest.mark.parametrize("bad", ["XX", "X3", "X0 Z0", "", "III", 5, "Q0"])
def test_refused(bad: object) -> None:
    with pytest.raises(ObservableError) as info:
        parse_observable(bad, 3)
    assert repr(bad) in str(info.value)


def test_count_is_bounded() -> None:
    with pytest.raises(ObservableError, match="1 to 64 observables, got 0"):
        parse_observables([], 3)


def test_qubitwise_commuting_observables_share_a_setting() -> None:
    observables = ["ZZI", "IZZ", "XII", "XIX", "YYY"]
    assert groups(observables) == [[0, 1], [2, 3], [4]]
    assert basis(observables, [2, 3]) == "XZX"
