"""The emulated Braket service: devices, quantum tasks, faults and task results.

This module owns the emulator's state behind one lock and answers every request the server
receives: the Braket rest-json operations (CreateQuantumTask, GetQuantumTask,
CancelQuantumTask, SearchQuantumTasks, GetDevice, SearchDevices, tags) and, under ``/s3``,
the minimal S3 that serves each task's results.json once the task has COMPLETED. It also
keeps the Braket Direct reservations booked (from the scenario or ``add_reservation``) and
checks a create's ``associations`` against them. Queue state
is a pure function of the injected clock and of the calls made; faults are counted per call
and drawn from the seed; the call log and the report's counts are the shared
``VendorSide``'s (``side``). It must never sleep while holding its lock, never read the wall
clock (time comes from the injected ``Clock``), and never answer with a shape botocore's
braket 2019-09-01 model does not have.
"""

from __future__ import annotations

import json
import random
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from flux_quantum.emulator import s3
from flux_quantum.emulator.bill import (
    BilledReservation,
    BilledTask,
    braket_charge,
    execution_ms,
    window_seconds,
)
from flux_quantum.emulator.capabilities import capabilities_json
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.queue import DeviceQueue, TaskTimeline, Window
from flux_quantum.emulator.scenario import (
    BRAKET_ERRORS,
    S3_ERRORS,
    DeviceSpec,
    Fault,
    ReservationSpec,
    Scenario,
    reservation_from,
)
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.simulate import (
    OPENQASM_PROGRAM_SET,
    ProgramError,
    ProgramSetError,
    SetProgram,
    SimulationRequest,
    action_type,
    read_program_set,
    simulate,
    simulate_program_set,
)
from flux_quantum.emulator.wire import (
    Request,
    Response,
    braket_error,
    iso8601,
    json_response,
)

TASK_POSITION_CAP = 2000
DEVICE_QUEUE_CAP = 4000
RESULTS_FILENAME = "results.json"
_REGION = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request")
_BAD_PREFIX = re.compile(r"[{}\[\]<>\\|^~`%#\"\x00-\x1f\x7f-\xff]|\.\./|\./")
RESERVATION_ASSOCIATION = "RESERVATION_TIME_WINDOW_ARN"


@dataclass(frozen=True)
class TaskRecord:
    """The facts of one quantum task fixed at creation; its progress lives in its DeviceQueue."""

    arn: str
    region: str
    device_arn: str
    client_token: str
    shots: int
    action: str
    action_type: str
    device_parameters: str
    bucket: str
    key_prefix: str
    directory: str
    created_t: float
    result: dict[str, Any] | None = field(default=None, compare=False)
    failure_reason: str | None = None
    associations: tuple[dict[str, str], ...] = ()
    reservation: str | None = None  # the reservation ARN among the associations
    programs: int = 0  # a program set's programs and executables (0: a single program)
    executables: int = 0

    def same_request(self, body: dict[str, Any]) -> bool:
        """Whether a create with the same clientToken asks for the same task."""
        return (
            body.get("deviceArn") == self.device_arn
            and body.get("shots") == self.shots
            and body.get("action") == self.action
            and body.get("outputS3Bucket") == self.bucket
            and body.get("outputS3KeyPrefix") == self.key_prefix
            and list(body.get("associations") or []) == list(self.associations)
        )


@dataclass(frozen=True)
class _FaultHit:
    """What the faults that fired on one call do, before and after the call applies."""

    error: Fault | None = None
    delay: float = 0.0
    reset: bool = False
    fail_task: str | None = None
    cancel_task: bool = False
    late_error: Fault | None = None
    late_delay: float = 0.0
    late_reset: bool = False


class _Route:
    """What a request is, resolved before faults are applied."""

    __slots__ = ("body", "device", "handler", "operation", "s3call", "target")

    def __init__(
        self,
        operation: str,
        handler: Callable[..., Response] | None,
        target: str | None = None,
        device: str | None = None,
        body: dict[str, Any] | None = None,
        s3call: s3.S3Call | None = None,
    ) -> None:
        self.operation = operation
        self.handler = handler
        self.target = target
        self.device = device
        self.body = body or {}
        self.s3call = s3call


class _Reject(Refusal):
    """Stop handling a request and answer ``response``; logged as ``operation``."""

    def __init__(self, operation: str, response: Response) -> None:
        super().__init__(response)
        self.operation = operation


class BraketService(VendorSide[_Route, Fault]):
    """All emulator state, answering requests from any number of server threads."""

    _refusal = _Reject

    def __init__(
        self,
        scenario: Scenario,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
    ) -> None:
        faults = self._bind_faults(scenario)
        super().__init__(clock, seed, stop, on_call, faults=len(faults))
        self.scenario = scenario
        self._queues = {spec.arn: DeviceQueue(spec, seed) for spec in scenario.devices}
        self._capabilities = {
            spec.arn: capabilities_json(spec, clock.epoch) for spec in scenario.devices
        }
        self._tasks: dict[str, TaskRecord] = {}
        self._tokens: dict[str, str] = {}
        self._tags: dict[str, dict[str, str]] = {}
        self._published: set[str] = set()
        self._task_ids = random.Random(f"{seed}:task-ids")
        self._reservation_ids = random.Random(f"{seed}:reservation-ids")
        self._faults = faults
        self.store = s3.ObjectStore()
        self.store.create_bucket(scenario.bucket)
        # Braket Direct reservations by ARN (the scenario's, then those added while running).
        self._reservations: dict[str, ReservationSpec] = {}
        for reservation in scenario.reservations:
            self._book(reservation, 0.0)

    # -- public views -------------------------------------------------------------------------

    def task_arns(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def task_timeline(self, arn: str) -> TaskTimeline:
        with self._lock:
            task = self._tasks[arn]
            return self._queues[task.device_arn].timeline(arn, self.clock.now())

    def task_forecast(self, arn: str) -> TaskTimeline:
        """The milestones a task will reach if nothing but the background changes its
        device's queue from now on (``DeviceQueue.forecast``)."""
        with self._lock:
            task = self._tasks[arn]
            return self._queues[task.device_arn].forecast(arn, self.clock.now())

    # -- reservations -------------------------------------------------------------------------

    def add_reservation(self, fields: Any) -> ReservationSpec:
        """Book a reservation while running (``fields``: arn, device, start, end,
        price_per_hour; without ``arn``, the emulator gives it one, as Braket Direct does
        when a window is booked); ScenarioError in one sentence naming the field when
        refused."""
        with self._lock:
            if isinstance(fields, dict) and fields.get("arn") is None:
                fields = {**fields, "arn": self._new_reservation_arn(fields.get("device"))}
            reservation = reservation_from(
                fields,
                self.scenario.devices,
                booked=list(self._reservations.values()),
                now=self.clock.now(),
            )
            self._book(reservation, self.clock.now())
            return reservation

    def _new_reservation_arn(self, device: object) -> str:
        """A reservation ARN in the device's region (the scenario's for a global device)
        and the scenario's account, its id drawn from the seed (lock held)."""
        spec = next((d for d in self.scenario.devices if device in (d.arn, d.name)), None)
        region = (spec.arn.split(":")[3] if spec is not None else "") or self.scenario.region
        reservation_id = uuid.UUID(int=self._reservation_ids.getrandbits(128), version=4)
        return f"arn:aws:braket:{region}:{self.scenario.account}:reservation/{reservation_id}"

    def reservations(self) -> list[ReservationSpec]:
        """Every reservation booked, by start."""
        with self._lock:
            return sorted(self._reservations.values(), key=lambda r: (r.start, r.arn))

    def _book(self, reservation: ReservationSpec, now: float) -> None:
        window = Window(reservation.arn, reservation.start, reservation.end)
        self._queues[reservation.device].reserve(window, now)
        self._reservations[reservation.arn] = reservation

    def bill_reservations(self) -> list[BilledReservation]:
        """Every reservation booked, with its cost and what its tasks did so far."""
        with self._lock:
            now = self.clock.now()
            rows = []
            for reservation in self._reservations.values():
                queue = self._queues[reservation.device]
                progress = [
                    queue.progress(task.arn, now)
                    for task in self._tasks.values()
                    if task.reservation == reservation.arn
                ]
                runs = [(p.started_at, p.ended_at) for p in progress]
                rows.append(
                    BilledReservation(
                        arn=reservation.arn,
                        device=reservation.device,
                        start=reservation.start,
                        end=reservation.end,
                        start_at=iso8601(timestamp(self.clock, reservation.start)),
                        end_at=iso8601(timestamp(self.clock, reservation.end)),
                        price_per_hour=reservation.price_per_hour,
                        cost=reservation.cost,
                        tasks=len(progress),
                        completed=sum(p.status == "COMPLETED" for p in progress),
                        cancelled=sum(p.status in ("CANCELLING", "CANCELLED") for p in progress),
                        used_seconds=window_seconds(
                            (reservation.start, reservation.end), runs, now
                        ),
                    )
                )
            return rows

    def bill(self) -> list[BilledTask]:
        """Every task created so far, with what Braket charges for it now (see ``bill``);
        a task in a reservation costs nothing (the reservation is billed instead)."""
        with self._lock:
            now = self.clock.now()
            rows = []
            for task in self._tasks.values():
                progress = self._queues[task.device_arn].progress(task.arn, now)
                spec = self.scenario.device(task.device_arn)
                assert spec is not None
                seconds, cost = braket_charge(
                    spec.cost, progress.status, task.shots, progress.started_at, progress.ended_at
                )
                if task.reservation is not None:
                    seconds, cost = None, 0.0
                rows.append(
                    BilledTask(
                        vendor="braket",
                        id=task.arn,
                        device=task.device_arn,
                        token=task.client_token,
                        state=progress.status,
                        shots=task.shots,
                        billed_seconds=seconds,
                        cost=cost,
                        session=None,
                        created=task.created_t,
                        reservation=task.reservation,
                        started=progress.started_at,
                        ended=progress.ended_at,
                        programs=task.programs or None,
                        executables=task.executables or None,
                    )
                )
            return rows

    # -- dispatch -----------------------------------------------------------------------------

    def _refused(self, request: Request, refusal: Refusal) -> _Route:
        assert isinstance(refusal, _Reject)
        return _Route(refusal.operation, None)

    def _run(self, route: _Route, request: Request, now: float, created: list[str]) -> Response:
        region = self._region(request)
        with self._lock:
            hit = self._apply_faults(route, now)
        early = self._hit_answer(hit.delay, hit.reset, hit.error, route, request, late=False)
        if early is not None:
            return early
        try:
            if route.s3call is not None:
                response = self._s3(request, route.s3call)
            elif route.operation == "CreateQuantumTask":
                assert route.handler is not None
                response = route.handler(
                    route.body, region, hit.fail_task, hit.cancel_task, created
                )
            else:
                assert route.handler is not None
                response = route.handler(route, request, region)
        except _Reject as reject:
            response = reject.response
        except Exception as exc:  # an emulator bug must still answer like the service
            response = braket_error(
                "InternalServiceException", 500, f"emulator error in {route.operation}: {exc!r}"
            )
        # Faults after the commit: the call applied (a task created, a cancel done), but the
        # client hears of it late, with an error, or not at all.
        late = self._hit_answer(
            hit.late_delay, hit.late_reset, hit.late_error, route, request, late=True
        )
        return late if late is not None else response

    def _hit_answer(
        self,
        delay: float,
        reset: bool,
        error: Fault | None,
        route: _Route,
        request: Request,
        late: bool,
    ) -> Response | None:
        """Wait ``delay``, then answer with a reset or ``error`` (None: neither); each
        effect is counted for the report (a reset after the commit as ``lost``)."""
        lost = self._delay_or_reset(delay, reset, late)
        if lost is not None or error is None:
            return lost
        self._count(_error_kind(error))
        return self._fault_response(error, route, request)

    def _route(self, request: Request) -> _Route:
        if request.path == s3.PREFIX or request.path.startswith(s3.PREFIX + "/"):
            call = s3.classify(request)
            return _Route(call.operation, None, call.target, s3call=call)
        method, parts = request.method, request.segments()
        head = parts[0] if parts else ""
        rest = "/".join(parts[1:])  # an ARN whose '/' the client did not encode
        if method == "POST" and parts == ["quantum-task"]:
            body = _json_body(request, "CreateQuantumTask")
            device = body.get("deviceArn") if isinstance(body.get("deviceArn"), str) else None
            return _Route("CreateQuantumTask", self._create_task, device, device, body)
        if head == "quantum-task" and rest:
            if method == "PUT" and parts[-1] == "cancel" and len(parts) > 2:
                arn = "/".join(parts[1:-1])
                return _Route("CancelQuantumTask", self._cancel_task, arn, self._device_of(arn))
            if method == "GET":
                return _Route("GetQuantumTask", self._get_task, rest, self._device_of(rest))
        if method == "POST" and parts == ["quantum-tasks"]:
            body = _json_body(request, "SearchQuantumTasks")
            return _Route("SearchQuantumTasks", self._search_tasks, body=body)
        if method == "GET" and head == "device" and rest:
            return _Route("GetDevice", self._get_device, rest, rest)
        if method == "POST" and parts == ["devices"]:
            body = _json_body(request, "SearchDevices")
            return _Route("SearchDevices", self._search_devices, body=body)
        if head == "tags" and rest:
            operation = {"GET": "ListTagsForResource", "POST": "TagResource"}.get(
                method, "UntagResource"
            )
            body = _json_body(request, operation) if method == "POST" else {}
            return _Route(operation, self._tags_op, rest, self._device_of(rest), body)
        raise _Reject(
            "Unknown",
            braket_error(
                "UnknownOperationException",
                404,
                f"the emulator does not implement {method} {request.path}",
            ),
        )

    def _region(self, request: Request) -> str:
        match = _REGION.search(request.headers.get("authorization", ""))
        return match.group(1) if match else self.scenario.region

    def _device_of(self, task_arn: str) -> str | None:
        with self._lock:
            task = self._tasks.get(task_arn)
        return task.device_arn if task else None

    # -- faults -------------------------------------------------------------------------------

    def _bind_faults(self, scenario: Scenario) -> list[tuple[Fault, str | None]]:
        by_name = {spec.name: spec.arn for spec in scenario.devices}
        bound: list[tuple[Fault, str | None]] = []
        for fault in scenario.faults:
            device = by_name.get(fault.device, fault.device) if fault.device else None
            bound.append((fault, device))
        for spec in scenario.devices:
            bound.extend((fault, spec.arn) for fault in spec.faults)
        return bound

    def _apply_faults(self, route: _Route, now: float) -> _FaultHit:
        """Count this call against every matching fault; return what fires. Lock held."""
        fired: list[Fault] = []
        is_s3 = route.s3call is not None
        for index, (fault, device) in enumerate(self._faults):
            if fault.operations and route.operation not in fault.operations:
                continue
            if fault.error is not None and fault.is_s3 != is_s3:
                continue
            if device is not None and route.device != device:
                continue
            if (fault.start is not None and now < fault.start) or (
                fault.end is not None and now >= fault.end
            ):
                continue
            self._fault_counts[index] += 1
            n = self._fault_counts[index]
            draw = 0.0
            if fault.rate is not None:
                draw = random.Random(f"{self.seed}:fault:{index}:{n}").random()
            if fault.selects(n, now, draw):
                fired.append(fault)
        before = [f for f in fired if not f.after_commit]
        after = [f for f in fired if f.after_commit]
        return _FaultHit(
            error=next((f for f in before if f.error is not None), None),
            delay=sum(f.delay for f in before),
            reset=any(f.reset for f in before),
            fail_task=next((f.fail_task for f in before if f.fail_task is not None), None),
            cancel_task=any(f.cancel_task for f in before),
            late_error=next((f for f in after if f.error is not None), None),
            late_delay=sum(f.delay for f in after),
            late_reset=any(f.reset for f in after),
        )

    def _fault_response(self, fault: Fault, route: _Route, request: Request) -> Response:
        code = fault.error or "InternalServiceException"
        if fault.is_s3:
            message = fault.message or f"{code} (injected by the emulator scenario)"
            head = request.method == "HEAD"
            return s3.s3_error(code, S3_ERRORS[code], message, request.path, head)
        default = {
            "ThrottlingException": "Rate exceeded",
            "DeviceOfflineException": f"Device {route.device or ''} is offline",
        }.get(code, f"{code} in {route.operation}")
        message = fault.message or f"{default} (injected by the emulator scenario)"
        return braket_error(code, BRAKET_ERRORS[code], message)

    # -- CreateQuantumTask --------------------------------------------------------------------

    def _create_task(
        self,
        body: dict[str, Any],
        region: str,
        fail_task: str | None,
        cancel_task: bool,
        created: list[str],
    ) -> Response:
        for name in ("clientToken", "deviceArn", "outputS3Bucket", "outputS3KeyPrefix", "action"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise _invalid(f"{name} is required and must be a non-empty string")
        shots = body.get("shots")
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise _invalid(f"shots must be an integer >= 0, got {shots!r}")
        if _BAD_PREFIX.search(body["outputS3KeyPrefix"]):
            raise _invalid("outputS3KeyPrefix contains a character or sequence S3 does not allow")
        reservation_arn = _reservation_arn(body.get("associations"))
        token, device_arn = body["clientToken"], body["deviceArn"]
        with self._lock:
            existing = self._existing_task(token, body, created)
            if existing is not None:
                return existing
            spec = self._device_for_region(device_arn, region, for_create=True)
            if reservation_arn is not None:
                self._check_reservation(reservation_arn, spec, self.clock.now())
            queue = self._queues[spec.arn]
            refusal = queue.availability.accepts_tasks_at(self.clock.now())
        if refusal is not None:
            status = queue.availability.status_at(self.clock.now())
            raise _Reject(
                "CreateQuantumTask",
                braket_error(
                    refusal,
                    BRAKET_ERRORS[refusal],
                    f"Device {device_arn} is {status.status}"
                    + (f" ({status.reason})" if status.reason else ""),
                ),
            )
        request = SimulationRequest(
            action=body["action"],
            shots=shots,
            backend=spec.backend,
            device_qubits=spec.qubits,
            max_qubits=self.scenario.max_simulated_qubits,
        )
        programs: list[SetProgram] = []
        if _names_program_set(body["action"]):
            programs = _check_program_set(spec, body["action"], shots)
            executables = sum(program.executables for program in programs)
            per_executable = shots // executables
            try:
                runs = simulate_program_set(programs, per_executable, request)
            except ProgramSetError as exc:
                raise _set_invalid(exc) from exc
            kind = OPENQASM_PROGRAM_SET
            result: dict[str, Any] = {
                "programs": [program.document() for program in programs],
                "runs": runs,
                "shotsPerExecutable": per_executable,
            }
        else:
            low, high = spec.shots
            if not low <= shots <= high:
                raise _invalid(
                    f"shots must be between {low} and {high} on {spec.name}, got {shots}"
                )
            try:
                kind = action_type(body["action"])
                result = simulate(request)
            except ProgramError as exc:
                raise _invalid(str(exc)) from exc
        with self._lock:
            existing = self._existing_task(token, body, created)
            if existing is not None:
                return existing
            now = self.clock.now()
            if reservation_arn is not None:  # its window may have ended since the check
                self._check_reservation(reservation_arn, spec, now)
            task_id = str(uuid.UUID(int=self._task_ids.getrandbits(128), version=4))
            arn = f"arn:aws:braket:{region}:{self.scenario.account}:quantum-task/{task_id}"
            prefix = body["outputS3KeyPrefix"].rstrip("/")
            record = TaskRecord(
                arn=arn,
                region=region,
                device_arn=spec.arn,
                client_token=token,
                shots=shots,
                action=body["action"],
                action_type=kind,
                device_parameters=_json_string(body.get("deviceParameters")),
                bucket=body["outputS3Bucket"],
                key_prefix=body["outputS3KeyPrefix"],
                directory=f"{prefix}/{task_id}" if prefix else task_id,
                created_t=now,
                result=result,
                failure_reason=fail_task,
                associations=tuple(dict(a) for a in body.get("associations") or ()),
                reservation=reservation_arn,
                programs=len(programs),
                executables=sum(program.executables for program in programs),
            )
            self._queues[spec.arn].submit(
                arn,
                now,
                shots,
                fails=fail_task is not None,
                vendor_cancels=cancel_task,
                window=reservation_arn,
            )
            if fail_task is not None:
                self._effects["fail_task"] += 1
            if cancel_task:
                self._effects["cancel_task"] += 1
            self._tasks[arn] = record
            self._tokens[token] = arn
            self._tags[arn] = {str(k): str(v) for k, v in (body.get("tags") or {}).items()}
            self.store.create_bucket(record.bucket)
        created.append(arn)
        return json_response(201, {"quantumTaskArn": arn})

    def _existing_task(
        self, token: str, body: dict[str, Any], created: list[str]
    ) -> Response | None:
        """The answer to a repeated clientToken (lock held), or None for a new token."""
        arn = self._tokens.get(token)
        if arn is None:
            return None
        if not self._tasks[arn].same_request(body):
            raise _Reject(
                "CreateQuantumTask",
                braket_error(
                    "ConflictException",
                    409,
                    f"clientToken {token} was already used for a different request ({arn})",
                ),
            )
        created.append(arn)
        return json_response(201, {"quantumTaskArn": arn})

    def _check_reservation(self, arn: str, spec: DeviceSpec, now: float) -> None:
        """Refuse a create in reservation ``arn`` on ``spec`` unless it is booked on that
        device and its window has not ended (lock held)."""
        reservation = self._reservations.get(arn)
        if reservation is None:
            raise _invalid(f"Reservation {arn} was not found in this account")
        if reservation.device != spec.arn:
            raise _invalid(f"Reservation {arn} is for device {reservation.device}, not {spec.arn}")
        if reservation.end <= now:
            ended = iso8601(timestamp(self.clock, reservation.end))
            raise _invalid(f"Reservation {arn} ended at {ended}; it takes no more quantum tasks")

    def _device_for_region(self, arn: str, region: str, for_create: bool = False) -> DeviceSpec:
        """The device, if this region's endpoint knows it (lock held)."""
        spec = self.scenario.device(arn)
        device_region = arn.split(":")[3] if arn.count(":") >= 5 else ""
        if spec is not None and not (
            self.scenario.strict_regions and device_region and device_region != region
        ):
            return spec
        where = f" in region {region}" if spec is not None else ""
        if for_create:
            raise _invalid(f"Device {arn} was not found{where}")
        raise _Reject(
            "GetDevice",
            braket_error("ResourceNotFoundException", 404, f"Device {arn} not found{where}"),
        )

    # -- GetQuantumTask / CancelQuantumTask ---------------------------------------------------

    def _task(self, arn: str, region: str) -> TaskRecord:
        task = self._tasks.get(arn)
        if task is None or (self.scenario.strict_regions and task.region != region):
            raise _Reject(
                "GetQuantumTask",
                braket_error("ResourceNotFoundException", 404, f"Quantum task {arn} not found"),
            )
        return task

    def _get_task(self, route: _Route, request: Request, region: str) -> Response:
        with self._lock:
            task = self._task(str(route.target), region)
            return json_response(200, self._describe(task, self.clock.now()))

    def _describe(self, task: TaskRecord, now: float) -> dict[str, Any]:
        progress = self._queues[task.device_arn].progress(task.arn, now)
        if progress.position is not None:
            position = (
                str(progress.position)
                if progress.position <= TASK_POSITION_CAP
                else f">{TASK_POSITION_CAP}"
            )
            queue_info: dict[str, str] = {
                "queue": "QUANTUM_TASKS_QUEUE",
                "position": position,
                "queuePriority": "Normal",
            }
        elif progress.status == "QUEUED" and task.reservation is not None:
            queue_info = {
                "queue": "QUANTUM_TASKS_QUEUE",
                "position": "None",
                "queuePriority": "Normal",
                "message": f"Quantum task is queued for reservation {task.reservation}. "
                "AmazonBraket does not show queue position for reservation tasks.",
            }
        else:
            queue_info = {
                "queue": "QUANTUM_TASKS_QUEUE",
                "position": "None",
                "queuePriority": "Normal",
                "message": f"Task is in {progress.status} status. AmazonBraket does not show "
                "queue position for this status.",
            }
        doc: dict[str, Any] = {
            "quantumTaskArn": task.arn,
            "status": progress.status,
            "deviceArn": task.device_arn,
            "deviceParameters": task.device_parameters,
            "shots": task.shots,
            "outputS3Bucket": task.bucket,
            "outputS3Directory": task.directory,
            "createdAt": iso8601(timestamp(self.clock, task.created_t)),
            "tags": dict(self._tags.get(task.arn, {})),
            "queueInfo": queue_info,
            "actionMetadata": {"actionType": task.action_type},
        }
        if task.programs:
            doc["actionMetadata"]["programCount"] = task.programs
            doc["actionMetadata"]["executableCount"] = task.executables
        if progress.ended_at is not None:
            doc["endedAt"] = iso8601(timestamp(self.clock, progress.ended_at))
        if progress.status == "FAILED":
            doc["failureReason"] = task.failure_reason or "Task failed"
        if progress.status == "COMPLETED":
            doc["numSuccessfulShots"] = task.shots
        if task.associations:
            doc["associations"] = [dict(a) for a in task.associations]
        return doc

    def _cancel_task(self, route: _Route, request: Request, region: str) -> Response:
        with self._lock:
            task = self._task(str(route.target), region)
            now = self.clock.now()
            progress = self._queues[task.device_arn].progress(task.arn, now)
            if progress.status in ("COMPLETED", "FAILED"):
                raise _Reject(
                    "CancelQuantumTask",
                    braket_error(
                        "ConflictException",
                        409,
                        f"Quantum task {task.arn} is {progress.status} and cannot be cancelled",
                    ),
                )
            status = self._queues[task.device_arn].cancel(task.arn, now)
        return json_response(200, {"quantumTaskArn": task.arn, "cancellationStatus": status})

    # -- searches -----------------------------------------------------------------------------

    def _search_tasks(self, route: _Route, request: Request, region: str) -> Response:
        filters = _filters(route.body, "SearchQuantumTasks")
        with self._lock:
            now = self.clock.now()
            rows = []
            for task in self._tasks.values():
                if self.scenario.strict_regions and task.region != region:
                    continue
                doc = self._describe(task, now)
                if all(_task_matches(doc, f) for f in filters):
                    summary = {
                        k: doc[k]
                        for k in (
                            "quantumTaskArn",
                            "status",
                            "deviceArn",
                            "shots",
                            "outputS3Bucket",
                            "outputS3Directory",
                            "createdAt",
                            "endedAt",
                            "tags",
                        )
                        if k in doc
                    }
                    rows.append(summary)
        page, token = _paginate(rows, route.body)
        return json_response(200, {"quantumTasks": page, **token})

    def _search_devices(self, route: _Route, request: Request, region: str) -> Response:
        filters = _filters(route.body, "SearchDevices")
        arns: set[str] | None = None
        for f in filters:
            if f["name"] != "deviceArn":
                raise _invalid(f"filter name {f['name']!r} is not supported (only deviceArn)")
            arns = set(f["values"]) if arns is None else arns & set(f["values"])
        with self._lock:
            now = self.clock.now()
            rows = []
            for spec in self.scenario.devices:
                if arns is not None and spec.arn not in arns:
                    continue
                if self.scenario.strict_regions and spec.region and spec.region != region:
                    continue
                rows.append(
                    {
                        "deviceArn": spec.arn,
                        "deviceName": spec.name,
                        "providerName": spec.provider,
                        "deviceType": spec.type,
                        "deviceStatus": self._queues[spec.arn].status(now).status,
                    }
                )
        page, token = _paginate(rows, route.body)
        return json_response(200, {"devices": page, **token})

    # -- GetDevice ----------------------------------------------------------------------------

    def _get_device(self, route: _Route, request: Request, region: str) -> Response:
        with self._lock:
            spec = self._device_for_region(str(route.target), region)
            queue = self._queues[spec.arn]
            now = self.clock.now()
            status = queue.status(now)
            size = queue.queue_size(now)
        doc: dict[str, Any] = {
            "deviceArn": spec.arn,
            "deviceName": spec.name,
            "providerName": spec.provider,
            "deviceType": spec.type,
            "deviceStatus": status.status,
            "deviceCapabilities": self._capabilities[spec.arn],
            "deviceQueueInfo": [
                {
                    "queue": "QUANTUM_TASKS_QUEUE",
                    "queueSize": str(size) if size <= DEVICE_QUEUE_CAP else f">{DEVICE_QUEUE_CAP}",
                    "queuePriority": "Normal",
                },
                {"queue": "QUANTUM_TASKS_QUEUE", "queueSize": "0", "queuePriority": "Priority"},
                {"queue": "JOBS_QUEUE", "queueSize": "0"},
            ],
        }
        if status.status != "ONLINE" and status.reason is not None:
            reason: dict[str, str] = {
                "reason": status.reason,
                "updatedAt": iso8601(timestamp(self.clock, now)),
            }
            if status.started_at is not None:
                reason["startedAt"] = iso8601(timestamp(self.clock, status.started_at))
            if status.estimated_end_at is not None:
                reason["estimatedEndAt"] = iso8601(timestamp(self.clock, status.estimated_end_at))
            doc["deviceStatusReason"] = reason
        return json_response(200, doc)

    # -- tags ---------------------------------------------------------------------------------

    def _tags_op(self, route: _Route, request: Request, region: str) -> Response:
        arn = str(route.target)
        with self._lock:
            if arn not in self._tasks:
                raise _Reject(
                    route.operation,
                    braket_error("ResourceNotFoundException", 404, f"Resource {arn} not found"),
                )
            tags = self._tags.setdefault(arn, {})
            if route.operation == "ListTagsForResource":
                return json_response(200, {"tags": dict(tags)})
            if route.operation == "TagResource":
                new = route.body.get("tags")
                if not isinstance(new, dict):
                    raise _invalid("tags must be a map of strings")
                tags.update({str(k): str(v) for k, v in new.items()})
            else:
                for key in request.query.get("tagKeys", []):
                    tags.pop(key, None)
        return json_response(200, {})

    # -- S3 -----------------------------------------------------------------------------------

    def _s3(self, request: Request, call: s3.S3Call) -> Response:
        with self._lock:
            now = self.clock.now()
            if call.operation in ("GetObject", "HeadObject", "ListObjectsV2"):
                self._publish_results(now)
            return self.store.handle(request, call, timestamp(self.clock, now))

    def _publish_results(self, now: float) -> None:
        """Write results.json for every task that has COMPLETED by ``now`` (lock held)."""
        for task in self._tasks.values():
            if task.arn in self._published or task.result is None:
                continue
            progress = self._queues[task.device_arn].progress(task.arn, now)
            if progress.status in ("QUEUED", "RUNNING", "CANCELLING"):
                continue
            self._published.add(task.arn)
            if task.programs and progress.status in ("COMPLETED", "FAILED"):
                self._publish_program_set(task, progress.status, progress.ended_at or now)
                continue
            if progress.status != "COMPLETED":
                continue
            document = json.loads(json.dumps(task.result))
            metadata = document.setdefault("taskMetadata", {})
            metadata["id"] = task.arn
            metadata["deviceId"] = task.device_arn
            metadata["shots"] = task.shots
            metadata["createdAt"] = iso8601(timestamp(self.clock, task.created_t))
            if progress.ended_at is not None:
                metadata["endedAt"] = iso8601(timestamp(self.clock, progress.ended_at))
            spec = self.scenario.device(task.device_arn)
            started, ended = progress.started_at, progress.ended_at
            if spec is not None and spec.type == "SIMULATOR" and None not in (started, ended):
                # What the managed simulators report and Braket bills (3 s minimum).
                document.setdefault("additionalMetadata", {})["simulatorMetadata"] = {
                    "braketSchemaHeader": {
                        "name": "braket.task_result.simulator_metadata",
                        "version": "1",
                    },
                    "executionDuration": execution_ms(started, ended),  # type: ignore[arg-type]
                }
            when = timestamp(self.clock, progress.ended_at or now)
            body = json.dumps(document).encode()
            key = f"{task.directory}/{RESULTS_FILENAME}"
            self.store.put(task.bucket, key, body, when, "application/json")

    def _publish_program_set(self, task: TaskRecord, status: str, ended: float) -> None:
        """Write a program set's results where Braket does (lock held): results.json
        naming the other files relative to ``s3Location``, metadata.json, and for program
        i ``programs/i/results.json``, its ``program.json`` and one
        ``executables/j.json`` per executable (its measurements, or for a FAILED task the
        failure)."""
        assert task.result is not None
        when = timestamp(self.clock, ended)
        completed = status == "COMPLETED"
        failed = {
            "failureReason": task.failure_reason or "Task failed",
            "retryable": False,
            "category": "DEVICE",
        }

        def put(name: str, document: dict[str, Any]) -> None:
            body = json.dumps(document).encode()
            self.store.put(task.bucket, f"{task.directory}/{name}", body, when, "application/json")

        executables_metadata = []
        for index, (program, runs) in enumerate(
            zip(task.result["programs"], task.result["runs"], strict=True)
        ):
            names = []
            for inputs_index, run in enumerate(runs):
                if completed:
                    document: dict[str, Any] = {
                        "braketSchemaHeader": _header("program_set_executable_result"),
                        "inputsIndex": inputs_index,
                        "measurements": run.get("measurements"),
                        "measuredQubits": run.get("measuredQubits"),
                    }
                else:
                    document = {
                        "braketSchemaHeader": _header("program_set_executable_failure"),
                        "inputsIndex": inputs_index,
                        "failureMetadata": failed,
                    }
                names.append(f"executables/{inputs_index}.json")
                put(f"programs/{index}/{names[-1]}", document)
            put(f"programs/{index}/program.json", program)
            put(
                f"programs/{index}/{RESULTS_FILENAME}",
                {
                    "braketSchemaHeader": _header("program_result"),
                    "executableResults": names,
                    "source": "program.json",
                    "additionalMetadata": {},
                },
            )
            executables_metadata.append({"executables": [{} if completed else failed] * len(runs)})
        put(
            "metadata.json",
            {
                "braketSchemaHeader": _header("program_set_task_metadata"),
                "id": task.arn,
                "deviceId": task.device_arn,
                "requestedShots": task.shots,
                "successfulShots": task.shots if completed else 0,
                "programMetadata": executables_metadata,
                "createdAt": iso8601(timestamp(self.clock, task.created_t)),
                "endedAt": iso8601(when),
                "status": status,
                "totalFailedExecutables": 0 if completed else task.executables,
            },
        )
        put(
            RESULTS_FILENAME,
            {
                "braketSchemaHeader": _header("program_set_task_result"),
                "programResults": [
                    f"programs/{i}/{RESULTS_FILENAME}" for i in range(task.programs)
                ],
                "s3Location": [task.bucket, task.directory],
                "taskMetadata": "metadata.json",
            },
        )


def _header(name: str) -> dict[str, str]:
    """The schema header of a ``braket.task_result`` document."""
    return {"name": f"braket.task_result.{name}", "version": "1"}


def _names_program_set(action: str) -> bool:
    """Whether a create's action says it is a program set (its schema header's name)."""
    try:
        return action_type(action) == OPENQASM_PROGRAM_SET
    except ProgramError:
        return False


def _check_program_set(spec: DeviceSpec, action: str, shots: int) -> list[SetProgram]:
    """The programs of a program set ``spec`` can run with ``shots`` in all, or the
    ValidationException saying why not: the device takes no program sets, the set is empty
    or malformed, has more executables than the device takes, or its shots are zero, not
    a multiple of its executables or over the device's total."""
    limits = spec.program_sets
    if limits is None:
        raise _invalid(
            f"Device {spec.arn} does not support action type {OPENQASM_PROGRAM_SET}; "
            "run its programs as separate quantum tasks"
        )
    try:
        programs = read_program_set(action)
    except ProgramSetError as exc:
        raise _set_invalid(exc) from exc
    if not programs:
        raise _invalid("A program set must contain at least one program")
    executables = sum(program.executables for program in programs)
    if executables > limits.max_executables:
        raise _invalid(
            f"The program set has {executables} executables; {spec.name} runs at most "
            f"{limits.max_executables} in one quantum task"
        )
    if shots == 0:
        raise _invalid("shots must be greater than 0 for a program set (no result types)")
    if shots % executables:
        raise _invalid(
            f"shots ({shots}) must be a multiple of the program set's {executables} "
            "executables: each executable runs shots / executables times"
        )
    if shots > limits.max_total_shots:
        raise _invalid(
            f"The program set's {shots} total shots exceed {spec.name}'s maximum of "
            f"{limits.max_total_shots} for a program set"
        )
    low, high = spec.shots
    if not low <= shots // executables <= high:
        raise _invalid(
            f"shots per executable must be between {low} and {high} on {spec.name}, "
            f"got {shots // executables}"
        )
    return programs


def _set_invalid(error: ProgramSetError) -> _Reject:
    """The ValidationException of programs that cannot run, with their failures."""
    return _invalid(
        str(error),
        reason="ProgramSetValidationFailed",
        programSetValidationFailures=error.failures,
    )


def _error_kind(fault: Fault) -> str:
    """The report's name of an error fault: ``error:CODE`` (Braket) or ``s3:CODE``."""
    return f"{'s3' if fault.is_s3 else 'error'}:{fault.error}"


def _invalid(message: str, **members: Any) -> _Reject:
    return _Reject("", braket_error("ValidationException", 400, message, **members))


def _json_body(request: Request, operation: str) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        raise _Reject(
            operation, braket_error("ValidationException", 400, "body is not JSON")
        ) from exc
    if not isinstance(body, dict):
        raise _Reject(operation, braket_error("ValidationException", 400, "body is not an object"))
    return body


def _reservation_arn(associations: Any) -> str | None:
    """The reservation ARN a create's ``associations`` name (None: none); ValidationException
    for anything but a list of one {arn, type: RESERVATION_TIME_WINDOW_ARN}."""
    if associations is None:
        return None
    if not isinstance(associations, list):
        raise _invalid("associations must be a list of {arn, type} objects")
    arns = []
    for i, association in enumerate(associations):
        if not isinstance(association, dict) or not isinstance(association.get("arn"), str):
            raise _invalid(f"associations[{i}] must be an object with a string arn and a type")
        kind = association.get("type")
        if kind != RESERVATION_ASSOCIATION:
            raise _invalid(
                f"associations[{i}].type must be {RESERVATION_ASSOCIATION}, got {kind!r}"
            )
        arns.append(association["arn"])
    if len(arns) > 1:
        raise _invalid(f"associations name {len(arns)} reservations; a quantum task takes one")
    return arns[0] if arns else None


def _json_string(value: Any) -> str:
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value)


def _filters(body: dict[str, Any], operation: str) -> list[dict[str, Any]]:
    filters = body.get("filters")
    if not isinstance(filters, list):
        raise _invalid(f"{operation} needs a 'filters' list")
    for f in filters:
        if (
            not isinstance(f, dict)
            or not isinstance(f.get("name"), str)
            or not isinstance(f.get("values"), list)
        ):
            raise _invalid("each filter needs a 'name' and a list of 'values'")
    return filters


_TASK_FILTERS = ("quantumTaskArn", "deviceArn", "status", "createdAt", "jobArn")


def _task_matches(doc: dict[str, Any], f: dict[str, Any]) -> bool:
    name, values, operator = f["name"], [str(v) for v in f["values"]], f.get("operator", "EQUAL")
    if name not in _TASK_FILTERS:
        raise _invalid(f"filter name {name!r} must be one of {', '.join(_TASK_FILTERS)}")
    actual = doc.get(name)
    if actual is None:
        return False
    if name == "createdAt":
        # ISO 8601 UTC strings order like the instants they name.
        actual, values = _iso_key(actual), [_iso_key(v) for v in values]
    if operator == "EQUAL":
        return actual in values
    if operator == "BETWEEN":
        if len(values) != 2:
            raise _invalid("BETWEEN needs two values")
        return values[0] <= actual <= values[1]
    if len(values) != 1:
        raise _invalid(f"{operator} needs one value")
    value = values[0]
    checks = {
        "LT": actual < value,
        "LTE": actual <= value,
        "GT": actual > value,
        "GTE": actual >= value,
    }
    if operator not in checks:
        raise _invalid(f"operator {operator!r} must be one of EQUAL, BETWEEN, LT, LTE, GT, GTE")
    return checks[operator]


def _iso_key(value: str) -> str:
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise _invalid(f"createdAt filter value {value!r} is not an ISO 8601 time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso8601(moment.astimezone(UTC))


def _paginate(rows: list[dict[str, Any]], body: dict[str, Any]) -> tuple[list[Any], dict[str, str]]:
    size = body.get("maxResults") or 100
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100:
        raise _invalid(f"maxResults must be between 1 and 100, got {size!r}")
    token = body.get("nextToken")
    try:
        start = int(token) if token else 0
    except ValueError as exc:
        raise _invalid(f"nextToken {token!r} is not one this service issued") from exc
    page = rows[start : start + size]
    more = {"nextToken": str(start + size)} if start + size < len(rows) else {}
    return page, more
