"""Emulator tier: a cut's subexperiments, as ``flux quantum cut`` writes them, run on
emulated 20-qubit QPUs through the unmodified Braket SDK; their counts, read the way the
vendors give them (first character: ``c[0]``), recombine to the exact values."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from braket.aws import AwsDevice
from braket.ir.openqasm import Program
from cut_circuits import chain

from flux_quantum.cutting import build_experiments, parse_circuit, plan_cut, reconstruct
from flux_quantum.cutting import exact as exact_sim
from flux_quantum.cutting.observables import parse_observables
from flux_quantum.emulator import Emulator, ManualClock

pytest_plugins = ["emulator_fixtures"]
pytestmark = pytest.mark.emulator

ARN = "arn:aws:braket:us-east-1::device/qpu/emulator/{}"


def test_subexperiments_run_on_the_emulator_and_recombine(
    make_emulator: Callable[..., Emulator], manual_clock: ManualClock
) -> None:
    devices = [{"arn": ARN.format(n), "qubits": 7, "queue": {"service_time": 1}} for n in "AB"]
    make_emulator({"devices": devices})
    circuit = parse_circuit(chain(10))
    observables = parse_observables(["X4", "Z4 Z5", "Y4 Y5", "X0 X9"], 10)
    experiments = build_experiments(circuit, plan_cut(circuit, 7), observables)
    assert max(experiments.plan.widths) == 6
    tasks = [
        AwsDevice(ARN.format("AB"[i % 2])).run(Program(source=p.text), shots=4000)
        for i, p in enumerate(experiments.programs)
    ]
    manual_clock.advance(len(tasks))
    counts = [dict(task.result().measurement_counts) for task in tasks]
    estimates = reconstruct(experiments, counts)
    for estimate, value in zip(
        estimates, exact_sim.expectations(circuit, observables), strict=True
    ):
        assert 0 < estimate.standard_error < 0.1
        assert abs(estimate.value - value) <= 4 * estimate.standard_error, (estimate, value)
