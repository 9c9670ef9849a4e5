"""Quality-aware selection: the OpenQASM 3 gate count, a program's expected success on
a calibrated device, the max-fidelity ranking and its tie-breaks, qpu.min_fidelity, the
figures in the explanation, and calibration served by the emulator the way Braket serves
it (standardized device properties) and read back by the Braket probe."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from catalogs import catalog_of

from flux_quantum.emulator import Scenario
from flux_quantum.emulator.braket.capabilities import capabilities_json
from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import NoDeviceError, expected_success, select_device
from flux_quantum.selection.qasm import BELL_COUNTS, ProgramCounts, count_program
from flux_quantum.vendors.base import Calibration, DeviceSnapshot, DeviceStatus
from flux_quantum.vendors.braket.calibration import read_calibration
from flux_quantum.vendors.braket.vendor import BraketVendor

pytest_plugins = ["emulator_fixtures"]

BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"


# --- counting --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("program", "counts"),
    [
        (BELL, (2, 1, 1, 2)),
        # broadcast over a register and over slices; no measure: all qubits are read
        ("OPENQASM 3; qubit[5] q; h q; cz q[0:1], q[2:3]; // cz q;\n", (5, 5, 2, 5)),
        # OpenQASM 2 declarations, arrow measurement of one qubit
        (
            "OPENQASM 2.0; qreg q[3]; creg c[3]; x q[0]; cx q[0],q[1]; measure q[1] -> c[1];",
            (3, 1, 1, 1),
        ),
        # physical qubits in a verbatim box; a pragma line; a block comment
        (
            "OPENQASM 3;\n#pragma braket verbatim\nbox { rx(0.1) $0; /* cz $0, $2; */ cz $0, $1; }"
            "\nbit b = measure $0;",
            (2, 1, 1, 1),
        ),
        # a defined gate counts as its body; Toffoli as 6 two- and 9 one-qubit gates
        (
            "OPENQASM 3; gate pair a, b { h a; cnot a, b; rz(0.1) b; } qubit[3] q;"
            " pair q[0], q[1]; ccnot q[0], q[1], q[2];",
            (3, 2 + 9, 1 + 6, 3),
        ),
        # for loops over a range (inclusive), a stepped range and a set; modifiers
        (
            "OPENQASM 3; qubit[4] q; for int i in [0:2] { x q[i]; }"
            " for uint i in [0:2:3] { y q[i]; } for i in {0, 1} { ctrl @ x q[0], q[1]; }"
            " inv @ s q[3];",
            (4, 3 + 2 + 1, 2, 4),
        ),
        # classical statements and measurement by assignment into a register
        (
            "OPENQASM 3; qubit[3] q; bit[3] c; int n = 3; reset q; barrier q;"
            " c[0] = measure q[0]; c[1:2] = measure q[1:2];",
            (3, 0, 0, 3),
        ),
    ],
)
def test_count_program(program: str, counts: tuple[int, int, int, int]) -> None:
    result = count_program(program)
    assert (
        result.qubits,
        result.one_qubit_gates,
        result.two_qubit_gates,
        result.measured,
    ) == counts


def test_count_program_notes_what_it_could_not_read() -> None:
    result = count_program("OPENQASM 3; qubit[2] q; for int i in [0:n] { cnot q[0], q[1]; }")
    assert result.two_qubit_gates == 1
    assert result.notes == ("a for loop over an unknown range counts once",)
    assert count_program(BELL) == BELL_COUNTS


def test_count_program_of_the_benchmark_qaoa() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from policy import QAOA  # type: ignore[import-not-found]

    result = count_program(QAOA)
    # 4 H, 4 RZ, 4 RX; 2 CNOTs on each of the ring's 4 edges; all 4 qubits measured
    assert result == ProgramCounts(qubits=4, one_qubit_gates=12, two_qubit_gates=8, measured=4)


# --- expected success ------------------------------------------------------------------

FLEET = catalog_of("sv1", "forte1", "garnet", "ankaa3", "plain")


def cal(one: float, two: float, readout: float) -> Calibration:
    return Calibration(one_qubit=(("*", one),), two_qubit=(("*", two),), readout=(("*", readout),))


# forte1: best gates, poorer readout; garnet: good readout, poorer 2q; ankaa3: worst.
CALIBRATIONS = {
    "forte1": cal(0.9998, 0.995, 0.990),
    "garnet": cal(0.9990, 0.985, 0.999),
    "ankaa3": cal(0.9980, 0.975, 0.950),
}


def snapshots(**calibrations: Calibration | None) -> dict[str, DeviceSnapshot]:
    chosen = {**CALIBRATIONS, **calibrations}
    return {
        d.name: DeviceSnapshot(
            device=d.name,
            status=DeviceStatus.ONLINE,
            queue_depth=2,
            t=1.0,
            calibration=chosen.get(d.name),
        )
        for d in FLEET
    }


def test_expected_success_is_the_product_of_fidelities() -> None:
    forte = FLEET.get("forte1")
    assert forte is not None
    program = ProgramCounts(qubits=4, one_qubit_gates=12, two_qubit_gates=8, measured=4)
    figure = expected_success(forte, CALIBRATIONS["forte1"], program)
    assert figure == pytest.approx(0.9998**12 * 0.995**8 * 0.990**4)
    # a simulator is noise-free; a QPU without calibration has no figure
    sv1 = FLEET.get("sv1")
    assert sv1 is not None
    assert expected_success(sv1, None, program) == 1.0
    assert expected_success(forte, None, program) is None
    # a figure the program does not need may be missing
    no_two = Calibration(one_qubit=(("0", 0.999),), readout=(("0", 0.98),))
    only_one = ProgramCounts(qubits=1, one_qubit_gates=3, two_qubit_gates=0, measured=1)
    assert expected_success(forte, no_two, only_one) == pytest.approx(0.999**3 * 0.98)
    assert expected_success(forte, no_two, program) is None


def test_calibration_medians_and_errors() -> None:
    ibm = Calibration.from_errors(
        one_qubit={"0": 0.001, "1": 0.003, "2": 0.002},
        two_qubit={"0-1": 0.01, "1-2": 0.03},
        readout={"0": 0.02, "1": 0.04, "2": 0.01},
        source="ibm backend properties",
    )
    assert ibm.one_qubit_median == pytest.approx(0.998)
    assert ibm.two_qubit_median == pytest.approx(0.98)
    assert ibm.readout_median == pytest.approx(0.98)
    assert ibm.to_dict()["two_qubit"] == {"0-1": pytest.approx(0.99), "1-2": pytest.approx(0.97)}
    assert Calibration().empty and Calibration().one_qubit_median is None


def pick(table: dict, program: ProgramCounts | None = None, **snaps: Calibration | None):
    return select_device(FLEET, snapshots(**snaps), parse_request(table), program=program)


def test_max_fidelity_depends_on_the_program() -> None:
    gates = ProgramCounts(qubits=4, one_qubit_gates=10, two_qubit_gates=40, measured=4)
    readout = ProgramCounts(qubits=20, one_qubit_gates=20, two_qubit_gates=0, measured=20)
    table = {"policy": "max-fidelity", "class": "qpu"}
    assert pick(table, gates).device.name == "forte1"  # two-qubit gates dominate
    assert pick(table, readout).device.name == "garnet"  # readout dominates
    explanation = pick(table, gates).explanation
    ranked = [c.device for c in explanation.candidates if c.eligible]
    # plain has no calibration: eligible, but ranked after every device with a figure
    assert ranked == ["forte1", "garnet", "ankaa3", "plain"]
    assert explanation.candidates[0].reason == "chosen: highest expected success"
    assert next(c for c in explanation.candidates if c.device == "plain").success is None


def test_max_fidelity_ties_go_to_the_cheaper_device() -> None:
    same = cal(0.999, 0.99, 0.98)
    selection = pick(
        {"policy": "max-fidelity", "class": "qpu"},
        forte1=same,
        garnet=same,
        ankaa3=same,
        plain=same,
    )
    # equal quality: cost decides (plain $0.40, ankaa3 $1.20, garnet $1.75, forte1 $80.30)
    assert [c.device for c in selection.explanation.candidates] == [
        "plain",
        "ankaa3",
        "garnet",
        "forte1",
        "sv1",
    ]
    # figures equal to 0.001 count as equal too
    close = cal(0.999, 0.9901, 0.98)
    selection = pick(
        {"policy": "max-fidelity", "class": "qpu"},
        forte1=close,
        garnet=same,
        ankaa3=same,
        plain=same,
    )
    assert selection.device.name == "plain"


def test_max_fidelity_without_a_class_prefers_a_noise_free_simulator() -> None:
    assert pick({"policy": "max-fidelity"}).device.name == "sv1"


def test_min_fidelity_drops_devices_below_it_and_says_why() -> None:
    gates = ProgramCounts(qubits=4, one_qubit_gates=10, two_qubit_gates=40, measured=4)
    selection = pick({"policy": "min-cost", "class": "qpu", "min_fidelity": 0.6}, gates)
    reasons = {c.device: c.reason for c in selection.explanation.candidates}
    forte_success = 0.9998**10 * 0.995**40 * 0.990**4
    garnet_success = 0.9990**10 * 0.985**40 * 0.999**4
    assert forte_success > 0.6 > garnet_success
    assert selection.device.name == "forte1"  # the only one left, however dear
    assert reasons["garnet"] == f"dropped: expected success {garnet_success:.3f} < min_fidelity 0.6"
    assert reasons["plain"] == "dropped: no calibration data to meet min_fidelity 0.6"
    with pytest.raises(NoDeviceError) as caught:
        pick({"policy": "min-cost", "class": "qpu", "min_fidelity": 0.9}, gates)
    assert f"forte1 expected success {forte_success:.3f} < min_fidelity 0.9" in str(caught.value)


def test_explanation_shows_the_figures_used() -> None:
    selection = pick({"policy": "max-fidelity", "class": "qpu"})
    text = selection.explanation.render_text()
    lines = text.splitlines()
    assert lines[0].startswith("policy max-fidelity for 'any policy=max-fidelity")
    assert lines[1] == "program: 2 qubits, 1 1q + 1 2q gates, 2 measured"  # the default Bell
    assert lines[2].split()[-5:] == ["F1Q", "F2Q", "FRO", "SUCCESS", "RESULT"]
    forte_row = next(line for line in lines if line.lstrip().startswith("forte1"))
    success = 0.9998 * 0.995 * 0.990**2
    assert f"99.5%  99.0%  {100 * success:.1f}%" in forte_row
    record = json.loads(json.dumps(selection.explanation.to_dict()))
    assert record["program"]["two_qubit_gates"] == 1
    forte = next(c for c in record["candidates"] if c["device"] == "forte1")
    assert forte["expected_success"] == pytest.approx(success, abs=1e-6)
    assert forte["fidelity_2q"] == 0.995
    # without fidelity in the request, the table keeps its old columns
    plain = select_device(FLEET, snapshots(), parse_request({"policy": "min-cost"}))
    assert "SUCCESS" not in plain.explanation.render_text()
    assert "program" not in plain.explanation.to_dict()


def test_excluded_devices_are_dropped_with_the_callers_reason() -> None:
    reason = "not allowed: rule 'qpu-physics' ([quantum.access] rule 1) admits only bank physics"
    selection = select_device(
        FLEET,
        snapshots(),
        parse_request({"policy": "min-cost", "class": "qpu"}),
        excluded={"plain": reason, "ankaa3": "over quota: user alice's daily spend"},
    )
    assert selection.device.name == "garnet"
    reasons = {c.device: c.reason for c in selection.explanation.candidates}
    assert reasons["plain"] == f"dropped: {reason}"
    with pytest.raises(NoDeviceError) as caught:
        select_device(FLEET, snapshots(), parse_request("plain"), excluded={"plain": reason})
    assert str(caught.value) == f"no device satisfies qpu request 'plain': plain {reason}"


# --- the emulator serves it, the Braket probe reads it ---------------------------------

CALIBRATED = {
    "extends": "default",
    "devices": [
        {
            "name": "Garnet",
            "calibration": {
                "one_qubit": 0.999,
                "two_qubit": 0.99,
                "readout": 0.97,
                "spread": 0.002,
            },
        },
        {
            "name": "Forte 1",
            "calibration": {"one_qubit": 0.9998, "two_qubit": 0.995, "readout": 0.994},
        },
    ],
}


def test_emulated_capabilities_parse_with_the_braket_schemas() -> None:
    from braket.device_schema import device_capabilities  # noqa: F401
    from braket.device_schema.ionq.ionq_device_capabilities_v1 import IonqDeviceCapabilities
    from braket.device_schema.iqm.iqm_device_capabilities_v1 import IqmDeviceCapabilities

    scenario = Scenario.from_dict(CALIBRATED)
    from datetime import UTC, datetime

    when = datetime(2025, 1, 1, tzinfo=UTC)
    garnet = scenario.device("arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet")
    forte = scenario.device("arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1")
    assert garnet is not None and forte is not None
    iqm = IqmDeviceCapabilities.parse_raw(capabilities_json(garnet, when))
    assert iqm.standardized is not None
    assert len(iqm.standardized.oneQubitProperties) == 20
    edges = sum(len(v) for v in iqm.paradigm.connectivity.connectivityGraph.values())
    assert len(iqm.standardized.twoQubitProperties) == edges
    ionq = IonqDeviceCapabilities.parse_raw(capabilities_json(forte, when))
    assert ionq.standardized is not None and ionq.provider is not None
    assert ionq.standardized.twoQubitGateFidelity[0].fidelity == 0.995
    assert ionq.provider.fidelity["spam"]["mean"] == 0.994
    # a device without calibration publishes none, as the simulators do
    sv1 = scenario.device("arn:aws:braket:::device/quantum-simulator/amazon/sv1")
    assert sv1 is not None and "standardized" not in json.loads(capabilities_json(sv1, when))


def test_read_calibration_of_each_schema() -> None:
    v1 = {
        "standardized": {
            "braketSchemaHeader": {
                "name": "braket.device_schema.standardized_gate_model_qpu_device_properties",
                "version": "1",
            },
            "oneQubitProperties": {
                "0": {
                    "oneQubitFidelity": [
                        {"fidelityType": {"name": "RANDOMIZED_BENCHMARKING"}, "fidelity": 0.998},
                        {"fidelityType": {"name": "READOUT"}, "fidelity": 0.95},
                    ]
                },
                "1": {
                    "oneQubitFidelity": [
                        {
                            "fidelityType": {"name": "SIMULTANEOUS_RANDOMIZED_BENCHMARKING"},
                            "fidelity": 0.996,
                        },
                        {"fidelityType": {"name": "READOUT"}, "fidelity": 2.0},  # garbage: skipped
                    ]
                },
            },
            "twoQubitProperties": {
                "0-1": {
                    "twoQubitGateFidelity": [
                        {"gateName": "CZ", "fidelity": 0.97, "fidelityType": {"name": "IRB"}},
                        {"gateName": "ISWAP", "fidelity": 0.98, "fidelityType": {"name": "IRB"}},
                    ]
                },
            },
        }
    }
    calibration = read_calibration(v1)
    assert calibration is not None
    assert dict(calibration.one_qubit) == {"0": 0.998, "1": 0.996}
    assert dict(calibration.readout) == {"0": 0.95}
    assert dict(calibration.two_qubit) == {"0-1": 0.98}  # the best gate on the pair
    v3_ionq = {
        "provider": {
            "fidelity": {"1Q": {"mean": 0.9997}, "2Q": {"mean": 0.99}, "spam": {"mean": 0.995}}
        },
        "standardized": {
            "braketSchemaHeader": {"version": "3"},
            "twoQubitGateFidelity": [{"fidelity": 0.993, "unit": "fraction"}],
            "updatedAt": "2025-02-22T12:29:03Z",
        },
    }
    calibration = read_calibration(v3_ionq)
    assert calibration is not None
    # standardized figures first, the provider's where the standardized ones are missing
    assert calibration.two_qubit_median == 0.993
    assert calibration.one_qubit_median == 0.9997
    assert calibration.readout_median == 0.995
    assert calibration.updated_at == pytest.approx(1740227343.0)
    assert read_calibration({"service": {}}) is None
    assert read_calibration("not a document") is None


def test_braket_probe_reads_the_emulators_calibration(make_emulator) -> None:
    make_emulator(CALIBRATED)
    devices = [FLEET.get(name) for name in ("garnet", "forte1", "sv1")]
    assert all(devices)
    vendor = BraketVendor(devices=devices)  # type: ignore[arg-type]
    garnet = vendor.probe(devices[0])  # type: ignore[arg-type]
    assert garnet.calibration is not None
    assert len(garnet.calibration.one_qubit) == 20
    assert garnet.calibration.one_qubit_median == pytest.approx(0.999, abs=1e-9)
    assert garnet.calibration.two_qubit_median == pytest.approx(0.99, abs=1e-9)
    assert garnet.calibration.readout_median == pytest.approx(0.97, abs=1e-9)
    values = [v for _, v in garnet.calibration.readout]
    assert max(values) - min(values) == pytest.approx(0.004)  # the spread, around 0.97
    forte = vendor.probe(devices[1])  # type: ignore[arg-type]
    assert forte.calibration is not None
    assert forte.calibration.two_qubit_median == 0.995
    assert forte.calibration.readout_median == 0.994
    assert vendor.probe(devices[2]).calibration is None  # type: ignore[arg-type]
    # and max-fidelity chooses with what was read
    snaps = {s.device: s for s in (garnet, forte)}
    selection = select_device(
        devices[:2],  # type: ignore[arg-type]
        snaps,
        parse_request({"policy": "max-fidelity"}),
        program=ProgramCounts(qubits=4, one_qubit_gates=12, two_qubit_gates=8, measured=4),
    )
    assert selection.device.name == "forte1"
    assert math.isclose(
        selection.explanation.candidates[0].success or 0, 0.9998**12 * 0.995**8 * 0.994**4
    )


def test_backends_and_select_show_the_calibration(
    make_emulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from catalogs import DEVICES

    from flux_quantum.cli.main import main

    make_emulator(CALIBRATED)
    catalog = tmp_path / "backends.yaml"
    catalog.write_text(
        "devices:\n" + "".join(f"  - {DEVICES[n]}\n" for n in ("sv1", "forte1", "garnet"))
    )
    # The probes' deadline is real seconds: only a hang may reach it here, not a loaded
    # machine's answer a few seconds late (the deadline is tested in test_backends_cli).
    wait = ["--timeout", "300"]
    out = ["-o", "{name} {f1q} {f2q} {fro}"]
    assert main(["backends", "--catalog", str(catalog), *wait, *out]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME F1Q F2Q FRO",
        "sv1 - - -",
        "forte1 99.98% 99.50% 99.40%",
        "garnet 99.90% 99.00% 97.00%",
    ]
    program = tmp_path / "ghz.qasm"
    program.write_text("OPENQASM 3; qubit[3] q; h q[0]; cnot q[0], q[1]; cnot q[1], q[2];")
    words = ["policy=max-fidelity", "class=qpu", f"program={program}"]
    assert main(["select", "--catalog", str(catalog), "--explain", *wait, *words]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "program: 3 qubits, 1 1q + 2 2q gates, 3 measured"
    success = 0.9998 * 0.995**2 * 0.994**3
    assert lines[3].startswith("  forte1") and f"{100 * success:.1f}%" in lines[3]
    assert lines[-1] == "chosen: forte1"
    assert main(["select", "--catalog", str(catalog), "policy=max-fidelity",
                 f"program={tmp_path / 'missing.qasm'}"]) == 1  # fmt: skip
    assert "qpu.program: cannot read" in capsys.readouterr().err
