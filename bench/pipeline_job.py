#!/usr/bin/env python3
"""One piece of bench/pipeline.py's comparison arm: the QPU call inside a classical job.

Run as a Flux job that already holds its node: it creates its piece's task itself (the
local vendor against the emulator, the catalog of ``FLUX_QUANTUM_BACKENDS``), polls until
the task is done, writes ``{"task", "counts", "t_result"}`` to OUT and then does the
piece's classical work (``--work`` seconds), as a job that calls the QPU from inside
does. It owns nothing else.

    pipeline_job.py DEVICE PROGRAM OUT [--work S] [--shots N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from flux_quantum.catalog import load_catalog
from flux_quantum.vendors.factory import make_vendor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("device")
    parser.add_argument("program", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=float, default=0.0)
    parser.add_argument("--shots", type=int, default=1000)
    args = parser.parse_args(argv)
    catalog = load_catalog(os.environ.get("FLUX_QUANTUM_BACKENDS"))
    device = catalog.get(args.device)
    vendor = make_vendor(device.vendor, catalog)
    token = f"in-job-{os.environ.get('FLUX_JOB_ID', os.getpid())}"
    task = vendor.submit(device, args.program.read_text(), args.shots, token)
    while not vendor.poll(task).terminal:
        time.sleep(0.2)
    counts = dict(vendor.result(task).counts)
    record = {"task": task.task_id, "counts": counts, "t_result": time.time()}
    args.out.write_text(json.dumps(record))
    time.sleep(args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
