#!/usr/bin/env python3
"""The QPU stage of a pipeline (issue 44): N pieces through one QPU on a 4-node
instance, written with held QPU jobs (examples/pipeline) against the same pipeline with
the QPU calls inside classical jobs.

This module owns that run and its record. One instance (``flux start --test-size=4``,
the quantum plugin, Fluxion, the handler service) and the vendor emulator on a wall
clock, one QPU that runs one task at a time (``--task`` seconds each). Each arm is one
round of examples/pipeline: a decomposition (``pieces.py decompose``, ``--work`` seconds
first), N piece jobs of one node each (``--work`` seconds of classical work on the
piece's result), and the aggregation (``pieces.py aggregate``) afterok on all of them,
every job submitted at once:

- **held**: each piece is a held QPU job (``--dependency=afterok`` on the decomposition,
  ``qpu.release_at=done``): its task is created when the decomposition ends, its node
  is allocated when the result is there, and it reads the result (``flux quantum
  task``) and works on it;
- **in-job**: each piece is a classical job afterok on the decomposition that creates
  its task itself (bench/pipeline_job.py), holds its node while the task waits, then
  works on the result.

Both write the piece's counts to a file the aggregation reads.

Per arm: the time to result (the first submit to the aggregation's end) and the idle
node-seconds (per piece job, the time its node was allocated before its task's result
existed, from the emulator's own timeline). The targets: the held arm's idle at most 1 %
of the in-job arm's, its time to result within 5 % of it (or better). The arms run
interleaved, ``--repeats`` times each.

    python bench/pipeline.py --quick      # N = 16, 1 s tasks, one run of each (< 5 min)
    python bench/pipeline.py              # N = 16, 4 s tasks, three of each -> bench/results/
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import verdict, write_record  # noqa: E402

PIECES = REPO / "examples" / "pipeline" / "pieces.py"
IN_JOB = REPO / "bench" / "pipeline_job.py"
RESULTS = REPO / "bench" / "results"
NODES = 4
DEVICE = "q-ring"
FAST = (
    "--poll-min=0.1", "--poll-cold-max=0.5", "--poll-max=0.5", "--scan-interval=0.2",
    "--device-check-interval=1", "--cluster-interval=0.5",
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    arm: str
    repeat: int
    pieces: int
    time_to_result: float
    idle_node_seconds: float
    ok: bool


class World:
    """The instance, the emulator and the service."""

    def __init__(self, work: Path, task_seconds: float) -> None:
        from flux_quantum.cli.demo import Instance
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario, WallClock

        self.work = work
        (work / "conf").mkdir(parents=True)
        (work / "conf" / "quantum.toml").write_text(instance_config())
        self.clock = WallClock()
        device = {
            "arn": "arn:aws:braket:us-east-1::device/qpu/emulator/ring",
            "name": "ring",
            "qubits": 20,
            "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
            "queue": {"service_time": task_seconds},
        }
        self.emu = Emulator(Scenario.from_dict({"devices": [device]}), clock=self.clock).start()
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(
            "devices:\n"
            f"  - name: {DEVICE}\n    vendor: local\n    id: {device['arn']}\n"
            "    class: qpu\n    qubits: 20\n    region: us-east-1\n"
            "    price: {per_task: 0.3, per_shot: 0.001}\n    slots: 64\n"
            f"    properties: {{drain_seconds_per_task: {task_seconds}}}\n"
        )
        self.inst = Instance(work, NODES, [])
        self.env = {
            "FLUX_QUANTUM_EMULATOR_URL": self.emu.url,
            "FLUX_QUANTUM_BACKENDS": str(self.catalog),
        }
        self.flux(
            "quantum", "service", "start", f"--catalog={self.catalog}",
            f"--emulator-url={self.emu.url}", *FAST,
        )  # fmt: skip

    def flux(self, *args: str, check: bool = True) -> str:
        return self.inst.run("flux", *args, check=check, env=self.env).stdout.strip()

    def submit(self, *args: str) -> str:
        return self.flux("submit", "-N1", *args)

    def eventlog(self, jobid: str) -> list[dict[str, Any]]:
        out = self.flux("job", "eventlog", "--format=json", jobid)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def stamp(self, jobid: str, name: str) -> float | None:
        return next((e["timestamp"] for e in self.eventlog(jobid) if e["name"] == name), None)

    def result_at(self, task: str) -> float:
        """The wall time the emulator ended the task (its own timeline)."""
        ended = self.emu.task_timeline(task).ended
        assert ended is not None, f"task {task} has not ended"
        return self.clock.wall(ended)

    def close(self) -> None:
        self.flux("quantum", "service", "stop", check=False)
        self.inst.stop()
        self.emu.stop()


def one_round(world: World, arm: str, pieces: int, work: float, run_dir: Path) -> Run:
    python = sys.executable
    run_dir.mkdir(parents=True)
    t0 = time.time()
    prep = world.submit(
        python, "-c",
        f"import time,subprocess,sys; time.sleep({work}); "
        f"sys.exit(subprocess.call([{python!r}, {str(PIECES)!r}, 'decompose', "
        f"{str(run_dir)!r}, '0', '--pieces', '{pieces}']))",
    )  # fmt: skip
    jobs, outs = [], []
    for index in range(pieces):
        program = run_dir / "round-0" / f"piece-{index}.qasm"
        out = run_dir / f"piece-{index}.json"
        outs.append(out)
        if arm == "held":
            # Released when its result is there: it reads it (through the service), then
            # works on it.
            jobs.append(
                world.submit(
                    f"--dependency=afterok:{prep}",
                    f"--setattr=qpu.device=local:{DEVICE}",
                    f"--setattr=qpu.program={program}",
                    "--setattr=qpu.release_at=done",
                    "sh",
                    "-c",
                    f"flux quantum task --wait --json > {out} && sleep {work}",
                )  # fmt: skip
            )
        else:
            jobs.append(
                world.submit(
                    f"--dependency=afterok:{prep}",
                    python,
                    str(IN_JOB),
                    DEVICE,
                    str(program),
                    str(out),
                    f"--work={work}",
                )  # fmt: skip
            )
    waits = [f"--dependency=afterok:{j}" for j in jobs]
    aggregate = world.submit(
        *waits, python, str(PIECES), "aggregate", str(run_dir), "0", "--files", *map(str, outs)
    )
    env = {**world.inst.env, **world.env}
    subprocess.run(
        ["flux", "job", "wait-event", "-t", "1200", aggregate, "clean"],
        env=env, capture_output=True, timeout=1300,
    )  # fmt: skip
    status = subprocess.run(["flux", "job", "status", aggregate], env=env, capture_output=True)
    ok = status.returncode == 0
    end = world.stamp(aggregate, "clean") or time.time()
    idle = 0.0
    for index, jobid in enumerate(jobs):
        start = world.stamp(jobid, "start")
        finish = world.stamp(jobid, "finish") or end
        if arm == "held":
            spec = json.loads(world.flux("job", "info", jobid, "jobspec"))
            task = spec["attributes"]["system"]["qpu_task"]
        elif outs[index].exists():
            task = json.loads(outs[index].read_text())["task"]
        else:
            task = ""
        if start is not None and task:
            idle += max(0.0, min(world.result_at(task), finish) - start)
    return Run(arm, 0, pieces, end - t0, idle, ok)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s tasks, one run of each")
    parser.add_argument("--pieces", type=int, default=16)
    parser.add_argument("--task", type=float, help="seconds one task takes (QPU)")
    parser.add_argument("--work", type=float, help="seconds of classical work per step")
    parser.add_argument("--repeats", type=int)
    args = parser.parse_args(argv)
    task = args.task if args.task is not None else (1.0 if args.quick else 4.0)
    work = args.work if args.work is not None else (2.0 if args.quick else 8.0)
    repeats = args.repeats or (1 if args.quick else 3)
    base = Path(tempfile.mkdtemp(prefix="fq-pipeline-"))
    world = World(base / "instance", task)
    runs: list[Run] = []
    try:
        for repeat in range(repeats):
            order = ("held", "in-job") if repeat % 2 == 0 else ("in-job", "held")
            for arm in order:
                run = one_round(world, arm, args.pieces, work, base / f"{arm}-{repeat}")
                runs.append(Run(**{**asdict(run), "repeat": repeat}))
                print(
                    f"{arm:7s} repeat {repeat}: time to result {run.time_to_result:6.1f} s, "
                    f"idle {run.idle_node_seconds:7.1f} node-s, {'ok' if run.ok else 'FAILED'}",
                    flush=True,
                )
    finally:
        world.close()
        shutil.rmtree(base, ignore_errors=True)
    held = [r for r in runs if r.arm == "held"]
    injob = [r for r in runs if r.arm == "in-job"]
    t_held = sum(r.time_to_result for r in held) / len(held)
    t_injob = sum(r.time_to_result for r in injob) / len(injob)
    idle_held = sum(r.idle_node_seconds for r in held) / len(held)
    idle_injob = sum(r.idle_node_seconds for r in injob) / len(injob)
    idle_ratio = idle_held / idle_injob if idle_injob > 0 else float("inf")
    time_ratio = t_held / t_injob
    all_ok = all(r.ok for r in runs)
    lines = [
        f"pipeline: {args.pieces} pieces, {NODES} nodes, one QPU ({task:g} s a task), "
        f"{work:g} s of classical work per step, {repeats} run(s) of each arm, interleaved",
        f"held QPU jobs:    time to result {t_held:.1f} s, idle {idle_held:.1f} node-s",
        f"QPU calls in job: time to result {t_injob:.1f} s, idle {idle_injob:.1f} node-s",
        f"idle held/in-job {idle_ratio:.2%} (target <= 1%): {verdict(idle_ratio <= 0.01)}",
        f"time to result held/in-job {time_ratio:.3f} (target <= 1.05): "
        f"{verdict(time_ratio <= 1.05)}",
        f"every run's aggregation ended well: {verdict(all_ok)}",
    ]
    print("\n".join(lines))
    if not args.quick:
        write_record(RESULTS, "pipeline", argv or sys.argv[1:], runs, lines)
    return 0 if all_ok and idle_ratio <= 0.01 and time_ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
