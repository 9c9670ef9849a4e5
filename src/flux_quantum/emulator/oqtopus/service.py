"""The emulated OQTOPUS Cloud User API, as the ``oqtopus-client`` 1.3.0 SDK calls it.

This module owns the OQTOPUS side of the emulator under the ``/oqtopus`` prefix: the
calls the SDK's ``OqtopusClient`` makes, answered in the shapes its generated models
parse, for the devices of an ``OqtopusScenario``; sampling jobs queued and run on the
emulated clock (the shared ``DeviceQueue``), their OpenQASM run on the Braket local
simulator, cancelled, failed or refused as the scenario says; its call log and counts are
the shared ``VendorSide``'s (``side``). It must never sleep holding its lock, and never
read the wall clock.

Checked against oqtopus-client 1.3.0 (its source, and the real SDK against this side):

- Settings: ``OqtopusConfig(url=..., api_token=...)``; every User API call sends the
  token in the ``q-api-token`` header (never ``Authorization``), paths appended to the
  URL as given. Errors are read from the body's ``message`` (``UserApiError(status,
  message)``).
- ``list_devices()``: ``GET /devices``; ``get_device(id)``: ``GET /devices/{id}``; each a
  ``DevicesDeviceInfo`` (``device_id``, ``device_type`` QPU or simulator, ``status``
  available or unavailable, ``available_at``, ``n_pending_jobs``, ``n_qubits``,
  ``basis_gates``, ``supported_instructions``, ``device_info`` (JSON text, or a presigned
  URL the SDK downloads), ``calibrated_at``, ``description``; the required ones always).
- ``submit_job(OqtopusJobSpec)``: ``POST /jobs`` (no body) answered ``{"job_id",
  "presigned_url": {"url", "fields": {"key", ...}}}``; then a form POST to that URL
  (every field, and ``file``: a zip of one JSON file ``{"program": [...], "operator":
  null}`` named after the key's stem), an answer under 400 taken as stored; then ``POST
  /jobs/{id}/submit`` with ``{"name", "description", "device_id", "job_type", "shots",
  "transpiler_info", "simulator_info", "mitigation_info"}`` answered ``{"message"}``. The
  job id is the first answer's: a job whose submit never came stays ``registered``.
- ``get_job_status(id)``: ``GET /jobs/{id}/status`` -> ``{"job_id", "status"}`` (registered,
  submitted, ready, running, cancelling, succeeded, failed, cancelled).
- ``get_job(id)``: ``GET /jobs/{id}`` -> a ``JobsJob`` whose ``job_info`` holds presigned
  URLs (``input``, ``result`` ...) the SDK downloads with plain GETs (no token) and
  unzips; a registered job is refused by the SDK itself. ``list_jobs(q=...)``: ``GET
  /jobs?q=`` (jobs whose id, name or description contains the text), never downloading.
- ``cancel_job(id)``: ``POST /jobs/{id}/cancel`` -> ``{"message"}``; ``delete_job(id)``:
  ``DELETE /jobs/{id}``.

Emulated (not checked against a live OQTOPUS Cloud): a submitted job is ``ready`` while
it waits, ``running``, then ``succeeded``, ``failed`` (a ``fail_job`` fault, its message in
``job_info.message``) or ``cancelled``; a program that does not run (not OpenQASM, wider
than the device or than the emulator simulates) is ``failed`` at once with a message
saying why, as OQTOPUS's transpiler fails it; counts are keyed by the classical bits in
Qiskit's order (the last bit first, as the OQTOPUS engine writes them and quri-parts
reads them: ``int(BITS, 2)``); only ``sampling`` jobs are served (another ``job_type`` is
refused 400); a submit without its input, or of a job already submitted, is refused 400;
a cancel of a finished job is refused 400; a delete of an unfinished one too; an unknown
device is refused 400 at the submit and 404 at ``GET /devices/{id}``; an unknown job 404;
a wrong token 401. A device in an ``unavailable`` period says so (``available_at`` its
end) and starts nothing; jobs sent to it wait.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from flux_quantum.emulator import programs
from flux_quantum.emulator.clock import iso, timestamp
from flux_quantum.emulator.job_side import JobSide
from flux_quantum.emulator.oqtopus.scenario import (
    OqtopusDeviceSpec,
    OqtopusFault,
    OqtopusScenario,
)
from flux_quantum.emulator.oqtopus.wire import (
    FINAL,
    PREFIX,
    STATUSES,
    STORAGE,
    OqtopusRefusal,
    unzipped,
    zipped,
)
from flux_quantum.emulator.routes import Body, Route, SideRoute, on_device, owned
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import Missing
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response

SUBMIT_FIELDS = (
    "name", "description", "device_id", "job_type", "shots", "transpiler_info",
    "simulator_info", "mitigation_info",
)  # fmt: skip
_STORAGE_OPS = ("UploadInput", "DownloadObject")


@dataclass
class OqtopusJob:
    """One job: registered, given its input, then submitted; its progress lives in its
    device's queue once submitted (unless its program was refused)."""

    id: str
    registered_t: float
    input: dict[str, Any] | None = None
    request: dict[str, Any] = field(default_factory=dict)  # the submit's body
    device: str | None = None
    submitted_t: float | None = None
    failure: str | None = None  # a fail_job fault's message
    refused: str | None = None  # why its program could not run
    counts: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def shots(self) -> int:
        return int(self.request.get("shots") or 0)

    # What the bill reads (as of a ``job_side.SideJob``): a job is billed from its submit,
    # named by its name, once its program ran.
    @property
    def created_t(self) -> float:
        return self.registered_t if self.submitted_t is None else self.submitted_t

    @property
    def token(self) -> str | None:
        name = self.request.get("name")
        return name if isinstance(name, str) else None

    @property
    def billable(self) -> bool:
        return self.device is not None and self.submitted_t is not None and not self.refused


class OqtopusService(JobSide[OqtopusScenario, OqtopusFault]):
    """The OQTOPUS side's requests answered, from any number of server threads."""

    vendor = "oqtopus"
    _draws = "oqtopus-fault"
    _id_draws = "oqtopus-ids"
    MISSING = Missing("Not Found", "device not found: {name}", "job not found: {name}")
    ROUTES = (
        Route("GET", f"{PREFIX}/devices", "ListDevices", "_devices"),
        on_device("GET", f"{PREFIX}/devices/<device>", "GetDevice", "_device", "device"),
        Route("POST", STORAGE, "UploadInput", "_upload"),
        owned("GET", f"{STORAGE}/<key*>", "DownloadObject", "_download", "key"),
        Route("POST", f"{PREFIX}/jobs", "RegisterJob", "_register"),
        Route("GET", f"{PREFIX}/jobs", "ListJobs", "_list"),
        owned("GET", f"{PREFIX}/jobs/<job>", "GetJob", "_get_job"),
        owned("DELETE", f"{PREFIX}/jobs/<job>", "DeleteJob", "_delete"),
        owned("GET", f"{PREFIX}/jobs/<job>/status", "GetJobStatus", "_status"),
        Route("POST", f"{PREFIX}/jobs/<job>/submit", "SubmitJob", "_create", "<job>",
              Body("device_id"), creates=True),
        owned("POST", f"{PREFIX}/jobs/<job>/cancel", "CancelJob", "_cancel"),
    )  # fmt: skip

    def _setup(self) -> None:
        super()._setup()
        self._secret = f"{self.seed}:{self.scenario.token}:storage"

    def _queue_spec(self, spec: OqtopusDeviceSpec) -> DeviceQueueSpec:
        """A device in an ``unavailable`` period starts nothing; one unavailable for the
        whole run never serves."""
        down = spec.status != "available"
        return DeviceQueueSpec.waiting_during(
            spec.queue_key, spec.name, spec.queue, spec.unavailable, down=down
        )

    def env(self, url: str) -> dict[str, str]:
        """The settings reaching this service from ``url`` (the emulator's base URL), per
        device as QRMI names them: ``<device>_QRMI_OQTOPUS_URL`` and ``_API_TOKEN``."""
        env: dict[str, str] = {}
        for device in self.scenario.devices:
            env[f"{device.name}_QRMI_OQTOPUS_URL"] = url.rstrip("/") + PREFIX
            env[f"{device.name}_QRMI_OQTOPUS_API_TOKEN"] = self.scenario.token
        return env

    # -- dispatch -------------------------------------------------------------------------

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return OqtopusRefusal(status, message).response

    def _device_of(self, kind: str, key: str) -> str | None:
        """The device of the job ``key`` names (a job id, or a storage key under it)."""
        return super()._device_of(kind, key.partition("/")[0])

    def _authorize(self, route: SideRoute, request: Request) -> None:
        if route.operation in _STORAGE_OPS:
            return  # presigned: the signature is checked by the handler
        if request.headers.get("q-api-token") != self.scenario.token:
            raise OqtopusRefusal(401, "Unauthorized")

    # -- devices ----------------------------------------------------------------------------

    def _device_doc(self, spec: OqtopusDeviceSpec, now: float) -> dict[str, Any]:
        """The device as a ``DevicesDeviceInfo`` at ``now`` (lock held)."""
        down = [(s, e) for s, e in spec.unavailable if s <= now < e]
        available = spec.status == "available" and not down
        doc: dict[str, Any] = {
            "device_id": spec.name,
            "device_type": spec.type,
            "status": "available" if available else "unavailable",
            "n_pending_jobs": self._queues[spec.name].queue_size(now),
            "n_qubits": spec.qubits,
            "basis_gates": list(spec.basis_gates),
            "supported_instructions": ["measure", "barrier", "reset"],
            "description": f"flux-quantum emulator {spec.type} {spec.name}",
        }
        if down and down[0][1] != math.inf:
            doc["available_at"] = iso(timestamp(self.clock, down[0][1]))
        return doc

    # -- storage (the presigned URLs) -----------------------------------------------------

    def _sign(self, key: str) -> str:
        return hashlib.sha256(f"{self._secret}:{key}".encode()).hexdigest()[:32]

    def _url(self, request: Request, key: str) -> str:
        """The presigned URL a client downloads ``key`` from."""
        return f"{self._base(request)}{STORAGE}/{key}?signature={self._sign(key)}"

    @staticmethod
    def _base(request: Request) -> str:
        return f"http://{request.headers.get('host', '127.0.0.1')}"

    def _upload(self, route: SideRoute, request: Request) -> Response:
        form = _form(request)
        key = form.get("key", b"").decode()
        if not key or form.get("signature", b"").decode() != self._sign(key):
            raise OqtopusRefusal(403, "The request signature does not match the key.")
        job_id, _, name = key.partition("/")
        try:
            document = unzipped(form.get("file", b""))
        except ValueError as exc:
            raise OqtopusRefusal(
                400, f"The uploaded file is not a job input archive: {exc}"
            ) from None
        if name != "input.zip" or not isinstance(document, dict):
            raise OqtopusRefusal(400, f"The key {key} takes no upload.")
        with self._lock:
            job = self._job(job_id)
            if job.submitted_t is not None:
                raise OqtopusRefusal(400, f"job {job_id} is already submitted")
            job.input = document
        return Response(204)

    def _download(self, route: SideRoute, request: Request) -> Response:
        key = route.target or ""
        if request.first("signature") != self._sign(key):
            raise OqtopusRefusal(403, "The request signature does not match the key.")
        job_id, _, name = key.partition("/")
        with self._lock:
            job = self._job(job_id)
            status = self._status_of(job, self.clock.now())
            if name == "input.zip" and job.input is not None:
                data = zipped("input.json", job.input)
            elif name == "result.zip" and status == "succeeded":
                data = zipped("result.json", {"sampling": {"counts": _qiskit(job.counts)}})
            else:
                raise OqtopusRefusal(404, f"The key {key} does not exist.")
        return Response(200, data, (("Content-Type", "application/zip"),))

    # -- jobs -------------------------------------------------------------------------------

    def _register(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = OqtopusJob(
                id=self._new_id(),
                registered_t=self.clock.now(),
            )
            self._jobs[job.id] = job
        key = f"{job.id}/input.zip"
        fields = {"key": key, "AWSAccessKeyId": "emulator", "policy": "e30=",
                  "signature": self._sign(key)}  # fmt: skip
        presigned = {"url": self._base(request) + STORAGE, "fields": fields}
        return json_response(200, {"job_id": job.id, "presigned_url": presigned})

    def _create(
        self, route: SideRoute, request: Request, faults: list[OqtopusFault]
    ) -> tuple[Response, str]:
        body = _json_object(request)
        spec = self.scenario.device(str(body.get("device_id")))
        if spec is None:
            raise OqtopusRefusal(400, f"device_id {body.get('device_id')!r} is not a device")
        if body.get("job_type") != "sampling":
            raise OqtopusRefusal(
                400, f"job_type {body.get('job_type')!r} is not served: sampling only"
            )
        shots = body.get("shots")
        if (
            isinstance(shots, bool)
            or not isinstance(shots, int)
            or not 1 <= shots <= spec.max_shots
        ):
            raise OqtopusRefusal(400, f"shots must be an integer from 1 to {spec.max_shots}")
        with self._lock:
            job = self._job(route.target)
            if job.submitted_t is not None:
                raise OqtopusRefusal(400, f"job {job.id} is already submitted")
            if job.input is None:
                raise OqtopusRefusal(400, f"job {job.id} has no input: upload it first")
            sources = job.input.get("program")
        refused, counts = None, {}
        try:
            counts = self._simulate(sources, shots, spec)
        except ProgramError as exc:
            refused = f"transpile failed: {exc}"
        with self._lock:
            now = self.clock.now()
            job.request = {k: body[k] for k in SUBMIT_FIELDS if body.get(k) is not None}
            job.device, job.submitted_t, job.failure = spec.name, now, self.failure(faults)
            job.refused, job.counts = refused, counts
            if refused is None:
                self._queues[spec.name].submit(job.id, now, shots, fails=job.failure is not None)
        return json_response(200, {"message": "submitted"}), job.id

    def _simulate(self, sources: Any, shots: int, spec: OqtopusDeviceSpec) -> dict[str, int]:
        """The program's counts, classical bit 0 first (ProgramError: it cannot run)."""
        if not isinstance(sources, list) or len(sources) != 1 or not isinstance(sources[0], str):
            raise ProgramError("a sampling job takes exactly one OpenQASM program")
        source = programs.braket_source(sources[0])
        result = programs.run(source, shots, spec.qubits, self.scenario.max_simulated_qubits)
        tally: Counter[str] = Counter(
            "".join(str(int(bit)) for bit in row) for row in result.get("measurements") or []
        )
        return dict(tally)

    def _status_of(self, job: OqtopusJob, now: float) -> str:
        """The job's status at ``now`` (lock held)."""
        if job.device is None or job.submitted_t is None:
            return "registered"
        if job.refused:
            return "failed"
        return STATUSES[self._queues[job.device].progress(job.id, now).status]

    def _document(
        self, job: OqtopusJob, now: float, request: Request | None = None
    ) -> dict[str, Any]:
        """The job as a ``JobsJob`` at ``now``, null properties left out (lock held)."""
        status = self._status_of(job, now)
        if status == "registered" or request is None:
            return {"job_id": job.id, "status": status}

        def at(t: float | None) -> str | None:
            return None if t is None else iso(timestamp(self.clock, t))

        assert job.device is not None and job.submitted_t is not None
        info: dict[str, Any] = {"input": self._url(request, f"{job.id}/input.zip")}
        started = ended = None
        if job.refused:
            info["message"] = job.refused
            ended = job.submitted_t
        else:
            progress = self._queues[job.device].progress(job.id, now)
            started, ended = progress.started_at, progress.ended_at
            if status == "succeeded":
                info["result"] = self._url(request, f"{job.id}/result.zip")
            elif status == "failed":
                info["message"] = job.failure or "execution failed"
        doc = {
            **job.request,
            "job_id": job.id,
            "status": status,
            "job_info": info,
            "submitted_at": at(job.submitted_t),
            "ready_at": at(job.submitted_t),
            "running_at": at(started),
            "ended_at": at(ended),
            "execution_time": (
                round(ended - started, 3)
                if status == "succeeded" and started is not None and ended is not None
                else None
            ),
        }
        return {k: v for k, v in doc.items() if v is not None}

    def _get_job(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            doc = self._document(self._job(route.target), self.clock.now(), request)
        return json_response(200, doc)

    def _status(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status_of(job, self.clock.now())
        return json_response(200, {"job_id": job.id, "status": status})

    def _list(self, route: SideRoute, request: Request) -> Response:
        text = request.first("q") or ""
        wanted = request.first("status")
        with self._lock:
            now = self.clock.now()
            jobs = [
                job for job in self._jobs.values()
                if not text or any(text in str(v or "") for v in
                                   (job.id, job.request.get("name"), job.request.get("description")))
            ]  # fmt: skip
            docs = [self._document(job, now, request) for job in jobs]
        docs = [d for d in docs if wanted in (None, d["status"])]
        if (request.first("order") or "DESC").upper() == "DESC":
            docs.reverse()
        size = _positive(request.first("size"), 20)
        page = _positive(request.first("page"), 1)
        return json_response(200, docs[(page - 1) * size : page * size])

    def _cancel(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            status = self._status_of(job, now)
            if status in FINAL or status == "registered":
                raise OqtopusRefusal(400, f"job {job.id} is {status} and cannot be cancelled")
            assert job.device is not None
            self._queues[job.device].cancel(job.id, now)
        return json_response(200, {"message": "cancel request accepted"})

    def _delete(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            status = self._status_of(job, self.clock.now())
            if status not in FINAL and status != "registered":
                raise OqtopusRefusal(400, f"job {job.id} is {status} and cannot be deleted")
            del self._jobs[job.id]
        return json_response(200, {"message": "deleted"})


def _qiskit(counts: dict[str, int]) -> dict[str, int]:
    """Counts keyed classical bit 0 first, re-keyed in Qiskit's order (the last bit first)."""
    return {bits[::-1]: n for bits, n in sorted(counts.items())}


def _positive(value: str | None, default: int) -> int:
    try:
        return max(1, int(value)) if value is not None else default
    except ValueError:
        raise OqtopusRefusal(400, f"{value!r} is not a positive integer") from None


def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        raise OqtopusRefusal(400, "The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise OqtopusRefusal(400, "The request body must be a JSON object.")
    return body


def _form(request: Request) -> dict[str, bytes]:
    """The fields of a multipart/form-data POST, by name."""
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise OqtopusRefusal(400, "The upload must be a multipart/form-data POST.")
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {ctype}\r\n\r\n".encode() + request.body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields
