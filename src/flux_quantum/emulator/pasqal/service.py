"""The emulated Pasqal side: Pasqal Cloud's API and an on-premises warden, as qrmi 0.26.4 uses them.

This module owns the Pasqal part of the emulator: it answers what the unmodified ``qrmi``
client (0.26.4) sends for ``ResourceType.PasqalCloud`` under ``PREFIX`` and for
``ResourceType.PasqalLocal`` under ``LOCAL_PREFIX/<device>``, for the devices of a
``PasqalScenario``; batches and jobs queue on ``DeviceQueue`` in emulated time, run the
sequence through ``pasqal_program.sample`` and are billed at the scenario's site rate;
its call log and counts are the shared ``VendorSide``'s (``side``). It must never sleep, never read the wall clock except for token expiry (the client
compares ``exp`` with its own clock), and never log a credential.

Checked against qrmi 0.26.4 with a logging loopback server (its source: the
qiskit-community/qrmi crates ``pasqal_cloud_client``, ``pasqal_local_client``):

PasqalCloud (resource id = a device type: FRESNEL, FRESNEL_CAN1, EMU_MPS, EMU_FREE,
EMU_FRESNEL; anything else is ``InvalidInputError``). ``from_config`` keys are unprefixed
(``QRMI_PASQAL_CLOUD_BASE_URL``, ``_PROJECT_ID``, ``_AUTH_TOKEN``, ``_AUTH_ENDPOINT``,
``_CLIENT_ID``, ``_CLIENT_SECRET``, ``PASQAL_USERNAME``/``PASQAL_PASSWORD``,
``PASQAL_CONFIG_ROOT``); from the environment they are ``<device>_QRMI_PASQAL_CLOUD_*``
(plus ``<device>_PASQAL_CONFIG_ROOT``); a ``.pasqal/config`` file (``key = value``:
username, password, client_id, client_secret, token, project_id, auth_endpoint) under
the config root or ``HOME`` is the fallback. No HTTP retries: a 503 is one request.

- token: ``POST <auth endpoint>`` form ``grant_type=client_credentials, client_id,
  client_secret, audience`` (service account) or ``grant_type=http://auth0.com/oauth/
  grant-type/password-realm, realm=pcs-users, client_id, audience, username, password``;
  reads ``{"access_token"}``; a JWT is refreshed 10 s before its ``exp``, a non-JWT
  token is kept until refused. Then ``Authorization: Bearer``.
- ``status()``: ``GET /core-fast/api/v1/devices?device_type=X`` (no auth), reads
  ``data[0].availability``: ``ACTIVE`` -> Online, anything else -> Offline (``status``
  UP/DOWN is not read; never Paused; no pending count, no capacity, no reason).
- ``task_start(Payload.PasqalCloud(sequence, job_runs))``: ``POST /core-fast/api/v1/
  batches`` ``{"sequence_builder", "jobs": [{"runs"}], "device_type", "project_id"}``,
  reads ``data.id`` (the batch id is the task id).
- ``task_status``: ``GET /core-fast/api/v2/batches/{id}`` (``data.status`` must be one
  of PENDING RUNNING CANCELING DONE CANCELED ERROR, ``data.job_ids`` non-empty), then
  ``GET /core-fast/api/v2/jobs/{job_ids[0]}``: its ``data.status`` PENDING -> Queued,
  RUNNING -> Running, DONE -> Completed, CANCELING/CANCELED -> Cancelled, ERROR -> Failed.
- ``task_result``: ``GET /core-fast/api/v1/batches/{id}/full_results``, ``data`` a map of
  exactly one job id to ``{"counter": {bitstring: count}}``; ``.value`` is that job's
  JSON, ``{"counter": {...}}``.
- ``task_stop``: ``PATCH /core-fast/api/v2/batches/{id}/cancel``; ``target``:
  ``GET /core-fast/api/v1/devices/specs/X`` (EMU_*: ``/devices/public-specs``, no auth),
  ``.value`` a JSON list ``[{"device_type", "specs"}]``; ``acquire`` is a dummy UUID.
- An HTTP error reads as ``QrmiError_("Status: 503 Service Unavailable, Fail <body>")``.

PasqalLocal (any resource id): ``from_config`` needs ``QRMI_WARDEN_URL`` (``QRMI_URL`` is
accepted with "QRMI_URL is deprecated, please use QRMI_WARDEN_URL instead"),
``QRMI_JOB_UID`` (an integer) and ``QRMI_JOB_ID`` (else ``ConfigError``), and takes
``QRMI_JOB_ACQUISITION_TOKEN`` (the warden session). ``status()``: ``GET /accessible``
without credentials, ``{"is_accessible", "message"}``: true -> Online, false -> Offline
(the message is not kept). Every other call first makes a munge credential (libmunge,
sent as ``x-munge-cred``); without a running munged it fails as "munge encode failed:
Socket communication error" before any request. The warden API the emulator serves from
the pasqal_local_client source: ``POST /sessions`` ``{"user_id", "slurm_job_id"}`` ->
``{"id"}``; ``DELETE /sessions/{id}``; ``POST /jobs`` ``{"sequence", "shots"}`` with
``X-Warden-Session`` -> ``{"id": int, "user_id", "status", "results"}`` (status PENDING
RUNNING DONE CANCELED ERROR; ``results`` a JSON string once DONE); ``GET /jobs``,
``GET /jobs/{id}``, ``GET /jobs/{id}/logs`` -> ``{"logs"}``, ``GET /qpu/specs`` ->
``{"specs"}``; the emulator also takes ``PATCH /jobs/{id}/cancel``.

Devices are refused work (Pasqal's error body) while paused or offline, over their atoms,
runs or ``max_slots``. ``env(url)`` gives every device's QRMI settings.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator.bill import BilledSession, BilledTask
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.pasqal.scenario import PasqalDeviceSpec, PasqalFault, PasqalScenario
from flux_quantum.emulator.queue import DeviceQueue, TaskTimeline
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.wire import Request, Response, json_response
from flux_quantum.vendors import pasqal_program

PREFIX = "/pasqal"
LOCAL_PREFIX = "/pasqal-local"
AUTH_PATH = PREFIX + "/oauth/token"
API = PREFIX + "/core-fast/api"
TOKEN_LIFETIME = 3600
LIST_LIMIT = 100
_STATES = {
    "QUEUED": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETED": "DONE",
    "FAILED": "ERROR",
    "CANCELLING": "CANCELING",
    "CANCELLED": "CANCELED",
}
_PENDING = ("PENDING", "RUNNING")


class PasqalRefusal(Refusal):
    """Pasqal's answer to a request it refuses."""


def pasqal_error(status: int, message: str) -> Response:
    """Pasqal Cloud's error envelope."""
    doc = {"code": status, "data": {"description": message}, "message": message, "status": "fail"}
    response = json_response(status, doc)
    return Response(status, response.body, response.headers, error=f"HTTP{status}")


def warden_error(status: int, message: str) -> Response:
    """The warden's error body (FastAPI's ``detail``)."""
    response = json_response(status, {"detail": message})
    return Response(status, response.body, response.headers, error=f"HTTP{status}")


def ok(data: Any) -> Response:
    return json_response(200, {"code": 200, "data": data, "message": "OK.", "status": "success"})


@dataclass
class _Batch:
    id: str
    job_id: str
    device: str
    kind: str
    sequence: str
    runs: int
    created_t: float
    counts: dict[str, int]
    project_id: str = ""
    user_id: str = ""
    failure: str | None = None
    local_id: int | None = None


@dataclass(frozen=True)
class _Route:
    operation: str
    handler: Callable[[Request, list[str]], Response]
    device: str | None = None
    target: str | None = None
    local: bool = False


class PasqalService(VendorSide[_Route, PasqalFault]):
    """The Pasqal side's requests answered, from any number of server threads."""

    _refusal = PasqalRefusal

    def __init__(
        self,
        scenario: PasqalScenario,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock, seed, stop, on_call, faults=len(scenario.faults))
        self.scenario = scenario
        self._wall = wall
        self._queues = {d.name: DeviceQueue(_queue_spec(d), seed) for d in scenario.devices}
        self._batches: dict[str, _Batch] = {}
        self._local_ids: dict[int, str] = {}
        self._sessions: dict[str, tuple[str, str]] = {}  # id -> (device, user id)
        self._key = f"flux-quantum-emulator:pasqal:{seed}:{secrets.token_hex(8)}".encode()

    # -- views for tests and the facade ---------------------------------------------------------

    def job_ids(self, device: str | None = None) -> list[str]:
        """Every batch (cloud) or job (local) created so far (on ``device``), oldest first,
        by the id the client holds."""
        with self._lock:
            return [self._task_id(b) for b in self._batches.values() if device in (None, b.device)]

    def job_timeline(self, task_id: str) -> TaskTimeline:
        with self._lock:
            batch = self._batch(task_id)
            return self._queues[batch.device].timeline(batch.id, self.clock.now())

    def bill(self) -> tuple[list[BilledTask], list[BilledSession]]:
        """Every batch so far; a completed one is billed its QPU seconds at the site rate."""
        with self._lock:
            now = self.clock.now()
            tasks = []
            for batch in self._batches.values():
                progress = self._queues[batch.device].progress(batch.id, now)
                seconds = None
                if progress.status == "COMPLETED" and progress.started_at is not None:
                    assert progress.ended_at is not None
                    seconds = round(progress.ended_at - progress.started_at, 3)
                tasks.append(
                    BilledTask(
                        vendor="pasqal",
                        id=self._task_id(batch),
                        device=batch.device,
                        token=pasqal_program.token_of(batch.sequence),
                        state=progress.status,
                        shots=batch.runs,
                        billed_seconds=seconds,
                        cost=(seconds or 0.0) * self.scenario.site_price_per_second,
                        session=None,
                        created=batch.created_t,
                        started=progress.started_at,
                        ended=progress.ended_at,
                    )
                )
        return tasks, []

    def env(self, url: str) -> dict[str, str]:
        """QRMI's settings (``<device>_``-prefixed, as a site's QRMI configuration for the
        Slurm plugin holds them) that point the real client at this service served at
        ``url``. Local devices also need the job's ``QRMI_JOB_UID`` and ``QRMI_JOB_ID``
        (the plugin sets them per job) and a munge daemon."""
        url = url.rstrip("/")
        env: dict[str, str] = {}
        for spec in self.scenario.devices:
            if spec.kind == "local":
                env[f"{spec.name}_QRMI_WARDEN_URL"] = f"{url}{LOCAL_PREFIX}/{spec.name}"
                continue
            p = f"{spec.name}_QRMI_PASQAL_CLOUD_"
            env[p + "BASE_URL"] = url + PREFIX
            env[p + "AUTH_ENDPOINT"] = url + AUTH_PATH
            env[p + "PROJECT_ID"] = self.scenario.project_id or "flux-quantum-emulator"
            env[p + "CLIENT_ID"] = self.scenario.client_id or "flux-quantum-emulator"
            env[p + "CLIENT_SECRET"] = self.scenario.client_secret or "emulator-secret"
        return env

    # -- dispatch -----------------------------------------------------------------------------

    def _refused(self, request: Request, refusal: Refusal) -> _Route:
        return _Route("Unknown", self._unknown, local=request.path.startswith(LOCAL_PREFIX))

    def _target(self, route: _Route) -> str | None:
        return route.target or route.device

    def _faults_of(self) -> Sequence[PasqalFault]:
        return self.scenario.faults

    def _fault_device(self, route: _Route) -> str | None:
        return route.device

    def _apply(
        self, route: _Route, request: Request, faults: list[PasqalFault], created: list[str]
    ) -> Response:
        args = [next((f.fail_job for f in faults if f.fail_job), "")]
        response = route.handler(request, args)
        if response.status == 200 and route.operation in ("CreateBatch", "LocalCreateJob"):
            created.append(json.loads(response.body).get("data", {}).get("id", "")
                           if route.operation == "CreateBatch"
                           else str(json.loads(response.body)["id"]))  # fmt: skip
            if args[0]:
                self._count("fail_job")
        return response

    def _internal_error(self, route: _Route, message: str) -> Response:
        return (warden_error if route.local else pasqal_error)(500, message)

    def _fault_error(self, fault: PasqalFault, route: _Route) -> Response | None:
        if not fault.status:
            return None
        message = fault.message or f"injected error {fault.status}"
        return (warden_error if route.local else pasqal_error)(fault.status, message)

    def _route(self, request: Request) -> _Route:
        method, path = request.method, request.path
        if path.startswith(LOCAL_PREFIX + "/"):
            return self._local_route(request)
        if path == AUTH_PATH and method == "POST":
            return _Route("Token", self._token)
        parts = request.segments(API)
        if not path.startswith(API + "/") or len(parts) < 2:
            raise PasqalRefusal(
                pasqal_error(404, f"the emulator does not implement {method} {path}")
            )
        version, head, rest = parts[0], parts[1], parts[2:]
        n = len(rest)
        if head == "devices" and method == "GET":
            if n == 0:
                return _Route("GetDevice", self._get_device, request.first("device_type"))
            if rest == ["public-specs"]:
                return _Route("GetDeviceSpecs", self._public_specs)
            if n == 2 and rest[0] == "specs":
                return _Route("GetDeviceSpecs", self._specs, rest[1])
        if head == "batches":
            if n == 0 and method == "POST" and version == "v1":
                return _Route("CreateBatch", self._create_batch, self._body_device(request))
            if n == 0 and method == "GET" and version == "v2":
                return _Route("ListBatches", self._list_batches, request.first("device_type"))
            batch = self._find_batch(rest[0]) if n else None
            device = batch.device if batch else None
            if n == 1 and method == "GET" and version == "v2":
                return _Route("GetBatch", self._get_batch, device, rest[0])
            if rest[1:] == ["full_results"] and method == "GET" and version == "v1":
                return _Route("GetResults", self._full_results, device, rest[0])
            if rest[1:] == ["cancel"] and method == "PATCH" and version == "v2":
                return _Route("CancelBatch", self._cancel_batch, device, rest[0])
        if head == "jobs" and n == 1 and method == "GET" and version == "v2":
            batch = self._find_batch(rest[0], by_job=True)
            return _Route("GetJob", self._get_job, batch.device if batch else None, rest[0])
        raise PasqalRefusal(pasqal_error(404, f"the emulator does not implement {method} {path}"))

    def _local_route(self, request: Request) -> _Route:
        method = request.method
        parts = request.segments(LOCAL_PREFIX)
        spec = self.scenario.device(parts[0], "local") if parts else None
        if spec is None:
            raise PasqalRefusal(warden_error(404, f"no on-premises device at {request.path}"))
        device, rest = spec.name, parts[1:]
        n = len(rest)
        if rest == ["accessible"] and method == "GET":
            return _Route("LocalAccessible", self._accessible, device, local=True)
        routes: dict[tuple[str, ...], tuple[str, Callable[[Request, list[str]], Response]]] = {
            ("POST", "jobs"): ("LocalCreateJob", self._local_create),
            ("GET", "jobs"): ("LocalListJobs", self._local_list),
            ("GET", "qpu", "specs"): ("LocalSpecs", self._local_specs),
            ("POST", "sessions"): ("LocalCreateSession", self._local_session),
        }
        if n >= 1 and (method, *rest) in [tuple(k) for k in routes]:
            operation, handler = routes[(method, *rest)]
            return _Route(operation, self._munged(handler), device, local=True)
        if n >= 2 and rest[0] == "jobs":
            target = rest[1]
            if n == 2 and method == "GET":
                return _Route("LocalGetJob", self._munged(self._local_get), device, target, True)
            if rest[2:] == ["logs"] and method == "GET":
                return _Route("LocalJobLogs", self._munged(self._local_logs), device, target, True)
            if rest[2:] == ["cancel"] and method in ("PATCH", "POST"):
                return _Route(
                    "LocalCancelJob", self._munged(self._local_cancel), device, target, True
                )
        if n == 2 and rest[0] == "sessions" and method == "DELETE":
            return _Route(
                "LocalRevokeSession", self._munged(self._local_revoke), device, rest[1], True
            )
        raise PasqalRefusal(
            warden_error(404, f"the emulator does not implement {method} {request.path}")
        )

    def _unknown(self, request: Request, args: list[str]) -> Response:
        raise PasqalRefusal(pasqal_error(404, "unknown operation"))

    # -- auth ---------------------------------------------------------------------------------

    def _token(self, request: Request, args: list[str]) -> Response:
        form = {k: v[0] for k, v in parse_qs(request.body.decode("utf-8", "replace")).items()}
        grant = form.get("grant_type", "")
        s = self.scenario
        if grant == "client_credentials":
            good = bool(form.get("client_id")) and bool(form.get("client_secret"))
            if s.client_id is not None:
                good = hmac.compare_digest(form.get("client_id", ""), s.client_id) and (
                    hmac.compare_digest(form.get("client_secret", ""), s.client_secret or "")
                )
        elif grant.endswith("password-realm"):
            good = bool(form.get("username")) and bool(form.get("password"))
        else:
            good = False
        if not good:
            return json_response(
                403, {"error": "access_denied", "error_description": "Wrong credentials."}
            )
        claims = {
            "sub": form.get("client_id") or form.get("username"),
            "exp": int(self._wall()) + TOKEN_LIFETIME,
        }
        return json_response(
            200,
            {
                "access_token": self._sign(claims),
                "expires_in": TOKEN_LIFETIME,
                "token_type": "Bearer",
            },
        )

    def _sign(self, claims: dict[str, Any]) -> str:
        def part(doc: Any) -> str:
            raw = json.dumps(doc, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        head = f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}"
        mac = hmac.new(self._key, head.encode(), hashlib.sha256).digest()
        return f"{head}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"

    def _authorize(self, request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        head, _, mac = token.rpartition(".")
        expected = hmac.new(self._key, head.encode(), hashlib.sha256).digest()
        good = scheme.lower() == "bearer" and hmac.compare_digest(
            mac, base64.urlsafe_b64encode(expected).rstrip(b"=").decode()
        )
        if good:
            payload = head.partition(".")[2]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            good = claims.get("exp", 0) > self._wall()
        if not good:
            raise PasqalRefusal(pasqal_error(401, "Unauthorized: no valid bearer token."))

    def _munged(
        self, handler: Callable[[Request, list[str]], Response]
    ) -> Callable[[Request, list[str]], Response]:
        """The warden's check: a munge credential must come with the request (the emulator
        cannot decode one without munged, so any non-empty credential passes)."""

        def checked(request: Request, args: list[str]) -> Response:
            if not request.headers.get("x-munge-cred", "").strip():
                raise PasqalRefusal(warden_error(401, "invalid munge token"))
            return handler(request, args)

        return checked

    # -- devices ------------------------------------------------------------------------------

    def _state(self, spec: PasqalDeviceSpec, now: float) -> str:
        """``online``, ``paused`` or ``offline`` at ``now``."""
        if spec.status != "online":
            return spec.status
        for start, end in spec.offline:
            if start <= now < end:
                return "offline"
        for start, end in spec.paused:
            if start <= now < end:
                return "paused"
        return "online"

    def _spec(self, name: str | None, kind: str = "cloud") -> PasqalDeviceSpec:
        spec = self.scenario.device(name or "", kind)
        if spec is None:
            raise PasqalRefusal(pasqal_error(404, f"Device {name} not found."))
        return spec

    def _get_device(self, request: Request, args: list[str]) -> Response:
        spec = self.scenario.device(request.first("device_type") or "", "cloud")
        if spec is None:
            return ok([])
        state = self._state(spec, self.clock.now())
        return ok(
            [
                {
                    "device_type": spec.name,
                    "status": "UP" if state == "online" else "DOWN",
                    "availability": "INACTIVE" if state == "offline" else "ACTIVE",
                    "pending_jobs": self._pending_all(spec),
                }
            ]
        )

    def _pending_all(self, spec: PasqalDeviceSpec) -> int:
        with self._lock:
            return self._queues[spec.name].queue_size(self.clock.now())

    def _specs_doc(self, spec: PasqalDeviceSpec) -> dict[str, str]:
        specs = {"name": spec.name, "max_atom_num": spec.atoms, "max_runs": spec.max_runs}
        return {"device_type": spec.name, "specs": json.dumps(specs)}

    def _specs(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        return ok(self._specs_doc(self._spec(request.segments(API)[-1])))

    def _public_specs(self, request: Request, args: list[str]) -> Response:
        return ok([self._specs_doc(s) for s in self.scenario.devices if s.kind == "cloud"])

    # -- batches ------------------------------------------------------------------------------

    def _body_device(self, request: Request) -> str | None:
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            return None
        value = body.get("device_type") if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    def _admit(
        self,
        spec: PasqalDeviceSpec,
        sequence: Any,
        runs: Any,
        refuse: Callable[[int, str], Response],
    ) -> None:
        """Refuse a batch the device cannot take now."""
        state = self._state(spec, self.clock.now())
        if state != "online":
            raise PasqalRefusal(
                refuse(409, f"Device {spec.name} is {state} and takes no new batch.")
            )
        if not isinstance(sequence, str):
            raise PasqalRefusal(refuse(400, "the sequence must be a string"))
        problem = pasqal_program.check(sequence, spec.atoms)
        if problem is not None:
            raise PasqalRefusal(refuse(400, f"Invalid sequence: {problem}"))
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= spec.max_runs:
            raise PasqalRefusal(
                refuse(400, f"runs must be between 1 and {spec.max_runs}, got {runs!r}")
            )
        if spec.max_slots is not None:
            with self._lock:
                now = self.clock.now()
                busy = sum(
                    1
                    for b in self._batches.values()
                    if b.device == spec.name
                    and _STATES[self._queues[b.device].progress(b.id, now).status] in _PENDING
                )
            if busy >= spec.max_slots:
                raise PasqalRefusal(
                    refuse(429, f"Device {spec.name} has no free slot ({spec.max_slots} in use).")
                )

    def _new_batch(
        self, spec: PasqalDeviceSpec, sequence: str, runs: int, failure: str, **extra: Any
    ) -> _Batch:
        with self._lock:
            now = self.clock.now()
            batch_id = _draw(self.seed, "batch", len(self._batches))
            job_id = _draw(self.seed, "job", len(self._batches))
            counts = pasqal_program.sample(sequence, runs, f"{self.seed}:{batch_id}")
            batch = _Batch(batch_id, job_id, spec.name, spec.kind, sequence, runs, now, counts,
                           failure=failure or None, **extra)  # fmt: skip
            if spec.kind == "local":
                batch.local_id = len(self._local_ids) + 1
                self._local_ids[batch.local_id] = batch_id
            self._queues[spec.name].submit(batch_id, now, runs, fails=bool(failure))
            self._batches[batch_id] = batch
            return batch

    def _create_batch(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            raise PasqalRefusal(pasqal_error(400, "the body is not JSON")) from None
        jobs = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(jobs, list) or len(jobs) != 1 or not isinstance(jobs[0], dict):
            raise PasqalRefusal(pasqal_error(400, "the emulator takes batches of exactly one job"))
        spec = self._spec(body.get("device_type"))
        project = body.get("project_id")
        if self.scenario.project_id is not None and project != self.scenario.project_id:
            raise PasqalRefusal(pasqal_error(403, f"Forbidden: no access to project {project!r}."))
        self._admit(spec, body.get("sequence_builder"), jobs[0].get("runs"), pasqal_error)
        batch = self._new_batch(spec, body["sequence_builder"], jobs[0]["runs"], args[0],
                                project_id=str(project or ""))  # fmt: skip
        with self._lock:
            return ok(self._batch_doc(batch, self.clock.now()))

    def _batch(self, task_id: str | None) -> _Batch:
        batch = self._find_batch(task_id or "")
        if batch is None:
            raise PasqalRefusal(pasqal_error(404, f"Batch {task_id} not found."))
        return batch

    def _find_batch(self, key: str, by_job: bool = False) -> _Batch | None:
        with self._lock:
            if key.isdigit() and int(key) in self._local_ids:
                return self._batches[self._local_ids[int(key)]]
            if by_job:
                return next((b for b in self._batches.values() if b.job_id == key), None)
            return self._batches.get(key)

    def _task_id(self, batch: _Batch) -> str:
        return batch.id if batch.local_id is None else str(batch.local_id)

    def _status(self, batch: _Batch, now: float) -> tuple[str, Any]:
        progress = self._queues[batch.device].progress(batch.id, now)
        return _STATES[progress.status], progress

    def _batch_doc(self, batch: _Batch, now: float) -> dict[str, Any]:
        status, progress = self._status(batch, now)
        when = timestamp(self.clock, batch.created_t).isoformat()
        doc: dict[str, Any] = {
            "id": batch.id,
            "status": status,
            "job_ids": [batch.job_id],
            "device_type": batch.device,
            "project_id": batch.project_id,
            "created_at": when,
            "sequence_builder": batch.sequence,
            "jobs": [{"id": batch.job_id, "runs": batch.runs, "status": status}],
        }
        if progress.started_at is not None:
            doc["start_datetime"] = timestamp(self.clock, progress.started_at).isoformat()
        if progress.ended_at is not None:
            doc["end_datetime"] = timestamp(self.clock, progress.ended_at).isoformat()
        return doc

    def _get_batch(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        batch = self._batch(request.segments(API)[2])
        with self._lock:
            return ok(self._batch_doc(batch, self.clock.now()))

    def _list_batches(self, request: Request, args: list[str]) -> Response:
        """Batches of a device type created at or after ``start_date`` (ISO 8601), oldest
        first, ``offset``/``limit`` paged (what ``find_task`` reads)."""
        self._authorize(request)
        q = request.first
        try:
            offset = int(q("offset") or 0)
            limit = min(LIST_LIMIT, int(q("limit") or LIST_LIMIT))
            start = q("start_date")
            since = None
            if start:
                since = (
                    datetime.fromisoformat(start.replace("Z", "+00:00")) - self.clock.epoch
                ).total_seconds()
        except ValueError as exc:
            raise PasqalRefusal(pasqal_error(400, f"bad query parameter: {exc}")) from None
        with self._lock:
            now = self.clock.now()
            rows = [
                self._batch_doc(b, now)
                for b in self._batches.values()
                if b.kind == "cloud"
                and q("device_type") in (None, b.device)
                and (since is None or b.created_t >= since)
            ]
        page = rows[offset : offset + limit]
        body = {"code": 200, "data": page, "message": "OK.", "status": "success",
                "pagination": {"total": len(rows), "start": offset, "end": offset + len(page)}}  # fmt: skip
        return json_response(200, body)

    def _get_job(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        key = request.segments(API)[2]
        batch = self._find_batch(key, by_job=True)
        if batch is None:
            raise PasqalRefusal(pasqal_error(404, f"Job {key} not found."))
        with self._lock:
            status, _ = self._status(batch, self.clock.now())
        doc = {"id": batch.job_id, "batch_id": batch.id, "status": status, "runs": batch.runs}
        if status == "ERROR":
            doc["errors"] = [batch.failure or "Job failed"]
        return ok(doc)

    def _full_results(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        batch = self._batch(request.segments(API)[2])
        with self._lock:
            status, _ = self._status(batch, self.clock.now())
        if status != "DONE":
            raise PasqalRefusal(pasqal_error(400, f"Batch {batch.id} has no results ({status})."))
        return ok({batch.job_id: {"counter": batch.counts}})

    def _cancel_batch(self, request: Request, args: list[str]) -> Response:
        self._authorize(request)
        batch = self._batch(request.segments(API)[2])
        return self._cancel(batch, pasqal_error)

    def _cancel(self, batch: _Batch, refuse: Callable[[int, str], Response]) -> Response:
        with self._lock:
            now = self.clock.now()
            status, _ = self._status(batch, now)
            if status not in _PENDING:
                raise PasqalRefusal(
                    refuse(409, f"Batch {batch.id} is {status} and cannot be cancelled.")
                )
            self._queues[batch.device].cancel(batch.id, now)
            doc = self._batch_doc(batch, now)
        return (
            ok(doc) if batch.local_id is None else json_response(200, self._local_doc(batch, now))
        )

    # -- the on-premises warden ---------------------------------------------------------------

    def _accessible(self, request: Request, args: list[str]) -> Response:
        spec = self._spec(request.segments(LOCAL_PREFIX)[0], "local")
        state = self._state(spec, self.clock.now())
        doc: dict[str, Any] = {
            "is_accessible": state == "online",
            "message": {
                "online": "Warden ok.",
                "paused": "Paused: calibration",
                "offline": "QPU offline",
            }[state],  # fmt: skip
        }
        if spec.max_slots is not None:
            with self._lock:
                now = self.clock.now()
                used = sum(
                    1 for b in self._batches.values()
                    if b.device == spec.name and self._status(b, now)[0] in _PENDING
                )  # fmt: skip
            doc.update(qpu_slots_total=spec.max_slots, qpu_slots_used=used,
                       qpu_slots_available=max(0, spec.max_slots - used))  # fmt: skip
        return json_response(200, doc)

    def _local_doc(self, batch: _Batch, now: float) -> dict[str, Any]:
        status, _ = self._status(batch, now)
        results = json.dumps({"counter": batch.counts}) if status == "DONE" else None
        return {"id": batch.local_id, "user_id": batch.user_id, "status": status,
                "results": results, "sequence": batch.sequence, "shots": batch.runs}  # fmt: skip

    def _local_session(self, request: Request, args: list[str]) -> Response:
        spec = self._spec(request.segments(LOCAL_PREFIX)[0], "local")
        body = json.loads(request.body or b"{}")
        session = str(uuid.uuid4())
        with self._lock:
            self._sessions[session] = (spec.name, str(body.get("user_id", "")))
        return json_response(200, {"id": session})

    def _local_revoke(self, request: Request, args: list[str]) -> Response:
        session = request.segments(LOCAL_PREFIX)[-1]
        with self._lock:
            if self._sessions.pop(session, None) is None:
                raise PasqalRefusal(warden_error(404, f"Session {session} not found."))
        return json_response(200, {"id": session})

    def _local_create(self, request: Request, args: list[str]) -> Response:
        spec = self._spec(request.segments(LOCAL_PREFIX)[0], "local")
        with self._lock:
            session = self._sessions.get(request.headers.get("x-warden-session", ""))
        if session is None or session[0] != spec.name:
            raise PasqalRefusal(warden_error(403, "no valid X-Warden-Session for this QPU"))
        body = json.loads(request.body or b"{}")
        self._admit(spec, body.get("sequence"), body.get("shots"), warden_error)
        batch = self._new_batch(spec, body["sequence"], body["shots"], args[0], user_id=session[1])
        with self._lock:
            return json_response(200, self._local_doc(batch, self.clock.now()))

    def _local_batch(self, request: Request) -> _Batch:
        key = request.segments(LOCAL_PREFIX)[2]
        batch = self._find_batch(key) if key.isdigit() else None
        if batch is None:
            raise PasqalRefusal(warden_error(404, f"Job {key} not found."))
        return batch

    def _local_get(self, request: Request, args: list[str]) -> Response:
        batch = self._local_batch(request)
        with self._lock:
            return json_response(200, self._local_doc(batch, self.clock.now()))

    def _local_list(self, request: Request, args: list[str]) -> Response:
        device = request.segments(LOCAL_PREFIX)[0]
        with self._lock:
            now = self.clock.now()
            docs = [self._local_doc(b, now) for b in self._batches.values() if b.device == device]
        return json_response(200, docs)

    def _local_logs(self, request: Request, args: list[str]) -> Response:
        self._local_batch(request)
        return json_response(200, {"logs": ""})

    def _local_cancel(self, request: Request, args: list[str]) -> Response:
        return self._cancel(self._local_batch(request), warden_error)

    def _local_specs(self, request: Request, args: list[str]) -> Response:
        spec = self._spec(request.segments(LOCAL_PREFIX)[0], "local")
        return json_response(200, {"specs": self._specs_doc(spec)["specs"]})


def _draw(seed: int, kind: str, n: int) -> str:
    """A deterministic UUID4 for the ``n``-th ``kind`` of this seed."""
    digest = hashlib.sha256(f"{seed}:pasqal-{kind}:{n}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _queue_spec(spec: PasqalDeviceSpec) -> DeviceQueueSpec:
    """The shared queue model's view of a Pasqal device: paused and offline windows both
    stop it starting work (creates are refused in them by the service)."""
    windows = [(0.0, math.inf)] if spec.status != "online" else [*spec.paused, *spec.offline]
    return DeviceQueueSpec.waiting_during(spec.queue_key, spec.name, spec.queue, windows)
