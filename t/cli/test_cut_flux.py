"""Flux tier: a 24-qubit circuit on devices of 20 qubits at most, cut by ``flux quantum
cut submit`` into fragments that fit, its subexperiments run as one held batch job spread
over the devices by the handler service, recombined in the released job by ``flux
quantum cut result``: within three standard errors of the exact values (a state-vector
simulation, once per module). With one device failing every task, its subexperiments
fail over to the simulator and the result is still right; a cut whose cost bound is over
``qpu.max_cost`` is refused before any task exists, and so is one over a site quota (the
handler service checks the whole batch before its first task).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cut_circuits import chain
from fluxinstance import FluxInstance, quantum_config, user_daily_limit
from qpu_setup import Qpu

from flux_quantum.cutting import exact
from flux_quantum.cutting.circuit import parse_circuit
from flux_quantum.cutting.observables import parse_observables

pytestmark = pytest.mark.flux

QUBITS = 24
OBSERVABLES = ["X11", "Z11 Z12", "Y11 Y12", "X0"]


def _device(name: str, **spec: Any) -> dict[str, Any]:
    sim = spec.pop("simulator", False)
    kind = "quantum-simulator/emulator" if sim else "qpu/emulator"
    region = "" if sim else "us-east-1"
    return {
        "arn": f"arn:aws:braket:{region}::device/{kind}/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": {"service_time": 10.0 if not sim else 1.0},
        **spec,
    }


def _catalog(path: Path, scenario: dict[str, Any]) -> Path:
    lines = ["devices:"]
    for spec in scenario["devices"]:
        sim = "quantum-simulator" in spec["arn"]
        lines += [
            f"  - name: q-{spec['name'].lower()}",
            "    vendor: local",
            f"    id: {spec['arn']}",
            f"    class: {'simulator' if sim else 'qpu'}",
            "    qubits: 20",
            "    region: us-east-1",
            "    price: {per_task: 0.3, per_shot: 0.001}",
            "    slots: 4",
            "    properties: {drain_seconds_per_task: 10}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


SPREAD = {"devices": [_device("SmallA"), _device("SmallB"), _device("SmallC")]}
BROKEN = {
    "devices": [
        _device("SmallA"),
        _device("Broken", faults=[{"fail_task": "readout chain failed; task aborted"}]),
        _device("Sim", simulator=True),
    ]
}


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    instance = FluxInstance(tmp_path_factory.mktemp("cutting"), size=2).start()
    (instance.workdir / "chain.qasm").write_text(chain(QUBITS))
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture(scope="module")
def exact_values() -> list[float]:
    observables = parse_observables(OBSERVABLES, QUBITS)
    return exact.expectations(parse_circuit(chain(QUBITS)), observables)


def _world(inst: FluxInstance, scenario: dict[str, Any], name: str) -> Qpu:
    qpu = Qpu(inst, _catalog(inst.workdir / f"{name}.yaml", scenario), scenario)
    qpu.start_service()
    return qpu


def _cut_submit(qpu: Qpu, *options: str, check: bool = True) -> Any:
    observables = [f"--observable={o}" for o in OBSERVABLES]
    return qpu.inst.quantum(
        "cut",
        "submit",
        f"--catalog={qpu.catalog}",
        "--max-width=devices",
        "--shots=2000",
        *observables,
        *options,
        "chain.qasm",
        "sh",
        "-c",
        "flux quantum cut result --json > result.json && echo recombined",
        check=check,
        env=qpu.job_env,
    )


def _run_to_release(qpu: Qpu, jobid: str) -> None:
    """Step the vendor clock until the job is released (every subexperiment done)."""

    def released() -> bool:
        qpu.advance(5)
        return "qpu-release" in qpu.names(jobid)

    qpu.until(released, timeout=300, step=0.2)


def _within(result: dict[str, Any], exact_values: list[float]) -> None:
    for estimate, value in zip(result["estimates"], exact_values, strict=True):
        error = estimate["standard_error"]
        assert 0 < error < 0.25, estimate
        assert abs(estimate["value"] - value) <= 3 * error, (estimate, value)


def test_a_circuit_wider_than_every_device_is_cut_spread_and_recombined(inst, exact_values):
    qpu = _world(inst, SPREAD, "spread")
    try:
        jobid = _cut_submit(
            qpu, "--setattr=qpu.vendor=local", "--setattr=qpu.policy=min-wait"
        ).stdout.strip()
        submits = lambda: sum(n == "qpu-submit" for n in qpu.names(jobid))  # noqa: E731
        qpu.until(lambda: submits() >= 4)
        rows = json.loads(inst.quantum("jobs", "--json").stdout)
        state = next(r for r in rows if r["jobid"] == jobid)["qpu_state"]
        assert state.endswith("/30 ready)"), state
        _run_to_release(qpu, jobid)
        out = qpu.output(jobid)
        assert "recombined" in out, out
        result = json.loads((inst.workdir / "result.json").read_text())
        assert result["cut"]["qubits"] == QUBITS
        assert [f["width"] for f in result["cut"]["fragments"]] == [13, 13]
        assert result["cut"]["cut_gates"][0]["qubits"] == [11, 12]
        # 5 variants x 3 settings (X0 is measured with X11) x 2 fragments
        assert len(result["subexperiments"]) == 30
        assert len(result["devices"]) >= 2, result["devices"]
        _within(result, exact_values)
        # Every subexperiment had its idempotency token before its task existed.
        names = qpu.names(jobid)
        assert names.count("qpu-submit") == names.count("qpu-task") == 30
    finally:
        qpu.close()


def test_a_failing_devices_fragments_finish_on_a_simulator(inst, exact_values):
    qpu = _world(inst, BROKEN, "broken")
    try:
        jobid = _cut_submit(
            qpu,
            "--setattr=qpu.vendor=local",
            "--setattr=qpu.class=qpu",
            "--setattr=qpu.policy=min-queue",
            "--setattr=qpu.failover=simulator",
        ).stdout.strip()
        _run_to_release(qpu, jobid)
        assert "recombined" in qpu.output(jobid)
        result = json.loads((inst.workdir / "result.json").read_text())
        failed = [e for e in qpu.events(jobid) if e["name"] == "qpu-task-failed"]
        assert failed and all("readout chain failed" in e["context"]["reason"] for e in failed)
        assert "q-sim" in result["devices"] and "q-broken" not in result["devices"]
        _within(result, exact_values)
    finally:
        qpu.close()


def test_a_cut_over_max_cost_is_refused_before_any_task(inst):
    qpu = _world(inst, SPREAD, "costly")
    try:
        before = inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split()
        refused = _cut_submit(
            qpu, "--setattr=qpu.vendor=local", "--setattr=qpu.max_cost=5", check=False
        )
        assert refused.returncode != 0
        assert (
            "qpu.max_cost: the cut's 30 subexperiments may cost up to $69.00 (30 tasks of 2000 "
            "shots at up to $2.30), over qpu.max_cost $5.00; nothing was submitted"
        ) in refused.stderr, refused.stderr
        after = inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split()
        assert after == before
        assert qpu.emu.call_count("CreateQuantumTask") == 0
    finally:
        qpu.close()


def test_a_cut_over_a_quota_is_refused_before_any_task(tmp_path):
    """$20 a day for every user: one subexperiment ($2.30) fits, the 30 do not. The job
    is accepted (the quota is the site's, not the submitter's to know), then failed by
    the service before its first task, with the limit in one sentence; nothing charged."""
    quota = user_daily_limit(20.0)
    ledger = f'\n[quantum.ledger]\npath = "{tmp_path / "ledger.db"}"\n'
    instance = FluxInstance(tmp_path, size=1, config=quantum_config() + quota + ledger).start()
    (instance.workdir / "chain.qasm").write_text(chain(QUBITS))
    qpu = _world(instance, SPREAD, "quota")
    try:
        jobid = _cut_submit(qpu, "--setattr=qpu.vendor=local").stdout.strip()
        instance.wait_event(jobid, "clean")
        notes = [e["context"]["note"] for e in qpu.events(jobid) if e["name"] == "exception"]
        assert len(notes) == 1, qpu.events(jobid)
        assert notes[0] == (
            f"qpu: over quota: [quantum.quota] limit 1 'user-daily': user {_me()}, $20.00 a day;"
            f" $0.00 spent or reserved this day ({_today()}), its 30 tasks may cost up to $69.00"
        ), notes
        names = qpu.names(jobid)
        assert "qpu-submit" not in names and "qpu-task" not in names, names
        assert qpu.emu.call_count("CreateQuantumTask") == 0
        rows = json.loads(instance.quantum("usage", "--json").stdout)["rows"]
        assert all(row["tasks"] == 0 and float(row["total"]) == 0 for row in rows), rows
    finally:
        qpu.close()
        instance.stop()


def _me() -> str:
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _today() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%d")


def test_a_malformed_cut_is_refused_with_one_sentence_naming_the_option(inst):
    qpu = _world(inst, SPREAD, "malformed")
    try:
        refused = inst.quantum(
            "cut", "submit", f"--catalog={qpu.catalog}", "--observable=X24", "chain.qasm",
            "true", check=False, env=qpu.job_env,
        )  # fmt: skip
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            "flux-quantum: ERROR: observable 'X24' must be a Pauli string of 24 letters "
            "from IXYZ (the first for q[0]), or the qubits that are not I such as 'X11 Z12'"
        )
    finally:
        qpu.close()
