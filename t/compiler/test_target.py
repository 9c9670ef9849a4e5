"""DeviceTarget: built from what a vendor publishes, checked, and round-tripped."""

from __future__ import annotations

import pytest

from flux_quantum.compiler.target import DeviceTarget


def test_build_keeps_each_pair_once_and_the_basis_sorted():
    target = DeviceTarget.build(
        "d", 3, ["sx", "cz", "measure", "rz"], [[0, 1], [1, 0], [2, 1]],
        one_qubit_error={"0": 0.001, "1": 2.0}, calibration="c7",
    )  # fmt: skip
    assert target.basis == ("cz", "rz", "sx") and target.pairs == ((0, 1), (1, 2))
    assert target.one_qubit_error == (("0", 0.001),)  # an error outside [0, 1] is left out
    assert target.key == ("d", "c7") and target.maps
    assert DeviceTarget.from_dict(target.to_dict()) == target


def test_a_width_only_target_maps_nothing():
    target = DeviceTarget.build("sim", 30)
    assert not target.maps and target.pairs is None


@pytest.mark.parametrize(
    "qubits, pairs, match",
    [(0, None, "qubits must be >= 1"), (2, [[0, 2]], r"pair \(0, 2\) is not two of its 2")],
)
def test_a_bad_target_is_refused_in_one_sentence(qubits, pairs, match):
    with pytest.raises(ValueError, match=match):
        DeviceTarget.build("d", qubits, ["cz"], pairs)
