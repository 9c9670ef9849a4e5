#!/usr/bin/env python3
"""One hybrid job of ``bench/reservation.py``: a variational loop that iterates from inside.

Its first task is the job's qpu request (the handler service creates it; the job is
released at the request's release point, or, in a reserved window, when it is admitted).
Every later task the job creates itself with its own vendor (the Braket SDK's
``AwsSession.create_quantum_task``), after ``--think`` seconds of classical work, and
waits for it on its nodes. In a window the job-shell plugin has set the SDK's
``DirectReservation`` variables, so those tasks carry the reservation's ARN with no change
to this code; after the window's end Braket refuses them, and the job stops there.

Rank 0 writes what happened (``--out``, JSON): the job's tasks in order with their final
state, and why it stopped early, if it did.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from flux_quantum.catalog import load_catalog
from flux_quantum.job.consumer import current_task, own_vendor, watch_task
from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.errors import VendorError

BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, required=True, help="tasks in all, the first too")
    parser.add_argument("--think", type=float, required=True, help="wall seconds between tasks")
    parser.add_argument("--shots", type=int, required=True)
    parser.add_argument("--poll", type=float, default=0.05, help="wall seconds between polls")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if os.environ.get("FLUX_TASK_RANK", "0") != "0":
        return 0
    task = current_task()
    record: dict[str, object] = {"jobid": task.jobid, "tasks": [], "stopped": None}
    tasks: list[dict[str, str]] = record["tasks"]  # type: ignore[assignment]
    vendor = own_vendor(task)
    poll = {"poll_interval": args.poll, "max_interval": 2 * args.poll}
    first = watch_task(vendor, task.ref(), **poll)
    tasks.append({"id": task.task_id, "state": first.state.value})
    device = load_catalog(task.catalog).get(task.device)
    for k in range(1, args.tasks):
        if first.state is not TaskState.COMPLETED:
            record["stopped"] = f"task {k - 1} ended {tasks[-1]['state']}"
            break
        time.sleep(args.think)
        try:
            ref = vendor.submit(device, BELL, args.shots, token=f"rsv-{task.jobid}-{k}")
        except VendorError as exc:
            record["stopped"] = f"task {k} refused: {exc.vendor_code}: {exc}"[:300]
            break
        first = watch_task(vendor, ref, **poll)
        tasks.append({"id": ref.task_id, "state": first.state.value})
    args.out.write_text(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
