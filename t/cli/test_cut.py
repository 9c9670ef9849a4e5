"""``flux quantum cut plan`` and the refusals of ``submit`` that come before any job."""

from __future__ import annotations

from pathlib import Path

import pytest
from cut_circuits import chain

from flux_quantum.cli.main import main

CATALOG = """devices:
  - {name: small-a, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/emulator/A", class: qpu, qubits: 20, region: us-east-1, price: {per_task: 0.3, per_shot: 0.001}}
  - {name: small-b, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/emulator/B", class: qpu, qubits: 20, region: us-east-1, price: {per_task: 0.3, per_shot: 0.002}}
  - {name: tiny, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/emulator/C", class: qpu, qubits: 5, region: us-east-1, price: {per_task: 9.0}}
  - {name: big-sim, vendor: local, id: "arn:aws:braket:::device/quantum-simulator/emulator/S", class: simulator, qubits: 30, region: us-east-1, price: {per_minute: 0.075, min_seconds: 3}}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "backends.yaml").write_text(CATALOG)
    (tmp_path / "chain.qasm").write_text(chain(24))
    return tmp_path / "backends.yaml", tmp_path / "chain.qasm"


def test_plan_with_the_devices_width(files, capsys) -> None:
    catalog, circuit = files
    args = ["cut", "plan", f"--catalog={catalog}", "-O", "X11", "-O", "Z11 Z12"]
    assert main([*args, "--setattr", "qpu.class=qpu", str(circuit)]) == 0
    out = capsys.readouterr().out
    assert "fragments:       q[0..11] (13 wide), q[12..23] (13 wide)" in out
    assert "subexperiments:  20 (6 terms, 2 measurement setting(s))" in out
    # The tiny QPU cannot hold a fragment and never counts; the bound is the dearest.
    assert "devices:         small-a, small-b" in out
    assert "cost bound:      $46.00 (20 tasks of 1000 shots)" in out
    # Without the class, the 30-qubit simulator sets the width: no cut at all.
    assert main([*args, "--json", str(circuit)]) == 0
    assert '"cut_gates": []' in capsys.readouterr().out


def test_submit_over_max_cost_is_refused_before_anything(files, capsys, tmp_path) -> None:
    catalog, circuit = files
    rc = main(
        [
            "cut", "submit", f"--catalog={catalog}", "-O", "X11", "--max-width=20",
            "--setattr", "qpu.class=qpu", "--setattr", "qpu.max_cost=20", "--setattr",
            "qpu.failover=simulator", f"--dir={tmp_path / 'out'}", str(circuit), "true",
        ]
    )  # fmt: skip
    assert rc == 1
    assert capsys.readouterr().err.strip() == (
        "flux-quantum: ERROR: qpu.max_cost: the cut's 10 subexperiments may cost up to "
        "$23.00 (10 tasks of 1000 shots at up to $2.30), over qpu.max_cost $20.00; nothing "
        "was submitted"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--max-width=zero"], "--max-width must be a number of qubits >= 1 or 'devices', got 'zero'"),
        (["--setattr", "qpu.shots=0"], "qpu.shots must be an integer from 1 to 100000, got 0"),
        (["--setattr", "qpu.program=x.qasm"], "--setattr qpu.program: a cut's programs are its subexperiments"),
        (["--max-width=2"], "no cut of cz, cx or rzz gates between blocks of consecutive qubits fits in 2 qubits"),
        (["--qpu=tiny", "--max-width=20"], "no device the request allows holds the widest fragment (13 qubits)"),
        (["--qpu=tiny"], "fragments of at most 5 qubits need 7 cut gates, over the limit of 3"),
    ],
)  # fmt: skip
def test_refused_with_one_sentence(files, capsys, option: list[str], says: str) -> None:
    catalog, circuit = files
    assert main(["cut", "plan", f"--catalog={catalog}", "-O", "X1", *option, str(circuit)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"flux-quantum: ERROR: {says}") and err.count("\n") == 1, err
