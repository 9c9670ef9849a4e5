"""What Braket answers, read defensively, and what flux-quantum writes into a task: pure
data in, records out.

This module owns the reading of GetDevice (status, its reason, the queue depth, the
execution windows, via ``calibration`` the fidelities), of GetQuantumTask (state, queue
position, failure reason, reserved window) and of a task's result files (one program's
counts, a program set's per program), and what a task carries for flux-quantum: the
``clientToken`` made from the caller's token, the tags (version, token, program set
layout) and the layout of a program set. It must never call Braket or S3 (a program
set's other files are read through the ``read`` it is handed) and never trust a field:
what it cannot read is unknown, not an error, unless a result is unreadable.

Program sets: Braket runs every executable of a set for the same shots, so programs
asking for different shots run as several executables of ``gcd`` shots each
(``program_set_layout``), the layout kept in a tag of the task so that the results can
add their counts back up after a restart.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from datetime import time as dtime
from typing import Any, TypeGuard

from flux_quantum import __version__
from flux_quantum.catalog import Device
from flux_quantum.protocol.merged_tasks import Limits
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
)
from flux_quantum.vendors.braket import program_sets
from flux_quantum.vendors.braket.calibration import read_calibration
from flux_quantum.vendors.braket.sdk import sdk
from flux_quantum.vendors.errors import InvalidRequest, VendorUnavailable

RESULTS_FILENAME = "results.json"
TOKEN_MAX = 64  # CreateQuantumTask clientToken: 1..64 characters
VERSION_TAG = "flux-quantum"  # the flux-quantum version that created the task
TOKEN_TAG = "flux-quantum-token"  # the clientToken, as a tag SearchQuantumTasks shows
PROGRAM_SET_ACTION = "braket.ir.openqasm.program_set"
# The tag of a program set task that says how many executables each program runs as
# ("1.1.3.1"); absent: one each. Braket tag values: at most ``TAG_VALUE_MAX`` characters.
LAYOUT_TAG = "flux-quantum-set"
# CreateQuantumTask's association type of a Braket Direct reservation.
RESERVATION_ASSOCIATION = "RESERVATION_TIME_WINDOW_ARN"

_QUEUE_COUNT = re.compile(r"(>)?\s*([0-9]{1,12})", re.ASCII)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DEVICE_STATUSES = {
    "ONLINE": DeviceStatus.ONLINE,
    "OFFLINE": DeviceStatus.OFFLINE,
    "RETIRED": DeviceStatus.RETIRED,
}


# --- devices -------------------------------------------------------------------------


def parse_queue_count(value: object) -> tuple[int | None, bool]:
    """``(count, capped)`` from a Braket queue size or position.

    Braket sends strings: ``"6"``, ``">2000"`` (a lower bound, ``capped``), the literal
    ``"None"`` once a task runs; anything else (missing, negative, garbage) is unknown.
    """
    if isinstance(value, bool) or value is None:
        return None, False
    if isinstance(value, int):
        return (value, False) if value >= 0 else (None, False)
    match = _QUEUE_COUNT.fullmatch(str(value).strip())
    if not match:
        return None, False
    return int(match.group(2)), match.group(1) is not None


def device_queue_depth(queue_info: object) -> tuple[int | None, bool]:
    """Depth of the normal-priority quantum task queue from GetDevice's
    ``deviceQueueInfo`` (the queue a new task joins)."""
    if not isinstance(queue_info, list):
        return None, False
    for entry in queue_info:
        if (
            isinstance(entry, dict)
            and entry.get("queue") == "QUANTUM_TASKS_QUEUE"
            and entry.get("queuePriority", "Normal") == "Normal"
        ):
            return parse_queue_count(entry.get("queueSize"))
    return None, False


def status_reason(value: object) -> str | None:
    """The reason code of GetDevice's ``deviceStatusReason`` (a structure whose
    ``reason`` is MAINTENANCE, OUTSIDE_AVAILABILITY_WINDOW or RESERVATION)."""
    if isinstance(value, dict):
        value = value.get("reason")
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _window_time(text: object) -> dtime | None:
    try:
        return dtime.fromisoformat(str(text)).replace(microsecond=0, tzinfo=None)
    except ValueError:
        return None


def in_execution_window(windows: object, now: datetime) -> bool:
    """Whether ``now`` (UTC) falls in one of a device's ``executionWindows``.

    Same rules as the SDK's ``AwsDevice.is_available`` (a window ending before it starts
    runs past midnight). A device that publishes no readable window is not held back:
    its status alone decides.
    """
    if not isinstance(windows, list):
        return True
    parsed = []
    for window in windows:
        if not isinstance(window, dict):
            continue
        start = _window_time(window.get("windowStartHour"))
        end = _window_time(window.get("windowEndHour"))
        if start is not None and end is not None:
            parsed.append((str(window.get("executionDay", "Everyday")), start, end))
    if not parsed:
        return True
    now = now.astimezone(UTC)
    clock = now.time().replace(microsecond=0)
    for day, start, end in parsed:
        weekday = now.weekday()
        if clock < end < start:  # the window started yesterday and runs past midnight
            weekday = (weekday - 1) % 7
        day_ok = (
            day == "Everyday"
            or (day == "Weekdays" and weekday < 5)
            or (day in ("Weekend", "Weekends") and weekday > 4)
            or (day in _DAYS and _DAYS.index(day) == weekday)
        )
        time_ok = (start < end and start <= clock <= end) or (
            end < start and (clock >= start or clock <= end)
        )
        if day_ok and time_ok:
            return True
    return False


def device_snapshot(device: Device, data: Mapping[str, Any], t: float) -> DeviceSnapshot:
    """What GetDevice's answer says of ``device`` at ``t``: ONLINE, OFFLINE or RETIRED
    (any other status, PAUSED or something new, is OFFLINE with that status as the
    reason), the normal-priority queue depth, whether ``t`` is in an execution window
    (never when Braket says OUTSIDE_AVAILABILITY_WINDOW) and the calibration."""
    raw_status = str(data.get("deviceStatus") or "")
    reason = status_reason(data.get("deviceStatusReason"))
    status = _DEVICE_STATUSES.get(raw_status, DeviceStatus.OFFLINE)
    if raw_status not in _DEVICE_STATUSES:
        reason = raw_status or "no status"  # PAUSED, or something new
    depth, capped = device_queue_depth(data.get("deviceQueueInfo"))
    capabilities = data.get("deviceCapabilities")
    if isinstance(capabilities, str):
        try:
            capabilities = json.loads(capabilities)
        except ValueError:
            capabilities = {}
    service = capabilities.get("service", {}) if isinstance(capabilities, dict) else {}
    windows = service.get("executionWindows") if isinstance(service, dict) else None
    in_window = in_execution_window(windows, datetime.fromtimestamp(t, UTC))
    if reason == "OUTSIDE_AVAILABILITY_WINDOW":
        in_window = False
    calibration = read_calibration(capabilities)
    return DeviceSnapshot(
        device=device.name,
        status=status,
        reason=str(reason) if reason else None,
        queue_depth=depth,
        queue_capped=capped,
        price=device.price,
        in_window=in_window,
        t=t,
        calibration=calibration,
    )


def arn_region(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[3] or None if len(parts) > 3 else None


# --- tasks ---------------------------------------------------------------------------


def reservation_of(data: Mapping[str, Any]) -> str | None:
    """The reservation ARN a GetQuantumTask answer says the task runs in, or None."""
    associations = data.get("associations")
    for entry in associations if isinstance(associations, list) else ():
        if isinstance(entry, Mapping) and entry.get("type") == RESERVATION_ASSOCIATION:
            arn = entry.get("arn")
            if isinstance(arn, str) and arn:
                return arn
    return None


def task_snapshot(task: TaskRef, data: Mapping[str, Any], t: float, *, vendor: str) -> TaskSnapshot:
    """What GetQuantumTask's answer says of ``task`` at ``t``: its state, its place while
    CREATED or QUEUED, and why (Braket's failure reason, else the queue's message while
    it has not ended). A status flux-quantum does not know is ``VendorUnavailable``:
    retryable, so the task keeps being polled."""
    raw = str(data.get("status") or "")
    try:
        state = TaskState(raw)
    except ValueError:
        raise VendorUnavailable(
            f"{vendor} GetQuantumTask for {task.task_id} returned an unknown status "
            f"{raw!r}; flux-quantum keeps polling",
            vendor=vendor,
            vendor_code="UnknownStatus",
            operation="GetQuantumTask",
        ) from None
    queue = data.get("queueInfo")
    queue = queue if isinstance(queue, dict) else {}
    position, capped = None, False
    if state in (TaskState.CREATED, TaskState.QUEUED):
        position, capped = parse_queue_count(queue.get("position"))
    message = data.get("failureReason") or None
    if message is None and state not in (
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.CANCELLED,
    ):
        # Once ended, the queue's message only says no position is shown: not why.
        message = queue.get("message") or None
    return TaskSnapshot(
        task=task,
        state=state,
        position=position,
        position_capped=capped,
        message=str(message) if message else None,
        t=t,
    )


def client_token(token: str) -> str:
    """The caller's idempotency token as a Braket clientToken (1..64 characters).

    Longer tokens are replaced by their SHA-256 (64 hex digits): still deterministic, so
    a retry with the same caller token stays idempotent.
    """
    if not token:
        raise ValueError("an idempotency token is required")
    if len(token) <= TOKEN_MAX:
        return token
    return hashlib.sha256(token.encode()).hexdigest()


def task_tags(token: str) -> dict[str, str]:
    """The tags of a task created with ``token``: the flux-quantum version, and the
    clientToken, so that a search finds the task by it without creating one (which the
    clientToken alone cannot)."""
    return {VERSION_TAG: __version__, TOKEN_TAG: client_token(token)}


# --- program sets --------------------------------------------------------------------


def program_set_layout(shots: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """``(shots per executable, executables per program)`` for one Braket program set of
    programs asking for ``shots`` each.

    Braket runs every executable of a set for the same shots (the task's shots divided by
    its executables). So with ``g`` the greatest common divisor of ``shots``, program ``i``
    runs as ``shots[i] // g`` executables of ``g`` shots whose counts add up to its own:
    equal shots make one executable each; 100 and 300 make 1 and 3 of 100. The task's
    shots, and its bill, stay the sum of ``shots``. ValueError for no shots or shots < 1.
    """
    if not shots or any(s < 1 for s in shots):
        raise ValueError(f"shots must be one or more integers >= 1, got {list(shots)!r}")
    per = math.gcd(*shots)
    return per, tuple(s // per for s in shots)


def encode_layout(executables: Sequence[int]) -> str:
    """The ``LAYOUT_TAG`` value of a program set: executables per program, dot-separated."""
    return ".".join(str(n) for n in executables)


def decode_layout(value: object) -> tuple[int, ...] | None:
    """Executables per program from a ``LAYOUT_TAG`` value; None when it is not one."""
    if not isinstance(value, str) or not re.fullmatch(
        r"[1-9][0-9]{0,5}(\.[1-9][0-9]{0,5})*", value
    ):
        return None
    return tuple(int(n) for n in value.split("."))


def is_program_set(data: Mapping[str, Any]) -> bool:
    """Whether a GetQuantumTask answer is of a program set (its actionMetadata)."""
    metadata = data.get("actionMetadata")
    return isinstance(metadata, Mapping) and metadata.get("actionType") == PROGRAM_SET_ACTION


def program_set_limits(capabilities: Mapping[str, object]) -> Limits | None:
    """What one program set on a device may hold as it advertises it (GetDevice's
    ``deviceCapabilities``, parsed): None when it takes no program sets."""
    action = capabilities.get("action")
    limits = action.get(PROGRAM_SET_ACTION) if isinstance(action, Mapping) else None
    if not isinstance(limits, Mapping):
        return None
    service = capabilities.get("service")
    shots = service.get("shotsRange") if isinstance(service, Mapping) else None
    executables = limits.get("maximumExecutables")
    total = limits.get("maximumTotalShots")
    if not (
        _count(executables) and _count(total) and isinstance(shots, Sequence) and len(shots) == 2
    ):
        return None
    fewest, most = shots
    if not (_count(fewest, low=0) and _count(most, low=0)):
        return None
    return program_sets(executables, total, (fewest, most))


def _count(value: object, low: int = 1) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


# --- results -------------------------------------------------------------------------


def execution_seconds(result: object) -> float | None:
    """A managed simulator's run time from its results.json
    (``additionalMetadata.simulatorMetadata.executionDuration``, milliseconds): what
    Braket bills, with its 3 s minimum applied by the catalog's price model. None for a
    QPU (billed per task and shot) or when missing."""
    metadata = result.get("additionalMetadata") if isinstance(result, dict) else None
    simulator = metadata.get("simulatorMetadata") if isinstance(metadata, dict) else None
    duration = simulator.get("executionDuration") if isinstance(simulator, dict) else None
    if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
        return None
    return duration / 1000.0


def gate_model_result(task: TaskRef, body: str, *, vendor: str) -> TaskResult:
    """One program's result from its ``results.json`` text, read with the SDK's
    ``GateModelQuantumTaskResult``; ``InvalidRequest`` when the SDK cannot read it."""
    GateModelQuantumTaskResult = sdk("braket.tasks").GateModelQuantumTaskResult

    try:
        parsed = GateModelQuantumTaskResult.from_string(body)
        counts = {str(k): int(v) for k, v in parsed.measurement_counts.items()}
    except Exception as exc:  # the SDK raises assorted pydantic/value errors
        raise InvalidRequest(
            f"{vendor} result of {task.task_id} could not be read by the SDK: {exc}",
            vendor=vendor,
            vendor_code="UnreadableResult",
            operation="GetObject",
        ) from None
    return TaskResult(task=task, counts=counts, raw=json.loads(body))


def program_set_document(
    read: Callable[[object, str], str], bucket: object, directory: object
) -> dict[str, Any]:
    """A program set's ``results.json`` with every file it names inlined: Braket's names
    the others relative to its ``s3Location``; ``read(bucket, key)`` gives one file's
    text. ValueError, TypeError or AttributeError when the files are not Braket's."""
    document = json.loads(read(bucket, f"{directory}/{RESULTS_FILENAME}"))
    location = document.get("s3Location")
    if location:
        where, prefix = location

        def fetch(path: str) -> Any:
            return json.loads(read(where, f"{prefix}/{path}"))

        if isinstance(document.get("taskMetadata"), str):
            document["taskMetadata"] = fetch(document["taskMetadata"])
        programs = []
        for entry in document.get("programResults") or []:
            if isinstance(entry, str):
                folder = entry.removesuffix(f"/{RESULTS_FILENAME}")
                entry = fetch(entry)
                if isinstance(entry.get("source"), str):
                    entry["source"] = fetch(f"{folder}/{entry['source']}")
                entry["executableResults"] = [
                    fetch(f"{folder}/{e}") if isinstance(e, str) else e
                    for e in entry.get("executableResults") or []
                ]
            programs.append(entry)
        document["programResults"] = programs
        document["s3Location"] = None
    return document


def read_program_set(task: TaskRef, document: Mapping[str, Any], *, vendor: str) -> Any:
    """The SDK's ``ProgramSetQuantumTaskResult`` of an inlined program set document."""
    BraketSchemaBase = sdk("braket.schema_common").BraketSchemaBase
    ProgramSetQuantumTaskResult = sdk("braket.tasks").ProgramSetQuantumTaskResult

    try:
        schema = BraketSchemaBase.parse_raw_schema(json.dumps(document))
        return ProgramSetQuantumTaskResult.from_object(schema)
    except Exception as exc:  # the SDK raises assorted pydantic/value errors
        raise unreadable_set(task, f"the SDK cannot read it: {exc}", vendor=vendor) from None


def program_results(task: TaskRef, parsed: Any, tags: object, *, vendor: str) -> list[TaskResult]:
    """One result per program ``submit_set`` was given, in order, from the SDK's
    ``ProgramSetQuantumTaskResult`` and the task's tags: the counts of the program's
    executables (``LAYOUT_TAG``) added up, its shots as if it had been its own task.
    ``raw`` is that program's own view: the task's metadata with the program's shots,
    and where it sat in the set. ``InvalidRequest`` when the executables do not match
    the layout, or when a program's executable failed (naming it and Braket's reason)."""
    tags = tags if isinstance(tags, Mapping) else {}
    entries = list(parsed.entries)
    layout = decode_layout(tags.get(LAYOUT_TAG)) or (1,) * len(entries)
    if sum(layout) != len(entries) or any(len(e.entries) != 1 for e in entries):
        raise unreadable_set(
            task,
            f"its {len(entries)} programs do not match the layout {encode_layout(layout)} "
            "submit_set gave it (one executable each)",
            vendor=vendor,
        )
    metadata = parsed.task_metadata
    per = metadata.requestedShots // max(1, parsed.num_executables)
    out = []
    start = 0
    for index, n in enumerate(layout):
        group = [entry.entries[0] for entry in entries[start : start + n]]
        start += n
        counts: dict[str, int] = {}
        for executable in group:
            if not hasattr(executable, "counts"):  # a ProgramSetExecutableFailure
                reason = executable.failureMetadata.failureReason
                raise InvalidRequest(
                    f"{vendor} task {task.task_id}: program {index} failed: {reason}",
                    vendor=vendor,
                    vendor_code="ProgramFailed",
                    operation="GetObject",
                )
            for bits, count in executable.counts.items():
                counts[str(bits)] = counts.get(str(bits), 0) + int(count)
        raw = {
            "taskMetadata": {
                "id": metadata.id,
                "deviceId": metadata.deviceId,
                "shots": sum(counts.values()),
                "createdAt": metadata.createdAt,
                "endedAt": metadata.endedAt,
                "status": metadata.status,
            },
            "programSet": {
                "program": index,
                "programs": len(layout),
                "executables": n,
                "shotsPerExecutable": per,
                "requestedShots": metadata.requestedShots,
            },
        }
        out.append(TaskResult(task=task, counts=counts, raw=raw))
    return out


def unreadable_set(task: TaskRef, problem: str, *, vendor: str) -> InvalidRequest:
    """The error of a program set result flux-quantum cannot read, saying why."""
    return InvalidRequest(
        f"{vendor} result of program set {task.task_id}: {problem}",
        vendor=vendor,
        vendor_code="UnreadableResult",
        operation="GetObject",
    )
