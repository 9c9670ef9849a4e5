"""The batches of the emulated Pasqal side: Pasqal Cloud's batches and the warden's local jobs.

This module owns every batch created on the Pasqal side (a local job is a batch with a
warden's integer id), on its device's ``DeviceQueue`` in emulated time (the shared queue
model, by device name), its results sampled from its sequence when created
(``pasqal_program.sample``, seeded), the checks a new one must pass (device online, a
valid sequence, runs, free slots), its status and documents in Pasqal Cloud's and the
warden's shapes, its cancel, and its bill at the site's rate. It must never sleep holding
the side's lock, never read the wall clock, and never change a queue but through its
methods.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.bill import BilledTask, timed_task
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.pasqal.scenario import PasqalDeviceSpec, PasqalScenario
from flux_quantum.emulator.pasqal.wire import (
    PENDING,
    STATES,
    PasqalRefusal,
    ok,
    pasqal_error,
)
from flux_quantum.emulator.queue import DeviceQueue, TaskProgress, TaskTimeline
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.wire import Response, json_response
from flux_quantum.vendors import pasqal_program


@dataclass
class Batch:
    """One batch of one job (``job_id``); ``local_id`` is its warden id when local."""

    id: str
    job_id: str
    device: str
    kind: str
    sequence: str
    runs: int
    created_t: float
    counts: dict[str, int]
    project_id: str = ""
    user_id: str = ""
    failure: str | None = None
    local_id: int | None = None


class PasqalBatches:
    """Every batch created on the Pasqal side, behind the side's lock."""

    def __init__(
        self, scenario: PasqalScenario, clock: Clock, seed: int, lock: threading.Lock
    ) -> None:
        self.scenario = scenario
        self.clock = clock
        self.seed = seed
        self._lock = lock
        self._queues = {d.name: DeviceQueue(_queue_spec(d), seed) for d in scenario.devices}
        self._batches: dict[str, Batch] = {}
        self._local_ids: dict[int, str] = {}

    # -- views --------------------------------------------------------------------------------

    def job_ids(self, device: str | None = None) -> list[str]:
        """Every batch (cloud) or job (local) created so far (on ``device``), oldest first,
        by the id the client holds."""
        with self._lock:
            return [self.task_id(b) for b in self._batches.values() if device in (None, b.device)]

    def timeline(self, task_id: str) -> TaskTimeline:
        with self._lock:
            batch = self.get(task_id)
            return self._queues[batch.device].timeline(batch.id, self.clock.now())

    def bill(self) -> list[BilledTask]:
        """Every batch so far; a completed one is billed its QPU seconds at the site rate."""
        with self._lock:
            now = self.clock.now()
            return [
                timed_task("pasqal", self.task_id(batch), batch.device,
                           pasqal_program.token_of(batch.sequence), batch.runs, batch.created_t,
                           self._queues[batch.device].progress(batch.id, now),
                           self.scenario.site_price_per_second)
                for batch in self._batches.values()
            ]  # fmt: skip

    def waiting(self, spec: PasqalDeviceSpec) -> int:
        """How many tasks wait in ``spec``'s queue now, background load included."""
        with self._lock:
            return self._queues[spec.name].queue_size(self.clock.now())

    def busy(self, spec: PasqalDeviceSpec, now: float) -> int:
        """How many of the device's batches are pending or running (lock held)."""
        return sum(
            1
            for b in self._batches.values()
            if b.device == spec.name and self.status(b, now)[0] in PENDING
        )

    # -- devices ------------------------------------------------------------------------------

    def device(self, name: str | None, kind: str = "cloud") -> PasqalDeviceSpec:
        """The device ``name`` of ``kind``, or Pasqal Cloud's 404."""
        spec = self.scenario.device(name or "", kind)
        if spec is None:
            raise PasqalRefusal(pasqal_error(404, f"Device {name} not found."))
        return spec

    # -- a new batch --------------------------------------------------------------------------

    def admit(
        self,
        spec: PasqalDeviceSpec,
        sequence: Any,
        runs: Any,
        refuse: Callable[[int, str], Response],
    ) -> None:
        """Refuse (in ``refuse``'s shape) a batch the device cannot take now."""
        state = spec.state_at(self.clock.now())
        if state != "online":
            raise PasqalRefusal(
                refuse(409, f"Device {spec.name} is {state} and takes no new batch.")
            )
        if not isinstance(sequence, str):
            raise PasqalRefusal(refuse(400, "the sequence must be a string"))
        problem = pasqal_program.check(sequence, spec.atoms)
        if problem is not None:
            raise PasqalRefusal(refuse(400, f"Invalid sequence: {problem}"))
        if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= spec.max_runs:
            raise PasqalRefusal(
                refuse(400, f"runs must be between 1 and {spec.max_runs}, got {runs!r}")
            )
        if spec.max_slots is not None:
            with self._lock:
                busy = self.busy(spec, self.clock.now())
            if busy >= spec.max_slots:
                raise PasqalRefusal(
                    refuse(429, f"Device {spec.name} has no free slot ({spec.max_slots} in use).")
                )

    def add(
        self, spec: PasqalDeviceSpec, sequence: str, runs: int, failure: str, **extra: Any
    ) -> Batch:
        """A new batch of ``runs`` of ``sequence`` on ``spec``, queued now (``failure``: it
        will end in ERROR with that reason)."""
        with self._lock:
            now = self.clock.now()
            batch_id = _draw(self.seed, "batch", len(self._batches))
            job_id = _draw(self.seed, "job", len(self._batches))
            counts = pasqal_program.sample(sequence, runs, f"{self.seed}:{batch_id}")
            batch = Batch(batch_id, job_id, spec.name, spec.kind, sequence, runs, now, counts,
                          failure=failure or None, **extra)  # fmt: skip
            if spec.kind == "local":
                batch.local_id = len(self._local_ids) + 1
                self._local_ids[batch.local_id] = batch_id
            self._queues[spec.name].submit(batch_id, now, runs, fails=bool(failure))
            self._batches[batch_id] = batch
            return batch

    # -- finding and describing one -----------------------------------------------------------

    def get(self, task_id: str | None) -> Batch:
        """The batch the client names ``task_id``, or Pasqal Cloud's 404."""
        batch = self.find(task_id or "")
        if batch is None:
            raise PasqalRefusal(pasqal_error(404, f"Batch {task_id} not found."))
        return batch

    def find(self, key: str, by_job: bool = False) -> Batch | None:
        """The batch of a batch id or a warden id (``by_job``: of a job id), or None."""
        with self._lock:
            if key.isdigit() and int(key) in self._local_ids:
                return self._batches[self._local_ids[int(key)]]
            if by_job:
                return next((b for b in self._batches.values() if b.job_id == key), None)
            return self._batches.get(key)

    def task_id(self, batch: Batch) -> str:
        """The id the client holds: the batch id, or a local job's warden id."""
        return batch.id if batch.local_id is None else str(batch.local_id)

    def status(self, batch: Batch, now: float) -> tuple[str, TaskProgress]:
        """Pasqal's status of ``batch`` at ``now`` and its progress (lock held)."""
        progress = self._queues[batch.device].progress(batch.id, now)
        return STATES[progress.status], progress

    def document(self, batch: Batch, now: float) -> dict[str, Any]:
        """The batch as Pasqal Cloud answers it (lock held)."""
        status, progress = self.status(batch, now)
        when = timestamp(self.clock, batch.created_t).isoformat()
        doc: dict[str, Any] = {
            "id": batch.id,
            "status": status,
            "job_ids": [batch.job_id],
            "device_type": batch.device,
            "project_id": batch.project_id,
            "created_at": when,
            "sequence_builder": batch.sequence,
            "jobs": [{"id": batch.job_id, "runs": batch.runs, "status": status}],
        }
        if progress.started_at is not None:
            doc["start_datetime"] = timestamp(self.clock, progress.started_at).isoformat()
        if progress.ended_at is not None:
            doc["end_datetime"] = timestamp(self.clock, progress.ended_at).isoformat()
        return doc

    def local_document(self, batch: Batch, now: float) -> dict[str, Any]:
        """The local job as the warden answers it (lock held)."""
        status, _ = self.status(batch, now)
        results = json.dumps({"counter": batch.counts}) if status == "DONE" else None
        return {"id": batch.local_id, "user_id": batch.user_id, "status": status,
                "results": results, "sequence": batch.sequence, "shots": batch.runs}  # fmt: skip

    def cloud_documents(
        self, device_type: str | None, since: float | None, now: float
    ) -> list[dict[str, Any]]:
        """The cloud batches (of ``device_type``, created at or after ``since``), oldest
        first, as Pasqal Cloud lists them (lock held)."""
        return [
            self.document(b, now)
            for b in self._batches.values()
            if b.kind == "cloud"
            and device_type in (None, b.device)
            and (since is None or b.created_t >= since)
        ]

    def local_documents(self, device: str, now: float) -> list[dict[str, Any]]:
        """The device's local jobs as the warden lists them (lock held)."""
        return [self.local_document(b, now) for b in self._batches.values() if b.device == device]

    # -- cancel -------------------------------------------------------------------------------

    def cancel(self, batch: Batch, refuse: Callable[[int, str], Response]) -> Response:
        """Cancel a pending or running batch; its document after (in the warden's shape for
        a local job), or ``refuse``'s 409."""
        with self._lock:
            now = self.clock.now()
            status, _ = self.status(batch, now)
            if status not in PENDING:
                raise PasqalRefusal(
                    refuse(409, f"Batch {batch.id} is {status} and cannot be cancelled.")
                )
            self._queues[batch.device].cancel(batch.id, now)
            if batch.local_id is None:
                return ok(self.document(batch, now))
            return json_response(200, self.local_document(batch, now))


def _draw(seed: int, kind: str, n: int) -> str:
    """A deterministic UUID4 for the ``n``-th ``kind`` of this seed."""
    digest = hashlib.sha256(f"{seed}:pasqal-{kind}:{n}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _queue_spec(spec: PasqalDeviceSpec) -> DeviceQueueSpec:
    """The shared queue model's view of a Pasqal device: paused and offline windows both
    stop it starting work (creates are refused in them by the service)."""
    windows = [(0.0, math.inf)] if spec.status != "online" else [*spec.paused, *spec.offline]
    return DeviceQueueSpec.waiting_during(spec.queue_key, spec.name, spec.queue, windows)
