"""Flux tier: the compile stage on a real instance (issue 42's Done-when), the vendors'
real clients against the strict emulator: IBM's side refuses non-ISA circuits (1517),
IQM's refuses a ``cz`` on uncoupled qubits and gates outside its native set.

A Bell pair and ``examples/qaoa`` written in standard gates (the QAOA in Braket's
``cnot``), submitted with ``ibm:any``, ``iqm:any`` and ``any`` under every policy that
chooses among devices, complete with the right counts (Bell: only 00 and 11, both seen;
QAOA: within shot noise of the ideal distribution); each job's ``qpu-compile`` says
where its qubits went, and ``flux quantum task --program`` shows what ran. With the stage
switched off (``[quantum.compile] enabled = false``) the same programs are refused as
the vendors refuse them, so this test fails without the stage.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fluxinstance import FluxInstance, quantum_config
from ibm_setup import BELL
from qpu_setup import FAST, Qpu

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.emulator.iqm import IqmScenario

pytestmark = pytest.mark.flux

QAOA = (Path(__file__).resolve().parents[2] / "examples" / "qaoa" / "start.qasm").read_text()
IBM = {
    "backends": [
        {"name": "ibm_kingston", "qubits": 156, "queue": {"depth": 0, "service_time": 5}},
        {"name": "ibm_small", "qubits": 5, "queue": {"depth": 1, "service_time": 5}},
    ]
}
IQM = {"devices": [{"id": "garnet", "qubits": 20, "queue": {"depth": 0, "service_time": 5}}]}
CATALOG = """devices:
  - {name: kingston, vendor: ibm, id: ibm_kingston, class: qpu, qubits: 156,
     price: {per_minute: 96}, properties: {drain_seconds_per_task: 5}}
  - {name: small, vendor: ibm, id: ibm_small, class: qpu, qubits: 5,
     price: {per_minute: 96}, properties: {drain_seconds_per_task: 5}}
  - {name: garnet, vendor: iqm, id: garnet, class: qpu, qubits: 20,
     price: {per_minute: 18}, properties: {drain_seconds_per_task: 5}}
"""
SECRETS = ("_IAM_APIKEY", "_QRMI_IQM_ISA_TOKEN")
POLICIES = ("min-cost", "min-queue", "min-wait", "max-fidelity")
SHOTS = 10_000  # 64 outcomes: shot noise costs the Hellinger fidelity about 63 / (8 * SHOTS)


class Compiling(Qpu):
    """An instance whose service reaches the emulator's IBM and IQM sides (strict)."""

    def __init__(self, workdir: Path, config: str) -> None:
        import flux

        self.emu = Emulator(
            clock=ManualClock(epoch=datetime.now(UTC)),
            ibm=IbmScenario.from_dict(IBM),
            iqm=IqmScenario.from_dict(IQM),
        ).start()
        self.clock = self.emu.clock
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(CATALOG)
        (workdir / "bell.qasm").write_text(BELL)
        (workdir / "qaoa.qasm").write_text(QAOA)
        env = {**self.emu.ibm.env(self.emu.url), **self.emu.iqm.env(self.emu.url)}
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            self.inst = FluxInstance(workdir, size=1, config=config).start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.handle = flux.Flux(self.inst.uri)
        self.inst.env = {k: v for k, v in self.inst.env.items() if not k.endswith(SECRETS)}
        settings = {k: v for k, v in env.items() if not k.endswith(SECRETS)}
        self.job_env = {**settings, "FLUX_QUANTUM_BACKENDS": str(self.catalog)}

    def start_service(self, *extra: str) -> None:
        self.inst.quantum("service", "start", f"--catalog={self.catalog}", *FAST, *extra)

    def job_for(self, device: str, policy: str, program: str, *more: str) -> str:
        return self.submit(
            f"--setattr=qpu.device={device}",
            f"--setattr=qpu.policy={policy}",
            *more,
            f"--setattr=qpu.program={program}.qasm",
            f"--setattr=qpu.shots={SHOTS}",
            "--setattr=qpu.release_at=done",
            "flux",
            "quantum",
            "task",
            "--wait",
            "--json",
            at_front=False,
        )

    def settle(self, jobs: list[str], timeout: float = 300) -> None:
        """Advance the emulated queues until every job has ended (each waits for its
        own task's result, read through the vendor's clock)."""

        def done() -> bool:
            self.clock.advance(5)
            listed = self.inst.run(["flux", "jobs", "-n", "-o", "{state}", *jobs]).stdout
            return listed.split() == ["INACTIVE"] * len(jobs)

        self.until(done, timeout=timeout, step=0.5)


def world(tmp_path_factory, name: str, config: str) -> Iterator[Compiling]:
    site = Compiling(tmp_path_factory.mktemp(name), config)
    site.start_service()
    yield site
    site.inst.quantum("service", "stop", check=False)
    site.close()
    assert site.inst.stop() == 0, site.inst.broker_log()


@pytest.fixture(scope="module")
def on(tmp_path_factory) -> Iterator[Compiling]:
    yield from world(tmp_path_factory, "on", quantum_config())


@pytest.fixture(scope="module")
def off(tmp_path_factory) -> Iterator[Compiling]:
    yield from world(
        tmp_path_factory, "off", quantum_config() + "\n[quantum.compile]\nenabled = false\n"
    )


def ideal(program: str) -> dict[str, float]:
    """The program's ideal distribution, keyed as counts are (c[0] first)."""
    from qiskit.quantum_info import Statevector

    from flux_quantum.compiler.load import load

    circuit = load(program).remove_final_measurements(inplace=False)
    probabilities = Statevector(circuit).probabilities_dict()
    return {bits[::-1]: p for bits, p in probabilities.items() if p > 1e-12}


def hellinger_fidelity(counts: dict[str, int], expected: dict[str, float]) -> float:
    total = sum(counts.values())
    keys = set(counts) | set(expected)
    overlap = sum(math.sqrt(counts.get(k, 0) / total * expected.get(k, 0.0)) for k in keys)
    return overlap**2


def test_standard_gates_run_on_every_device_any_policy_picks(on: Compiling) -> None:
    jobs = {
        (device, policy, program): on.job_for(device, policy, program)
        for device in ("ibm:any", "iqm:any", "any")
        for policy in POLICIES
        for program in ("bell", "qaoa")
    }
    on.settle(list(jobs.values()))
    expected = {"bell": ideal(BELL), "qaoa": ideal(QAOA)}
    chosen = set()
    for (device, policy, program), jobid in jobs.items():
        assert on.inst.state(jobid) == "INACTIVE", (device, policy, program, on.names(jobid))
        out = json.loads(on.output(jobid))
        assert out["state"] == "COMPLETED" and sum(out["counts"].values()) == SHOTS, out
        fidelity = hellinger_fidelity(out["counts"], expected[program])
        assert fidelity >= 0.99, (device, policy, program, fidelity, out["counts"])
        compiled = on.context(jobid, "qpu-compile")
        where = on.context(jobid, "qpu-select")["device"]
        assert compiled["device"] == where and compiled["form"] == "mapped"
        assert len(compiled["layout"]) == (2 if program == "bell" else 6)
        chosen.add(where)
        if device == "iqm:any":
            assert where == "garnet"
        if program == "qaoa" and device == "ibm:any":
            # Five qubits cannot hold six: dropped with the reason, never chosen.
            assert where == "kingston"
            verdicts = {
                c["device"]: c["verdict"]
                for c in on.context(jobid, "qpu-select")["explanation"]["candidates"]
            }
            assert "has 5 qubits, the program declares 6" in verdicts.get("small", ""), verdicts
    assert {"kingston", "garnet"} <= chosen
    # What ran is visible: the compiled program and its layout.
    jobid = jobs[("ibm:any", "min-wait", "qaoa")]
    shown = on.inst.quantum("task", "--program", jobid).stdout
    assert "cz $" in shown and "cnot" not in shown


def test_with_the_stage_off_the_vendors_refuse_the_same_programs(off: Compiling) -> None:
    alone = "--setattr=qpu.failover=fail"  # refused: no other device tried
    jobs = {
        ("ibm:any", "bell"): off.job_for("ibm:any", "min-wait", "bell", alone),
        ("ibm:any", "qaoa"): off.job_for("ibm:any", "min-wait", "qaoa", alone),
        ("iqm:any", "qaoa"): off.job_for("iqm:any", "min-wait", "qaoa", alone),
    }
    off.settle(list(jobs.values()))
    notes = {}
    for key, jobid in jobs.items():
        failed = [e for e in off.events(jobid) if e["name"] == "exception"]
        assert failed, (key, off.names(jobid))
        notes[key] = failed[0]["context"]["note"]
        assert "qpu-compile" not in off.names(jobid)
    assert "non-ISA circuits" in notes[("ibm:any", "bell")], notes
    assert "non-ISA circuits" in notes[("ibm:any", "qaoa")], notes
    assert "is not allowed as locus for 'cz'" in notes[("iqm:any", "qaoa")], notes
