#!/usr/bin/env python3
"""Vendor polling cost and release lag, and ``flux quantum backends`` under a hanging vendor.

Part 1 (on the emulator's clock): a QPU whose queue has 10, 100 or 1000 tasks ahead of
ours, each served in 5-15 s (uniform, mean 10 s), more arriving behind. For each queue
the same seeded timeline is polled twice through the real SDK (the ``local`` vendor):
by ``flux_quantum.timing.poller.AdaptivePoller`` and by a fixed 1 s poll. We count the vendor
calls (GetQuantumTask, read from the emulator's call log) until the release point
(queue position <= 1) is detected, and the release lag: detection time minus the
moment the task really reached position 1, taken from the emulator's own queue model
replayed with the same seed at 1 ms resolution.

Part 2 (wall clock): ``flux quantum backends`` on 20 devices, 10 on a healthy emulator
(vendor ``local``) and 10 on a Braket endpoint that accepts connections and never
answers, for a few ``--timeout`` values: wall time against the timeout.

Prints a short table. Nothing here is a timed assertion; run it with
``python bench/vendor_poll.py [--seeds N] [--json FILE]`` (after ``pip install .``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from flux_quantum.catalog import parse_catalog
from flux_quantum.cli.main import main as flux_quantum_main
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.emulator.queue import DeviceQueue
from flux_quantum.timing.poller import AdaptivePoller, FixedPoller
from flux_quantum.timing.release_point import release_reached
from flux_quantum.vendors.local.vendor import LocalVendor

QPU_ARN = "arn:aws:braket:us-east-1::device/qpu/bench/queue-qpu"
SERVICE_TIME = 10.0
RELEASE_AT = 1
SHOTS = 100
GHZ = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"
CATALOG = parse_catalog(
    f"""
devices:
  - {{name: queue-qpu, vendor: local, id: "{QPU_ARN}", class: qpu, qubits: 5,
     price: {{per_task: 0.3, per_shot: 0.001}}}}
""",
    "bench.yaml",
)
DEVICE = CATALOG.get("queue-qpu")


def queue_scenario(ahead: int) -> Scenario:
    return Scenario.from_dict(
        {
            "devices": [
                {
                    "arn": QPU_ARN,
                    "name": "queue-qpu",
                    "qubits": 5,
                    "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
                    "queue": {
                        "depth": ahead,
                        "arrival_rate": 0.05,
                        "service_time": SERVICE_TIME,
                        "distribution": "uniform",
                    },
                }
            ]
        }
    )


@dataclass(frozen=True)
class PollRun:
    ahead: int
    strategy: str
    seed: int
    calls: int
    lag: float
    release_t: float
    wall: float


def true_release_time(scenario: Scenario, seed: int, created_t: float) -> float:
    """When our task really reached position <= RELEASE_AT, to the millisecond.

    Replays the emulator's queue model (same spec, seed and create time): its state is a
    pure function of those, so this is the timeline the emulator served.
    """
    queue = DeviceQueue(scenario.device(QPU_ARN), seed)
    queue.submit("ours", created_t, SHOTS)
    t = created_t

    def released(at: float) -> bool:
        progress = queue.progress("ours", at)
        return progress.status != "QUEUED" or progress.position <= RELEASE_AT

    while not released(t):
        progress = queue.progress("ours", t)
        step = 1.0 if progress.position > RELEASE_AT + 1 else 0.001
        t = round(t + step, 3)
    return t


def poll_once(ahead: int, strategy: str, seed: int) -> PollRun:
    scenario = queue_scenario(ahead)
    clock = ManualClock()
    with Emulator(scenario=scenario, clock=clock, seed=seed) as emu:
        vendor = LocalVendor.from_emulator(
            emu,
            devices=CATALOG.devices,
            clock=lambda: clock.epoch.timestamp() + clock.now(),
            sleep=clock.advance,
        )
        task = vendor.submit(DEVICE, GHZ, SHOTS, token=f"bench-{ahead}-{seed}")
        created_t = clock.now()
        poller = (
            AdaptivePoller(DEVICE, RELEASE_AT)
            if strategy == "adaptive"
            else FixedPoller(1.0, RELEASE_AT)
        )
        emu.clear_calls()
        wall = time.monotonic()
        while True:
            snapshot = vendor.poll(task)
            delay = poller.observe(snapshot)
            if delay == 0.0:
                assert release_reached(snapshot, RELEASE_AT)
                break
            clock.advance(delay)
        wall = time.monotonic() - wall
        detected = clock.now()
        calls = emu.call_count("GetQuantumTask")
    truth = true_release_time(scenario, seed, created_t)
    if detected + 1e-6 < truth:
        raise RuntimeError(f"detected at {detected} before the true release {truth}")
    return PollRun(ahead, strategy, seed, calls, detected - truth, truth, wall)


def bench_polling(sizes: list[int], seeds: int) -> list[PollRun]:
    runs = []
    for ahead in sizes:
        for seed in range(seeds if ahead < 1000 else max(1, seeds // 3)):
            for strategy in ("adaptive", "fixed-1s"):
                runs.append(poll_once(ahead, strategy, seed))
    return runs


def hanging_catalog(directory: Path, local_url: str, hanging_url: str) -> Path:
    lines = [
        "vendors:",
        f"  local: {{url: '{local_url}'}}",
        f"  braket: {{endpoint_url: '{hanging_url}', s3_endpoint_url: '{hanging_url}/s3'}}",
        "devices:",
    ]
    for i in range(10):
        lines.append(
            f"  - {{name: braket-{i}, vendor: braket, class: qpu, qubits: 20,"
            f" id: 'arn:aws:braket:us-east-1::device/qpu/bench/hang-{i}',"
            " price: {per_task: 0.3}}"
        )
        lines.append(
            f"  - {{name: local-{i}, vendor: local, class: simulator, qubits: 20,"
            f" id: 'arn:aws:braket:::device/quantum-simulator/bench/sim-{i}',"
            " price: {per_minute: 0.075}}"
        )
    path = directory / "backends.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def bench_backends(timeouts: list[float]) -> list[dict[str, float]]:
    healthy = Scenario.from_dict(
        {
            "devices": [
                {
                    "arn": f"arn:aws:braket:::device/quantum-simulator/bench/sim-{i}",
                    "name": f"sim-{i}",
                    "qubits": 20,
                    "cost": {"price": 0.075, "unit": "minute"},
                    "queue": {"depth": i},
                }
                for i in range(10)
            ]
        }
    )
    hanging = Scenario.from_dict(
        {"extends": "default", "faults": [{"operation": "GetDevice", "delay": 120}]}
    )
    results = []
    with (
        Emulator(scenario=healthy, clock=ManualClock()) as good,
        Emulator(scenario=hanging, clock=ManualClock()) as stuck,
        tempfile.TemporaryDirectory() as tmp,
    ):
        catalog = hanging_catalog(Path(tmp), good.url, stuck.url)
        # This process is the whole bench: give its Braket vendor throw-away credentials.
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"):
            os.environ[key] = stuck.env()[key]
        for timeout in timeouts:
            out = io.StringIO()
            start = time.monotonic()
            with contextlib.redirect_stdout(out):
                rc = flux_quantum_main(
                    ["backends", "--catalog", str(catalog), "--timeout", str(timeout)]
                )
            wall = time.monotonic() - start
            rows = [line.split() for line in out.getvalue().splitlines()[1:]]
            online = sum(1 for row in rows if row[4] == "ONLINE")
            unreachable = sum(1 for row in rows if row[4] == "UNREACHABLE")
            results.append(
                {
                    "timeout": timeout,
                    "wall": wall,
                    "rc": rc,
                    "online": online,
                    "unreachable": unreachable,
                }
            )
    return results


def summarize(runs: list[PollRun]) -> list[dict[str, float | int | str]]:
    table = []
    for ahead in sorted({run.ahead for run in runs}):
        for strategy in ("adaptive", "fixed-1s"):
            chosen = [r for r in runs if r.ahead == ahead and r.strategy == strategy]
            table.append(
                {
                    "ahead": ahead,
                    "strategy": strategy,
                    "runs": len(chosen),
                    "calls": statistics.mean(r.calls for r in chosen),
                    "lag_mean": statistics.mean(r.lag for r in chosen),
                    "lag_max": max(r.lag for r in chosen),
                    "release_t": statistics.mean(r.release_t for r in chosen),
                }
            )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="timelines per queue size")
    parser.add_argument(
        "--sizes", default="10,100,1000", help="tasks ahead, comma-separated (10,100,1000)"
    )
    parser.add_argument("--timeouts", default="1,2,5", help="backends --timeout values")
    parser.add_argument("--json", metavar="FILE", help="also write the raw figures here")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    timeouts = [float(x) for x in args.timeouts.split(",")]

    started = time.monotonic()
    runs = bench_polling(sizes, args.seeds)
    table = summarize(runs)
    print(
        f"Polling a queued task until position <= {RELEASE_AT} "
        f"(service 5-15 s/task, emulated time; lag = detection - true release)"
    )
    print(f"{'ahead':>6} {'strategy':<9} {'runs':>4} {'calls':>8} {'lag mean':>9} {'lag max':>8}")
    for row in table:
        print(
            f"{row['ahead']:>6} {row['strategy']:<9} {row['runs']:>4} {row['calls']:>8.1f} "
            f"{row['lag_mean']:>8.2f}s {row['lag_max']:>7.2f}s"
        )
    print()
    for ahead in sizes:
        adaptive = next(r for r in table if r["ahead"] == ahead and r["strategy"] == "adaptive")
        fixed = next(r for r in table if r["ahead"] == ahead and r["strategy"] == "fixed-1s")
        ratio = fixed["calls"] / adaptive["calls"]
        verdict = (
            "ok" if ratio >= 5 and adaptive["lag_mean"] <= fixed["lag_mean"] + 0.05 else "MISS"
        )
        print(
            f"{ahead:>6} ahead: {ratio:5.1f}x fewer calls, lag mean "
            f"{adaptive['lag_mean']:.2f}s vs {fixed['lag_mean']:.2f}s fixed  [{verdict}]"
        )

    backends = bench_backends(timeouts)
    print()
    print("flux quantum backends: 20 devices, 10 local (healthy) + 10 braket (hanging)")
    print(f"{'--timeout':>9} {'wall':>7} {'over':>6} {'online':>6} {'unreach':>7}")
    for row in backends:
        print(
            f"{row['timeout']:>8g}s {row['wall']:>6.2f}s {row['wall'] - row['timeout']:>5.2f}s "
            f"{row['online']:>6} {row['unreachable']:>7}"
        )
    print(f"\n(bench wall time {time.monotonic() - started:.1f}s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "polling": table,
                    "runs": [asdict(r) for r in runs],
                    "backends": backends,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
