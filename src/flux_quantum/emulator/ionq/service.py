"""The emulated IonQ Cloud Platform API v0.4, as ionq-core 0.2.0 sees it.

This module owns the IonQ side of the emulator under the ``/ionq`` prefix: the calls
IonQ's own client (``ionq_core.IonQClient`` and its ``api`` modules) makes, answered in
the shapes it parses, for the backends of an ``IonqScenario``: backends with their status
and queue, circuit jobs queued and run on the emulated clock (the shared ``DeviceQueue``),
run on the Braket local simulator (readout noise on the simulator's noise models),
cancelled, failed or refused as the scenario says, their results as probabilities, and
sessions with their limits (``sessions``). Its call log and counts are the shared
``VendorSide``'s (``side``). It must never sleep holding its lock, and never read the
wall clock.

Checked against ionq-core 0.2.0 (its generated ``api`` and ``models`` modules, and the
real client against this side: t/test_emulator_ionq.py):

- ``IonQClient(api_key=..., base_url=...)``: every call carries ``Authorization: apiKey
  KEY``; an error answer becomes ``BadRequestError`` (400), ``AuthenticationError``
  (401), ``NotFoundError`` (404), ``RateLimitError`` (429), ``ServerError`` (5xx), whose
  message is the body's ``message``.
- ``backends.get_backends`` / ``get_backend``: ``GET /backends``, ``GET /backends/{name}``,
  each a Backend (``backend``, ``status`` available/unavailable/retired, ``qubits``,
  ``average_queue_time``, ``last_updated``; all required).
- ``default.create_job``: ``POST /jobs`` with ``{"type": "ionq.circuit.v1" |
  "ionq.qasm3.v1", "backend", "input", "shots", "name", "metadata", "session_id",
  "noise": {"model", "seed"}}``, answered 201 ``{"id", "status", "session_id"}``.
- ``default.get_job``: ``GET /jobs/{id}``, a SingleCircuitJob (``status`` submitted,
  ready, started, completed, failed or canceled; ``failure`` {code, message}; every
  field of the model present). ``default.get_jobs``: ``GET /jobs`` (``target``,
  ``session_id``, ``limit``, ``next``), ``{"jobs": [...], "next"}``, newest first.
- ``default.cancel_job``: ``PUT /jobs/{id}/status/cancel``, ``{"id", "status":
  "canceled"}``. ``default.get_job_probabilities``: ``GET
  /jobs/{id}/results/probabilities``, ``{state: probability}``, the state a decimal
  integer with qubit 0 its least significant bit.
- ``default.create_session``: ``POST /sessions`` with ``{"backend", "settings":
  {"job_count_limit", "duration_limit_min", "cost_limit": {"unit", "value"}}}``, 201 a
  Session; ``get_session``: ``GET /sessions/{id}``; ``end_session``: ``POST
  /sessions/{id}/end``, the Session (``status`` created, started or ended).

Emulated (not checked against IonQ's service): a job in a session over one of its limits
is refused at the create with 400 (``sessions``); the queue's state as the job's status
(``wire.STATUSES``); a program that does not run fails the job at once (``failure``:
PreflightError, or NotEnoughQubits for one wider than the backend); a ``fail_job`` fault
fails it on the QPU (QuantumComputerError); ``average_queue_time`` is the waiting jobs
times the mean service time, in milliseconds; probabilities of a job not completed are
refused 404; a job's cost is the scenario's per-job plus per-shot price.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from flux_quantum.emulator.bill import BilledTask, timed_task
from flux_quantum.emulator.clock import Clock, iso, timestamp
from flux_quantum.emulator.ibm.wire import braket_source
from flux_quantum.emulator.ionq.account import characterization, estimate, job_cost, whoami
from flux_quantum.emulator.ionq.scenario import (
    NOISE_MODELS,
    IonqBackendSpec,
    IonqFault,
    IonqScenario,
)
from flux_quantum.emulator.ionq.sessions import IonqSession
from flux_quantum.emulator.ionq.wire import (
    API,
    FINAL,
    STATUSES,
    CircuitError,
    IonqRefusal,
    ionq_error,
    openqasm,
    probabilities,
)
from flux_quantum.emulator.queue import DeviceQueue
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import Call, JobRoute, JobSide
from flux_quantum.emulator.simulate import OPENQASM_PROGRAM, ProgramError, SimulationRequest
from flux_quantum.emulator.simulate import simulate as run_program
from flux_quantum.emulator.wire import Request, Response, body_field, json_response

JOB_TYPES = ("ionq.circuit.v1", "ionq.qasm3.v1")
# What IonQ answers without an API key.
PUBLIC = ("ListBackends", "GetBackend")
DEFAULT_SHOTS = 100
LIST_LIMIT = 25


@dataclass
class IonqJob:
    """One job: queued on its backend unless its program could not run (``refused``)."""

    id: str
    backend: str
    type: str
    created_t: float
    shots: int
    cost: float
    session_id: str | None = None
    name: str | None = None
    metadata: dict[str, str] | None = None
    noise: dict[str, Any] | None = None
    failure: str | None = None  # a fail_job fault's message: it fails on the QPU
    refused: tuple[str, str] | None = None  # (failure code, message): failed at once
    qubits: int = 0
    counts: dict[str, int] = field(default_factory=dict, repr=False)


class IonqService(JobSide[IonqFault]):
    """The IonQ side's requests answered, from any number of server threads."""

    _refusal = IonqRefusal
    _draws = "ionq-fault"

    def __init__(
        self,
        scenario: IonqScenario,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
    ) -> None:
        super().__init__(scenario, clock, seed, stop, on_call)
        self.scenario: IonqScenario
        self._queues = {
            b.name: DeviceQueue(
                DeviceQueueSpec.waiting_during(
                    b.queue_key, b.name, b.queue, [], down=b.status != "available"
                ),
                seed,
            )
            for b in scenario.backends
        }
        self._ids = random.Random(f"{seed}:ionq-ids")
        self._jobs: dict[str, IonqJob] = {}
        self._deleted: set[str] = set()  # gone from the API, still on the bill
        self._sessions: dict[str, IonqSession] = {}

    # -- views for tests and the facade ---------------------------------------------------

    def job_ids(self, backend: str | None = None) -> list[str]:
        """Every job created so far (on ``backend``), oldest first."""
        with self._lock:
            return [j.id for j in self._jobs.values() if backend in (None, j.backend)]

    def session_ids(self) -> list[str]:
        """Every session created so far, oldest first."""
        with self._lock:
            return list(self._sessions)

    def bill(self) -> list[BilledTask]:
        """Every job queued: a completed one billed its price (per job and per shot)."""
        with self._lock:
            now = self.clock.now()
            rows = []
            for job in self._jobs.values():
                if job.refused:
                    continue
                task = timed_task("ionq", job.id, job.backend, None, job.shots, job.created_t,
                                  self._queues[job.backend].progress(job.id, now), 0.0)  # fmt: skip
                cost = job.cost if task.state == "COMPLETED" else 0.0
                rows.append(replace(task, cost=cost))
            return rows

    def env(self, url: str) -> dict[str, str]:
        """Where IonQ's clients reach this service from ``url`` (the emulator's base URL)
        and the key they send: ``IONQ_API_URL`` and ``IONQ_API_KEY``."""
        return {"IONQ_API_URL": url.rstrip("/") + API, "IONQ_API_KEY": self.scenario.api_key}

    # -- dispatch -------------------------------------------------------------------------

    def _internal_error(self, route: JobRoute, message: str) -> Response:
        return ionq_error(500, message)

    def _fault_error(self, fault: IonqFault, route: JobRoute) -> Response | None:
        return (
            ionq_error(fault.status, fault.message or "Injected fault.") if fault.status else None
        )

    def _authorize(self, route: JobRoute, request: Request) -> None:
        given = request.headers.get("authorization", "")
        if route.operation in PUBLIC and not given:
            return  # IonQ lists its backends to anyone (a key given must still be valid)
        scheme, _, value = given.partition(" ")
        if scheme != "apiKey" or value != self.scenario.api_key:
            raise IonqRefusal(401, "Invalid API key.")

    def _route(self, request: Request) -> JobRoute:
        method = request.method
        if not request.path.startswith(API + "/"):
            raise IonqRefusal(404, "Not Found")
        parts = request.segments(API)
        head, n = parts[0], len(parts)
        if head == "backends" and method == "GET" and n in (1, 2):
            if n == 1:
                return JobRoute("ListBackends", self._backends)
            return JobRoute("GetBackend", self._backend, parts[1], parts[1])
        if head == "backends" and method == "GET" and parts[2:3] == ["characterizations"] and n < 5:
            name = "GetCharacterization" if n == 4 else "ListCharacterizations"
            return JobRoute(name, self._characterizations, parts[1], parts[1])
        if parts == ["whoami"] and method == "GET":
            return JobRoute("WhoAmI", self._whoami)
        if parts == ["jobs", "estimate"] and method == "GET":
            return JobRoute("EstimateJobCost", self._estimate, None, request.first("backend"))
        if head == "jobs":
            if n == 1 and method == "POST":
                return JobRoute("CreateJob", self._unknown, None, body_field(request, "backend"))
            if n == 1 and method == "GET":
                return JobRoute("ListJobs", self._list_jobs)
            job = parts[1] if n > 1 else ""
            with self._lock:
                known = self._jobs.get(job)
            device = known.backend if known else None
            if n == 2 and method == "GET":
                return JobRoute("GetJob", self._get_job, job, device)
            if n == 2 and method == "DELETE":
                return JobRoute("DeleteJob", self._delete, job, device)
            if parts[2:] == ["cost"] and method == "GET":
                return JobRoute("GetJobCost", self._cost, job, device)
            if parts[2:] == ["status", "cancel"] and method == "PUT":
                return JobRoute("CancelJob", self._cancel, job, device)
            if parts[2:] == ["results", "probabilities"] and method == "GET":
                return JobRoute("GetProbabilities", self._probabilities, job, device)
        if head == "sessions":
            if n == 1 and method == "POST":
                return JobRoute("CreateSession", self._create_session)
            if n == 1 and method == "GET":
                return JobRoute("ListSessions", self._list_sessions)
            if n == 3 and parts[2] == "jobs" and method == "GET":
                return JobRoute("ListSessionJobs", self._list_jobs, parts[1])
            if n == 2 and method == "GET":
                return JobRoute("GetSession", self._get_session, parts[1])
            if n == 3 and parts[2] == "end" and method == "POST":
                return JobRoute("EndSession", self._end_session, parts[1])
        raise IonqRefusal(404, "Not Found")

    def _unknown(self, route: JobRoute, request: Request) -> Response:
        raise IonqRefusal(404, "Not Found")

    # -- backends ---------------------------------------------------------------------------

    def _backend_doc(self, spec: IonqBackendSpec, now: float) -> dict[str, Any]:
        waiting = self._queues[spec.name].queue_size(now)
        return {
            "backend": spec.name,
            "status": spec.status,
            "qubits": spec.qubits,
            "average_queue_time": int(round(waiting * spec.queue.service_time * 1000)),
            "last_updated": iso(timestamp(self.clock, now)),
            "degraded": False,
            "supported_gates": [
                "x",
                "y",
                "z",
                "h",
                "s",
                "si",
                "t",
                "ti",
                "v",
                "vi",
                "rx",
                "ry",
                "rz",
                "cnot",
                "swap",
            ],  # fmt: skip
        }

    def _backends(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            docs = [self._backend_doc(b, now) for b in self.scenario.backends]
        return json_response(200, docs)

    def _backend(self, route: JobRoute, request: Request) -> Response:
        spec = self.scenario.backend(route.target or "")
        if spec is None:
            raise IonqRefusal(404, f"Backend {route.target} not found.")
        with self._lock:
            doc = self._backend_doc(spec, self.clock.now())
        return json_response(200, doc)

    # -- jobs -------------------------------------------------------------------------------

    def _create(
        self, route: JobRoute, request: Request, failure: str | None, created: list[str]
    ) -> Response:
        body = _json_body(request)
        spec = self.scenario.backend(str(body.get("backend")))
        if spec is None:
            raise IonqRefusal(
                400, f"backend must be one of {self._names()}, got {body.get('backend')!r}."
            )
        if spec.status != "available":
            raise IonqRefusal(400, f"Backend {spec.name} is {spec.status}.")
        job_type = body.get("type")
        if job_type not in JOB_TYPES:
            raise IonqRefusal(400, f"type must be one of {', '.join(JOB_TYPES)}, got {job_type!r}.")
        shots = body.get("shots", DEFAULT_SHOTS)
        if (
            isinstance(shots, bool)
            or not isinstance(shots, int)
            or not 1 <= shots <= spec.max_shots
        ):
            raise IonqRefusal(400, f"shots must be an integer from 1 to {spec.max_shots}.")
        noise = body.get("noise")
        if noise is not None:
            model = noise.get("model") if isinstance(noise, dict) else None
            if model not in spec.noise_models:
                takes = ", ".join(spec.noise_models) or "none"
                raise IonqRefusal(400, f"noise.model on {spec.name} must be one of: {takes}.")
        metadata = body.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            raise IonqRefusal(400, "metadata must map names to strings.")
        session_id = body.get("session_id")
        counts, qubits, refused = self._simulate(body, spec, shots)
        with self._lock:
            now = self.clock.now()
            session = None
            if session_id is not None:
                session = self._sessions.get(str(session_id))
                if session is None:
                    raise IonqRefusal(404, f"Session {session_id} not found.")
                session.admit(spec.name, spec.cost(shots), now, self._billed(now))
            job = IonqJob(
                id=str(uuid.UUID(int=self._ids.getrandbits(128), version=4)),
                backend=spec.name,
                type=job_type,
                created_t=now,
                shots=shots,
                cost=spec.cost(shots),
                session_id=session.id if session else None,
                name=body.get("name") if isinstance(body.get("name"), str) else None,
                metadata=metadata,
                noise=noise,
                failure=failure,
                refused=refused,
                qubits=qubits,
                counts=counts,
            )
            self._jobs[job.id] = job
            if session is not None:
                session.jobs[job.id] = job.cost
            if refused is None:
                self._queues[spec.name].submit(job.id, now, shots, fails=failure is not None)
        created.append(job.id)
        return json_response(
            201, {"id": job.id, "status": "submitted", "session_id": job.session_id}
        )

    def _names(self) -> str:
        return ", ".join(b.name for b in self.scenario.backends)

    def _simulate(
        self, body: dict[str, Any], spec: IonqBackendSpec, shots: int
    ) -> tuple[dict[str, int], int, tuple[str, str] | None]:
        """The job's counts (qubit 0 first) and measured width, or why it fails at once."""
        try:
            # OpenQASM 3 as IonQ takes it (stdgates.inc's names) in the simulator's dialect.
            source = braket_source(openqasm(str(body.get("type")), body.get("input")))
        except CircuitError as exc:
            raise IonqRefusal(400, f"input: {exc}.") from None
        action = json.dumps({"braketSchemaHeader": {"name": OPENQASM_PROGRAM, "version": "1"},
                             "source": source, "inputs": {}})  # fmt: skip
        try:
            result = run_program(
                SimulationRequest(
                    action, shots, "braket_sv", spec.qubits, self.scenario.max_simulated_qubits
                )
            )
        except ProgramError as exc:
            code = "NotEnoughQubits" if "but the device has" in str(exc) else "PreflightError"
            return {}, 0, (code, str(exc))
        rows = result.get("measurements") or []
        width = len(result.get("measuredQubits") or [])
        noise = body.get("noise")
        flip = NOISE_MODELS.get(str(noise.get("model")), 0.0) if isinstance(noise, dict) else 0.0
        draw = random.Random(f"{self.seed}:ionq-noise:{noise and noise.get('seed')}:{source}")
        tally: Counter[str] = Counter()
        for row in rows:
            bits = [int(b) ^ (flip > 0 and draw.random() < flip) for b in row]
            tally["".join(str(b) for b in bits)] += 1
        return dict(tally), width, None

    def _billed(self, now: float) -> dict[str, bool]:
        """Whether each job counts toward its session's cost (lock held): not one that
        failed, or was canceled before it ran."""
        billed = {}
        for job in self._jobs.values():
            if job.refused:
                billed[job.id] = False
                continue
            progress = self._queues[job.backend].progress(job.id, now)
            billed[job.id] = progress.status not in ("FAILED",) and not (
                progress.status in ("CANCELLED", "CANCELLING") and progress.started_at is None
            )
        return billed

    def _job(self, job_id: str | None) -> IonqJob:
        job = self._jobs.get(job_id or "")
        if job is None or job.id in self._deleted:
            raise IonqRefusal(404, f"Job {job_id} not found.")
        return job

    def _status(self, job: IonqJob, now: float) -> str:
        """IonQ's status of the job at ``now`` (lock held)."""
        if job.refused:
            return "failed"
        return STATUSES[self._queues[job.backend].progress(job.id, now).status]

    def _document(self, job: IonqJob, now: float) -> dict[str, Any]:
        """The job as IonQ's SingleCircuitJob (lock held)."""

        def at(t: float | None) -> str | None:
            return None if t is None else iso(timestamp(self.clock, t))

        started = ended = None
        failure = None
        if job.refused:
            ended = job.created_t
            failure = {"code": job.refused[0], "message": job.refused[1]}
        else:
            progress = self._queues[job.backend].progress(job.id, now)
            started, ended = progress.started_at, progress.ended_at
            if progress.status == "FAILED":
                failure = {"code": "QuantumComputerError", "message": job.failure or "failed"}
        status = self._status(job, now)
        run_ms = (
            int((ended - started) * 1000) if started is not None and ended is not None else None
        )
        doc: dict[str, Any] = {
            "id": job.id,
            "status": status,
            "type": job.type,
            "backend": job.backend,
            "dry_run": False,
            "submitter_id": "emulator-user",
            "project_id": whoami(self.seed)["project_id"],
            "parent_job_id": None,
            "session_id": job.session_id,
            "metadata": job.metadata,
            "name": job.name,
            "submitted_at": at(job.created_t),
            "started_at": at(started),
            "completed_at": at(ended) if status in FINAL else None,
            "predicted_wait_time_ms": None,
            "predicted_execution_duration_ms": None,
            "execution_duration_ms": run_ms if status == "completed" else None,
            "failure": failure,
            "output": {},
            "settings": {},
            "stats": {"qubits": job.qubits, "circuits": 1},
            # Where its results are, once it has them (IonQ's artifact descriptors).
            "results": _results(job.id) if status == "completed" else None,
            "child_job_ids": None,
            "shots": job.shots,
        }
        if job.noise is not None:
            doc["noise"] = job.noise
        return doc

    def _list_jobs(self, route: JobRoute, request: Request) -> Response:
        """``GET /jobs`` (``target``, ``session_id``, ``status``, ``limit``, ``next``), or
        ``GET /sessions/{id}/jobs`` (the route's target)."""
        target, session = request.first("target"), route.target or request.first("session_id")
        wanted = request.first("status")
        limit_text = request.first("limit") or str(LIST_LIMIT)
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
            raise IonqRefusal(400, "limit must be an integer from 1 to 1000.")
        after = request.first("next")
        with self._lock:
            now = self.clock.now()
            jobs = [j for j in reversed(self._jobs.values())
                    if target in (None, j.backend) and session in (None, j.session_id)
                    and j.id not in self._deleted
                    and wanted in (None, self._status(j, now))]  # fmt: skip
            if after:
                ids = [j.id for j in jobs]
                jobs = jobs[ids.index(after) + 1 :] if after in ids else []
            page = jobs[: int(limit_text)]
            docs = [self._document(j, now) for j in page]
        more = len(jobs) > len(page)
        return json_response(200, {"jobs": docs, "next": page[-1].id if more else None})

    def _delete(self, route: JobRoute, request: Request) -> Response:
        """``DELETE /jobs/{id}``: gone from the API (a queued one is cancelled first)."""
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            if not job.refused and self._status(job, now) not in FINAL:
                self._queues[job.backend].cancel(job.id, now)
            self._deleted.add(job.id)
        return json_response(200, {"id": job.id, "status": "deleted"})

    def _cost(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status(job, self.clock.now())
        charged = job.cost if status == "completed" else 0.0 if status in FINAL else None
        return json_response(200, job_cost(job.cost, charged))

    def _estimate(self, route: JobRoute, request: Request) -> Response:
        spec = self.scenario.backend(route.device or "")
        if spec is None:
            raise IonqRefusal(400, f"backend must be one of {self._names()}, got {route.device!r}.")
        query = {k: request.first(k) for k in ("type", "qubits", "shots", "1q_gates", "2q_gates")}
        for key in ("qubits", "shots", "1q_gates", "2q_gates"):
            if query[key] is not None and not str(query[key]).isdigit():
                raise IonqRefusal(400, f"{key} must be a non-negative integer.")
        with self._lock:
            now = self.clock.now()
            waiting = self._backend_doc(spec, now)["average_queue_time"]
        return json_response(200, estimate(spec, query, waiting, iso(timestamp(self.clock, now))))

    def _whoami(self, route: JobRoute, request: Request) -> Response:
        return json_response(200, whoami(self.seed))

    def _characterizations(self, route: JobRoute, request: Request) -> Response:
        spec = self.scenario.backend(route.target or "")
        if spec is None:
            raise IonqRefusal(404, f"Backend {route.target} not found.")
        document = characterization(spec, self.seed, iso(timestamp(self.clock, 0.0)))
        if route.operation == "GetCharacterization":
            wanted = request.path.rstrip("/").rsplit("/", 1)[-1]
            if wanted != document["id"]:
                raise IonqRefusal(404, f"Characterization {wanted} not found.")
            return json_response(200, document)
        return json_response(200, {"characterizations": [document], "pages": 1})

    def _cancel(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            if not job.refused and self._status(job, now) not in FINAL:
                self._queues[job.backend].cancel(job.id, now)
        return json_response(200, {"id": job.id, "status": "canceled"})

    def _probabilities(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status(job, self.clock.now())
        if status != "completed":
            raise IonqRefusal(404, f"Job {job.id} has no results: it is {status}.")
        return json_response(200, probabilities(job.counts, job.shots))

    # -- sessions ---------------------------------------------------------------------------

    def _create_session(self, route: JobRoute, request: Request) -> Response:
        body = _json_body(request)
        spec = self.scenario.backend(str(body.get("backend")))
        if spec is None:
            raise IonqRefusal(
                400, f"backend must be one of {self._names()}, got {body.get('backend')!r}."
            )
        with self._lock:
            now = self.clock.now()
            session_id = str(uuid.UUID(int=self._ids.getrandbits(128), version=4))
            session = IonqSession.create(session_id, spec.name, now, body.get("settings"))
            self._sessions[session.id] = session
            doc = self._session_doc(session, now)
        return json_response(201, doc)

    def _list_sessions(self, route: JobRoute, request: Request) -> Response:
        """``GET /sessions`` (``active``): newest first."""
        active = request.first("active")
        with self._lock:
            now = self.clock.now()
            docs = [self._session_doc(s, now) for s in reversed(self._sessions.values())]
        if active is not None:
            docs = [d for d in docs if d["active"] == (active == "true")]
        return json_response(200, {"organization_id": "emulator-organization", "sessions": docs})

    def _session(self, session_id: str | None) -> IonqSession:
        session = self._sessions.get(session_id or "")
        if session is None:
            raise IonqRefusal(404, f"Session {session_id} not found.")
        return session

    def _get_session(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            doc = self._session_doc(self._session(route.target), now)
        return json_response(200, doc)

    def _end_session(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            session = self._session(route.target)
            session.end(now)
            doc = self._session_doc(session, now)
        return json_response(200, doc)

    def _session_doc(self, session: IonqSession, now: float) -> dict[str, Any]:
        """The session as IonQ's Session (lock held)."""

        def at(t: float | None) -> str | None:
            return None if t is None else iso(timestamp(self.clock, t))

        status = session.status(now)
        first = min((self._jobs[j].created_t for j in session.jobs), default=None)
        settings: dict[str, Any] = {}
        if session.job_count_limit is not None:
            settings["job_count_limit"] = session.job_count_limit
        if session.duration_limit_min is not None:
            settings["duration_limit_min"] = session.duration_limit_min
            settings["expires_at"] = at(session.created_t + 60.0 * session.duration_limit_min)
        if session.cost_limit is not None:
            settings["cost_limit"] = {"unit": session.cost_unit, "value": session.cost_limit}
        ended = session.ended_t
        if ended is None and status == "ended" and session.duration_limit_min is not None:
            ended = session.created_t + 60.0 * session.duration_limit_min
        return {
            "id": session.id,
            "created_at": at(session.created_t),
            "organization_id": "emulator-organization",
            "backend": session.backend,
            "project_id": None,
            "creator_id": "emulator-user",
            "ended_at": at(ended) if status == "ended" else None,
            "ender_id": "emulator-user" if session.ended_t is not None else None,
            "active": status != "ended",
            "status": status,
            "started_at": at(first),
            "settings": settings,
        }


def _results(job_id: str) -> dict[str, Any]:
    """A completed job's results: its probabilities, as an artifact descriptor."""
    return {
        "probabilities": {
            "id": f"{job_id}-probabilities",
            "format": "ionq.probabilities.v1",
            "media_type": "application/json",
        }
    }


def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        raise IonqRefusal(400, "The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise IonqRefusal(400, "The request body must be a JSON object.")
    return body
