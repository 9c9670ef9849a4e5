"""The emulated IBM Quantum System (its Quantum System API on premises), as qrmi 0.26.4 sees it.

This module owns the IBM Quantum System side of the emulator under the ``/ibm-qs`` prefix:
IBM Cloud IAM's token call, the Quantum System API's backend and job calls and the
S3-compatible bucket jobs' input and results live in, answered in the shapes QRMI's
``IBMQuantumSystem`` resource parses, for the backends of an ``IbmQsScenario``; jobs
queued and run on the emulated clock (the shared ``DeviceQueue``), their SamplerV2 pubs
run on the Braket local simulator when created, cancelled, deleted or failed as the
scenario says; its call log and counts are the shared ``VendorSide``'s (``side``). It
must never sleep holding its lock, and never read the wall clock except for the IAM
token's ``expiration`` (the client uses ``expires_in``).

Checked against qrmi 0.26.4 (its source, and the real client against a recording loopback
server):

- Settings: ``QuantumResource.from_config(backend, ResourceType.IBMQuantumSystem, config)``
  with ``QRMI_IBM_QS_ENDPOINT`` (the API's base URL; paths ``/v1/...`` are appended),
  ``QRMI_IBM_QS_IAM_ENDPOINT`` (IAM's base URL; ``/identity/token`` is appended),
  ``QRMI_IBM_QS_IAM_APIKEY``, ``QRMI_IBM_QS_SERVICE_CRN``, the bucket's
  ``QRMI_IBM_QS_AWS_ACCESS_KEY_ID``, ``_AWS_SECRET_ACCESS_KEY``, ``_S3_ENDPOINT`` (path
  style: ``{endpoint}{bucket}/{key}``, so it ends with ``/``), ``_S3_BUCKET``,
  ``_S3_REGION`` and ``QRMI_JOB_TIMEOUT_SECONDS`` (a create without it fails). From the
  environment the same names prefixed ``<backend>_``.
- IAM: ``POST {iam}/identity/token`` (form ``grant_type=urn:ibm:params:oauth:grant-type:
  apikey&apikey=...``) before the first API call; every API call then carries
  ``Authorization: Bearer <access_token>`` and ``Service-CRN``.
- ``status()``: ``GET /v1/backends/{b}`` (``{"name", "status": online|paused|offline,
  "message", "version", "locked"}``), ``GET /v1/backends/{b}/lanes``
  (``{"hpc_workload_manager": {"lanes"}, "ibm_quantum_compute": {"lanes"}}``) and
  ``GET /v1/jobs`` (``{"jobs": [...]}``); ResourceStatus ``capacity`` is
  ``max_slots`` = the HPC lanes and ``available_slots`` = those lanes less the backend's
  jobs in ``Running``; ``pending_job_count`` is None.
- ``task_start(Payload.QiskitPrimitive(input, program_id))``: ``PUT {s3}{bucket}/
  input_{id}.json`` (SigV4, the input as written), then ``POST /v1/jobs`` with ``{"id",
  "backend", "program_id", "log_level": "debug", "timeout_secs", "storage": {"input",
  "results", "logs": {"presigned_url", "type": "s3_compatible"}}}``, answered 204; the
  id is the client's own uuid. An unknown ``program_id`` is refused before any call
  (InvalidInputError); another payload kind too (UnsupportedPayloadError).
- ``task_status(id)``: ``GET /v1/jobs/{id}`` (``status``: Running, Completed, Failed,
  Cancelled; a waiting job is Running). ``task_result(id)``: the same GET, then ``GET
  {s3}{bucket}/results_{id}.json``; a Failed job raises TaskNotReadyError "task failed.
  code: C, message: M, solution: S" from its ``reason_*`` fields, a Cancelled one "task
  was cancelled". ``task_stop(id)``: the GET, ``POST /v1/jobs/{id}/cancel`` when
  Running, then ``DELETE /v1/jobs/{id}`` (the job is gone: a later GET is 404).
  ``target()``: ``GET /v1/backends/{b}/configuration`` and ``/properties``.
- Errors: 404 on a job -> TaskNotFoundError; any other status -> QrmiError with the
  status and the request URL in its text, the body dropped.

Emulated (not checked against a live system): the error body of the API's models, the
result document (IBM's plain SamplerV2 JSON for ``support_qiskit: false``, RuntimeEncoder
JSON otherwise), a create whose job id is already known refused 409 (QRMI's own retry
resends a create whose answer was lost, with the same id), a cancel of a finished job
refused 409, estimator jobs refused 400 (the
emulator runs the sampler only), the bucket's SigV4 access key checked (not the
signature).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from flux_quantum.emulator import isa, openqasm, programs, topology
from flux_quantum.emulator.clock import iso, timestamp
from flux_quantum.emulator.ibm.wire import bit_rows, register_name, sampler_result
from flux_quantum.emulator.ibmqs.scenario import IbmQsBackendSpec, IbmQsFault, IbmQsScenario
from flux_quantum.emulator.ibmqs.wire import (
    API,
    IAM_PATH,
    PROGRAMS,
    S3,
    STATUS,
    TERMINAL,
    QsRefusal,
    S3Refusal,
    iam_error,
    object_of,
    qs_error,
)
from flux_quantum.emulator.job_side import JobSide, SideJob
from flux_quantum.emulator.routes import Body, Route, SideRoute, on_device, owned
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import UNSERVED, Missing, Refusal
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response

DEFAULT_SHOTS = 4096
TOKEN_LIFETIME = 3600


@dataclass
class QsJob(SideJob):
    """One job on its backend (``device``): the facts fixed at creation; its progress
    lives in its backend's queue."""

    program_id: str = "sampler"
    storage: dict[str, Any] = field(default_factory=dict, repr=False)
    result: str = field(default="", repr=False)
    timeout_secs: int | None = None
    failure: str | None = None
    deleted: bool = False


_V1 = API + "/v1"


class IbmQsService(JobSide[IbmQsScenario, IbmQsFault]):
    """The IBM Quantum System side's requests answered, from any number of server threads."""

    vendor = "ibm-quantum-system"
    _draws = "ibm-qs-fault"
    MISSING = Missing(
        UNSERVED, "Backend {name} not found.",
        codes=("not_found", "backend_not_found", "job_not_found"),
    )  # fmt: skip
    ROUTES = (
        Route("POST", IAM_PATH, "IamToken", "_iam"),
        Route("PUT", f"{S3}/<bucket>/<key*>", "PutObject", "_put_object", "s3://<bucket>/<key>"),
        Route("GET", f"{S3}/<bucket>/<key*>", "GetObject", "_get_object", "s3://<bucket>/<key>"),
        Route("GET", f"{_V1}/backends", "ListBackends", "_list_backends"),
        on_device("GET", f"{_V1}/backends/<b>", "GetBackend", "_backend", "b"),
        on_device("GET", f"{_V1}/backends/<b>/lanes", "GetBackendLanes", "_backend", "b"),
        on_device("GET", f"{_V1}/backends/<b>/configuration", "GetBackendConfiguration",
                  "_backend", "b"),
        on_device("GET", f"{_V1}/backends/<b>/properties", "GetBackendProperties", "_backend",
                  "b"),
        Route("GET", f"{_V1}/jobs", "ListJobs", "_list_jobs"),
        Route("POST", f"{_V1}/jobs", "CreateJob", "_create", device=Body("backend"), creates=True),
        owned("GET", f"{_V1}/jobs/<job>", "GetJob", "_get_job"),
        owned("DELETE", f"{_V1}/jobs/<job>", "DeleteJob", "_delete"),
        owned("POST", f"{_V1}/jobs/<job>/cancel", "CancelJob", "_cancel"),
    )  # fmt: skip

    def _setup(self) -> None:
        super()._setup()
        self._objects: dict[tuple[str, str], bytes] = {}
        self._tokens: set[str] = set()

    def _queue_spec(self, spec: IbmQsBackendSpec) -> DeviceQueueSpec:
        """Paused periods start no job; a backend paused or offline for the whole run
        never serves."""
        down = [(0.0, math.inf)] if spec.status != "online" else list(spec.paused)
        return DeviceQueueSpec.waiting_during(spec.queue_key, spec.name, spec.queue, down)

    # -- views for tests and the facade ---------------------------------------------------

    def job_deleted(self, job_id: str) -> bool:
        with self._lock:
            return self._jobs[job_id].deleted

    def stored(self, key: str) -> bytes | None:
        """The object ``key`` of the scenario's bucket, as the client put it."""
        with self._lock:
            return self._objects.get((self.scenario.bucket, key))

    def env(self, url: str) -> dict[str, str]:
        """QRMI's settings reaching this service from ``url`` (the emulator's base URL), as
        a site writes them for QRMI's Slurm plugin: per backend ``<name>_QRMI_IBM_QS_*``."""
        base = url.rstrip("/")
        s = self.scenario
        settings = {
            "QRMI_IBM_QS_ENDPOINT": base + API,
            "QRMI_IBM_QS_IAM_ENDPOINT": base + IAM_PATH.removesuffix("/identity/token"),
            "QRMI_IBM_QS_IAM_APIKEY": s.apikey,
            "QRMI_IBM_QS_SERVICE_CRN": s.crn,
            "QRMI_IBM_QS_AWS_ACCESS_KEY_ID": s.access_key_id,
            "QRMI_IBM_QS_AWS_SECRET_ACCESS_KEY": s.secret_access_key,
            "QRMI_IBM_QS_S3_ENDPOINT": base + S3 + "/",
            "QRMI_IBM_QS_S3_BUCKET": s.bucket,
            "QRMI_IBM_QS_S3_REGION": s.region,
        }
        return {f"{b.name}_{key}": value for b in s.backends for key, value in settings.items()}

    # -- dispatch -------------------------------------------------------------------------

    def _not_found(self, request: Request) -> Refusal:
        if request.path.startswith(S3 + "/"):
            what = f"the emulator does not implement {request.method} {request.path}"
            return S3Refusal(404, "NoSuchKey", what)
        return super()._not_found(request)

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return qs_error(status, code or f"http_{status}", message)

    def _internal_error(self, route: SideRoute, message: str) -> Response:
        return qs_error(500, "internal_error", message)

    def _authorize(self, route: SideRoute, request: Request) -> None:
        if route.operation in ("PutObject", "GetObject"):
            self._authorize_s3(request)
        elif route.operation != "IamToken":
            self._authorize_api(request)

    def _authorize_api(self, request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        with self._lock:
            known = token in self._tokens
        if scheme.lower() != "bearer" or not known:
            raise QsRefusal(401, "unauthorized", "Missing or invalid access token.")
        if request.headers.get("service-crn") != self.scenario.crn:
            raise QsRefusal(403, "forbidden", "The Service-CRN names no instance of yours.")

    def _authorize_s3(self, request: Request) -> None:
        auth = request.headers.get("authorization", "")
        if not auth.startswith(f"AWS4-HMAC-SHA256 Credential={self.scenario.access_key_id}/"):
            raise S3Refusal(403, "InvalidAccessKeyId", "The access key ID does not exist.")

    # -- IAM and the bucket -----------------------------------------------------------------

    def _iam(self, route: SideRoute, request: Request) -> Response:
        form = parse_qs(request.body.decode("utf-8", "replace"))
        grant = (form.get("grant_type") or [""])[0]
        apikey = (form.get("apikey") or [""])[0]
        if grant != "urn:ibm:params:oauth:grant-type:apikey" or apikey != self.scenario.apikey:
            raise Refusal(iam_error(400, "Provided API key could not be found."))
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._tokens.add(token)
        expires = int(time.time()) + TOKEN_LIFETIME  # the client reads expires_in
        doc = {
            "access_token": token,
            "refresh_token": "not_supported",
            "token_type": "Bearer",
            "expires_in": TOKEN_LIFETIME,
            "expiration": expires,
            "scope": "ibm openid",
        }
        return json_response(200, doc)

    def _object_key(self, route: SideRoute) -> tuple[str, str]:
        bucket, _, key = (route.target or "").removeprefix("s3://").partition("/")
        if bucket != self.scenario.bucket:
            raise S3Refusal(404, "NoSuchBucket", f"The bucket {bucket} does not exist.")
        return bucket, key

    def _put_object(self, route: SideRoute, request: Request) -> Response:
        where = self._object_key(route)
        with self._lock:
            self._objects[where] = request.body
        return Response(200, b"", (("ETag", f'"{secrets.token_hex(16)}"'),))

    def _get_object(self, route: SideRoute, request: Request) -> Response:
        where = self._object_key(route)
        with self._lock:
            data = self._objects.get(where)
            if data is None:
                data = self._job_output(where[1], self.clock.now())
        if data is None:
            raise S3Refusal(404, "NoSuchKey", "The specified key does not exist.")
        return Response(200, data, (("Content-Type", "application/octet-stream"),))

    def _job_output(self, key: str, now: float) -> bytes | None:
        """What a finished job wrote to ``key`` through its presigned URLs (lock held)."""
        for job in self._jobs.values():
            status = self._status(job, now)
            for kind in ("results", "logs"):
                url = (job.storage.get(kind) or {}).get("presigned_url") or ""
                target = object_of(url)
                if target is None or target[1] != key or status not in TERMINAL:
                    continue
                if kind == "results":
                    return job.result.encode() if status == "Completed" else None
                return json.dumps({"job_id": job.id, "status": status}).encode()
        return None

    # -- backends ---------------------------------------------------------------------------

    def state(self, spec: IbmQsBackendSpec, now: float) -> str:
        """``online``, ``paused`` or ``offline`` at ``now``."""
        if spec.status != "online":
            return spec.status
        return "paused" if any(s <= now < e for s, e in spec.paused) else "online"

    def _backend_doc(self, spec: IbmQsBackendSpec, now: float) -> dict[str, Any]:
        state = self.state(spec, now)
        message = {"online": "available", "paused": "paused for maintenance"}.get(state, state)
        return {
            "name": spec.name,
            "status": state,
            "message": message,
            "version": "1.0.0",
            "locked": False,
        }

    def _list_backends(self, route: SideRoute, request: Request) -> Response:
        now = self.clock.now()
        return json_response(
            200, {"backends": [self._backend_doc(b, now) for b in self.scenario.backends]}
        )

    def _backend(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        if route.operation == "GetBackend":
            return json_response(200, self._backend_doc(spec, self.clock.now()))
        if route.operation == "GetBackendLanes":
            lanes = {"hpc_workload_manager": {"lanes": spec.lanes},
                     "ibm_quantum_compute": {"lanes": 1}}  # fmt: skip
            return json_response(200, lanes)
        if route.operation == "GetBackendConfiguration":
            return json_response(
                200,
                {
                    "backend_name": spec.name,
                    "backend_version": "1.0.0",
                    "n_qubits": spec.qubits,
                    "basis_gates": list(spec.basis_gates),
                    "coupling_map": topology.both_ways(spec.pairs),
                    "simulator": False,
                    "max_shots": 100_000,
                },
            )
        when = iso(timestamp(self.clock, self.clock.now()))
        return json_response(
            200, {"backend_name": spec.name, "backend_version": "1.0.0", "last_update_date": when,
                  "qubits": [], "gates": [], "general": []},
        )  # fmt: skip

    # -- jobs -------------------------------------------------------------------------------

    def _create(
        self, route: SideRoute, request: Request, faults: list[IbmQsFault]
    ) -> tuple[Response, str]:
        failure = self.failure(faults)
        try:
            body = json.loads(request.body or b"null")
        except ValueError:
            raise QsRefusal(400, "invalid_request", "The request body is not JSON.") from None
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise QsRefusal(400, "invalid_request", "The job needs an 'id'.")
        spec = self._spec(body.get("backend"))
        if body.get("program_id") not in PROGRAMS:
            raise QsRefusal(400, "invalid_request", "program_id must be sampler or estimator.")
        if body["program_id"] != "sampler":
            raise QsRefusal(400, "invalid_request", "The emulator runs sampler jobs only.")
        storage = body.get("storage")
        source = object_of(((storage or {}).get("input") or {}).get("presigned_url") or "")
        if not isinstance(storage, dict) or source is None:
            raise QsRefusal(400, "invalid_request", "storage.input needs a presigned_url.")
        with self._lock:
            data = self._objects.get(source)
            exists = body["id"] in self._jobs
        if exists:
            raise QsRefusal(409, "conflict", f"A job with id {body['id']} already exists.")
        if data is None:
            raise QsRefusal(400, "invalid_request", "The job's input could not be read.")
        result, shots, refused = self._run_pubs(data, spec, body["id"])
        with self._lock:
            now = self.clock.now()
            job = QsJob(
                id=body["id"],
                device=spec.name,
                program_id=body["program_id"],
                created_t=now,
                shots=shots,
                storage=storage,
                result=result,
                timeout_secs=body.get("timeout_secs"),
                failure=refused or failure,
            )
            if refused is not None:  # it fails at once, as the system's validation fails it
                self._queues[spec.name].refuse(job.id, now)
            else:
                self._queues[spec.name].submit(job.id, now, shots, fails=failure is not None)
            self._jobs[job.id] = job
        return Response(204), job.id

    def _run_pubs(
        self, data: bytes, spec: IbmQsBackendSpec, job_id: str
    ) -> tuple[str, int, str | None]:
        """The sampler input's result document, its shots summed, and why the job fails
        at once (IBM's non-ISA reason: a circuit outside the backend's ISA, when the
        scenario is strict; None) (QsRefusal: invalid input)."""
        try:
            params = json.loads(data)
        except ValueError:
            raise QsRefusal(400, "invalid_request", "The job input is not JSON.") from None
        pubs = params.get("pubs") if isinstance(params, dict) else None
        if not isinstance(pubs, list) or not pubs:
            raise QsRefusal(400, "invalid_request", "The sampler input needs 'pubs'.")
        default = params.get("shots") or DEFAULT_SHOTS
        results = []
        for pub in pubs:
            if not isinstance(pub, list) or not pub or not isinstance(pub[0], str):
                raise QsRefusal(400, "invalid_request", "A pub must be [circuit, ...].")
            shots = pub[2] if len(pub) > 2 and pub[2] is not None else default
            if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
                raise QsRefusal(400, "invalid_request", "A pub's shots must be an integer >= 1.")
            try:  # wider than the device: refused before it is a job
                openqasm.check_width(pub[0], spec.qubits)
            except ProgramError as exc:
                raise QsRefusal(400, "invalid_request", f"The circuit cannot run: {exc}.") from None
            detail = None
            if self.scenario.strict:
                detail = isa.violation(pub[0], spec.basis_gates, spec.pairs, spec.qubits)
            if detail is not None:
                return "", shots, isa.reason(detail)
            rows, num_bits = self._simulate(pub[0], shots, spec)
            results.append((register_name(pub[0]), rows, num_bits, shots))
        support_qiskit = bool(params.get("support_qiskit", False))
        text = sampler_result(results, job_id, support_qiskit=support_qiskit)
        return text, sum(r[3] for r in results), None

    def _simulate(self, qasm: str, shots: int, spec: IbmQsBackendSpec) -> tuple[list[int], int]:
        source = programs.braket_source(qasm)
        try:
            result = programs.run(source, shots, spec.qubits, self.scenario.max_simulated_qubits)
        except ProgramError as exc:
            raise QsRefusal(400, "invalid_request", f"The circuit cannot run: {exc}.") from None
        return bit_rows(result.get("measurements") or [])

    def _status(self, job: QsJob, now: float) -> str:
        return STATUS[self._queues[job.device].progress(job.id, now).status]

    def _document(self, job: QsJob, now: float) -> dict[str, Any]:
        """The job as the API's GET /v1/jobs/{id} answers it (lock held)."""
        progress = self._queues[job.device].progress(job.id, now)
        status = STATUS[progress.status]
        doc: dict[str, Any] = {
            "id": job.id,
            "backend": job.device,
            "program_id": job.program_id,
            "log_level": "debug",
            "status": status,
            "created_time": iso(timestamp(self.clock, job.created_t)),
            "storage": job.storage,
        }
        if job.timeout_secs is not None:
            doc["timeout_secs"] = job.timeout_secs
        if progress.ended_at is not None:
            doc["end_time"] = iso(timestamp(self.clock, progress.ended_at))
        if status == "Completed" and progress.started_at is not None:
            ran = (progress.ended_at or now) - progress.started_at
            doc["usage"] = {"quantum_nanoseconds": round(ran * 1e9)}
        if status == "Failed":
            doc["reason_code"] = 1517
            doc["reason_message"] = job.failure or "Job failed."
            doc["reason_solution"] = (
                "Resubmit the job; contact the system's administrator if it fails again."
            )
        return doc

    def _list_jobs(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            now = self.clock.now()
            jobs = [self._document(j, now) for j in self._jobs.values() if not j.deleted]
        return json_response(200, {"jobs": jobs})

    def _cancel(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            status = self._status(job, now)
            if status in TERMINAL:
                raise QsRefusal(
                    409, "conflict", f"Job {job.id} is {status} and cannot be cancelled."
                )
            self._queues[job.device].cancel(job.id, now)
        return Response(204)

    def _delete(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            if self._status(job, now) not in TERMINAL:
                raise QsRefusal(409, "conflict", f"Job {job.id} is running; cancel it first.")
            job.deleted = True
        return Response(204)
