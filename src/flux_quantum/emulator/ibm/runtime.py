"""The emulated IBM Quantum's state: its backends' queues, jobs and sessions, behind one lock.

This module owns every fact of the emulator's IBM side and every change to one: a job
created on a backend's queue (the same ``DeviceQueue`` as the Braket side), its status, its
cancel and deletion, and a session's life (open, active from its first job's start,
inactive while its last jobs drain, closed by its TTL or a close, which cancels what is
left). A dedicated session runs as IBM runs one: its first job waits its turn in the
backend's queue; once it has started the backend runs only the session's jobs, each
later one as soon as the backend is free, until no job of the session has been waiting
or running for the interactive TTL (then it is inactive, the queue moves on, and its
next job waits its turn again) or the session ends (a ``Dedication`` of the queue). It
answers in IBM's job and session documents and refuses with IBM's error codes
(``IbmRefusal``). It must never see an HTTP request, never sleep, never simulate a circuit
(the caller hands it the results), never read the wall clock, and never hand out a job's
results before the job has completed.
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flux_quantum.emulator.bill import BilledSession, BilledTask, ibm_charge
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.ibm.scenario import ERROR_CODES, IbmBackendSpec
from flux_quantum.emulator.ibm.wire import ibm_error, sampler_result
from flux_quantum.emulator.ibm.wire import timestamp as ibm_time
from flux_quantum.emulator.queue import Dedication, DeviceQueue, TaskTimeline
from flux_quantum.emulator.scenario import DeviceQueueSpec
from flux_quantum.emulator.side import Refusal
from flux_quantum.vendors.ibm.payload import program_token

_STATUS = {
    "QUEUED": "Queued",
    "RUNNING": "Running",
    "COMPLETED": "Completed",
    "FAILED": "Failed",
    "CANCELLING": "Cancelled",
    "CANCELLED": "Cancelled",
}
_PENDING = ("Queued", "Running")
# IBM's interactive TTL: a dedicated session with no job waiting or running for this long
# is deactivated and the backend serves its queue again (IBM's value; not settable).
INTERACTIVE_TTL = 60
_ID_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class IbmJob:
    """The facts of one job fixed at creation; its progress lives in its backend's queue."""

    id: str
    backend: str
    program_id: str
    params: dict[str, Any] = field(repr=False)
    created_t: float
    session_id: str | None = None
    cost: int = 0
    result: str | None = field(default=None, repr=False)
    shots: int = 0
    failure: str | None = None
    failure_code: int = 1010  # IBM's code of its failure (1517: a non-ISA circuit)


@dataclass
class IbmSession:
    """One session; its state follows its jobs and the clock."""

    id: str
    backend: str
    mode: str
    max_ttl: int
    created_t: float
    accepting_jobs: bool = True
    closed_t: float | None = None
    cancelled: bool = False
    jobs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class JobQuery:
    """Which jobs a list asks for (None: any); ``pending`` True for queued or running."""

    backend: str | None = None
    session_id: str | None = None
    program: str | None = None
    pending: bool | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class IbmRefusal(Refusal):
    """IBM's answer to a request it refuses: the response, with IBM's error body."""


def refuse(code: int, message: str | None = None, status: int | None = None) -> IbmRefusal:
    """The refusal IBM gives with error ``code`` (its usual HTTP status unless ``status``)."""
    return IbmRefusal(ibm_error(status or ERROR_CODES.get(code, (400, ""))[0], code, message))


def _queue_spec(spec: IbmBackendSpec) -> DeviceQueueSpec:
    """The shared queue model's view of an IBM backend: paused periods are offline periods
    that still accept jobs (they queue and wait), an offline backend refuses them."""
    paused = [(0.0, math.inf)] if spec.status == "paused" else list(spec.paused)
    return DeviceQueueSpec.waiting_during(
        spec.queue_key, spec.name, spec.queue, paused, down=spec.status == "offline"
    )


class IbmRuntime:
    """The jobs and sessions on an ``IbmScenario``'s backends, safe to call from any
    thread: each public method takes the lock once and sees one ``now``."""

    def __init__(self, backends: Iterable[IbmBackendSpec], clock: Clock, seed: int = 0) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._queues = {b.name: DeviceQueue(_queue_spec(b), seed) for b in backends}
        self._jobs: dict[str, IbmJob] = {}
        # Every job ever created, deleted ones too: a deleted job stays on the bill.
        self._created: dict[str, IbmJob] = {}
        self._sessions: dict[str, IbmSession] = {}
        self._ids = random.Random(f"{seed}:ibm-ids")

    # -- views for tests and the facade ---------------------------------------------------------

    def job_ids(self, backend: str | None = None) -> list[str]:
        """Every job created so far (on ``backend``), oldest first."""
        with self._lock:
            return [j.id for j in self._jobs.values() if backend in (None, j.backend)]

    def job_params(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._jobs[job_id].params))

    def session_state(self, session_id: str) -> str:
        with self._lock:
            return self._session_state(self._sessions[session_id], self.clock.now())

    def job_timeline(self, job_id: str) -> TaskTimeline:
        """When a job was created, became next to run, started and ended (emulated
        seconds; the truth a benchmark measures release lags against)."""
        with self._lock:
            job = self._jobs[job_id]
            return self._queues[job.backend].timeline(job_id, self.clock.now())

    def job_forecast(self, job_id: str) -> TaskTimeline:
        """The milestones a job will reach if nothing but the background changes its
        backend's queue from now on (``DeviceQueue.forecast``; for benchmarks' clocks)."""
        with self._lock:
            job = self._jobs[job_id]
            return self._queues[job.backend].forecast(job_id, self.clock.now())

    def session_jobs(self, session_id: str) -> list[str]:
        """The jobs that rode ``session_id``, oldest first."""
        with self._lock:
            return list(self._sessions[session_id].jobs)

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def pending(self, backend: str) -> int:
        with self._lock:
            return self._queues[backend].queue_size(self.clock.now())

    def backend_of_job(self, job_id: str) -> str | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return job.backend if job else None

    def backend_of_session(self, session_id: str) -> str | None:
        with self._lock:
            session = self._sessions.get(session_id)
        return session.backend if session else None

    def bill(self, price_per_second: float) -> tuple[list[BilledTask], list[BilledSession]]:
        """Every job created so far (deleted ones too) with what IBM charges for it now,
        and every session with the sum of its jobs (see ``bill``)."""
        with self._lock:
            now = self.clock.now()
            tasks: dict[str, BilledTask] = {}
            for job in self._created.values():
                progress = self._queues[job.backend].progress(job.id, now)
                state = _STATUS[progress.status].upper()
                seconds, cost = ibm_charge(
                    price_per_second, state, progress.started_at, progress.ended_at
                )
                pubs = job.params.get("pubs")
                first = pubs[0] if isinstance(pubs, list) and pubs else None
                circuit = first[0] if isinstance(first, list) and first else None
                tasks[job.id] = BilledTask(
                    vendor="ibm",
                    id=job.id,
                    device=job.backend,
                    token=program_token(circuit),
                    state=state,
                    shots=job.shots,
                    billed_seconds=seconds,
                    cost=cost,
                    session=job.session_id,
                    created=job.created_t,
                    started=progress.started_at,
                    ended=progress.ended_at,
                )
            sessions = []
            for session in self._sessions.values():
                ibm_state = self._session_state(session, now)
                if session.closed_t is not None or not session.accepting_jobs:
                    state = "closed"
                elif ibm_state == "closed":
                    state = "expired"
                else:
                    state = "open"
                sessions.append(
                    BilledSession(
                        id=session.id,
                        backend=session.backend,
                        mode=session.mode,
                        state=state,
                        ibm_state=ibm_state,
                        jobs=tuple(session.jobs),
                        cost=math.fsum(tasks[j].cost for j in session.jobs if j in tasks),
                    )
                )
        return list(tasks.values()), sessions

    # -- backends -------------------------------------------------------------------------------

    def backend_states(self, specs: Sequence[IbmBackendSpec]) -> list[tuple[str, str | None, int]]:
        """Per backend, at one moment: ``online``, ``paused`` or ``offline``, why, and how
        many jobs are pending."""
        with self._lock:
            now = self.clock.now()
            return [
                (*self._backend_status(spec, now), self._queues[spec.name].queue_size(now))
                for spec in specs
            ]

    def _backend_status(self, spec: IbmBackendSpec, now: float) -> tuple[str, str | None]:
        """``online``, ``paused`` or ``offline`` and why (lock held)."""
        status = self._queues[spec.name].status(now)
        if status.status == "ONLINE":
            return "online", None
        if spec.status == "offline":
            return "offline", "The backend is offline."
        return "paused", "The backend is paused for maintenance; jobs queue until it resumes."

    # -- jobs -----------------------------------------------------------------------------------

    def create_job(
        self,
        spec: IbmBackendSpec,
        params: dict[str, Any],
        results: Sequence[tuple[str, list[int], int, int]],
        *,
        shots: int,
        session_id: str | None,
        cost: int,
        failure: str | None,
        cancels: bool = False,
        support_qiskit: bool = True,
        refused: tuple[int, str] | None = None,
    ) -> str:
        """Queue a sampler job of ``shots`` in all (its pubs' shots summed: it runs as
        long as all of them take, as one job), its pubs' ``results`` simulated beforehand
        (``(register, rows, num_bits, shots)`` each, answered in the pubs' order once it
        completes, RuntimeEncoder JSON or, without ``support_qiskit``, IBM's plain JSON);
        its id. With a ``failure`` it fails instead of completing; with ``cancels`` IBM
        cancels it when it would start; ``refused`` (IBM's code and reason) fails it at
        once, as IBM's validation does, without queueing or running it."""
        with self._lock:
            now = self.clock.now()
            queue = self._queues[spec.name]
            if queue.availability.accepts_tasks_at(now) is not None:
                raise refuse(1004, f"The backend {spec.name} is not available (offline).")
            dedication = None
            if session_id is not None:
                self._session_takes(session_id, spec, now)
                session = self._sessions[session_id]
                if session.mode == "dedicated":
                    dedication = Dedication(session_id, INTERACTIVE_TTL, session.max_ttl)
            job_id = self._new_id()
            job = IbmJob(
                id=job_id,
                backend=spec.name,
                program_id="sampler",
                params=params,
                created_t=now,
                session_id=session_id,
                cost=cost,
                result=sampler_result(results, job_id, support_qiskit),
                failure=refused[1] if refused else failure,
                failure_code=refused[0] if refused else 1010,
                shots=shots,
            )
            if refused is not None:
                queue.refuse(job_id, now)
            else:
                queue.submit(
                    job_id,
                    now,
                    shots,
                    fails=failure is not None,
                    dedication=dedication,
                    vendor_cancels=cancels,
                )
            self._jobs[job_id] = job
            self._created[job_id] = job
            if session_id is not None:
                self._sessions[session_id].jobs.append(job_id)
        return job_id

    def _new_id(self) -> str:
        return "".join(self._ids.choice(_ID_LETTERS) for _ in range(20))

    def _session_takes(self, session_id: str, spec: IbmBackendSpec, now: float) -> None:
        """Refuse a job for a session that cannot take it (lock held)."""
        session = self._sessions.get(session_id)
        if session is None:
            raise refuse(1217, f"Session {session_id} not found.", 404)
        if session.backend != spec.name:
            raise refuse(1217, f"Session {session_id} runs on {session.backend}, not {spec.name}.")
        if not session.accepting_jobs or self._session_state(session, now) == "closed":
            raise refuse(1217)

    def job(self, job_id: str | None) -> IbmJob:
        """The job, or IBM's "not found"."""
        with self._lock:
            return self._job(job_id)

    def _job(self, job_id: str | None) -> IbmJob:
        job = self._jobs.get(job_id or "")
        if job is None:
            raise refuse(1291, f"Job {job_id} not found.")
        return job

    def _status(self, job: IbmJob, now: float) -> tuple[str, Any]:
        progress = self._queues[job.backend].progress(job.id, now)
        return _STATUS[progress.status], progress

    def _describe(self, job: IbmJob, now: float, with_params: bool) -> dict[str, Any]:
        status, progress = self._status(job, now)
        state: dict[str, Any] = {"status": status}
        if status == "Failed":
            state.update(reason=job.failure or "Job failed", reason_code=job.failure_code)
        elif status == "Cancelled":
            state["reason"] = "Job was cancelled"
        doc: dict[str, Any] = {
            "id": job.id,
            "backend": job.backend,
            "state": state,
            "status": status,
            "program": {"id": job.program_id},
            "created": ibm_time(timestamp(self.clock, job.created_t)),
            "runtime": "",
            "cost": job.cost,
            "tags": [],
            "user_id": "flux-quantum-emulator",
            "private": False,
        }
        if with_params:
            doc["params"] = job.params
        if job.session_id is not None:
            doc["session_id"] = job.session_id
        if progress.started_at is not None and progress.ended_at is not None:
            doc["usage"] = {"seconds": round(progress.ended_at - progress.started_at, 3)}
        return doc

    def job_document(self, job_id: str | None, with_params: bool) -> dict[str, Any]:
        """What IBM answers about one job now."""
        with self._lock:
            job = self._job(job_id)
            return self._describe(job, self.clock.now(), with_params)

    def list_jobs(self, query: JobQuery, with_params: bool) -> list[tuple[float, dict[str, Any]]]:
        """The jobs ``query`` matches, oldest created first, each as (created, document)."""
        with self._lock:
            now = self.clock.now()
            rows = []
            for job in self._jobs.values():
                created = timestamp(self.clock, job.created_t)
                status, _ = self._status(job, now)
                checks = (
                    query.backend in (None, job.backend),
                    query.session_id in (None, job.session_id),
                    query.program in (None, job.program_id),
                    query.pending is None or query.pending == (status in _PENDING),
                    query.created_after is None or created > query.created_after,
                    query.created_before is None or created < query.created_before,
                )
                if all(checks):
                    rows.append((job.created_t, self._describe(job, now, with_params)))
        return rows

    def cancel_job(self, job_id: str | None) -> None:
        with self._lock:
            job = self._job(job_id)
            now = self.clock.now()
            status, _ = self._status(job, now)
            if status not in _PENDING:
                raise refuse(1000, f"Job {job.id} is {status} and cannot be cancelled.", 409)
            self._queues[job.backend].cancel(job.id, now)

    def delete_job(self, job_id: str | None) -> None:
        with self._lock:
            job = self._job(job_id)
            status, _ = self._status(job, self.clock.now())
            if status in _PENDING:
                raise refuse(
                    1000, f"Job {job.id} is {status}; only finished jobs are deleted.", 409
                )
            del self._jobs[job.id]

    def job_result(self, job_id: str | None) -> str:
        """A completed job's result (RuntimeEncoder or plain JSON, as the job asked);
        IBM's refusal before."""
        with self._lock:
            job = self._job(job_id)
            status, _ = self._status(job, self.clock.now())
        if status != "Completed" or job.result is None:
            raise refuse(1291, f"Job {job.id} has no results ({status}).")
        return job.result

    # -- sessions -------------------------------------------------------------------------------

    def open_session(self, spec: IbmBackendSpec, mode: str, max_ttl: int) -> dict[str, Any]:
        """A new session on ``spec``'s backend; its document."""
        with self._lock:
            sid = self._new_id()
            session = IbmSession(sid, spec.name, mode, max_ttl, self.clock.now())
            self._sessions[sid] = session
            return self._session_doc(session, self.clock.now())

    def _session(self, session_id: str | None) -> IbmSession:
        session = self._sessions.get(session_id or "")
        if session is None:
            raise refuse(1217, f"Session {session_id} not found.", 404)
        return session

    def _activated(self, session: IbmSession, now: float) -> float | None:
        """When the session's first job started running (lock held)."""
        starts = [
            self._queues[session.backend].progress(job, now).started_at
            for job in session.jobs
            if job in self._jobs
        ]
        started = [s for s in starts if s is not None]
        return min(started) if started else None

    def _session_state(self, session: IbmSession, now: float) -> str:
        if session.closed_t is not None:
            return "closed"
        activated = self._activated(session, now)
        if activated is not None and now - activated >= session.max_ttl:
            return "closed"
        if not session.accepting_jobs:
            pending = any(
                self._status(self._jobs[j], now)[0] in _PENDING
                for j in session.jobs
                if j in self._jobs
            )
            return "inactive" if pending else "closed"
        if activated is None:
            return "open"
        if session.mode == "dedicated":
            held = self._queues[session.backend].held_by(now)
            return "active" if held == session.id else "inactive"
        return "active"

    def _session_doc(self, session: IbmSession, now: float) -> dict[str, Any]:
        activated = self._activated(session, now)
        state = self._session_state(session, now)
        active_ttl = session.max_ttl if activated is None else session.max_ttl - (now - activated)
        doc: dict[str, Any] = {
            "id": session.id,
            "backend_name": session.backend,
            "mode": session.mode,
            "state": state,
            "accepting_jobs": session.accepting_jobs and state != "closed",
            "max_ttl": session.max_ttl,
            "interactive_ttl": INTERACTIVE_TTL,
            "active_ttl": max(0, int(active_ttl)),
            "started_at": ibm_time(timestamp(self.clock, session.created_t)),
            "user_id": "flux-quantum-emulator",
            "timestamps": [],
        }
        if activated is not None:
            doc["activated_at"] = ibm_time(timestamp(self.clock, activated))
            doc["elapsed_time"] = round(now - activated, 3)
        if session.closed_t is not None:
            doc["closed_at"] = ibm_time(timestamp(self.clock, session.closed_t))
        if session.cancelled:
            doc["state_reason"] = "cancelled"
        return doc

    def session_document(self, session_id: str | None) -> dict[str, Any]:
        """What IBM answers about one session now."""
        with self._lock:
            session = self._session(session_id)
            return self._session_doc(session, self.clock.now())

    def set_accepting(self, session_id: str | None, accepting: bool) -> None:
        """Let a session take more jobs or not; a closed one cannot be reopened."""
        with self._lock:
            session = self._session(session_id)
            if self._session_state(session, self.clock.now()) == "closed" and accepting:
                raise refuse(1217)
            session.accepting_jobs = accepting

    def close_session(self, session_id: str | None) -> None:
        """Close now: queued and running jobs of the session are cancelled."""
        with self._lock:
            session = self._session(session_id)
            now = self.clock.now()
            for job_id in session.jobs:
                job = self._jobs.get(job_id)
                if job is not None and self._status(job, now)[0] in _PENDING:
                    self._queues[job.backend].cancel(job_id, now)
                    session.cancelled = True
            session.accepting_jobs = False
            if session.closed_t is None:
                session.closed_t = now
            self._queues[session.backend].release(session.id, now)
