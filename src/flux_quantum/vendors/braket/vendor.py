"""``BraketVendor``: Amazon Braket behind the vendor interface, on amazon-braket-sdk and boto3.

This module owns every call flux-quantum makes to Braket (GetDevice, CreateQuantumTask,
GetQuantumTask, SearchQuantumTasks, CancelQuantumTask and the S3 reads of a task's
results) and what the vendor keeps between calls (one boto3 session, a client per service
and region, an ``AwsSession`` per region); what comes back is read in ``parsing``, its
errors translated in ``errors``, the clients configured from ``settings``. It never
writes HTTP by hand, never blocks without a timeout, never retries outside its one
``RetryBudget`` and never changes ``os.environ``.

Decisions worth knowing:

- Retries: botocore clients are built with ``total_max_attempts=1`` and the SDK's own
  backoff (``AwsSession.get_quantum_task`` retries throttling three times with real
  sleeps) is bypassed by calling the boto3 Braket client directly for reads, so the only
  retries are ours, with the injected clock and sleep.
- Idempotency: CreateQuantumTask goes through ``AwsSession.create_quantum_task`` (which
  also honours hybrid-job tokens and Braket Direct reservations) with
  ``clientToken`` = the caller's token, so a retried create returns the same task. The
  token rides as a tag too (``flux-quantum-token``): ``lookup_task`` finds the task by it
  (SearchQuantumTasks on the device since the create), never by creating one.
- Endpoints: with no override the SDK's usual resolution applies
  (``AWS_ENDPOINT_URL_BRAKET``/``AWS_ENDPOINT_URL_S3``, profiles, real AWS). An explicit
  ``endpoint_url``/``s3_endpoint_url`` is handed to each boto3 client, which beats the
  environment, so one process can talk to real Braket and to the emulator at once.
  ``AwsQuantumTask(arn)``/``AwsDevice`` are not used: they copy sessions and lose such
  clients.
- Sessions: with ``hybrid_role_arn`` set, a loop's session is a Braket hybrid job
  (``BraketHybridJobs``): its tasks carry the job's token and run ahead of the public
  queue; without it, no sessions, as before.
- Events: with ``events_queue`` set, ``event_source`` is the site's queue of Braket's
  task events (``BraketEventQueue``), read through an SQS client built like the others
  (same session, one attempt, the ``AWS_ENDPOINT_URL_SQS`` resolution or
  ``sqs_endpoint_url``), in the queue's own region.
- Heavy SDK modules (``braket.aws`` takes seconds to import) load only when a task is
  created or a result is read, so ``flux quantum backends`` stays quick.
- Program sets (``submit_set``/``results``): the SDK's ``ProgramSet`` of OpenQASM
  programs, created like any task (same AwsSession path, same clientToken idempotency) and
  read with the SDK's ``ProgramSetQuantumTaskResult``, its files fetched through our own S3
  client (the SDK's reader builds a default one). Programs asking for different shots
  run as several executables each, the layout kept in a tag (``parsing``).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.exceptions import ClientError

from flux_quantum.catalog import DEFAULT_REGION, Device
from flux_quantum.vendors.base import (
    CatalogVendor,
    DeviceSnapshot,
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    VendorSession,
)
from flux_quantum.vendors.braket import TAG_VALUE_MAX, VENDOR
from flux_quantum.vendors.braket.errors import TRANSLATED, name_first_failure
from flux_quantum.vendors.braket.event_queue import BraketEventQueue
from flux_quantum.vendors.braket.hybrid_jobs import BraketHybridJobs
from flux_quantum.vendors.braket.parsing import (
    LAYOUT_TAG,
    RESERVATION_ASSOCIATION,
    RESULTS_FILENAME,
    TOKEN_TAG,
    arn_region,
    client_token,
    device_snapshot,
    encode_layout,
    execution_seconds,
    gate_model_result,
    is_program_set,
    program_results,
    program_set_document,
    program_set_layout,
    read_program_set,
    task_snapshot,
    task_tags,
    unreadable_set,
)
from flux_quantum.vendors.braket.sdk import sdk
from flux_quantum.vendors.braket.settings import (
    BotoService,
    BraketSettings,
    boto_session,
    client_config,
    queue_region,
)
from flux_quantum.vendors.errors import (
    Conflict,
    DeviceOffline,
    DeviceRetired,
    InvalidRequest,
    VendorError,
)

LOOKUP_SKEW = 300.0  # seconds before ``since`` a lookup searches from (clock skew)
LOOKUP_PAGES = 50  # SearchQuantumTasks pages (100 tasks each) a lookup reads at most


class BraketVendor(CatalogVendor[BraketSettings]):
    """Amazon Braket devices and tasks through the SDK's boto3 Braket client."""

    descriptor = VENDOR
    settings_type = BraketSettings
    timeout_settings = ("connect_timeout", "read_timeout")
    translated = TRANSLATED

    def __init__(self, settings: BraketSettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self._devices_by_arn = {d.id: d for d in self._devices.values()}
        self._lock = threading.Lock()
        self._boto_session: boto3.session.Session | None = None
        self._clients: dict[tuple[str, str], Any] = {}
        self._aws_sessions: dict[str, Any] = {}
        self._events: BraketEventQueue | None = None
        # A loop's session: a hybrid job whose token puts its tasks ahead of the queue.
        self.hybrid = BraketHybridJobs(
            self.settings,
            lambda: self.settings.results_bucket(self._environ),
            self._client,
            self._call,
            vendor=self.name,
            clock=self._clock,
            sleep=self._sleep,
        )

    # -- plumbing

    def _region_of(self, device: Device | None = None, arn: str | None = None) -> str:
        if device is not None:
            return device.region
        from_arn = arn_region(arn) if arn else None
        return from_arn or self.settings.region or DEFAULT_REGION

    def _client(self, service: BotoService, region: str) -> Any:
        """The boto3 client of ``service`` in ``region``, built once.

        One boto3 session serves every region, so service models load once; S3 is only
        built when a result is read (its model is large).
        """
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                if self._boto_session is None:
                    self._boto_session = boto_session(self.settings)
                endpoint, config = client_config(self.settings, service)
                client = self._boto_session.client(
                    service, region_name=region, endpoint_url=endpoint, config=config
                )
                self._clients[(service, region)] = client
            return client

    def _braket(self, region: str) -> Any:
        return self._client("braket", region)

    def _device_name(self, arn: str) -> str:
        device = self._devices_by_arn.get(arn)
        return device.name if device else arn

    # -- the interface

    def probe(self, device: Device) -> DeviceSnapshot:
        braket = self._braket(device.region)
        try:
            data = self._call(
                "GetDevice", device.name, lambda: braket.get_device(deviceArn=device.id)
            )
        except VendorError as exc:
            return self._unreachable(device, exc)
        return device_snapshot(device, data, self._clock())

    def _unreachable(self, device: Device, exc: VendorError) -> DeviceSnapshot:
        if isinstance(exc, DeviceRetired):
            status, reason = DeviceStatus.RETIRED, None
        elif isinstance(exc, DeviceOffline):
            status, reason = DeviceStatus.OFFLINE, exc.vendor_code
        else:
            status = DeviceStatus.UNREACHABLE
            attempts = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
            reason = f"{exc.vendor_code}{attempts}"
        return DeviceSnapshot(
            device=device.name, status=status, reason=reason, price=device.price, t=self._clock()
        )

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        return self._submit(device, program_text, shots, token, reservation=reservation)

    def _submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
        job_token: str | None = None,
    ) -> TaskRef:
        """CreateQuantumTask of one program; ``job_token``: a hybrid job's, ahead of the
        public queue."""
        program = sdk("braket.ir.openqasm").Program
        request = self._create_request(
            device, token, shots, program(source=program_text).json(), reservation
        )
        if job_token:
            request["jobToken"] = job_token
        session = self._aws_session(device.region)
        arn = self._call(
            "CreateQuantumTask", device.name, lambda: session.create_quantum_task(**request)
        )
        return TaskRef(
            vendor=self.name, device=device.name, task_id=arn, token=request["clientToken"]
        )

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """One Braket program set of ``programs`` (OpenQASM text, shots): the SDK's
        ``ProgramSet``, each program as ``program_set_layout`` says, created like
        ``submit``. Braket's ValidationException (too many executables or shots, a device
        without program sets, a program that does not compile) is ``InvalidRequest``,
        naming the first failing program when Braket says which."""
        shots = []
        for index, entry in enumerate(programs):
            text, count = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, None)
            if not isinstance(text, str) or not text.strip():
                raise self._invalid_set(device, f"programs[{index}] must be (OpenQASM text, shots)")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise self._invalid_set(
                    device, f"programs[{index}] shots must be an integer >= 1, got {count!r}"
                )
            shots.append(count)
        if not shots:
            raise self._invalid_set(device, "programs is empty: give at least one (text, shots)")
        per, layout = program_set_layout(shots)
        ProgramSet = sdk("braket.program_sets").ProgramSet

        entries = [text for (text, _), n in zip(programs, layout, strict=True) for _ in range(n)]
        program_set = ProgramSet(entries, shots_per_executable=per)
        action = program_set.to_ir().json()
        request = self._create_request(device, token, program_set.total_shots, action, reservation)
        if any(n > 1 for n in layout):
            tag = encode_layout(layout)
            if len(tag) > TAG_VALUE_MAX:
                raise self._invalid_set(
                    device,
                    f"{len(shots)} programs of unequal shots need a layout longer than a "
                    "Braket tag holds; give them equal shots or merge fewer",
                )
            request["tags"][LAYOUT_TAG] = tag
        session = self._aws_session(device.region)

        def create() -> str:
            try:
                return session.create_quantum_task(**request)
            except ClientError as exc:
                name_first_failure(exc)
                raise

        arn = self._call("CreateQuantumTask", device.name, create)
        return TaskRef(
            vendor=self.name, device=device.name, task_id=arn, token=request["clientToken"]
        )

    def _invalid_set(self, device: Device, problem: str) -> InvalidRequest:
        return InvalidRequest(
            f"{self.name} program set for {device.name}: {problem}",
            vendor=self.name,
            vendor_code="InvalidProgramSet",
            operation="CreateQuantumTask",
        )

    def _create_request(
        self, device: Device, token: str, shots: int, action: str, reservation: str | None
    ) -> dict[str, Any]:
        """The CreateQuantumTask request of ``action`` on ``device``."""
        bucket = self.settings.results_bucket(self._environ)
        if not bucket:
            raise InvalidRequest(
                f"{self.name} CreateQuantumTask for {device.name}: no results bucket; set "
                f"vendors.{self.name}.s3_bucket in the catalog or AMZN_BRAKET_OUT_S3_BUCKET",
                vendor=self.name,
                vendor_code="NoResultsBucket",
                operation="CreateQuantumTask",
            )
        request: dict[str, Any] = {
            "clientToken": client_token(token),
            "deviceArn": device.id,
            "shots": shots,
            "action": action,
            "outputS3Bucket": bucket,
            "outputS3KeyPrefix": self.settings.s3_prefix,
            # The token as a tag as well, for ``lookup_task``.
            "tags": task_tags(token),
        }
        if reservation:
            # What AwsQuantumTask.create(reservation_arn=...) sends: the task waits QUEUED
            # for the window and runs in it, outside the public queue.
            request["associations"] = [{"arn": reservation, "type": RESERVATION_ASSOCIATION}]
        return request

    def _aws_session(self, region: str) -> Any:
        """The SDK's AwsSession for ``region``, wrapping our Braket client (so its
        endpoint, timeouts and single attempt carry over)."""
        braket = self._braket(region)
        with self._lock:
            session = self._aws_sessions.get(region)
            if session is None:
                AwsSession = sdk("braket.aws").AwsSession

                # AwsSession insists that its boto3 session has the client's region.
                session = AwsSession(
                    boto_session=boto_session(self.settings, region), braket_client=braket
                )
                self._aws_sessions[region] = session
            return session

    def _get_task(self, task_id: str, operation: str = "GetQuantumTask") -> dict[str, Any]:
        braket = self._braket(self._region_of(arn=task_id))
        return self._call(
            operation,
            task_id,
            lambda: braket.get_quantum_task(
                quantumTaskArn=task_id, additionalAttributeNames=["QueueInfo"]
            ),
        )

    def poll(self, task: TaskRef) -> TaskSnapshot:
        data = self._get_task(task.task_id)
        return task_snapshot(task, data, self._clock(), vendor=self.name)

    def cancel(self, task: TaskRef) -> None:
        braket = self._braket(self._region_of(arn=task.task_id))
        # A fixed token per task makes a retried cancel the same request.
        token = hashlib.sha256(f"cancel:{task.task_id}".encode()).hexdigest()
        self._call(
            "CancelQuantumTask",
            task.task_id,
            lambda: braket.cancel_quantum_task(quantumTaskArn=task.task_id, clientToken=token),
        )

    def billed_seconds(self, task: TaskRef) -> float | None:
        """A managed simulator's run time, from its results.json (execution_seconds);
        None for a program set (Braket runs them on QPUs, billed per task and shot)."""
        data = self._completed(task)
        if is_program_set(data):
            return None
        return execution_seconds(self._gate_model_result(task, data).raw)

    def _completed(self, task: TaskRef) -> dict[str, Any]:
        """GetQuantumTask of a COMPLETED task; InvalidRequest for any other state."""
        data = self._get_task(task.task_id)
        status = data.get("status")
        if status != TaskState.COMPLETED:
            detail = f": {data['failureReason']}" if data.get("failureReason") else ""
            raise InvalidRequest(
                f"{self.name} task {task.task_id} is {status}{detail}; only a COMPLETED task "
                "has a result",
                vendor=self.name,
                vendor_code="ResultNotReady",
                operation="GetQuantumTask",
            )
        return data

    def _read(self, task: TaskRef, bucket: object, key: str) -> str:
        """One S3 object of ``task``'s results, as text."""
        s3 = self._client("s3", self._region_of(arn=task.task_id))

        def read() -> bytes:
            response = s3.get_object(Bucket=bucket, Key=key)
            with response["Body"] as body:
                return body.read()

        return self._call("GetObject", f"s3://{bucket}/{key}", read).decode("utf-8")

    def result(self, task: TaskRef) -> TaskResult:
        data = self._completed(task)
        if is_program_set(data):
            raise InvalidRequest(
                f"{self.name} task {task.task_id} is a program set; read it per program "
                "with results()",
                vendor=self.name,
                vendor_code="ProgramSet",
                operation="GetQuantumTask",
            )
        return self._gate_model_result(task, data)

    def _gate_model_result(self, task: TaskRef, data: Mapping[str, Any]) -> TaskResult:
        bucket, directory = data.get("outputS3Bucket"), data.get("outputS3Directory")
        body = self._read(task, bucket, f"{directory}/{RESULTS_FILENAME}")
        return gate_model_result(task, body, vendor=self.name)

    def results(self, task: TaskRef) -> list[TaskResult]:
        """One result per program ``submit_set`` was given, in order (``program_results``:
        each program's counts and shots as if it had been its own task), read with the
        SDK's ``ProgramSetQuantumTaskResult``. A task of one program gives
        ``[result(task)]``. InvalidRequest when not COMPLETED, or when a program's
        executable failed (naming it and Braket's reason)."""
        data = self._completed(task)
        if not is_program_set(data):
            return [self._gate_model_result(task, data)]
        parsed = self._program_set_result(task, data)
        return program_results(task, parsed, data.get("tags"), vendor=self.name)

    def _program_set_result(self, task: TaskRef, data: Mapping[str, Any]) -> Any:
        """The SDK's ``ProgramSetQuantumTaskResult`` of a program set task, its files
        read through our S3 client and handed to the SDK inline."""
        bucket, directory = data.get("outputS3Bucket"), data.get("outputS3Directory")
        try:
            document = program_set_document(
                lambda where, key: self._read(task, where, key), bucket, directory
            )
        except (ValueError, TypeError, AttributeError) as exc:
            problem = f"its files are not Braket's: {exc}"
            raise unreadable_set(task, problem, vendor=self.name) from None
        return read_program_set(task, document, vendor=self.name)

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """The task created on ``device`` with ``token``, found by its token tag among
        the tasks SearchQuantumTasks lists on the device since ``since`` (less
        ``LOOKUP_SKEW``), never by a create. ``Conflict`` when more tasks than
        ``LOOKUP_PAGES`` pages hold were created there since (it cannot tell)."""
        braket = self._braket(device.region)
        after = datetime.fromtimestamp(since - LOOKUP_SKEW, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        wanted = client_token(token)
        request: dict[str, Any] = {
            "filters": [
                {"name": "deviceArn", "operator": "EQUAL", "values": [device.id]},
                {"name": "createdAt", "operator": "GTE", "values": [after]},
            ],
            "maxResults": 100,
        }
        for _ in range(LOOKUP_PAGES):
            page = self._call(
                "SearchQuantumTasks",
                device.name,
                functools.partial(braket.search_quantum_tasks, **request),
            )
            for summary in page.get("quantumTasks") or []:
                tags = summary.get("tags") if isinstance(summary, Mapping) else None
                if isinstance(tags, Mapping) and tags.get(TOKEN_TAG) == wanted:
                    arn = str(summary.get("quantumTaskArn") or "")
                    if arn:
                        return TaskRef(
                            vendor=self.name, device=device.name, task_id=arn, token=wanted
                        )
            next_token = page.get("nextToken")
            if not next_token:
                return None
            request["nextToken"] = next_token
        raise Conflict(
            f"{self.name} lookup of token {wanted} on {device.name}: more than "
            f"{LOOKUP_PAGES * 100} tasks were created there since "
            f"{after}; look for the tag {TOKEN_TAG}={wanted} in the console",
            vendor=self.name,
            vendor_code="TooManyTasks",
            operation="SearchQuantumTasks",
        )

    def attach_and_poll(self, task: TaskRef) -> TaskSnapshot:
        """One GetQuantumTask: it fails for a task that is not there (``attach``) and
        carries the status and queue position (``poll``)."""
        return task_snapshot(task, self._get_task(task.task_id), self._clock(), vendor=self.name)

    # -- a loop's session: a hybrid job (``hybrid``)

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        """A hybrid job on ``device`` (``hybrid_jobs``), whatever mode is asked, when the
        settings name its role; else no session, as before."""
        if not self.hybrid.enabled:
            return super().open_session(device, mode)
        return self.hybrid.open(device, mode or "dedicated")

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        self.hybrid.check(session)
        _, job_token = self.hybrid.parts(session)
        return self._submit(device, program_text, shots, token, job_token=job_token)

    def close_session(self, session: VendorSession) -> None:
        self.hybrid.check(session)
        device = next((d for d in self._devices_by_arn.values() if d.name == session.device), None)
        self.hybrid.close(session, device)

    def session_of(self, task: TaskRef) -> VendorSession | None:
        if not self.hybrid.enabled:
            return None
        return self.hybrid.session_of(self._get_task(task.task_id), task.device)

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        self.hybrid.check(session)
        return self.hybrid.environment(session)

    def event_source(self) -> BraketEventQueue | None:
        """The site's queue of Braket's task events (``vendors.braket.events_queue``),
        or None when it names none; made once, calling nothing."""
        queue = self.settings.events_queue
        if not queue:
            return None
        with self._lock:
            if self._events is None:
                region = queue_region(queue) or self.settings.region or DEFAULT_REGION
                self._events = BraketEventQueue(
                    self.settings, lambda: self._client("sqs", region), self._call
                )
            return self._events

    def attach(self, task_id: str) -> TaskRef:
        data = self._get_task(task_id)
        arn = str(data.get("deviceArn") or "")
        return TaskRef(vendor=self.name, device=self._device_name(arn), task_id=task_id)
