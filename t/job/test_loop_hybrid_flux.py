"""Flux tier: a variational loop's steps on a busy Braket QPU ride one Braket hybrid job
(``flux quantum loop submit --session dedicated`` where the catalog names the job's
role), on a real instance with the real service and the real SDK against the emulator
(a ManualClock the test advances): each step's task runs ahead of the device's 1,000 s
public queue, ``flux quantum loop status`` says the choice and its price, and the job
is cancelled once the loop has ended."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fluxinstance import FluxInstance
from loop_setup import PROGRAM, STEP_SH
from qpu_setup import Qpu, catalog_text

pytestmark = pytest.mark.flux

HYBRID = (
    "vendors:\n"
    "  local: {hybrid_role_arn: 'arn:aws:iam::123456789012:role/flux-quantum-hybrid', "
    "hybrid_price: 0.36, hybrid_start_timeout: 120}\n"
)


@pytest.fixture(scope="module")
def inst(tmp_path_factory) -> Iterator[FluxInstance]:
    instance = FluxInstance(tmp_path_factory.mktemp("hybrid"), size=1).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture
def qpu(inst: FluxInstance) -> Iterator[Qpu]:
    catalog = inst.workdir / "backends.yaml"
    catalog.write_text(catalog_text() + HYBRID)
    (inst.workdir / "program.qasm").write_text(PROGRAM)
    (inst.workdir / "step.sh").write_text(STEP_SH)
    q = Qpu(inst, catalog)
    yield q
    q.close()


def loop(qpu: Qpu, *args: str, check: bool = True):
    return qpu.inst.quantum("loop", *args, check=check, env=qpu.job_env)


def test_a_loops_tasks_ride_a_hybrid_job_ahead_of_a_busy_queue(qpu: Qpu) -> None:
    qpu.start_service()
    loop(
        qpu, "submit", "--name=hyb", "--qpu=local:q-slow", "--session=dedicated",
        "--max-iterations=2", "--program=program.qasm", "--shots=10", "--", "sh", "step.sh",
    )  # fmt: skip
    # The service created the job and waits for it to run (60 s of start-up).
    qpu.until(lambda: qpu.emu.call_count("CreateJob") == 1, timeout=60)
    qpu.advance(61)
    status = lambda: json.loads(loop(qpu, "status", "--json", "hyb").stdout)  # noqa: E731
    first = qpu.until(lambda: status()["steps"] and status()["steps"][0], timeout=30)
    qpu.wait_event(first["job"], "qpu-task", timeout=60)
    opened = qpu.context(first["job"], "qpu-session")
    assert (opened["requested"], opened["mode"]) == ("dedicated", "hybrid")
    assert "$0.36/h" in opened["reason"] and "ahead of the public queue" in opened["reason"]
    # The loop's tasks run ahead of q-slow's 100 public tasks (1,000 s): each is done
    # within two of its 10 s service times.
    waited = 0.0
    while loop(qpu, "wait", "hyb", "--timeout=1", check=False).returncode != 0:
        assert waited < 120, status()
        qpu.advance(10)
        waited += 10
    summary = status()
    assert summary["state"] == "max-iterations" and len(summary["steps"]) == 2
    bill = qpu.emu.report()["bill"]
    [job] = [s for s in bill["sessions"] if s["mode"] == "hybrid"]
    assert job["jobs"] == [s["task"] for s in summary["steps"]]
    assert summary["session"]["mode"] == "hybrid"
    said = loop(qpu, "status", "hyb").stdout
    assert "hyb: hybrid session on q-slow: a Braket hybrid job on q-slow" in said, said
    assert "$0.36/h, billed per second" in said, said
    # Closed once the loop ended (loop_linger after its last step).
    qpu.until(
        lambda: (
            [s for s in qpu.emu.report()["bill"]["sessions"] if s["mode"] == "hybrid"][0]["state"]
            == "closed"
        ),
        timeout=60,
    )
