#!/usr/bin/env python3
"""The pipeline of pipeline.sh driven by Parsl (``pip install parsl``), unchanged, run
from inside the Flux instance (an allocation, or ``flux start``).

Parsl orders the work by its data: an app runs once the futures it takes are done. The
classical steps (decompose, aggregate) are Parsl apps on Parsl's ``FluxExecutor``, each
one a Flux job of this instance: its documented ``launch_cmd`` runs Parsl's manager in
the instance already there instead of starting a nested one (so the jobs meet the
quantum plugin and the handler service of this instance). Parsl's ``FluxExecutor``
builds its jobspecs from four resource keys and has no way to carry a job attribute, so
the QPU stage of each piece is a Parsl app on Parsl's ``ThreadPoolExecutor``: it submits
the piece's hybrid job (``flux_quantum.job.hybrid``) to the same instance and waits, in
the workflow's own process, for it to end. The held job takes no node while its task
waits; Parsl submits it only once the decomposition's future is done, so its program is
there. What upstream would need for the QPU stage to be a ``FluxExecutor`` app too: the
executor setting ``resource_specification["attributes"]`` on the jobspec
(``jobspec.setattr(key, value)`` for each), which docs/workflows.md spells out.

    examples/pipeline/parsl_pipeline.py DIR [--pieces N] [--rounds R] [--device D]

prints the last round's result (JSON); exit code 1 when a step failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import parsl
from parsl.app.app import bash_app, python_app
from parsl.config import Config
from parsl.executors import FluxExecutor, ThreadPoolExecutor

PIECES = Path(__file__).resolve().parent / "pieces.py"
# Parsl's manager in this instance (FLUX_URI), not in a nested one.
IN_THIS_INSTANCE = "{python} {manager} {protocol} {hostname} {port}"


# Parsl sends an app to its worker by value: what it uses comes in its arguments or its
# own imports, not this module's globals.
@bash_app(executors=["flux"])
def decompose(step: str, directory: str, round_: int, pieces: int, inputs: list = ()) -> str:
    return f"{step} decompose {directory} {round_} --pieces {pieces}"


@python_app(executors=["qpu"])
def qpu_stage(program: str, device: str, inputs: list = ()) -> str:
    """Submit the piece's held QPU job and wait for it to end; its job id."""
    import flux
    import flux.job
    from flux.job import JobID, JobspecV1

    from flux_quantum.job.hybrid import hybrid

    jobspec = JobspecV1.from_command(["true"])
    jobspec.setattr("system.job.name", "qpu-stage")
    request = {"device": device, "program": program, "failover": "simulator"}
    handle = flux.Flux()
    jobid = flux.job.submit(handle, hybrid(jobspec, request))
    info = flux.job.result(handle, jobid)
    if info.returncode != 0:
        raise RuntimeError(f"QPU job {JobID(jobid).f58} ended: {info.exception.note}")
    return JobID(jobid).f58


@bash_app(executors=["flux"])
def aggregate(step: str, directory: str, round_: int, *jobs: str, inputs: list = ()) -> str:
    return f"{step} aggregate {directory} {round_} {' '.join(jobs)}"


def run(directory: Path, pieces: int, rounds: int, device: str) -> None:
    step = f"{sys.executable} {PIECES}"
    before: list = []
    for round_ in range(rounds):
        prep = decompose(step, str(directory), round_, pieces, inputs=before)
        jobs = [
            qpu_stage(str(directory / f"round-{round_}" / f"piece-{i}.qasm"), device, inputs=[prep])
            for i in range(pieces)
        ]
        before = [aggregate(step, str(directory), round_, *jobs, inputs=jobs)]
    before[0].result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--pieces", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="local:local-sv1")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    config = Config(
        executors=[
            FluxExecutor(
                label="flux",
                working_dir=str(directory / "parsl-flux"),
                launch_cmd=IN_THIS_INSTANCE,
            ),
            ThreadPoolExecutor(label="qpu", max_threads=max(4, args.pieces)),
        ],
        run_dir=str(directory / "runinfo"),
    )
    with parsl.load(config):
        try:
            run(directory, args.pieces, args.rounds, args.device)
        except Exception as exc:
            print(f"parsl_pipeline: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print((directory / f"round-{args.rounds - 1}" / "result.json").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
