"""The emulated IQM Server (IQM Resonance or an on-premises IQM Server), as qrmi 0.26.4 sees it.

This module owns the IQM side of the emulator under the ``/iqm`` prefix: the IQM Server
API v1 calls QRMI's ``IQMServer`` resource makes, answered in the shapes it parses, for the
quantum computers of an ``IqmScenario``; jobs queued and run on the emulated clock (the
shared ``DeviceQueue``), cancelled, failed or refused as the scenario says, their circuits
run on the Braket local simulator when created; its call log and counts are the shared
``VendorSide``'s (``side``). It must never sleep holding its lock, and
never read the wall clock (only ``long_poll`` waits real time, on the stop event).

Checked against qrmi 0.26.4 (its source, and the real client against a logging loopback
server):

- Settings: ``QuantumResource.from_config(resource_id, ResourceType.IQMServer, config)``
  with ``QRMI_IQM_ISA_ENDPOINT`` (base URL; paths are appended as ``/api/v1/...``) and
  ``QRMI_IQM_ISA_TOKEN`` (required: ConfigError without it), optional
  ``QRMI_JOB_ACQUISITION_TOKEN``. From the environment the same names prefixed
  ``<resource_id>_``. ``resource_id`` is the quantum computer's alias, optionally
  ``alias,calibration_set_id`` (default ``default``); its LAST ``_`` becomes ``:``
  (``garnet_mock`` -> ``garnet:mock``). Auth: ``Authorization: Bearer <token>``.
- ``status()``: ``GET /api/v1/quantum-computers/{qc}``, parsed strictly as
  IqmServerQuantumComputerDetails (id uuid, alias, display_name, description,
  backend_type, number_of_qubits, pulla_enabled, limits{max_executions_per_job,
  max_instructions_per_circuit}, ``operational`` or ``operational_status``, health
  {healthy, updated_at} or null, queue_length, pricing{payg_price_per_second: string},
  additional_info{academy_url, best_suited_for, documentation_url, mock_url}); else the
  older ``status.health`` shape. ResourceStatus: ``online`` -> Online, ``maintenance`` ->
  Paused, anything else -> Offline; ``pending_job_count`` = queue_length; ``healthy`` =
  health.healthy (None if null); ``status_reason`` = "healthy updated at ..." (None
  without health); ``capacity`` and ``busy`` are always None for IQM.
- ``task_start(Payload.IQMServer(iqmjson, job_type, use_timeslot, tag))``:
  ``POST /api/v1/jobs/{qc}/{job_type}?use_timeslot=..&tag=..`` with iqmjson as the JSON
  body (job_type ``circuit``: a RunRequest ``{"circuits": [...], "shots": N}``); answers
  an IqmServerJob (id uuid, status, artifacts[], messages[], qc{id}, timeline[], type, tag,
  queue_position, errors ...); returns its id.
- ``task_status(id)``: ``GET /api/v1/jobs/{id}?wait_until_terminal=true&timeout_seconds=30``
  (a long poll on the real server); ``waiting`` -> Queued, ``processing`` -> Running,
  ``completed``/``failed``/``cancelled`` -> Completed/Failed/Cancelled.
- ``task_stop(id)``: the same GET, then ``POST /api/v1/jobs/{id}/cancel`` only when
  waiting or processing. ``task_result(id)``: ``GET .../artifacts/measurements`` and
  ``.../artifacts/measurement_counts`` (a 404 is null); ``.value`` is the JSON text
  ``{"measurements": ..., "measurement_counts": ...}``. ``target()``: ``GET
  /api/v1/calibration-sets/{qc}/{cal}/dynamic-quantum-architecture``, ``.../{cal}``,
  ``.../{cal}/metrics`` and ``GET /api/v1/quantum-computers/{qc}/artifacts/
  static-quantum-architectures`` (404 is null), combined. ``metadata()``:
  ``{"backend_name": qc}`` (plus ``acquisition_token``).
- Errors: 400 -> InvalidInputError, 401 -> AuthenticationFailedError, 404 ->
  ResourceNotFoundError (device) or TaskNotFoundError (job), all with the body in the
  text; any other status -> QrmiError "error in response: status code 409 Conflict",
  the body dropped.

Emulated (not checked against a live IQM Server): the error body
``{"error_code", "message", "request_id"}`` of IQM's models; a job's results are the
``measurements`` artifact (per circuit, measurement key -> one list of bits per shot) and
``measurement_counts`` (per circuit ``{"measurement_keys", "counts"}``, bits in key order);
a create on a quantum computer under maintenance or offline is refused 409
(``qc_not_operational``), one over ``max_slots`` of our jobs waiting or processing 403
(``quota_exceeded``), a circuit wider than the device or that does not validate 400.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator import programs
from flux_quantum.emulator.clock import iso, timestamp
from flux_quantum.emulator.iqm.scenario import IqmDeviceSpec, IqmFault, IqmScenario
from flux_quantum.emulator.iqm.wire import (
    API,
    JOB_TYPES,
    PREFIX,
    STATUS,
    TERMINAL,
    IqmRefusal,
    braket_source,
    iqm_error,
)
from flux_quantum.emulator.job_side import JobSide, SideJob
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.routes import Route, SideRoute, on_device, owned
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import UNSERVED, Missing
from flux_quantum.emulator.simulate import ProgramError
from flux_quantum.emulator.wire import Request, Response, json_response
from flux_quantum.vendors.iqm_program import NATIVE, validate_circuit
from flux_quantum.vendors.iqm_program import ProgramError as IqmProgramError


@dataclass
class IqmJob(SideJob):
    """One job: the facts fixed at creation; its progress lives in its device's queue."""

    qc_id: str = ""
    tag: str | None = None
    payload: dict[str, Any] = field(default_factory=dict, repr=False)
    measurements: list[dict[str, list[list[int]]]] = field(default_factory=list, repr=False)
    failure: str | None = None

    @property
    def token(self) -> str | None:
        return self.tag


_QC = f"{API}/quantum-computers/<qc>"
_CAL = f"{API}/calibration-sets/<qc>/<cal>"


class IqmService(JobSide[IqmScenario, IqmFault]):
    """The IQM side's requests answered, from any number of server threads."""

    vendor = "iqm"
    _draws = "iqm-fault"
    _id_draws = "iqm-ids"
    MISSING = Missing(
        UNSERVED, "Quantum computer {name} not found.",
        codes=("not_found", "qc_not_found", "job_not_found"),
    )  # fmt: skip
    ROUTES = (
        on_device("GET", _QC, "GetQuantumComputer", "_qc", "qc"),
        Route("GET", f"{_QC}/artifacts/<artifact>", "GetQcArtifact", "_qc_artifact",
              "<artifact>", "<qc>"),
        Route("GET", _CAL, "GetCalibrationSet", "_calibration_set", "<cal>", "<qc>"),
        Route("GET", f"{_CAL}/dynamic-quantum-architecture", "GetDynamicQuantumArchitecture",
              "_dqa", "<cal>", "<qc>"),
        Route("GET", f"{_CAL}/metrics", "GetQualityMetrics", "_metrics", "<cal>", "<qc>"),
        owned("POST", f"{API}/jobs/<job>/cancel", "CancelJob", "_cancel"),
        Route("POST", f"{API}/jobs/<qc>/<type>", "SubmitJob", "_create", "<type>", "<qc>",
              creates=True),
        owned("GET", f"{API}/jobs/<job>", "GetJob", "_get_job"),
        owned("GET", f"{API}/jobs/<job>/artifacts/<kind>", "GetJobArtifact", "_artifact"),
    )  # fmt: skip

    def _setup(self) -> None:
        super()._setup()
        self._qc_ids = {
            d.id: str(uuid.UUID(int=random.Random(f"{self.seed}:iqm-qc:{d.id}").getrandbits(128)))
            for d in self.scenario.devices
        }

    def _queue_spec(self, spec: IqmDeviceSpec) -> DeviceQueueSpec:
        """Maintenance and offline periods stop a device (and, checked here, refuse
        creates); a device down for the whole run never serves."""
        down = [(0.0, math.inf)] if spec.status != "online" else [*spec.paused, *spec.offline]
        return DeviceQueueSpec.waiting_during(spec.queue_key, spec.id, spec.queue, down)

    # -- views for tests and the facade ---------------------------------------------------

    def job_tag(self, job_id: str) -> str | None:
        with self._lock:
            return self._jobs[job_id].tag

    def job_timeline(self, job_id: str) -> TaskTimeline:
        with self._lock:
            job = self._jobs[job_id]
            return self._queues[job.device].timeline(job_id, self.clock.now())

    def pending(self, device: str) -> int:
        with self._lock:
            return self._queues[device].queue_size(self.clock.now())

    def env(self, url: str) -> dict[str, str]:
        """QRMI's settings reaching this service from ``url`` (the emulator's base URL), as
        a site writes them for QRMI's Slurm plugin: per device ``<id>_QRMI_IQM_ISA_*``."""
        endpoint = url.rstrip("/") + PREFIX
        env: dict[str, str] = {}
        for device in self.scenario.devices:
            env[f"{device.id}_QRMI_IQM_ISA_ENDPOINT"] = endpoint
            env[f"{device.id}_QRMI_IQM_ISA_TOKEN"] = self.scenario.token
        return env

    # -- dispatch -------------------------------------------------------------------------

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        return iqm_error(status, message, code)

    def _fault_error(self, fault: IqmFault, route: SideRoute) -> Response | None:
        if not fault.status:
            return None
        return iqm_error(fault.status, fault.message or "Injected fault.", fault.error_code)

    def _authorize(self, route: SideRoute, request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token != self.scenario.token:
            raise IqmRefusal(401, "Unauthorized: missing or invalid API token.", "unauthorized")

    # -- quantum computers ------------------------------------------------------------------

    def operational(self, spec: IqmDeviceSpec, now: float) -> str:
        """``online``, ``maintenance`` or ``offline`` at ``now``."""
        if spec.status != "online":
            return spec.status
        if any(s <= now < e for s, e in spec.offline):
            return "offline"
        if any(s <= now < e for s, e in spec.paused):
            return "maintenance"
        return "online"

    def _qc(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        with self._lock:
            now = self.clock.now()
            queue_length = self._queues[spec.id].queue_size(now)
        operational = self.operational(spec, now)
        health = None
        if operational == "online":
            health = {"healthy": True, "updated_at": iso(timestamp(self.clock, now))}
        doc = {
            "id": self._qc_ids[spec.id],
            "alias": spec.id,
            "display_name": spec.display_name,
            "description": spec.description,
            "backend_type": "qpu",
            "number_of_qubits": spec.qubits,
            "pulla_enabled": False,
            "limits": {
                "max_executions_per_job": spec.max_executions,
                "max_instructions_per_circuit": 10_000,
                "max_shots_per_circuit": spec.max_shots,
                "max_circuits_per_job": 200,
                "max_queued_jobs_per_user": spec.max_slots,
            },
            "operational_status": operational,
            "health": health,
            "queue_length": queue_length,
            "pricing": {"payg_price_per_second": f"{self.scenario.price_per_second:.2f}"},
            "additional_info": {
                "academy_url": "",
                "best_suited_for": [],
                "documentation_url": "",
                "mock_url": "",
            },
        }
        return json_response(200, doc)

    def _qc_artifact(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        if route.target != "static-quantum-architectures":
            raise IqmRefusal(404, f"Artifact {route.target} not found.", "qc_artifact_not_found")
        pairs = [[f"QB{a + 1}", f"QB{b + 1}"] for a, b in spec.pairs]
        return json_response(
            200,
            [{"dut_label": spec.id, "qubits": spec.qubit_names(), "computational_resonators": [],
              "connectivity": pairs}],
        )  # fmt: skip

    def _calibration_id(self, spec: IqmDeviceSpec, wanted: str | None) -> str:
        default = str(
            uuid.UUID(int=random.Random(f"{self.seed}:iqm-cal:{spec.id}").getrandbits(128))
        )
        if wanted in (None, "default", default):
            return default
        raise IqmRefusal(404, f"Calibration set {wanted} not found.", "calibration_set_not_found")

    def _dqa(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        cal = self._calibration_id(spec, route.target)
        qubits = spec.qubit_names()
        pairs = [[f"QB{a + 1}", f"QB{b + 1}"] for a, b in spec.pairs]

        def gate(implementation: str, loci: list[list[str]]) -> dict[str, Any]:
            return {
                "implementations": {implementation: {"loci": loci}},
                "default_implementation": implementation,
                "override_default_implementation": {},
            }

        doc = {
            "calibration_set_id": cal,
            "qubits": qubits,
            "computational_resonators": [],
            "gates": {
                "prx": gate("drag_gaussian", [[q] for q in qubits]),
                "cz": gate("tgss", pairs),
                "measure": gate("constant", [[q] for q in qubits]),
            },
        }
        return json_response(200, doc)

    def _calibration_set(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        cal = self._calibration_id(spec, route.target)
        return json_response(
            200,
            {
                "calibration_set_id": cal,
                "dut_label": spec.id,
                "is_invalid": False,
                "observations": {},
            },
        )

    def _metrics(self, route: SideRoute, request: Request) -> Response:
        spec = self._spec(route.device)
        cal = self._calibration_id(spec, route.target)
        rng = random.Random(f"{self.seed}:iqm-metrics:{spec.id}")
        observations = {}
        for q in spec.qubit_names():
            observations[f"metrics.rb.prx.drag_gaussian.{q}.fidelity"] = round(
                rng.uniform(0.997, 0.9995), 5
            )
            observations[f"metrics.ssro.measure.constant.{q}.fidelity"] = round(
                rng.uniform(0.95, 0.99), 4
            )
        return json_response(200, {"calibration_set_id": cal, "observations": observations})

    # -- jobs -------------------------------------------------------------------------------

    def _create(
        self, route: SideRoute, request: Request, faults: list[IqmFault]
    ) -> tuple[Response, str]:
        failure = self.failure(faults)
        spec = self._spec(route.device)
        if route.target not in JOB_TYPES:
            raise IqmRefusal(400, f"Unsupported job type {route.target!r}.", "unsupported_job_type")
        try:
            body = json.loads(request.body or b"null")
        except ValueError:
            raise IqmRefusal(400, "The job payload is not JSON.", "invalid_job_payload") from None
        circuits, shots = self._check_payload(body, spec)
        results = [self._simulate(c, shots, spec) for c in circuits]
        tag = request.first("tag")
        with self._lock:
            now = self.clock.now()
            operational = self.operational(spec, now)
            if operational != "online":
                raise IqmRefusal(
                    409,
                    f"Quantum computer {spec.id} is {operational} and does not accept jobs.",
                    "qc_not_operational",
                )
            queue = self._queues[spec.id]
            active = sum(
                1
                for j in self._jobs.values()
                if j.device == spec.id and STATUS[queue.progress(j.id, now).status] not in TERMINAL
            )
            if active >= spec.max_slots:
                raise IqmRefusal(
                    403,
                    f"You have {active} jobs waiting or processing on {spec.id}, its limit.",
                    "quota_exceeded",
                )
            job_id = self._new_id()
            job = IqmJob(
                id=job_id,
                device=spec.id,
                qc_id=self._qc_ids[spec.id],
                tag=tag,
                shots=shots * len(circuits),
                created_t=now,
                payload=body,
                measurements=results,
                failure=failure,
            )
            queue.submit(job_id, now, job.shots, fails=failure is not None)
            self._jobs[job_id] = job
            doc = self._document(job, now)
        return json_response(200, doc), job_id

    def _check_payload(self, body: Any, spec: IqmDeviceSpec) -> tuple[list[dict[str, Any]], int]:
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("circuits"), list)
            or not body["circuits"]
        ):
            raise IqmRefusal(
                400, "The job payload needs a non-empty 'circuits' list.", "invalid_job_payload"
            )
        shots = body.get("shots", 1)
        if (
            isinstance(shots, bool)
            or not isinstance(shots, int)
            or not 1 <= shots <= spec.max_shots
        ):
            raise IqmRefusal(
                400, f"shots must be an integer from 1 to {spec.max_shots}.", "invalid_input"
            )
        if shots * len(body["circuits"]) > spec.max_executions:
            raise IqmRefusal(
                400, f"The job exceeds {spec.max_executions} executions.", "invalid_input"
            )
        circuits = []
        for i, circuit in enumerate(body["circuits"]):
            if self.scenario.strict:
                self._check_native(circuit, i, spec)
            try:
                circuits.append(validate_circuit(circuit, spec.qubits, f"circuit {i}"))
            except IqmProgramError as exc:
                raise IqmRefusal(
                    400, f"{str(exc)[:1].upper()}{str(exc)[1:]}.", "invalid_input"
                ) from None
        return circuits, shots

    def _check_native(self, circuit: Any, index: int, spec: IqmDeviceSpec) -> None:
        """Refuse, as IQM's server validates a circuit against its dynamic quantum
        architecture (iqm-client's ``_validate_instruction`` words), an instruction
        outside the native set, or a ``cz`` on qubits the device does not couple."""
        coupled = {frozenset((f"QB{a + 1}", f"QB{b + 1}")) for a, b in spec.pairs}
        instructions = circuit.get("instructions") if isinstance(circuit, dict) else None
        for ins in instructions if isinstance(instructions, list) else []:
            name = ins.get("name") if isinstance(ins, dict) else None
            qubits = ins.get("qubits") if isinstance(ins, dict) else None
            if name not in NATIVE:
                raise IqmRefusal(
                    400, f"Circuit {index}: Unknown quantum operation '{name}'.", "invalid_input"
                )
            if (
                name == "cz"
                and isinstance(qubits, list)
                and frozenset(map(str, qubits)) not in coupled
            ):
                locus = tuple(map(str, qubits))
                raise IqmRefusal(
                    400,
                    f"Circuit {index}: {locus} is not allowed as locus for 'cz'.",
                    "invalid_input",
                )

    def _simulate(
        self, circuit: dict[str, Any], shots: int, spec: IqmDeviceSpec
    ) -> dict[str, list[list[int]]]:
        """The circuit's ``measurements`` (key -> one row of bits per shot), simulated."""
        source, keys = braket_source(circuit)
        try:
            result = programs.run(source, shots, spec.qubits, self.scenario.max_simulated_qubits)
        except ProgramError as exc:
            raise IqmRefusal(400, f"The circuit cannot run: {exc}.", "invalid_input") from None
        rows = result.get("measurements") or []
        measured = result.get("measuredQubits") or []
        column = {q: i for i, q in enumerate(measured)}
        return {
            key: [[int(row[column[q]]) for q in qubits] for row in rows] for key, qubits in keys
        }

    def _status(self, job: IqmJob, now: float) -> str:
        return STATUS[self._queues[job.device].progress(job.id, now).status]

    def _document(self, job: IqmJob, now: float) -> dict[str, Any]:
        """The job as IQM's GET /jobs/{id} answers it (lock held)."""
        queue = self._queues[job.device]
        progress = queue.progress(job.id, now)
        status = STATUS[progress.status]
        created = iso(timestamp(self.clock, job.created_t))
        timeline = [{"source": "iqm-server", "status": "created", "timestamp": created}]
        if progress.started_at is not None:
            at = iso(timestamp(self.clock, progress.started_at))
            timeline.append(
                {"source": "iqm-server", "status": "execution_started", "timestamp": at}
            )
        if progress.ended_at is not None:
            at = iso(timestamp(self.clock, progress.ended_at))
            timeline.append({"source": "iqm-server", "status": status, "timestamp": at})
        doc: dict[str, Any] = {
            "id": job.id,
            "type": "circuit",
            "status": status,
            "qc": {"id": job.qc_id},
            "tag": job.tag,
            "artifacts": [],
            "messages": [],
            "timeline": timeline,
            "queue_position": progress.position if status == "waiting" else None,
        }
        if status == "completed":
            doc["artifacts"] = [{"type": "measurements"}, {"type": "measurement_counts"}]
            if progress.started_at is not None and progress.ended_at is not None:
                doc["runtime_ms"] = round((progress.ended_at - progress.started_at) * 1000)
        if status == "failed":
            doc["errors"] = [
                {"error_code": "execution_failed", "message": job.failure or "Job failed.",
                 "source": "iqm-station-control"}
            ]  # fmt: skip
        return doc

    def _get_job(self, route: SideRoute, request: Request) -> Response:
        wait = request.first("wait_until_terminal") == "true"
        limit = min(30.0, float(request.first("timeout_seconds") or 10))
        deadline = min(limit, self.scenario.long_poll) if wait else 0.0
        waited = 0.0
        while True:
            with self._lock:
                job = self._job(route.target)
                doc = self._document(job, self.clock.now())
            if doc["status"] in TERMINAL or waited >= deadline or self._stop.is_set():
                break
            self._stop.wait(0.05)  # real time, outside the lock
            waited += 0.05
        response = json_response(200, doc)
        if wait and doc["status"] not in TERMINAL:
            headers = (*response.headers, ("IQM-Long-Poll-Timed-Out", "true"))
            response = Response(200, response.body, headers)
        return response

    def _cancel(self, route: SideRoute, request: Request) -> Response:
        with self._lock:
            job = self._job(route.target)
            now = self.clock.now()
            status = self._status(job, now)
            if status in TERMINAL:
                raise IqmRefusal(
                    403, f"Job {job.id} is {status} and cannot be cancelled.", "illegal_job_status"
                )
            self._queues[job.device].cancel(job.id, now)
            doc = self._document(job, now)
        return json_response(200, doc)

    def _artifact(self, route: SideRoute, request: Request) -> Response:
        kind = route.fields["kind"]
        with self._lock:
            job = self._job(route.target)
            status = self._status(job, self.clock.now())
        if status != "completed" or kind not in ("measurements", "measurement_counts"):
            raise IqmRefusal(
                404, f"Artifact {kind} of job {job.id} not found.", "job_artifact_not_found"
            )
        if kind == "measurements":
            return json_response(200, job.measurements)
        counts = []
        for circuit in job.measurements:
            tally: Counter[str] = Counter()
            for shot in zip(*circuit.values(), strict=True):
                tally["".join(str(b) for row in shot for b in row)] += 1
            counts.append({"measurement_keys": list(circuit), "counts": dict(tally)})
        return json_response(200, counts)
