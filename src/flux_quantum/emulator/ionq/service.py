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
real client against this side: t/emulator/ionq/test_side.py):

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
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from flux_quantum.emulator import programs
from flux_quantum.emulator.bill import BilledTask
from flux_quantum.emulator.clock import iso, timestamp
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
from flux_quantum.emulator.job_side import JobSide, SideJob
from flux_quantum.emulator.routes import Body, Query, Route, SideRoute, on_device, owned
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import Missing
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response

JOB_TYPES = ("ionq.circuit.v1", "ionq.qasm3.v1")
# What IonQ answers without an API key.
PUBLIC = ("ListBackends", "GetBackend")
DEFAULT_SHOTS = 100
LIST_LIMIT = 25


@dataclass
class IonqJob(SideJob):
    """One job on its backend (``device``): queued unless its program could not run
    (``refused``: not billed)."""

    type: str = "ionq.circuit.v1"
    cost: float = 0.0
    session_id: str | None = None
    name: str | None = None
    metadata: dict[str, str] | None = None
    noise: dict[str, Any] | None = None
    failure: str | None = None  # a fail_job fault's message: it fails on the QPU
    refused: tuple[str, str] | None = None  # (failure code, message): failed at once
    qubits: int = 0
    counts: dict[str, int] = field(default_factory=dict, repr=False)
    deleted: bool = False  # gone from the API (DELETE), still on the bill

    @property
    def billable(self) -> bool:
        return self.refused is None


class IonqService(JobSide[IonqScenario, IonqFault]):
    """The IonQ side's requests answered, from any number of server threads."""

    vendor = "ionq"
    _draws = "ionq-fault"
    _id_draws = "ionq-ids"
    MISSING = Missing("Not Found", "Backend {name} not found.")
    ROUTES = (
        Route("GET", f"{API}/backends", "ListBackends", "_devices"),
        on_device("GET", f"{API}/backends/<backend>", "GetBackend", "_device", "backend"),
        on_device("GET", f"{API}/backends/<backend>/characterizations", "ListCharacterizations",
                  "_characterizations", "backend"),
        on_device("GET", f"{API}/backends/<backend>/characterizations/<id>",
                  "GetCharacterization", "_characterizations", "backend"),
        Route("GET", f"{API}/whoami", "WhoAmI", "_whoami"),
        Route("POST", f"{API}/jobs", "CreateJob", "_create", device=Body("backend"), creates=True),
        Route("GET", f"{API}/jobs", "ListJobs", "_list_jobs"),
        Route("GET", f"{API}/jobs/estimate", "EstimateJobCost", "_estimate",
              device=Query("backend")),
        owned("GET", f"{API}/jobs/<job>", "GetJob", "_get_job"),
        owned("DELETE", f"{API}/jobs/<job>", "DeleteJob", "_delete"),
        owned("GET", f"{API}/jobs/<job>/cost", "GetJobCost", "_cost"),
        owned("PUT", f"{API}/jobs/<job>/status/cancel", "CancelJob", "_cancel"),
        owned("GET", f"{API}/jobs/<job>/results/probabilities", "GetProbabilities",
              "_probabilities"),
        Route("POST", f"{API}/sessions", "CreateSession", "_create_session"),
        Route("GET", f"{API}/sessions", "ListSessions", "_list_sessions"),
        Route("GET", f"{API}/sessions/<session>", "GetSession", "_get_session", "<session>"),
        Route("GET", f"{API}/sessions/<session>/jobs", "ListSessionJobs", "_list_jobs",
              "<session>"),
        Route("POST", f"{API}/sessions/<session>/end", "EndSession", "_end_session", "<session>"),
    )  # fmt: skip

    def _setup(self) -> None:
        super()._setup()
        self._sessions: dict[str, IonqSession] = {}

    def _queue_spec(self, spec: IonqBackendSpec) -> DeviceQueueSpec:
        """A backend not available serves nothing."""
        down = spec.status != "available"
        return DeviceQueueSpec.waiting_during(spec.queue_key, spec.name, spec.queue, [], down=down)

    # -- views for tests and the facade ---------------------------------------------------

    def session_ids(self) -> list[str]:
        """Every session created so far, oldest first."""
        with self._lock:
            return list(self._sessions)

    def _bill_row(self, job: IonqJob, now: float) -> BilledTask:
        """A completed job costs its price (per job and per shot); any other nothing."""
        task = super()._bill_row(job, now)
        return replace(task, cost=job.cost if task.state == "COMPLETED" else 0.0)

    def env(self, url: str) -> dict[str, str]:
        """Where IonQ's clients reach this service from ``url`` (the emulator's base URL)
        and the key they send: ``IONQ_API_URL`` and ``IONQ_API_KEY``."""
        return {"IONQ_API_URL": url.rstrip("/") + API, "IONQ_API_KEY": self.scenario.api_key}

    # -- dispatch -------------------------------------------------------------------------

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return ionq_error(status, message)

    def _authorize(self, route: SideRoute, request: Request) -> None:
        given = request.headers.get("authorization", "")
        if route.operation in PUBLIC and not given:
            return  # IonQ lists its backends to anyone (a key given must still be valid)
        scheme, _, value = given.partition(" ")
        if scheme != "apiKey" or value != self.scenario.api_key:
            raise IonqRefusal(401, "Invalid API key.")

    # -- backends ---------------------------------------------------------------------------

    def _device_doc(self, spec: IonqBackendSpec, now: float) -> dict[str, Any]:
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

    # -- jobs -------------------------------------------------------------------------------

    def _create(
        self, route: SideRoute, request: Request, faults: list[IonqFault]
    ) -> tuple[Response, str]:
        failure = self.failure(faults)
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
                id=self._new_id(),
                device=spec.name,
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
        answer = {"id": job.id, "status": "submitted", "session_id": job.session_id}
        return json_response(201, answer), job.id

    def _names(self) -> str:
        return ", ".join(b.name for b in self.scenario.backends)

    def _simulate(
        self, body: dict[str, Any], spec: IonqBackendSpec, shots: int
    ) -> tuple[dict[str, int], int, tuple[str, str] | None]:
        """The job's counts (qubit 0 first) and measured width, or why it fails at once."""
        try:
            # OpenQASM 3 as IonQ takes it (stdgates.inc's names) in the simulator's dialect.
            source = programs.braket_source(openqasm(str(body.get("type")), body.get("input")))
        except CircuitError as exc:
            raise IonqRefusal(400, f"input: {exc}.") from None
        try:
            result = programs.run(source, shots, spec.qubits, self.scenario.max_simulated_qubits)
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
            progress = self._queues[job.device].progress(job.id, now)
            billed[job.id] = progress.status not in ("FAILED",) and not (
                progress.status in ("CANCELLED", "CANCELLING") and progress.started_at is None
            )
        return billed

    def _status(self, job: IonqJob, now: float) -> str:
        """IonQ's status of the job at ``now`` (lock held)."""
        if job.refused:
            return "failed"
        return STATUSES[self._queues[job.device].progress(job.id, now).status]

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
            progress = self._queues[job.device].progress(job.id, now)
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
            "backend": job.device,
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

    def _list_jobs(self, route: SideRoute, request: Request) -> Response:
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
                    if target in (None, j.device) and session in (None, j.session_id)
                    and not j.deleted and wanted in (None, self._status(j, now))]  # fmt: skip
            if after:
                ids = [j.id for j in jobs]
                jobs = jobs[ids.index(after) + 1 :] if after in ids else []
            page = jobs[: int(limit_text)]
            docs = [self._document(j, now) for j in page]
        more = len(jobs) > len(page)
        return json_response(200, {"jobs": docs, "next": page[-1].id if more else None})

    def _delete(self, route: SideRoute, request: Request) -> Response:
        """``DELETE /jobs/{id}``: gone from the API (a queued one is cancelled first)."""
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            if not job.refused and self._status(job, now) not in FINAL:
                self._queues[job.device].cancel(job.id, now)
            job.deleted = True
        return json_response(200, {"id": job.id, "status": "deleted"})

    def _cost(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status(job, self.clock.now())
        charged = job.cost if status == "completed" else 0.0 if status in FINAL else None
        return json_response(200, job_cost(job.cost, charged))

    def _estimate(self, route: SideRoute, request: Request) -> Response:
        spec = self.scenario.backend(route.device or "")
        if spec is None:
            raise IonqRefusal(400, f"backend must be one of {self._names()}, got {route.device!r}.")
        query = {k: request.first(k) for k in ("type", "qubits", "shots", "1q_gates", "2q_gates")}
        for key in ("qubits", "shots", "1q_gates", "2q_gates"):
            if query[key] is not None and not str(query[key]).isdigit():
                raise IonqRefusal(400, f"{key} must be a non-negative integer.")
        with self._lock:
            now = self.clock.now()
            waiting = self._device_doc(spec, now)["average_queue_time"]
        return json_response(200, estimate(spec, query, waiting, iso(timestamp(self.clock, now))))

    def _whoami(self, route: SideRoute, request: Request) -> Response:
        return json_response(200, whoami(self.seed))

    def _characterizations(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        document = characterization(spec, self.seed, iso(timestamp(self.clock, 0.0)))
        wanted = route.fields.get("id")
        if wanted is None:
            return json_response(200, {"characterizations": [document], "pages": 1})
        if wanted != document["id"]:
            raise IonqRefusal(404, f"Characterization {wanted} not found.")
        return json_response(200, document)

    def _cancel(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            if not job.refused and self._status(job, now) not in FINAL:
                self._queues[job.device].cancel(job.id, now)
        return json_response(200, {"id": job.id, "status": "canceled"})

    def _probabilities(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status(job, self.clock.now())
        if status != "completed":
            raise IonqRefusal(404, f"Job {job.id} has no results: it is {status}.")
        return json_response(200, probabilities(job.counts, job.shots))

    # -- sessions ---------------------------------------------------------------------------

    def _create_session(self, route: SideRoute, request: Request) -> Response:
        body = _json_body(request)
        spec = self.scenario.backend(str(body.get("backend")))
        if spec is None:
            raise IonqRefusal(
                400, f"backend must be one of {self._names()}, got {body.get('backend')!r}."
            )
        with self._lock:
            now = self.clock.now()
            session_id = self._new_id()
            session = IonqSession.create(session_id, spec.name, now, body.get("settings"))
            self._sessions[session.id] = session
            doc = self._session_doc(session, now)
        return json_response(201, doc)

    def _list_sessions(self, route: SideRoute, request: Request) -> Response:
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

    def _get_session(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            doc = self._session_doc(self._session(route.target), now)
        return json_response(200, doc)

    def _end_session(self, route: SideRoute, request: Request) -> Response:
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
