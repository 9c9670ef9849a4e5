"""The QAOA MaxCut optimisation as ONE job that runs the whole loop in its allocation.

The comparison for the chain of held steps (step.py): the same optimiser, the same
programs, the same output, but the job holds its nodes from its first result to its
last, through every later task's vendor queue. Submitted with its first program as the
job's own qpu request (README.md)::

    flux submit --qpu=local:local-garnet --qpu-program=examples/qaoa/start.qasm \\
        python examples/qaoa/injob.py

Evaluation 0 is the job's own task: the service created it and released the job, and
the job reads it as any consumer does (``current_task``, ``wait_result``, through the
service). Every later program is a task the job creates itself, with its own vendor
(``own_vendor``: the job owner's credentials, the catalog its release used) on the
device its first task ran on, and polls until done. Each task's idempotency token is
``qaoa-JOBID-N``: a job that runs again finds its tasks instead of paying twice.

``--session`` (IBM, or the emulator's IBM side): the job was submitted with
``qpu.session=dedicated`` (or ``batch``) and its later tasks ride the session its first
task opened, through the session variables ``flux quantum task --session-env`` prints
(read back from IBM with the job's own key, never recorded); the service closes the
session when the job ends.

Only rank 0 optimises; other ranks exit. ``--state FILE`` writes the optimiser state
after every evaluation (``python examples/qaoa/maxcut.py report FILE`` prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import maxcut

from flux_quantum.catalog import CatalogError, Device, load_catalog
from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    JobTask,
    current_task,
    own_vendor,
    result_of,
    session_environment,
    wait_result,
    watch_task,
)
from flux_quantum.vendors.base import Vendor
from flux_quantum.vendors.errors import VendorError


def options(argv: list[str] | None) -> tuple[argparse.Namespace, maxcut.SpsaConfig]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    maxcut.add_options(parser)
    parser.add_argument("--shots", type=int, help="shots of later tasks (default: the first's)")
    parser.add_argument(
        "--session", action="store_true", help="later tasks ride the first task's session (IBM)"
    )
    parser.add_argument("--state", type=Path, help="write the optimiser state here as it goes")
    parser.add_argument("--timeout", type=float, help="give up on a task after this many seconds")
    args = parser.parse_args(argv)
    if args.shots is not None and args.shots < 1:
        parser.error(f"--shots must be an integer >= 1, got {args.shots}")
    return args, maxcut.config_of(parser, args)


def device_of(task: JobTask) -> Device:
    """The catalog entry of the device the job's first task ran on (the catalog its
    release used, else the usual lookup, as ``own_vendor`` finds its settings)."""
    for path in dict.fromkeys((task.catalog, None)):
        try:
            device = load_catalog(path).get(task.device)
        except CatalogError:
            continue
        if device is not None:
            return device
    raise CommandError(f"device '{task.device}' of task {task.task_id} is in no readable catalog")


def later_vendor(task: JobTask, session: bool) -> Vendor:
    """The job's own vendor for its later tasks; with SESSION, set to ride the session
    the first task opened (its variables go into this process's vendor only)."""
    environ: Mapping[str, str] = os.environ
    if session:
        environ = {**os.environ, **session_environment(task)}
    return own_vendor(task, environ=environ)


def save(path: Path | None, state: Mapping[str, Any]) -> None:
    if path is None:
        return
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(state, f, sort_keys=True)
        f.write("\n")
    os.replace(f.name, path)


def run(args: argparse.Namespace, config: maxcut.SpsaConfig) -> dict[str, Any]:
    task = current_task()
    state = maxcut.initial_state(config)
    first = wait_result(task, timeout=args.timeout)
    shots = args.shots or sum(first.counts.values())
    vendor = later_vendor(task, args.session)
    device = device_of(task)
    print(
        f"job {task.jobid}: task 0 {task.task_id} on {task.device}; later tasks: {shots} shots",
        flush=True,
    )
    counts, evaluation = first.counts, 0
    while True:
        value = maxcut.expected_cut(counts)
        state = maxcut.record_sample(state, counts)
        state, pending, done = maxcut.advance(state, value)
        save(args.state, state)
        print(maxcut.progress_line(evaluation, value, state), flush=True)
        if done or pending is None:
            return state
        evaluation += 1
        token = f"qaoa-{task.jobid}-{evaluation}"
        try:
            ref = vendor.submit(device, maxcut.circuit(pending), shots, token=token)
        except VendorError as exc:
            raise CommandError(f"evaluation {evaluation}: {exc}") from None
        snapshot = watch_task(vendor, ref, timeout=args.timeout)
        counts = result_of(vendor, ref, snapshot).counts


def main(argv: list[str] | None = None) -> int:
    args, config = options(argv)
    if os.environ.get("FLUX_TASK_RANK", "0") != "0":
        return 0  # one optimiser per job: rank 0's
    try:
        state = run(args, config)
    except (CommandError, ValueError) as exc:
        print(f"injob.py: {exc}", file=sys.stderr)
        return 1
    print(maxcut.report(state), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
