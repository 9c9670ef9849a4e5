"""``flux quantum task``: the quantum task of a job, and its result (counts) once done.

Thin: it asks ``flux_quantum.job.consumer`` for the job's task and the vendor layer for the
task's state and result, and formats them the Flux way (``--json`` for machines, errors
as ``flux-quantum: ERROR: ...``). With ``--wait``, progress goes to stderr (one updating
line on a terminal, one line per change otherwise) and the answer to stdout. With
``--session-env`` it prints what the job's own later tasks need to ride the session its
task rode (``eval "$(flux quantum task --session-env)"``). It never changes a job or a
vendor task.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    DEFAULT_POLL_INTERVAL,
    READ_VARIABLE,
    JobTask,
    TaskFailedError,
    compiled_programs,
    current_task,
    describe_snapshot,
    encode_jobid,
    open_vendor,
    result_of,
    session_environment,
    wait_release,
    watch_task,
)
from flux_quantum.protocol import events
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState, Vendor
from flux_quantum.vendors.errors import VendorError


@dataclass(frozen=True)
class TaskReport:
    """One task of the job as the command shows it."""

    ref: TaskRef
    snapshot: TaskSnapshot
    counts: Mapping[str, int] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.ref.task_id,
            "device": self.ref.device,
            "state": self.snapshot.state.value,
            "position": self.snapshot.position,
            "position_capped": self.snapshot.position_capped,
            "message": self.snapshot.message,
            "counts": dict(self.counts) if self.counts is not None else None,
        }


class Progress:
    """Live state of the task being waited for, on a stream (stderr).

    On a terminal: one line rewritten in place, cut to the terminal width from the left
    so the state and elapsed time stay visible. Elsewhere
    (a job's output file, a pipe): one line each time the state or position changes.
    """

    def __init__(self, stream: TextIO, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.start = time.monotonic()
        self.last: str | None = None
        self.drawn = False

    def _emit(self, text: str) -> None:
        if self.tty:
            width = max(20, shutil.get_terminal_size().columns - 1)
            elapsed = f" ({time.monotonic() - self.start:.0f}s)"
            line = text + elapsed
            if len(line) > width:  # keep the state, lose the head of the label
                line = "…" + line[len(line) - width + 1 :]
            self.stream.write("\r\033[K" + line)
            self.drawn = True
        elif text != self.last:
            self.stream.write(text + "\n")
        self.last = text
        self.stream.flush()

    def held(self, jobid: int) -> None:
        self._emit(f"{encode_jobid(jobid)}: held (DEPEND), waiting for its quantum task")

    def update(self, label: str, snapshot: TaskSnapshot) -> None:
        self._emit(f"{label}: {describe_snapshot(snapshot)}")

    def finish(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self.drawn = False


def _label(job_task: JobTask, ref: TaskRef) -> str:
    # The task's own id (a Braket ARN ends in a UUID), shortened like a git hash.
    short = ref.task_id.rsplit("/", 1)[-1][:8]
    device = job_task.device_of(ref.task_id)
    where = f" on {device}" if device else ""
    if len(job_task.tasks) > 1:
        index = job_task.tasks.index(ref.task_id) + 1
        return f"{encode_jobid(job_task.jobid)} task {index}/{len(job_task.tasks)} {short}{where}"
    return f"{encode_jobid(job_task.jobid)} task {short}{where}"


def _poll_once(vendor: Vendor, ref: TaskRef) -> TaskSnapshot:
    try:
        return vendor.poll(ref)
    except VendorError as exc:
        raise CommandError(f"task {ref.task_id}: {exc}") from None


def _report(vendor: Vendor, ref: TaskRef, snapshot: TaskSnapshot) -> TaskReport:
    counts = None
    if snapshot.state is TaskState.COMPLETED:
        counts = result_of(vendor, ref, snapshot).counts
    return TaskReport(ref, snapshot, counts)


def format_counts(counts: Mapping[str, int]) -> str:
    return " ".join(f"{bits}={n}" for bits, n in sorted(counts.items()))


def format_text(job_task: JobTask, reports: list[TaskReport]) -> str:
    device = job_task.device or "-"
    if job_task.vendor:
        device += f" (vendor {job_task.vendor})"
    lines = [f"job:     {encode_jobid(job_task.jobid)}", f"device:  {device}"]
    for report in reports:
        lines.append(f"task:    {report.ref.task_id}")
        if report.ref.device and report.ref.device != job_task.device:
            lines.append(f"device:  {report.ref.device}")
        lines.append(f"state:   {describe_snapshot(report.snapshot)}")
        if report.counts is not None:
            lines.append(f"counts:  {format_counts(report.counts)}")
    return "\n".join(lines)


def format_json(
    job_task: JobTask, reports: list[TaskReport], compiled: list[dict[str, Any]] | None = None
) -> str:
    out = job_task.to_dict()
    first = reports[0].to_dict()
    out.update(
        state=first["state"],
        position=first["position"],
        message=first["message"],
        counts=first["counts"],
        tasks=[r.to_dict() for r in reports],
    )
    if compiled:
        out["compiled"] = compiled  # what the compile stage sent for each program
    return json.dumps(out)


def format_programs(compiled: list[events.Compile], as_json: bool = False) -> str:
    """What the compile stage made of each program: where its qubits went and the text
    the vendor received (``--program``)."""
    if as_json:
        return json.dumps([record.to_context() for record in compiled])
    if not compiled:
        return "no program compiled (yet, or the site's compile stage is off): it runs as written"
    blocks = []
    for record in compiled:
        facts = [record.form]
        if record.layout is not None:
            facts.append("qubits " + " ".join(f"{i}->{q}" for i, q in enumerate(record.layout)))
        if record.success is not None:
            facts.append(f"expected success {record.success:.3f}")
        if record.calibration:
            facts.append(f"calibration {record.calibration}")
        head = f"# program {record.index + 1} for {record.device} ({'; '.join(facts)})"
        if record.program is not None:
            body = record.program.rstrip("\n")
        elif record.bytes is not None:
            body = f"# ({record.bytes} bytes: too long to keep in the job's eventlog)"
        else:
            body = "# (sent as written)"
        blocks.append(f"{head}\n{body}")
    return "\n".join(blocks)


def format_environment(env: Mapping[str, str], as_json: bool = False) -> str:
    """``export NAME=VALUE`` lines a shell can ``eval``, or JSON."""
    if as_json:
        return json.dumps(dict(env))
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items()))


def cmd_task(args: argparse.Namespace) -> int:
    if args.timeout is not None and args.timeout <= 0:
        raise CommandError(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
    if args.interval <= 0:
        raise CommandError(f"--interval must be a number of seconds > 0, got {args.interval:g}")
    deadline = None if args.timeout is None else time.monotonic() + args.timeout

    def remaining() -> float | None:
        return None if deadline is None else max(0.001, deadline - time.monotonic())

    if args.program and not args.wait:  # a held job's too: what its task will run
        print(format_programs(compiled_programs(args.jobid), args.json))
        return 0
    progress = Progress(sys.stderr)
    try:
        if args.wait:
            job_task = wait_release(args.jobid, timeout=remaining(), on_held=progress.held)
        else:
            job_task = current_task(args.jobid)
        if args.session_env:
            print(format_environment(session_environment(job_task), args.json))
            return 0
        if args.program:
            print(format_programs(compiled_programs(job_task.jobid), args.json))
            return 0  # after the release (--wait): what its tasks ran
        vendor = open_vendor(job_task, direct=args.direct or None)
        reports = []
        for ref in job_task.refs():
            if args.wait:
                label = _label(job_task, ref)
                snapshot = watch_task(
                    vendor,
                    ref,
                    timeout=remaining(),
                    poll_interval=args.interval,
                    on_update=functools.partial(progress.update, label),
                )
            else:
                snapshot = _poll_once(vendor, ref)
            reports.append(_report(vendor, ref, snapshot))
    finally:
        progress.finish()

    if args.json:
        compiled = [record.to_context() for record in compiled_programs(job_task.jobid)]
        print(format_json(job_task, reports, compiled))
    else:
        print(format_text(job_task, reports))
    if args.wait:
        for report in reports:
            if report.snapshot.state is not TaskState.COMPLETED:
                raise TaskFailedError(
                    f"quantum task {report.ref.task_id} ended {describe_snapshot(report.snapshot)}",
                    report.snapshot,
                )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "task",
        help="show a job's quantum task and, once done, its result",
        description="Show the quantum task a qpu job was released with (inside a job: "
        "the job itself) and, once the task is COMPLETED, its measurement counts.",
    )
    p.add_argument(
        "jobid",
        nargs="?",
        metavar="JOBID",
        help="the job (default: FLUX_QPU_JOB, set by a loop for an iteration run in "
        "place, else FLUX_JOB_ID, i.e. the job this runs in)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the release (if held) and for the task to finish; progress on stderr",
    )
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument(
        "--program",
        action="store_true",
        help="print the program each task ran, as compiled for its device, and where "
        "its qubits went (a held job's too)",
    )
    p.add_argument(
        "--direct",
        action="store_true",
        help="read the task from the vendor with your own credentials instead of "
        f"through the handler service (also {READ_VARIABLE}=vendor); a job paid by the "
        "site's accounts always reads through the service",
    )
    p.add_argument(
        "--session-env",
        action="store_true",
        help="print the environment the job's own later tasks need to ride the session "
        'its task rode (qpu.session), as export lines: eval "$(flux quantum task '
        '--session-env)"; secret, keep it inside the job',
    )
    p.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="with --wait: give up after SECONDS"
    )
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_POLL_INTERVAL,
        metavar="SECONDS",
        help=f"with --wait: first poll interval (default {DEFAULT_POLL_INTERVAL:g}s; "
        "it grows while nothing changes)",
    )
    p.set_defaults(func=cmd_task)
