#!/usr/bin/env python3
"""bench/cutting.py's comparison arm: the cut run from inside a classical job.

Run as a Flux job that already holds its node: it creates every subexperiment of the
manifest itself (the local vendor against the emulator, the catalog of
``FLUX_QUANTUM_BACKENDS``), round-robin over DEVICES, polls until all are done,
recombines, and writes ``{"estimates", "tasks"}`` to OUT, as a job that cuts and calls
the QPUs from inside does. It owns nothing else.

    cutting_job.py MANIFEST OUT DEVICE [DEVICE ...] [--shots N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from flux_quantum.catalog import load_catalog
from flux_quantum.cutting import read_manifest, reconstruct
from flux_quantum.vendors.factory import make_vendor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("devices", nargs="+")
    parser.add_argument("--shots", type=int, default=1000)
    args = parser.parse_args(argv)
    experiments, _ = read_manifest(args.manifest)
    catalog = load_catalog(os.environ.get("FLUX_QUANTUM_BACKENDS"))
    devices = [catalog.get(name) for name in args.devices]
    vendor = make_vendor(devices[0].vendor, catalog)
    job = os.environ.get("FLUX_JOB_ID", str(os.getpid()))
    tasks = [
        vendor.submit(devices[i % len(devices)], p.text, args.shots, f"in-job-{job}-{i}")
        for i, p in enumerate(experiments.programs)
    ]
    pending = set(range(len(tasks)))
    while pending:
        pending = {i for i in pending if not vendor.poll(tasks[i]).terminal}
        if pending:
            time.sleep(0.2)
    counts = [dict(vendor.result(t).counts) for t in tasks]
    estimates = reconstruct(experiments, counts)
    record = {
        "estimates": [e.to_dict() for e in estimates],
        "tasks": [t.task_id for t in tasks],
    }
    args.out.write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
