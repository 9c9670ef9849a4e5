#!/usr/bin/env python3
"""Circuit cutting (issue 45): a circuit cut and spread over idle smaller devices, against
the same circuit run whole on a busy wider device, and against the cut run from inside a
classical job.

This module owns that run and its record. Per round, a fresh instance (``flux start
--test-size=2``, the quantum plugin, Fluxion, the handler service) and a fresh vendor
emulator on a wall clock: three idle QPUs of ``--small`` qubits and one of 34 qubits with
``--depth`` tasks ahead of ours, every task ``--task`` seconds. The circuit is a chain of
``--qubits`` qubits (``ry`` on each, ``cz`` between neighbours), the observables
``X11``-like and ``Z11 Z12``-like at the middle, 1000 shots a program. The arms:

- **cut**: ``flux quantum cut submit --max-width SMALL``: one held batch job, its
  subexperiments spread by the service (policy min-wait), released when all are done,
  ``flux quantum cut result`` recombining in the job;
- **whole**: ``flux quantum cut submit --qpu local:wide``: no cut (one fragment, a
  program a measurement setting) on the busy wide device, held the same way;
- **in-job**: a classical job allocated at once that creates the same subexperiments
  itself round-robin on the small devices (bench/cutting_job.py), holds its node while
  they wait and run, and recombines.

Per arm: the time to result (the submit command's start to the job's end), the cost
(the catalog's estimate of every task it created), the idle node-seconds (the time its
node was allocated before its last task's result existed, from the emulator's own
timeline; gated 0 for the held arms), the accuracy (each value's distance from the exact
value of a state-vector simulation, in standard errors; gated <= 3) and, for the cut,
the coordination overhead: the time not spent with a subexperiment in a vendor queue or
running, over the time to result (target <= 5 %, DQR's figure).

    python bench/cutting.py --quick      # 20 qubits on 16-qubit devices, 6 s tasks (< 5 min)
    python bench/cutting.py              # 24 qubits on 20-qubit devices, 30 s tasks -> bench/results/

Each round's service is warmed up first with one small job (a site's service runs for
weeks: the vendor SDK's first session is no cut's cost). The coordination overhead is a
fixed few seconds (the submit command, the service's first creates, the job's start and
its reads); it is under 5 % once the subexperiments' own time dominates, as on real
devices, not with the quick run's 6-second tasks.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import verdict, write_record  # noqa: E402

IN_JOB = REPO / "bench" / "cutting_job.py"
RESULTS = REPO / "bench" / "results"
NODES = 2
SHOTS = 1000
SMALL = ("small-a", "small-b", "small-c")
PRICE = {"per_task": 0.3, "per_shot": 0.001}
FAST = (
    "--poll-min=0.1", "--poll-cold-max=0.5", "--poll-max=0.5", "--scan-interval=0.2",
    "--device-check-interval=1", "--cluster-interval=0.5",
)  # fmt: skip


def chain(qubits: int) -> str:
    lines = ["OPENQASM 3.0;", f"qubit[{qubits}] q;"]
    lines += [f"ry({0.4 + 0.35 * (i % 3):.2f}) q[{i}];" for i in range(qubits)]
    lines += [f"cz q[{i}], q[{i + 1}];" for i in range(qubits - 1)]
    return "\n".join(lines) + "\n"


def observables(qubits: int) -> list[str]:
    middle = qubits // 2 - 1
    return [f"X{middle}", f"Z{middle} Z{middle + 1}"]


@dataclass
class Run:
    arm: str
    repeat: int
    time_to_result: float
    cost: float
    idle_node_seconds: float
    tasks: int
    devices: dict[str, int]
    deviations: list[float]  # |value - exact| / standard error, per observable
    overhead: float | None
    ok: bool
    values: list[float] = field(default_factory=list)
    # Where the time went: the submit command, the first task's create after the
    # job's submit, the last result to the job's release, the release to its end.
    phases: dict[str, float] = field(default_factory=dict)


class World:
    """One instance, one emulator (fresh queues), the service."""

    def __init__(self, work: Path, small: int, depth: int, task: float, qubits: int) -> None:
        from flux_quantum.cli.demo import Instance
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario, WallClock

        self.work = work
        (work / "conf").mkdir(parents=True)
        (work / "conf" / "quantum.toml").write_text(instance_config())
        self.clock = WallClock()
        arn = "arn:aws:braket:us-east-1::device/qpu/emulator/{}"
        devices = [
            {"arn": arn.format(n), "qubits": small, "queue": {"service_time": task}}
            for n in ("SmallA", "SmallB", "SmallC")
        ]
        devices.append(
            {
                "arn": arn.format("Wide"),
                "qubits": 34,
                "queue": {"depth": depth, "service_time": task},
            }
        )
        scenario = {"devices": devices, "max_simulated_qubits": qubits}
        self.emu = Emulator(Scenario.from_dict(scenario), clock=self.clock).start()
        names = [*SMALL, "wide"]
        self.catalog = work / "backends.yaml"
        lines = ["devices:"]
        for name, spec in zip(names, devices, strict=True):
            lines += [
                f"  - name: {name}",
                "    vendor: local",
                f"    id: {spec['arn']}",
                "    class: qpu",
                f"    qubits: {spec['qubits']}",
                "    region: us-east-1",
                f"    price: {{per_task: {PRICE['per_task']}, per_shot: {PRICE['per_shot']}}}",
                "    slots: 8",
                f"    properties: {{drain_seconds_per_task: {task}}}",
            ]
        self.catalog.write_text("\n".join(lines) + "\n")
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

    def warm_up(self) -> None:
        """One small job through the service, first: a site's service runs for weeks,
        and its first create (the vendor SDK's imports and session) is no cut's cost."""
        bell = self.work / "bell.qasm"
        bell.write_text(
            "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncz q[0], q[1];\nc = measure q;\n"
        )
        jobid = self.flux(
            "submit", f"--setattr=qpu.device=local:{SMALL[0]}", f"--setattr=qpu.program={bell}",
            "--setattr=qpu.shots=10", "flux", "quantum", "task", "--wait",
        )  # fmt: skip
        self.flux("job", "wait-event", "-t", "300", jobid, "clean")

    def eventlog(self, jobid: str) -> list[dict[str, Any]]:
        out = self.flux("job", "eventlog", "--format=json", jobid)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def stamp(self, jobid: str, name: str) -> float | None:
        return next((e["timestamp"] for e in self.eventlog(jobid) if e["name"] == name), None)

    def span(self, task: str) -> tuple[float, float]:
        """When the task was created and when it ended, wall time (the emulator's own)."""
        timeline = self.emu.task_timeline(task)
        assert timeline.ended is not None, f"task {task} has not ended"
        return self.clock.wall(timeline.created), self.clock.wall(timeline.ended)

    def close(self) -> None:
        self.flux("quantum", "service", "stop", check=False)
        self.inst.stop()
        self.emu.stop()


def covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def one_round(
    world: World, arm: str, qubits: int, small: int, exact: list[float], run_dir: Path
) -> Run:
    run_dir.mkdir(parents=True)
    circuit = run_dir / "chain.qasm"
    circuit.write_text(chain(qubits))
    out = run_dir / "result.json"
    obs = [f"--observable={o}" for o in observables(qubits)]
    common = [f"--catalog={world.catalog}", f"--shots={SHOTS}", *obs]
    t0 = time.time()
    if arm == "in-job":
        # The manifest, prepared as the held arm's is, written where the job reads it.
        from flux_quantum.cutting import run_bounded, write_manifest
        from flux_quantum.cutting.manifest import load

        request = {"circuit": chain(qubits), "observables": observables(qubits)}
        doc = run_bounded({**request, "max_width": small})
        manifest = run_dir / "cut.json"
        write_manifest(manifest, load(doc))
        jobid = world.flux(
            "submit", "-N1", sys.executable, str(IN_JOB), str(manifest), str(out), *SMALL,
            f"--shots={SHOTS}",
        )  # fmt: skip
    else:
        where = [f"--max-width={small}", "--setattr=qpu.vendor=local"]
        if arm == "whole":
            where = ["--qpu=local:wide", "--max-width=34"]
        jobid = world.flux(
            "quantum", "cut", "submit", *common, *where, f"--dir={run_dir / 'cut'}",
            str(circuit), "-N1", "sh", "-c", f"flux quantum cut result --json > {out}",
        )  # fmt: skip
    env = {**world.inst.env, **world.env}
    subprocess.run(
        ["flux", "job", "wait-event", "-t", "3000", jobid, "clean"],
        env=env, capture_output=True, timeout=3100,
    )  # fmt: skip
    ok = world.inst.run("flux", "job", "status", jobid, check=False).returncode == 0
    if not ok:
        said = world.inst.run("flux", "job", "attach", jobid, check=False)
        print(f"{arm}: job {jobid} failed: {(said.stdout + said.stderr)[-2000:]}", flush=True)
    end = world.stamp(jobid, "clean") or time.time()
    result = json.loads(out.read_text()) if out.exists() else {"estimates": []}
    if arm == "in-job":
        tasks = result.get("tasks", [])
        devices = {name: len(tasks[i :: len(SMALL)]) for i, name in enumerate(SMALL)}
    else:
        tasks = [s["task"] for s in result.get("subexperiments", [])]
        devices = result.get("devices", {})
    spans = [world.span(t) for t in tasks]
    last = max((b for _, b in spans), default=end)
    start = world.stamp(jobid, "start")
    finish = world.stamp(jobid, "finish") or end
    idle = max(0.0, min(last, finish) - start) if start is not None else 0.0
    values = [e["value"] for e in result["estimates"]]
    errors = [e["standard_error"] for e in result["estimates"]]
    deviations = [
        abs(v - x) / e if e > 0 else float("inf")
        for v, x, e in zip(values, exact, errors, strict=False)
    ]
    per_task = PRICE["per_task"] + PRICE["per_shot"] * SHOTS
    overhead = None
    if arm == "cut" and spans:
        overhead = (end - t0 - covered(spans)) / (end - t0)
    ok = ok and len(values) == len(exact)
    submitted = world.stamp(jobid, "submit") or t0
    released = world.stamp(jobid, "alloc") or end
    phases = {
        "submit_command": submitted - t0,
        "to_first_create": min((a for a, _ in spans), default=submitted) - submitted,
        "tasks": covered(spans),
        "last_result_to_alloc": released - last,
        "alloc_to_end": end - released,
    }
    return Run(
        arm, 0, end - t0, per_task * len(tasks), idle, len(tasks), devices, deviations,
        overhead, ok, values, {k: round(v, 2) for k, v in phases.items()},
    )  # fmt: skip


def exact_values(qubits: int) -> list[float]:
    from flux_quantum.cutting import exact, parse_circuit, parse_observables

    dense = parse_observables(observables(qubits), qubits)
    return exact.expectations(parse_circuit(chain(qubits)), dense)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 qubits, one round")
    parser.add_argument("--qubits", type=int, help="width of the circuit (24)")
    parser.add_argument("--small", type=int, help="qubits of the small devices (20)")
    parser.add_argument("--depth", type=int, help="tasks ahead on the wide device (20)")
    parser.add_argument("--task", type=float, help="seconds a task takes (30)")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--arms", default="cut,whole,in-job", help="which arms (all three)")
    args = parser.parse_args(argv)
    # The emulator's simulator says this of every subexperiment (mid-circuit cx onto an
    # ancilla is fine on every gate-based device): not news here.
    logging.getLogger("braket").setLevel(logging.ERROR)
    qubits = args.qubits or (20 if args.quick else 24)
    small = args.small or (16 if args.quick else 20)
    depth = args.depth if args.depth is not None else (12 if args.quick else 20)
    task = args.task if args.task is not None else (6.0 if args.quick else 30.0)
    repeats = args.repeats or 1
    exact = exact_values(qubits)
    base = Path(tempfile.mkdtemp(prefix="fq-cutting-"))
    runs: list[Run] = []
    try:
        for repeat in range(repeats):
            for arm in args.arms.split(","):
                world = World(base / f"{arm}-{repeat}" / "instance", small, depth, task, qubits)
                try:
                    world.warm_up()
                    run = one_round(
                        world, arm, qubits, small, exact, base / f"{arm}-{repeat}" / "run"
                    )
                finally:
                    world.close()
                run.repeat = repeat
                runs.append(run)
                print(
                    f"{arm:7s} repeat {repeat}: time to result {run.time_to_result:6.1f} s, "
                    f"cost ${run.cost:.2f} ({run.tasks} tasks on {run.devices}), idle "
                    f"{run.idle_node_seconds:6.1f} node-s, deviations "
                    f"{[round(d, 2) for d in run.deviations]} SE"
                    + (f", overhead {run.overhead:.1%}" if run.overhead is not None else "")
                    + f", {'ok' if run.ok else 'FAILED'}; phases {run.phases}",
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def mean(arm: str, key: str) -> float:
        values = [getattr(r, key) for r in runs if r.arm == arm]
        return sum(values) / len(values) if values else float("nan")

    cut_overhead = mean("cut", "overhead")
    accurate = all(d <= 3 for r in runs for d in r.deviations)
    idle_held = max((r.idle_node_seconds for r in runs if r.arm != "in-job"), default=0.0)
    spread = all(len(r.devices) >= 2 for r in runs if r.arm == "cut")
    all_ok = all(r.ok for r in runs)
    lines = [
        f"cutting: a {qubits}-qubit chain, observables {', '.join(observables(qubits))}, "
        f"{SHOTS} shots a program; three idle {small}-qubit QPUs and a 34-qubit one with "
        f"{depth} tasks ahead, {task:g} s a task; {repeats} round(s) of each arm",
        f"exact values (state vector): {', '.join(f'{x:+.4f}' for x in exact)}",
    ]
    for arm, what in (
        ("cut", "cut, spread over the small QPUs (held)"),
        ("whole", "whole, on the busy wide QPU (held)"),
        ("in-job", "cut, run from inside a job"),
    ):
        lines.append(
            f"{what:40s} time to result {mean(arm, 'time_to_result'):6.1f} s, cost "
            f"${mean(arm, 'cost'):6.2f}, idle {mean(arm, 'idle_node_seconds'):6.1f} node-s"
        )
    lines += [
        f"time to result cut/whole {mean('cut', 'time_to_result') / mean('whole', 'time_to_result'):.2f}",
        f"idle node-seconds of the held arms {idle_held:.1f} (gate: 0; in-job "
        f"{mean('in-job', 'idle_node_seconds'):.1f}): {verdict(idle_held == 0)}",
        f"every value within 3 standard errors of exact: {verdict(accurate)}",
        f"the cut's subexperiments ran on at least two devices: {verdict(spread)}",
        f"coordination overhead of the cut {cut_overhead:.1%} (target <= 5%): "
        f"{verdict(cut_overhead <= 0.05)}",
        f"every run ended well: {verdict(all_ok)}",
    ]
    print("\n".join(lines))
    if not args.quick:
        write_record(RESULTS, "cutting", argv or sys.argv[1:], runs, lines)
    good = all_ok and accurate and idle_held == 0 and spread and cut_overhead <= 0.05
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
