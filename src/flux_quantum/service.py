"""The handlers: find held qpu jobs, run their producer quantum tasks, release them in time.

This module owns the handler service: for every job the ``quantum`` jobtap plugin holds
it chooses a device (policy), records an idempotency token in the job's eventlog, creates
the vendor task, watches its queue (one poll per task, however many jobs ride it), keeps
volatile memos (``qpu_device``, ``qpu_task``, ``qpu_position``, ``qpu_wait``) on every
waiting job, and releases the jobs through the plugin at the release point, or fails
them over / fails them with the vendor's reason. It rebuilds everything it needs from
the eventlogs after a crash or restart, so it keeps no state of its own on disk.

Threads: all state lives on the reactor thread (``QuantumService``, ``FluxJobs``);
vendor I/O and program-file reads run in ``VendorWorkers`` daemon threads, which hand
results back through a pipe the reactor watches. It must never call a vendor or read a
user's file on the reactor thread, never touch a Flux handle from a worker, never let an
exception escape into the reactor (a Python broker module that fails takes the broker
down), and never create a second task for a recorded token.

Discovery is level-triggered: every ``scan_interval`` the plugin's ``list`` (the one
authority on which jobs are held) is compared with what the service tracks. Jobs that
appear are adopted (their eventlog replayed), jobs that vanish were released, failed or
cancelled (their eventlog says which). A journal stream would be quicker to notice a
job, but it is owner-only (a user running ``flux quantum service run`` in a multi-user
instance could not use it), ends on every job-manager reload and can be missed; a list
is one cheap RPC, works for guests and can not drift.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import queue
import syslog
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from flux_quantum.catalog import Catalog, Device, load_catalog
from flux_quantum.errors import CommandError, FluxQuantumError
from flux_quantum.plugin import HeldJob, PluginClient
from flux_quantum.policy import DrainEstimator, Explanation, NoDeviceError, select_device
from flux_quantum.poller import (
    RELEASE_DONE,
    RELEASE_PREDICT,
    AdaptivePoller,
    PollSchedule,
    release_reached,
    tasks_to_release,
)
from flux_quantum.request import QpuRequest, RequestError, parse_request
from flux_quantum.vendors import make_vendor, probe_devices
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    RetryBudget,
    TaskRef,
    TaskSnapshot,
    TaskState,
    Vendor,
)
from flux_quantum.vendors.errors import NotFound, VendorError

Log = Callable[[int, str], None]
Clock = Callable[[], float]

# Queue positions that earn a qpu-queue event when first reached (not every poll).
MILESTONES: tuple[int, ...] = (100, 10, 1)

# Submitted when a request names no program: a Bell pair, enough to prove the path works.
DEFAULT_PROGRAM_NAME = "bell"
DEFAULT_PROGRAM = """OPENQASM 3.0;
bit[2] c;
qubit[2] q;
h q[0];
cnot q[0], q[1];
c = measure q;
"""

MAX_PROGRAM_BYTES = 1 << 20
MEMO_KEYS = ("qpu_device", "qpu_task", "qpu_position", "qpu_wait", "qpu_state")


class ServiceError(FluxQuantumError):
    """The service cannot start (bad option, unreadable catalog)."""


class ProgramError(FluxQuantumError):
    """A job's qpu.program file cannot be read; the message names the file."""


# --- options --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceOptions:
    """How the service behaves; every field has a ``key=value`` module argument."""

    catalog: str | None = None
    emulator_url: str | None = None
    scan_interval: float = 1.0
    device_check_interval: float = 15.0
    cluster_interval: float = 5.0
    poll_min: float = 0.5
    poll_max: float = 300.0
    poll_cold_max: float = 30.0
    workers: int = 4
    vendor_timeout: float = 20.0
    probe_timeout: float = 15.0
    retry_base: float = 2.0
    retry_max: float = 60.0
    max_tasks: int = 3
    group_linger: float = 60.0
    tick: float = 0.2
    startup_default: float = 1.0

    def __post_init__(self) -> None:
        for name in (
            "scan_interval",
            "device_check_interval",
            "cluster_interval",
            "poll_min",
            "poll_max",
            "poll_cold_max",
            "vendor_timeout",
            "probe_timeout",
            "retry_base",
            "retry_max",
            "tick",
            "startup_default",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ServiceError(f"{_arg_name(name)} must be a number > 0, got {value!r}")
        if self.group_linger < 0:
            raise ServiceError(f"group-linger must be >= 0, got {self.group_linger!r}")
        for name in ("workers", "max_tasks"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ServiceError(f"{_arg_name(name)} must be an integer >= 1")
        try:
            self.schedule()
        except ValueError as exc:
            raise ServiceError(
                f"poll-min <= poll-cold-max <= poll-max is required ({exc})"
            ) from None

    def schedule(self) -> PollSchedule:
        return PollSchedule(
            min_interval=self.poll_min,
            max_interval=self.poll_max,
            cold_max_interval=min(self.poll_cold_max, self.poll_max),
        )

    @classmethod
    def from_args(cls, args: Iterable[str]) -> ServiceOptions:
        """Options from ``key=value`` words (broker module arguments); unknown keys fail."""
        values: dict[str, Any] = {}
        names = [f.name for f in cls.__dataclass_fields__.values() if f.init]
        for word in args:
            key, sep, text = word.partition("=")
            name = key.replace("-", "_")
            if not sep or name not in names:
                known = ", ".join(_arg_name(n) for n in names)
                raise ServiceError(f"unknown service option {word!r} (known: {known})")
            if name in _TEXT_OPTIONS:
                values[name] = text or None
                continue
            try:
                values[name] = int(text) if name in _INT_OPTIONS else float(text)
            except ValueError:
                raise ServiceError(f"{key} must be a number, got {text!r}") from None
        return cls(**values)

    def to_args(self) -> list[str]:
        """``key=value`` words that ``from_args`` turns back into these options."""
        words = []
        default = ServiceOptions()
        for name, f in self.__dataclass_fields__.items():
            if not f.init:
                continue
            value = getattr(self, name)
            if value != getattr(default, name) and value is not None:
                text = str(value)
                if any(c.isspace() for c in text):
                    raise ServiceError(f"{_arg_name(name)} may not contain white space: {text!r}")
                words.append(f"{_arg_name(name)}={text}")
        return words

    def to_dict(self) -> dict[str, Any]:
        return {
            _arg_name(name): getattr(self, name)
            for name, f in self.__dataclass_fields__.items()
            if f.init
        }


_TEXT_OPTIONS = frozenset({"catalog", "emulator_url"})
_INT_OPTIONS = frozenset({"workers", "max_tasks"})


def _arg_name(name: str) -> str:
    return name.replace("_", "-")


# --- records read from Flux -------------------------------------------------------------


@dataclass(frozen=True)
class JobSize:
    """Classical resources a job asks for (from its jobspec)."""

    nodes: int = 0
    cores: int = 0
    exclusive_nodes: bool = False


@dataclass(frozen=True)
class JobRecord:
    """What Flux says about one job when the service adopts it (or looks after it)."""

    id: int
    events: tuple[Mapping[str, Any], ...] = ()
    system: Mapping[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    size: JobSize = JobSize()
    jobspec: Mapping[str, Any] = field(default_factory=dict)

    def has_event(self, name: str) -> bool:
        return any(event.get("name") == name for event in self.events)


def jobspec_size(resources: Any) -> JobSize:
    """Nodes and cores a jobspec's resources ask for (counts' minimums)."""
    nodes = cores = 0
    exclusive = False

    def count_of(entry: Mapping[str, Any]) -> int:
        count = entry.get("count", 1)
        if isinstance(count, Mapping):
            count = count.get("min", 1)
        return int(count) if isinstance(count, int) and count > 0 else 1

    def walk(entries: Any, mult: int) -> None:
        nonlocal nodes, cores, exclusive
        if not isinstance(entries, list):
            return
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            n = mult * count_of(entry)
            if entry.get("type") == "node":
                nodes += n
                exclusive = exclusive or bool(entry.get("exclusive"))
            elif entry.get("type") == "core":
                cores += n
            walk(entry.get("with"), n)

    walk(resources, 1)
    return JobSize(nodes=nodes, cores=cores, exclusive_nodes=exclusive)


def _idset_count(text: Any) -> int:
    """How many ids an RFC 22 idset string such as ``0-3,7`` holds."""
    total = 0
    for part in str(text).strip("[]").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            total += int(high or low) - int(low) + 1
        except ValueError:
            continue
    return total


@dataclass(frozen=True)
class ClusterView:
    """The instance's classical resources at time ``t``, as the scheduler sees them.

    ``releases`` lists running jobs as (expiration, cores), soonest first; an
    expiration of ``inf`` means the job has no time limit.
    """

    t: float
    cores_per_node: int
    free_cores: int
    releases: tuple[tuple[float, int], ...] = ()

    def cores_for(self, size: JobSize) -> int:
        if size.exclusive_nodes or (size.nodes and not size.cores):
            return max(size.cores, size.nodes * max(1, self.cores_per_node))
        return max(1, size.cores)

    def wait_for(self, cores: int, now: float) -> float | None:
        """Seconds until ``cores`` cores are free, if running jobs end at their limits;
        0 when they are free now, None when no limit says when."""
        available = self.free_cores
        if cores <= available:
            return 0.0
        for expiration, freed in self.releases:
            if not math.isfinite(expiration):
                return None
            available += freed
            if available >= cores:
                return max(0.0, expiration - now)
        return None

    @classmethod
    def from_flux(cls, status: Mapping[str, Any], running: Sequence[Mapping[str, Any]], t: float):
        def cores(rset: Any) -> tuple[int, int]:
            if not isinstance(rset, Mapping):
                return 0, 0
            total = per_node = 0
            for entry in rset.get("execution", {}).get("R_lite", []):
                ranks = _idset_count(entry.get("rank", ""))
                n = _idset_count(entry.get("children", {}).get("core", ""))
                total += ranks * n
                per_node = max(per_node, n)
            return total, per_node

        total, per_node = cores(status.get("all"))
        busy, _ = cores(status.get("allocated"))
        down, _ = cores(status.get("down"))
        releases = []
        for job in running:
            expiration = float(job.get("expiration") or 0.0)
            releases.append((expiration if expiration > 0 else math.inf, int(job.get("ncores", 1))))
        releases.sort()
        return cls(
            t=t,
            cores_per_node=per_node,
            free_cores=max(0, total - busy - down),
            releases=tuple(releases),
        )


# --- eventlog replay (recovery) ---------------------------------------------------------


@dataclass(frozen=True)
class SlotHistory:
    """What a job's eventlog says about one program's latest task attempt."""

    index: int
    attempt: int = 0
    token: str | None = None
    device: str | None = None
    vendor: str | None = None
    task: str | None = None
    queued_at: float | None = None
    exclude: tuple[str, ...] = ()
    device_class: str | None = None
    milestones: tuple[int, ...] = ()

    @property
    def progress(self) -> tuple[int, bool, bool]:
        return (self.attempt, self.token is not None, self.task is not None)


@dataclass(frozen=True)
class History:
    """A job's qpu story, replayed from its eventlog."""

    unit: int | None = None
    slots: Mapping[int, SlotHistory] = field(default_factory=dict)
    facts: frozenset[tuple[str, int, int]] = frozenset()
    released: bool = False


def replay(events: Iterable[Mapping[str, Any]]) -> History:
    """The qpu-* events of one eventlog folded into a History (pure)."""
    unit: int | None = None
    slots: dict[int, SlotHistory] = {}
    facts: set[tuple[str, int, int]] = set()
    released = False
    for event in events:
        name = event.get("name")
        ctx = event.get("context") or {}
        if not isinstance(ctx, Mapping):
            continue
        if name == "qpu-release":
            released = True
            continue
        if name == "qpu-join" and isinstance(ctx.get("unit"), int):
            unit = ctx["unit"]
            continue
        if name not in ("qpu-submit", "qpu-task", "qpu-failover", "qpu-queue"):
            continue
        index = ctx.get("index", 0)
        if not isinstance(index, int) or index < 0:
            continue
        slot = slots.get(index, SlotHistory(index))
        attempt = ctx.get("attempt", slot.attempt)
        attempt = attempt if isinstance(attempt, int) else slot.attempt
        if name == "qpu-submit":
            if isinstance(ctx.get("unit"), int):
                unit = ctx["unit"]
            if attempt < slot.attempt:
                continue
            slot = SlotHistory(
                index,
                attempt=attempt,
                token=ctx.get("token"),
                device=ctx.get("device"),
                vendor=ctx.get("vendor"),
                exclude=tuple(ctx.get("exclude") or slot.exclude),
                device_class=ctx.get("class", slot.device_class),
                milestones=slot.milestones if attempt == slot.attempt else (),
            )
        elif name == "qpu-task":
            if isinstance(ctx.get("unit"), int):
                unit = ctx["unit"]
            if attempt != slot.attempt or ctx.get("token") != slot.token:
                continue
            slot = replace(
                slot,
                task=ctx.get("task"),
                device=ctx.get("device", slot.device),
                queued_at=float(event.get("timestamp", 0.0)) or None,
            )
        elif name == "qpu-failover":
            if attempt <= slot.attempt and slot.token is not None and attempt != slot.attempt + 1:
                continue
            slot = SlotHistory(
                index,
                attempt=attempt,
                exclude=tuple(ctx.get("exclude") or ()),
                device_class=ctx.get("class", slot.device_class),
            )
        elif name == "qpu-queue":
            milestone = ctx.get("milestone")
            if isinstance(milestone, int) and attempt == slot.attempt:
                slots[index] = replace(
                    slot, milestones=tuple(sorted({*slot.milestones, milestone}))
                )
            continue
        slots[index] = slot
        facts.add((name, index, attempt))
    return History(unit=unit, slots=slots, facts=frozenset(facts), released=released)


def merge_histories(histories: Iterable[History]) -> dict[int, SlotHistory]:
    """Per program, the most advanced attempt any member of a unit recorded."""
    merged: dict[int, SlotHistory] = {}
    for history in histories:
        for index, slot in history.slots.items():
            best = merged.get(index)
            if best is None or slot.progress > best.progress:
                if best is not None and slot.attempt == best.attempt:
                    slot = replace(
                        slot, milestones=tuple(sorted({*slot.milestones, *best.milestones}))
                    )
                merged[index] = slot
    return merged


def task_token(unit: int, t_submit: float, index: int, attempt: int) -> str:
    """The idempotency token of one task attempt: stable across restarts of the service
    and of the instance (job id and submit time), unique across instances (job ids
    repeat between instances, their submit microseconds do not)."""
    return f"fq-{unit}-{int(t_submit * 1e6)}-{index}-{attempt}"


def compact_explanation(explanation: Explanation, limit: int = 6) -> dict[str, Any]:
    """The policy's explanation, short enough for an eventlog entry."""
    rows = []
    for c in explanation.candidates[:limit]:
        rows.append(
            {
                "device": c.device,
                "status": c.status,
                "queue": c.queue_depth,
                "wait": None if c.expected_wait is None else round(c.expected_wait, 1),
                "cost": round(c.cost, 4),
                "verdict": c.reason,
            }
        )
    out: dict[str, Any] = {
        "policy": explanation.policy,
        "order": explanation.order,
        "chosen": explanation.chosen,
        "candidates": rows,
    }
    if len(explanation.candidates) > limit:
        out["more"] = len(explanation.candidates) - limit
    return out


def read_program(cwd: str | None, path: str | None) -> str:
    """The OpenQASM text of ``path`` (relative to the job's cwd); the default circuit
    when no program was given. Runs in a worker: the file may sit on slow storage."""
    if path is None:
        return DEFAULT_PROGRAM
    full = Path(path) if os.path.isabs(path) or not cwd else Path(cwd) / path
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_PROGRAM_BYTES + 1)
    except OSError as exc:
        raise ProgramError(
            f"qpu.program {path!r}: cannot read {full} ({exc.strerror or exc})"
        ) from None
    if len(data) > MAX_PROGRAM_BYTES:
        raise ProgramError(f"qpu.program {path!r}: larger than {MAX_PROGRAM_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProgramError(f"qpu.program {path!r}: not UTF-8 text") from None


# --- worker threads ---------------------------------------------------------------------


class VendorWorkers:
    """Daemon threads for blocking calls; results come back on the reactor thread.

    ``submit(call, done)`` runs ``call()`` in a worker; ``done(result, error)`` runs
    later inside ``drain()``, which the host calls from the reactor when ``fileno()``
    is readable. Daemon threads: a call stuck in a vendor socket never blocks exit.
    """

    def __init__(self, count: int) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.busy = 0
        self.queued = 0
        self._threads = [
            threading.Thread(target=self._run, name=f"qpu-worker-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def fileno(self) -> int:
        return self._read

    def submit(self, call: Callable[[], Any], done: Callable[[Any, BaseException | None], None]):
        with self._lock:
            self.queued += 1
        self._calls.put((call, done))

    def _run(self) -> None:
        while not self._stopped.is_set():
            item = self._calls.get()
            if item is None:
                return
            call, done = item
            with self._lock:
                self.queued -= 1
                self.busy += 1
            try:
                result, error = call(), None
            except BaseException as exc:  # handed to the reactor, which decides
                result, error = None, exc
            with self._lock:
                self.busy -= 1
            if self._stopped.is_set():
                return
            self._done.put((done, result, error))
            # A full pipe means the reactor is already woken.
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._write, b"\0")

    def drain(self) -> list[tuple[Callable[[Any, BaseException | None], None], Any, Any]]:
        """Completed calls, oldest first (reactor thread)."""
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._stopped.set()
        for _ in self._threads:
            self._calls.put(None)
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


class StartupMeter:
    """How long released jobs take to start: the lead ``release_at=predict`` releases by.

    The service notes when it released a job and later reads the job's ``t_run`` from
    job-list; the estimate is the 90th percentile of the last ``keep`` samples, or
    ``default`` until ``min_samples`` are in. Only the start, not the program's own
    start-up: the idle time the lead hides is from the job's start to its result.
    """

    def __init__(self, default: float, keep: int = 20, min_samples: int = 3) -> None:
        self.default = default
        self.keep = keep
        self.min_samples = min_samples
        self.samples: list[float] = []
        self.pending: dict[int, float] = {}

    def released(self, jobid: int, t: float) -> None:
        self.pending[jobid] = t

    def started(self, jobid: int, t_run: float) -> None:
        t_release = self.pending.pop(jobid, None)
        if t_release is not None and t_run > 0:
            self.samples = [*self.samples, max(0.0, t_run - t_release)][-self.keep :]

    def forget_older_than(self, t: float) -> None:
        self.pending = {j: r for j, r in self.pending.items() if r >= t}

    def estimate(self) -> float:
        if len(self.samples) < self.min_samples:
            return self.default
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


# --- the Flux side ----------------------------------------------------------------------


class FluxJobs:
    """Everything the service asks of Flux, on one handle (reactor thread only)."""

    GRAPH_CACHE_SECONDS = 10.0

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.plugin = PluginClient(handle)
        self._graph: tuple[float, frozenset[str]] = (-math.inf, frozenset())

    def held(self) -> list[HeldJob]:
        return self.plugin.list()

    def record(self, jobid: int) -> JobRecord | None:
        """Eventlog and current jobspec of a job; None if Flux does not know it."""
        import flux.constants

        payload = {
            "id": jobid,
            "keys": ["eventlog", "jobspec"],
            "flags": flux.constants.FLUX_JOB_LOOKUP_CURRENT,
        }
        try:
            rsp = self.handle.rpc("job-info.lookup", payload).get()
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EPERM):
                return None
            raise
        events = []
        for line in str(rsp.get("eventlog") or "").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        jobspec = rsp.get("jobspec")
        if isinstance(jobspec, str):
            jobspec = json.loads(jobspec)
        jobspec = jobspec if isinstance(jobspec, Mapping) else {}
        system = jobspec.get("attributes", {}).get("system", {})
        return JobRecord(
            id=jobid,
            events=tuple(events),
            system=system,
            cwd=system.get("cwd"),
            size=jobspec_size(jobspec.get("resources")),
            jobspec=jobspec,
        )

    def post_event(self, jobid: int, name: str, context: Mapping[str, Any]) -> None:
        self.plugin.post_event(jobid, name, context)

    def memo(self, jobid: int, memo: Mapping[str, Any]) -> None:
        payload = {"id": jobid, "volatile": True, "memo": dict(memo)}
        self.handle.rpc("job-manager.memo", payload).get()

    def release(
        self,
        ids: list[int],
        task: str,
        device: str,
        info: Mapping[str, Any],
        resources: list[Any] | None = None,
    ) -> list[int]:
        return self.plugin.release(ids, task=task, device=device, info=info, resources=resources)

    def graph_devices(self) -> frozenset[str]:
        """Devices that have qpu vertices in Fluxion's graph (``flux quantum graph
        load``); empty when there are none or no Fluxion. Cached for a few seconds."""
        t, devices = self._graph
        if time.monotonic() - t < self.GRAPH_CACHE_SECONDS:
            return devices
        from flux_quantum import graph

        try:
            devices = frozenset(v.device for v in graph.find_qpus(self.handle))
        except (FluxQuantumError, OSError, KeyError, ValueError):
            devices = frozenset()
        self._graph = (time.monotonic(), devices)
        return devices

    def qpu_resources(self, jobspec: Mapping[str, Any], devices: list[str]) -> list[Any]:
        """The job's resources plus one slot vertex per task's device, checked with
        Fluxion (a request it can never satisfy would kill the job after its task ran)."""
        from flux_quantum import graph

        resources = graph.qpu_resources(jobspec.get("resources") or [], devices)
        graph.check_satisfiable(self.handle, {**jobspec, "resources": resources})
        return resources

    def start_times(self, ids: Iterable[int]) -> dict[int, float]:
        """``t_run`` of jobs that started (0.0: not yet); jobs Flux lost are left out."""
        times = {}
        for jobid in ids:
            try:
                job = self.handle.rpc("job-list.list-id", {"id": jobid, "attrs": ["t_run"]}).get()
            except OSError:
                continue
            times[jobid] = float(job.get("job", {}).get("t_run") or 0.0)
        return times

    def set_device_up(self, device: str, up: bool) -> None:
        from flux_quantum import graph

        graph.set_device_status(self.handle, device, up)

    def fail(self, ids: list[int], note: str) -> list[int]:
        return self.plugin.fail(ids, note)

    def cluster(self, now: float) -> ClusterView:
        import flux.constants

        status = self.handle.rpc("sched.resource-status", {}).get()
        payload = {
            "max_entries": 0,
            "attrs": ["expiration", "ncores"],
            "since": 0.0,
            "constraint": {"states": [flux.constants.FLUX_JOB_STATE_RUNNING]},
        }
        running = self.handle.rpc("job-list.list", payload).get().get("jobs", [])
        return ClusterView.from_flux(status, running, now)


# --- the service's state ----------------------------------------------------------------


class Phase(StrEnum):
    SELECT = "select"  # choosing a device
    SUBMIT = "submit"  # token recorded, creating the task
    TRACK = "track"  # polling the task
    READY = "ready"  # at its release point, waiting for the unit's other tasks
    DONE = "done"


class UnitState(StrEnum):
    ACTIVE = "active"
    RELEASED = "released"
    FAILED = "failed"
    ABANDONED = "abandoned"  # every job left (cancelled): its tasks were cancelled


@dataclass
class Slot:
    """One program of a unit, and the vendor task currently running it."""

    index: int
    program: str | None
    phase: Phase = Phase.SELECT
    text: str | None = None
    attempt: int = 0
    token: str | None = None
    device: Device | None = None
    task: TaskRef | None = None
    attached: bool = True
    snapshot: TaskSnapshot | None = None
    queued_at: float | None = None  # when the task was created: max_wait counts from here
    cancelled: bool = False
    submit_posted: bool = False
    exclude: set[str] = field(default_factory=set)
    device_class: str | None = None
    poller: AdaptivePoller | None = None
    due: float = 0.0
    busy: bool = False
    generation: int = 0
    errors: int = 0
    retry_posted: bool = False
    wait_posted: str | None = None
    milestones: set[int] = field(default_factory=set)
    ready_reason: str | None = None
    expected_wait: float | None = None
    running_seen: float | None = None  # first poll that saw the task RUNNING
    last_poll: float = 0.0

    def live_task(self) -> TaskRef | None:
        """The task if the vendor may still run it (and we did not cancel it)."""
        if self.task is None or self.cancelled:
            return None
        if self.snapshot is not None and self.snapshot.terminal:
            return None
        return self.task


@dataclass
class Member:
    """A held job riding a unit."""

    id: int
    userid: int
    size: JobSize = JobSize()
    jobspec: Mapping[str, Any] = field(default_factory=dict)
    facts: set[tuple[str, int, int]] = field(default_factory=set)
    memo: dict[str, Any] = field(default_factory=dict)


@dataclass
class Unit:
    """Jobs that share tasks: one job, a qpu.group, or a leader and its followers."""

    id: int
    userid: int
    t_submit: float
    request: QpuRequest
    cwd: str | None
    slots: list[Slot]
    jobs: dict[int, Member] = field(default_factory=dict)
    state: UnitState = UnitState.ACTIVE
    released_at: float | None = None
    release: dict[str, Any] | None = None

    @property
    def group_key(self) -> tuple[int, str] | None:
        return (self.userid, self.request.group) if self.request.group else None


@dataclass
class DeviceWatch:
    device: Device
    due: float = 0.0
    busy: bool = False
    snapshot: DeviceSnapshot | None = None


@dataclass
class Counters:
    adopted: int = 0
    released: int = 0
    failed: int = 0
    tasks_created: int = 0
    tasks_attached: int = 0
    tasks_cancelled: int = 0
    polls: int = 0
    failovers: int = 0
    vendor_errors: int = 0


# --- the service --------------------------------------------------------------------------


class QuantumService:
    """The handlers' logic, driven by ``tick()`` and worker completions (reactor thread)."""

    def __init__(
        self,
        jobs: FluxJobs,
        catalog: Catalog,
        options: ServiceOptions,
        workers: VendorWorkers,
        *,
        vendors: Mapping[str, Vendor] | None = None,
        clock: Clock = time.time,
        log: Log | None = None,
        userid: int | None = None,
    ) -> None:
        self.jobs = jobs
        # Credentials stay with their owner: the service acts on its own user's jobs
        # only; in a multi-user instance each user runs `flux quantum service run`.
        self.userid = os.getuid() if userid is None else userid
        self.catalog = catalog
        self.options = options
        self.workers = workers
        self.clock = clock
        self._log = log or (lambda level, msg: None)
        self._vendors: dict[str, Vendor] = dict(vendors or {})
        self.estimator = DrainEstimator()
        self.schedule = options.schedule()
        self.units: dict[int, Unit] = {}
        self.member_unit: dict[int, int] = {}
        self.released_groups: dict[tuple[int, str], Unit] = {}
        self.devices: dict[str, DeviceWatch] = {}
        self._device_up: dict[str, bool] = {}
        self.counters = Counters()
        self.cluster: ClusterView | None = None
        self._cluster_due = 0.0
        self._scan_due = 0.0
        self._pending_cancels: list[tuple[TaskRef, int, float]] = []
        self.startup = StartupMeter(options.startup_default)
        self._startup_due = 0.0
        self.started = clock()
        self.last_error: str | None = None
        self._scan_error: str | None = None

    # -- small helpers

    def log(self, level: int, msg: str) -> None:
        with contextlib.suppress(Exception):
            self._log(level, msg)

    def vendor(self, name: str) -> Vendor:
        vendor = self._vendors.get(name)
        if vendor is None:
            environ = dict(os.environ)
            if self.options.emulator_url:
                environ["FLUX_QUANTUM_EMULATOR_URL"] = self.options.emulator_url
            vendor = make_vendor(
                name,
                self.catalog,
                timeout=self.options.vendor_timeout,
                retry=RetryBudget(attempts=3, base_delay=0.5, max_delay=4.0, deadline=20.0),
                environ=environ,
            )
            self._vendors[name] = vendor
        return vendor

    def _backoff(self, errors: int) -> float:
        return min(self.options.retry_max, self.options.retry_base * 2 ** max(0, errors - 1))

    def _post_all(self, unit: Unit, name: str, context: Mapping[str, Any]) -> int:
        """Post one event on every job of the unit; returns how many took it."""
        posted = 0
        for member in list(unit.jobs.values()):
            if self._post(member, name, context):
                posted += 1
        return posted

    def _post(self, member: Member, name: str, context: Mapping[str, Any]) -> bool:
        try:
            self.jobs.post_event(member.id, name, context)
        except (CommandError, OSError) as exc:
            # Most likely the job just left (cancelled); the next scan sorts it out.
            self.log(syslog.LOG_DEBUG, f"{member.id}: cannot post {name}: {exc}")
            self._scan_due = 0.0
            return False
        index, attempt = context.get("index"), context.get("attempt")
        if isinstance(index, int) and isinstance(attempt, int):
            member.facts.add((name, index, attempt))
        return True

    def _call(
        self,
        unit: Unit,
        slot: Slot,
        call: Callable[[], Any],
        handler: Callable[[Unit, Slot, Any, BaseException | None], None],
    ) -> None:
        slot.busy = True
        generation = slot.generation

        def done(result: Any, error: BaseException | None) -> None:
            slot.busy = False
            if unit.state is not UnitState.ACTIVE or generation != slot.generation:
                if isinstance(result, TaskRef):
                    self._cancel(result, "its jobs are gone")
                return
            handler(unit, slot, result, error)

        self.workers.submit(call, done)

    # -- the main loop

    def tick(self) -> None:
        """Do whatever is due: scan for jobs, start vendor calls, release ready units."""
        now = self.clock()
        if now >= self._scan_due:
            self._scan_due = now + self.options.scan_interval
            self.scan()
        need_cluster = False
        for unit in list(self.units.values()):
            for slot in unit.slots:
                if unit.state is UnitState.ACTIVE and slot.phase is Phase.TRACK:
                    need_cluster = True
                    self._check_lead(unit, slot, now)
                if unit.state is UnitState.ACTIVE and slot.phase is Phase.TRACK:
                    self._check_max_wait(unit, slot, now)
                if unit.state is not UnitState.ACTIVE:
                    break
                if not slot.busy and slot.due <= now:
                    self._step(unit, slot)
            self._maybe_release(unit)
        if need_cluster and now >= self._cluster_due:
            self._cluster_due = now + self.options.cluster_interval
            try:
                self.cluster = self.jobs.cluster(now)
            except Exception as exc:
                self.cluster = None
                self.log(syslog.LOG_DEBUG, f"cluster view unavailable: {exc}")
        self._check_devices(now)
        self._retry_cancels(now)
        self._expire_groups(now)
        self._measure_startup(now)

    def _measure_startup(self, now: float) -> None:
        """Read the start of a few recently released jobs (one RPC each, once a second)."""
        if not self.startup.pending or now < self._startup_due:
            return
        self._startup_due = now + 1.0
        self.startup.forget_older_than(now - 600.0)
        ids = list(self.startup.pending)[:8]
        try:
            times = self.jobs.start_times(ids)
        except Exception as exc:
            self.log(syslog.LOG_DEBUG, f"start times unavailable: {exc}")
            return
        for jobid in ids:
            if jobid not in times:
                self.startup.pending.pop(jobid, None)
            elif times[jobid] > 0:
                self.startup.started(jobid, times[jobid])

    def completions(self) -> None:
        """Run finished worker calls' handlers (reactor thread)."""
        for done, result, error in self.workers.drain():
            try:
                done(result, error)
            except Exception as exc:  # one bad completion must not stop the others
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.log(syslog.LOG_ERR, f"completion failed: {self.last_error}")

    # -- discovery

    def scan(self) -> None:
        """Compare the plugin's held jobs with the tracked ones; adopt and forget."""
        try:
            held = self.jobs.held()
        except (CommandError, OSError) as exc:
            if str(exc) != self._scan_error:
                self._scan_error = str(exc)
                self.log(syslog.LOG_WARNING, f"cannot list held jobs: {exc}")
            return
        self._scan_error = None
        held = [job for job in held if job.userid == self.userid]
        by_id = {job.id: job for job in held}
        for jobid in [j for j in self.member_unit if j not in by_id]:
            self._job_left(jobid)
        new = [job for job in held if job.id not in self.member_unit]
        if new:
            self._adopt(sorted(new, key=lambda j: (j.follow is not None, j.t_submit, j.id)))

    def _adopt(self, new: list[HeldJob]) -> None:
        records: dict[int, tuple[HeldJob, JobRecord, History]] = {}
        for job in new:
            try:
                record = self.jobs.record(job.id)
            except Exception as exc:
                self.log(syslog.LOG_WARNING, f"{job.id}: cannot read eventlog: {exc}")
                continue
            if record is None:
                continue
            records[job.id] = (job, record, replay(record.events))
        # Units recorded in eventlogs whose jobs the service does not track yet (a
        # restart): rebuilt from every member's history at once.
        recovered: dict[int, list[int]] = {}
        for jobid, (_job, _rec, history) in records.items():
            if history.unit is not None and history.unit not in self.units:
                recovered.setdefault(history.unit, []).append(jobid)
        for unit_id, ids in recovered.items():
            try:
                self._recover_unit(unit_id, [records[i] for i in ids])
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.log(syslog.LOG_ERR, f"unit {unit_id}: cannot recover: {self.last_error}")
        for jobid, (job, record, history) in records.items():
            if jobid in self.member_unit:
                continue
            try:
                self._adopt_one(job, record, history)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.log(syslog.LOG_ERR, f"{job.id}: cannot adopt: {self.last_error}")

    def _recover_unit(
        self, unit_id: int, members: list[tuple[HeldJob, JobRecord, History]]
    ) -> None:
        """Rebuild a unit whose jobs' eventlogs name it, from all of them at once."""
        leader = next((m for m in members if m[0].id == unit_id), None)
        owner = leader or next((m for m in members if m[0].follow is None), None)
        request_attr = owner[0].request if owner else None
        t_submit = owner[0].t_submit if owner else members[0][0].t_submit
        if owner is None or owner[0].id != unit_id:
            # The job that started the unit is gone: its jobspec still has the request.
            gone = self._safe_record(unit_id)
            if gone is not None:
                request_attr = gone.system.get("qpu", request_attr)
                t_submit = _submit_time(gone) or t_submit
        request = self._parse(request_attr, [m[0] for m in members])
        if request is None:
            return
        cwd = (owner[1] if owner else members[0][1]).cwd
        unit = self._new_unit(unit_id, members[0][0].userid, t_submit, request, cwd)
        self._restore(unit, merge_histories(m[2] for m in members))
        for job, record, history in members:
            self._add_member(unit, job, record, history, via=None)
        self.log(syslog.LOG_INFO, f"unit {unit_id}: recovered {len(members)} job(s)")
        self._sync_history(unit)
        self._update_memos(unit)

    def _adopt_one(self, job: HeldJob, record: JobRecord, history: History) -> None:
        self.counters.adopted += 1
        recorded = self.units.get(history.unit) if history.unit is not None else None
        if recorded is not None and recorded.state is UnitState.ACTIVE:
            self._join(recorded, job, record, history, via="eventlog")
            return
        if job.follow is not None:
            unit_id = self.member_unit.get(job.follow)
            if unit_id is not None:
                self._join(self.units[unit_id], job, record, history, via="follow")
                return
            self._follow_untracked(job, record)
            return
        request = self._parse(job.request, [job])
        if request is None:
            return
        if request.group is not None:
            key = (job.userid, request.group)
            for unit in self.units.values():
                if unit.state is UnitState.ACTIVE and unit.group_key == key:
                    self._join(unit, job, record, history, via="group")
                    return
            late = self.released_groups.get(key)
            if late is not None and late.release is not None:
                self._release_late(job, late.id, late.release, via="group")
                return
        unit = self._new_unit(job.id, job.userid, job.t_submit, request, record.cwd)
        self._restore(unit, dict(history.slots))
        self._add_member(unit, job, record, history, via=None)
        self._sync_history(unit)
        self._update_memos(unit)

    def _follow_untracked(self, job: HeldJob, record: JobRecord) -> None:
        """A follower whose leader the service does not track: the leader was released
        (ride its task now) or ended without a task (fail)."""
        assert job.follow is not None
        leader = self._safe_record(job.follow)
        system = leader.system if leader else {}
        task = system.get("qpu_task")
        if task:
            release = {
                "task": task,
                "device": system.get("qpu_device"),
                "info": dict(system.get("qpu_info") or {}),
            }
            self._release_late(job, job.follow, release, via="follow")
            return
        if leader is not None and not leader.has_event("clean"):
            return  # still held but not adopted yet (e.g. it failed to parse): next scan
        note = (
            f"qpu: the job this one follows ({job.follow}) ended before its quantum task "
            "was ready, so there is no task to ride"
        )
        self._fail_ids([job.id], note)

    def _release_late(self, job: HeldJob, unit_id: int, release: Mapping[str, Any], via: str):
        """Release a job that joined after its unit was released: same task, at once."""
        member = Member(job.id, job.userid)
        self._post(member, "qpu-join", {"unit": unit_id, "via": via, "late": True})
        try:
            self.jobs.release(
                [job.id], task=release["task"], device=release["device"], info=release["info"]
            )
            self.counters.released += 1
        except (CommandError, OSError) as exc:
            self.log(syslog.LOG_WARNING, f"{job.id}: late release failed: {exc}")

    def _safe_record(self, jobid: int) -> JobRecord | None:
        try:
            return self.jobs.record(jobid)
        except Exception as exc:
            self.log(syslog.LOG_DEBUG, f"{jobid}: lookup failed: {exc}")
            return None

    def _parse(self, attr: Any, jobs: Sequence[HeldJob]) -> QpuRequest | None:
        try:
            return parse_request(attr)
        except RequestError as exc:
            self._fail_ids([j.id for j in jobs], f"qpu: {exc}")
            return None

    def _new_unit(
        self, unit_id: int, userid: int, t_submit: float, request: QpuRequest, cwd: str | None
    ) -> Unit:
        programs: Sequence[str | None] = request.program or (None,)
        slots = [Slot(index=i, program=p) for i, p in enumerate(programs)]
        unit = Unit(unit_id, userid, t_submit, request, cwd, slots)
        self.units[unit_id] = unit
        return unit

    def _restore(self, unit: Unit, histories: Mapping[int, SlotHistory]) -> None:
        """Continue each program where its eventlog left it."""
        for slot in unit.slots:
            h = histories.get(slot.index)
            if h is None:
                continue
            slot.attempt = h.attempt
            slot.exclude = set(h.exclude)
            slot.device_class = h.device_class
            slot.milestones = set(h.milestones)
            device = self.catalog.get(h.device) if h.device else None
            if h.token is not None and device is None:
                # Its device left the catalog: that attempt cannot be followed; the next
                # one (a new token) chooses again.
                self.log(syslog.LOG_WARNING, f"unit {unit.id}: device {h.device} unknown")
                slot.attempt += 1
                if h.device:
                    slot.exclude.add(h.device)
            if h.token is None or device is None:
                slot.phase = Phase.SELECT
                continue
            slot.device = device
            slot.token = h.token
            slot.submit_posted = True
            slot.queued_at = h.queued_at
            if h.task:
                slot.task = TaskRef(device.vendor, device.name, h.task, h.token)
                slot.attached = False
                slot.phase = Phase.TRACK
                slot.poller = AdaptivePoller(
                    device,
                    unit.request.release_at,
                    estimator=self.estimator,
                    schedule=self.schedule,
                )
            else:
                # Recorded, maybe created: the same token finds the same task.
                slot.phase = Phase.SUBMIT

    def _add_member(
        self, unit: Unit, job: HeldJob, record: JobRecord, history: History, via: str | None
    ) -> Member:
        member = Member(
            job.id, job.userid, size=record.size, jobspec=record.jobspec, facts=set(history.facts)
        )
        unit.jobs[job.id] = member
        self.member_unit[job.id] = unit.id
        if via is not None and unit.id != job.id:
            self._post(member, "qpu-join", {"unit": unit.id, "via": via})
        return member

    def _join(self, unit: Unit, job: HeldJob, record: JobRecord, history: History, via: str):
        self._add_member(unit, job, record, history, via=via)
        self._sync_history(unit)
        self._update_memos(unit)
        self.log(syslog.LOG_INFO, f"{job.id}: rides unit {unit.id} ({via})")

    def _sync_history(self, unit: Unit) -> None:
        """Give every job of the unit the qpu-submit/qpu-task facts it lacks, so each
        eventlog alone is enough to recover the unit."""
        for slot in unit.slots:
            facts = []
            if slot.token is not None and slot.device is not None and slot.submit_posted:
                facts.append(("qpu-submit", self._submit_context(unit, slot)))
            if slot.task is not None:
                facts.append(("qpu-task", self._task_context(unit, slot)))
            for name, context in facts:
                for member in list(unit.jobs.values()):
                    if (name, slot.index, slot.attempt) not in member.facts:
                        self._post(member, name, context)

    def _job_left(self, jobid: int) -> None:
        """A tracked job is no longer held: released or failed elsewhere, or cancelled."""
        unit_id = self.member_unit.pop(jobid)
        unit = self.units.get(unit_id)
        if unit is None:
            return
        unit.jobs.pop(jobid, None)
        record = self._safe_record(jobid)
        how = "released elsewhere" if record and record.has_event("qpu-release") else "ended"
        self.log(syslog.LOG_INFO, f"{jobid}: left unit {unit_id} ({how})")
        if unit.jobs or unit.state is not UnitState.ACTIVE:
            return
        if how == "released elsewhere" or unit.release is not None:
            # Released by hand, or part of the unit already released: its task may be
            # read, so keep it running.
            self._finish(unit, UnitState.RELEASED)
            return
        for slot in unit.slots:
            task = slot.live_task()
            if task is not None:
                self._cancel(task, "every job riding it is gone")
        self._finish(unit, UnitState.ABANDONED)

    def _finish(self, unit: Unit, state: UnitState) -> None:
        unit.state = state
        for slot in unit.slots:
            slot.phase = Phase.DONE
            slot.generation += 1
            if slot.task is not None and slot.device is not None:
                self.estimator.forget_task(slot.device.name, slot.task.task_id)
        for jobid in list(unit.jobs):
            self.member_unit.pop(jobid, None)
        self.units.pop(unit.id, None)
        if state is UnitState.RELEASED and unit.group_key is not None:
            self.released_groups[unit.group_key] = unit
        # A device slot may have freed up: selections waiting for one try again now.
        for other in self.units.values():
            for slot in other.slots:
                if slot.phase is Phase.SELECT and slot.wait_posted:
                    slot.due = 0.0

    def _expire_groups(self, now: float) -> None:
        for key, unit in list(self.released_groups.items()):
            if unit.released_at is None or now - unit.released_at > self.options.group_linger:
                del self.released_groups[key]

    # -- per-slot steps

    def _step(self, unit: Unit, slot: Slot) -> None:
        if unit.state is not UnitState.ACTIVE:
            return
        if slot.phase in (Phase.SELECT, Phase.SUBMIT) and slot.text is None:
            path, cwd = slot.program, unit.cwd
            self._call(unit, slot, lambda: read_program(cwd, path), self._loaded)
        elif slot.phase is Phase.SELECT:
            self._start_select(unit, slot)
        elif slot.phase is Phase.SUBMIT:
            # A batch's tasks are submitted in program order (its eventlog reads in
            # that order), whichever device choice came back first.
            if not any(s.phase is Phase.SELECT for s in unit.slots[: slot.index]):
                self._start_submit(unit, slot)
        elif slot.phase is Phase.TRACK:
            self._start_poll(unit, slot)

    def _loaded(self, unit: Unit, slot: Slot, text: Any, error: BaseException | None) -> None:
        if isinstance(error, ProgramError):
            self._fail_unit(unit, f"qpu: {error}")
            return
        if error is not None:
            raise error
        slot.text = text
        slot.due = 0.0

    def _request_for(self, unit: Unit, slot: Slot) -> QpuRequest:
        """The request as a fail-over sees it: a named device is no longer required
        (its replacement is chosen by min-wait), and ``class`` may be forced."""
        request = unit.request
        if slot.attempt == 0 or request.failover == "fail":
            return request
        changes: dict[str, Any] = {}
        if request.device is not None:
            changes.update(device=None, policy="min-wait")
        if slot.device_class is not None:
            changes["device_class"] = slot.device_class
        return replace(request, **changes) if changes else request

    def _pool(self, slot: Slot) -> list[Device]:
        return [d for d in self.catalog.devices if d.name not in slot.exclude]

    def _in_flight(self, unit: Unit) -> dict[str, int]:
        """Tasks this service watches per device, other units' only: a batch's own
        tasks never block each other (or it could never be released)."""
        counts: dict[str, int] = {}
        for other in self.units.values():
            if other is unit or other.state is not UnitState.ACTIVE:
                continue
            for slot in other.slots:
                if slot.device is not None and slot.phase in (
                    Phase.SUBMIT,
                    Phase.TRACK,
                    Phase.READY,
                ):
                    counts[slot.device.name] = counts.get(slot.device.name, 0) + 1
        return counts

    def _start_select(self, unit: Unit, slot: Slot) -> None:
        from flux_quantum.policy import static_candidates

        request = self._request_for(unit, slot)
        candidates = static_candidates(self._pool(slot), request)
        try:
            vendors = {d.vendor: self.vendor(d.vendor) for d in candidates}
        except (ValueError, FluxQuantumError) as exc:
            self._fail_unit(unit, f"qpu: cannot reach a vendor: {exc}")
            return
        timeout = self.options.probe_timeout

        def probe() -> dict[str, DeviceSnapshot]:
            return probe_devices(candidates, vendors, timeout=timeout)

        self._call(unit, slot, probe, self._selected)

    def _selected(self, unit: Unit, slot: Slot, snapshots: Any, error: Any) -> None:
        if error is not None:
            raise error
        for snapshot in snapshots.values():
            self.estimator.observe(snapshot)
        request = self._request_for(unit, slot)
        pool = self._pool(slot)
        in_flight = self._in_flight(unit)
        try:
            selection = select_device(
                pool, snapshots, request, estimator=self.estimator, in_flight=in_flight
            )
        except NoDeviceError as exc:
            self._no_device(unit, slot, exc, snapshots, in_flight, request)
            return
        chosen = selection.device
        older = self._older_waiters(unit, chosen)
        if older >= chosen.slots - in_flight.get(chosen.name, 0):
            # First come, first served: older jobs waiting for this device's slots
            # take them first.
            reason = f"all {chosen.slots} slot(s) of {chosen.name} in use or promised"
            self._wait(unit, slot, reason)
            return
        slot.device = selection.device
        slot.wait_posted = None
        slot.errors = 0
        context = {
            "index": slot.index,
            "attempt": slot.attempt,
            "device": selection.device.name,
            "explanation": compact_explanation(selection.explanation),
        }
        self._post_all(unit, "qpu-select", context)
        slot.token = task_token(unit.id, unit.t_submit, slot.index, slot.attempt)
        slot.submit_posted = False
        slot.phase = Phase.SUBMIT
        slot.due = 0.0
        self._update_memos(unit)

    def _no_device(
        self,
        unit: Unit,
        slot: Slot,
        exc: NoDeviceError,
        snapshots: Mapping[str, DeviceSnapshot],
        in_flight: Mapping[str, int],
        request: QpuRequest,
    ) -> None:
        """Wait when the obstacle passes by itself (a vendor that did not answer, all
        slots busy); fail over or fail when it does not (offline, out of window, too
        long a queue for max_wait, nothing that matches)."""
        from flux_quantum.policy import static_reason

        transient = []
        for device in self._pool(slot):
            if static_reason(device, request) is not None:
                continue
            snapshot = snapshots.get(device.name)
            if snapshot is not None and snapshot.status is DeviceStatus.UNREACHABLE:
                transient.append(f"{device.name} did not answer ({snapshot.reason})")
            elif (
                snapshot is not None
                and snapshot.available
                and in_flight.get(device.name, 0) >= device.slots
            ):
                transient.append(f"all {device.slots} slot(s) of {device.name} in use")
        if transient:
            self._wait(unit, slot, "; ".join(transient))
            return
        forced = request.device is not None or (
            unit.request.failover == "simulator" and request.device_class != "simulator"
        )
        if unit.request.failover != "fail" and forced and slot.attempt + 1 < self.options.max_tasks:
            device = request.device
            self._failover(unit, slot, device, str(exc))
            return
        self._fail_unit(unit, f"qpu: {exc}")

    def _wait(self, unit: Unit, slot: Slot, reason: str) -> None:
        """No device for this task now, for a reason that passes: try again later."""
        slot.errors += 1
        delay = self._backoff(slot.errors)
        if slot.wait_posted != reason:
            slot.wait_posted = reason
            context = {"index": slot.index, "reason": reason, "retry_in": round(delay, 1)}
            self._post_all(unit, "qpu-wait", context)
        slot.due = self.clock() + delay
        self._update_memos(unit, state=f"waiting: {reason}")

    def _older_waiters(self, unit: Unit, device: Device) -> int:
        """Older units still choosing a device that can only be this one."""
        count = 0
        for other in self.units.values():
            if other is unit or other.state is not UnitState.ACTIVE:
                continue
            if (other.t_submit, other.id) >= (unit.t_submit, unit.id):
                continue
            if other.request.device not in (device.name, device.id):
                continue
            count += sum(1 for s in other.slots if s.phase is Phase.SELECT)
        return count

    def _submit_context(self, unit: Unit, slot: Slot) -> dict[str, Any]:
        assert slot.device is not None
        context: dict[str, Any] = {
            "unit": unit.id,
            "index": slot.index,
            "attempt": slot.attempt,
            "token": slot.token,
            "device": slot.device.name,
            "vendor": slot.device.vendor,
            "shots": unit.request.shots,
            "program": slot.program,
        }
        if slot.program is None:
            context["default_program"] = f"{DEFAULT_PROGRAM_NAME} (the request names no program)"
        if slot.exclude:
            context["exclude"] = sorted(slot.exclude)
        if slot.device_class is not None:
            context["class"] = slot.device_class
        return context

    def _task_context(self, unit: Unit, slot: Slot) -> dict[str, Any]:
        assert slot.task is not None and slot.device is not None
        return {
            "unit": unit.id,
            "index": slot.index,
            "attempt": slot.attempt,
            "token": slot.token,
            "task": slot.task.task_id,
            "device": slot.device.name,
        }

    def _start_submit(self, unit: Unit, slot: Slot) -> None:
        assert slot.device is not None and slot.token is not None and slot.text is not None
        if not slot.submit_posted:
            # The token goes to the eventlog BEFORE the vendor hears of it: a service
            # that dies after the create finds the token and gets the same task back.
            if self._post_all(unit, "qpu-submit", self._submit_context(unit, slot)) == 0:
                slot.due = self.clock() + self.options.scan_interval
                return
            slot.submit_posted = True
        device, text, shots, token = slot.device, slot.text, unit.request.shots, slot.token
        try:
            vendor = self.vendor(device.vendor)
        except (ValueError, FluxQuantumError) as exc:
            self._fail_unit(unit, f"qpu: cannot reach vendor {device.vendor}: {exc}")
            return
        self._call(unit, slot, lambda: vendor.submit(device, text, shots, token), self._created)

    def _created(self, unit: Unit, slot: Slot, task: Any, error: Any) -> None:
        assert slot.device is not None
        if error is not None:
            if not isinstance(error, VendorError):
                raise error
            if error.retryable:
                self._vendor_retry(unit, slot, "create", error)
                return
            context = {
                "index": slot.index,
                "attempt": slot.attempt,
                "device": slot.device.name,
                "code": error.vendor_code,
                "reason": str(error),
            }
            self._post_all(unit, "qpu-submit-failed", context)
            self._failover(
                unit,
                slot,
                slot.device.name,
                f"{slot.device.name} refused the task: {error} [{error.vendor_code}]",
            )
            return
        self.counters.tasks_created += 1
        slot.task = task
        slot.queued_at = self.clock()
        slot.errors = 0
        slot.retry_posted = False
        slot.phase = Phase.TRACK
        slot.poller = AdaptivePoller(
            slot.device, unit.request.release_at, estimator=self.estimator, schedule=self.schedule
        )
        slot.due = 0.0
        self._post_all(unit, "qpu-task", self._task_context(unit, slot))
        self._update_memos(unit)
        self.log(syslog.LOG_INFO, f"unit {unit.id}: task {task.task_id} on {slot.device.name}")

    def _vendor_retry(self, unit: Unit, slot: Slot, operation: str, error: VendorError) -> None:
        """A vendor call failed in a way that may pass: keep the job held, retry later."""
        self.counters.vendor_errors += 1
        slot.errors += 1
        delay = self._backoff(slot.errors)
        slot.due = self.clock() + delay
        if not slot.retry_posted:
            slot.retry_posted = True
            context = {
                "index": slot.index,
                "operation": operation,
                "code": error.vendor_code,
                "message": str(error),
                "retry_in": round(delay, 1),
            }
            self._post_all(unit, "qpu-retry", context)
        self._update_memos(unit, state=f"vendor error {error.vendor_code}, retrying")
        self.log(syslog.LOG_WARNING, f"unit {unit.id}: {operation}: {error}; retry in {delay:g}s")

    def _start_poll(self, unit: Unit, slot: Slot) -> None:
        assert slot.task is not None
        task = slot.task
        try:
            vendor = self.vendor(task.vendor)
        except (ValueError, FluxQuantumError) as exc:
            self._fail_unit(unit, f"qpu: cannot reach vendor {task.vendor}: {exc}")
            return
        if not slot.attached:

            def attach_and_poll() -> TaskSnapshot:
                vendor.attach(task.task_id)
                return vendor.poll(task)

            self._call(unit, slot, attach_and_poll, self._polled)
        else:
            self._call(unit, slot, lambda: vendor.poll(task), self._polled)

    def _polled(self, unit: Unit, slot: Slot, snap: Any, error: Any) -> None:
        assert slot.device is not None and slot.poller is not None
        now = self.clock()
        slot.last_poll = now
        if error is not None:
            if not isinstance(error, VendorError):
                raise error
            if isinstance(error, NotFound):
                self._task_problem(
                    unit,
                    slot,
                    "qpu-task-failed",
                    {"state": "NOT_FOUND", "reason": str(error)},
                    f"the vendor does not know task {slot.task.task_id if slot.task else '?'}",
                )
                return
            self._vendor_retry(unit, slot, "poll", error)
            return
        self.counters.polls += 1
        if not slot.attached:
            slot.attached = True
            self.counters.tasks_attached += 1
            self.log(syslog.LOG_INFO, f"unit {unit.id}: re-attached {snap.task.task_id}")
        slot.snapshot = snap
        slot.errors = 0
        slot.retry_posted = False
        if snap.state in (TaskState.FAILED, TaskState.CANCELLED, TaskState.CANCELLING):
            reason = snap.message or f"the vendor reports {snap.state.value}"
            self._task_problem(
                unit,
                slot,
                "qpu-task-failed",
                {"state": snap.state.value, "reason": reason},
                f"task {snap.task.task_id} on {slot.device.name} {snap.state.value}: {reason}",
            )
            return
        delay = slot.poller.observe(snap)
        drain = self.estimator.estimate(slot.device).seconds_per_task
        remaining = tasks_to_release(snap, unit.request.release_at)
        slot.expected_wait = None if remaining is None else remaining * drain
        if snap.state is TaskState.RUNNING:
            slot.running_seen = slot.running_seen or snap.t
            if unit.request.release_at in (RELEASE_PREDICT, RELEASE_DONE):
                # Its own run is under way: what is left of one service time.
                slot.expected_wait = max(0.0, drain - (snap.t - slot.running_seen))
        self._milestones(unit, slot, snap)
        if release_reached(snap, unit.request.release_at):
            where = (
                snap.state.value
                if snap.state not in (TaskState.CREATED, TaskState.QUEUED)
                else f"position {snap.position} <= release_at {unit.request.release_at}"
            )
            self._ready(unit, slot, where)
        elif not self._lead_reached(unit, slot, now):
            slot.due = now + min(delay, self.schedule.max_interval)
        self._update_memos(unit)

    def _milestones(self, unit: Unit, slot: Slot, snap: TaskSnapshot) -> None:
        if snap.position is None or snap.position_capped:
            return
        crossed = [m for m in MILESTONES if snap.position <= m and m not in slot.milestones]
        if not crossed:
            return
        slot.milestones.update(crossed)
        context = {
            "index": slot.index,
            "attempt": slot.attempt,
            "task": snap.task.task_id,
            "position": snap.position,
            "milestone": min(crossed),
        }
        self._post_all(unit, "qpu-queue", context)

    def _ready(self, unit: Unit, slot: Slot, reason: str) -> None:
        slot.phase = Phase.READY
        slot.ready_reason = reason
        if slot.device is not None and slot.task is not None:
            self.estimator.forget_task(slot.device.name, slot.task.task_id)
        self._maybe_release(unit)

    # -- release point, moved earlier on a busy instance

    def _unit_cores(self, unit: Unit, cluster: ClusterView) -> int:
        return sum(cluster.cores_for(m.size) for m in unit.jobs.values())

    def _lead_reached(self, unit: Unit, slot: Slot, now: float) -> bool:
        """Release early when the classical resources will take at least as long to
        free up as the quantum task takes to reach its release point; with
        ``release_at=predict``, also when the expected wait for the result is below the
        time released jobs take to start."""
        cluster, snap = self.cluster, slot.snapshot
        if snap is None or slot.expected_wait is None:
            return False
        classical = cluster.wait_for(self._unit_cores(unit, cluster), now) if cluster else None
        startup = self.startup.estimate() if unit.request.release_at == RELEASE_PREDICT else 0.0
        if not classical and not startup:
            return False
        vendor = max(0.0, slot.expected_wait - (now - snap.t))
        if classical and vendor <= classical:
            why = (
                f"classical lead: expected queue wait {vendor:.0f}s <= expected wait "
                f"{classical:.0f}s for the job's cores"
            )
        elif startup and vendor <= startup:
            why = (
                f"predicted: expected wait for the result {vendor:.2f}s <= job start-up "
                f"{startup:.2f}s"
            )
        else:
            return False
        self._ready(unit, slot, why)
        return True

    def _check_lead(self, unit: Unit, slot: Slot, now: float) -> None:
        if not slot.busy and slot.snapshot is not None:
            self._lead_reached(unit, slot, now)

    # -- failures

    def _check_max_wait(self, unit: Unit, slot: Slot, now: float) -> None:
        limit = unit.request.max_wait
        if limit is None or slot.queued_at is None or slot.busy:
            return
        waited = now - slot.queued_at
        if waited <= limit:
            return
        assert slot.device is not None
        self._task_problem(
            unit,
            slot,
            "qpu-max-wait",
            {"waited": round(waited, 1), "max_wait": limit},
            f"task on {slot.device.name} waited {waited:.0f}s > qpu.max_wait {limit:g}s",
        )

    def _check_devices(self, now: float) -> None:
        """Probe each device that has waiting tasks every device_check_interval."""
        watched: dict[str, Device] = {}
        for unit in self.units.values():
            for slot in unit.slots:
                if slot.phase is Phase.TRACK and slot.device is not None:
                    watched[slot.device.name] = slot.device
        for name in [n for n in self.devices if n not in watched]:
            if not self.devices[name].busy:
                del self.devices[name]
        for name, device in watched.items():
            watch = self.devices.setdefault(
                name, DeviceWatch(device, due=now + self.options.device_check_interval)
            )
            if watch.busy or watch.due > now:
                continue
            try:
                vendor = self.vendor(device.vendor)
            except (ValueError, FluxQuantumError):
                continue
            watch.busy = True

            def done(snapshot: Any, error: Any, watch: DeviceWatch = watch) -> None:
                watch.busy = False
                watch.due = self.clock() + self.options.device_check_interval
                if error is None:
                    watch.snapshot = snapshot
                    self.estimator.observe(snapshot)
                    self._device_seen(watch.device, snapshot)

            self.workers.submit(lambda v=vendor, d=device: v.probe(d), done)

    def _device_seen(self, device: Device, snapshot: DeviceSnapshot) -> None:
        if snapshot.status is DeviceStatus.UNREACHABLE:
            return
        self._graph_status(device, snapshot.available)
        if snapshot.available:
            return
        status = snapshot.describe_status()
        for unit in list(self.units.values()):
            for slot in unit.slots:
                if unit.state is not UnitState.ACTIVE:
                    break
                if (
                    slot.phase is Phase.TRACK
                    and not slot.busy
                    and slot.device is not None
                    and slot.device.name == device.name
                ):
                    self._task_problem(
                        unit,
                        slot,
                        "qpu-device-unavailable",
                        {"status": status},
                        f"device {device.name} became {status} while the task waited",
                    )

    def _graph_status(self, device: Device, up: bool) -> None:
        """Keep the device's Fluxion vertices up or down as the vendor says (only for
        devices in the graph, only on a change)."""
        if self._device_up.get(device.name) == up:
            return
        self._device_up[device.name] = up
        try:
            if device.name in self.jobs.graph_devices():
                self.jobs.set_device_up(device.name, up)
                self.log(syslog.LOG_INFO, f"graph: {device.name} {'up' if up else 'down'}")
        except Exception as exc:
            self.log(syslog.LOG_WARNING, f"graph: cannot mark {device.name}: {exc}")

    def _task_problem(
        self, unit: Unit, slot: Slot, event: str, details: Mapping[str, Any], what: str
    ) -> None:
        """Record what happened to a waiting task, cancel it if it may still run, then
        fail over or fail as the request says."""
        assert slot.device is not None
        context = {"index": slot.index, "attempt": slot.attempt, "device": slot.device.name}
        if slot.task is not None:
            context["task"] = slot.task.task_id
        context.update(details)
        task = slot.live_task()
        if task is not None and event != "qpu-task-failed":
            context["action"] = "cancel the stranded task"
        self._post_all(unit, event, context)
        if task is not None and event != "qpu-task-failed":
            self._cancel(task, what)
            slot.cancelled = True
        self._failover(unit, slot, slot.device.name, what)

    def _failover(self, unit: Unit, slot: Slot, failed: str | None, what: str) -> None:
        mode = unit.request.failover
        if mode == "fail":
            self._fail_unit(unit, f"qpu: {what}; qpu.failover=fail, so the job fails")
            return
        if slot.attempt + 1 >= self.options.max_tasks:
            self._fail_unit(
                unit, f"qpu: {what}; gave up after {slot.attempt + 1} task(s) for this program"
            )
            return
        if failed:
            slot.exclude.add(failed)
        slot.attempt += 1
        if mode == "simulator":
            slot.device_class = "simulator"
        self.counters.failovers += 1
        context: dict[str, Any] = {
            "index": slot.index,
            "attempt": slot.attempt,
            "from": failed,
            "reason": what,
            "exclude": sorted(slot.exclude),
            "mode": mode,
        }
        if slot.device_class is not None:
            context["class"] = slot.device_class
        self._post_all(unit, "qpu-failover", context)
        self.log(syslog.LOG_NOTICE, f"unit {unit.id}: fail-over ({mode}) after: {what}")
        slot.generation += 1
        slot.phase = Phase.SELECT
        slot.device = None
        slot.task = None
        slot.token = None
        slot.snapshot = None
        slot.poller = None
        slot.submit_posted = False
        slot.queued_at = None
        slot.cancelled = False
        slot.milestones = set()
        slot.expected_wait = None
        slot.errors = 0
        slot.retry_posted = False
        slot.wait_posted = None
        slot.due = 0.0
        self._update_memos(unit, state=f"fail-over: {what}")

    def _fail_unit(self, unit: Unit, note: str) -> None:
        for slot in unit.slots:
            task = slot.live_task()
            if task is not None:
                self._cancel(task, "its jobs failed")
        ids = list(unit.jobs)
        if ids:
            self._fail_ids(ids, note)
        self.log(syslog.LOG_NOTICE, f"unit {unit.id}: failed: {note}")
        self._finish(unit, UnitState.FAILED)

    def _fail_ids(self, ids: list[int], note: str) -> None:
        try:
            self.counters.failed += len(self.jobs.fail(ids, note))
        except (CommandError, OSError):
            # All-or-nothing over ids: fail the ones still held one by one.
            for jobid in ids:
                with contextlib.suppress(CommandError, OSError):
                    self.counters.failed += len(self.jobs.fail([jobid], note))

    def _cancel(self, task: TaskRef, why: str, tries: int = 0) -> None:
        try:
            vendor = self.vendor(task.vendor)
        except (ValueError, FluxQuantumError):
            return

        def done(result: Any, error: Any) -> None:
            if error is None:
                self.counters.tasks_cancelled += 1
                self.log(syslog.LOG_INFO, f"cancelled task {task.task_id} ({why})")
            elif isinstance(error, VendorError) and error.retryable and tries < 5:
                self._pending_cancels.append((task, tries + 1, self.clock() + 5.0 * (tries + 1)))
            else:
                self.log(syslog.LOG_WARNING, f"cannot cancel task {task.task_id}: {error}")

        self.workers.submit(lambda: vendor.cancel(task), done)

    def _retry_cancels(self, now: float) -> None:
        due = [c for c in self._pending_cancels if c[2] <= now]
        self._pending_cancels = [c for c in self._pending_cancels if c[2] > now]
        for task, tries, _ in due:
            self._cancel(task, "retry", tries)

    # -- release

    def _maybe_release(self, unit: Unit) -> None:
        if unit.state is not UnitState.ACTIVE or not unit.jobs:
            return
        if not all(slot.phase is Phase.READY for slot in unit.slots):
            return
        first = unit.slots[0]
        assert first.task is not None and first.device is not None
        info = {
            "vendor": first.device.vendor,
            "device_id": first.device.id,
            "region": first.device.region,
            "tasks": [s.task.task_id for s in unit.slots if s.task is not None],
            "devices": [s.device.name for s in unit.slots if s.device is not None],
            "catalog": self.catalog.path,
        }
        reasons = [
            {"index": s.index, "task": s.task.task_id if s.task else None, "why": s.ready_reason}
            for s in unit.slots
        ]
        for member in list(unit.jobs.values()):
            if ("qpu-ready", 0, first.attempt) not in member.facts:
                context = {"index": 0, "attempt": first.attempt, "tasks": reasons}
                self._post(member, "qpu-ready", context)
        task, device = first.task.task_id, first.device.name
        for ids, resources in self._release_calls(unit):
            try:
                self.jobs.release(ids, task=task, device=device, info=info, resources=resources)
            except (CommandError, OSError) as exc:
                # All-or-nothing per call: a job left since the scan; rescan, retry.
                self.log(syslog.LOG_INFO, f"unit {unit.id}: release deferred: {exc}")
                self._scan_due = 0.0
                return
            unit.release = {"task": task, "device": device, "info": info}
            self.startup.released(ids[0], self.clock())
            self._update_memos(unit, state="released", only=ids)
            for jobid in ids:
                unit.jobs.pop(jobid, None)
                self.member_unit.pop(jobid, None)
            self.counters.released += len(ids)
        unit.released_at = self.clock()
        self.log(syslog.LOG_INFO, f"unit {unit.id}: released")
        self._finish(unit, UnitState.RELEASED)

    def _release_calls(self, unit: Unit) -> list[tuple[list[int], list[Any] | None]]:
        """Who is released in which plugin call. When the tasks' devices are vertices in
        Fluxion's graph, one job of the unit (its first) also asks for their qpu slots,
        so its allocation records the QPUs (R.scheduling) and Fluxion arbitrates them;
        the jobs that only read the same task do not."""
        ids = sorted(unit.jobs)
        devices = [s.device.name for s in unit.slots if s.device is not None]
        try:
            in_graph = bool(devices) and set(devices) <= self.jobs.graph_devices()
        except Exception as exc:
            self.log(syslog.LOG_DEBUG, f"graph lookup failed: {exc}")
            in_graph = False
        if not in_graph:
            return [(ids, None)]
        holder = unit.id if unit.id in unit.jobs else ids[0]
        try:
            resources = self.jobs.qpu_resources(unit.jobs[holder].jobspec, devices)
        except Exception as exc:
            self.log(syslog.LOG_WARNING, f"unit {unit.id}: released without QPU vertex: {exc}")
            return [(ids, None)]
        others = [i for i in ids if i != holder]
        return ([(others, None)] if others else []) + [([holder], resources)]

    # -- visibility

    def _update_memos(
        self, unit: Unit, state: str | None = None, only: Iterable[int] | None = None
    ) -> None:
        if unit.state is not UnitState.ACTIVE and state is None:
            return
        slots = unit.slots
        devices = sorted({s.device.name for s in slots if s.device is not None})
        first_task = next((s.task.task_id for s in slots if s.task is not None), None)
        waiting = [s for s in slots if s.phase is not Phase.READY]
        positions = [
            s.snapshot.position
            for s in (waiting or slots)
            if s.snapshot is not None and s.snapshot.position is not None
        ]
        waits = [s.expected_wait for s in waiting if s.expected_wait is not None]
        if state is None:
            if any(s.phase is Phase.SELECT for s in slots):
                state = "selecting a device"
            elif any(s.phase is Phase.SUBMIT for s in slots):
                state = "submitting"
            elif all(s.phase is Phase.READY for s in slots):
                state = "ready"
            else:
                states = sorted({s.snapshot.state.value for s in waiting if s.snapshot})
                state = ",".join(states) or "submitted"
        memo = {
            "qpu_device": ",".join(devices) or None,
            "qpu_task": first_task,
            "qpu_position": max(positions) if positions else None,
            "qpu_wait": round(max(waits)) if waits else (0 if not waiting else None),
            "qpu_state": state,
        }
        wanted = None if only is None else set(only)
        for member in list(unit.jobs.values()):
            if wanted is not None and member.id not in wanted:
                continue
            changed = {k: v for k, v in memo.items() if member.memo.get(k, None) != v}
            if not changed:
                continue
            try:
                self.jobs.memo(member.id, changed)
                member.memo.update(changed)
            except OSError as exc:
                self.log(syslog.LOG_DEBUG, f"{member.id}: memo failed: {exc}")

    def status(self) -> dict[str, Any]:
        """What the service tracks now, for ``flux quantum service status``."""
        now = self.clock()
        units = []
        for unit in self.units.values():
            units.append(
                {
                    "unit": unit.id,
                    "userid": unit.userid,
                    "jobs": sorted(unit.jobs),
                    "request": unit.request.describe(),
                    "state": unit.state.value,
                    "tasks": [
                        {
                            "index": s.index,
                            "phase": s.phase.value,
                            "attempt": s.attempt,
                            "device": s.device.name if s.device else None,
                            "task": s.task.task_id if s.task else None,
                            "state": s.snapshot.state.value if s.snapshot else None,
                            "position": s.snapshot.position if s.snapshot else None,
                            "expected_wait": None
                            if s.expected_wait is None
                            else round(s.expected_wait, 1),
                            "ready": s.ready_reason,
                        }
                        for s in unit.slots
                    ],
                }
            )
        return {
            "uptime": round(now - self.started, 1),
            "catalog": self.catalog.path,
            "units": units,
            "jobs": len(self.member_unit),
            "counters": self.counters.__dict__.copy(),
            "workers": {"busy": self.workers.busy, "queued": self.workers.queued},
            "startup": {
                "estimate": round(self.startup.estimate(), 3),
                "samples": len(self.startup.samples),
            },
            "options": self.options.to_dict(),
            "last_error": self.last_error,
        }


def _submit_time(record: JobRecord) -> float | None:
    for event in record.events:
        if event.get("name") == "submit":
            return float(event.get("timestamp", 0.0)) or None
    return None


# --- the host glue shared by the broker module and `flux quantum service run` -----------


class ServiceRunner:
    """Wires a QuantumService to a Flux handle's reactor: a tick timer and the workers'
    pipe. Every callback is fenced: an exception is logged, never raised into the
    reactor (a Python broker module whose reactor fails takes the broker down)."""

    def __init__(self, handle: Any, options: ServiceOptions, log: Log | None = None) -> None:
        import flux.constants

        self.handle = handle
        self.options = options
        self._log = log or (lambda level, msg: handle.log(level, msg))
        try:
            catalog = load_catalog(options.catalog)
        except FluxQuantumError as exc:
            raise ServiceError(str(exc)) from exc
        self.workers = VendorWorkers(options.workers)
        self.service = QuantumService(
            FluxJobs(handle), catalog, options, self.workers, log=self._log
        )
        self._fd = handle.fd_watcher_create(
            self.workers.fileno(), self._on_wake, events=flux.constants.FLUX_POLLIN
        )
        self._timer = handle.timer_watcher_create(0.0, self._on_tick, repeat=options.tick)
        self._warm = False

    def start(self) -> None:
        self._fd.start()
        self._timer.start()
        # The Braket SDK takes seconds to import: do it now, off the reactor.
        self.workers.submit(_warm_up, lambda result, error: None)
        self._log(
            syslog.LOG_INFO,
            f"qpu handlers started: catalog {self.service.catalog.path}, "
            f"{len(self.service.catalog)} devices",
        )

    def stop(self) -> None:
        """Stop watching; tasks keep running at the vendor and a later service
        re-attaches them from the eventlogs."""
        for watcher in (self._timer, self._fd):
            with contextlib.suppress(Exception):
                watcher.stop()
        self.workers.stop()

    def status(self) -> dict[str, Any]:
        return self.service.status()

    def _on_tick(self, *args: Any) -> None:
        self._fenced(self.service.tick)

    def _on_wake(self, *args: Any) -> None:
        self._fenced(self.service.completions)
        # A finished vendor call usually makes a next step due (create after select,
        # release after a poll): take it now rather than at the next tick.
        self._fenced(self.service.tick)

    def _fenced(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            self.service.last_error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                self._log(syslog.LOG_ERR, f"qpu handlers: {self.service.last_error}")


def _warm_up() -> None:
    try:
        import braket.aws  # noqa: F401
        import braket.ir.openqasm  # noqa: F401
    except ImportError:
        pass
