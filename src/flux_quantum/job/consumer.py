"""How a released job finds its quantum task, and waits for the task's result.

This module owns the consumer's side of a release: reading the task the quantum jobtap
plugin recorded in the job's jobspec (``attributes.system.qpu_task``, ``qpu_device``,
``qpu_info``, decoded by ``flux_quantum.protocol.jobspec``) into a ``JobTask``, saying in one
sentence why a job has none (not a qpu job, still held, ended before release), waiting
for the task through the vendor layer (``wait_result``), and knowing where the job-shell
plugin that puts ``FLUX_QPU_TASK``, ``FLUX_QPU_TASKS``, ``FLUX_QPU_DEVICE`` and
``FLUX_QPU_VENDOR`` into every task lives.
It only reads: it never releases, fails or changes a job, never submits or cancels a
vendor task, and sees no credential beyond what the vendor layer reads from the caller's
own environment. Flux is imported lazily, so the pure parts work without Flux.

From a job's Python::

    from flux_quantum.job.consumer import current_task, wait_result
    task = current_task()          # FLUX_JOB_ID's task, read from its jobspec
    result = wait_result(task)     # TaskResult; result.counts is {"00": 498, "11": 502}
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.protocol.events import Event, ends_hold, parse_eventlog
from flux_quantum.protocol.jobspec import (
    DEPENDENCY_SCHEME,
    REQUEST_ATTRIBUTE,
    Released,
    ReleaseInfo,
    system_of,
)
from flux_quantum.vendors.base import (
    RetryBudget,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
    Vendor,
)
from flux_quantum.vendors.errors import VendorError

# What the job-shell plugin sets in every task of a released qpu job.
ENV_TASK = "FLUX_QPU_TASK"
ENV_TASKS = "FLUX_QPU_TASKS"
ENV_DEVICE = "FLUX_QPU_DEVICE"
ENV_VENDOR = "FLUX_QPU_VENDOR"
ENV_VARS = (ENV_TASK, ENV_TASKS, ENV_DEVICE, ENV_VENDOR)
# The job whose task a process reads when it is not the job it runs in: a loop's
# iteration run in place, in the job of the step before it, reads its own step's task.
ENV_JOB = "FLUX_QPU_JOB"
# How long a process inside a job waits for its rank's view of the job to show the release.
CATCH_UP_TIMEOUT = 10.0

SHELL_PLUGIN_DIR = "shell"
SHELL_PLUGIN_FILE = "shell_quantum.so"

DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_MAX_INTERVAL = 15.0
DEFAULT_VENDOR_TIMEOUT = 30.0
DEFAULT_MAX_ERROR_TIME = 120.0  # vendor errors in a row a wait rides out
# FLUX_QPU_READ=vendor: read tasks from the vendor with the job's own credentials.
READ_VARIABLE = "FLUX_QPU_READ"


class NoTaskError(CommandError):
    """The job has no quantum task (yet); the message says why in one sentence."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # "not-qpu", "held", "ended", "no-task", "not-released"


class TaskFailedError(CommandError):
    """The job's quantum task ended FAILED or CANCELLED: there is no result to read."""

    def __init__(self, message: str, snapshot: TaskSnapshot) -> None:
        super().__init__(message)
        self.snapshot = snapshot


class WaitTimeout(CommandError):
    """Waiting for a release or a result took longer than the caller allowed."""


@dataclass(frozen=True)
class JobTask:
    """The quantum task a released qpu job was given, as the jobtap plugin recorded it.

    ``task_id`` is the job's task (the first of a batch); ``tasks`` holds every task id
    of the job (one for a single task). ``vendor``, ``device_id``, ``region`` and
    ``catalog`` come from ``qpu_info`` (``info``) and are None when the release did not
    say.
    """

    jobid: int
    task_id: str
    device: str
    tasks: tuple[str, ...]
    vendor: str | None = None
    device_id: str | None = None
    region: str | None = None
    catalog: str | None = None
    info: ReleaseInfo = field(default_factory=ReleaseInfo, compare=False, repr=False)

    def ref(self, task_id: str | None = None) -> TaskRef:
        """The vendor-layer reference of ``task_id`` (default: the job's task)."""
        task_id = task_id or self.task_id
        if task_id not in self.tasks:
            raise CommandError(
                f"task {task_id} is not one of job {encode_jobid(self.jobid)}'s tasks "
                f"({', '.join(self.tasks)})"
            )
        return TaskRef(
            vendor=self.vendor or "",
            device=self.device_of(task_id),
            task_id=task_id,
            program=self.info.program_of(task_id),
        )

    def device_of(self, task_id: str) -> str:
        """The device TASK_ID runs on: ``qpu_info.devices`` (one per task, when a batch
        spans devices) if the release listed them, else the job's device."""
        devices = self.info.devices
        if len(devices) == len(self.tasks):
            return devices[self.tasks.index(task_id)] or self.device
        return self.device

    def refs(self) -> list[TaskRef]:
        """References of every task of the job, in release order."""
        return [self.ref(task_id) for task_id in self.tasks]

    @property
    def site_paid(self) -> bool:
        """Paid by the site's accounts: the job holds no credential for its tasks."""
        return self.info.site_paid

    def environment(self) -> dict[str, str]:
        """The FLUX_QPU_* variables the job-shell plugin sets for this task."""
        env = {ENV_TASK: self.task_id, ENV_TASKS: " ".join(self.tasks), ENV_DEVICE: self.device}
        if self.vendor:
            env[ENV_VENDOR] = self.vendor
        return env

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.jobid,
            "jobid": encode_jobid(self.jobid),
            "task": self.task_id,
            "device": self.device,
            "vendor": self.vendor,
            "device_id": self.device_id,
            "region": self.region,
            "catalog": self.catalog,
            "tasks": list(self.tasks),
        }


# --- where things are -------------------------------------------------------------------


def shell_plugin_dir() -> Path:
    """Directory of the built job-shell plugin (it is the only ``*.so`` in it)."""
    return Path(str(resources.files("flux_quantum"))) / "jobtap" / SHELL_PLUGIN_DIR


def shell_plugin_path() -> Path:
    """Absolute path of the built job-shell plugin, or CommandError saying why there is none."""
    directory = shell_plugin_dir()
    path = directory / SHELL_PLUGIN_FILE
    if path.is_file():
        return path.resolve()
    status = directory / "BUILD-STATUS"
    reason = (
        status.read_text().strip()
        if status.is_file()
        else "this copy of flux-quantum was not installed with pip"
    )
    raise CommandError(
        f"the quantum job-shell plugin is not built ({reason}); install flux-core, "
        "then reinstall flux-quantum"
    )


def shell_initrc_line(path: Path | None = None) -> str:
    """The Lua line that loads the job-shell plugin from a shell initrc or lua.d drop-in."""
    return f'plugin.load {{ file = "{path or shell_plugin_path()}" }}'


def shell_broker_option() -> str:
    """``-Sconf.shell_pluginpath=BUILTIN:DIR``: the broker option that makes one instance's
    job shells load the job-shell plugin (``flux start``, ``flux alloc/batch
    --broker-opts``). CommandError when the plugin is not built or Flux cannot say its
    built-in path."""
    import subprocess

    path = shell_plugin_path()
    try:
        builtin = subprocess.run(
            ["flux", "config", "builtin", "shell_pluginpath"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise CommandError(f"cannot ask Flux for its shell plugin path ({exc})") from None
    return f"-Sconf.shell_pluginpath={builtin}:{path.parent}"


def shell_site_config() -> str:
    """TOML comment lines telling a site how to load the job-shell plugin.

    flux-shell takes plugins from its initrc (and the ``conf.shell_pluginpath`` broker
    attribute), never from the instance TOML, so this is advice with the exact commands.
    """
    try:
        path = shell_plugin_path()
    except CommandError as exc:
        return (
            f"# {exc}.\n"
            "# Without it jobs still find their task: flux quantum task, or the jobspec.\n"
        )
    dropin = '"$(dirname "$(flux config builtin shell_initrc)")/lua.d/flux-quantum.lua"'
    return (
        "# Job-shell plugin: FLUX_QPU_TASK, FLUX_QPU_TASKS, FLUX_QPU_DEVICE and\n"
        "# FLUX_QPU_VENDOR in every task of a released qpu job. flux-shell loads plugins\n"
        "# from its initrc, not from this TOML. For every instance on this system, once:\n"
        f"#   echo '{shell_initrc_line(path)}' > {dropin}\n"
        "# or, for one instance only, on its broker command line (flux start, or\n"
        "# flux alloc/batch --broker-opts=...), as $(flux quantum config --broker-opts)\n"
        "# prints it:\n"
        "#   -S conf.shell_pluginpath=$(flux config builtin shell_pluginpath):"
        f"{path.parent}\n"
    )


# --- job ids ----------------------------------------------------------------------------


def encode_jobid(jobid: int) -> str:
    """``ƒ``-form of a job id when the Flux bindings are there, else decimal."""
    try:
        from flux.job import JobID

        return JobID(jobid).f58
    except (ImportError, OSError):
        return str(jobid)


def parse_jobid(text: str | int) -> int:
    """A job id in any form Flux accepts (f58, decimal, hex, words)."""
    if isinstance(text, int):
        return text
    try:
        from flux.job import JobID

        return int(JobID(text))
    except ImportError:
        pass
    except (TypeError, ValueError, OSError):
        raise CommandError(f"invalid job id '{text}'") from None
    try:
        return int(text, 0)
    except ValueError:
        raise CommandError(f"invalid job id '{text}'") from None


def resolve_jobid(jobid: str | int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """JOBID as given, else the job whose task this process reads (``FLUX_QPU_JOB``, set
    by a loop for an iteration it runs in place), else the job it runs in
    (``FLUX_JOB_ID``)."""
    if jobid is not None:
        return parse_jobid(jobid)
    env = os.environ if environ is None else environ
    if env.get(ENV_JOB):
        return parse_jobid(env[ENV_JOB])
    if env.get("FLUX_JOB_ID"):
        return parse_jobid(env["FLUX_JOB_ID"])
    raise CommandError("no job given and FLUX_JOB_ID is not set: run inside a job or name a JOBID")


# --- reading the jobspec ----------------------------------------------------------------


def is_qpu_job(jobspec: Mapping[str, Any]) -> bool:
    """The job asked for a QPU, or rides another job's task (``--dependency=qpu:JOBID``)."""
    system = system_of(jobspec)
    if system.get(REQUEST_ATTRIBUTE) is not None:
        return True
    deps = system.get("dependencies") or []
    return any(isinstance(d, Mapping) and d.get("scheme") == DEPENDENCY_SCHEME for d in deps)


def _no_task_reason(jobid: int, entries: Iterable[Any]) -> NoTaskError:
    """Why a qpu job has no task, from its eventlog."""
    name = encode_jobid(jobid)
    log = parse_eventlog(entries)
    names = [e.name for e in log]
    fatal = next(
        (e.context for e in log if e.name == "exception" and e.context.get("severity") == 0),
        None,
    )
    if "clean" in names or fatal is not None:
        detail = ""
        if fatal is not None:
            note = fatal.get("note") or "no note"
            detail = f" ({fatal.get('type', 'job')} exception: {note})"
        return NoTaskError(
            f"job {name} has no quantum task: it ended before it was released{detail}", "ended"
        )
    if "depend" in names or "alloc" in names:
        return NoTaskError(
            f"job {name} has no quantum task: it left DEPEND without a release by flux-quantum "
            "(was the qpu dependency removed by hand?)",
            "not-released",
        )
    return NoTaskError(f"job {name} has no quantum task yet: it is still held (DEPEND)", "held")


def job_task_from_jobspec(
    jobid: int, jobspec: Mapping[str, Any], events: Iterable[Any] | None = None
) -> JobTask:
    """The task recorded in a (current) jobspec, or NoTaskError saying why there is none.

    ``events`` (the job's eventlog) only refines the reason when there is no task.
    """
    name = encode_jobid(jobid)
    if not is_qpu_job(jobspec):
        raise NoTaskError(
            f"job {name} did not ask for a QPU (it has no attributes.system.qpu)", "not-qpu"
        )
    release = Released.decode(system_of(jobspec))
    if release is None:
        raise _no_task_reason(jobid, events or [])
    if not release.task:
        raise NoTaskError(
            f"job {name} was released without a quantum task (flux quantum release without "
            "--task?)",
            "no-task",
        )
    info = release.info
    tasks = info.tasks if release.task in info.tasks else (release.task, *info.tasks)
    return JobTask(
        jobid=jobid,
        task_id=release.task,
        device=release.device,
        tasks=tasks,
        vendor=info.vendor,
        device_id=info.device_id,
        region=info.region,
        catalog=info.catalog,
        info=info,
    )


def compiled_programs(
    jobid: str | int | None = None, *, handle: Any = None
) -> list[events.Compile]:
    """What the compile stage made of each of JOBID's programs for its latest attempt
    (``qpu-compile``), in program order; empty before any was compiled, or when the
    stage is off. A held job's too: what its task will run."""
    job = resolve_jobid(jobid)
    if handle is None:
        import flux

        handle = flux.Flux()
    latest: dict[int, events.Compile] = {}
    for event in parse_eventlog(_lookup(handle, job, ["eventlog"]).get("eventlog")):
        record = events.decode(event)
        if isinstance(record, events.Compile):
            latest[record.index] = record
    return [latest[index] for index in sorted(latest)]


def _lookup(handle: Any, jobid: int, keys: list[str]) -> dict[str, Any]:
    from flux.job import job_kvs_lookup

    try:
        data = job_kvs_lookup(handle, jobid, keys=keys, decode=True)
    except PermissionError:
        raise CommandError(f"job {encode_jobid(jobid)} belongs to another user") from None
    except OSError as exc:
        raise CommandError(
            f"cannot read job {encode_jobid(jobid)}: {exc.strerror or exc}"
        ) from None
    if data is None:
        raise CommandError(f"job {encode_jobid(jobid)} does not exist in this instance")
    return data


def current_task(jobid: str | int | None = None, *, handle: Any = None) -> JobTask:
    """The quantum task of JOBID (default: the job this process runs in, ``FLUX_JOB_ID``).

    One job-info lookup of the job's current jobspec (with the release's updates) and
    eventlog. Raises NoTaskError when the job has no task (not a qpu job, still held,
    ended before release) and CommandError when the job cannot be read.

    Called from inside the job, it never answers "still held": the job runs, so it was
    allocated, and a lookup that shows no release is a view that lags (the job manager
    commits events to the KVS after they take effect, and a broker rank's KVS follows
    rank 0's). It then waits, up to ``CATCH_UP_TIMEOUT`` seconds, for this rank's
    eventlog to show the release and looks again.
    """
    job = resolve_jobid(jobid)
    if handle is None:
        import flux

        handle = flux.Flux()
    try:
        return _lookup_task(handle, job)
    except NoTaskError as exc:
        if exc.reason != "held" or not _runs_in(job):
            raise
    with contextlib.suppress(WaitTimeout):  # the lookup below says what this rank sees
        _watch_until_hold_ends(handle, job, CATCH_UP_TIMEOUT)
    return _lookup_task(handle, job)


def _lookup_task(handle: Any, job: int) -> JobTask:
    data = _lookup(handle, job, ["jobspec", "eventlog"])
    return job_task_from_jobspec(
        job, data.get("jobspec") or {}, parse_eventlog(data.get("eventlog"))
    )


def _runs_in(job: int) -> bool:
    """This process runs in JOB (its FLUX_JOB_ID), which therefore has been allocated."""
    try:
        return resolve_jobid(None) == job
    except CommandError:
        return False


def _watch_until_hold_ends(handle: Any, job: int, timeout: float | None) -> None:
    """Watch JOB's eventlog (on this broker rank) until an event that ends the hold."""
    from flux.job import event_watch_async

    deadline = None if timeout is None else time.monotonic() + timeout
    watcher = event_watch_async(handle, job)
    try:
        while True:
            try:
                if deadline is not None:
                    watcher.wait_for(max(0.0, deadline - time.monotonic()))
                event = watcher.get_event()
            except OSError as exc:
                if exc.errno == errno.ETIMEDOUT:
                    assert timeout is not None
                    raise WaitTimeout(
                        f"job {encode_jobid(job)} is still held after {round(timeout, 1):g}s"
                    ) from None
                raise CommandError(
                    f"cannot watch job {encode_jobid(job)}: {exc.strerror or exc}"
                ) from None
            if event is None or ends_hold(Event(event.name, 0.0, event.context or {})):
                break
    finally:
        if watcher.needs_cancel:
            watcher.cancel()


def wait_release(
    jobid: str | int | None = None,
    *,
    handle: Any = None,
    timeout: float | None = None,
    on_held: Callable[[int], None] | None = None,
) -> JobTask:
    """Like ``current_task``, but a job still held is waited for until it is released
    (or ends without a release: NoTaskError). ``on_held`` is called once if it waits."""
    job = resolve_jobid(jobid)
    if handle is None:
        import flux

        handle = flux.Flux()
    try:
        return current_task(job, handle=handle)
    except NoTaskError as exc:
        if exc.reason != "held":
            raise
    if on_held is not None:
        on_held(job)
    _watch_until_hold_ends(handle, job, timeout)
    return _lookup_task(handle, job)


# --- the vendor side ----------------------------------------------------------------------


def reads_direct(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the job asked to read its tasks from the vendor with its own credentials
    (``FLUX_QPU_READ=vendor`` in its environment; ``flux quantum task --direct`` asks
    the same for one command) rather than through the handler service."""
    env = os.environ if environ is None else environ
    return env.get(READ_VARIABLE, "").strip().lower() == "vendor"


def open_vendor(
    task: JobTask,
    *,
    environ: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_VENDOR_TIMEOUT,
    direct: bool | None = None,
) -> Vendor:
    """The vendor object that can poll TASK.

    A job released by the instance owner's service (``qpu_info.read_via``) reads the
    tasks it was released with through that service, which asks the vendor once for all
    its ranks and needs no credential in the job; anything else (a task the job creates
    itself, a session) goes to the job's own vendor, made when first needed. ``direct``
    (default: ``FLUX_QPU_READ=vendor``) reads the vendor itself with the job's own
    credentials; a guest's job on the site's accounts (``qpu_info.account = site``) has
    none for its released tasks and always reads them through the service."""
    read_via = task.info.read_via
    if direct is None:
        direct = reads_direct(environ)
    if read_via and not (direct and not task.site_paid):
        import flux

        from flux_quantum.vendors.relayed import RelayedVendor

        return RelayedVendor(
            flux.Flux(),
            task.jobid,
            task.vendor or "",
            read_via,
            tasks=task.tasks,
            own=lambda: own_vendor(task, environ=environ, timeout=timeout),
        )
    return own_vendor(task, environ=environ, timeout=timeout)


def own_vendor(
    task: JobTask,
    *,
    environ: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_VENDOR_TIMEOUT,
) -> Vendor:
    """The vendor of TASK with the caller's own credentials, configured from the catalog
    its release used (``qpu_info.catalog``), else the usual catalog lookup."""
    from flux_quantum.catalog import CatalogError, load_catalog
    from flux_quantum.vendors.factory import make_vendor

    try:
        catalog = load_catalog(task.catalog, environ=environ)
    except CatalogError as exc:
        if not task.catalog:
            raise CommandError(str(exc)) from None
        try:  # the handlers' catalog is not readable here: fall back to ours
            catalog = load_catalog(None, environ=environ)
        except CatalogError:
            raise CommandError(str(exc)) from None
    vendor = task.vendor
    if vendor is None:
        device = catalog.get(task.device)
        if device is None:
            raise CommandError(
                f"cannot tell which vendor runs task {task.task_id}: its release recorded no "
                f"qpu_info.vendor and device '{task.device}' is not in {catalog.path}"
            )
        vendor = device.vendor
    try:
        return make_vendor(vendor, catalog, timeout=timeout, environ=environ)
    except ValueError as exc:
        raise CommandError(f"task {task.task_id}: {exc}") from None


def _short(task_id: str) -> str:
    """The last part of a task ARN, for one-line progress."""
    return task_id.rsplit("/", 1)[-1]


def describe_snapshot(snapshot: TaskSnapshot) -> str:
    """``QUEUED, position 3``, ``RUNNING``, ``FAILED: reason``."""
    text = snapshot.state.value
    if snapshot.position is not None:
        text += f", position {'>' if snapshot.position_capped else ''}{snapshot.position}"
    if snapshot.message and snapshot.state in (TaskState.FAILED, TaskState.CANCELLED):
        text += f": {snapshot.message}"
    return text


def watch_task(
    vendor: Vendor,
    ref: TaskRef,
    *,
    timeout: float | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    max_interval: float = DEFAULT_MAX_INTERVAL,
    max_error_time: float = DEFAULT_MAX_ERROR_TIME,
    on_update: Callable[[TaskSnapshot], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TaskSnapshot:
    """Poll REF until it is COMPLETED, FAILED or CANCELLED and return that snapshot.

    The interval starts at ``poll_interval`` and grows by half while nothing changes, up
    to ``max_interval``; any change of state or position brings it back. Retryable vendor
    errors (throttling, an outage) are waited out the same way for ``max_error_time``
    seconds in a row, then raised like any other error. ``on_update`` sees every snapshot.
    """
    start = clock()
    interval = poll_interval
    last: tuple[TaskState, int | None] | None = None
    snapshot: TaskSnapshot | None = None
    failing_since: float | None = None
    while True:
        try:
            snapshot = vendor.poll(ref)
            failing_since = None
        except VendorError as exc:
            now = clock()
            failing_since = now if failing_since is None else failing_since
            if not exc.retryable or now - failing_since >= max_error_time:
                raise CommandError(f"task {ref.task_id}: {exc}") from None
            interval = min(max_interval, interval * 1.5)
        else:
            if on_update is not None:
                on_update(snapshot)
            if snapshot.terminal:
                return snapshot
            key = (snapshot.state, snapshot.position)
            interval = poll_interval if key != last else min(max_interval, interval * 1.5)
            last = key
        if timeout is not None:
            left = timeout - (clock() - start)
            if left <= 0:
                state = describe_snapshot(snapshot) if snapshot else "not answering"
                raise WaitTimeout(
                    f"quantum task {ref.task_id} is still {state} after {round(timeout, 1):g}s"
                )
            sleep(min(interval, left))
        else:
            sleep(interval)


def result_of(
    vendor: Vendor,
    ref: TaskRef,
    snapshot: TaskSnapshot,
    *,
    max_error_time: float = DEFAULT_MAX_ERROR_TIME,
    max_interval: float = DEFAULT_MAX_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TaskResult:
    """The result of a terminal task, or TaskFailedError for FAILED/CANCELLED.

    Retryable errors (a result download the vendor failed, the handler service
    restarting) are waited out as ``watch_task`` waits them out, for ``max_error_time``
    seconds in a row: the task is paid for, its result is worth the wait."""
    if snapshot.state is not TaskState.COMPLETED:
        where = f" on {ref.device}" if ref.device else ""
        raise TaskFailedError(
            f"quantum task {ref.task_id}{where} ended {describe_snapshot(snapshot)}", snapshot
        )
    # The vendors' one retry loop, every retryable error until they have lasted
    # max_error_time (the last try may start one interval later).
    budget = RetryBudget(
        attempts=sys.maxsize,
        base_delay=DEFAULT_POLL_INTERVAL,
        max_delay=max_interval,
        deadline=max_error_time + max_interval,
    )
    try:
        return budget.run(lambda: vendor.result_of(ref), clock=clock, sleep=sleep)
    except VendorError as exc:
        raise CommandError(f"task {ref.task_id}: {exc}") from None


def wait_result(
    task: JobTask | None = None,
    *,
    task_id: str | None = None,
    vendor: Vendor | None = None,
    timeout: float | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    max_interval: float = DEFAULT_MAX_INTERVAL,
    on_update: Callable[[TaskSnapshot], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> TaskResult:
    """Wait until the job's task (or ``task_id``, one of a batch) completes; its result.

    TASK defaults to ``current_task()``. Raises TaskFailedError if the task ends FAILED
    or CANCELLED, WaitTimeout after ``timeout`` seconds.
    """
    job_task = task if task is not None else current_task()
    ref = job_task.ref(task_id)
    vendor = vendor if vendor is not None else open_vendor(job_task)
    snapshot = watch_task(
        vendor,
        ref,
        timeout=timeout,
        poll_interval=poll_interval,
        max_interval=max_interval,
        on_update=on_update,
        clock=clock,
        sleep=sleep,
    )
    return result_of(vendor, ref, snapshot, max_interval=max_interval, clock=clock, sleep=sleep)


def session_environment(task: JobTask, vendor: Vendor | None = None) -> dict[str, str]:
    """What the job's own later tasks need in their environment to ride the session its
    first task rode (``qpu.session``; QRMI's names, e.g. ``QRMI_JOB_ACQUISITION_TOKEN``).

    Read back from the vendor through the task, with the caller's own credentials: the
    session id is a secret that flux-quantum never records. Put it only into this job's
    environment. Raises CommandError when the task rode no session.
    """
    # The session id is the job's secret to read with its own credentials: never relayed.
    vendor = vendor if vendor is not None else own_vendor(task)
    ref = task.ref()
    try:
        session = vendor.session_of(ref)
        if session is None:
            raise CommandError(
                f"job {encode_jobid(task.jobid)}'s task {ref.task_id} rode no session "
                "(submit with --setattr=qpu.session=dedicated or batch; the qpu-session "
                "event says if the vendor ran it as a single job)"
            )
        return vendor.session_environment(session)
    except VendorError as exc:
        raise CommandError(f"task {ref.task_id}: {exc}") from None
