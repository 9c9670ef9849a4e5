"""The emulated Braket hybrid jobs: CreateJob, GetJob, CancelJob, their job tokens and bill.

A Braket hybrid job runs a container on a classical instance with priority access to one
device: the tasks it creates carry its job token (``jobToken`` on CreateQuantumTask,
which the SDK takes from ``AMZN_BRAKET_JOB_TOKEN`` in the container's environment) and
run ahead of the device's public queue while the job runs; Braket bills the instance per
second while it runs, and the tasks as any task. This module owns every job created (and SearchJobs over them) (by
ARN and by clientToken, ids and tokens drawn from the seed): a create checked as
Braket's model says (its name, role, device, output path, instance), its state on the
emulated clock (QUEUED for the scenario's ``startup`` seconds, then RUNNING until
cancelled or its ``maxRuntimeInSeconds`` ends), GetJob's document (never the token:
Braket does not give it out), a cancel, which token a task's create may ride, and the
bill. The emulator runs no container: the token is written where the relay entry point
a client uploads would write it (``{s3Path}/{jobName}/output/job-token``, in the job's
output bucket) once the job runs. It must never sleep or do I/O holding the side's lock,
and never read the wall clock.
"""

from __future__ import annotations

import random
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator.bill import BilledSession
from flux_quantum.emulator.braket import search
from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.s3 import ObjectStore
from flux_quantum.emulator.braket.wire import BraketRefusal, braket_error, invalid, iso8601
from flux_quantum.emulator.clock import timestamp
from flux_quantum.emulator.wire import Response, json_response

TOKEN_FILE = "job-token"
_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,50}")
_ROLE = re.compile(r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-/]+")
_S3 = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?")
DEFAULT_MAX_RUNTIME = 5 * 86400.0  # Braket's default stopping condition


@dataclass
class HybridJob:
    """One hybrid job: what its CreateJob fixed, and its cancel."""

    arn: str
    name: str
    region: str
    device_arn: str
    client_token: str
    token: str = field(repr=False)  # the job token: a secret
    created: float
    starts: float
    max_runtime: float
    bucket: str
    output_key: str  # where its output goes: {s3Path key}/{jobName}/output
    instance_type: str
    request: dict[str, Any] = field(repr=False)
    cancelled_at: float | None = None
    tasks: list[str] = field(default_factory=list)

    def ends(self) -> float:
        """When it stops running (cancelled, or at its max runtime), if it does."""
        limit = self.starts + self.max_runtime
        return limit if self.cancelled_at is None else min(limit, self.cancelled_at)

    def status(self, now: float) -> str:
        if self.cancelled_at is not None and self.cancelled_at <= now:
            return "CANCELLED"
        if now < self.starts:
            return "QUEUED"
        if now >= self.starts + self.max_runtime:
            return "FAILED"
        return "RUNNING"

    def running_seconds(self, now: float) -> float:
        """Seconds its instance ran by ``now`` (what is billed)."""
        return max(0.0, min(now, self.ends()) - self.starts)


class HybridJobs:
    """Every hybrid job created, behind the side's lock."""

    def __init__(
        self, devices: Devices, store: ObjectStore, seed: int, lock: threading.Lock
    ) -> None:
        self.scenario = devices.scenario
        self.clock = devices.clock
        self._devices = devices
        self._store = store
        self._lock = lock
        self._jobs: dict[str, HybridJob] = {}
        self._tokens: dict[str, str] = {}  # clientToken -> job ARN
        self._by_job_token: dict[str, str] = {}  # job token -> job ARN
        self._written: set[str] = set()
        self._ids = random.Random(f"{seed}:hybrid-jobs")

    def starts(self) -> dict[str, float]:
        """When each job started, or will (emulated seconds), by ARN."""
        with self._lock:
            return {arn: job.starts for arn, job in self._jobs.items()}

    def device_of(self, arn: str) -> str | None:
        with self._lock:
            job = self._jobs.get(arn)
        return job.device_arn if job else None

    # -- CreateJob ----------------------------------------------------------------------------

    def create(self, body: dict[str, Any], region: str) -> tuple[str, bool]:
        """The ARN of the job ``body`` asks for, and whether it is new."""
        for name in ("clientToken", "jobName", "roleArn"):
            if not isinstance(body.get(name), str) or not body[name]:
                raise invalid(f"{name} is required and must be a non-empty string")
        name, role = body["jobName"], body["roleArn"]
        if not _NAME.fullmatch(name):
            raise invalid(f"jobName {name!r} must match [a-zA-Z0-9](-*[a-zA-Z0-9]){{0,50}}")
        if not _ROLE.fullmatch(role):
            raise invalid(f"roleArn {role!r} is not an IAM role ARN")
        device = _member(body, "deviceConfig", "device")
        s3path = _member(body, "outputDataConfig", "s3Path")
        instance = _member(body, "instanceConfig", "instanceType")
        if not isinstance(body.get("algorithmSpecification"), dict):
            raise invalid("algorithmSpecification is required")
        where = _S3.fullmatch(s3path)
        if where is None:
            raise invalid(f"outputDataConfig.s3Path {s3path!r} is not an s3:// URI")
        stopping = body.get("stoppingCondition") or {}
        runtime = stopping.get("maxRuntimeInSeconds", DEFAULT_MAX_RUNTIME)
        if isinstance(runtime, bool) or not isinstance(runtime, int | float) or runtime < 1:
            raise invalid(f"stoppingCondition.maxRuntimeInSeconds must be >= 1, got {runtime!r}")
        with self._lock:
            known = self._tokens.get(body["clientToken"])
            if known is not None:
                if self._jobs[known].request != body:
                    raise BraketRefusal(
                        "CreateJob",
                        braket_error(
                            "ConflictException",
                            409,
                            f"clientToken {body['clientToken']} was already used for {known}",
                        ),
                    )
                return known, False
            spec = self._devices.for_region(device, region, for_create=True)
            arn = f"arn:aws:braket:{region}:{self.scenario.account}:job/{name}"
            if arn in self._jobs:
                raise BraketRefusal(
                    "CreateJob",
                    braket_error("ConflictException", 409, f"A job named {name} already exists"),
                )
            now = self.clock.now()
            bucket, location = where.group(1), (where.group(2) or "").strip("/")
            output = "/".join(p for p in (location, name, "output") if p)
            job = HybridJob(
                arn=arn,
                name=name,
                region=region,
                device_arn=spec.arn,
                client_token=body["clientToken"],
                token=str(uuid.UUID(int=self._ids.getrandbits(128), version=4)),
                created=now,
                starts=now + self.scenario.hybrid_jobs.startup,
                max_runtime=float(runtime),
                bucket=bucket,
                output_key=output,
                instance_type=instance,
                request=dict(body),
            )
            self._jobs[arn] = job
            self._tokens[job.client_token] = arn
            self._by_job_token[job.token] = arn
            self._store.create_bucket(bucket)
        return arn, True

    # -- GetJob / CancelJob -------------------------------------------------------------------

    def _job(self, arn: str, operation: str) -> HybridJob:
        job = self._jobs.get(arn)
        if job is None:
            raise BraketRefusal(
                operation,
                braket_error("ResourceNotFoundException", 404, f"Job {arn} not found"),
            )
        return job

    def get(self, arn: str) -> Response:
        with self._lock:
            job = self._job(arn, "GetJob")
            now = self.clock.now()
            status = job.status(now)
            doc: dict[str, Any] = {
                "jobArn": job.arn,
                "jobName": job.name,
                "status": status,
                "roleArn": job.request["roleArn"],
                "algorithmSpecification": job.request["algorithmSpecification"],
                "instanceConfig": job.request["instanceConfig"],
                "outputDataConfig": job.request["outputDataConfig"],
                "deviceConfig": job.request["deviceConfig"],
                "stoppingCondition": {"maxRuntimeInSeconds": int(job.max_runtime)},
                "createdAt": iso8601(timestamp(self.clock, job.created)),
                "billableDuration": round(job.running_seconds(now) * 1000),
            }
            if status == "QUEUED":
                doc["queueInfo"] = {"queue": "JOBS_QUEUE", "position": "1"}
            if now >= job.starts:
                doc["startedAt"] = iso8601(timestamp(self.clock, job.starts))
            if status in ("CANCELLED", "FAILED"):
                doc["endedAt"] = iso8601(timestamp(self.clock, job.ends()))
            if status == "FAILED":
                doc["failureReason"] = "MaxRuntimeExceeded"
            return json_response(200, doc)

    def search(self, body: dict[str, Any], region: str) -> Response:
        """SearchJobs: the jobs of ``region`` passing every filter (``jobArn``,
        ``status``, ``createdAt`` with EQUAL, LT, LTE, GT, GTE, BETWEEN, and CONTAINS on
        ``jobArn``), oldest first, paginated."""
        found = search.filters(body, "SearchJobs")
        with self._lock:
            now = self.clock.now()
            rows = []
            for job in self._jobs.values():
                if job.region != region:
                    continue
                doc: dict[str, Any] = {
                    "jobArn": job.arn,
                    "jobName": job.name,
                    "status": job.status(now),
                    "device": job.device_arn,
                    "createdAt": iso8601(timestamp(self.clock, job.created)),
                }
                if now >= job.starts:
                    doc["startedAt"] = iso8601(timestamp(self.clock, job.starts))
                if doc["status"] in ("CANCELLED", "FAILED"):
                    doc["endedAt"] = iso8601(timestamp(self.clock, job.ends()))
                if all(search.job_matches(doc, f) for f in found):
                    rows.append(doc)
        page, token = search.paginate(rows, body)
        return json_response(200, {"jobs": page, **token})

    def cancel(self, arn: str) -> Response:
        with self._lock:
            job = self._job(arn, "CancelJob")
            now = self.clock.now()
            if job.status(now) in ("FAILED", "COMPLETED"):
                raise BraketRefusal(
                    "CancelJob",
                    braket_error("ConflictException", 409, f"Job {arn} has already ended"),
                )
            if job.cancelled_at is None:
                job.cancelled_at = now
        return json_response(200, {"jobArn": arn, "cancellationStatus": "CANCELLING"})

    # -- the tasks that ride a job --------------------------------------------------------------

    def priority(self, job_token: str | None, device_arn: str, now: float) -> str | None:
        """The job a task created now with ``job_token`` on ``device_arn`` rides ahead of
        the public queue: one that is RUNNING on that device (lock held). ValidationException
        for a token no job has; None for a job not running, or on another device."""
        if job_token is None:
            return None
        arn = self._by_job_token.get(job_token)
        if arn is None:
            raise invalid("jobToken is not the token of a hybrid job of this account")
        job = self._jobs[arn]
        if job.status(now) != "RUNNING" or job.device_arn != device_arn:
            return None
        return arn

    def rode(self, job_arn: str, task_arn: str) -> None:
        """Task ``task_arn`` rode job ``job_arn`` (lock held)."""
        self._jobs[job_arn].tasks.append(task_arn)

    def publish(self, now: float) -> None:
        """Write each running job's token where its relay entry point would (lock held)."""
        for job in self._jobs.values():
            if job.arn in self._written or job.status(now) != "RUNNING":
                continue
            self._written.add(job.arn)
            key = f"{job.output_key}/{TOKEN_FILE}"
            self._store.put(
                job.bucket, key, job.token.encode(), timestamp(self.clock, job.starts), "text/plain"
            )

    # -- the bill -------------------------------------------------------------------------------

    def bill(self) -> list[BilledSession]:
        """Every job as the bill's sessions: its instance's running seconds x the price;
        ``open`` while it runs or waits to (it is billed or will be), else ``closed``."""
        price = self.scenario.hybrid_jobs.price_per_hour
        with self._lock:
            now = self.clock.now()
            return [
                BilledSession(
                    id=job.arn,
                    backend=job.device_arn,
                    mode="hybrid",
                    state="open" if job.status(now) in ("QUEUED", "RUNNING") else "closed",
                    ibm_state=job.status(now),
                    jobs=tuple(job.tasks),
                    cost=job.running_seconds(now) * price / 3600.0,
                )
                for job in self._jobs.values()
            ]


def _member(body: dict[str, Any], outer: str, inner: str) -> str:
    value = body.get(outer)
    item = value.get(inner) if isinstance(value, dict) else None
    if not isinstance(item, str) or not item:
        raise invalid(f"{outer}.{inner} is required and must be a non-empty string")
    return item
