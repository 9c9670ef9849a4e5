"""qiskit-ibm-runtime, IBM's own client, against the emulator's IBM side (emulator tier).

``QiskitRuntimeService`` on channel ``ibm_quantum_platform`` reaches the emulator as its
HTTP proxy (``url="http://cloud.ibm.com"``): instance discovery (IAM, Global Search,
Global Catalog), the backends and their ``target``, SamplerV2 alone, in a ``Session``
and in a ``Batch``, and a session QRMI opened, ridden by qiskit-ibm-runtime (one state).
qiskit-ibm-runtime 0.51 cannot share one pip resolution with oqtopus-client 1.3 (urllib3
>= 2.4 against < 2.1), so it is not in the test extra: these tests skip loudly where it
is not installed (``pip install 'qiskit-ibm-runtime>=0.51,<0.52'`` after the extra).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import qrmi

from flux_quantum.emulator import Emulator, WallClock
from flux_quantum.emulator.ibm import IbmScenario

pytestmark = [
    pytest.mark.emulator,
    # 0.51 deprecates SamplerV2 for a client-side Sampler; SamplerV2 is what IBM's users run.
    pytest.mark.filterwarnings("ignore:The SamplerV2 class is deprecated:DeprecationWarning"),
]

runtime = pytest.importorskip(
    "qiskit_ibm_runtime",
    reason="qiskit-ibm-runtime is not installed (pip install 'qiskit-ibm-runtime>=0.51,<0.52')",
)

BACKEND = {"name": "ibm_line", "qubits": 5, "queue": {"depth": 2, "service_time": 10}}
# 600 emulated seconds a second: the client polls on its own clock, the queue drains.
SPEED = 600.0


@pytest.fixture
def emu(emulator_tier: None) -> Iterator[Emulator]:
    scenario = IbmScenario.from_dict({"backends": [BACKEND]})
    emulator = Emulator(clock=WallClock(speed=SPEED), ibm=scenario).start()
    yield emulator
    emulator.stop()


def service_for(emu: Emulator) -> Any:
    """A QiskitRuntimeService as the docs write it, from the emulator's environment."""
    env = emu.env()
    os.environ["IAM_URL"] = env["IAM_URL"]
    return runtime.QiskitRuntimeService(
        channel=env["QISKIT_IBM_CHANNEL"],
        url=env["QISKIT_IBM_URL"],
        token=env["QISKIT_IBM_TOKEN"],
        instance=env["QISKIT_IBM_INSTANCE"],
        proxies={"urls": {"http": emu.url}},
    )


def bell(backend: Any) -> Any:
    from qiskit import QuantumCircuit
    from qiskit.transpiler import generate_preset_pass_manager

    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.measure_all()
    return generate_preset_pass_manager(backend=backend, optimization_level=1).run(circuit)


@pytest.fixture(autouse=True)
def _iam_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IAM_URL", raising=False)


def test_the_service_finds_the_instance_and_its_backends(emu: Emulator) -> None:
    service = service_for(emu)
    [instance] = service.instances()
    assert instance["crn"] == emu.env()["QISKIT_IBM_INSTANCE"]
    assert instance["plan"] == "pay-as-you-go" and instance["pricing_type"] == "paygo"
    assert [b.name for b in service.backends()] == ["ibm_line"]
    operations = {c.operation for c in emu.ibm.calls}
    assert {"IamToken", "ListBackends", "GetBackendConfiguration"} <= operations


def test_a_backend_target_is_the_scenarios_backend(emu: Emulator) -> None:
    backend = service_for(emu).backend("ibm_line")
    target = backend.target
    spec = emu.ibm_scenario.backend("ibm_line")
    assert spec is not None
    assert target.num_qubits == spec.qubits == 5
    assert set(spec.basis_gates) | {"measure"} <= set(target.operation_names)
    two_qubit = next(g for g in spec.basis_gates if g in ("cz", "ecr", "cx"))
    assert (0, 1) in target[two_qubit] and (1, 0) in target[two_qubit]
    assert (0, 2) not in target[two_qubit]  # the backend's coupling map, not all-to-all


def test_sampler_alone_in_a_session_and_in_a_batch(emu: Emulator) -> None:
    service = service_for(emu)
    backend = service.backend("ibm_line")
    circuit = bell(backend)
    alone = runtime.SamplerV2(mode=backend).run([circuit], shots=64).result()
    assert set(alone[0].data.meas.get_counts()) <= {"00", "11"}
    assert sum(alone[0].data.meas.get_counts().values()) == 64

    with runtime.Session(backend=backend) as session:
        sampler = runtime.SamplerV2(mode=session)
        first = sampler.run([circuit], shots=32).result()
        second = sampler.run([circuit], shots=32).result()
        session_id = session.session_id
    assert set(first[0].data.meas.get_counts()) <= {"00", "11"}
    assert sum(second[0].data.meas.get_counts().values()) == 32
    assert len(emu.ibm.session_jobs(session_id)) == 2
    assert emu.ibm.session_state(session_id) != "open"  # the with-block closed it

    with runtime.Batch(backend=backend) as batch:
        result = runtime.SamplerV2(mode=batch).run([circuit, circuit], shots=16).result()
        batch_id = batch.session_id
    assert [sum(pub.data.meas.get_counts().values()) for pub in result] == [16, 16]
    document = emu.report()["bill"]["sessions"]
    modes = {row["id"]: row["mode"] for row in document}
    assert modes[session_id] == "dedicated" and modes[batch_id] == "batch"


def test_a_session_qrmi_opened_is_ridden_by_qiskit_ibm_runtime(emu: Emulator) -> None:
    """One state: the session QRMI acquires (as flux-quantum does for a job) is the one
    qiskit-ibm-runtime's Session.from_id finds and runs in."""
    config = {k: v for k, v in emu.ibm_env().items() if k.startswith("QRMI_")}
    resource = qrmi.QuantumResource.from_config(
        "ibm_line", qrmi.ResourceType.IBMQuantumComputeService, config
    )
    session_id = resource.acquire()
    service = service_for(emu)
    session = runtime.Session.from_id(session_id, service)
    circuit = bell(service.backend("ibm_line"))
    job = runtime.SamplerV2(mode=session).run([circuit], shots=8)
    assert set(job.result()[0].data.meas.get_counts()) <= {"00", "11"}
    assert emu.ibm.session_jobs(session_id) == [job.job_id()]
    resource.release(session_id)
    assert emu.ibm.session_state(session_id) != "open"


def test_a_pub_with_parameter_values_is_bound(emu: Emulator) -> None:
    from qiskit import QuantumCircuit
    from qiskit.circuit import Parameter
    from qiskit.transpiler import generate_preset_pass_manager

    service = service_for(emu)
    backend = service.backend("ibm_line")
    theta = Parameter("theta")
    circuit = QuantumCircuit(1)
    circuit.rx(theta, 0)
    circuit.measure_all()
    isa = generate_preset_pass_manager(backend=backend, optimization_level=1).run(circuit)
    flipped = runtime.SamplerV2(mode=backend).run([(isa, [3.141592653589793])], shots=20)
    assert flipped.result()[0].data.meas.get_counts() == {"1": 20}
    params = emu.ibm.job_params(flipped.job_id())
    assert json.dumps(params)  # the job keeps what the client sent
