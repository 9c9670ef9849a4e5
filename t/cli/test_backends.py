"""``flux quantum backends`` and ``flux quantum select`` against live emulators: table,
-o/-n, --json, --vendor, --all, a hanging vendor bounded by --timeout, select with and
without --explain, and user errors as ``flux-quantum: ERROR:`` lines; the parallel probes'
deadline on a clock the test moves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flux_quantum.catalog import Device, parse_catalog
from flux_quantum.cli.main import main
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    Vendor,
)
from flux_quantum.vendors.probing import probe_devices

SRC = Path(__file__).resolve().parents[2] / "src"

LOCAL_DEVICES = """
  - {name: emu-sv1, vendor: local, id: "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
     class: simulator, qubits: 34, price: {per_minute: 0.075, min_seconds: 3}, slots: 4}
  - {name: emu-garnet, vendor: local, id: "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet",
     class: qpu, qubits: 20, price: {per_task: 0.30, per_shot: 0.00145},
     properties: {drain_seconds_per_task: 20}}
  - {name: emu-ankaa3, vendor: local, id: "arn:aws:braket:us-west-1::device/qpu/rigetti/Ankaa-3",
     class: qpu, qubits: 84, price: {per_task: 0.30, per_shot: 0.0009},
     properties: {drain_seconds_per_task: 10}}
  - {name: emu-busy, vendor: local, id: "arn:aws:braket:::device/quantum-simulator/local/busy",
     class: simulator, qubits: 20, price: {per_minute: 0.075, min_seconds: 3}}
  - {name: emu-maint, vendor: local,
     id: "arn:aws:braket:::device/quantum-simulator/local/maintenance",
     class: simulator, qubits: 20, price: {per_minute: 0.075}}
"""
BRAKET_DEVICES = """
  - {name: sv1, vendor: braket, id: "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
     class: simulator, qubits: 34, price: {per_minute: 0.075, min_seconds: 3}}
  - {name: forte1, vendor: braket, id: "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1",
     class: qpu, qubits: 36, price: {per_task: 0.30, per_shot: 0.08}}
"""


@pytest.fixture(scope="module")
def emu(emulator_tier):
    with Emulator(clock=ManualClock()) as emulator:
        yield emulator


def write_catalog(tmp_path: Path, emu: Emulator, braket_url: str | None = None) -> Path:
    text = f"vendors:\n  local: {{url: '{emu.url}'}}\n"
    devices = LOCAL_DEVICES
    if braket_url is not None:
        text += f"  braket: {{endpoint_url: '{braket_url}', s3_endpoint_url: '{braket_url}/s3'}}\n"
        devices = BRAKET_DEVICES + LOCAL_DEVICES
    path = tmp_path / "backends.yaml"
    path.write_text(text + "devices:\n" + devices)
    return path


# The probes' deadline (--timeout) is real seconds by design; a test that wants every
# answer gives one only a hang reaches, so a loaded machine cannot turn an answer late by
# a few seconds into UNREACHABLE. The deadline itself is tested on a manual clock below.
NO_DEADLINE = ("--timeout", "300")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    if argv[0] in ("backends", "select") and "--timeout" not in argv:
        argv = (*argv, *NO_DEADLINE)
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_backends_table(tmp_path, emu, capsys):
    catalog = write_catalog(tmp_path, emu)
    rc, out, err = run(capsys, "backends", "--catalog", str(catalog))
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "VENDOR",
        "CLASS",
        "QUBITS",
        "STATUS",
        "QUEUE",
        "PRICE",
        "SLOTS",
        "REASON",
    ]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == ["emu-sv1", "emu-garnet", "emu-ankaa3", "emu-busy", "emu-maint"]
    assert rows["emu-sv1"].split()[1:6] == ["local", "simulator", "34", "ONLINE", "0"]
    assert "$0.075/min (min 3s)" in rows["emu-sv1"]
    assert rows["emu-garnet"].split()[5] == "8"  # the default scenario's queue
    assert "$0.30/task + $0.00145/shot" in rows["emu-garnet"]
    assert rows["emu-busy"].split()[5] == ">4000"
    assert rows["emu-maint"].split()[4] == "OFFLINE"
    assert rows["emu-maint"].endswith("MAINTENANCE")


def test_backends_format_no_header_vendor_filter_and_json(tmp_path, emu, capsys):
    catalog = write_catalog(tmp_path, emu)
    rc, out, _ = run(
        capsys, "backends", "--catalog", str(catalog), "-n", "-o", "{name}:{status}:{queue}"
    )
    assert rc == 0
    assert out.splitlines() == [
        "emu-sv1:ONLINE:0",
        "emu-garnet:ONLINE:8",
        "emu-ankaa3:ONLINE:3",
        "emu-busy:ONLINE:>4000",
        "emu-maint:OFFLINE:0",
    ]
    rc, out, _ = run(capsys, "backends", "--catalog", str(catalog), "-o", "{name:<12}|{id}")
    assert out.splitlines()[0] == "NAME        |ID"
    rc, out, _ = run(capsys, "backends", "--catalog", str(catalog), "--json")
    records = json.loads(out)
    busy = next(r for r in records if r["name"] == "emu-busy")
    assert (busy["status"], busy["queue_depth"], busy["queue_capped"]) == ("ONLINE", 4000, True)
    assert busy["class"] == "simulator"
    assert busy["price"] == {"per_minute": 0.075, "min_seconds": 3.0}
    rc, out, err = run(capsys, "backends", "--catalog", str(catalog), "--vendor", "braket")
    assert rc == 1
    assert err == f"flux-quantum: ERROR: {catalog}: no braket devices in the catalog\n"


def test_backends_format_errors(tmp_path, emu, capsys):
    catalog = write_catalog(tmp_path, emu)
    rc, _, err = run(capsys, "backends", "--catalog", str(catalog), "-o", "{name} {colour}")
    assert rc == 1
    assert err.startswith("flux-quantum: ERROR: --format: unknown field '{colour}' (accepted: ")


@pytest.mark.emulator
def test_a_vendor_that_never_answers_is_bounded_by_the_timeout(tmp_path, capsys, monkeypatch):
    """A Braket that accepts connections and never answers (60 s late): its devices are
    UNREACHABLE and the command ends at --timeout, not when the vendor would answer.
    That the other vendors' answers are shown meanwhile is the manual-clock test below:
    here the deadline is real seconds, which a loaded machine may spend before they come."""
    hanging = Scenario.from_dict(
        {"extends": "default", "faults": [{"operation": "GetDevice", "delay": 60}]}
    )
    with Emulator(scenario=hanging, clock=ManualClock()) as stuck:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"):
            monkeypatch.setenv(key, stuck.env()[key])
        catalog = tmp_path / "backends.yaml"
        catalog.write_text(
            f"vendors:\n  braket: {{endpoint_url: '{stuck.url}', "
            f"s3_endpoint_url: '{stuck.url}/s3'}}\ndevices:\n{BRAKET_DEVICES}"
        )
        t0 = time.monotonic()
        rc, out, _ = run(capsys, "backends", "--catalog", str(catalog), "--timeout", "1")
        elapsed = time.monotonic() - t0
    assert rc == 0
    assert elapsed < 30, f"backends took {elapsed:.2f}s with --timeout 1"
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert list(rows) == ["sv1", "forte1"]
    for row in rows.values():
        assert row.split()[4] == "UNREACHABLE"
        # Not refused, not unsigned: connected, and then nothing came back in time (the
        # deadline, or the vendor's own read timeout of --timeout if the caller could
        # not look before its third attempt gave up).
        assert row.endswith(("no answer within 1s", "ReadTimeoutError after 3 attempts"))


class _Probed(Vendor):
    """Probes answered by ``answer(device)``; task verbs are not used."""

    name = "fake"

    def __init__(self, answer: Callable[[Device], DeviceSnapshot]) -> None:
        self.answer = answer

    def probe(self, device: Device) -> DeviceSnapshot:
        return self.answer(device)

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        raise NotImplementedError

    def poll(self, task: TaskRef) -> TaskSnapshot:
        raise NotImplementedError

    def cancel(self, task: TaskRef) -> None:
        raise NotImplementedError

    def result(self, task: TaskRef) -> TaskResult:
        raise NotImplementedError

    def attach(self, task_id: str) -> TaskRef:
        raise NotImplementedError


def test_probes_report_every_answer_by_the_deadline_and_return_at_it():
    """One vendor that never answers does not hide the others' answers, and the caller
    returns at the deadline while that probe still hangs. The deadline is on a clock the
    test moves, only once the other probes have answered (their threads ended), so the
    outcome does not depend on how the threads are scheduled."""
    arn = "arn:aws:braket:::device/quantum-simulator/test/"
    catalog = parse_catalog(
        "devices:\n"
        + "".join(
            f"  - {{name: {name}, vendor: {vendor}, id: '{arn}{name}', class: simulator,"
            " qubits: 4, price: {per_task: 0}}\n"
            for name, vendor in (("a", "local"), ("h", "braket"), ("b", "local"))
        )
    )
    now = [0.0]
    answered: list[threading.Thread] = []
    asked = threading.Semaphore(0)
    hanging: list[threading.Thread] = []
    release = threading.Event()

    def quick(device: Device) -> DeviceSnapshot:
        answered.append(threading.current_thread())
        asked.release()
        return DeviceSnapshot(device.name, DeviceStatus.ONLINE, queue_depth=2, t=now[0])

    def stuck(device: Device) -> DeviceSnapshot:
        hanging.append(threading.current_thread())
        for _ in range(2):
            assert asked.acquire(timeout=60)
        for thread in answered:
            thread.join()  # each answer is recorded before its thread ends
        now[0] += 1.0  # the deadline passes while this probe still hangs
        release.wait(60)  # (a guard: the test releases it once the caller returned)
        return DeviceSnapshot(device.name, DeviceStatus.ONLINE, t=now[0])

    vendors = {"local": _Probed(quick), "braket": _Probed(stuck)}
    try:
        snapshots = probe_devices(
            catalog.devices, vendors, timeout=0.05, clock=lambda: now[0], monotonic=lambda: now[0]
        )
        assert hanging[0].is_alive()  # returned at the deadline, not at the answer
    finally:
        release.set()
    assert list(snapshots) == ["a", "h", "b"]
    assert snapshots["a"].status is snapshots["b"].status is DeviceStatus.ONLINE
    assert snapshots["a"].queue_depth == snapshots["b"].queue_depth == 2
    assert snapshots["h"].status is DeviceStatus.UNREACHABLE
    assert snapshots["h"].reason == "no answer within 0.05s"
    assert snapshots["h"].t == 1.0


def test_select_short_forms_and_explain(tmp_path, emu, capsys):
    catalog = write_catalog(tmp_path, emu)
    rc, out, _ = run(capsys, "select", "local:any", "--catalog", str(catalog))
    assert (rc, out) == (0, "emu-sv1\n")  # empty queue: shortest expected wait
    rc, out, _ = run(
        capsys, "select", "policy=min-wait", "class=qpu", "--explain", "--catalog", str(catalog)
    )
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("policy min-wait for 'any policy=min-wait shots=1000")
    # Ankaa: 3 x 10 s = 30 s beats Garnet: 8 x 20 s = 160 s.
    assert lines[2].split()[0] == "emu-ankaa3" and lines[2].endswith("shortest expected wait")
    assert lines[3].split()[0] == "emu-garnet" and lines[3].endswith("eligible: rank 2")
    assert lines[-1] == "chosen: emu-ankaa3"
    rc, out, _ = run(
        capsys, "select", "policy=min-cost", "shots=100", "--json", "--catalog", str(catalog)
    )
    record = json.loads(out)
    assert record["device"] == "emu-sv1" and record["vendor"] == "local"
    assert record["explanation"]["shots"] == 100
    maint = next(c for c in record["explanation"]["candidates"] if c["device"] == "emu-maint")
    assert maint["reason"] == "dropped: offline (MAINTENANCE)"


def test_select_errors(tmp_path, emu, capsys):
    catalog = write_catalog(tmp_path, emu)
    rc, out, err = run(capsys, "select", "emu-maint", "--explain", "--catalog", str(catalog))
    assert rc == 1
    assert "dropped: offline (MAINTENANCE)" in out
    assert err == (
        "flux-quantum: ERROR: no device satisfies qpu request 'emu-maint': "
        "emu-maint offline (MAINTENANCE)\n"
    )
    rc, _, err = run(capsys, "select", "shots=0", "--catalog", str(catalog))
    assert rc == 1
    assert err == "flux-quantum: ERROR: qpu.shots must be an integer from 1 to 100000, got 0\n"
    rc, _, err = run(capsys, "select", "class=qpu", "oops", "--catalog", str(catalog))
    assert err.startswith("flux-quantum: ERROR: REQUEST must be one short form or KEY=VALUE")


def test_command_line_entry_point_and_catalog_error(tmp_path, emu):
    bad = tmp_path / "backends.yaml"
    bad.write_text(
        "devices:\n  - {name: sv1, vendor: local, id: 'arn:aws:braket:::device/x/y/z',"
        " class: simulator, qubits: 4, price: {per_task: 0}, slots: -2}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC), "FLUX_QUANTUM_BACKENDS": str(bad)}
    proc = subprocess.run(
        [sys.executable, "-m", "flux_quantum.cli.main", "backends"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        f"flux-quantum: ERROR: {bad}: device 'sv1': slots must be an integer >= 1, got -2\n"
    )
    good = write_catalog(tmp_path, emu)
    env["FLUX_QUANTUM_BACKENDS"] = str(good)
    proc = subprocess.run(
        [sys.executable, "-m", "flux_quantum.cli.main", "backends", "-n", "-o", "{name} {status}"]
        + list(NO_DEADLINE),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "emu-sv1 ONLINE"
