"""The emulator's IonQ side through IonQ's real client (ionq-core 0.2.0): backends with
their status and queue, circuit jobs (OpenQASM 3 and IonQ's qis gate list) queued, run,
completed on the emulated clock and read as probabilities, the noise models of the
simulator, cancel, jobs listed by backend, a failed job's reason, refusals (a wrong key,
an unknown job, too many shots), sessions and their job-count, cost and duration limits
(a job over the cost limit refused as IonQ refuses it, 400 with its message), injected
faults, the settings ``env()`` gives and the scenario's errors."""

from __future__ import annotations

from typing import Any

import pytest
from ionq_core import AuthenticationError, BadRequestError, NotFoundError, ServerError
from ionq_core.api.backends import get_backend, get_backends
from ionq_core.api.default import (
    cancel_job,
    create_job,
    create_session,
    end_session,
    get_job,
    get_job_probabilities,
    get_jobs,
    get_session,
)
from ionq_core.models.circuit_job_creation_payload import CircuitJobCreationPayload
from ionq_core.models.create_session_request import CreateSessionRequest
from ionq_core.models.session_cost_limit import SessionCostLimit
from ionq_core.models.session_settings_request import SessionSettingsRequest
from served_ionq import BACKENDS, BELL, BELL_QIS, Served
from served_side import serve_fixture

from flux_quantum.emulator import ScenarioError
from flux_quantum.emulator.ionq import IonqScenario
from flux_quantum.vendors.ionq.vendor import counts_from_probabilities

serve = serve_fixture(Served, backends=BACKENDS)


def job(client: Any, backend: str = "qpu.aria-1", shots: int = 100, **extra: Any) -> str:
    body = {"type": "ionq.qasm3.v1", "backend": backend, "shots": shots, "input": {"data": BELL}}
    payload = CircuitJobCreationPayload.from_dict({**body, **extra})
    return create_job.sync(client=client, body=payload).id


def session(client: Any, backend: str = "qpu.aria-1", **settings: Any) -> Any:
    return create_session.sync(
        client=client,
        body=CreateSessionRequest(backend=backend, settings=SessionSettingsRequest(**settings)),
    )


def test_env_gives_the_url_and_the_key(serve):
    served = serve()
    env = served.service.env(served.url)
    assert env == {
        "IONQ_API_URL": served.url + "/ionq/v0.4",
        "IONQ_API_KEY": served.service.scenario.api_key,
    }


def test_backends_with_status_and_queue(serve, clock):
    served = serve()
    client = served.client()
    backends = {b.backend: b for b in get_backends.sync(client=client)}
    assert set(backends) == {"qpu.aria-1", "qpu.forte-1", "simulator"}
    assert backends["qpu.forte-1"].status == "unavailable"
    aria = get_backend.sync(backend="qpu.aria-1", client=client)
    assert aria.status == "available" and aria.qubits == 25
    assert aria.average_queue_time == 10_000  # one job waiting, 10 s each, in milliseconds
    clock.advance(30)
    assert get_backend.sync(backend="qpu.aria-1", client=client).average_queue_time == 0
    with pytest.raises(NotFoundError, match="Backend qpu.nope not found"):
        get_backend.sync(backend="qpu.nope", client=client)


def test_job_queues_runs_and_gives_probabilities(serve, clock):
    served = serve()
    client = served.client()
    job_id = job(client, shots=200, metadata={"flux_quantum_token": "t-1"})
    first = get_job.sync(uuid=job_id, client=client)
    assert first.status == "ready" and first.metadata.additional_properties == {
        "flux_quantum_token": "t-1"
    }
    with pytest.raises(NotFoundError, match="no results: it is ready"):
        get_job_probabilities.sync(uuid=job_id, client=client)
    clock.advance(25)  # the running and the waiting background jobs, 10 s each
    assert get_job.sync(uuid=job_id, client=client).status == "started"
    clock.advance(10)
    done = get_job.sync(uuid=job_id, client=client)
    assert done.status == "completed" and done.stats.qubits == 2
    assert done.execution_duration_ms == 10_000
    probabilities = get_job_probabilities.sync(uuid=job_id, client=client).additional_properties
    assert set(probabilities) == {"0", "3"} and sum(probabilities.values()) == pytest.approx(1.0)
    counts = counts_from_probabilities(probabilities, 200, 2)
    assert set(counts) == {"00", "11"} and sum(counts.values()) == 200
    [billed] = served.service.bill().tasks
    assert billed.state == "COMPLETED" and billed.cost == pytest.approx(0.30 + 0.03 * 200)


def test_qis_circuits_and_state_order(serve, clock):
    served = serve()
    client = served.client()
    flip = {"gateset": "qis", "qubits": 3, "circuit": [{"gate": "x", "target": 1}]}
    ids = [
        job(client, "simulator", 50, type="ionq.circuit.v1", input=BELL_QIS),
        job(client, "simulator", 50, type="ionq.circuit.v1", input=flip),
    ]
    clock.advance(5)
    bell, one = (
        get_job_probabilities.sync(uuid=i, client=client).additional_properties for i in ids
    )
    assert set(bell) == {"0", "3"}
    assert one == {"2": 1.0}  # qubit 1 set: the state's bit 1
    assert counts_from_probabilities(one, 50, 3) == {"010": 50}


def test_noise_models_on_the_simulator_only(serve, clock):
    served = serve()
    client = served.client()
    noisy = job(client, "simulator", 2000, noise={"model": "aria-1", "seed": 7})
    clock.advance(5)
    probabilities = get_job_probabilities.sync(uuid=noisy, client=client).additional_properties
    assert {"1", "2"} & set(probabilities)  # readout flips: states a Bell pair never gives
    with pytest.raises(BadRequestError, match="noise.model on qpu.aria-1 must be one of: none"):
        job(client, noise={"model": "aria-1"})


def test_cancel_list_and_failures(serve, clock):
    served = serve(faults=[{"operation": "CreateJob", "fail_job": "ion lost", "calls": [2]}])
    client = served.client()
    waiting = job(client)
    failing = job(client)
    wide = job(client, "simulator", 10, type="ionq.circuit.v1",
               input={"gateset": "qis", "qubits": 30, "circuit": [{"gate": "h", "target": 29}]})  # fmt: skip
    assert cancel_job.sync(uuid=waiting, client=client).status == "canceled"
    assert get_job.sync(uuid=waiting, client=client).status == "canceled"
    clock.advance(60)
    failed = get_job.sync(uuid=failing, client=client)
    assert failed.status == "failed"
    assert (failed.failure.code, failed.failure.message) == ("QuantumComputerError", "ion lost")
    refused = get_job.sync(uuid=wide, client=client)
    assert refused.status == "failed" and refused.failure.code == "NotEnoughQubits"
    listed = get_jobs.sync(client=client, target="qpu.aria-1")
    assert [j.id for j in listed.jobs] == [failing, waiting] and listed.next_ is None
    page = get_jobs.sync(client=client, target="qpu.aria-1", limit=1)
    assert [j.id for j in page.jobs] == [failing] and page.next_ == failing
    assert [
        j.id for j in get_jobs.sync(client=client, next_=page.next_, target="qpu.aria-1").jobs
    ] == [waiting]


def test_refusals(serve):
    served = serve()
    client = served.client()
    with pytest.raises(AuthenticationError, match="Invalid API key"):
        get_backends.sync(client=served.client(api_key="wrong"))
    with pytest.raises(NotFoundError, match="Job nope not found"):
        get_job.sync(uuid="nope", client=client)
    with pytest.raises(BadRequestError, match="shots must be an integer from 1 to 100000"):
        job(client, shots=100_001)
    with pytest.raises(BadRequestError, match="Backend qpu.forte-1 is unavailable"):
        job(client, "qpu.forte-1")
    with pytest.raises(BadRequestError, match="input: input.data must be an OpenQASM 3 program"):
        job(client, input={"data": ""})


def test_session_cost_limit_refuses_the_job_that_would_exceed_it(serve, clock):
    served = serve()
    client = served.client()
    opened = session(client, cost_limit=SessionCostLimit(value=4.0, unit="usd"))
    assert opened.status == "created" and opened.settings.cost_limit.value == 4.0
    first = job(client, session_id=opened.id)  # $0.30 + 100 x $0.03 = $3.30
    assert get_job.sync(uuid=first, client=client).session_id == opened.id
    assert get_session.sync(session_id=opened.id, client=client).status == "started"
    with pytest.raises(BadRequestError) as refused:
        job(client, session_id=opened.id)
    assert refused.value.status_code == 400
    assert refused.value.message == (
        "Session cost limit exceeded: the job would cost $3.30 and the session has $3.30 "
        "of its $4.00 limit spent."
    )
    assert opened.id not in refused.value.message  # a session id is a secret
    assert len(served.service.job_ids()) == 1  # nothing was created
    with pytest.raises(BadRequestError, match="would cost \\$0.90 and the session has \\$3.30"):
        job(client, shots=20, session_id=opened.id)
    job(client, shots=10, session_id=opened.id)  # $0.60 more fits: $3.90
    # A job cancelled before it ran is not billed: its cost no longer counts.
    cancel_job.sync(uuid=first, client=client)
    job(client, session_id=opened.id)


def test_session_job_count_duration_backend_and_end(serve, clock):
    served = serve()
    client = served.client()
    counted = session(client, job_count_limit=1, duration_limit_min=1)
    job(client, session_id=counted.id)
    with pytest.raises(BadRequestError, match="reached its job count limit of 1"):
        job(client, session_id=counted.id)
    other = session(client)
    with pytest.raises(
        BadRequestError, match="The session is on qpu.aria-1; the job targets simulator"
    ):
        job(client, "simulator", session_id=other.id)
    clock.advance(61)
    assert get_session.sync(session_id=counted.id, client=client).status == "ended"
    ended = end_session.sync(session_id=other.id, client=client)
    assert ended.status == "ended" and ended.active is False and ended.ended_at is not None
    with pytest.raises(BadRequestError, match="The session has ended"):
        job(client, session_id=other.id)
    with pytest.raises(NotFoundError, match="Session nope not found"):
        get_session.sync(session_id="nope", client=client)
    with pytest.raises(BadRequestError, match="cost_limit.value must be a number > 0"):
        session(client, cost_limit=SessionCostLimit(value=0.0, unit="usd"))


def test_injected_fault_is_answered_in_ionqs_shape(serve):
    served = serve(faults=[{"operation": "GetBackend", "status": 503, "calls": [1]}])
    client = served.client()
    with pytest.raises(ServerError, match="Injected fault"):
        get_backend.sync(backend="qpu.aria-1", client=client)
    assert get_backend.sync(backend="qpu.aria-1", client=client).status == "available"
    assert served.service.counts()[0]["GetBackend"] == 2


def test_scenario_errors_name_the_field():
    with pytest.raises(ScenarioError, match=r"backend 'x': status must be one of available"):
        IonqScenario.from_dict({"backends": [{"name": "x", "status": "down"}]})
    with pytest.raises(ScenarioError, match=r"noise_models must be one of ideal"):
        IonqScenario.from_dict({"backends": [{"name": "x", "noise_models": ["loud"]}]})
    assert [b.name for b in IonqScenario.default().backends] == [
        "qpu.aria-1", "qpu.forte-1", "simulator",
    ]  # fmt: skip
