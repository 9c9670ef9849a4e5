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
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator import isa, openqasm, programs
from flux_quantum.emulator.bill import SideBill
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.ibm.pubs import PubError, pub_circuit
from flux_quantum.emulator.ibm.runtime import IbmRuntime, JobQuery, refuse
from flux_quantum.emulator.ibm.scenario import ERROR_CODES, IbmBackendSpec, IbmFault, IbmScenario
from flux_quantum.emulator.ibm.wire import (
    API,
    IAM_PATH,
    PREFIX,
    bit_rows,
    configuration,
    iam_error,
    ibm_error,
    parse_timestamp,
    properties,
    register_name,
    text_response,
)
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.routes import Body, Query, Route, SideRoute, on_device, owned
from flux_quantum.emulator.side import Refusal, TableSide
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response

BACKEND_VERSION = "1.0.0"
DEFAULT_SHOTS = 4096
LIST_LIMIT = 200
TOKEN_LIFETIME = 3600
MAX_SIMULATED_QUBITS = 20
# What QRMI reads with a backend's name for any backend (flux-quantum's default) when the
# scenario names no key or instance.
APIKEY = "flux-quantum-emulator"
# A us-east Qiskit Runtime instance, as IBM Cloud writes one: qiskit-ibm-runtime reads
# the region of the Runtime API it calls from it.
CRN = (
    "crn:v1:bluemix:public:quantum-computing:us-east:"
    "a/0123456789abcdef0123456789abcdef:f1a2b3c4-flux-quantum-emulator::"
)
# What a client that reaches the emulator as its HTTP proxy gives qiskit-ibm-runtime as
# ``url`` (IBM Cloud's hosts are derived from its host name: ``ibm.cloud``).
CLOUD_URL = "http://cloud.ibm.com"


def _session(method: str, path: str, operation: str, handler: str) -> Route:
    return owned(method, path, operation, handler, "session")


class IbmService(TableSide[IbmScenario, IbmFault]):
    """The IBM side's requests answered, from any number of server threads."""

    _draws = "ibm-fault"
    ROUTES = (
        Route("POST", IAM_PATH, "IamToken", "_iam_token"),
        Route("GET", f"{API}/backends", "ListBackends", "_list_backends"),
        on_device("GET", f"{API}/backends/<b>/status", "GetBackendStatus", "_backend_doc", "b"),
        on_device("GET", f"{API}/backends/<b>/configuration", "GetBackendConfiguration",
                  "_backend_doc", "b"),
        on_device("GET", f"{API}/backends/<b>/properties", "GetBackendProperties",
                  "_backend_doc", "b"),
        Route("POST", f"{API}/jobs", "CreateJob", "_create_job", Body("backend"), Body("backend"),
              creates=True),
        Route("GET", f"{API}/jobs", "ListJobs", "_list_jobs", device=Query("backend")),
        owned("GET", f"{API}/jobs/<job>", "GetJob", "_get_job"),
        owned("DELETE", f"{API}/jobs/<job>", "DeleteJob", "_delete_job"),
        owned("POST", f"{API}/jobs/<job>/cancel", "CancelJob", "_cancel_job"),
        owned("GET", f"{API}/jobs/<job>/results", "GetJobResults", "_job_results"),
        owned("GET", f"{API}/jobs/<job>/logs", "GetJobLogs", "_job_logs"),
        Route("GET", f"{API}/instances/usage", "GetInstanceUsage", "_instance_usage"),
        Route("POST", f"{API}/sessions", "CreateSession", "_create_session",
              device=Body("backend", "backend_name"), creates=True),
        _session("GET", f"{API}/sessions/<session>", "GetSession", "_get_session"),
        _session("PATCH", f"{API}/sessions/<session>", "UpdateSession", "_update_session"),
        _session("DELETE", f"{API}/sessions/<session>/close", "CloseSession", "_close_session"),
    )  # fmt: skip

    def __init__(
        self,
        scenario: IbmScenario,
        clock: Clock,
        seed: int = 0,
        wall: Callable[[], float] = time.time,
        **wiring: Any,
    ) -> None:
        super().__init__(scenario, clock, seed, **wiring)
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

    def bill(self) -> SideBill:
        """Every job and session so far, at the scenario's ``price_per_second``."""
        return SideBill(*self.runtime.bill(self.scenario.price_per_second))

    def env(self, url: str) -> dict[str, str]:
        """QRMI's settings for each emulated backend (``<backend>_QRMI_IBM_QCS_*``, as qrmi
        reads them), plus the same without a prefix (flux-quantum's default for any
        backend), the emulator serving at ``url``."""
        base = url.rstrip("/")
        settings = {
            "QRMI_IBM_QCS_ENDPOINT": base + API,
            "QRMI_IBM_QCS_IAM_ENDPOINT": base + PREFIX,
            "QRMI_IBM_QCS_IAM_APIKEY": self.scenario.apikey or APIKEY,
            "QRMI_IBM_QCS_SERVICE_CRN": self.scenario.crn or CRN,
        }
        env = dict(settings)
        for backend in self.scenario.backends:
            env.update({f"{backend.name}_{key}": value for key, value in settings.items()})
        # qiskit-ibm-runtime's own settings (it reads IAM_URL; the rest are what its
        # QiskitRuntimeService is given, with the emulator as its HTTP proxy: see
        # docs/vendors.md and ibm.cloud).
        env.update(
            {
                "QISKIT_IBM_CHANNEL": "ibm_quantum_platform",
                "QISKIT_IBM_URL": CLOUD_URL,
                "QISKIT_IBM_TOKEN": settings["QRMI_IBM_QCS_IAM_APIKEY"],
                "QISKIT_IBM_INSTANCE": settings["QRMI_IBM_QCS_SERVICE_CRN"],
                "IAM_URL": base + PREFIX,
            }
        )
        return env

    # -- dispatch -----------------------------------------------------------------------------

    def _not_found(self, request: Request) -> Refusal:
        return refuse(1000, f"the emulator does not implement {request.method} {request.path}", 404)

    def _device_of(self, kind: str, key: str) -> str | None:
        if kind == "session":
            return self.runtime.backend_of_session(key)
        return self.runtime.backend_of_job(key)

    def _created_effects(self, faults: Sequence[IbmFault]) -> list[str]:
        return [*super()._created_effects(faults), *["cancel_job" for f in faults if f.cancel_job]]

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return ibm_error(status, 1000, message)

    def _fault_error(self, fault: IbmFault, route: SideRoute) -> Response | None:
        if not (fault.status or fault.code):
            return None
        status = fault.http_status()
        code = fault.code or {429: 1202}.get(status, 1000)
        message = fault.message or f"{ERROR_CODES.get(code, (0, 'Error.'))[1]} (injected)"
        return ibm_error(status, code, message)

    # -- IAM ----------------------------------------------------------------------------------

    def _iam_token(self, route: SideRoute, request: Request) -> Response:
        form = parse_qs(request.body.decode("utf-8", "replace"))
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

    def _authorize(self, route: SideRoute, request: Request) -> None:
        if route.operation == "IamToken":
            return
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

    def _list_backends(self, route: SideRoute, request: Request) -> Response:
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

    def _backend_doc(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.target)
        [(status, reason, pending)] = self.runtime.backend_states([spec])
        if route.operation == "GetBackendStatus":
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
        if route.operation == "GetBackendConfiguration":
            return json_response(200, configuration(spec, BACKEND_VERSION))
        when = timestamp(self.clock, 0.0)
        return json_response(200, properties(spec, BACKEND_VERSION, self.seed, when))

    # -- jobs ---------------------------------------------------------------------------------

    def _create_job(
        self, route: SideRoute, request: Request, faults: list[IbmFault]
    ) -> tuple[Response, str]:
        body = _json(request)
        if body.get("program_id") != "sampler":
            raise refuse(1002, "the emulator runs the sampler program only", 400)
        spec = self._spec(route.device)
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
        refused = self._non_isa(pubs, spec)
        results = []
        for qasm, shots in pubs if refused is None else []:
            results.append((register_name(qasm), *self._simulate(qasm, shots, spec), shots))
        job_id = self.runtime.create_job(
            spec,
            params,
            results,
            shots=executions,
            session_id=session_id,
            cost=_integer(body, "cost", 0),
            failure=self.failure(faults),
            cancels=any(f.cancel_job for f in faults),
            support_qiskit=params.get("support_qiskit") is not False,
            refused=refused,
        )
        answer = {"id": job_id, "backend": spec.name, "private": False}
        if session_id is not None:
            answer["session_id"] = session_id
        return json_response(200, answer), job_id

    def _non_isa(self, pubs: list[tuple[str, int]], spec: IbmBackendSpec) -> tuple[int, str] | None:
        """IBM's code and reason when a pub's circuit is not written in the backend's
        ISA (the job is created and fails at once, as IBM's validation fails it); None
        when all are, or the scenario is not strict."""
        for qasm, _shots in pubs:  # wider than the device: IBM's validation refuses it
            try:
                openqasm.check_width(qasm, spec.qubits)
            except ProgramError as exc:
                raise refuse(
                    1002, f"Error in the validation process of the job: {exc}", 400
                ) from None
        if not self.scenario.strict:
            return None
        for qasm, _shots in pubs:
            detail = isa.violation(qasm, spec.basis_gates, spec.pairs, spec.qubits)
            if detail is not None:
                return isa.CODE, isa.reason(detail)
        return None

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
        source = programs.braket_source(qasm)
        try:
            result = programs.run(source, shots, spec.qubits, MAX_SIMULATED_QUBITS)
        except ProgramError as exc:
            raise refuse(1002, f"Error in the validation process of the job: {exc}", 400) from exc
        return bit_rows(result.get("measurements") or [])

    def _get_job(self, route: SideRoute, request: Request) -> Response:
        with_params = request.first("exclude_params") != "true"
        return json_response(200, self.runtime.job_document(route.target, with_params))

    def _list_jobs(self, route: SideRoute, request: Request) -> Response:
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

    def _cancel_job(self, route: SideRoute, request: Request) -> Response:
        self.runtime.cancel_job(route.target)
        return Response(204)

    def _delete_job(self, route: SideRoute, request: Request) -> Response:
        self.runtime.delete_job(route.target)
        return Response(204)

    def _job_results(self, route: SideRoute, request: Request) -> Response:
        return text_response(self.runtime.job_result(route.target))

    def _job_logs(self, route: SideRoute, request: Request) -> Response:
        self.runtime.job(route.target)
        return text_response("")

    def _instance_usage(self, route: SideRoute, request: Request) -> Response:
        """The instance's usage this period: the seconds its jobs were billed, no limit."""
        jobs = self.bill().tasks
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

    def _create_session(
        self, route: SideRoute, request: Request, faults: list[IbmFault]
    ) -> tuple[Response, str]:
        body = _json(request)
        mode = body.get("mode", "dedicated")
        if mode not in ("dedicated", "batch"):
            raise refuse(1000, f"mode must be dedicated or batch, got {mode!r}", 400)
        spec = self._spec(route.device)
        if mode == "dedicated" and self.scenario.plan == "open":
            raise refuse(1352)
        max_ttl = _integer(body, "max_ttl", 28800)
        doc = self.runtime.open_session(spec, mode, max_ttl)
        return json_response(200, doc), doc["id"]

    def _get_session(self, route: SideRoute, request: Request) -> Response:
        return json_response(200, self.runtime.session_document(route.target))

    def _update_session(self, route: SideRoute, request: Request) -> Response:
        accepting = _json(request).get("accepting_jobs")
        if not isinstance(accepting, bool):
            raise refuse(1000, "accepting_jobs must be true or false", 400)
        self.runtime.set_accepting(route.target, accepting)
        return Response(204)

    def _close_session(self, route: SideRoute, request: Request) -> Response:
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


def _integer(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key)
    return value if isinstance(value, int) else default
