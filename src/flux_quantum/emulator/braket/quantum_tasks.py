"""The emulated Braket quantum tasks: CreateQuantumTask, GetQuantumTask, CancelQuantumTask
and SearchQuantumTasks, and what Braket bills for each task.

This module owns every quantum task created (its ``TaskRecord``, by ARN, and the ARN of
each clientToken, ids drawn from the seed): a create checked (its fields, device and
region, availability, reservation, shots, program or program set as the service checks
it; a ``jobToken`` of a running hybrid job on the device puts it ahead of the public
queue, ``HybridJobs``), submitted to its device's queue and answered, its program then
run by ``Simulations`` in a worker process; a repeated clientToken answered with its task
(or ConflictException); a task described as GetQuantumTask and SearchQuantumTasks show it
(status, queue position, times), once the simulation of a task that ended has said how
(``settle``: a failed simulation fails its task), cancelled, and billed. Its progress is
its device's ``DeviceQueue``'s, its tags ``TaskTags``', the reservations
``Reservations``'. It must never sleep, wait or simulate holding the side's lock, and
never read the wall clock."""

from __future__ import annotations

import functools
import json
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from flux_quantum.emulator.bill import BilledTask, braket_charge
from flux_quantum.emulator.braket import search
from flux_quantum.emulator.braket.capabilities import requires_all_measured
from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.hybrid_jobs import HybridJobs
from flux_quantum.emulator.braket.program_sets import (
    check_program_set,
    names_program_set,
    set_invalid,
)
from flux_quantum.emulator.braket.reservations import Reservations, reservation_arn
from flux_quantum.emulator.braket.s3 import ObjectStore
from flux_quantum.emulator.braket.scenario import BRAKET_ERRORS
from flux_quantum.emulator.braket.simulations import Simulations
from flux_quantum.emulator.braket.task_record import TaskRecord
from flux_quantum.emulator.braket.task_tags import TaskTags
from flux_quantum.emulator.braket.wire import BraketRefusal, braket_error, invalid, iso8601
from flux_quantum.emulator.clock import timestamp
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.simulate import (
    OPENQASM_PROGRAM_SET,
    ProgramError,
    ProgramSetError,
    SetProgram,
    SimulationRequest,
    action_type,
    check,
    check_programs,
    run_checked,
    run_program_set,
)
from flux_quantum.emulator.wire import Response, json_response

TASK_POSITION_CAP = 2000
_BAD_PREFIX = re.compile(r"[{}\[\]<>\\|^~`%#\"\x00-\x1f\x7f-\xff]|\.\./|\./")
_SUMMARY = (
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


class QuantumTasks:
    """Every quantum task created, behind the side's lock."""

    def __init__(
        self,
        devices: Devices,
        reservations: Reservations,
        tags: TaskTags,
        store: ObjectStore,
        seed: int,
        lock: threading.Lock,
        hybrid: HybridJobs,
        simulations: Simulations,
    ) -> None:
        self.scenario = devices.scenario
        self._hybrid = hybrid
        self.clock = devices.clock
        self._devices = devices
        self._reservations = reservations
        self._tags = tags
        self._store = store
        self._lock = lock
        self._simulations = simulations
        self._tasks: dict[str, TaskRecord] = {}
        self._tokens: dict[str, str] = {}
        self._ids = random.Random(f"{seed}:task-ids")

    # -- simulations --------------------------------------------------------------------------

    def settle(self, arns: Iterable[str] | None = None) -> None:
        """Wait for the simulations of the tasks (``arns``, default all) that have ended in
        their device's queue, then make those whose program failed end FAILED: a reader
        never sees COMPLETED before the result exists. Called without the lock."""
        wanted = set(self._simulations.pending() if arns is None else arns)
        with self._lock:
            now = self.clock.now()
            due = [
                arn
                for arn in wanted
                if arn in self._tasks
                and self._devices.queue(self._tasks[arn].device_arn).progress(arn, now).status
                in ("COMPLETED", "FAILED")
            ]
        self._simulations.wait(due)
        finished = self._simulations.finished()
        with self._lock:
            for arn, failure in finished:
                if failure is not None and arn in self._tasks:
                    self._devices.queue(self._tasks[arn].device_arn).fail(arn)

    def result_of(self, arn: str) -> dict[str, Any] | None:
        """The task's simulated result document (None: not simulated, or it failed)."""
        return self._simulations.result(arn)

    # -- views --------------------------------------------------------------------------------

    def arns(self) -> list[str]:
        with self._lock:
            return list(self._tasks)

    def records(self) -> list[TaskRecord]:
        """Every task, oldest first (lock held)."""
        return list(self._tasks.values())

    def timeline(self, arn: str) -> TaskTimeline:
        with self._lock:
            task = self._tasks[arn]
            return self._devices.queue(task.device_arn).timeline(arn, self.clock.now())

    def forecast(self, arn: str) -> TaskTimeline:
        """The milestones a task will reach if nothing but the background changes its
        device's queue from now on (``DeviceQueue.forecast``)."""
        with self._lock:
            task = self._tasks[arn]
            return self._devices.queue(task.device_arn).forecast(arn, self.clock.now())

    def device_of(self, arn: str) -> str | None:
        with self._lock:
            task = self._tasks.get(arn)
        return task.device_arn if task else None

    def bill(self) -> list[BilledTask]:
        """Every task created so far, with what Braket charges for it now (see ``bill``);
        a task in a reservation costs nothing (the reservation is billed instead)."""
        self.settle()
        with self._lock:
            now = self.clock.now()
            rows = []
            for task in self._tasks.values():
                progress = self._devices.queue(task.device_arn).progress(task.arn, now)
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

    # -- CreateQuantumTask --------------------------------------------------------------------

    def create(
        self, body: dict[str, Any], region: str, fail_task: str | None, cancel_task: bool
    ) -> tuple[str, bool]:
        """The ARN of the task ``body`` asks for, and whether it is new (False: its
        clientToken already made it); ``fail_task`` and ``cancel_task`` are the faults
        that fired on the call (the task will fail with that reason, or Braket cancels it
        when it would start)."""
        for name in ("clientToken", "deviceArn", "outputS3Bucket", "outputS3KeyPrefix", "action"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise invalid(f"{name} is required and must be a non-empty string")
        shots = body.get("shots")
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise invalid(f"shots must be an integer >= 0, got {shots!r}")
        if _BAD_PREFIX.search(body["outputS3KeyPrefix"]):
            raise invalid("outputS3KeyPrefix contains a character or sequence S3 does not allow")
        reservation = reservation_arn(body.get("associations"))
        token, device_arn = body["clientToken"], body["deviceArn"]
        with self._lock:
            existing = self._existing(token, body)
            if existing is not None:
                return existing, False
            spec = self._devices.for_region(device_arn, region, for_create=True)
            if reservation is not None:
                self._reservations.check(reservation, spec, self.clock.now())
            queue = self._devices.queue(spec.arn)
            refusal = queue.availability.accepts_tasks_at(self.clock.now())
        if refusal is not None:
            status = queue.availability.status_at(self.clock.now())
            raise BraketRefusal(
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
            measure_all=requires_all_measured(spec),
        )
        programs: list[SetProgram] = []
        if names_program_set(body["action"]):
            programs = check_program_set(spec, body["action"], shots)
            executables = sum(program.executables for program in programs)
            per_executable = shots // executables
            try:
                readable = check_programs(programs, request)
            except ProgramSetError as exc:
                raise set_invalid(exc) from exc
            kind = OPENQASM_PROGRAM_SET
            run: Callable[[], dict[str, Any]] = functools.partial(
                _run_set, programs, readable, per_executable, request
            )
        else:
            low, high = spec.shots
            if not low <= shots <= high:
                raise invalid(f"shots must be between {low} and {high} on {spec.name}, got {shots}")
            try:
                kind = action_type(body["action"])
                checked = check(request)
            except ProgramError as exc:
                raise invalid(str(exc)) from exc
            run = functools.partial(run_checked, checked)
        with self._lock:
            existing = self._existing(token, body)
            if existing is not None:
                return existing, False
            now = self.clock.now()
            if reservation is not None:  # its window may have ended since the check
                self._reservations.check(reservation, spec, now)
            job_token = body.get("jobToken") if isinstance(body.get("jobToken"), str) else None
            job = self._hybrid.priority(job_token, spec.arn, now)
            task_id = str(uuid.UUID(int=self._ids.getrandbits(128), version=4))
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
                failure_reason=fail_task,
                associations=tuple(dict(a) for a in body.get("associations") or ()),
                reservation=reservation,
                programs=len(programs),
                executables=sum(program.executables for program in programs),
                job_arn=job,
            )
            self._devices.queue(spec.arn).submit(
                arn,
                now,
                shots,
                fails=fail_task is not None,
                vendor_cancels=cancel_task,
                window=reservation,
                priority=job is not None,
            )
            if job is not None:
                self._hybrid.rode(job, arn)
            self._tasks[arn] = record
            # The service answers the create, then simulates: the task's program runs in
            # a simulation worker while it waits in its queue (``settle``).
            self._simulations.start(arn, run)
            self._tokens[token] = arn
            self._tags.add(arn, body.get("tags"))
            self._store.create_bucket(record.bucket)
        return arn, True

    def _existing(self, token: str, body: dict[str, Any]) -> str | None:
        """The task a repeated clientToken made (lock held), or None for a new token."""
        arn = self._tokens.get(token)
        if arn is None:
            return None
        if not self._tasks[arn].same_request(body):
            raise BraketRefusal(
                "CreateQuantumTask",
                braket_error(
                    "ConflictException",
                    409,
                    f"clientToken {token} was already used for a different request ({arn})",
                ),
            )
        return arn

    # -- GetQuantumTask / CancelQuantumTask ---------------------------------------------------

    def _task(self, arn: str, region: str) -> TaskRecord:
        task = self._tasks.get(arn)
        if task is None or (self.scenario.strict_regions and task.region != region):
            raise BraketRefusal(
                "GetQuantumTask",
                braket_error("ResourceNotFoundException", 404, f"Quantum task {arn} not found"),
            )
        return task

    def get(self, arn: str, region: str) -> Response:
        self.settle([arn])
        with self._lock:
            task = self._task(arn, region)
            return json_response(200, self._describe(task, self.clock.now()))

    def _describe(self, task: TaskRecord, now: float) -> dict[str, Any]:
        progress = self._devices.queue(task.device_arn).progress(task.arn, now)
        if progress.position is not None:
            position = (
                str(progress.position)
                if progress.position <= TASK_POSITION_CAP
                else f">{TASK_POSITION_CAP}"
            )
            queue_info: dict[str, str] = {
                "queue": "QUANTUM_TASKS_QUEUE",
                "position": position,
                "queuePriority": "Priority" if task.job_arn else "Normal",
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
            "tags": self._tags.of(task.arn),
            "queueInfo": queue_info,
            "actionMetadata": {"actionType": task.action_type},
        }
        if task.programs:
            doc["actionMetadata"]["programCount"] = task.programs
            doc["actionMetadata"]["executableCount"] = task.executables
        if progress.ended_at is not None:
            doc["endedAt"] = iso8601(timestamp(self.clock, progress.ended_at))
        if progress.status == "FAILED":
            doc["failureReason"] = (
                task.failure_reason or self._simulations.failure(task.arn) or "Task failed"
            )
        if progress.status == "COMPLETED":
            doc["numSuccessfulShots"] = task.shots
        if task.associations:
            doc["associations"] = [dict(a) for a in task.associations]
        if task.job_arn:
            doc["jobArn"] = task.job_arn
        return doc

    def cancel(self, arn: str, region: str) -> Response:
        self.settle([arn])
        with self._lock:
            task = self._task(arn, region)
            now = self.clock.now()
            queue = self._devices.queue(task.device_arn)
            progress = queue.progress(task.arn, now)
            if progress.status in ("COMPLETED", "FAILED"):
                raise BraketRefusal(
                    "CancelQuantumTask",
                    braket_error(
                        "ConflictException",
                        409,
                        # Braket's own words (the SDK's integration suite matches them).
                        f"Amazon Braket cannot cancel a quantum task in the {progress.status} "
                        f"status ({task.arn})",
                    ),
                )
            status = queue.cancel(task.arn, now)
        return json_response(200, {"quantumTaskArn": task.arn, "cancellationStatus": status})

    # -- SearchQuantumTasks -------------------------------------------------------------------

    def search(self, body: dict[str, Any], region: str) -> Response:
        filters = search.filters(body, "SearchQuantumTasks")
        self.settle()
        with self._lock:
            now = self.clock.now()
            rows = []
            for task in self._tasks.values():
                if self.scenario.strict_regions and task.region != region:
                    continue
                doc = self._describe(task, now)
                if all(search.task_matches(doc, f) for f in filters):
                    rows.append({k: doc[k] for k in _SUMMARY if k in doc})
        page, token = search.paginate(rows, body)
        return json_response(200, {"quantumTasks": page, **token})


def _json_string(value: Any) -> str:
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value)


def _run_set(
    programs: list[SetProgram],
    readable: list[SetProgram],
    per_executable: int,
    request: SimulationRequest,
) -> dict[str, Any]:
    """A program set's simulation (``readable``: its programs as the simulator reads
    them): what its result files are written from (``programs``, as sent)."""
    try:
        runs = run_program_set(readable, per_executable, request)
    except ProgramSetError as exc:
        raise ProgramError(str(exc)) from exc
    return {
        "programs": [program.document() for program in programs],
        "runs": runs,
        "shotsPerExecutable": per_executable,
    }
