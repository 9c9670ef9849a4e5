"""The emulated IBM Quantum service's HTTP face: routes, IAM, faults and request checks.

This module owns the IBM side of the emulator as the client sees it: it answers IBM Cloud
IAM's token call and the Qiskit Runtime REST API (``/api/v1``: backends, jobs, sessions)
under the emulator's ``/ibm`` prefix, in the shapes the unmodified ``qrmi`` client parses,
for the backends of an ``IbmScenario``. It routes each request, checks its bearer token and
service CRN, checks its body (sampler pubs, shots, session modes) and IBM's job limits (a
Sampler job's executions, its pubs' shots summed, and the size of its input: over either it
is refused with IBM's validation error, 1002), runs each pub's circuit on the Braket local
simulator before the job is queued (one job for all its pubs), injects the scenario's
faults (HTTP errors with IBM's error codes, throttling, slow answers, connections reset
without an answer, failed jobs, jobs IBM cancels, a call answered, late or not at all, only
after it was committed), refuses the Open plan's dedicated sessions; the call log and the counts of calls and
fault effects for the report are the shared ``VendorSide``'s (``side``). Queues, jobs and
sessions live in ``IbmRuntime`` (``ibm.runtime``), which it changes only through that
class's methods. It must never sleep while holding a lock and never read the wall clock
except for IAM token expiry (the client compares that with its own clock).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator.bill import BilledSession, BilledTask
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.ibm.pubs import PubError, pub_circuit
from flux_quantum.emulator.ibm.runtime import IbmRefusal, IbmRuntime, JobQuery, refuse
from flux_quantum.emulator.ibm.scenario import ERROR_CODES, IbmBackendSpec, IbmFault, IbmScenario
from flux_quantum.emulator.ibm.wire import (
    API,
    IAM_PATH,
    bit_rows,
    braket_source,
    configuration,
    iam_error,
    ibm_error,
    parse_timestamp,
    properties,
    register_name,
    text_response,
)
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.simulate import OPENQASM_PROGRAM, ProgramError, SimulationRequest
from flux_quantum.emulator.simulate import simulate as run_program
from flux_quantum.emulator.wire import Request, Response, json_response

BACKEND_VERSION = "1.0.0"
DEFAULT_SHOTS = 4096
LIST_LIMIT = 200
TOKEN_LIFETIME = 3600
MAX_SIMULATED_QUBITS = 20


@dataclass(frozen=True)
class _Route:
    operation: str
    handler: Callable[..., Response]
    target: str | None = None
    backend: str | None = None
    body: Any = None


class IbmService(VendorSide[_Route, IbmFault]):
    """The IBM side's requests answered, from any number of server threads."""

    _refusal = IbmRefusal
    _draws = "ibm-fault"

    def __init__(
        self,
        scenario: IbmScenario,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock, seed, stop, on_call, faults=len(scenario.faults))
        self.scenario = scenario
        self.runtime = IbmRuntime(scenario.backends, clock, seed)
        self._wall = wall

    # -- views for tests and the facade ---------------------------------------------------------

    def job_ids(self, backend: str | None = None) -> list[str]:
        """Every job created so far (on ``backend``), oldest first."""
        return self.runtime.job_ids(backend)

    def job_params(self, job_id: str) -> dict[str, Any]:
        return self.runtime.job_params(job_id)

    def session_state(self, session_id: str) -> str:
        return self.runtime.session_state(session_id)

    def job_timeline(self, job_id: str) -> TaskTimeline:
        """When a job was created, became next to run, started and ended (emulated
        seconds; the truth a benchmark measures release lags against)."""
        return self.runtime.job_timeline(job_id)

    def job_forecast(self, job_id: str) -> TaskTimeline:
        """The milestones a job will reach if only the background changes its queue."""
        return self.runtime.job_forecast(job_id)

    def session_jobs(self, session_id: str) -> list[str]:
        """The jobs that rode ``session_id``, oldest first."""
        return self.runtime.session_jobs(session_id)

    def session_ids(self) -> list[str]:
        return self.runtime.session_ids()

    def pending(self, backend: str) -> int:
        return self.runtime.pending(backend)

    def bill(self) -> tuple[list[BilledTask], list[BilledSession]]:
        """Every job and session so far, at the scenario's ``price_per_second``."""
        return self.runtime.bill(self.scenario.price_per_second)

    # -- dispatch -----------------------------------------------------------------------------

    def _refused(self, request: Request, refusal: Refusal) -> _Route:
        return _Route("Unknown", self._unknown)

    def _faults_of(self) -> Sequence[IbmFault]:
        return self.scenario.faults

    def _fault_device(self, route: _Route) -> str | None:
        return route.backend

    def _apply(
        self, route: _Route, request: Request, faults: list[IbmFault], created: list[str]
    ) -> Response:
        if route.operation != "IamToken" and route.operation != "Unknown":
            self._authorize(request)
        if route.operation == "CreateJob":
            failure = next((f.fail_job for f in faults if f.fail_job), None)
            cancels = any(f.cancel_job for f in faults)
            response = route.handler(route, failure, cancels, created)
            if created:
                self._count(*(["fail_job"] if failure else []), *(["cancel_job"] * cancels))
            return response
        if route.operation == "CreateSession":
            return route.handler(route, request, created)
        return route.handler(route, request)

    def _internal_error(self, route: _Route, message: str) -> Response:
        return ibm_error(500, 1000, message)

    def _fault_error(self, fault: IbmFault, route: _Route) -> Response | None:
        return self._fault_response(fault, route) if fault.status or fault.code else None

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
            raise refuse(1000, f"the emulator does not implement {method} {path}", 404)
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
            job, backend = parts[1], self.runtime.backend_of_job(parts[1])
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
        if head == "instances" and n == 2 and parts[1] == "usage" and method == "GET":
            return _Route("GetInstanceUsage", self._instance_usage)
        if head == "sessions":
            if n == 1 and method == "POST":
                body = _json(request)
                backend = body.get("backend") or body.get("backend_name")
                return _Route("CreateSession", self._create_session, None, backend, body)
            sid = parts[1] if n > 1 else ""
            backend = self.runtime.backend_of_session(sid)
            if n == 2 and method == "GET":
                return _Route("GetSession", self._get_session, sid, backend)
            if n == 2 and method == "PATCH":
                return _Route("UpdateSession", self._update_session, sid, backend, _json(request))
            if n == 3 and parts[2] == "close" and method == "DELETE":
                return _Route("CloseSession", self._close_session, sid, backend)
        raise refuse(1000, f"the emulator does not implement {method} {path}", 404)

    def _unknown(self, route: _Route, request: Request) -> Response:
        raise refuse(1000, "unknown operation", 404)

    # -- IAM ----------------------------------------------------------------------------------

    def _iam_token(self, route: _Route, request: Request) -> Response:
        form = parse_qs((route.body or b"").decode("utf-8", "replace"))
        apikey = (form.get("apikey") or [""])[0]
        if not apikey or (self.scenario.apikey is not None and apikey != self.scenario.apikey):
            return iam_error(400, "Provided API key could not be found.")
        # A JWT (HS256), as IBM Cloud IAM issues one: IBM's SDKs read its expiry from it.
        now = int(self._wall())
        expiration = now + TOKEN_LIFETIME
        claims = {"iss": "flux-quantum-emulator", "iat": now, "exp": expiration,
                  "jti": secrets.token_hex(16), "scope": "ibm openid"}  # fmt: skip
        signed = f"{_b64(json.dumps(_JWT_HEADER))}.{_b64(json.dumps(claims))}"
        token = f"{signed}.{self._signature(signed)}"
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

    def _signature(self, signed: str) -> str:
        """Tokens are signed, not remembered: like IBM's IAM, an emulator restarted on the
        same scenario (fresh queues, e.g. per benchmark run) still accepts them."""
        key = f"flux-quantum-emulator:{self.scenario.apikey}:{self.scenario.crn}".encode()
        return _b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())

    def knows_token(self, request: Request) -> bool:
        """Whether the request carries a bearer token this side's IAM issued."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        signed, _, signature = token.rpartition(".")
        return (
            scheme.lower() == "bearer"
            and bool(signed)
            and hmac.compare_digest(signature, self._signature(signed))
        )

    def _authorize(self, request: Request) -> None:
        if not self.knows_token(request):
            raise refuse(1201, "Invalid credentials: no valid IAM bearer token.")
        crn = self.scenario.crn
        if crn is not None and request.headers.get("service-crn") != crn:
            raise refuse(1201, "Invalid credentials: unknown Service-CRN.")

    # -- backends -----------------------------------------------------------------------------

    def _spec(self, name: str | None) -> IbmBackendSpec:
        spec = self.scenario.backend(name or "")
        if spec is None:
            raise refuse(1007, f"Backend {name} not found.")
        return spec

    def _list_backends(self, route: _Route, request: Request) -> Response:
        specs = self.scenario.backends
        devices = []
        for spec, (status, reason, pending) in zip(
            specs, self.runtime.backend_states(specs), strict=True
        ):
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
                "queue_length": pending,
            }
            devices.append(entry)
        return json_response(200, {"devices": devices})

    def _backend_doc(self, route: _Route, request: Request) -> Response:
        spec = self._spec(route.target)
        [(status, reason, pending)] = self.runtime.backend_states([spec])
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

    def _create_job(
        self, route: _Route, failure: str | None, cancels: bool, created: list[str]
    ) -> Response:
        body = route.body
        if body.get("program_id") != "sampler":
            raise refuse(1002, "the emulator runs the sampler program only", 400)
        spec = self._spec(route.backend)
        params = body.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("pubs"), list):
            raise refuse(1002, "params.pubs must be a list of pubs", 400)
        size = len(json.dumps(params, separators=(",", ":")).encode())
        if size > self.scenario.max_input_bytes:
            raise refuse(
                1002,
                f"Error in the validation process of the job: its input is {size} bytes, "
                f"over the limit of {self.scenario.max_input_bytes} bytes.",
                413,
            )
        pubs = [self._pub(pub, params, spec) for pub in params["pubs"]]
        if not pubs:
            raise refuse(1002, "params.pubs is empty", 400)
        executions = sum(shots for _, shots in pubs)
        if executions > self.scenario.max_executions:
            raise refuse(
                1002,
                f"Error in the validation process of the job: {executions} executions "
                f"(circuits x shots over its {len(pubs)} pubs) exceed the limit of "
                f"{self.scenario.max_executions} for a Sampler job.",
            )
        session_id = body.get("session_id")
        results = []
        for qasm, shots in pubs:
            results.append((register_name(qasm), *self._simulate(qasm, shots, spec), shots))
        job_id = self.runtime.create_job(
            spec,
            params,
            results,
            shots=executions,
            session_id=session_id,
            cost=body.get("cost") if isinstance(body.get("cost"), int) else 0,
            failure=failure,
            cancels=cancels,
            support_qiskit=params.get("support_qiskit") is not False,
        )
        created.append(job_id)
        answer = {"id": job_id, "backend": spec.name, "private": False}
        if session_id is not None:
            answer["session_id"] = session_id
        return json_response(200, answer)

    def _pub(self, pub: Any, params: dict[str, Any], spec: IbmBackendSpec) -> tuple[str, int]:
        if not isinstance(pub, list) or not pub:
            raise refuse(1002, "each pub must be a list [circuit, parameter values, shots]", 400)
        try:  # QRMI's OpenQASM 3, or qiskit-ibm-runtime's QPY and values (ibm.pubs)
            circuit = pub_circuit(pub[0], pub[1] if len(pub) > 1 else None)
        except PubError as exc:
            raise refuse(1002, str(exc), 400) from exc
        options = params.get("options")
        options = options if isinstance(options, dict) else {}
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
            raise refuse(1002, f"shots must be between 1 and {spec.max_shots}, got {shots!r}", 400)
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
            raise refuse(1002, f"Error in the validation process of the job: {exc}", 400) from exc
        return bit_rows(result.get("measurements") or [])

    def _get_job(self, route: _Route, request: Request) -> Response:
        with_params = request.first("exclude_params") != "true"
        return json_response(200, self.runtime.job_document(route.target, with_params))

    def _list_jobs(self, route: _Route, request: Request) -> Response:
        q = request.first
        try:
            limit = min(LIST_LIMIT, int(q("limit") or LIST_LIMIT))
            offset = int(q("offset") or 0)
            created_after, created_before = q("created_after"), q("created_before")
            after = parse_timestamp(created_after) if created_after else None
            before = parse_timestamp(created_before) if created_before else None
        except ValueError as exc:
            raise refuse(1000, f"bad query parameter: {exc}", 400) from exc
        if limit < 1 or offset < 0:
            raise refuse(1000, "limit must be >= 1 and offset >= 0", 400)
        with_params = q("exclude_params") == "false"
        query = JobQuery(
            backend=q("backend"),
            session_id=q("session_id"),
            program=q("program"),
            pending=None if q("pending") is None else q("pending") == "true",
            created_after=after,
            created_before=before,
        )
        rows = self.runtime.list_jobs(query, with_params)
        rows.sort(key=lambda row: row[0], reverse=(q("sort") or "DESC").upper() != "ASC")
        page = [doc for _, doc in rows[offset : offset + limit]]
        return json_response(
            200, {"jobs": page, "count": len(rows), "offset": offset, "limit": limit}
        )

    def _cancel_job(self, route: _Route, request: Request) -> Response:
        self.runtime.cancel_job(route.target)
        return Response(204)

    def _delete_job(self, route: _Route, request: Request) -> Response:
        self.runtime.delete_job(route.target)
        return Response(204)

    def _job_results(self, route: _Route, request: Request) -> Response:
        return text_response(self.runtime.job_result(route.target))

    def _job_logs(self, route: _Route, request: Request) -> Response:
        self.runtime.job(route.target)
        return text_response("")

    def _instance_usage(self, route: _Route, request: Request) -> Response:
        """The instance's usage this period: the seconds its jobs were billed, no limit."""
        jobs, _ = self.runtime.bill(self.scenario.price_per_second)
        consumed = sum(job.billed_seconds or 0.0 for job in jobs)
        return json_response(
            200,
            {
                "instance_id": request.headers.get("service-crn") or self.scenario.crn,
                "plan_id": self.scenario.plan,
                "usage_consumed_seconds": round(consumed),
                "usage_limit_reached": False,
            },
        )

    # -- sessions -----------------------------------------------------------------------------

    def _create_session(self, route: _Route, request: Request, created: list[str]) -> Response:
        body = route.body
        mode = body.get("mode", "dedicated")
        if mode not in ("dedicated", "batch"):
            raise refuse(1000, f"mode must be dedicated or batch, got {mode!r}", 400)
        spec = self._spec(route.backend)
        if mode == "dedicated" and self.scenario.plan == "open":
            raise refuse(1352)
        max_ttl = body.get("max_ttl") if isinstance(body.get("max_ttl"), int) else 28800
        doc = self.runtime.open_session(spec, mode, max_ttl)
        created.append(doc["id"])
        return json_response(200, doc)

    def _get_session(self, route: _Route, request: Request) -> Response:
        return json_response(200, self.runtime.session_document(route.target))

    def _update_session(self, route: _Route, request: Request) -> Response:
        accepting = route.body.get("accepting_jobs")
        if not isinstance(accepting, bool):
            raise refuse(1000, "accepting_jobs must be true or false", 400)
        self.runtime.set_accepting(route.target, accepting)
        return Response(204)

    def _close_session(self, route: _Route, request: Request) -> Response:
        """Close now: queued and running jobs of the session are cancelled."""
        self.runtime.close_session(route.target)
        return Response(204)


_JWT_HEADER = {"alg": "HS256", "typ": "JWT"}


def _b64(data: str | bytes) -> str:
    """base64url without padding (a JWT's segments)."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _json(request: Request) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        raise refuse(1000, "the body is not JSON", 400) from exc
    if not isinstance(body, dict):
        raise refuse(1000, "the body is not a JSON object", 400)
    return body
