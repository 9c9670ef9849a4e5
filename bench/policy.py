#!/usr/bin/env python3
"""Device-selection policies on an emulated Braket fleet: cost per run and time to result.

    python bench/policy.py                 # 12 runs per policy (about 40 s on 2 cores)
    python bench/policy.py --quick         # 4 runs per policy (about 15 s)
    python bench/policy.py --runs 20 --seed 7 --budget 150 --out-dir /tmp/policy

One run is one hybrid job's quantum task: a 4-qubit QAOA (p=1, MaxCut on a ring)
OpenQASM 3 program at 1000 shots. Four policies choose its device:

- ``random``: a seeded uniform choice among the devices that satisfy the request, i.e.
  the candidates ``flux_quantum.selection.policies.select_device`` marks eligible (online, inside
  their window, enough qubits, slots free);
- ``min-cost`` and ``min-queue``: ``flux_quantum.selection.policies.select_device`` itself;
- ``max-fidelity``: ``select_device`` too, with ``class=qpu`` (every simulator is
  noise-free, so without it the choice is a simulator) and the program's gate counts
  (``flux_quantum.selection.qasm.count_program``: 12 one-qubit and 8 two-qubit gates, 4 qubits
  read), ranked by expected success from the calibration the emulated QPUs publish as
  Braket's standardized device properties and the probe reads.

Then a budgeted run: the same ``max-fidelity`` jobs, in the same order, for one user
under a monthly spend limit (``--budget``, default $150, in ``[quantum.quota]`` form)
kept in a real ledger (``flux_quantum.site.policy.SitePolicy`` on a temporary SQLite
file): before each task the devices whose estimate no longer fits are excluded (the
policy then picks the best one that fits), the chosen task is reserved, run, and settled
at its cost. Reported: what was spent against the limit (never more), how many runs got a
device, their expected success and time to result.

Each is called as the handler service calls it: ``static_candidates`` of the catalog,
``probe_devices`` through the ``local`` vendor (amazon-braket-sdk and boto3 against a
``flux_quantum.emulator.Emulator`` on 127.0.0.1), the snapshots fed to a
``DrainEstimator``, then ``select_device``. The task is created with ``Vendor.submit``,
polled with ``Vendor.poll`` until COMPLETED and its result read with ``Vendor.result``,
all on a ``ManualClock`` so emulated hours pass instantly.

Run ``i`` starts at an emulated time drawn inside the ``i``-th of ``--runs`` equal slices
of ``--span-hours`` (12 h), with emulator seed ``--seed + i``: queues differ between
runs. The three policies of one run see the same fleet (same seed, same start time, a
fresh emulator each), so they are compared on identical queues.

Measured per run, from the emulator's own task timeline (``Emulator.task_timeline``):
time to result = COMPLETED - created (emulated seconds), and cost = the catalog price
model (``PriceModel.cost``, the one ``select_device`` ranks with) at the task's shots and
its emulated run time (ended - started): per task + per shot for QPUs, per minute of
run time with Braket's 3 s minimum for the managed simulators.

The fleet (prices: the Amazon Braket pricing page as of 2026, as in
etc/flux-quantum/backends.yaml; queue shapes after etc/flux-quantum/scenarios/*.yaml).
Each device is the emulator's FIFO single-server queue: ``depth`` tasks waiting at t=0,
Poisson background arrivals, seeded service times (exp = exponential, unif = uniform
0.5x-1.5x the mean); rho = arrival rate x service time:

    device  what             qubits  price (USD)                  depth  arrivals  service    rho
    sv1     Braket SV1       34      0.075/min, 3 s minimum       0      0.30/s      1 s unif 0.30
    dm1     Braket DM1       17      0.075/min, 3 s minimum       0      0.15/s      2 s exp  0.30
    tn1     Braket TN1       50      0.275/min, 3 s minimum       0      0.02/s      5 s unif 0.10
    forte1  IonQ Forte-1     36      0.30/task + 0.08/shot        60     0.0105/s   90 s exp  0.95
    aria1   IonQ Aria-1      25      0.30/task + 0.03/shot        30     0.0078/s  120 s exp  0.94
    garnet  IQM Garnet       20      0.30/task + 0.00145/shot     20     0.045/s    20 s exp  0.90
    ankaa3  Rigetti Ankaa-3  84      0.30/task + 0.0009/shot      10     0.070/s    10 s unif 0.93*

For 1000 shots that is $0.00375 (sv1, dm1 at the 3 s minimum), $0.01375 (tn1), $80.30
(forte1), $30.30 (aria1), $1.75 (garnet) and $1.20 (ankaa3) per task. The managed
simulators are lightly loaded (on AWS they run many tasks at once; here their reported
depth is mostly 0, sometimes 1-2). The QPUs run near saturation (rho 0.90-0.95), so
their queues wander over the 12 h: depth p10-p90 over seeds and hours about 17-75 tasks
on Forte-1 (us-east-1), 2-47 on Aria-1 (us-east-1), 0-21 on Garnet (eu-north-1).
Ankaa-3 (us-west-1) serves 45 minutes of every hour (OFFLINE /
OUTSIDE_AVAILABILITY_WINDOW the rest, as in default.yaml; * rho against its capacity
inside the windows): its queue builds while closed (40-115 tasks when a window opens)
and it is not eligible then. Left out: IQM Emerald (no price on that page) and QuEra
Aquila (analog Hamiltonian simulation only: it cannot run an OpenQASM circuit).

Calibration of the emulated QPUs (median one-qubit, two-qubit and readout fidelity; the
public figures of these devices, rounded): Forte-1 0.9998/0.995/0.994, Aria-1
0.9995/0.990/0.993, Garnet 0.999/0.9925/0.975, Ankaa-3 0.9985/0.990/0.955.

Targets (printed as met / MISSED): min-cost mean cost per run at least 50x below random
(the Fluence paper reports about 70-72x, min-cost pinned on dm1); min-queue mean time to
result below random; max-fidelity mean expected success above a quality-blind pick (the
mean over the same eligible QPUs); budgeted spend at most the limit. Writes policy.csv (every run), policy.txt (the table, machine and
command) and policy.png (cost and time to result by policy) to ``--out-dir``
(bench/results; ``policy_quick.*`` with ``--quick``). No network but 127.0.0.1, no Flux.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flux_quantum.catalog import Catalog, parse_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.protocol.request import QpuRequest
from flux_quantum.selection.policies import (
    DrainEstimator,
    NoDeviceError,
    expected_success,
    select_device,
    static_candidates,
)
from flux_quantum.selection.qasm import count_program
from flux_quantum.site.ledger import UsageQuery
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import format_money
from flux_quantum.vendors.base import TaskState, Vendor
from flux_quantum.vendors.local.vendor import LocalVendor
from flux_quantum.vendors.probing import probe_devices

POLICIES = ("random", "min-cost", "min-queue", "max-fidelity")
BUDGETED = "budgeted"
DEFAULT_BUDGET = 150.0
SHOTS = 1000
QUBITS = 4
COST_TARGET = 50.0
PROBE_TIMEOUT = 15.0  # the handler service's default probe_timeout
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# QAOA p=1 for MaxCut on the 4-ring (gamma 0.4, beta 0.3).
QAOA = "\n".join(
    ["OPENQASM 3.0;", f"qubit[{QUBITS}] q;", f"bit[{QUBITS}] c;"]
    + [f"h q[{i}];" for i in range(QUBITS)]
    + [
        line
        for a, b in ((0, 1), (1, 2), (2, 3), (3, 0))
        for line in (f"cnot q[{a}], q[{b}];", f"rz(0.8) q[{b}];", f"cnot q[{a}], q[{b}];")
    ]
    + [f"rx(0.6) q[{i}];" for i in range(QUBITS)]
    + ["c = measure q;", ""]
)


@dataclass(frozen=True)
class FleetDevice:
    name: str
    arn: str
    label: str
    qubits: int
    price: dict[str, float]  # catalog price model
    queue: dict[str, Any]  # emulator queue spec
    drain: float  # catalog drain_seconds_per_task (seeds min-wait, tie-breaks min-cost)
    slots: int = 1
    extra: dict[str, Any] | None = None  # more emulator fields (backend, shots, windows)
    calibration: dict[str, float] | None = None  # QPUs: what GetDevice publishes


SIM = "arn:aws:braket:::device/quantum-simulator/amazon/"
FLEET: tuple[FleetDevice, ...] = (
    FleetDevice(
        "sv1",
        SIM + "sv1",
        "SV1",
        34,
        {"per_minute": 0.075, "min_seconds": 3},
        {"arrival_rate": 0.30, "service_time": 1.0, "distribution": "uniform"},
        2.0,
        slots=4,
    ),
    FleetDevice(
        "dm1",
        SIM + "dm1",
        "dm1",
        17,
        {"per_minute": 0.075, "min_seconds": 3},
        {"arrival_rate": 0.15, "service_time": 2.0, "distribution": "exponential"},
        3.0,
        slots=2,
        extra={"backend": "braket_dm"},
    ),
    FleetDevice(
        "tn1",
        SIM + "tn1",
        "TN1",
        50,
        {"per_minute": 0.275, "min_seconds": 3},
        {"arrival_rate": 0.02, "service_time": 5.0, "distribution": "uniform"},
        10.0,
        slots=2,
        extra={"shots": [1, 1000]},
    ),
    FleetDevice(
        "forte1",
        "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1",
        "Forte 1",
        36,
        {"per_task": 0.30, "per_shot": 0.08},
        {"depth": 60, "arrival_rate": 0.0105, "service_time": 90.0, "distribution": "exponential"},
        90.0,
        extra={"shots": [1, 10000]},
        calibration={"one_qubit": 0.9998, "two_qubit": 0.995, "readout": 0.994},
    ),
    FleetDevice(
        "aria1",
        "arn:aws:braket:us-east-1::device/qpu/ionq/Aria-1",
        "Aria 1",
        25,
        {"per_task": 0.30, "per_shot": 0.03},
        {"depth": 30, "arrival_rate": 0.0078, "service_time": 120.0, "distribution": "exponential"},
        120.0,
        extra={"shots": [1, 10000]},
        calibration={"one_qubit": 0.9995, "two_qubit": 0.990, "readout": 0.993},
    ),
    FleetDevice(
        "garnet",
        "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet",
        "Garnet",
        20,
        {"per_task": 0.30, "per_shot": 0.00145},
        {"depth": 20, "arrival_rate": 0.045, "service_time": 20.0, "distribution": "exponential"},
        20.0,
        extra={"shots": [1, 20000]},
        calibration={"one_qubit": 0.999, "two_qubit": 0.9925, "readout": 0.975, "spread": 0.002},
    ),
    FleetDevice(
        "ankaa3",
        "arn:aws:braket:us-west-1::device/qpu/rigetti/Ankaa-3",
        "Ankaa-3",
        84,
        {"per_task": 0.30, "per_shot": 0.0009},
        {"depth": 10, "arrival_rate": 0.070, "service_time": 10.0, "distribution": "uniform"},
        10.0,
        extra={"availability": {"period": 3600, "windows": [[0, 2700]]}},
        calibration={"one_qubit": 0.9985, "two_qubit": 0.990, "readout": 0.955, "spread": 0.004},
    ),
)
PROGRAM_COUNTS = count_program(QAOA)


def fleet_scenario() -> Scenario:
    devices = []
    for d in FLEET:
        if "per_minute" in d.price:
            cost = {"price": d.price["per_minute"], "unit": "minute"}
        else:
            cost = {"price": d.price["per_shot"], "unit": "shot", "task_price": d.price["per_task"]}
        spec: dict[str, Any] = {
            "arn": d.arn,
            "name": d.label,
            "qubits": d.qubits,
            "cost": cost,
            "queue": d.queue,
        }
        spec.update(d.extra or {})
        if d.calibration:
            spec["calibration"] = d.calibration
        devices.append(spec)
    return Scenario.from_dict({"extends": "none", "devices": devices}, source="bench/policy.py")


def fleet_catalog() -> Catalog:
    lines = ["devices:"]
    for d in FLEET:
        price = ", ".join(f"{k}: {v}" for k, v in d.price.items())
        cls = "simulator" if "per_minute" in d.price else "qpu"
        lines.append(
            f"  - {{name: {d.name}, vendor: local, id: '{d.arn}', class: {cls},"
            f" qubits: {d.qubits}, price: {{{price}}}, slots: {d.slots},"
            f" properties: {{drain_seconds_per_task: {d.drain:g}}}}}"
        )
    return parse_catalog("\n".join(lines) + "\n", "bench/policy.py")


@dataclass(frozen=True)
class Run:
    run: int
    policy: str
    seed: int
    start_t: float
    device: str
    device_class: str
    eligible: int
    queue_depth: int | None  # of the chosen device when it was chosen
    fleet_queues: str  # every device's depth at choice time (- = not eligible)
    estimated_cost: float  # the policy's estimate (minimum billed duration)
    cost: float  # price model at the emulated run time
    run_seconds: float  # started -> ended
    wait_seconds: float  # created -> started
    time_to_result: float  # created -> ended (COMPLETED)
    polls: int
    shots_counted: int
    success: float  # expected success of the QAOA on the chosen device (1 on a simulator)
    pool_success: float  # max-fidelity: mean over the eligible QPUs (a quality-blind pick)


def start_times(runs: int, span: float, seed: int) -> list[float]:
    """One start per equal slice of ``span`` seconds, at a seeded point inside it."""
    rng = random.Random(f"{seed}:start-times")
    width = span / runs
    return [round((i + rng.random()) * width, 3) for i in range(runs)]


def poll_step(state: TaskState, position: int | None, drain: float) -> float:
    """Emulated seconds to the next poll: short near the front, long deep in a queue.

    Only the number of polls depends on this: time to result is the emulator's truth.
    """
    if state is TaskState.QUEUED and position is not None and position > 1:
        return min(600.0, max(1.0, 0.5 * (position - 1) * drain))
    return max(1.0, drain / 10.0)


def bench_request(policy: str) -> QpuRequest:
    if policy in ("max-fidelity", BUDGETED):
        return QpuRequest(policy="max-fidelity", shots=SHOTS, min_qubits=QUBITS, device_class="qpu")
    return QpuRequest(
        policy="min-cost" if policy == "random" else policy, shots=SHOTS, min_qubits=QUBITS
    )


def one_run(
    run: int,
    policy: str,
    seed: int,
    start_t: float,
    scenario: Scenario,
    catalog: Catalog,
    site: SitePolicy | None = None,
) -> Run | None:
    """One job's task chosen by ``policy``, run to COMPLETED. With ``site`` (the
    budgeted run) the devices over quota are excluded, the task reserved and settled;
    None when no device fits the budget."""
    clock = ManualClock(start=start_t)

    def now() -> float:
        return clock.epoch.timestamp() + clock.now()

    request = bench_request(policy)
    token = f"bench-policy-{run}-{policy}"
    with Emulator(scenario=scenario, clock=clock, seed=seed) as emu:
        vendor: Vendor = LocalVendor.from_emulator(
            emu, devices=catalog.devices, clock=now, sleep=clock.advance
        )
        # As the handler service does (_start_select, then _selected).
        candidates = static_candidates(catalog.devices, request)
        snapshots = probe_devices(candidates, {"local": vendor}, timeout=PROBE_TIMEOUT, clock=now)
        estimator = DrainEstimator()
        for snapshot in snapshots.values():
            estimator.observe(snapshot)
        excluded: dict[str, str] = {}
        if site is not None:
            who = site.requester(os.getuid(), {})
            excluded = site.excluded(
                who, catalog.devices, token=token, jobid=run + 1, shots=SHOTS, t=now()
            )
        try:
            selection = select_device(
                catalog.devices,
                snapshots,
                request,
                estimator=estimator,
                in_flight={},
                program=PROGRAM_COUNTS,
                excluded=excluded,
            )
        except NoDeviceError:
            if site is None:
                raise
            return None
        eligible = [c for c in selection.explanation.candidates if c.eligible]
        pool = [c.success for c in eligible if c.device_class == "qpu" and c.success is not None]
        if policy == "random":
            rng = random.Random(f"{seed}:random:{run}")
            chosen_name = rng.choice(sorted(c.device for c in eligible))
        else:
            chosen_name = selection.device.name
        device = catalog.get(chosen_name)
        assert device is not None
        depths = {c.device: c for c in selection.explanation.candidates}
        fleet_queues = ";".join(
            f"{d.name}={depths[d.name].queue_depth if depths[d.name].eligible else '-'}"
            for d in catalog.devices
        )

        if site is not None:
            charge = site.charge(device, who, token=token, jobid=run + 1, shots=SHOTS, t=now())
            if not site.reserve(charge).allowed:
                raise RuntimeError(f"run {run}: {device.name} was chosen but not reserved")
        calibration = snapshots[device.name].calibration
        task = vendor.submit(device, QAOA, SHOTS, token=token)
        polls = 0
        drain = float(device.properties["drain_seconds_per_task"])
        while True:
            snap = vendor.poll(task)
            polls += 1
            if snap.terminal:
                break
            clock.advance(poll_step(snap.state, snap.position, drain))
        if snap.state is not TaskState.COMPLETED:
            raise RuntimeError(f"run {run} {policy}: task on {device.name} ended {snap.state}")
        counts = vendor.result(task).counts
        timeline = emu.task_timeline(task.task_id)
    assert timeline.started is not None and timeline.ended is not None
    run_seconds = timeline.ended - timeline.started
    if site is not None:
        billed = run_seconds if device.price.per_minute else None
        site.settle(token, device, shots=SHOTS, state="COMPLETED", now=now(), billed_seconds=billed)
    return Run(
        run=run,
        policy=policy,
        seed=seed,
        start_t=start_t,
        device=device.name,
        device_class=device.device_class,
        eligible=len(eligible),
        queue_depth=depths[device.name].queue_depth,
        fleet_queues=fleet_queues,
        estimated_cost=device.price.cost(SHOTS),
        cost=device.price.cost(SHOTS, run_seconds),
        run_seconds=run_seconds,
        wait_seconds=timeline.started - timeline.created,
        time_to_result=timeline.ended - timeline.created,
        polls=polls,
        shots_counted=sum(counts.values()),
        success=expected_success(device, calibration, PROGRAM_COUNTS) or 0.0,
        pool_success=statistics.mean(pool) if pool else 0.0,
    )


@dataclass(frozen=True)
class Summary:
    policy: str
    runs: int
    cost_mean: float
    cost_median: float
    ttr_mean: float
    ttr_median: float
    cost_ratio: float  # random mean cost / this policy's
    time_ratio: float  # this policy's mean time / random's
    devices: str
    success_qpu: float | None  # mean expected success of its QPU runs (None: no QPU run)


def summarize(runs: Sequence[Run]) -> list[Summary]:
    by_policy = {p: [r for r in runs if r.policy == p] for p in POLICIES}
    base_cost = statistics.mean(r.cost for r in by_policy["random"])
    base_time = statistics.mean(r.time_to_result for r in by_policy["random"])
    table = []
    for policy, chosen in by_policy.items():
        cost = statistics.mean(r.cost for r in chosen)
        ttr = statistics.mean(r.time_to_result for r in chosen)
        histogram = Counter(r.device for r in chosen)
        order = [d.name for d in FLEET if d.name in histogram]
        table.append(
            Summary(
                policy=policy,
                runs=len(chosen),
                cost_mean=cost,
                cost_median=statistics.median(r.cost for r in chosen),
                ttr_mean=ttr,
                ttr_median=statistics.median(r.time_to_result for r in chosen),
                cost_ratio=base_cost / cost,
                time_ratio=ttr / base_time,
                devices=" ".join(f"{name}:{histogram[name]}" for name in order),
                success_qpu=qpu_success(chosen),
            )
        )
    return table


def qpu_success(runs: Sequence[Run]) -> float | None:
    on_qpus = [r.success for r in runs if r.device_class == "qpu"]
    return statistics.mean(on_qpus) if on_qpus else None


@dataclass(frozen=True)
class Budgeted:
    """The budgeted max-fidelity runs: what they spent against the limit."""

    limit: float
    attempted: int
    served: Sequence[Run]
    spent: float  # sum of the served runs' costs
    ledger_total: float  # what the ledger recorded (must equal spent)

    def lines(self, unbudgeted: Sequence[Run]) -> list[str]:
        served = self.served
        histogram = Counter(r.device for r in served)
        devices = " ".join(f"{d.name}:{histogram[d.name]}" for d in FLEET if d.name in histogram)
        free = sum(r.cost for r in unbudgeted)
        verdict = "met" if self.spent <= self.limit + 1e-9 else "MISSED"
        ttr = duration(statistics.mean(r.time_to_result for r in served)) if served else "-"
        success = qpu_success(served)
        return [
            f"Budgeted max-fidelity, {self.attempted} jobs of one user under a"
            f" {format_money(self.limit)} monthly limit (ledger: reserve before create,"
            " settle at cost):",
            f"  served {len(served)}, refused {self.attempted - len(served)} (nothing fit);"
            f" devices {devices or '-'}",
            f"  spent {format_money(self.spent)} of {format_money(self.limit)} (ledger"
            f" {format_money(self.ledger_total)}; unbudgeted max-fidelity spent"
            f" {format_money(free)})  [{verdict}: at most the limit]",
            f"  mean time to result {ttr}, mean expected success"
            f" {'-' if success is None else f'{success:.3f}'}",
        ]


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.2f}h"


def report(
    table: Sequence[Summary], runs: int, span: float, all_runs: Sequence[Run] = ()
) -> list[str]:
    lines = [
        f"Device selection, {runs} runs per policy: one {QUBITS}-qubit QAOA task of {SHOTS}"
        f" shots per run, {len(FLEET)} emulated Braket devices, starts over {span / 3600:g} h",
        "(cost = catalog price at the emulated run time; time to result = create -> COMPLETED,"
        " emulated)",
        "",
        f"{'policy':<12} {'runs':>4} {'cost mean':>10} {'median':>9} {'ratio':>8} "
        f"{'time mean':>9} {'median':>8} {'ratio':>6} {'success':>7}  devices",
    ]
    for s in table:
        success = "-" if s.success_qpu is None else f"{s.success_qpu:.3f}"
        lines.append(
            f"{s.policy:<12} {s.runs:>4} {'$' + format(s.cost_mean, '.5f'):>10} "
            f"{'$' + format(s.cost_median, '.4f'):>9} {s.cost_ratio:>7.1f}x "
            f"{duration(s.ttr_mean):>9} {duration(s.ttr_median):>8} {s.time_ratio:>6.3f} "
            f"{success:>7}  {s.devices}"
        )
    lines.append(
        "(cost ratio = random / policy; time ratio = policy / random; success = mean expected"
        " success of the QAOA on the QPUs it ran on; max-fidelity asks for class=qpu)"
    )
    lines.append("")
    row = {s.policy: s for s in table}
    mc, mq, rnd = row["min-cost"], row["min-queue"], row["random"]
    verdict = "met" if mc.cost_ratio >= COST_TARGET else "MISSED"
    lines.append(
        f"min-cost mean cost per run {mc.cost_ratio:.1f}x below random"
        f" (target >= {COST_TARGET:g}x; Fluence paper ~70-72x)  [{verdict}]"
    )
    verdict = "met" if mq.ttr_mean < rnd.ttr_mean else "MISSED"
    lines.append(
        f"min-queue mean time to result {duration(mq.ttr_mean)} vs random"
        f" {duration(rnd.ttr_mean)} ({mq.time_ratio:.4f}x; target < 1x)  [{verdict}]"
    )
    mf = row["max-fidelity"]
    if mf.success_qpu is not None:
        blind = statistics.mean(r.pool_success for r in all_runs if r.policy == "max-fidelity")
        verdict = "met" if mf.success_qpu > blind else "MISSED"
        lines.append(
            f"max-fidelity mean expected success {mf.success_qpu:.3f} vs {blind:.3f} for a"
            f" quality-blind pick among the same eligible QPUs (target higher)  [{verdict}]"
        )
    return lines


def machine_lines(argv: Sequence[str], wall: float) -> list[str]:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 0
    return [
        f"machine: nproc {cpus}, Python {platform.python_version()}, {platform.platform()}",
        f"date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"command: python {shlex.join(argv)}",
        f"wall time: {wall:.1f}s",
    ]


def write_csv(path: Path, runs: Sequence[Run]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Run)])
        writer.writeheader()
        for r in runs:
            row = asdict(r)
            for key in ("estimated_cost", "cost"):
                row[key] = f"{row[key]:.6f}"
            for key in ("run_seconds", "wait_seconds", "time_to_result"):
                row[key] = f"{row[key]:.3f}"
            writer.writerow(row)


def plot(path: Path, runs: Sequence[Run], table: Sequence[Summary]) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not importable (pip install matplotlib)"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    colors = {
        "random": "tab:gray",
        "min-cost": "tab:green",
        "min-queue": "tab:blue",
        "max-fidelity": "tab:purple",
    }
    panels: tuple[tuple[str, Callable[[Run], float], str, str], ...] = (
        ("cost", lambda r: r.cost, "cost per run (USD, log)", "Cost per run"),
        ("time", lambda r: r.time_to_result, "time to result (s, log)", "Time to result"),
    )
    means = {s.policy: (s.cost_mean, s.ttr_mean) for s in table}
    for index, (ax, (_, value, ylabel, title)) in enumerate(zip(axes, panels, strict=True)):
        for x, policy in enumerate(POLICIES):
            points = [value(r) for r in runs if r.policy == policy]
            jitter = random.Random(f"{policy}:{index}")
            xs = [x + jitter.uniform(-0.15, 0.15) for _ in points]
            ax.scatter(xs, points, s=18, alpha=0.7, color=colors[policy])
            mean = means[policy][index]
            ax.hlines(mean, x - 0.3, x + 0.3, color="black", linewidth=2)
            label = f"${mean:.4g}" if index == 0 else duration(mean)
            ax.annotate(label, (x + 0.32, mean), va="center", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(POLICIES)), POLICIES)
        ax.set_xlim(-0.5, len(POLICIES) - 0.2)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(axis="y", which="both", alpha=0.3)
    n = len(runs) // len(POLICIES)
    fig.suptitle(f"Device selection policies, {n} runs each (dots: runs, bars: means)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def budgeted_runs(
    starts: Sequence[float], seed: int, limit: float, scenario: Scenario, catalog: Catalog
) -> Budgeted:
    """The max-fidelity jobs again, one after the other, under a monthly spend limit."""
    quota = {"limits": [{"name": "bench-budget", "user": "*", "period": "month", "spend": limit}]}
    served = []
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as tmp:
        site = SitePolicy.from_config(
            {"quota": quota, "ledger": {"path": str(Path(tmp) / "ledger.db")}}
        )
        try:
            for i, start_t in enumerate(starts):
                run = one_run(i, BUDGETED, seed + i, start_t, scenario, catalog, site=site)
                if run is not None:
                    served.append(run)
            recorded = sum(r.total for r in site.ledger.usage(UsageQuery(period="all")))
        finally:
            site.close()
    return Budgeted(limit, len(starts), served, sum(r.cost for r in served), recorded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="runs per policy (default 12)")
    parser.add_argument("--quick", action="store_true", help="4 runs per policy")
    parser.add_argument("--seed", type=int, default=1, help="base seed (default 1)")
    parser.add_argument(
        "--span-hours", type=float, default=12.0, help="start times spread over (default 12)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help=f"monthly spend limit (USD) of the budgeted run (default {DEFAULT_BUDGET:g})",
    )
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    runs_per_policy = 4 if args.quick else args.runs
    if runs_per_policy < 1:
        parser.error("--runs must be >= 1")
    span = args.span_hours * 3600.0

    # The emulator runs dm1 tasks on the SDK's density-matrix simulator, which warns
    # about noise-free circuits once per task.
    warnings.filterwarnings("ignore", message="You are running a noise-free circuit")
    started = time.monotonic()
    scenario = fleet_scenario()
    catalog = fleet_catalog()
    runs: list[Run] = []
    starts = start_times(runs_per_policy, span, args.seed)
    for i, start_t in enumerate(starts):
        for policy in POLICIES:
            run = one_run(i, policy, args.seed + i, start_t, scenario, catalog)
            assert run is not None
            runs.append(run)
    budgeted = budgeted_runs(starts, args.seed, args.budget, scenario, catalog)
    runs += budgeted.served
    bad = [r for r in runs if r.shots_counted != SHOTS]
    if bad:
        raise RuntimeError(f"{len(bad)} results do not add up to {SHOTS} shots: {bad[0]}")
    table = summarize([r for r in runs if r.policy in POLICIES])
    wall = time.monotonic() - started

    lines = report(table, runs_per_policy, span, runs)
    lines += [""] + budgeted.lines([r for r in runs if r.policy == "max-fidelity"])
    lines += [""] + machine_lines(sys.argv if argv is None else ["bench/policy.py", *argv], wall)
    text = "\n".join(lines)
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = "policy_quick" if args.quick else "policy"  # a smoke test never overwrites
    write_csv(args.out_dir / f"{stem}.csv", runs)
    (args.out_dir / f"{stem}.txt").write_text(text + "\n")
    print(plot(args.out_dir / f"{stem}.png", [r for r in runs if r.policy in POLICIES], table))
    print(f"runs: {args.out_dir / (stem + '.csv')}, table: {args.out_dir / (stem + '.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
