"""Fakes of the outside world for the service's unit tier: a Flux instance in memory, a
scripted vendor, a manual clock and inline workers. They stand in for Flux, the vendor,
time and threads; the service's own code runs unchanged (``QuantumService`` and every
part of it).

``FakeFlux`` keeps held jobs and their eventlogs the way the quantum plugin and Flux do
(t/service/test_fluxside.py runs the same cases against both): the plugin's list shows held jobs
only, release and fail are all-or-nothing over the ids given, events go to held jobs and
must be ``qpu-*`` ones (after the release only ``qpu-cost``, until the job ends),
``held_records`` carry a job's ``qpu-*`` events only, memos and annotations go to active
jobs only, ``session_jobs`` leaves out jobs that ended before ``since``, and
``qpu-release`` is written by the "plugin" on release. ``ScriptedVendor`` runs a queue model on the manual clock (each
device: tasks ahead at creation and a service time), returns the same task for a token
it has seen (as Braket's clientToken does), records every call, and fails the calls a
test scripts. It models Braket Direct windows (``add_window``): a task created with a
window's ARN skips the public queue, waits QUEUED until the window opens, runs after the
window's earlier tasks, and is CANCELLED at the end if it did not start by then; an
unknown ARN or one on another device is refused as Braket refuses it; every create
records the ARN it was given (``creates``). ``Harness`` drives the service like its reactor would: tick, then run the
completions, as the clock advances.
"""

from __future__ import annotations

import errno
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.catalog import Catalog, Device, parse_catalog
from flux_quantum.compiler import CompilePool, DeviceTarget
from flux_quantum.errors import CommandError
from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import Released, ReleaseInfo
from flux_quantum.service import QuantumService, ServiceOptions
from flux_quantum.service.fluxside import AFTER_RELEASE, ClusterView, JobRecord
from flux_quantum.service.meters import Meters
from flux_quantum.service.sessionkeys import SessionKeys
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    SessionOpening,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    Vendor,
    VendorSession,
)
from flux_quantum.vendors.errors import (
    AccessDenied,
    InvalidRequest,
    NotFound,
    VendorUnavailable,
)

OWNER = 1000


class Clock:
    """Seconds since the epoch, moved only by ``advance``."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


# --- Flux ----------------------------------------------------------------------------------


@dataclass
class FakeJob:
    id: int
    userid: int
    request: Any
    t_submit: float
    jobspec: dict[str, Any]
    follow: int | None = None
    state: str = "held"  # held | released | failed | cancelled
    events: list[events.Event] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict)
    release: dict[str, Any] | None = None
    note: str | None = None
    t_run: float = 0.0
    annotations: dict[str, Any] = field(default_factory=dict)  # persistent memos
    ended: bool = False  # a released job that ran and finished (INACTIVE)
    t_end: float | None = None  # when it left the instance (cancelled, failed, ended)
    # Its other unresolved dependencies as the plugin lists them; None: not read yet.
    dependencies: list[str] | None = field(default_factory=list)


def _outcome(call: Callable[..., Any], *args: Any) -> Exception | None:
    """A pipelined request's outcome: None, or the error the single call raised."""
    try:
        call(*args)
    except (CommandError, OSError) as exc:
        return exc
    return None


class FakeFlux:
    """``FluxSide`` in memory."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.jobs: dict[int, FakeJob] = {}
        self._ids = itertools.count(1001)
        self.graph: frozenset[str] = frozenset()
        self.cluster_view: ClusterView | None = None
        self.list_error: Exception | None = None
        self._held: list[HeldJob] = []
        self.before_release: Callable[[list[int]], Any] | None = None
        self.journal: list[tuple[str, Any]] = []  # shared with the vendor: call order

    # -- the test's verbs

    def submit(
        self,
        request: Any = None,
        *,
        userid: int = OWNER,
        nodes: int = 1,
        follow: int | None = None,
        cwd: str = "/tmp",
        dependencies: Sequence[str] | None = (),
    ) -> int:
        """``dependencies``: the job's other Flux dependencies (``after-success=...``),
        unresolved; None: the plugin has not read them yet (just loaded)."""
        jobid = next(self._ids)
        system: dict[str, Any] = {"cwd": cwd}
        if request is not None:
            system["qpu"] = request
        jobspec = {
            "resources": [{"type": "node", "count": nodes, "with": [{"type": "core", "count": 1}]}],
            "attributes": {"system": system},
        }
        job = FakeJob(jobid, userid, request, self.clock(), jobspec, follow=follow)
        job.dependencies = None if dependencies is None else list(dependencies)
        job.events.append(events.Event("submit", self.clock(), {"userid": userid}))
        self.jobs[jobid] = job
        return jobid

    def dependencies_read(self, jobid: int, dependencies: Sequence[str] = ()) -> None:
        """The plugin read the job's dependencies from the job-manager (after a load)."""
        self.jobs[jobid].dependencies = list(dependencies)

    def resolve(self, jobid: int, dependency: str) -> None:
        """One of the job's other dependencies is satisfied (``dependency-remove``)."""
        job = self.jobs[jobid]
        assert job.dependencies is not None and dependency in job.dependencies
        job.dependencies.remove(dependency)
        job.events.append(
            events.Event("dependency-remove", self.clock(), {"description": dependency})
        )

    def never(self, jobid: int, dependency: str) -> None:
        """The dependency can never be satisfied: Flux raises the job's exception and it
        ends in DEPEND."""
        job = self.jobs[jobid]
        job.state = "failed"
        job.note = f"dependency {dependency} can never be satisfied"
        job.t_end = self.clock()
        job.events.append(events.Event("exception", self.clock(), {"type": "dependency"}))
        job.events.append(events.Event("clean", self.clock(), {}))

    def cancel(self, jobid: int) -> None:
        job = self.jobs[jobid]
        job.state = "cancelled"
        job.t_end = self.clock()
        job.events.append(events.Event("clean", self.clock(), {}))

    def finish(self, jobid: int) -> None:
        """A released job ran and ended."""
        job = self.jobs[jobid]
        job.ended = True
        job.t_end = self.clock()
        job.events.append(events.Event("clean", self.clock(), {}))

    def names(self, jobid: int) -> list[str]:
        return [e.name for e in self.jobs[jobid].events]

    def decoded(self, jobid: int, name: str) -> list[Any]:
        out = []
        for event in self.jobs[jobid].events:
            if event.name == name:
                record = events.decode(event)
                assert record is not None, f"malformed {name}: {event.context}"
                out.append(record)
        return out

    def last(self, jobid: int, name: str) -> Any:
        found = self.decoded(jobid, name)
        assert found, f"{jobid}: no {name} in {self.names(jobid)}"
        return found[-1]

    # -- FluxSide

    def held(self) -> list[HeldJob]:
        """As the plugin with generations: the same list object while the held set has
        not moved."""
        if self.list_error is not None:
            raise self.list_error
        jobs = [
            HeldJob(
                j.id,
                j.userid,
                j.request,
                j.t_submit,
                j.follow,
                None if j.dependencies is None else tuple(sorted(j.dependencies)),
            )
            for j in self.jobs.values()
            if j.state == "held"
        ]
        if jobs != self._held:
            self._held = jobs
        return self._held

    def record(self, jobid: int) -> JobRecord | None:
        job = self.jobs.get(jobid)
        if job is None:
            return None
        return JobRecord.from_lookup(jobid, [e.to_dict() for e in job.events], job.jobspec)

    def records(self, ids: Sequence[int]) -> dict[int, JobRecord | None]:
        return {jobid: self.record(jobid) for jobid in ids}

    def held_records(self, ids: Sequence[int]) -> dict[int, JobRecord | None]:
        """As the plugin's ``records``: the jobspec and the ``qpu-*`` events only."""
        out: dict[int, JobRecord | None] = {}
        for jobid in ids:
            job = self.jobs.get(jobid)
            entries = [e.to_dict() for e in job.events] if job is not None else []
            out[jobid] = (
                None
                if job is None
                else JobRecord.from_lookup(jobid, entries, job.jobspec, qpu_only=True)
            )
        return out

    def post_event(self, jobid: int, name: str, context: Mapping[str, Any]) -> None:
        """As the plugin: a ``qpu-*`` event to a held job; after the release only the
        events the job-manager takes from the owner (``AFTER_RELEASE``), until the job
        ends (then Flux says there is no such job)."""
        job = self.jobs.get(jobid)
        if not name.startswith("qpu-"):
            raise CommandError(f"event: event name must be 'qpu-*', got {name!r}")
        if job is None or job.state != "held":
            if name not in AFTER_RELEASE:
                raise CommandError(f"event: job {jobid} is not held for a QPU")
            if job is None or not self._active(job):
                raise OSError(errno.ENOENT, f"job {jobid}: no such active job")
        job.events.append(events.Event(name, self.clock(), dict(context)))
        self.journal.append(("event", (jobid, name)))

    def post_events(
        self, items: Sequence[tuple[int, str, Mapping[str, Any]]]
    ) -> list[Exception | None]:
        self.journal.append(("post_events", len(items)))
        return [_outcome(self.post_event, *item) for item in items]

    def memo(self, jobid: int, memo: Mapping[str, Any]) -> None:
        job = self.jobs.get(jobid)
        if job is None or not self._active(job):
            raise OSError(errno.ENOENT, "no such job")
        job.memo.update(memo)

    def memos(self, items: Sequence[tuple[int, Mapping[str, Any]]]) -> list[Exception | None]:
        self.journal.append(("memos", len(items)))
        return [_outcome(self.memo, *item) for item in items]

    def annotate(self, jobid: int, memo: Mapping[str, Any]) -> None:
        job = self.jobs.get(jobid)
        if job is None or not self._active(job):
            raise OSError(errno.ENOENT, "no such job")
        for key, value in memo.items():  # as Flux: a null value removes the key
            if value is None:
                job.annotations.pop(key, None)
            else:
                job.annotations[key] = value

    @staticmethod
    def _active(job: FakeJob) -> bool:
        return job.state in ("held", "released") and not job.ended

    def alive(self, ids: Iterable[int]) -> set[int]:
        return {i for i in ids if i in self.jobs and self._active(self.jobs[i])}

    def session_jobs(self, userid: int, since: float) -> list[int]:
        """``userid``'s jobs, active or ended after ``since``, naming a session."""
        return [
            j.id
            for j in self.jobs.values()
            if j.userid == userid
            and j.annotations.get("qpu_session")
            and (j.t_end is None or j.t_end > since)
        ]

    def reservation_jobs(self) -> dict[int, tuple[str, int]]:
        return {
            j.id: (j.annotations["qpu_reservation"], j.userid)
            for j in self.jobs.values()
            if j.state == "released" and not j.ended and j.annotations.get("qpu_reservation")
        }

    def _take(self, ids: list[int], verb: str) -> list[FakeJob]:
        jobs = [self.jobs.get(i) for i in ids]
        if any(j is None or j.state != "held" for j in jobs):
            raise CommandError(f"{verb}: a job is not held")
        return jobs  # type: ignore[return-value]

    def release(
        self,
        ids: list[int],
        task: str,
        device: str,
        info: Mapping[str, Any],
        resources: list[Any] | None = None,
    ) -> list[int]:
        if self.before_release is not None:
            hook, self.before_release = self.before_release, None
            hook(ids)
        for job in self._take(ids, "release"):
            job.state = "released"
            job.release = {"task": task, "device": device, "info": dict(info)}
            if resources is not None:
                job.release["resources"] = resources
            job.events.append(
                events.Event(events.RELEASE, self.clock(), {"task": task, "device": device})
            )
        self.journal.append(("release", tuple(ids)))
        return list(ids)

    def fail(self, ids: list[int], note: str) -> list[int]:
        for job in self._take(ids, "fail"):
            job.state = "failed"
            job.note = note
            job.t_end = self.clock()
            job.events.append(
                events.Event(
                    "exception", self.clock(), {"type": "qpu", "severity": 0, "note": note}
                )
            )
        return list(ids)

    def graph_devices(self) -> frozenset[str]:
        return self.graph

    def qpu_resources(self, jobspec: Mapping[str, Any], devices: list[str]) -> list[Any]:
        return [*jobspec.get("resources", []), *({"type": "qpu", "device": d} for d in devices)]

    def set_device_up(self, device: str, up: bool, slots: int | None = None) -> None:
        self.journal.append(("graph", (device, up) if slots is None else (device, up, slots)))

    def start_times(self, ids: Iterable[int]) -> dict[int, float]:
        return {i: self.jobs[i].t_run for i in ids if i in self.jobs}

    def cluster(self, now: float) -> ClusterView:
        if self.cluster_view is None:
            raise OSError(38, "no scheduler")
        return self.cluster_view


# --- the vendor ------------------------------------------------------------------------------


@dataclass
class QueueModel:
    """A device's queue: ``depth`` tasks ahead of each new task, ``service`` seconds each.

    ``refill``: other users' jobs that join the backlog per job served, in [0, 1); a
    saturated backend (0.9) has a pending count that falls at a tenth of the pace its
    jobs are served (the IBM fake's ``probe``). ``run``: how long our own task runs, in
    seconds (None: one ``service``); shorter than ``service``, a late poll misses RUNNING
    as it does on a real QPU.
    """

    depth: int = 0
    service: float = 10.0
    status: DeviceStatus = DeviceStatus.ONLINE
    reason: str | None = None
    refill: float = 0.0
    run: float | None = None
    # (available, max) slots the device publishes (QRMI's ResourceCapacity), or None.
    capacity: tuple[int, int] | None = None
    # When the queue stood still: (from, to) with to None while it still stands (PAUSED).
    stalls: list[tuple[float, float | None]] = field(default_factory=list)

    def stalled(self, since: float, now: float) -> float:
        """Seconds of ``since``..``now`` during which the queue stood still."""
        return sum(
            max(0.0, min(now, end if end is not None else now) - max(since, start))
            for start, end in self.stalls
        )


@dataclass
class FakeTask:
    ref: TaskRef
    created: float
    ahead: int
    service: float
    cancelled: bool = False
    failed: str | None = None
    run: float | None = None
    reservation: str | None = None
    programs: tuple[tuple[str, int], ...] = ()  # a merged task's (submit_set)


@dataclass
class FakeWindow:
    """A Braket Direct window of one device, by ARN."""

    device: str
    start: float
    end: float


class ScriptedVendor(Vendor):
    """A vendor on the manual clock; ``fail(operation, error, times)`` scripts failures."""

    name = "local"

    def __init__(self, clock: Clock, queues: Mapping[str, QueueModel], journal: list) -> None:
        self.clock = clock
        self.queues = dict(queues)
        self.tasks: dict[str, FakeTask] = {}
        self.by_token: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.journal = journal
        self.failures: dict[str, list[BaseException]] = {}
        self._ids = itertools.count(1)
        self.windows: dict[str, FakeWindow] = {}
        # Every create call: (time, token, the reservation ARN it was given).
        self.creates: list[tuple[float, str, str | None]] = []
        self.set_limit: int | None = None  # programs a merged task may hold
        self.lose_answers = 0  # creates that land but whose answer is lost

    def pause(self, device: str, reason: str = "maintenance") -> None:
        """The device takes no work from now on (QRMI's Paused): its queue stands still."""
        q = self.queues[device]
        q.status, q.reason = DeviceStatus.PAUSED, reason
        q.stalls.append((self.clock(), None))

    def resume(self, device: str) -> None:
        q = self.queues[device]
        q.status, q.reason = DeviceStatus.ONLINE, None
        start, _ = q.stalls[-1]
        q.stalls[-1] = (start, self.clock())

    def add_window(self, arn: str, device: str, start: float, end: float) -> None:
        self.windows[arn] = FakeWindow(device, start, end)

    def fail(self, operation: str, error: BaseException | None, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` raise ``error`` (None: succeed, so
        that a later call in the script fails)."""
        self.failures.setdefault(operation, []).extend([error] * times)

    def _call(self, operation: str, what: str) -> None:
        self.calls.append((operation, what))
        self.journal.append(("vendor", (operation, what)))
        pending = self.failures.get(operation)
        if pending:
            error = pending.pop(0)
            if error is not None:
                raise error

    def count(self, operation: str) -> int:
        return sum(1 for op, _ in self.calls if op == operation)

    def probe(self, device: Device) -> DeviceSnapshot:
        self._call("probe", device.name)
        q = self.queues[device.name]
        waiting = sum(1 for t in self.tasks.values() if t.ref.device == device.name)
        return DeviceSnapshot(
            device=device.name,
            status=q.status,
            reason=q.reason,
            queue_depth=q.depth + waiting,
            price=device.price,
            t=self.clock(),
            capacity=q.capacity,
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
        self.creates.append((self.clock(), token, reservation))
        self._call("submit", token)
        if reservation is not None:
            window = self.windows.get(reservation)
            if window is None or window.device != device.name:
                raise InvalidRequest(
                    f"reservation {reservation} is not valid for device {device.id}",
                    vendor="local",
                    vendor_code="ValidationException",
                )
        return self._task(device, token, reservation=reservation)

    def _task(
        self,
        device: Device,
        token: str,
        *,
        reservation: str | None = None,
        programs: Sequence[tuple[str, int]] = (),
    ) -> TaskRef:
        """The task ``token`` made before, else a new one at the back of the device's
        queue (a window's: no place in it); ``lose_answers``: made, its answer lost."""
        if token in self.by_token:
            return self.tasks[self.by_token[token]].ref
        ref = self._new_task(device, token, reservation=reservation, programs=programs)
        if self.lose_answers:
            self.lose_answers -= 1
            raise VendorUnavailable(
                "create: the answer was lost", vendor="local", vendor_code="ConnectionReset"
            )
        return ref

    def _new_task(
        self,
        device: Device,
        token: str,
        *,
        reservation: str | None,
        programs: Sequence[tuple[str, int]],
    ) -> TaskRef:
        q = self.queues[device.name]
        task_id = f"arn:task/{device.name}/{next(self._ids)}"
        ref = TaskRef("local", device.name, task_id, token)
        ahead = 0 if reservation is not None else q.depth
        self.tasks[task_id] = FakeTask(
            ref,
            self.clock(),
            ahead,
            q.service,
            run=q.run,
            reservation=reservation,
            programs=tuple(programs),
        )
        self.by_token[token] = task_id
        return ref

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        """One task for every ``(program, shots)``; the same token gets the same task.
        ``set_limit``: more programs than that are refused as Braket refuses a set over
        a device's limits."""
        self.creates.append((self.clock(), token, reservation))
        self._call("submit_set", token)
        if self.set_limit is not None and len(programs) > self.set_limit:
            raise InvalidRequest(
                f"program set of {len(programs)} programs is over {self.set_limit}",
                vendor="local",
                vendor_code="ValidationException",
            )
        return self._task(device, token, programs=programs)

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        """Braket's search by the token tag: the task a create with ``token`` made, or
        None; never a create."""
        self._call("lookup", token)
        task_id = self.by_token.get(token)
        return self.tasks[task_id].ref if task_id is not None else None

    def results(self, task: TaskRef) -> list[TaskResult]:
        """Per program of a merged task: its shots, all on a bitstring naming its place
        (``p0``, ``p1``, ...), so a test sees whose counts a job got."""
        self._call("results", task.task_id)
        fake = self.tasks[task.task_id]
        if not fake.programs:
            return [self.result(task)]
        return [
            TaskResult(task=task, counts={f"p{i}": shots})
            for i, (_, shots) in enumerate(fake.programs)
        ]

    def window_start(self, task: FakeTask) -> float:
        """When a window's task starts: at the window's start or its creation, after the
        window's earlier tasks (one at a time)."""
        assert task.reservation is not None
        window = self.windows[task.reservation]
        at = window.start
        for other in sorted(self.tasks.values(), key=lambda t: t.created):
            if other.reservation != task.reservation or other.cancelled or other.failed:
                continue
            at = max(at, other.created)
            if other is task:
                return at
            at += other.run if other.run is not None else other.service
        return at

    def state_of(self, task: FakeTask) -> tuple[TaskState, int | None]:
        if task.cancelled:
            return TaskState.CANCELLED, None
        if task.failed:
            return TaskState.FAILED, None
        if task.reservation is not None:
            # No place in the public queue: QUEUED until it starts in its window, and
            # cancelled at the end when it did not start by then (as Braket does).
            window = self.windows[task.reservation]
            start, now = self.window_start(task), self.clock()
            if start >= window.end:
                return (TaskState.CANCELLED if now >= window.end else TaskState.QUEUED), None
            if now < start:
                return TaskState.QUEUED, None
            run = task.run if task.run is not None else task.service
            return (TaskState.RUNNING if now < start + run else TaskState.COMPLETED), None
        q = self.queues[task.ref.device]
        elapsed = self.clock() - task.created - q.stalled(task.created, self.clock())
        served = math.floor(elapsed / task.service) if task.service else 10**9
        position = task.ahead - served
        if position >= 1:
            return TaskState.QUEUED, position
        if task.run is not None:
            started = task.created + task.ahead * task.service
            running = self.clock() - started < task.run
            return (TaskState.RUNNING if running else TaskState.COMPLETED), None
        if position == 0:
            return TaskState.RUNNING, None
        return TaskState.COMPLETED, None

    def poll(self, task: TaskRef) -> TaskSnapshot:
        self._call("poll", task.task_id)
        fake = self.tasks.get(task.task_id)
        if fake is None:
            raise NotFound(
                f"no task {task.task_id}", vendor="local", vendor_code="ResourceNotFound"
            )
        state, position = self.state_of(fake)
        return TaskSnapshot(task, state, position, message=fake.failed, t=self.clock())

    def cancel(self, task: TaskRef) -> None:
        self._call("cancel", task.task_id)
        self.tasks[task.task_id].cancelled = True

    def result(self, task: TaskRef) -> TaskResult:
        self._call("result", task.task_id)
        return TaskResult(task=task, counts={"00": 5, "11": 5})

    def attach(self, task_id: str) -> TaskRef:
        self._call("attach", task_id)
        fake = self.tasks.get(task_id)
        if fake is None:
            raise NotFound(f"no task {task_id}", vendor="local", vendor_code="ResourceNotFound")
        return fake.ref


class IbmLikeVendor(ScriptedVendor):
    """IBM's semantics on the manual clock: no queue position (``poll`` gives None), a
    backend's pending count from ``probe``, a create that is NOT idempotent (every call
    makes a job; ``find_task`` lists jobs by the token their program carries), and
    sessions (``open_plan``: a dedicated one is refused with 1352 and batch is used).
    ``lose_answers``: creates that land but whose answer is lost (a crash, a timeout)."""

    name = "ibm"

    def __init__(self, clock: Clock, queues: Mapping[str, QueueModel], journal: list) -> None:
        super().__init__(clock, queues, journal)
        self.sessions: dict[str, dict[str, Any]] = {}
        self.cost_limits: list[float | None] = []  # what each open_session was given
        self.session_ids = itertools.count(1)
        self.open_plan = False
        self.lose_answers = 0
        self.sent: dict[str, str] = {}  # token -> the program text its create carried
        self.targets: dict[str, DeviceTarget] = {}  # device -> what ``target`` gives

    def target(self, device: Device) -> DeviceTarget:
        self._call("target", device.name)
        return self.targets.get(device.name) or super().target(device)

    def reports_positions(self, device: Device) -> bool:
        return False

    def probe(self, device: Device) -> DeviceSnapshot:
        """The pending count: a fresh job would have ``depth`` ahead; with jobs of ours
        queued, the place of the last of them (the jobs before it, and it)."""
        self._call("probe", device.name)
        q = self.queues[device.name]
        places = [
            self.pending(t, place)
            for t in self.tasks.values()
            if t.ref.device == device.name
            for state, place in [self.state_of(t)]
            if state is TaskState.QUEUED and place is not None
        ]
        return DeviceSnapshot(
            device=device.name,
            status=q.status,
            reason=q.reason,
            queue_depth=max(places) if places else q.depth,
            price=device.price,
            t=self.clock(),
        )

    def pending(self, task: FakeTask, place: int) -> int:
        """The backend's pending count behind ``place`` (ours queued there): with
        ``refill``, the count falls at ``1 - refill`` of the pace jobs are served, one
        floor over the whole, so it never rises while ours waits."""
        refill = self.queues[task.ref.device].refill
        if not refill or not task.service:
            return place
        served = (self.clock() - task.created) / task.service
        return task.ahead - math.floor((1.0 - refill) * served)

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        self.sent[token] = program_text
        return self._create(device, token, None)

    def _create(self, device: Device, token: str, session: VendorSession | None) -> TaskRef:
        self._call("submit", token)
        q = self.queues[device.name]
        task_id = f"ibm-job-{next(self._ids)}"
        ref = TaskRef("ibm", device.name, task_id, token)
        self.tasks[task_id] = FakeTask(ref, self.clock(), q.depth, q.service, run=q.run)
        self.by_token.setdefault(token, task_id)
        if session is not None:
            self.sessions[session.session_id]["jobs"].append(task_id)
        if self.lose_answers:
            self.lose_answers -= 1
            raise VendorUnavailable(
                "ibm create: the answer was lost", vendor="ibm", vendor_code="TimeoutError"
            )
        return ref

    def find_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        self._call("find", token)
        for fake in self.tasks.values():
            if fake.ref.token == token and fake.ref.device == device.name:
                return fake.ref
        return None

    def poll(self, task: TaskRef) -> TaskSnapshot:
        snap = super().poll(task)
        return TaskSnapshot(task, snap.state, None, message=snap.message, t=snap.t)

    def open_session(
        self, device: Device, mode: str | None = None, *, cost_limit: float | None = None
    ) -> SessionOpening:
        requested = mode or "dedicated"
        self._call("open_session", requested)
        self.cost_limits.append(cost_limit)
        used, reason = requested, None
        if self.open_plan and requested == "dedicated":
            used = "batch"
            reason = (
                f"IBM refused a dedicated session on {device.name} (1352); using a batch session"
            )
        session_id = f"secret-session-{next(self.session_ids)}"
        self.sessions[session_id] = {"mode": used, "open": True, "jobs": []}
        return SessionOpening(
            requested, used, VendorSession("ibm", device.name, used, session_id), reason
        )

    def submit_in(
        self, session: VendorSession, device: Device, program_text: str, shots: int, token: str
    ) -> TaskRef:
        return self._create(device, token, session)

    def close_session(self, session: VendorSession) -> None:
        self._call("close_session", session.fingerprint)
        self.sessions[session.session_id]["open"] = False

    def session_of(self, task: TaskRef) -> VendorSession | None:
        self._call("session_of", task.task_id)
        for session_id, info in self.sessions.items():
            if task.task_id in info["jobs"]:
                closed = not info["open"]
                return VendorSession("ibm", task.device, info["mode"], session_id, closed=closed)
        return None

    def session_environment(self, session: VendorSession) -> dict[str, str]:
        return {"QRMI_JOB_ACQUISITION_TOKEN": session.session_id}

    def open_sessions(self) -> list[str]:
        return [sid for sid, info in self.sessions.items() if info["open"]]


class NoCredentials(Vendor):
    """A vendor the service has no credentials for, answering as the real ones then do:
    a probe says UNREACHABLE (NoCredentials), every task verb is refused. The real vendor
    object would read the process's environment and, if it found credentials there,
    reach the network on the wall clock (retries, timeouts): outside a unit test's world,
    and with the vendor's device answering, a policy choice that differs."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.calls: list[tuple[str, str]] = []

    def _refuse(self, operation: str, what: str) -> AccessDenied:
        self.calls.append((operation, what))
        return AccessDenied(
            f"{self.name}: no credentials", vendor=self.name, vendor_code="NoCredentials"
        )

    def probe(self, device: Device) -> DeviceSnapshot:
        self.calls.append(("probe", device.name))
        return DeviceSnapshot(
            device=device.name,
            status=DeviceStatus.UNREACHABLE,
            reason="NoCredentials",
            price=device.price,
            t=self.clock(),
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
        raise self._refuse("submit", token)

    def poll(self, task: TaskRef) -> TaskSnapshot:
        raise self._refuse("poll", task.task_id)

    def cancel(self, task: TaskRef) -> None:
        raise self._refuse("cancel", task.task_id)

    def result(self, task: TaskRef) -> TaskResult:
        raise self._refuse("result", task.task_id)

    def attach(self, task_id: str) -> TaskRef:
        raise self._refuse("attach", task_id)

    def lookup_task(self, device: Device, token: str, *, since: float) -> TaskRef | None:
        raise self._refuse("lookup", token)


# --- threads --------------------------------------------------------------------------------


class InlineWorkers:
    """Runs each call at once in the caller's thread; its completion waits for
    ``drain()``, as a worker's would wait for the reactor."""

    def __init__(self) -> None:
        self.busy = 0
        self.queued = 0
        self._done: list[tuple[Callable[..., None], Any, BaseException | None]] = []
        # Worker threads finish in any order: True hands completions back last first.
        self.reverse = False

    def submit(self, call: Callable[[], Any], done: Callable[[Any, BaseException | None], None]):
        try:
            result, error = call(), None
        except BaseException as exc:
            result, error = None, exc
        self._done.append((done, result, error))

    def drain(self) -> list[tuple[Callable[..., None], Any, BaseException | None]]:
        out, self._done = self._done, []
        return out[::-1] if self.reverse else out

    def stop(self) -> None:
        pass


# --- the harness -------------------------------------------------------------------------------

CATALOG = """
devices:
  - {name: alpha, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/fake/alpha", class: qpu, qubits: 20, slots: 4,
     price: {per_task: 0.3, per_shot: 0.001}, properties: {drain_seconds_per_task: 10}}
  - {name: beta, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/fake/beta", class: qpu, qubits: 20, slots: 4,
     price: {per_task: 0.3, per_shot: 0.002}, properties: {drain_seconds_per_task: 10}}
  - {name: solo, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/fake/solo", class: qpu, qubits: 20, slots: 1,
     price: {per_task: 0.3, per_shot: 0.001}, properties: {drain_seconds_per_task: 10}}
  - {name: sim, vendor: local, id: "arn:aws:braket:::device/quantum-simulator/fake/sim", class: simulator, qubits: 30, slots: 4,
     price: {per_minute: 0.075}, properties: {drain_seconds_per_task: 1}}
  - {name: fez, vendor: ibm, id: ibm_fez, class: qpu, qubits: 156, slots: 4,
     price: {per_minute: 96}, properties: {drain_seconds_per_task: 10}}
"""

FAST = ServiceOptions(
    scan_interval=1.0,
    poll_min=0.5,
    poll_cold_max=2.0,
    poll_max=5.0,
    device_check_interval=2.0,
    cluster_interval=1.0,
    retry_base=1.0,
    retry_max=4.0,
)


class Harness:
    """One service on a FakeFlux, a ScriptedVendor and a Clock."""

    def __init__(
        self,
        queues: Mapping[str, QueueModel] | None = None,
        options: ServiceOptions = FAST,
        flux: FakeFlux | None = None,
        vendor: ScriptedVendor | None = None,
        clock: Clock | None = None,
        catalog: Catalog | None = None,
        ibm: IbmLikeVendor | None = None,
        *,
        site: SitePolicy | None = None,
        userid: int = OWNER,
        instance_owner: bool = True,
        vendor_names: Sequence[str] = ("local", "ibm"),
        session_keys: SessionKeys | None = None,
        meters: Meters | None = None,
        compiler: CompilePool | None = None,
        compile_lane: Callable[[Callable[[], Any], Callable[..., None]], None] | None = None,
    ) -> None:
        """``site``: the site policy the service enforces; ``userid`` and
        ``instance_owner``: who the service runs as (a guest's own service: not the
        instance owner); ``vendor_names``: which of the fakes it has (the service has
        ``NoCredentials`` for the others, never the real vendor, whose answers would
        depend on the environment, the network and the wall clock); ``session_keys``: the
        service's kept session ids (in memory, handed to the restarted service as its
        directory would be); ``meters``: the metrics' hooks (none by default);
        ``compiler``: the compile stage's workers (None: the stage is off);
        ``compile_lane``: where its calls go (None: ``workers``, as every call)."""
        self.clock = clock or Clock()
        self.flux = flux or FakeFlux(self.clock)
        default = {"alpha": QueueModel(3), "beta": QueueModel(5), "solo": QueueModel(1)}
        default["sim"] = QueueModel(0, service=1.0)
        default["fez"] = QueueModel(3)
        self.vendor = vendor or ScriptedVendor(
            self.clock, {**default, **(queues or {})}, self.flux.journal
        )
        self.ibm = ibm or IbmLikeVendor(
            self.clock, {**default, **(queues or {})}, self.flux.journal
        )
        self.catalog = catalog or parse_catalog(CATALOG)
        self.logs: list[tuple[int, str]] = []
        self.workers = InlineWorkers()
        self.keys = session_keys if session_keys is not None else SessionKeys()
        self.service = QuantumService(
            self.flux,
            self.catalog,
            options,
            self.workers,
            vendors={
                name: fake if name in vendor_names else NoCredentials(name, self.clock)
                for name, fake in (("local", self.vendor), ("ibm", self.ibm))
            },
            clock=self.clock,
            monotonic=self.clock,  # a probe's deadline on the manual clock too
            log=lambda level, msg: self.logs.append((level, msg)),
            userid=userid,
            site=site,
            instance_owner=instance_owner,
            session_keys=self.keys,
            meters=meters,
            compiler=compiler,
            compile_lane=compile_lane,
        )

    def restart(self, options: ServiceOptions = FAST, site: SitePolicy | None = None) -> Harness:
        """A new service (its predecessor is gone, state and all) on the same world;
        ``site``: the site policy it enforces (its predecessor's ledger file, opened
        again)."""
        return Harness(
            options=options,
            flux=self.flux,
            vendor=self.vendor,
            clock=self.clock,
            catalog=self.catalog,
            ibm=self.ibm,
            session_keys=self.keys.survivor(),
            site=site,
        )

    def step(self) -> None:
        self.service.tick()
        for _ in range(10):
            if not self.workers._done:
                break
            self.service.completions()
            self.service.tick()

    def run(self, seconds: float, dt: float = 0.25) -> None:
        end = self.clock() + seconds
        self.step()
        while self.clock() < end:
            self.clock.advance(dt)
            self.step()

    def until(self, what: Callable[[], Any], limit: float = 600.0, dt: float = 0.25) -> float:
        """Run until ``what()`` is true; the (manual) seconds it took."""
        start = self.clock()
        self.step()
        while not what():
            if self.clock() - start > limit:
                raise AssertionError(f"not reached within {limit}s of manual time")
            self.clock.advance(dt)
            self.step()
        return self.clock() - start

    def state(self, jobid: int) -> str:
        return self.flux.jobs[jobid].state


def at_front(device: str, **more: Any) -> dict[str, Any]:
    """A job's ``qpu`` request for the local vendor's ``device``, released at the front
    of its queue (``release_at`` 1)."""
    return {"device": f"local:{device}", "release_at": 1, **more}


def released_record(h: Harness, job: int) -> JobRecord:
    """What Flux says of a job the "plugin" released: its jobspec with the release's
    ``attributes.system`` keys (the task, its device, ``qpu_info``)."""
    fake = h.flux.jobs[job]
    system = fake.jobspec["attributes"]["system"]
    info = ReleaseInfo.decode(fake.release["info"])
    system.update(Released(fake.release["task"], fake.release["device"], info).to_system())
    return JobRecord(job, tuple(fake.events), system, jobspec=fake.jobspec)
