"""The emulated Alice & Bob Felis Cloud API, as qrmi 0.26.4 sees it.

This module owns the Felis side of the emulator under the ``/felis`` prefix: the calls
QRMI's ``AliceBobFelis`` resource makes, answered in the shapes it parses, for the targets
of a ``FelisScenario``; jobs queued and run on the emulated clock once their input is
uploaded (the shared ``DeviceQueue``), their QIR run on the Braket local simulator,
cancelled, failed or refused as the scenario says; its call log and counts are the shared
``VendorSide``'s (``side``). It must never sleep holding its lock, and never read the
wall clock.

Checked against qrmi 0.26.4 (its source, and the real client against a recording loopback
server):

- Settings: ``QuantumResource.from_config(resource_id, ResourceType.AliceBobFelis,
  config)`` with ``QRMI_AB_FELIS_BASE_ENDPOINT`` (paths ``/v1/...`` are appended) and
  ``QRMI_AB_FELIS_API_KEY`` (base64 of ``user:password``, sent as HTTP Basic). From the
  environment the same names prefixed ``<resource_id>_``. The resource id names the
  target: ``ab_emu_6q_physical_cats`` -> ``EMU:6Q:PHYSICAL_CATS`` (``ab_`` dropped, the
  first two ``_`` become ``:``, upper case).
- ``status()``: no request; always Online, every other field None.
- ``task_start(Payload.AliceBobFelis(human_qir, input_params))``: ``POST /v1/jobs/`` with
  ``{"inputDataFormat": "HUMAN_QIR", "outputDataFormat": "HISTOGRAM", "target",
  "inputParams"}`` (input_params parsed as JSON), answered an ExternalJob (``id``,
  ``target``, ``inputParams``, ``inputDataFormat``, ``outputDataFormat``, ``userId``,
  ``userName``, ``organizationName``, ``events`` [{type, createdAt}], ``errors``
  [{content}]; every one required), then ``POST /v1/jobs/{id}/input`` (multipart, part
  ``input``, filename ``input``, the QIR text), answered the ExternalJob; returns the id.
  A failed upload is QrmiError "input upload failed for created job {id}".
- ``task_status(id)``: ``GET /v1/jobs/{id}``; the LAST event's type: CREATED,
  FETCHING_INPUT, INPUT_READY -> Queued; COMPILING, COMPILED, TRANSPILING, TRANSPILED,
  EXECUTING -> Running; SUCCEEDED -> Completed; CANCELLED -> Cancelled; TIMED_OUT,
  COMPILATION_FAILED, TRANSPILATION_FAILED, EXECUTION_FAILED -> Failed.
- ``task_stop(id)``: the GET, then ``DELETE /v1/jobs/{id}`` (answered the ExternalJob)
  unless the last event is SUCCEEDED or CANCELLED. ``task_result(id)``: ``GET
  /v1/jobs/{id}/output``, its text as given (``text/plain``). ``target()``: ``GET
  /v1/targets/`` (a list of ``{name, numQubits, instructions: [{signature}],
  inputParams: {NAME: {required, type, default, constraints: [{min, max}]}}}``, every
  field required), the resource's own entry.

Emulated (not checked against a live Felis): the error body ``{"detail": ...}``; the
output of a HISTOGRAM job (CSV ``BITS,COUNT``, the bits in Qiskit's order, as the Alice &
Bob Qiskit provider reads them); a job is queued when its input arrives (INPUT_READY),
EXECUTING when it starts, then SUCCEEDED, EXECUTION_FAILED (a ``fail_job`` fault, its
message in ``errors``) or CANCELLED; a program calling an instruction the target lacks,
or one that does not read as QIR, ends TRANSPILATION_FAILED at the upload; an unknown
target is refused 404; ``nbShots`` (default 1000) above the target's ``max_shots`` is
refused 422. As the Alice & Bob Qiskit provider reads them: the output of a job that has
none (not finished, or failed) is refused 409, and so is a DELETE of a finished job
(QRMI's ``task_stop`` of a failed job therefore fails).
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from flux_quantum.emulator import programs
from flux_quantum.emulator.clock import iso, timestamp
from flux_quantum.emulator.felis.scenario import FelisFault, FelisScenario, FelisTargetSpec
from flux_quantum.emulator.felis.wire import (
    API,
    EVENTS,
    FINAL,
    FelisRefusal,
    felis_error,
    openqasm,
)
from flux_quantum.emulator.job_side import JobSide, SideJob
from flux_quantum.emulator.routes import Body, Route, SideRoute, owned
from flux_quantum.emulator.side import Missing
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response
from flux_quantum.vendors.felis_program import ProgramError as QirError
from flux_quantum.vendors.felis_program import gates, histogram

DEFAULT_SHOTS = 1000


@dataclass
class FelisJob(SideJob):
    """One job on its target (``device``): created, then given its input; its progress
    lives in its target's queue once the input arrived."""

    input_params: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    input_t: float | None = None  # when the input arrived (None: not yet)
    refused: str | None = None  # why its transpilation failed
    counts: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def billable(self) -> bool:
        """Billed once its input arrived, unless it did not transpile."""
        return self.input_t is not None and not self.refused


class FelisService(JobSide[FelisScenario, FelisFault]):
    """The Felis side's requests answered, from any number of server threads."""

    vendor = "alice-bob-felis"
    _draws = "felis-fault"
    _id_draws = "felis-ids"
    MISSING = Missing("Not Found", "Target {name} not found.")
    ROUTES = (
        Route("GET", f"{API}/targets", "ListTargets", "_devices"),
        Route("POST", f"{API}/jobs", "CreateJob", "_create", device=Body("target"), creates=True),
        owned("GET", f"{API}/jobs/<job>", "GetJob", "_get_job"),
        owned("DELETE", f"{API}/jobs/<job>", "CancelJob", "_cancel"),
        owned("POST", f"{API}/jobs/<job>/input", "UploadInput", "_upload"),
        owned("GET", f"{API}/jobs/<job>/output", "DownloadOutput", "_output"),
    )

    def api_key(self) -> str:
        """The API key the scenario's credentials make (base64 of ``user:password``)."""
        pair = f"{self.scenario.username}:{self.scenario.password}"
        return base64.b64encode(pair.encode()).decode()

    def env(self, url: str) -> dict[str, str]:
        """QRMI's settings reaching this service from ``url`` (the emulator's base URL), as
        a site writes them for QRMI's Slurm plugin: per target ``<id>_QRMI_AB_FELIS_*``."""
        env: dict[str, str] = {}
        for target in self.scenario.targets:
            env[f"{target.resource_id}_QRMI_AB_FELIS_BASE_ENDPOINT"] = url.rstrip("/") + API[:-3]
            env[f"{target.resource_id}_QRMI_AB_FELIS_API_KEY"] = self.api_key()
        return env

    # -- dispatch -------------------------------------------------------------------------

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return felis_error(status, message)

    def _authorize(self, route: SideRoute, request: Request) -> None:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic" or value != self.api_key():
            raise FelisRefusal(401, "Invalid API key.")

    # -- targets ----------------------------------------------------------------------------

    def _device_doc(self, spec: FelisTargetSpec, now: float) -> dict[str, Any]:
        calls = [{"signature": f"__quantum__qis__{i}__body"} for i in spec.instructions]
        shots = {"required": False, "type": "int", "default": DEFAULT_SHOTS,
                 "constraints": [{"min": 1, "max": spec.max_shots}]}  # fmt: skip
        return {"name": spec.name, "numQubits": spec.qubits, "instructions": calls,
                "inputParams": {"nbShots": shots}}  # fmt: skip

    # -- jobs -------------------------------------------------------------------------------

    def _create(
        self, route: SideRoute, request: Request, faults: list[FelisFault]
    ) -> tuple[Response, str]:
        try:
            body = json.loads(request.body or b"null")
        except ValueError:
            raise FelisRefusal(422, "The request body is not JSON.") from None
        if not isinstance(body, dict):
            raise FelisRefusal(422, "The request body must be a job.")
        spec = self._spec(str(body.get("target")))
        params = body.get("inputParams") or {}
        shots = params.get("nbShots", DEFAULT_SHOTS) if isinstance(params, dict) else None
        if (
            isinstance(shots, bool)
            or not isinstance(shots, int)
            or not 1 <= shots <= spec.max_shots
        ):
            raise FelisRefusal(
                422, f"inputParams.nbShots must be an integer from 1 to {spec.max_shots}."
            )
        with self._lock:
            job = FelisJob(
                id=self._new_id(),
                device=spec.name,
                created_t=self.clock.now(),
                input_params=dict(params),
                shots=shots,
                failure=self.failure(faults),
            )
            self._jobs[job.id] = job
            doc = self._document(job, job.created_t)
        return json_response(200, doc), job.id

    def _last(self, job: FelisJob, now: float) -> str:
        """The type of the job's last event at ``now`` (lock held)."""
        if job.input_t is None:
            return "CREATED"
        if job.refused:
            return "TRANSPILATION_FAILED"
        return EVENTS[self._queues[job.device].progress(job.id, now).status]

    def _document(self, job: FelisJob, now: float) -> dict[str, Any]:
        """The job as Felis's ExternalJob (lock held)."""

        def at(t: float) -> str:
            return iso(timestamp(self.clock, t))

        events = [{"type": "CREATED", "createdAt": at(job.created_t)}]
        errors: list[dict[str, Any]] = []
        if job.input_t is not None:
            events.append({"type": "INPUT_READY", "createdAt": at(job.input_t)})
        if job.refused:
            events.append({"type": "TRANSPILATION_FAILED", "createdAt": at(job.input_t or now)})
            errors.append({"content": job.refused})
        elif job.input_t is not None:
            progress = self._queues[job.device].progress(job.id, now)
            if progress.started_at is not None:
                events.append({"type": "EXECUTING", "createdAt": at(progress.started_at)})
            last = EVENTS[progress.status]
            if last not in ("INPUT_READY", "EXECUTING"):
                events.append({"type": last, "createdAt": at(progress.ended_at or now)})
            if last == "EXECUTION_FAILED":
                errors.append({"content": job.failure or "Execution failed."})
        return {
            "id": job.id,
            "target": job.device,
            "inputDataFormat": "HUMAN_QIR",
            "outputDataFormat": "HISTOGRAM",
            "inputParams": job.input_params,
            "userId": "emulator-user",
            "userName": self.scenario.username,
            "organizationName": "flux-quantum emulator",
            "events": events,
            "errors": errors,
        }

    def _upload(self, route: SideRoute, request: Request) -> Response:
        text = _multipart_input(request)
        with self._lock:
            job = self._job(route.target)
            if job.input_t is not None:
                raise FelisRefusal(409, f"Job {job.id} already has its input.")
        spec = self._spec(job.device)
        refused = None
        counts: dict[str, int] = {}
        try:
            counts = self._simulate(text, job.shots, spec)
        except (QirError, ProgramError) as exc:
            refused = f"Transpilation failed: {exc}"
        with self._lock:
            now = self.clock.now()
            job.input_t, job.refused, job.counts = now, refused, counts
            if refused is None:
                self._queues[job.device].submit(
                    job.id, now, job.shots, fails=job.failure is not None
                )
            doc = self._document(job, now)
        return json_response(200, doc)

    def _simulate(self, text: str, shots: int, spec: FelisTargetSpec) -> dict[str, int]:
        """The program's counts (result 0 first); QirError/ProgramError: it cannot run."""
        calls = gates(text)
        lacking = sorted({name for name, *_ in calls} - set(spec.instructions))
        if lacking:
            raise QirError(f"{spec.name} has no instruction {', '.join(lacking)}")
        widest = max(q for _n, qs, _p, _r in calls for q in qs) + 1
        if widest > spec.qubits:
            raise QirError(f"the program uses {widest} qubits and {spec.name} has {spec.qubits}")
        source, measured = openqasm(calls)
        result = programs.run(source, shots, spec.qubits, self.scenario.max_simulated_qubits)
        column = {q: i for i, q in enumerate(result.get("measuredQubits") or [])}
        tally: Counter[str] = Counter()
        for row in result.get("measurements") or []:
            bits = ["0"] * (max((r for r, _q in measured), default=-1) + 1)
            for r, q in measured:
                bits[r] = str(int(row[column[q]]))
            tally["".join(bits)] += 1
        return dict(tally)

    def _cancel(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            last = self._last(job, now)
            if last in FINAL:
                raise FelisRefusal(409, f"Job {job.id} is {last} and cannot be cancelled.")
            if job.input_t is None:  # never given its input: it never queued
                job.input_t = now
                self._queues[job.device].submit(job.id, now, job.shots)
            self._queues[job.device].cancel(job.id, now)
            doc = self._document(job, now)
        return json_response(200, doc)

    def _output(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            last = self._last(job, self.clock.now())
        if last != "SUCCEEDED":
            raise FelisRefusal(409, f"Job {job.id} has no output: it is {last}.")
        headers = (("Content-Type", "text/plain; charset=utf-8"),)
        return Response(200, histogram(job.counts).encode(), headers)


def _multipart_input(request: Request) -> str:
    """The ``input`` part of a multipart/form-data upload, as text."""
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise FelisRefusal(422, "The input must be uploaded as multipart/form-data.")
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {ctype}\r\n\r\n".encode() + request.body
    )
    for part in message.iter_parts():
        if part.get_param("name", header="content-disposition") == "input":
            payload = part.get_payload(decode=True)
            return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    raise FelisRefusal(422, "The upload has no 'input' part.")
