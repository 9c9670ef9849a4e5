#!/usr/bin/env python3
"""The pipeline of pipeline.sh from Python: the same jobs through flux-core's own
``flux.job.FluxExecutor``, each QPU job made hybrid by ``flux_quantum.job.hybrid``
(its ``qpu`` request and the jobs it waits for on a jobspec flux-core built).

    examples/pipeline/pipeline.py DIR [--pieces N] [--rounds R] [--device D]

Every job of every round is submitted at once, as in the shell script; the script then
waits for the last aggregation and prints what it printed. Exit code 0 when it ended
well, 1 otherwise (with the job that did not and why).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import flux.job
from flux.job import JobspecV1

from flux_quantum.job.hybrid import hybrid

PIECES = Path(__file__).resolve().parent / "pieces.py"


def classical(name: str, *command: str, after: list[int] = ()) -> JobspecV1:
    jobspec = JobspecV1.from_command(list(command), cwd=str(Path.cwd()))
    jobspec.setattr("system.job.name", name)
    if after:
        jobspec.setattr(
            "system.dependencies", [{"scheme": "afterok", "value": str(j)} for j in after]
        )
    return jobspec


def submit_rounds(
    executor: flux.job.FluxExecutor,
    directory: Path,
    pieces: int,
    rounds: int,
    device: str,
    python: str = sys.executable,
) -> list[flux.job.FluxExecutorFuture]:
    """Submit every round; the aggregations' futures, in order."""
    aggregations = []
    after: list[int] = []
    for round_ in range(rounds):
        prep = executor.submit(
            classical(
                f"decompose-{round_}",
                python, str(PIECES), "decompose", str(directory), str(round_),
                f"--pieces={pieces}",
                after=after,
            )
        )  # fmt: skip
        qpu = []
        for index in range(pieces):
            jobspec = JobspecV1.from_command(["true"], cwd=str(Path.cwd()))
            jobspec.setattr("system.job.name", f"piece-{round_}.{index}")
            request = {
                "device": device,
                "failover": "simulator",
                "program": str(directory / f"round-{round_}" / f"piece-{index}.qasm"),
            }
            qpu.append(executor.submit(hybrid(jobspec, request, after=[prep.jobid()])))
        ids = [future.jobid() for future in qpu]
        aggregate = executor.submit(
            classical(
                f"aggregate-{round_}",
                python, str(PIECES), "aggregate", str(directory), str(round_),
                *(str(j) for j in ids),
                after=ids,
            )
        )  # fmt: skip
        aggregations.append(aggregate)
        after = [aggregate.jobid()]
    return aggregations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--pieces", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="local:local-sv1")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with flux.job.FluxExecutor() as executor:
        aggregations = submit_rounds(executor, directory, args.pieces, args.rounds, args.device)
        for future in aggregations:
            try:
                code = future.result()
            except Exception as exc:  # the job ended before it ran (a failed dependency)
                print(f"pipeline: aggregation {future.jobid()}: {exc}", file=sys.stderr)
                return 1
            if code != 0:
                print(f"pipeline: aggregation {future.jobid()} exited {code}", file=sys.stderr)
                return 1
    last = directory / f"round-{args.rounds - 1}" / "result.json"
    print(last.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
