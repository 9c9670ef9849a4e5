"""The emulator accepts and refuses programs as the vendors do: IBM's ISA rule (error 1517),
through the real qrmi client on the cloud side and on an IBM Quantum System; IQM's native
set and couplers; a program wider than the device on every OpenQASM side; includes
(``stdgates.inc`` is a name, any other file is refused and never opened), read and
checked without running anything; heavy-hex and Garnet's maps as the sides publish them;
and the lenient switch."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import qrmi

from flux_quantum.emulator import Emulator, ManualClock, isa, openqasm, topology
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.emulator.openqasm import Operation, ProgramError
from flux_quantum.vendors.ibm.payload import counts_from_result

BELL = (
    'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\n'
    "h q[0];\ncx q[0], q[1];\nc = measure q;\n"
)
# The same Bell pair in a Heron's ISA (cz, rz, sx, x) on coupled physical qubits 0 and 1.
ISA_BELL = (
    'OPENQASM 3.0;\ninclude "stdgates.inc";\nbit[2] c;\n'
    "rz(pi/2) $0;\nsx $0;\nrz(pi/2) $0;\n"
    "rz(pi/2) $1;\nsx $1;\nrz(pi/2) $1;\ncz $0, $1;\nrz(pi/2) $1;\nsx $1;\nrz(pi/2) $1;\n"
    "c[0] = measure $0;\nc[1] = measure $1;\n"
)
HERON = ("cz", "id", "rz", "sx", "x")


# -- reading a program ----------------------------------------------------------------------------


def test_a_program_names_only_the_standard_libraries_and_no_file_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.inc").write_text("gate g a { x a; }\n")
    assert openqasm.includes(BELL) == ["stdgates.inc"]
    with pytest.raises(ProgramError, match='include "mine.inc" is not supported'):
        openqasm.for_simulator('OPENQASM 3.0;\ninclude "mine.inc";\nqubit q;\ng q;\n')
    with pytest.raises(ProgramError, match='include "/etc/passwd" is not supported'):
        openqasm.operations('OPENQASM 3.0;\ninclude "/etc/passwd";\nqubit q;\n')
    translated = openqasm.for_simulator(BELL)
    assert "include" not in translated and "gate cx a, b { cnot a, b; }" in translated
    # Without the standard library, its names are not defined for it.
    assert "gate cx" not in openqasm.for_simulator(BELL.replace('include "stdgates.inc";\n', ""))


def test_a_program_reads_as_its_width_and_its_operations_on_physical_qubits() -> None:
    assert openqasm.width(BELL) == 2
    assert openqasm.width("OPENQASM 3.0;\nqubit[100000] q;\nh q[0];\n") == 100_000
    assert openqasm.width(ISA_BELL) == 2 and openqasm.width("qreg a[3];\nqubit b;\n") == 4
    program = (
        'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] a;\nqubit[3] b;\nbit[3] c;\n'
        "h b;\ncx a[1], b[2];\nbarrier a, $7;\nfor int i in [0:1] { x a[i]; }\n"
        "if (c[0]) { reset b[0]; }\nctrl @ x a[0], b[0];\nc = measure b;\n"
    )
    assert openqasm.operations(program) == [
        Operation("h", (2,)), Operation("h", (3,)), Operation("h", (4,)),
        Operation("cx", (1, 4)), Operation("barrier", (0, 1, 7)), Operation("x", None),
        Operation("reset", (2,)), Operation("ctrl @ x", (0, 2)),
        Operation("measure", (2,)), Operation("measure", (3,)), Operation("measure", (4,)),
    ]  # fmt: skip
    with pytest.raises(ProgramError, match="does not parse"):
        openqasm.operations("OPENQASM 3.0;\nqubit q;\nh q\n")
    with pytest.raises(ProgramError, match="declares 100000 qubits but the device has 133"):
        openqasm.check_width("OPENQASM 3.0;\nqubit[100000] q;\n", 133)


def test_an_isa_circuit_uses_basis_gates_on_coupled_pairs_of_existing_qubits() -> None:
    fez = topology.heavy_hex(156)
    assert fez is not None
    assert isa.violation(ISA_BELL, HERON, fez, 156) is None
    assert isa.violation(BELL, HERON, fez, 156) == (
        "The instruction h on qubits (0,) is not supported by the target."
    )
    assert isa.violation("OPENQASM 3.0;\ncz $0, $2;\n", HERON, fez, 156) == (
        "The instruction cz on qubits (0, 2) is not supported by the target."
    )
    beyond = "OPENQASM 3.0;\nqubit[2] q;\nx q[5];\n"
    assert "qubits 0 to 4" in str(isa.violation(beyond, HERON, topology.line(5), 5))
    assert isa.violation("OPENQASM 3.0;\nqubit[100000] q;\n", HERON, fez, 133) == (
        "The circuit declares 100000 qubits but the target has 133."
    )
    assert isa.reason("x").startswith(isa.NON_ISA) and isa.reason("x").endswith("#1517")


@pytest.mark.parametrize(("qubits", "edges"), [(127, 144), (133, 150), (156, 176)])
def test_ibms_large_backends_are_heavy_hex(qubits: int, edges: int) -> None:
    pairs = topology.heavy_hex(qubits)
    assert pairs is not None and len(pairs) == edges
    degree = Counter(q for pair in pairs for q in pair)
    assert sorted(degree) == list(range(qubits)) and max(degree.values()) == 3
    assert topology.heavy_hex(20) is None
    assert len(topology.GARNET) == 30 and {q for p in topology.GARNET for q in p} == set(range(20))


# -- IBM's cloud and an IBM Quantum System, through qrmi -----------------------------------------


@pytest.fixture
def emulators(emulator_tier: None) -> Iterator[dict[str, Emulator]]:
    clock = ManualClock()
    scenario = IbmScenario.from_dict(
        {"backends": [{"name": "ibm_kingston", "qubits": 156, "queue": {"service_time": 5}}]}
    )
    strict = Emulator(clock=clock, ibm=scenario).start()
    lenient = Emulator(clock=clock, ibm=scenario, strict=False).start()
    yield {"strict": strict, "lenient": lenient, "clock": clock}  # type: ignore[dict-item]
    strict.stop()
    lenient.stop()


def _ibm(emu: Emulator) -> Any:
    config = {k: v for k, v in emu.ibm.env(emu.url).items() if k.startswith("QRMI_")}
    return qrmi.QuantumResource.from_config(
        "ibm_kingston", qrmi.ResourceType.IBMQuantumComputeService, config
    )


def _sampler(program: str) -> Any:
    document = json.dumps({"pubs": [[program]], "shots": 100, "version": 2})
    return qrmi.Payload.QiskitPrimitive(input=document, program_id="sampler")


def test_ibm_fails_a_non_isa_circuit_with_1517_and_runs_an_isa_one(
    emulators: dict[str, Any],
) -> None:
    strict, clock = emulators["strict"], emulators["clock"]
    res = _ibm(strict)
    refused = res.task_start(_sampler(BELL))
    assert res.task_status(refused) == qrmi.TaskStatus.Failed  # at once: it never queued
    doc = strict.ibm.runtime.job_document(refused, False)
    assert doc["state"]["reason_code"] == 1517
    assert doc["state"]["reason"].startswith(
        "Circuits do not match the target definition (non-ISA circuits). -- "
        "The instruction h on qubits (0,) is not supported by the target."
    )
    ran = res.task_start(_sampler(ISA_BELL))
    clock.advance(10)
    assert res.task_status(ran) == qrmi.TaskStatus.Completed
    counts = counts_from_result(res.task_result(ran).value)
    assert set(counts) <= {"00", "11"} and sum(counts.values()) == 100
    billed = {t["id"]: t for t in strict.report()["bill"]["tasks"]}
    assert billed[refused]["cost"] == 0.0 and billed[refused]["state"] == "FAILED"
    # The backend publishes the map and basis a transpiler compiles for.
    config = json.loads(res.target().value)
    pairs = {tuple(p) for p in config["configuration"]["coupling_map"]}
    assert len(pairs) == 2 * 176 and (0, 1) in pairs and (0, 2) not in pairs
    assert config["configuration"]["basis_gates"] == list(HERON)


def test_a_lenient_emulator_runs_what_ibm_would_refuse(emulators: dict[str, Any]) -> None:
    lenient, clock = emulators["lenient"], emulators["clock"]
    res = _ibm(lenient)
    task = res.task_start(_sampler(BELL))
    clock.advance(10)
    assert res.task_status(task) == qrmi.TaskStatus.Completed
    assert set(counts_from_result(res.task_result(task).value)) <= {"00", "11"}


def test_an_ibm_quantum_system_fails_a_non_isa_circuit_with_1517(emulator_tier: None) -> None:
    from served_ibmqs import Served

    clock = ManualClock()
    served = Served({"backends": [{"name": "ibm_kobe", "qubits": 5}]}, clock)
    try:
        res = served.resource("ibm_kobe")
        job = res.task_start(_sampler(BELL))
        assert res.task_status(job) == qrmi.TaskStatus.Failed
        with pytest.raises(Exception, match="code: 1517, message: Circuits do not match"):
            res.task_result(job)
        ecr = ISA_BELL.replace("cz $0, $1;", "ecr $0, $1;")
        ok = res.task_start(_sampler(ecr))
        clock.advance(10)
        assert res.task_status(ok) == qrmi.TaskStatus.Completed
    finally:
        served.server.stop()


# -- IQM -------------------------------------------------------------------------------------------


def test_iqm_refuses_a_cz_on_uncoupled_qubits_and_a_non_native_instruction(
    emulator_tier: None,
) -> None:
    from served_iqm import Served

    served = Served({"devices": [{"id": "garnet", "qubits": 20}]}, ManualClock())
    try:
        res = served.resource("garnet")

        def circuit(*instructions: dict[str, Any]) -> Any:
            measure = {"name": "measure", "qubits": ["QB1"], "args": {"key": "m"}}
            body = {"circuits": [{"name": "c", "instructions": [*instructions, measure]}],
                    "shots": 10}  # fmt: skip
            return qrmi.Payload.IQMServer(json.dumps(body), "circuit", False, None)

        far = {"name": "cz", "qubits": ["QB1", "QB20"], "args": {}}
        with pytest.raises(Exception, match=r"\('QB1', 'QB20'\) is not allowed as locus for 'cz'"):
            res.task_start(circuit(far))
        with pytest.raises(Exception, match="Unknown quantum operation 'h'"):
            res.task_start(circuit({"name": "h", "qubits": ["QB1"], "args": {}}))
        near = {"name": "cz", "qubits": ["QB1", "QB2"], "args": {}}
        assert res.task_start(circuit(near))
        # The couplers it checks are the ones it publishes for a transpiler.
        target = json.loads(res.target().value)
        text = json.dumps(target)
        assert '["QB1", "QB2"]' in text and '["QB1", "QB20"]' not in text
    finally:
        served.server.stop()


# -- every OpenQASM side: wider than the device ----------------------------------------------------


def test_every_openqasm_side_refuses_a_program_wider_than_its_device() -> None:
    from flux_quantum.emulator import programs

    wide = "OPENQASM 3.0;\nqubit[100000] q;\nbit[1] c;\nx q[0];\nc[0] = measure q[0];\n"
    with pytest.raises(ProgramError, match="declares 100000 qubits but the device has 25"):
        programs.run(programs.braket_source(wide), 10, 25, 20)
