"""``BraketHybridJobs``: a Braket hybrid job as a loop's session, so its tasks jump the queue.

A task created with a running hybrid job's token (``jobToken`` on CreateQuantumTask, as
the SDK sends ``AMZN_BRAKET_JOB_TOKEN``) runs ahead of its device's public queue; Braket
bills the job's instance per second while it runs, and the tasks as any task. Braket
gives the token only to the job's own container, never through its API, so the job
this module creates runs a relay entry point (``RELAY``, uploaded once as the job's
source) that writes the token to the job's output in the site's results bucket and
keeps the job running until it is cancelled. This module owns that: ``open`` uploads
the relay, creates the job (CreateJob, in the device's region), waits until it runs and
its token is there (GetJob, GetObject, a bounded wait) and hands it over as a
``VendorSession`` (its id: the job's ARN and token, a secret); ``submit_in`` adds the
token to a create; ``close`` cancels the job (its token is worth nothing once it has
ended); ``session_of`` finds
the job a task rode (GetQuantumTask's ``jobArn``) and its token again;
``environment`` is what a job's own tasks need to ride it (``AMZN_BRAKET_JOB_TOKEN``).
That Braket accepts a token used outside its job's container is an assumption this
module rests on, true of the emulator and not verified against AWS. It never retries
outside the vendor's ``RetryBudget`` and never waits longer than the settings' bound.
"""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import Clock, SessionOpening, Sleep, VendorSession
from flux_quantum.vendors.braket.settings import BotoService, BraketSettings
from flux_quantum.vendors.errors import Conflict, NotFound, VendorError

Call = Callable[[str, str, Callable[[], Any]], Any]
Client = Callable[[BotoService, str], Any]  # (service, region) -> a boto3 client

MODE = "hybrid"
TOKEN_FILE = "job-token"
ENTRY_POINT = "flux_quantum_relay:main"
RELAY = '''"""flux-quantum's relay: hands this hybrid job's token to the site that created it (in
the job's output, in the site's results bucket), then keeps the job running until the
site cancels it, so the site's tasks ride the job's priority."""

import os
import time

import boto3


def main():
    boto3.client("s3").put_object(
        Bucket=os.environ["AMZN_BRAKET_OUT_S3_BUCKET"],
        Key=os.environ["AMZN_BRAKET_JOB_RESULTS_S3_PATH"] + "/job-token",
        Body=os.environ["AMZN_BRAKET_JOB_TOKEN"].encode(),
    )
    while True:
        time.sleep(60)
'''
LOOK_EVERY = 2.0  # seconds between looks while a job starts


def relay_source() -> bytes:
    """The relay as the job's source: a gzipped tar of one module, built the same way
    every time (its digest names it in the bucket)."""
    data = RELAY.encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("flux_quantum_relay.py")
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class BraketHybridJobs:
    """Hybrid jobs as sessions of one Braket vendor (its clients, calls and settings)."""

    def __init__(
        self,
        settings: BraketSettings,
        bucket: Callable[[], str | None],
        client: Client,
        call: Call,
        *,
        vendor: str,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.settings = settings
        self._bucket = bucket
        self._client = client
        self._call = call
        self._vendor = vendor
        self._clock = clock
        self._sleep = sleep

    @property
    def enabled(self) -> bool:
        return bool(self.settings.hybrid_role_arn)

    def price_words(self) -> str:
        price = self.settings.hybrid_price
        shown = f"${price:g}/h" if price is not None else "its price on Braket's pricing page"
        return f"{self.settings.hybrid_instance} instance, {shown}, billed per second"

    # -- open -------------------------------------------------------------------------------

    def open(self, device: Device, requested: str) -> SessionOpening:
        """A hybrid job on ``device`` whose token rides its tasks ahead of the queue, or
        job mode and why (no role, no bucket, a job that did not start in time)."""
        bucket = self._bucket()
        if not bucket:
            return SessionOpening(requested, "job", None, "no results bucket for a hybrid job")
        braket = self._client("braket", device.region)
        s3 = self._client("s3", device.region)
        prefix = self.settings.s3_prefix.strip("/")
        source = relay_source()
        key = f"{prefix}/hybrid/relay-{hashlib.sha256(source).hexdigest()[:16]}.tar.gz"
        self._call(
            "PutObject",
            f"s3://{bucket}/{key}",
            functools.partial(s3.put_object, Bucket=bucket, Key=key, Body=source),
        )
        name = f"flux-quantum-{uuid.uuid4().hex[:12]}"
        location = f"s3://{bucket}/{prefix}/hybrid"
        request = {
            "clientToken": str(uuid.uuid4()),
            "jobName": name,
            "roleArn": self.settings.hybrid_role_arn,
            "algorithmSpecification": {
                "scriptModeConfig": {
                    "entryPoint": ENTRY_POINT,
                    "s3Uri": f"s3://{bucket}/{key}",
                    "compressionType": "GZIP",
                }
            },
            "instanceConfig": {
                "instanceType": self.settings.hybrid_instance,
                "volumeSizeInGb": 30,
                "instanceCount": 1,
            },
            "outputDataConfig": {"s3Path": location},
            "checkpointConfig": {"s3Uri": f"{location}/{name}/checkpoints"},
            "deviceConfig": {"device": device.id},
            "stoppingCondition": {"maxRuntimeInSeconds": int(self.settings.hybrid_max_runtime)},
        }
        created = self._call(
            "CreateJob", device.name, functools.partial(braket.create_job, **request)
        )
        arn = str(created["jobArn"])
        token_key = f"{prefix}/hybrid/{name}/output/{TOKEN_FILE}"
        token = self._wait_for_token(braket, s3, arn, bucket, token_key)
        if token is None:
            self._cancel(braket, arn)
            return SessionOpening(
                requested,
                "job",
                None,
                f"the Braket hybrid job {name} did not run within "
                f"{self.settings.hybrid_start_timeout:g}s, so it was cancelled; tasks run in "
                f"{device.name}'s public queue",
            )
        session = VendorSession(self._vendor, device.name, MODE, f"{arn} {token}")
        reason = (
            f"a Braket hybrid job on {device.name} ({self.price_words()}, while the loop "
            "lasts, plus its tasks): its tasks run ahead of the public queue"
        )
        return SessionOpening(requested, MODE, session, reason)

    def _wait_for_token(self, braket: Any, s3: Any, arn: str, bucket: str, key: str) -> str | None:
        """The job's token once it runs and its relay wrote it; None when it did not
        within ``hybrid_start_timeout`` seconds or the job ended."""
        deadline = self._clock() + self.settings.hybrid_start_timeout
        while True:
            job = self._call("GetJob", arn, functools.partial(braket.get_job, jobArn=arn))
            status = job.get("status")
            if status in ("FAILED", "CANCELLED", "CANCELLING", "COMPLETED"):
                return None
            if status == "RUNNING":
                token = self._read(s3, bucket, key)
                if token:
                    return token
            if self._clock() >= deadline:
                return None
            self._sleep(LOOK_EVERY)

    def _read(self, s3: Any, bucket: str, key: str) -> str | None:
        def read() -> bytes:
            answer = s3.get_object(Bucket=bucket, Key=key)
            with answer["Body"] as body:
                return body.read()

        try:
            return self._call("GetObject", f"s3://{bucket}/{key}", read).decode().strip()
        except NotFound:
            return None

    # -- a task riding it, and its end --------------------------------------------------------

    @staticmethod
    def parts(session: VendorSession) -> tuple[str, str]:
        """(job ARN, job token) of a hybrid job's session."""
        arn, _, token = session.session_id.partition(" ")
        return arn, token

    def close(self, session: VendorSession, device: Device | None) -> None:
        """Cancel the job (one that ended already is fine)."""
        arn, _ = self.parts(session)
        region = device.region if device is not None else arn.split(":")[3]
        self._cancel(self._client("braket", region), arn)

    def _cancel(self, braket: Any, arn: str) -> None:
        try:
            self._call("CancelJob", arn, functools.partial(braket.cancel_job, jobArn=arn))
        except (Conflict, NotFound):
            return  # it has ended, or is gone

    def session_of(self, task_data: dict[str, Any], device: str) -> VendorSession | None:
        """The hybrid job a task rode (its GetQuantumTask answer), its token read again,
        ``closed`` once the job no longer runs; None when it rode none."""
        arn = task_data.get("jobArn")
        if not isinstance(arn, str) or not arn:
            return None
        region = arn.split(":")[3]
        braket = self._client("braket", region)
        job = self._call("GetJob", arn, functools.partial(braket.get_job, jobArn=arn))
        path = str((job.get("outputDataConfig") or {}).get("s3Path") or "")
        bucket, _, location = path.removeprefix("s3://").partition("/")
        key = "/".join(p for p in (location.strip("/"), str(job.get("jobName")), "output") if p)
        token = self._read(self._client("s3", region), bucket, f"{key}/{TOKEN_FILE}") or ""
        closed = job.get("status") not in ("QUEUED", "RUNNING")
        return VendorSession(self._vendor, device, MODE, f"{arn} {token}", closed=closed)

    def environment(self, session: VendorSession) -> dict[str, str]:
        """What a job's own tasks need to ride the hybrid job through the SDK."""
        _, token = self.parts(session)
        return {"AMZN_BRAKET_JOB_TOKEN": token}

    def check(self, session: VendorSession) -> None:
        """A session of this vendor's hybrid jobs, else InvalidRequest-like VendorError."""
        if session.mode != MODE or " " not in session.session_id:
            raise VendorError(
                f"{self._vendor}: {session.mode} session is not a Braket hybrid job",
                vendor=self._vendor,
                vendor_code="NotAHybridJob",
            )
