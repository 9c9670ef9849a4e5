"""qiskit-ibm-runtime as IBM's users write it, against the emulator: one step per call.

Run in the client's own environment (t/user_clients.py) with the emulator's environment
file's variables; ``python qiskit_runtime_client.py STEP [ARG]`` prints one JSON object:

- ``service``: the instances the service found and its backends' names;
- ``target BACKEND``: the backend's target (qubits, operations, a two-qubit gate's pairs);
- ``sampler BACKEND``: a Bell pair's counts run alone, twice in a Session and twice (two
  pubs) in a Batch, with the session ids;
- ``ride SESSION_ID BACKEND``: a Bell pair run in a session opened elsewhere (QRMI);
- ``bind BACKEND``: rx(theta) bound to pi at the run, its counts and job id.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

from qiskit import QuantumCircuit
from qiskit.circuit import Parameter
from qiskit.transpiler import generate_preset_pass_manager
from qiskit_ibm_runtime import Batch, QiskitRuntimeService, SamplerV2, Session

# 0.51 deprecates SamplerV2 for a client-side Sampler; SamplerV2 is what IBM's users run.
warnings.filterwarnings("ignore", category=DeprecationWarning)


def service() -> QiskitRuntimeService:
    """The service as docs/vendors.md writes it: IBM's arguments, plus the emulator's
    url and the emulator as the HTTP proxy."""
    return QiskitRuntimeService(
        channel="ibm_quantum_platform",
        token=os.environ["QISKIT_IBM_TOKEN"],
        instance=os.environ["QISKIT_IBM_INSTANCE"],
        url=os.environ["QISKIT_IBM_URL"],
        proxies={"urls": {"http": os.environ["FLUX_QUANTUM_EMULATOR_URL"]}},
    )


def bell(backend: object) -> QuantumCircuit:
    circuit = QuantumCircuit(2)
    circuit.h(0)
    circuit.cx(0, 1)
    circuit.measure_all()
    return generate_preset_pass_manager(backend=backend, optimization_level=1).run(circuit)


def counts(result: object, index: int = 0) -> dict[str, int]:
    return dict(result[index].data.meas.get_counts())  # type: ignore[index]


def main(step: str, *args: str) -> dict[str, object]:
    svc = service()
    if step == "service":
        return {"instances": svc.instances(), "backends": [b.name for b in svc.backends()]}
    backend = svc.backend(args[-1])
    if step == "target":
        target = backend.target
        two = next(g for g in ("cz", "ecr", "cx") if g in target.operation_names)
        return {
            "num_qubits": target.num_qubits,
            "operations": sorted(target.operation_names),
            "two_qubit": two,
            "pairs": sorted([list(q) for q in target[two]]),
        }
    circuit = bell(backend)
    if step == "sampler":
        alone = SamplerV2(mode=backend).run([circuit], shots=64).result()
        with Session(backend=backend) as session:
            sampler = SamplerV2(mode=session)
            first = sampler.run([circuit], shots=32).result()
            second = sampler.run([circuit], shots=32).result()
            session_id = session.session_id
        with Batch(backend=backend) as batch:
            both = SamplerV2(mode=batch).run([circuit, circuit], shots=16).result()
            batch_id = batch.session_id
        return {
            "alone": counts(alone),
            "session": [counts(first), counts(second)],
            "session_id": session_id,
            "batch": [counts(both, 0), counts(both, 1)],
            "batch_id": batch_id,
        }
    if step == "ride":
        session = Session.from_id(args[0], svc)
        job = SamplerV2(mode=session).run([circuit], shots=8)
        return {"counts": counts(job.result()), "job": job.job_id()}
    if step == "bind":
        theta = Parameter("theta")
        rotated = QuantumCircuit(1)
        rotated.rx(theta, 0)
        rotated.measure_all()
        isa = generate_preset_pass_manager(backend=backend, optimization_level=1).run(rotated)
        job = SamplerV2(mode=backend).run([(isa, [3.141592653589793])], shots=20)
        return {"counts": counts(job.result()), "job": job.job_id()}
    raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
