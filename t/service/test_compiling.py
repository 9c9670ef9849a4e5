"""Unit tier: the compile stage in the handler service (service/compiling.py), on the
fakes of the outside world with real compile workers: the vendor receives the program
compiled for the device chosen (an ISA circuit IBM's own check accepts), recorded as
``qpu-compile`` with its layout; a device that cannot take the program is dropped with
its reason and the job fails naming each one; a bad program (binary, recursive, endless
loop, over the time limit) fails its job while held with one sentence, before any
create; a plain job after them completes; with the stage off the text goes as written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service_fakes import Harness

from flux_quantum.compiler import CompileLimits, CompilePool, DeviceTarget
from flux_quantum.emulator import isa, topology
from flux_quantum.protocol import events

HERON = ("cz", "id", "rz", "sx", "x")
FEZ = DeviceTarget.build(
    "fez", 156, HERON, topology.heavy_hex(156), calibration="2026-12-07T00:00:00Z"
)
BELL = 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\nh q[0];\ncx q[0], q[1];\nc = measure q;\n'
# Qubits 0 and 5 of a 156-qubit heavy-hex lattice are not coupled: routed.
FAR = (
    BELL.replace("qubit[2] q;", "qubit[6] q;")
    .replace("cx q[0], q[1];", "cx q[0], q[5];")
    .replace("c = measure q;", "c[0] = measure q[0];\nc[1] = measure q[5];")
)
BAD = {
    "binary": "OPENQASM 3.0;\n\0\0\x7fELF",
    "recursive": "OPENQASM 3.0;\ngate g a { g a; }\nqubit[1] q;\ng q[0];\n",
    "endless": 'OPENQASM 3.0;\ninclude "stdgates.inc";\nqubit[1] q;\n'
    "for int i in [0:1999999999] { h q[0]; }\n",
}


@pytest.fixture(scope="module")
def pool() -> Iterator[CompilePool]:
    compile_pool = CompilePool(CompileLimits(timeout=60.0, workers=1))
    yield compile_pool
    compile_pool.close()


def harness(pool: CompilePool | None) -> Harness:
    h = Harness(compiler=pool)
    h.ibm.targets["fez"] = FEZ
    return h


def submit(h: Harness, tmp_path, text: str, name: str = "p.qasm", **more) -> int:
    (tmp_path / name).write_text(text)
    return h.flux.submit({"device": "ibm:fez", "program": name, **more}, cwd=str(tmp_path))


def test_the_vendor_receives_the_program_compiled_for_the_device(pool, tmp_path):
    h = harness(pool)
    job = submit(h, tmp_path, FAR)
    h.until(lambda: h.flux.decoded(job, events.TASK))
    compiled = h.flux.last(job, events.COMPILE)
    assert compiled.device == "fez" and compiled.form == "mapped"
    assert compiled.layout is not None and len(compiled.layout) == 6
    assert compiled.calibration == FEZ.calibration and compiled.two_qubit_gates >= 1
    token = h.flux.last(job, events.SUBMIT).token
    sent = h.ibm.sent[token]
    assert sent == compiled.program
    # What IBM's check of ISA circuits says of each: the textbook one is refused.
    assert isa.violation(FAR, HERON, FEZ.pairs, 156) is not None
    assert isa.violation(sent, HERON, FEZ.pairs, 156) is None
    # Compiled before anything was recorded for the create.
    names = [e.name for e in h.flux.jobs[job].events]
    assert names.index(events.COMPILE) < names.index(events.SUBMIT)


def test_compiling_runs_in_the_stage_s_own_lane_not_the_vendor_workers(pool, tmp_path):
    # The service gives its compile calls threads of their own (VendorWorkers.lane): a
    # burst of programs waiting for a compile worker holds no vendor call back.
    lane: list[object] = []

    def compile_lane(call, done):
        lane.append(call)
        h.workers.submit(call, done)

    h = Harness(compiler=pool, compile_lane=compile_lane)
    h.ibm.targets["fez"] = FEZ
    job = submit(h, tmp_path, FAR)
    h.until(lambda: h.flux.decoded(job, events.TASK))
    assert len(lane) == 1
    assert h.flux.decoded(job, events.COMPILE)


def test_with_the_stage_off_the_program_goes_as_written(tmp_path):
    h = harness(None)
    job = submit(h, tmp_path, FAR)
    h.until(lambda: h.flux.decoded(job, events.TASK))
    assert h.flux.decoded(job, events.COMPILE) == []
    assert h.ibm.sent[h.flux.last(job, events.SUBMIT).token] == FAR


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_program_fails_its_job_while_held_with_one_sentence(pool, tmp_path, kind):
    h = harness(pool)
    job = submit(h, tmp_path, BAD[kind])
    h.until(lambda: h.state(job) == "failed")
    note = h.flux.jobs[job].note or ""
    assert note.startswith("qpu: ") and note.count(". ") == 0, note
    expected = {
        "binary": "NUL bytes",
        "recursive": "gate g is defined in terms of itself",
        "endless": "operations with its loops unrolled",
    }[kind]
    assert expected in note
    assert h.ibm.count("submit") == 0 and h.flux.decoded(job, events.SUBMIT) == []
    # The service goes on: a plain job after it completes.
    plain = submit(h, tmp_path, BELL, "bell.qasm")
    h.until(lambda: h.state(plain) == "released")


def test_a_program_over_the_time_limit_fails_and_the_next_job_runs(tmp_path):
    slow = CompilePool(CompileLimits(timeout=0.01, workers=1))
    try:
        h = harness(slow)
        wide = "".join(f"cx q[{i}], q[{(i * 37 + 11) % 120}];\n" for i in range(120))
        program = (
            BELL.replace("qubit[2] q;", "qubit[120] q;")
            .replace("cx q[0], q[1];\n", wide)
            .replace("c = measure q;", "c[0] = measure q[0];")
        )
        job = submit(h, tmp_path, program)
        h.until(lambda: h.state(job) == "failed")
        note = h.flux.jobs[job].note or ""
        assert "took longer than the limit of 0.01 s" in note
        assert h.ibm.count("submit") == 0
    finally:
        slow.close()


def test_a_device_too_narrow_is_dropped_with_its_reason(pool, tmp_path):
    h = harness(pool)
    h.ibm.targets["fez"] = DeviceTarget.build("fez", 4, HERON, topology.line(4))
    job = submit(h, tmp_path, FAR)
    h.until(lambda: h.state(job) == "failed")
    note = h.flux.jobs[job].note or ""
    assert "fez" in note and "declares 6 qubits and fez has 4" in note, note
    assert h.ibm.count("submit") == 0


def test_max_fidelity_weighs_the_program_as_compiled_for_the_device(pool, tmp_path):
    h = harness(pool)
    pairs = topology.heavy_hex(156)
    assert pairs is not None
    h.ibm.targets["fez"] = DeviceTarget.build(
        "fez", 156, HERON, pairs,
        one_qubit_error={str(q): 0.001 for q in range(156)},
        two_qubit_error={f"{a}-{b}": 0.01 for a, b in pairs},
        readout_error={str(q): 0.02 for q in range(156)}, calibration="c1",
    )  # fmt: skip
    (tmp_path / "far.qasm").write_text(FAR)
    job = h.flux.submit(
        {"device": "ibm:any", "policy": "max-fidelity", "program": "far.qasm"},
        cwd=str(tmp_path),
    )
    h.until(lambda: h.flux.decoded(job, events.TASK))
    compiled = h.flux.last(job, events.COMPILE)
    candidates = h.flux.last(job, events.SELECT).explanation["candidates"]
    row = next(c for c in candidates if c["device"] == "fez")
    # The figure the policy used is the compiled circuit's, on its routed gates.
    assert row["success"] == pytest.approx(compiled.success, abs=1e-4)
    # Its routed two-qubit gates and both readouts count (one-qubit gates too).
    assert compiled.success <= 0.99**compiled.two_qubit_gates * 0.98**2
    assert compiled.success > 0.99 ** (compiled.two_qubit_gates + 1) * 0.98**2 * 0.999**40
    assert h.ibm.count("target") == 1  # read once: the task's program is the one weighed
