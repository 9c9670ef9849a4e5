"""qiskit-ibm-runtime, IBM's own client, against the emulator's IBM side (emulator tier).

``QiskitRuntimeService`` on channel ``ibm_quantum_platform`` reaches the emulator as its
HTTP proxy (``url="http://cloud.ibm.com"``): instance discovery (IAM, Global Search,
Global Catalog), the backends and their ``target``, SamplerV2 alone, in a ``Session``
and in a ``Batch``, and a session QRMI opened, ridden by qiskit-ibm-runtime (one state).
The client runs in its own environment, as a user's job would (t/user_clients.py: it
cannot share a pip resolution with flux-quantum's oqtopus-client), in a subprocess
(t/clients/qiskit_runtime_client.py, one step per call) given the emulator's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import qrmi
from user_clients import qiskit_runtime_python

from flux_quantum.emulator import Emulator, WallClock
from flux_quantum.emulator.ibm import IbmScenario

pytestmark = pytest.mark.emulator

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "qiskit_runtime_client.py"
BACKEND = {"name": "ibm_line", "qubits": 5, "queue": {"depth": 2, "service_time": 10}}
# 600 emulated seconds a second: the client polls on its own clock, the queue drains.
SPEED = 600.0


@pytest.fixture(scope="module")
def python() -> Path:
    return qiskit_runtime_python()


@pytest.fixture
def emu(emulator_tier: None) -> Iterator[Emulator]:
    scenario = IbmScenario.from_dict({"backends": [BACKEND]})
    emulator = Emulator(clock=WallClock(speed=SPEED), ibm=scenario).start()
    yield emulator
    emulator.stop()


def client(python: Path, emu: Emulator, *step: str) -> Any:
    """One step of the client, in its environment, given the emulator's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QISKIT_", "IAM_"))}
    env.update(emu.env())
    done = subprocess.run(
        [str(python), str(CLIENT), *step],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_service_finds_the_instance_and_its_backends(python: Path, emu: Emulator) -> None:
    found = client(python, emu, "service")
    [instance] = found["instances"]
    assert instance["crn"] == emu.env()["QISKIT_IBM_INSTANCE"]
    assert instance["plan"] == "pay-as-you-go" and instance["pricing_type"] == "paygo"
    assert found["backends"] == ["ibm_line"]
    operations = {c.operation for c in emu.ibm.calls}
    assert {"IamToken", "ListBackends", "GetBackendConfiguration"} <= operations


def test_a_backend_target_is_the_scenarios_backend(python: Path, emu: Emulator) -> None:
    target = client(python, emu, "target", "ibm_line")
    spec = emu.ibm.scenario.backend("ibm_line")
    assert spec is not None
    assert target["num_qubits"] == spec.qubits == 5
    assert set(spec.basis_gates) | {"measure"} <= set(target["operations"])
    assert [0, 1] in target["pairs"] and [1, 0] in target["pairs"]
    assert [0, 2] not in target["pairs"]  # the backend's coupling map, not all-to-all


def test_sampler_alone_in_a_session_and_in_a_batch(python: Path, emu: Emulator) -> None:
    ran = client(python, emu, "sampler", "ibm_line")
    assert set(ran["alone"]) <= {"00", "11"} and sum(ran["alone"].values()) == 64
    assert [sum(c.values()) for c in ran["session"]] == [32, 32]
    assert [sum(c.values()) for c in ran["batch"]] == [16, 16]
    assert all(set(c) <= {"00", "11"} for c in ran["session"] + ran["batch"])
    session_id, batch_id = ran["session_id"], ran["batch_id"]
    assert len(emu.ibm.session_jobs(session_id)) == 2
    assert emu.ibm.session_state(session_id) != "open"  # the with-block closed it
    modes = {row["id"]: row["mode"] for row in emu.report()["bill"]["sessions"]}
    assert modes[session_id] == "dedicated" and modes[batch_id] == "batch"


def test_a_session_qrmi_opened_is_ridden_by_qiskit_ibm_runtime(python: Path, emu: Emulator) -> None:
    """One state: the session QRMI acquires (as flux-quantum does for a job) is the one
    qiskit-ibm-runtime's Session.from_id finds and runs in."""
    config = {k: v for k, v in emu.ibm.env(emu.url).items() if k.startswith("QRMI_")}
    resource = qrmi.QuantumResource.from_config(
        "ibm_line", qrmi.ResourceType.IBMQuantumComputeService, config
    )
    session_id = resource.acquire()
    rode = client(python, emu, "ride", session_id, "ibm_line")
    assert set(rode["counts"]) <= {"00", "11"} and sum(rode["counts"].values()) == 8
    assert emu.ibm.session_jobs(session_id) == [rode["job"]]
    resource.release(session_id)
    assert emu.ibm.session_state(session_id) != "open"


def test_a_pub_with_parameter_values_is_bound(python: Path, emu: Emulator) -> None:
    bound = client(python, emu, "bind", "ibm_line")
    assert bound["counts"] == {"1": 20}  # rx(pi) flips the qubit
    assert emu.ibm.job_params(bound["job"])["pubs"]  # the job keeps what was sent
