"""The emulated IBM Quantum service: IAM tokens, backends, sampler jobs, sessions, faults.

This module owns the IBM side of the emulator: it answers IBM Cloud IAM's token call and
the Qiskit Runtime REST API (``/api/v1``: backends, jobs, sessions) under the emulator's
``/ibm`` prefix, in the shapes the unmodified ``qrmi`` client parses, for the backends of
an ``IbmScenario``. Queues drain like the Braket side's (the same ``DeviceQueue``), jobs
really run on the Braket local simulator, sessions open, activate with their first job
and close, and faults (HTTP errors with IBM's error codes, throttling, paused backends,
failed jobs, the Open plan's refusal of dedicated sessions, a create answered only after
it was committed) come from the scenario. Every request goes to the call log.

It must never sleep while holding its lock, never read the wall clock except for IAM
token expiry (the client compares that with its own clock), and never answer a job's
results before the job has completed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.ibm_scenario import ERROR_CODES, IbmBackendSpec, IbmFault, IbmScenario
from flux_quantum.emulator.ibm_wire import (
    bit_rows,
    braket_source,
    configuration,
    iam_error,
    ibm_error,
    parse_timestamp,
    properties,
    register_name,
    sampler_result,
    text_response,
)
from flux_quantum.emulator.ibm_wire import timestamp as ibm_time
from flux_quantum.emulator.queue import DeviceQueue, TaskTimeline
from flux_quantum.emulator.scenario import Cost, DeviceSpec, OfflinePeriod
from flux_quantum.emulator.service import Call
from flux_quantum.emulator.simulate import OPENQASM_PROGRAM, ProgramError, SimulationRequest
from flux_quantum.emulator.simulate import simulate as run_program
from flux_quantum.emulator.wire import Request, Response, json_response

PREFIX = "/ibm"
API = PREFIX + "/api/v1"
IAM_PATH = PREFIX + "/identity/token"
BACKEND_VERSION = "1.0.0"
DEFAULT_SHOTS = 4096
LIST_LIMIT = 200
TOKEN_LIFETIME = 3600
MAX_SIMULATED_QUBITS = 20
_STATUS = {
    "QUEUED": "Queued",
    "RUNNING": "Running",
    "COMPLETED": "Completed",
    "FAILED": "Failed",
    "CANCELLING": "Cancelled",
    "CANCELLED": "Cancelled",
}
_PENDING = ("Queued", "Running")


@dataclass(frozen=True)
class IbmJob:
    """The facts of one job fixed at creation; its progress lives in its backend's queue."""

    id: str
    backend: str
    program_id: str
    params: dict[str, Any] = field(repr=False)
    created_t: float
    session_id: str | None = None
    cost: int = 0
    result: str | None = field(default=None, repr=False)
    failure: str | None = None


@dataclass
class IbmSession:
    """One session; its state follows its jobs and the clock."""

    id: str
    backend: str
    mode: str
    max_ttl: int
    created_t: float
    accepting_jobs: bool = True
    closed_t: float | None = None
    cancelled: bool = False
    jobs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Route:
    operation: str
    handler: Callable[..., Response]
    target: str | None = None
    backend: str | None = None
    body: Any = None


class _Reject(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.error)
        self.response = response


def _error(code: int, message: str | None = None, status: int | None = None) -> _Reject:
    return _Reject(ibm_error(status or ERROR_CODES.get(code, (400, ""))[0], code, message))


def _queue_spec(spec: IbmBackendSpec) -> DeviceSpec:
    """The shared queue model's view of an IBM backend: paused periods are offline periods
    that still accept jobs (they queue and wait), an offline backend refuses them."""
    paused = [(0.0, math.inf)] if spec.status == "paused" else list(spec.paused)
    return DeviceSpec(
        arn=spec.queue_key,
        name=spec.name,
        provider="IBM",
        type="QPU",
        qubits=spec.qubits,
        cost=Cost(0.0, "minute"),
        queue=spec.queue,
        status="OFFLINE" if spec.status == "offline" else "ONLINE",
        status_reason="MAINTENANCE" if spec.status == "offline" else None,
        offline=tuple(OfflinePeriod(s, e, "MAINTENANCE", accept_tasks=True) for s, e in paused),
    )


class IbmService:
    """All IBM-side state, answering requests from any number of server threads."""

    def __init__(
        self,
        scenario: IbmScenario,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.seed = seed
        self._stop = stop or threading.Event()
        self._on_call = on_call
        self._wall = wall
        self._lock = threading.Lock()
        self._queues = {b.name: DeviceQueue(_queue_spec(b), seed) for b in scenario.backends}
        self._jobs: dict[str, IbmJob] = {}
        self._sessions: dict[str, IbmSession] = {}
        self._calls: list[Call] = []
        self._fault_counts = [0] * len(scenario.faults)
        self._ids = random.Random(f"{seed}:ibm-ids")

    # -- views for tests and the facade ---------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def clear_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def job_ids(self, backend: str | None = None) -> list[str]:
        """Every job created so far (on ``backend``), oldest first."""
        with self._lock:
            return [j.id for j in self._jobs.values() if backend in (None, j.backend)]

    def job_params(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._jobs[job_id].params))

    def session_state(self, session_id: str) -> str:
        with self._lock:
            return self._session_state(self._sessions[session_id], self.clock.now())

    def job_timeline(self, job_id: str) -> TaskTimeline:
        """When a job was created, became next to run, started and ended (emulated
        seconds; the truth a benchmark measures release lags against)."""
        with self._lock:
            job = self._jobs[job_id]
            return self._queues[job.backend].timeline(job_id, self.clock.now())

    def session_jobs(self, session_id: str) -> list[str]:
        """The jobs that rode ``session_id``, oldest first."""
        with self._lock:
            return list(self._sessions[session_id].jobs)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def pending(self, backend: str) -> int:
        with self._lock:
            return self._queues[backend].queue_size(self.clock.now())

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        now = self.clock.now()
        created: list[str] = []
        try:
            route = self._route(request)
        except _Reject as reject:
            route, response = _Route("Unknown", self._unknown), reject.response
        else:
            response = self._run(route, request, now, created)
        call = Call(route.operation, route.target, response.status, response.error, now,
                    created[0] if created else None)  # fmt: skip
        with self._lock:
            self._calls.append(call)
        if self._on_call is not None:
            self._on_call(call)
        return response

    def _run(self, route: _Route, request: Request, now: float, created: list[str]) -> Response:
        with self._lock:
            hits = self._faults(route, now)
        before = [f for f in hits if not f.after_commit]
        after = [f for f in hits if f.after_commit]
        delay = sum(f.delay for f in before)
        if delay > 0:
            self._stop.wait(delay)  # real seconds, interrupted by stop()
        error = next((f for f in before if f.status or f.code), None)
        if error is not None:
            return self._fault_response(error, route)
        try:
            if route.operation != "IamToken" and route.operation != "Unknown":
                self._authorize(request)
            if route.operation == "CreateJob":
                failure = next((f.fail_job for f in before if f.fail_job), None)
                response = route.handler(route, failure, created)
            elif route.operation == "CreateSession":
                response = route.handler(route, request, created)
            else:
                response = route.handler(route, request)
        except _Reject as reject:
            return reject.response
        except Exception as exc:  # an emulator bug must still answer like the service
            return ibm_error(500, 1000, f"emulator error in {route.operation}: {exc!r}")
        # Faults after the commit: the job exists, but the client hears of it late or not.
        late = sum(f.delay for f in after)
        if late > 0:
            self._stop.wait(late)
        error = next((f for f in after if f.status or f.code), None)
        return self._fault_response(error, route) if error is not None else response

    def _faults(self, route: _Route, now: float) -> list[IbmFault]:
        """Count this call against every matching fault; the ones that fire. Lock held."""
        hits = []
        for index, fault in enumerate(self.scenario.faults):
            if fault.operations and route.operation not in fault.operations:
                continue
            if fault.backend is not None and route.backend != fault.backend:
                continue
            self._fault_counts[index] += 1
            if fault.selects(self._fault_counts[index], now):
                hits.append(fault)
        return hits

    def _fault_response(self, fault: IbmFault, route: _Route) -> Response:
        status = fault.http_status()
        code = fault.code or {429: 1202}.get(status, 1000)
        message = fault.message or f"{ERROR_CODES.get(code, (0, 'Error.'))[1]} (injected)"
        return ibm_error(status, code, message)

    def _route(self, request: Request) -> _Route:
        method, path = request.method, request.path
        if path == IAM_PATH and method == "POST":
            return _Route("IamToken", self._iam_token, body=request.body)
        if not path.startswith(API + "/"):
            raise _error(1000, f"the emulator does not implement {method} {path}", 404)
        parts = request.segments(API)
        head, n = parts[0], len(parts)
        if head == "backends":
            if n == 1 and method == "GET":
                return _Route("ListBackends", self._list_backends)
            if n == 3 and method == "GET":
                operation = {
                    "status": "GetBackendStatus",
                    "configuration": "GetBackendConfiguration",
                    "properties": "GetBackendProperties",
                }.get(parts[2])
                if operation:
                    return _Route(operation, self._backend_doc, parts[1], parts[1], parts[2])
        if head == "jobs":
            if n == 1 and method == "POST":
                body = _json(request)
                backend = body.get("backend") if isinstance(body.get("backend"), str) else None
                return _Route("CreateJob", self._create_job, backend, backend, body)
            if n == 1 and method == "GET":
                return _Route("ListJobs", self._list_jobs, backend=request.first("backend"))
            job, backend = parts[1], self._backend_of_job(parts[1])
            if n == 2 and method == "GET":
                return _Route("GetJob", self._get_job, job, backend)
            if n == 2 and method == "DELETE":
                return _Route("DeleteJob", self._delete_job, job, backend)
            if n == 3 and parts[2] == "cancel" and method == "POST":
                return _Route("CancelJob", self._cancel_job, job, backend)
            if n == 3 and parts[2] == "results" and method == "GET":
                return _Route("GetJobResults", self._job_results, job, backend)
            if n == 3 and parts[2] == "logs" and method == "GET":
                return _Route("GetJobLogs", self._job_logs, job, backend)
        if head == "sessions":
            if n == 1 and method == "POST":
                body = _json(request)
                backend = body.get("backend") or body.get("backend_name")
                return _Route("CreateSession", self._create_session, None, backend, body)
            sid = parts[1] if n > 1 else ""
            backend = self._backend_of_session(sid)
            if n == 2 and method == "GET":
                return _Route("GetSession", self._get_session, sid, backend)
            if n == 2 and method == "PATCH":
                return _Route("UpdateSession", self._update_session, sid, backend, _json(request))
            if n == 3 and parts[2] == "close" and method == "DELETE":
                return _Route("CloseSession", self._close_session, sid, backend)
        raise _error(1000, f"the emulator does not implement {method} {path}", 404)

    def _unknown(self, route: _Route, request: Request) -> Response:
        raise _error(1000, "unknown operation", 404)

    def _backend_of_job(self, job_id: str) -> str | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return job.backend if job else None

    def _backend_of_session(self, session_id: str) -> str | None:
        with self._lock:
            session = self._sessions.get(session_id)
        return session.backend if session else None

    # -- IAM ----------------------------------------------------------------------------------

    def _iam_token(self, route: _Route, request: Request) -> Response:
        form = parse_qs((route.body or b"").decode("utf-8", "replace"))
        apikey = (form.get("apikey") or [""])[0]
        if not apikey or (self.scenario.apikey is not None and apikey != self.scenario.apikey):
            return iam_error(400, "Provided API key could not be found.")
        nonce = secrets.token_hex(16)
        token = f"{nonce}.{self._signature(nonce)}"
        expiration = int(self._wall()) + TOKEN_LIFETIME
        return json_response(
            200,
            {
                "access_token": token,
                "refresh_token": "not_supported",
                "token_type": "Bearer",
                "expires_in": TOKEN_LIFETIME,
                "expiration": expiration,
                "scope": "ibm openid",
            },
        )

    def _signature(self, nonce: str) -> str:
        """Tokens are signed, not remembered: like IBM's IAM, an emulator restarted on the
        same scenario (fresh queues, e.g. per benchmark run) still accepts them."""
        key = f"flux-quantum-emulator:{self.scenario.apikey}:{self.scenario.crn}".encode()
        return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()[:32]

    def _authorize(self, request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        nonce, _, signature = token.partition(".")
        known = (
            scheme.lower() == "bearer"
            and bool(nonce)
            and hmac.compare_digest(signature, self._signature(nonce))
        )
        if not known:
            raise _error(1201, "Invalid credentials: no valid IAM bearer token.")
        crn = self.scenario.crn
        if crn is not None and request.headers.get("service-crn") != crn:
            raise _error(1201, "Invalid credentials: unknown Service-CRN.")

    # -- backends -----------------------------------------------------------------------------

    def _spec(self, name: str | None) -> IbmBackendSpec:
        spec = self.scenario.backend(name or "")
        if spec is None:
            raise _error(1007, f"Backend {name} not found.")
        return spec

    def _backend_status(self, spec: IbmBackendSpec, now: float) -> tuple[str, str | None]:
        """``online``, ``paused`` or ``offline`` and why (lock held)."""
        status = self._queues[spec.name].status(now)
        if status.status == "ONLINE":
            return "online", None
        if spec.status == "offline":
            return "offline", "The backend is offline."
        return "paused", "The backend is paused for maintenance; jobs queue until it resumes."

    def _list_backends(self, route: _Route, request: Request) -> Response:
        devices = []
        with self._lock:
            now = self.clock.now()
            for spec in self.scenario.backends:
                status, reason = self._backend_status(spec, now)
                entry: dict[str, Any] = {
                    "name": spec.name,
                    "status": {"name": status, **({"reason": reason} if reason else {})},
                    "is_simulator": False,
                    "qubits": spec.qubits,
                    "clops": {"type": "hardware", "value": spec.clops},
                    "processor_type": {
                        "family": spec.processor_family,
                        "revision": spec.processor_revision,
                    },
                    "queue_length": self._queues[spec.name].queue_size(now),
                }
                devices.append(entry)
        return json_response(200, {"devices": devices})

    def _backend_doc(self, route: _Route, request: Request) -> Response:
        spec = self._spec(route.target)
        with self._lock:
            now = self.clock.now()
            status, reason = self._backend_status(spec, now)
            pending = self._queues[spec.name].queue_size(now)
        if route.body == "status":
            return json_response(
                200,
                {
                    "state": status == "online",
                    "status": "active" if status == "online" else status,
                    "message": reason or "",
                    "length_queue": pending,
                    "backend_version": BACKEND_VERSION,
                },
            )
        if route.body == "configuration":
            return json_response(200, configuration(spec, BACKEND_VERSION))
        when = timestamp(self.clock, 0.0)
        return json_response(200, properties(spec, BACKEND_VERSION, self.seed, when))

    # -- jobs ---------------------------------------------------------------------------------

    def _create_job(self, route: _Route, failure: str | None, created: list[str]) -> Response:
        body = route.body
        if body.get("program_id") != "sampler":
            raise _error(1002, "the emulator runs the sampler program only", 400)
        spec = self._spec(route.backend)
        params = body.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("pubs"), list):
            raise _error(1002, "params.pubs must be a list of pubs", 400)
        pubs = [self._pub(pub, params, spec) for pub in params["pubs"]]
        if not pubs:
            raise _error(1002, "params.pubs is empty", 400)
        session_id = body.get("session_id")
        results = []
        for qasm, shots in pubs:
            results.append((register_name(qasm), *self._simulate(qasm, shots, spec), shots))
        with self._lock:
            now = self.clock.now()
            queue = self._queues[spec.name]
            if queue.availability.accepts_tasks_at(now) is not None:
                raise _error(1004, f"The backend {spec.name} is not available (offline).")
            if session_id is not None:
                self._session_takes(session_id, spec, now)
            job_id = "".join(self._ids.choice("abcdefghijklmnopqrstuvwxyz0123456789")
                             for _ in range(20))  # fmt: skip
            job = IbmJob(
                id=job_id,
                backend=spec.name,
                program_id="sampler",
                params=params,
                created_t=now,
                session_id=session_id,
                cost=body.get("cost") if isinstance(body.get("cost"), int) else 0,
                result=sampler_result(results, job_id),
                failure=failure,
            )
            total_shots = sum(shots for _, shots in pubs)
            queue.submit(job_id, now, total_shots, fails=failure is not None)
            self._jobs[job_id] = job
            if session_id is not None:
                self._sessions[session_id].jobs.append(job_id)
        created.append(job_id)
        answer = {"id": job_id, "backend": spec.name, "private": False}
        if session_id is not None:
            answer["session_id"] = session_id
        return json_response(200, answer)

    def _pub(self, pub: Any, params: dict[str, Any], spec: IbmBackendSpec) -> tuple[str, int]:
        if not isinstance(pub, list) or not pub:
            raise _error(1002, "each pub must be a list [circuit, parameter values, shots]", 400)
        circuit = pub[0]
        if not isinstance(circuit, str) or "OPENQASM" not in circuit:
            raise _error(1002, "the emulator runs circuits given as OpenQASM 3 strings only", 400)
        if len(pub) > 1 and pub[1] not in (None, [], {}):
            raise _error(1002, "the emulator does not bind parameter values", 400)
        options = params.get("options") if isinstance(params.get("options"), dict) else {}
        shots = next(
            (s for s in (pub[2] if len(pub) > 2 else None, params.get("shots"),
                         options.get("default_shots")) if s is not None),
            DEFAULT_SHOTS,
        )  # fmt: skip
        if (
            isinstance(shots, bool)
            or not isinstance(shots, int)
            or not 1 <= shots <= spec.max_shots
        ):
            raise _error(1002, f"shots must be between 1 and {spec.max_shots}, got {shots!r}", 400)
        return circuit, shots

    def _simulate(self, qasm: str, shots: int, spec: IbmBackendSpec) -> tuple[list[int], int]:
        action = json.dumps(
            {
                "braketSchemaHeader": {"name": OPENQASM_PROGRAM, "version": "1"},
                "source": braket_source(qasm),
            }
        )
        request = SimulationRequest(action, shots, "braket_sv", spec.qubits, MAX_SIMULATED_QUBITS)
        try:
            result = run_program(request)
        except ProgramError as exc:
            raise _error(1002, f"Error in the validation process of the job: {exc}", 400) from exc
        return bit_rows(result.get("measurements") or [])

    def _session_takes(self, session_id: str, spec: IbmBackendSpec, now: float) -> None:
        """Refuse a job for a session that cannot take it (lock held)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise _error(1217, f"Session {session_id} not found.", 404)
        if session.backend != spec.name:
            raise _error(1217, f"Session {session_id} runs on {session.backend}, not {spec.name}.")
        if not session.accepting_jobs or self._session_state(session, now) == "closed":
            raise _error(1217)

    def _job(self, job_id: str | None) -> IbmJob:
        job = self._jobs.get(job_id or "")
        if job is None:
            raise _error(1291, f"Job {job_id} not found.")
        return job

    def _status(self, job: IbmJob, now: float) -> tuple[str, Any]:
        progress = self._queues[job.backend].progress(job.id, now)
        return _STATUS[progress.status], progress

    def _describe(self, job: IbmJob, now: float, with_params: bool) -> dict[str, Any]:
        status, progress = self._status(job, now)
        state: dict[str, Any] = {"status": status}
        if status == "Failed":
            state.update(reason=job.failure or "Job failed", reason_code=1010)
        elif status == "Cancelled":
            state["reason"] = "Job was cancelled"
        doc: dict[str, Any] = {
            "id": job.id,
            "backend": job.backend,
            "state": state,
            "status": status,
            "program": {"id": job.program_id},
            "created": ibm_time(timestamp(self.clock, job.created_t)),
            "runtime": "",
            "cost": job.cost,
            "tags": [],
            "user_id": "flux-quantum-emulator",
            "private": False,
        }
        if with_params:
            doc["params"] = job.params
        if job.session_id is not None:
            doc["session_id"] = job.session_id
        if progress.started_at is not None and progress.ended_at is not None:
            doc["usage"] = {"seconds": round(progress.ended_at - progress.started_at, 3)}
        return doc

    def _get_job(self, route: _Route, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            with_params = request.first("exclude_params") != "true"
            return json_response(200, self._describe(job, self.clock.now(), with_params))

    def _list_jobs(self, route: _Route, request: Request) -> Response:
        q = request.first
        try:
            limit = min(LIST_LIMIT, int(q("limit") or LIST_LIMIT))
            offset = int(q("offset") or 0)
            after = parse_timestamp(q("created_after")) if q("created_after") else None
            before = parse_timestamp(q("created_before")) if q("created_before") else None
        except ValueError as exc:
            raise _error(1000, f"bad query parameter: {exc}", 400) from exc
        if limit < 1 or offset < 0:
            raise _error(1000, "limit must be >= 1 and offset >= 0", 400)
        with_params = q("exclude_params") == "false"
        with self._lock:
            now = self.clock.now()
            rows = []
            for job in self._jobs.values():
                created = timestamp(self.clock, job.created_t)
                status, _ = self._status(job, now)
                checks = (
                    q("backend") in (None, job.backend),
                    q("session_id") in (None, job.session_id),
                    q("program") in (None, job.program_id),
                    q("pending") is None or (q("pending") == "true") == (status in _PENDING),
                    after is None or created > after,
                    before is None or created < before,
                )
                if all(checks):
                    rows.append((job.created_t, self._describe(job, now, with_params)))
        rows.sort(key=lambda row: row[0], reverse=(q("sort") or "DESC").upper() != "ASC")
        page = [doc for _, doc in rows[offset : offset + limit]]
        return json_response(
            200, {"jobs": page, "count": len(rows), "offset": offset, "limit": limit}
        )

    def _cancel_job(self, route: _Route, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            status, _ = self._status(job, now)
            if status not in _PENDING:
                raise _error(1000, f"Job {job.id} is {status} and cannot be cancelled.", 409)
            self._queues[job.backend].cancel(job.id, now)
        return Response(204)

    def _delete_job(self, route: _Route, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status, _ = self._status(job, self.clock.now())
            if status in _PENDING:
                raise _error(
                    1000, f"Job {job.id} is {status}; only finished jobs are deleted.", 409
                )
            del self._jobs[job.id]
        return Response(204)

    def _job_results(self, route: _Route, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status, _ = self._status(job, self.clock.now())
        if status != "Completed" or job.result is None:
            raise _error(1291, f"Job {job.id} has no results ({status}).")
        return text_response(job.result)

    def _job_logs(self, route: _Route, request: Request) -> Response:
        with self._lock:
            self._job(route.target)
        return text_response("")

    # -- sessions -----------------------------------------------------------------------------

    def _create_session(self, route: _Route, request: Request, created: list[str]) -> Response:
        body = route.body
        mode = body.get("mode", "dedicated")
        if mode not in ("dedicated", "batch"):
            raise _error(1000, f"mode must be dedicated or batch, got {mode!r}", 400)
        spec = self._spec(route.backend)
        if mode == "dedicated" and self.scenario.plan == "open":
            raise _error(1352)
        max_ttl = body.get("max_ttl") if isinstance(body.get("max_ttl"), int) else 28800
        with self._lock:
            sid = "".join(self._ids.choice("abcdefghijklmnopqrstuvwxyz0123456789")
                          for _ in range(20))  # fmt: skip
            session = IbmSession(sid, spec.name, mode, max_ttl, self.clock.now())
            self._sessions[sid] = session
            doc = self._session_doc(session, self.clock.now())
        created.append(sid)
        return json_response(200, doc)

    def _session(self, session_id: str | None) -> IbmSession:
        session = self._sessions.get(session_id or "")
        if session is None:
            raise _error(1217, f"Session {session_id} not found.", 404)
        return session

    def _activated(self, session: IbmSession, now: float) -> float | None:
        """When the session's first job started running (lock held)."""
        starts = [
            self._queues[session.backend].progress(job, now).started_at
            for job in session.jobs
            if job in self._jobs
        ]
        started = [s for s in starts if s is not None]
        return min(started) if started else None

    def _session_state(self, session: IbmSession, now: float) -> str:
        if session.closed_t is not None:
            return "closed"
        activated = self._activated(session, now)
        if activated is not None and now - activated >= session.max_ttl:
            return "closed"
        if not session.accepting_jobs:
            pending = any(
                self._status(self._jobs[j], now)[0] in _PENDING
                for j in session.jobs
                if j in self._jobs
            )
            return "inactive" if pending else "closed"
        return "open" if activated is None else "active"

    def _session_doc(self, session: IbmSession, now: float) -> dict[str, Any]:
        activated = self._activated(session, now)
        state = self._session_state(session, now)
        active_ttl = session.max_ttl if activated is None else session.max_ttl - (now - activated)
        doc: dict[str, Any] = {
            "id": session.id,
            "backend_name": session.backend,
            "mode": session.mode,
            "state": state,
            "accepting_jobs": session.accepting_jobs and state != "closed",
            "max_ttl": session.max_ttl,
            "interactive_ttl": 60,
            "active_ttl": max(0, int(active_ttl)),
            "started_at": ibm_time(timestamp(self.clock, session.created_t)),
            "user_id": "flux-quantum-emulator",
            "timestamps": [],
        }
        if activated is not None:
            doc["activated_at"] = ibm_time(timestamp(self.clock, activated))
            doc["elapsed_time"] = round(now - activated, 3)
        if session.closed_t is not None:
            doc["closed_at"] = ibm_time(timestamp(self.clock, session.closed_t))
        if session.cancelled:
            doc["state_reason"] = "cancelled"
        return doc

    def _get_session(self, route: _Route, request: Request) -> Response:
        with self._lock:
            session = self._session(route.target)
            return json_response(200, self._session_doc(session, self.clock.now()))

    def _update_session(self, route: _Route, request: Request) -> Response:
        accepting = route.body.get("accepting_jobs")
        if not isinstance(accepting, bool):
            raise _error(1000, "accepting_jobs must be true or false", 400)
        with self._lock:
            session = self._session(route.target)
            if self._session_state(session, self.clock.now()) == "closed" and accepting:
                raise _error(1217)
            session.accepting_jobs = accepting
        return Response(204)

    def _close_session(self, route: _Route, request: Request) -> Response:
        """Close now: queued and running jobs of the session are cancelled."""
        with self._lock:
            session = self._session(route.target)
            now = self.clock.now()
            for job_id in session.jobs:
                job = self._jobs.get(job_id)
                if job is not None and self._status(job, now)[0] in _PENDING:
                    self._queues[job.backend].cancel(job_id, now)
                    session.cancelled = True
            session.accepting_jobs = False
            if session.closed_t is None:
                session.closed_t = now
        return Response(204)


def _json(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        raise _error(1000, "the body is not JSON", 400) from exc
    if not isinstance(body, dict):
        raise _error(1000, "the body is not a JSON object", 400)
    return body
