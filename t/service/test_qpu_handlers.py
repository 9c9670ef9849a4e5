"""Unit tier: the handler service's pure parts (the classical wait estimate, options,
program files, worker threads). No Flux needed. Its decisions are in
test_service_logic.py, the eventlog protocol in test_events.py."""

from __future__ import annotations

import ast
import glob
import math
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flux_quantum.catalog import load_catalog
from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import select_device
from flux_quantum.service import (
    DEFAULT_PROGRAM,
    ClusterView,
    JobSize,
    ProgramError,
    ServiceError,
    ServiceOptions,
    VendorWorkers,
    compact_explanation,
    jobspec_size,
    read_program,
)
from flux_quantum.service.fluxside import limit_share
from flux_quantum.service.runner import RepeatFilter
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus


def test_jobspec_size():
    nodes = [
        {
            "type": "node",
            "count": 2,
            "exclusive": True,
            "with": [{"type": "slot", "count": 1, "with": [{"type": "core", "count": 1}]}],
        }
    ]
    assert jobspec_size(nodes) == JobSize(nodes=2, cores=2, exclusive_nodes=True)
    slots = [{"type": "slot", "count": 3, "with": [{"type": "core", "count": 2}]}]
    assert jobspec_size(slots) == JobSize(nodes=0, cores=6)
    assert jobspec_size(None) == JobSize()


def test_cluster_view_wait_for_cores():
    view = ClusterView(t=0.0, cores_per_node=2, free_cores=1, releases=((30.0, 2), (50.0, 1)))
    assert view.wait_for(1, now=10.0) == 0.0
    assert view.wait_for(3, now=10.0) == 20.0
    assert view.wait_for(4, now=10.0) == 40.0
    assert view.wait_for(5, now=10.0) is None  # more than the instance will ever free
    unlimited = ClusterView(t=0.0, cores_per_node=2, free_cores=0, releases=((math.inf, 4),))
    assert unlimited.wait_for(2, now=0.0) is None
    assert view.cores_for(JobSize(nodes=2, cores=2, exclusive_nodes=True)) == 4
    assert view.cores_for(JobSize(cores=3)) == 3


def test_cluster_view_from_flux_payloads():
    status = {
        "all": {"execution": {"R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}]}},
        "allocated": {"execution": {"R_lite": [{"rank": "1", "children": {"core": "0-2"}}]}},
        "down": None,
    }
    running = [{"expiration": 200.0, "ncores": 3}, {"expiration": 0.0, "ncores": 1}]
    view = ClusterView.from_flux(status, running, t=100.0)
    assert (view.cores_per_node, view.free_cores) == (4, 5)
    assert view.releases == ((200.0, 3), (math.inf, 1))
    assert view.wait_for(8, now=100.0) == 100.0


def test_running_jobs_are_trusted_for_the_share_of_their_limits_finished_jobs_used():
    # Finished jobs ran 30 % .. 100 % of their limits (one with no limit, one never ran).
    finished = [
        {"t_run": 100.0, "t_cleanup": 100.0 + r, "expiration": 200.0} for r in range(30, 101, 7)
    ]
    finished += [{"t_run": 100.0, "t_cleanup": 150.0, "expiration": 0.0}, {"t_run": 0.0}]
    assert len(finished) == 13
    share = limit_share(finished)
    assert share == 0.37  # the 10th percentile of 0.30, 0.37, ... 0.93, 1.00
    assert limit_share(finished[:9]) == 0.0  # too few: a job may end at any moment
    every_core = {"execution": {"R_lite": [{"rank": "0", "children": {"core": "0-3"}}]}}
    status = {"all": every_core, "allocated": every_core}
    running = [{"t_run": 100.0, "expiration": 300.0, "ncores": 4}]
    trusted = ClusterView.from_flux(status, running, t=100.0, share=share)
    assert trusted.releases == ((174.0, 4),)
    assert trusted.wait_for(4, now=120.0) == 54.0  # not 180 s: the limit is an upper bound
    unknown = ClusterView.from_flux(status, running, t=100.0, share=0.0)
    assert unknown.wait_for(4, now=120.0) == 0.0  # no lead without evidence


def test_lead_share_option_bounds():
    assert ServiceOptions(lead_share=0.5).lead_share == 0.5
    for bad in (-0.1, 1.5):
        with pytest.raises(ServiceError, match=r"lead-share must be a number from 0"):
            ServiceOptions(lead_share=bad)


def test_options_round_trip_and_errors():
    options = ServiceOptions(catalog="/x/b.yaml", poll_min=0.2, workers=2, scan_interval=0.5)
    words = options.to_args()
    assert "poll-min=0.2" in words and "workers=2" in words
    assert ServiceOptions.from_args(words) == options
    with pytest.raises(ServiceError, match="unknown service option 'colour=blue'"):
        ServiceOptions.from_args(["colour=blue"])
    with pytest.raises(ServiceError, match="poll-min must be a number"):
        ServiceOptions.from_args(["poll-min=fast"])
    with pytest.raises(ServiceError, match="workers must be an integer >= 1"):
        ServiceOptions(workers=0)
    with pytest.raises(ServiceError, match="poll-min <= poll-cold-max <= poll-max"):
        ServiceOptions(poll_min=10, poll_max=5, poll_cold_max=5)
    with pytest.raises(ServiceError, match="white space"):
        ServiceOptions(catalog="/my dir/b.yaml").to_args()


def test_read_program(tmp_path):
    (tmp_path / "a.qasm").write_text("OPENQASM 3.0;\n")
    assert read_program(str(tmp_path), "a.qasm") == "OPENQASM 3.0;\n"
    assert read_program(None, str(tmp_path / "a.qasm")) == "OPENQASM 3.0;\n"
    assert read_program(str(tmp_path), None) == DEFAULT_PROGRAM
    with pytest.raises(ProgramError, match="qpu.program 'missing.qasm': cannot read"):
        read_program(str(tmp_path), "missing.qasm")


def test_compact_explanation_is_small_and_names_the_choice():
    catalog = load_catalog()
    snapshots = {
        d.name: DeviceSnapshot(d.name, DeviceStatus.ONLINE, queue_depth=3, price=d.price)
        for d in catalog
    }
    selection = select_device(catalog.devices, snapshots, parse_request("local:any"))
    compact = compact_explanation(selection.explanation, limit=3)
    assert compact["chosen"] == selection.device.name
    assert len(compact["candidates"]) == 3
    assert compact["more"] == len(selection.explanation.candidates) - 3
    assert compact["candidates"][0]["verdict"].startswith("chosen")


def test_workers_hand_results_back_through_the_pipe():
    workers = VendorWorkers(2)
    results = []
    try:
        caller = threading.get_ident()
        workers.submit(lambda: threading.get_ident(), lambda r, e: results.append((r, e)))
        workers.submit(lambda: 1 / 0, lambda r, e: results.append((r, e)))
        deadline = time.monotonic() + 5
        done = []
        while len(done) < 2 and time.monotonic() < deadline:
            select.select([workers.fileno()], [], [], 0.5)
            done += workers.drain()
        for callback, result, error in done:
            callback(result, error)
        assert len(results) == 2
        idents = [r for r, e in results if e is None]
        assert idents and idents[0] != caller
        assert any(isinstance(e, ZeroDivisionError) for r, e in results)
    finally:
        workers.stop()


def test_a_call_waiting_in_a_lane_holds_no_vendor_call_back():
    # The compile stage's lane: its one thread busy, a second call queued behind it; a
    # vendor call (one thread of its own) is answered meanwhile, then the lane's two.
    workers = VendorWorkers(1)
    lane = workers.lane(1, "qpu-compile")
    gate = threading.Event()
    answered: list[str] = []
    try:
        lane.submit(lambda: gate.wait(30) and "compiled 1", lambda r, e: answered.append(r))
        lane.submit(lambda: "compiled 2", lambda r, e: answered.append(r))
        workers.submit(lambda: "polled", lambda r, e: answered.append(r))

        def take(count: int) -> None:
            deadline = time.monotonic() + 10
            while len(answered) < count and time.monotonic() < deadline:
                select.select([workers.fileno()], [], [], 0.5)
                for callback, result, error in workers.drain():
                    callback(result, error)

        take(1)
        assert answered == ["polled"]
        # The lane's thread may not have taken its first call yet: wait until it has.
        deadline = time.monotonic() + 10
        while lane.busy == 0 and time.monotonic() < deadline:
            gate.wait(0.01)
        assert (lane.busy, lane.queued, workers.busy, workers.queued) == (1, 1, 0, 0)
        gate.set()
        take(3)
        assert answered == ["polled", "compiled 1", "compiled 2"]
    finally:
        gate.set()
        workers.stop()


SUPERVISOR = Path(__file__).resolve().parents[2] / "src/flux_quantum/service/qpu_handlers.py"


def _oldest_python() -> str | None:
    """An interpreter older than the project's (a pyenv install, or pythonX.Y on PATH)
    that really runs (pyenv's shims may only say it is not selected)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[6-9].*/bin/python")))
    candidates += [shutil.which(f"python3.{minor}") for minor in range(6, 11)]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0:
            return python
    return None


def test_supervisor_imports_only_the_standard_library_and_flux():
    """The broker runs the supervisor in its own Python: nothing of the project's
    (or of the venv's) may be imported there."""
    tree = ast.parse(SUPERVISOR.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert modules - {"flux"} <= set(sys.stdlib_module_names), modules
    assert "flux_quantum" not in modules


def test_supervisor_compiles_on_the_oldest_python_a_broker_may_have():
    python = _oldest_python()
    if python is None:
        pytest.skip("no Python 3.6-3.10 on this machine to compile the supervisor with")
    res = subprocess.run(
        [
            python,
            "-c",
            "import sys, py_compile; py_compile.compile(sys.argv[1], doraise=True)",
            str(SUPERVISOR),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def test_options_know_the_error_limit_and_back_off():
    options = ServiceOptions.from_args(["error-limit=2", "retry-base=1", "retry-max=4"])
    assert options.error_limit == 2
    policy = options.retry_policy()
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, 4]
    assert policy.error_limit == 2
    with pytest.raises(ServiceError, match="error-limit must be an integer >= 1"):
        ServiceOptions(error_limit=0)
    with pytest.raises(ServiceError, match="error-limit must be an integer, got 'x'"):
        ServiceOptions.from_args(["error-limit=x"])


def test_repeat_filter_says_a_repeated_message_once_with_a_count():
    said = []
    now = [0.0]
    log = RepeatFilter(
        lambda level, msg: said.append((level, msg)), every=60, monotonic=lambda: now[0]
    )
    for _ in range(50):
        log(3, "qpu handlers: KeyError: 'prod'")
        now[0] += 0.2
    log(6, "recovered")
    assert said == [
        (3, "qpu handlers: KeyError: 'prod'"),
        (3, "(repeated 49 more time(s)): qpu handlers: KeyError: 'prod'"),
        (6, "recovered"),
    ]
    now[0] += 1000
    for _ in range(3):
        log(3, "again")
        now[0] += 100
    # every 60 s at most, a repeat still says so
    assert said[-3:] == [(3, "again"), *[(3, "(repeated 1 more time(s)): again")] * 2]
