"""Preparing in a bounded child process, and the manifest that carries the result."""

from __future__ import annotations

from pathlib import Path

import pytest
from cut_circuits import chain, chain_x

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.cutting import exact
from flux_quantum.cutting.circuit import parse_circuit
from flux_quantum.cutting.cost import cost_bound
from flux_quantum.cutting.manifest import ManifestError, load, read_manifest, write_manifest
from flux_quantum.cutting.prepare import PrepareError, run_bounded
from flux_quantum.cutting.reconstruct import reconstruct


def test_prepared_in_a_child_process_and_recombined(tmp_path: Path) -> None:
    doc = run_bounded({"circuit": chain(10), "observables": ["X4", "X5"], "max_width": 7})
    experiments = load(doc)
    write_manifest(tmp_path / "cut.json", experiments, {"shots": 100})
    again, raw = read_manifest(tmp_path / "cut.json")
    assert again == experiments and raw["shots"] == 100
    counts = [exact.probabilities(parse_circuit(p.text)) for p in again.programs]
    values = [e.value for e in reconstruct(again, counts)]
    assert values == pytest.approx([chain_x(10, 4), chain_x(10, 5)], abs=1e-9)


def test_the_reason_comes_back_as_one_sentence() -> None:
    with pytest.raises(PrepareError, match="observable 'X99' must be a Pauli string"):
        run_bounded({"circuit": chain(10), "observables": ["X99"], "max_width": 7})


def test_a_bad_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cut.json").write_text('{"version": 1, "qubits": 3}')
    with pytest.raises(ManifestError, match="lacks or misspells 'plan'"):
        read_manifest(tmp_path / "cut.json")


def test_cost_bound_takes_the_dearest_device() -> None:
    cheap = Device("a", "braket", "a", "qpu", 20, "r", PriceModel(per_task=0.3, per_shot=0.01))
    dear = Device("b", "braket", "b", "qpu", 20, "r", PriceModel(per_task=0.3, per_shot=0.03))
    bound = cost_bound(20, 100, [cheap, dear])
    assert bound.per_task == pytest.approx(3.3)
    assert bound.total == pytest.approx(66.0)
