#!/usr/bin/env python3
"""One small job of ``bench/merge.py``: read its own result, check it is its own program's.

The job's qpu request is one small program (``program``: a Bell pair with the job's own
rx angle, and the job's number written into tag qubits with x gates); the handler
service created its task, alone or merged with other jobs' programs into one vendor
task, and released the job once the task was done. The job reads its result exactly as
any job does (``wait_result(current_task())``) and checks that it got exactly
``--shots`` shots, every one of them with its own number in the tag bits and the Bell
pair's two bits equal: a job handed another job's counts, or a whole merged task's,
fails the check.

Rank 0 writes what it found (``--out``, JSON) and exits 1 when the check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def tag_bits(jobs: int) -> int:
    """Qubits that carry a job's number among ``jobs`` jobs (at least one)."""
    return max(1, math.ceil(math.log2(max(2, jobs))))


def angle(index: int, jobs: int) -> float:
    """Job ``index``'s rx angle: spread over (0, pi), so the jobs' counts differ."""
    return math.pi * (index + 1) / (jobs + 1)


def program(index: int, jobs: int) -> str:
    """Job ``index``'s OpenQASM 3 program (of ``jobs`` jobs): an rx-rotated Bell pair on
    q[0], q[1] and the job's number in binary on the tag qubits, least significant bit
    first (c[2] is bit 0)."""
    if not 0 <= index < jobs:
        raise ValueError(f"job index {index} is not in 0..{jobs - 1}")
    bits = tag_bits(jobs)
    lines = [
        "OPENQASM 3.0;",
        f"qubit[{2 + bits}] q;",
        f"bit[{2 + bits}] c;",
        f"rx({angle(index, jobs):.6f}) q[0];",
        "cnot q[0], q[1];",
    ]
    lines += [f"x q[{2 + k}];" for k in range(bits) if index >> k & 1]
    lines.append("c = measure q;")
    return "\n".join(lines) + "\n"


def check(counts: Mapping[str, int], index: int, jobs: int, shots: int) -> str | None:
    """Why ``counts`` are not job ``index``'s own ``shots`` shots (None: they are).

    Counts are written c[0] first (both vendors, as flux-quantum hands them on)."""
    total = sum(counts.values())
    if total != shots:
        return f"{total} shots, not {shots}"
    width = 2 + tag_bits(jobs)
    for key in counts:
        if len(key) != width or set(key) - {"0", "1"}:
            return f"outcome {key!r} is not {width} bits"
        number = sum(1 << k for k, bit in enumerate(key[2:]) if bit == "1")
        if number != index:
            return f"outcome {key!r} carries job {number}'s number, not {index}"
        if key[0] != key[1]:
            return f"outcome {key!r} breaks the Bell pair"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=int, required=True, help="this job's number, 0..jobs-1")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--shots", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=600.0, help="wall seconds")
    args = parser.parse_args(argv)
    if os.environ.get("FLUX_TASK_RANK", "0") != "0":
        return 0
    from flux_quantum.job.consumer import current_task, wait_result

    record: dict[str, object] = {"index": args.index, "ok": False}
    try:
        task = current_task()
        record.update(jobid=task.jobid, task=task.task_id)
        result = wait_result(task, timeout=args.timeout, poll_interval=0.2, max_interval=1.0)
        record["read_at"] = time.time()
        counts = dict(result.counts)
        record["counts"] = counts
        record["shots"] = sum(counts.values())
        why = check(counts, args.index, args.jobs, args.shots)
        record["ok"] = why is None
        record["why"] = why
    except Exception as exc:  # the record says what went wrong; the exit status too
        record["why"] = f"{type(exc).__name__}: {exc}"[:400]
    args.out.write_text(json.dumps(record) + "\n")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
