"""The emulated Braket service: where each Braket and S3 request is routed, faulted and answered.

This module owns the Braket side as the client sees it: it routes every request the
emulator does not give another side (the Braket rest-json operations CreateQuantumTask,
GetQuantumTask, CancelQuantumTask, SearchQuantumTasks, GetDevice, SearchDevices, the
tag operations and the hybrid jobs' CreateJob, GetJob, CancelJob and SearchJobs, the
account's STS, IAM, ECR and price list (``account``), a Rigetti QPU's calibrations
(``pulse``), and, under ``/s3``, the minimal S3 that serves each task's result files
once the task has ended), reads the request's region, counts the call against the
scenario's faults (drawn from the seed) and answers with those that fire before or after
the call is applied. What a call does is its collaborators': ``QuantumTasks`` (tasks),
``Devices`` (devices and their queues), ``TaskTags``, ``Reservations`` (Braket Direct),
``HybridJobs``,
``ResultFiles`` and the ``ObjectStore``, all behind this side's one lock; the call log and
the report's counts are the shared ``VendorSide``'s (``side``); the task and device
state changes go to the events queue it is given (``EventPublisher``). It must never sleep while
holding its lock, never read the wall clock (time comes from the injected ``Clock``), and
never answer with a shape botocore's braket 2019-09-01 model does not have.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.bill import SideBill
from flux_quantum.emulator.braket import s3
from flux_quantum.emulator.braket.account import (
    AwsAccount,
    account_env,
    account_operation,
    account_service,
)
from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.event_publisher import EventPublisher
from flux_quantum.emulator.braket.hybrid_jobs import HybridJobs
from flux_quantum.emulator.braket.pulse import CALIBRATIONS_PATH
from flux_quantum.emulator.braket.quantum_tasks import QuantumTasks
from flux_quantum.emulator.braket.reservations import Reservations
from flux_quantum.emulator.braket.result_files import ResultFiles
from flux_quantum.emulator.braket.scenario import (
    BRAKET_ERRORS,
    S3_ERRORS,
    Fault,
    ReservationSpec,
    Scenario,
)
from flux_quantum.emulator.braket.simulations import Simulations
from flux_quantum.emulator.braket.task_tags import TaskTags
from flux_quantum.emulator.braket.wire import BraketRefusal, braket_error, json_body
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.sqs import MessageQueue
from flux_quantum.emulator.wire import Request, Response, json_response

ACCESS_KEY = "flux-quantum-emulator"
SECRET_KEY = "flux-quantum-emulator-secret"
_REGION = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request")


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

    __slots__ = ("account", "body", "device", "operation", "s3call", "target")

    def __init__(
        self,
        operation: str,
        target: str | None = None,
        device: str | None = None,
        body: dict[str, Any] | None = None,
        s3call: s3.S3Call | None = None,
        account: str | None = None,
    ) -> None:
        self.operation = operation
        self.target = target
        self.device = device
        self.body = body or {}
        self.s3call = s3call
        self.account = account  # the account service it is for (sts, iam, ecr, prices)


class BraketService(VendorSide[_Route, Fault]):
    """The Braket side's requests answered, from any number of server threads."""

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
        self._faults = faults
        self.store = s3.ObjectStore()
        self.store.create_bucket(scenario.bucket)
        self._devices = Devices(scenario, clock, seed, self._lock)
        # Braket Direct reservations (the scenario's, then those added while running).
        self._reservations = Reservations(self._devices, seed, self._lock)
        self._tags = TaskTags(self._lock)
        self._hybrid = HybridJobs(self._devices, self.store, seed, self._lock)
        self._simulations = Simulations()
        self._account = AwsAccount(scenario)
        self._tasks = QuantumTasks(
            self._devices,
            self._reservations,
            self._tags,
            self.store,
            seed,
            self._lock,
            self._hybrid,
            self._simulations,
        )
        self._results = ResultFiles(self._devices, self.store)
        self._events: EventPublisher | None = None

    # -- events -------------------------------------------------------------------------------

    def publish_to(self, queue: MessageQueue) -> None:
        """Send this side's task and device state changes to ``queue`` from now on (as a
        site's EventBridge rule sends Braket's events to its SQS queue)."""
        self._events = EventPublisher(self._tasks, self._devices, queue, self.seed, self._lock)

    def publish_events(self) -> None:
        """Send the state changes up to now not sent yet (``EventPublisher.publish``),
        once the simulations of the tasks that ended have said how they ended."""
        if self._events is not None:
            self._tasks.settle()
            self._events.publish()

    def close(self) -> None:
        """Drop the simulations not started (the emulator stops)."""
        self._simulations.close()

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(calls by operation, fault effects by kind), with the events sent, lost and
        sent twice among the effects."""
        calls, effects = super().counts()
        if self._events is not None:
            with self._lock:
                effects.update(self._events.counts)
        return calls, effects

    # -- public views -------------------------------------------------------------------------

    def task_arns(self) -> list[str]:
        return self._tasks.arns()

    def task_timeline(self, arn: str) -> TaskTimeline:
        return self._tasks.timeline(arn)

    def task_forecast(self, arn: str) -> TaskTimeline:
        """The milestones a task will reach if nothing but the background changes its
        device's queue from now on (``DeviceQueue.forecast``)."""
        return self._tasks.forecast(arn)

    def add_reservation(self, fields: Any) -> ReservationSpec:
        """Book a reservation while running (see ``Reservations.add``)."""
        return self._reservations.add(fields)

    def reservations(self) -> list[ReservationSpec]:
        """Every reservation booked, by start."""
        return self._reservations.all()

    def bill(self) -> SideBill:
        """Every task created so far, with what Braket charges for it now; every hybrid
        job, its instance time billed so far (as the bill's sessions); every reservation
        booked, with its cost and what its tasks did so far."""
        tasks, jobs = self._tasks.bill(), self._hybrid.bill()
        with self._lock:
            reservations = self._reservations.bill(self._tasks.records(), self.clock.now())
        return SideBill(tasks, jobs, reservations)

    def job_starts(self) -> dict[str, float]:
        """When each hybrid job started, or will (emulated seconds), by ARN."""
        return self._hybrid.starts()

    def env(self, url: str) -> dict[str, str]:
        """The environment that points the Braket SDK, boto3 and botocore at this side,
        served at ``url``. ``AWS_ENDPOINT_URL_BRAKET`` applies to every region, so regional
        device ARNs and ``AwsQuantumTask(arn)`` in any region reach it too."""
        return {
            "AWS_ENDPOINT_URL_BRAKET": url,
            "BRAKET_ENDPOINT": url,
            "AWS_ENDPOINT_URL_S3": url + s3.PREFIX,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": self.scenario.region,
            "AMZN_BRAKET_OUT_S3_BUCKET": self.scenario.bucket,
            # No instance-metadata lookups: there is nothing but loopback to ask.
            "AWS_EC2_METADATA_DISABLED": "true",
            # The account around Braket: STS, IAM's jobs role, the jobs images (ECR) and
            # Braket's price list, which the SDK's cost tracker reads.
            **account_env(url),
        }

    # -- dispatch -----------------------------------------------------------------------------

    def _refused(self, request: Request, refusal: Refusal) -> _Route:
        assert isinstance(refusal, BraketRefusal)
        return _Route(refusal.operation)

    def _run(self, route: _Route, request: Request, now: float, created: list[str]) -> Response:
        region = self._region(request)
        with self._lock:
            hit = self._apply_faults(route, now)
        early = self._hit_answer(hit.delay, hit.reset, hit.error, route, request, late=False)
        if early is not None:
            return early
        try:
            response = self._answer(route, request, region, hit, created)
        except BraketRefusal as reject:
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

    def _answer(
        self, route: _Route, request: Request, region: str, hit: _FaultHit, created: list[str]
    ) -> Response:
        """Apply the call through the collaborator that owns what it names."""
        if route.s3call is not None:
            return self._s3(request, route.s3call)
        if route.account is not None:
            return self._account.answer(route.account, request)
        target = str(route.target)
        match route.operation:
            case "CreateQuantumTask":
                arn, new = self._tasks.create(route.body, region, hit.fail_task, hit.cancel_task)
                if new:
                    self._count(*(["fail_task"] if hit.fail_task is not None else []),
                                *(["cancel_task"] if hit.cancel_task else []))  # fmt: skip
                created.append(arn)
                return json_response(201, {"quantumTaskArn": arn})
            case "GetQuantumTask":
                return self._tasks.get(target, region)
            case "CreateJob":
                arn, new = self._hybrid.create(route.body, region)
                if new:
                    created.append(arn)
                return json_response(201, {"jobArn": arn})
            case "GetJob":
                return self._hybrid.get(target)
            case "CancelJob":
                return self._hybrid.cancel(target)
            case "CancelQuantumTask":
                return self._tasks.cancel(target, region)
            case "SearchQuantumTasks":
                return self._tasks.search(route.body, region)
            case "SearchJobs":
                return self._hybrid.search(route.body, region)
            case "GetDevice":
                return self._devices.get(target, region, _base_url(request))
            case "GetCalibrations":
                return self._devices.calibrations(target)
            case "SearchDevices":
                return self._devices.search(route.body, region)
            case _:
                keys = request.query.get("tagKeys", [])
                return self._tags.answer(route.operation, target, route.body, keys)

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
            return _Route(call.operation, call.target, s3call=call)
        service = account_service(request)
        if service is not None:
            return _Route(account_operation(service, request), account=service)
        method, parts = request.method, request.segments()
        if method == "GET" and request.path.startswith(CALIBRATIONS_PATH):
            name = request.path[len(CALIBRATIONS_PATH) :].removesuffix(".json")
            return _Route("GetCalibrations", name)
        head = parts[0] if parts else ""
        rest = "/".join(parts[1:])  # an ARN whose '/' the client did not encode
        if method == "POST" and parts == ["quantum-task"]:
            body = json_body(request, "CreateQuantumTask")
            device = body.get("deviceArn") if isinstance(body.get("deviceArn"), str) else None
            return _Route("CreateQuantumTask", device, device, body)
        if head == "quantum-task" and rest:
            if method == "PUT" and parts[-1] == "cancel" and len(parts) > 2:
                arn = "/".join(parts[1:-1])
                return _Route("CancelQuantumTask", arn, self._tasks.device_of(arn))
            if method == "GET":
                return _Route("GetQuantumTask", rest, self._tasks.device_of(rest))
        if method == "POST" and parts == ["job"]:
            body = json_body(request, "CreateJob")
            config = body.get("deviceConfig")
            device = config.get("device") if isinstance(config, dict) else None
            return _Route("CreateJob", None, device if isinstance(device, str) else None, body)
        if head == "job" and rest:
            if method == "PUT" and parts[-1] == "cancel" and len(parts) > 2:
                arn = "/".join(parts[1:-1])
                return _Route("CancelJob", arn, self._hybrid.device_of(arn))
            if method == "GET":
                return _Route("GetJob", rest, self._hybrid.device_of(rest))
        if method == "POST" and parts == ["jobs"]:
            return _Route("SearchJobs", body=json_body(request, "SearchJobs"))
        if method == "POST" and parts == ["quantum-tasks"]:
            return _Route("SearchQuantumTasks", body=json_body(request, "SearchQuantumTasks"))
        if method == "GET" and head == "device" and rest:
            return _Route("GetDevice", rest, rest)
        if method == "POST" and parts == ["devices"]:
            return _Route("SearchDevices", body=json_body(request, "SearchDevices"))
        if head == "tags" and rest:
            operation = {"GET": "ListTagsForResource", "POST": "TagResource"}.get(
                method, "UntagResource"
            )
            body = json_body(request, operation) if method == "POST" else {}
            return _Route(operation, rest, self._tasks.device_of(rest), body)
        raise BraketRefusal(
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

    # -- S3 -----------------------------------------------------------------------------------

    def _s3(self, request: Request, call: s3.S3Call) -> Response:
        reads = call.operation in ("GetObject", "HeadObject", "ListObjectsV2")
        if reads:
            self._tasks.settle()
        with self._lock:
            now = self.clock.now()
            if reads:
                self._results.publish(self._tasks.records(), now, self._tasks.result_of)
                self._hybrid.publish(now)
            return self.store.handle(request, call, timestamp(self.clock, now))


def _base_url(request: Request) -> str:
    """The emulator's URL as the client reached it (its Host header)."""
    host = request.headers.get("host")
    return f"http://{host}" if host else ""


def _error_kind(fault: Fault) -> str:
    """The report's name of an error fault: ``error:CODE`` (Braket) or ``s3:CODE``."""
    return f"{'s3' if fault.is_s3 else 'error'}:{fault.error}"
