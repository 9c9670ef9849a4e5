"""The emulated Pasqal side: Pasqal Cloud's API and an on-premises warden, as qrmi 0.26.4 uses them.

This module owns the Pasqal side's routing and Pasqal Cloud's answers: it routes what the
unmodified ``qrmi`` client (0.26.4) sends for ``ResourceType.PasqalCloud`` under ``PREFIX``
and for ``ResourceType.PasqalLocal`` under ``LOCAL_PREFIX/<device>``, for the devices of a
``PasqalScenario``, injects the scenario's faults, and answers Pasqal Cloud's device and
batch calls. The warden's calls are ``PasqalWarden``'s (``warden``), the batches and local
jobs (queued on the shared ``DeviceQueue`` in emulated time, their sequence sampled through
``pasqal_program.sample``, billed at the scenario's site rate) ``PasqalBatches``'
(``batches``), the bearer tokens ``PasqalTokens``' (``tokens``); its call log and counts
are the shared ``VendorSide``'s (``side``). It must never sleep, never read the wall clock
except for token expiry (the client compares ``exp`` with its own clock), and never log a
credential.

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

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from flux_quantum.emulator.bill import BilledSession, BilledTask
from flux_quantum.emulator.clock import Clock
from flux_quantum.emulator.pasqal.batches import PasqalBatches
from flux_quantum.emulator.pasqal.scenario import PasqalFault, PasqalScenario
from flux_quantum.emulator.pasqal.tokens import PasqalTokens
from flux_quantum.emulator.pasqal.warden import Handler, PasqalWarden
from flux_quantum.emulator.pasqal.wire import (
    API,
    AUTH_PATH,
    LOCAL_PREFIX,
    PREFIX,
    PasqalRefusal,
    ok,
    pasqal_error,
    specs_document,
    warden_error,
)
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.wire import Request, Response, json_response

LIST_LIMIT = 100


@dataclass(frozen=True)
class _Route:
    operation: str
    handler: Handler
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
        self._batches = PasqalBatches(scenario, clock, seed, self._lock)
        self._warden = PasqalWarden(self._batches, self._lock)
        self._tokens = PasqalTokens(scenario, seed, wall)

    # -- views for tests and the facade ---------------------------------------------------------

    def job_ids(self, device: str | None = None) -> list[str]:
        """Every batch (cloud) or job (local) created so far (on ``device``), oldest first,
        by the id the client holds."""
        return self._batches.job_ids(device)

    def job_timeline(self, task_id: str) -> TaskTimeline:
        return self._batches.timeline(task_id)

    def bill(self) -> tuple[list[BilledTask], list[BilledSession]]:
        """Every batch so far; a completed one is billed its QPU seconds at the site rate."""
        return self._batches.bill()

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
            batch = self._batches.find(rest[0]) if n else None
            device = batch.device if batch else None
            if n == 1 and method == "GET" and version == "v2":
                return _Route("GetBatch", self._get_batch, device, rest[0])
            if rest[1:] == ["full_results"] and method == "GET" and version == "v1":
                return _Route("GetResults", self._full_results, device, rest[0])
            if rest[1:] == ["cancel"] and method == "PATCH" and version == "v2":
                return _Route("CancelBatch", self._cancel_batch, device, rest[0])
        if head == "jobs" and n == 1 and method == "GET" and version == "v2":
            batch = self._batches.find(rest[0], by_job=True)
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
            return _Route("LocalAccessible", self._warden.accessible, device, local=True)
        warden, munged = self._warden, self._warden.munged  # every other call needs munge
        routes: dict[tuple[str, ...], tuple[str, Handler]] = {
            ("POST", "jobs"): ("LocalCreateJob", warden.create),
            ("GET", "jobs"): ("LocalListJobs", warden.list),
            ("GET", "qpu", "specs"): ("LocalSpecs", warden.specs),
            ("POST", "sessions"): ("LocalCreateSession", warden.open_session),
        }
        if n >= 1 and (method, *rest) in [tuple(k) for k in routes]:
            operation, handler = routes[(method, *rest)]
            return _Route(operation, munged(handler), device, local=True)
        if n >= 2 and rest[0] == "jobs":
            target = rest[1]
            if n == 2 and method == "GET":
                return _Route("LocalGetJob", munged(warden.get), device, target, True)
            if rest[2:] == ["logs"] and method == "GET":
                return _Route("LocalJobLogs", munged(warden.logs), device, target, True)
            if rest[2:] == ["cancel"] and method in ("PATCH", "POST"):
                return _Route("LocalCancelJob", munged(warden.cancel), device, target, True)
        if n == 2 and rest[0] == "sessions" and method == "DELETE":
            return _Route(
                "LocalRevokeSession", munged(warden.revoke_session), device, rest[1], True
            )
        raise PasqalRefusal(
            warden_error(404, f"the emulator does not implement {method} {request.path}")
        )

    def _unknown(self, request: Request, args: list[str]) -> Response:
        raise PasqalRefusal(pasqal_error(404, "unknown operation"))

    def _token(self, request: Request, args: list[str]) -> Response:
        return self._tokens.issue(request)

    # -- devices ------------------------------------------------------------------------------

    def _get_device(self, request: Request, args: list[str]) -> Response:
        spec = self.scenario.device(request.first("device_type") or "", "cloud")
        if spec is None:
            return ok([])
        state = spec.state_at(self.clock.now())
        return ok(
            [
                {
                    "device_type": spec.name,
                    "status": "UP" if state == "online" else "DOWN",
                    "availability": "INACTIVE" if state == "offline" else "ACTIVE",
                    "pending_jobs": self._batches.waiting(spec),
                }
            ]
        )

    def _specs(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        return ok(specs_document(self._batches.device(request.segments(API)[-1])))

    def _public_specs(self, request: Request, args: list[str]) -> Response:
        return ok([specs_document(s) for s in self.scenario.devices if s.kind == "cloud"])

    # -- batches ------------------------------------------------------------------------------

    def _body_device(self, request: Request) -> str | None:
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            return None
        value = body.get("device_type") if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    def _create_batch(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            raise PasqalRefusal(pasqal_error(400, "the body is not JSON")) from None
        jobs = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(jobs, list) or len(jobs) != 1 or not isinstance(jobs[0], dict):
            raise PasqalRefusal(pasqal_error(400, "the emulator takes batches of exactly one job"))
        spec = self._batches.device(body.get("device_type"))
        project = body.get("project_id")
        if self.scenario.project_id is not None and project != self.scenario.project_id:
            raise PasqalRefusal(pasqal_error(403, f"Forbidden: no access to project {project!r}."))
        self._batches.admit(spec, body.get("sequence_builder"), jobs[0].get("runs"), pasqal_error)
        batch = self._batches.add(spec, body["sequence_builder"], jobs[0]["runs"], args[0],
                                  project_id=str(project or ""))  # fmt: skip
        with self._lock:
            return ok(self._batches.document(batch, self.clock.now()))

    def _get_batch(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        batch = self._batches.get(request.segments(API)[2])
        with self._lock:
            return ok(self._batches.document(batch, self.clock.now()))

    def _list_batches(self, request: Request, args: list[str]) -> Response:
        """Batches of a device type created at or after ``start_date`` (ISO 8601), oldest
        first, ``offset``/``limit`` paged (what ``find_task`` reads)."""
        self._tokens.authorize(request)
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
            rows = self._batches.cloud_documents(q("device_type"), since, self.clock.now())
        page = rows[offset : offset + limit]
        body = {"code": 200, "data": page, "message": "OK.", "status": "success",
                "pagination": {"total": len(rows), "start": offset, "end": offset + len(page)}}  # fmt: skip
        return json_response(200, body)

    def _get_job(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        key = request.segments(API)[2]
        batch = self._batches.find(key, by_job=True)
        if batch is None:
            raise PasqalRefusal(pasqal_error(404, f"Job {key} not found."))
        with self._lock:
            status, _ = self._batches.status(batch, self.clock.now())
        doc = {"id": batch.job_id, "batch_id": batch.id, "status": status, "runs": batch.runs}
        if status == "ERROR":
            doc["errors"] = [batch.failure or "Job failed"]
        return ok(doc)

    def _full_results(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        batch = self._batches.get(request.segments(API)[2])
        with self._lock:
            status, _ = self._batches.status(batch, self.clock.now())
        if status != "DONE":
            raise PasqalRefusal(pasqal_error(400, f"Batch {batch.id} has no results ({status})."))
        return ok({batch.job_id: {"counter": batch.counts}})

    def _cancel_batch(self, request: Request, args: list[str]) -> Response:
        self._tokens.authorize(request)
        batch = self._batches.get(request.segments(API)[2])
        return self._batches.cancel(batch, pasqal_error)
