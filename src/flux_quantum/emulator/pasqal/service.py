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
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from flux_quantum.emulator.bill import SideBill
from flux_quantum.emulator.clock import Clock
from flux_quantum.emulator.pasqal.batches import PasqalBatches
from flux_quantum.emulator.pasqal.scenario import PasqalFault, PasqalScenario
from flux_quantum.emulator.pasqal.tokens import PasqalTokens
from flux_quantum.emulator.pasqal.warden import PasqalWarden
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
from flux_quantum.emulator.routes import Body, Query, Route, SideRoute, on_device, owned
from flux_quantum.emulator.side import Refusal, TableSide
from flux_quantum.emulator.wire import Request, Response, json_response

LIST_LIMIT = 100
_LOCAL = f"{LOCAL_PREFIX}/<device>"


def _batch(method: str, path: str, operation: str, handler: str) -> Route:
    return owned(method, path, operation, handler, "batch")


def _local(method: str, path: str, operation: str, handler: str) -> Route:
    return on_device(method, f"{_LOCAL}{path}", operation, handler, "device")


def _local_job(method: str, path: str, operation: str, handler: str) -> Route:
    return Route(method, f"{_LOCAL}/jobs/<job>{path}", operation, handler, "<job>", "<device>")


class PasqalService(TableSide[PasqalScenario, PasqalFault]):
    """The Pasqal side's requests answered, from any number of server threads."""

    ROUTES = (
        Route("POST", AUTH_PATH, "Token", "_token"),
        Route("GET", f"{API}/<v>/devices", "GetDevice", "_get_device",
              device=Query("device_type")),
        Route("GET", f"{API}/<v>/devices/public-specs", "GetDeviceSpecs", "_public_specs"),
        on_device("GET", f"{API}/<v>/devices/specs/<device>", "GetDeviceSpecs", "_specs",
                  "device"),
        Route("POST", f"{API}/v1/batches", "CreateBatch", "_create_batch",
              device=Body("device_type"), creates=True),
        Route("GET", f"{API}/v2/batches", "ListBatches", "_list_batches",
              device=Query("device_type")),
        _batch("GET", f"{API}/v2/batches/<batch>", "GetBatch", "_get_batch"),
        _batch("GET", f"{API}/v1/batches/<batch>/full_results", "GetResults", "_full_results"),
        _batch("PATCH", f"{API}/v2/batches/<batch>/cancel", "CancelBatch", "_cancel_batch"),
        owned("GET", f"{API}/v2/jobs/<job>", "GetJob", "_get_job"),
        _local("GET", "/accessible", "LocalAccessible", "_accessible"),
        Route("POST", f"{_LOCAL}/jobs", "LocalCreateJob", "_create_local", device="<device>",
              creates=True),
        _local("GET", "/jobs", "LocalListJobs", "_list_local"),
        _local("GET", "/qpu/specs", "LocalSpecs", "_local_specs"),
        _local("POST", "/sessions", "LocalCreateSession", "_open_session"),
        _local_job("GET", "", "LocalGetJob", "_get_local"),
        _local_job("GET", "/logs", "LocalJobLogs", "_local_logs"),
        _local_job("PATCH", "/cancel", "LocalCancelJob", "_cancel_local"),
        _local_job("POST", "/cancel", "LocalCancelJob", "_cancel_local"),
        Route("DELETE", f"{_LOCAL}/sessions/<session>", "LocalRevokeSession", "_revoke_session",
              "<session>", "<device>"),
    )  # fmt: skip

    def __init__(
        self,
        scenario: PasqalScenario,
        clock: Clock,
        seed: int = 0,
        wall: Callable[[], float] = time.time,
        **wiring: Any,
    ) -> None:
        super().__init__(scenario, clock, seed, **wiring)
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

    def bill(self) -> SideBill:
        """Every batch so far; a completed one is billed its QPU seconds at the site rate."""
        return SideBill(self._batches.bill())

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

    def _route(self, request: Request) -> SideRoute:
        route = super()._route(request)
        if route.operation.startswith("Local") and self._local_device(request) is None:
            raise self._not_found(request)
        return route

    def _local_device(self, request: Request) -> str | None:
        parts = request.segments(LOCAL_PREFIX)
        spec = self.scenario.device(parts[0], "local") if parts else None
        return spec.name if spec else None

    def _not_found(self, request: Request) -> Refusal:
        what = f"the emulator does not implement {request.method} {request.path}"
        if not request.path.startswith(LOCAL_PREFIX + "/"):
            return PasqalRefusal(pasqal_error(404, what))
        if self._local_device(request) is None:
            return PasqalRefusal(warden_error(404, f"no on-premises device at {request.path}"))
        return PasqalRefusal(warden_error(404, what))

    def _target(self, route: SideRoute) -> str | None:
        return route.target or route.device

    def _device_of(self, kind: str, key: str) -> str | None:
        batch = self._batches.find(key, by_job=kind == "job")
        return batch.device if batch else None

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        local = route is not None and route.operation.startswith("Local")
        return (warden_error if local else pasqal_error)(status, message)

    def _fault_error(self, fault: PasqalFault, route: SideRoute) -> Response | None:
        if not fault.status:
            return None
        return self._error(fault.status, fault.message or f"injected error {fault.status}", route)

    def _authorize(self, route: SideRoute, request: Request) -> None:
        """Every warden call but ``/accessible`` must carry a munge credential (the
        emulator cannot decode one without munged, so any non-empty one passes); Pasqal
        Cloud's handlers check their bearer token themselves (some calls need none)."""
        if route.operation.startswith("Local") and route.operation != "LocalAccessible":
            self._warden.check_munge(request)

    def _token(self, route: SideRoute, request: Request) -> Response:
        return self._tokens.issue(request)

    # -- the warden ---------------------------------------------------------------------------

    def _accessible(self, route: SideRoute, request: Request) -> Response:
        return self._warden.accessible(route)

    def _create_local(
        self, route: SideRoute, request: Request, faults: list[PasqalFault]
    ) -> tuple[Response, str]:
        return self._warden.create(route, request, self.failure(faults) or "")

    def _list_local(self, route: SideRoute, request: Request) -> Response:
        return self._warden.list(route)

    def _local_specs(self, route: SideRoute, request: Request) -> Response:
        return self._warden.specs(route)

    def _open_session(self, route: SideRoute, request: Request) -> Response:
        return self._warden.open_session(route, request)

    def _revoke_session(self, route: SideRoute, request: Request) -> Response:
        return self._warden.revoke_session(route)

    def _get_local(self, route: SideRoute, request: Request) -> Response:
        return self._warden.get(route)

    def _local_logs(self, route: SideRoute, request: Request) -> Response:
        return self._warden.logs(route)

    def _cancel_local(self, route: SideRoute, request: Request) -> Response:
        return self._warden.cancel(route)

    # -- devices ------------------------------------------------------------------------------

    def _get_device(self, route: SideRoute, request: Request) -> Response:
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

    def _specs(self, route: SideRoute, request: Request) -> Response:
        self._tokens.authorize(request)
        return ok(specs_document(self._batches.device(route.device)))

    def _public_specs(self, route: SideRoute, request: Request) -> Response:
        return ok([specs_document(s) for s in self.scenario.devices if s.kind == "cloud"])

    # -- batches ------------------------------------------------------------------------------

    def _create_batch(
        self, route: SideRoute, request: Request, faults: list[PasqalFault]
    ) -> tuple[Response, str]:
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
        batch = self._batches.add(spec, body["sequence_builder"], jobs[0]["runs"],
                                  self.failure(faults) or "", project_id=str(project or ""))  # fmt: skip
        with self._lock:
            return ok(self._batches.document(batch, self.clock.now())), batch.id

    def _get_batch(self, route: SideRoute, request: Request) -> Response:
        self._tokens.authorize(request)
        batch = self._batches.get(route.target)
        with self._lock:
            return ok(self._batches.document(batch, self.clock.now()))

    def _list_batches(self, route: SideRoute, request: Request) -> Response:
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

    def _get_job(self, route: SideRoute, request: Request) -> Response:
        self._tokens.authorize(request)
        key = route.fields["job"]
        batch = self._batches.find(key, by_job=True)
        if batch is None:
            raise PasqalRefusal(pasqal_error(404, f"Job {key} not found."))
        with self._lock:
            status, _ = self._batches.status(batch, self.clock.now())
        doc = {"id": batch.job_id, "batch_id": batch.id, "status": status, "runs": batch.runs}
        if status == "ERROR":
            doc["errors"] = [batch.failure or "Job failed"]
        return ok(doc)

    def _full_results(self, route: SideRoute, request: Request) -> Response:
        self._tokens.authorize(request)
        batch = self._batches.get(route.target)
        with self._lock:
            status, _ = self._batches.status(batch, self.clock.now())
        if status != "DONE":
            raise PasqalRefusal(pasqal_error(400, f"Batch {batch.id} has no results ({status})."))
        return ok({batch.job_id: {"counter": batch.counts}})

    def _cancel_batch(self, route: SideRoute, request: Request) -> Response:
        self._tokens.authorize(request)
        return self._batches.cancel(self._batches.get(route.target), pasqal_error)
