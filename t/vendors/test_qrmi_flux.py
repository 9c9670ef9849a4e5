"""Flux tier: IQM and Pasqal QPUs through the handler service on a real instance, the real
qrmi client against the project's emulator (its IQM and Pasqal sides, on a ManualClock
the tests advance). A site's set-up: ``vendor: iqm`` and ``vendor: pasqal`` devices
reached through QRMI's own settings (``<id>_QRMI_IQM_ISA_*``,
``<id>_QRMI_PASQAL_CLOUD_*``) in the instance's environment, the secrets kept from the
jobs (they read their results through the service).

Stories: ``flux quantum backends --json`` lists both vendors ONLINE; an OpenQASM job on
IQM and a Pulser job on Pasqal are held, released and read their counts with ``flux
quantum task --wait --json``; a program of the wrong kind fails while held, saying why;
a device that goes into maintenance (QRMI's Paused) while jobs are held keeps their task
and holds them, a new job for it waits, and both are released after it resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pytest
from ibm_setup import BELL
from vendor_world import VendorWorld

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.iqm import IqmScenario
from flux_quantum.emulator.pasqal import PasqalScenario

pytestmark = pytest.mark.flux

PAUSE_AT, RESUME_AT = 5.0, 1000.0  # emulated seconds: qmaint's maintenance window
IQM = {
    "devices": [
        {"id": "qrun", "qubits": 5, "queue": {"depth": 3, "service_time": 10}},
        {
            "id": "qmaint",
            "qubits": 5,
            "queue": {"depth": 2, "service_time": 10},
            "paused": [[PAUSE_AT, RESUME_AT]],
        },
    ]
}
PASQAL = {
    "devices": [
        {"name": "FRESNEL", "kind": "cloud", "atoms": 61, "queue": {"depth": 1, "service_time": 10}}
    ]
}
# drain_seconds_per_task is large so that, until the emulated queue moves, the estimate
# rests on the pending counts alone (the tests move the emulator's clock by hand).
CATALOG = """devices:
  - {name: iqm-run, vendor: iqm, id: qrun, class: qpu, qubits: 5,
     price: {per_minute: 18}, properties: {drain_seconds_per_task: 1000}}
  - {name: iqm-maint, vendor: iqm, id: qmaint, class: qpu, qubits: 5,
     price: {per_minute: 18}, properties: {drain_seconds_per_task: 1000}}
  - {name: fresnel, vendor: pasqal, id: FRESNEL, class: qpu, qubits: 61,
     price: {per_minute: 30}, properties: {drain_seconds_per_task: 1000, pasqal_access: cloud}}
"""
SECRETS = ("_QRMI_IQM_ISA_TOKEN", "_QRMI_PASQAL_CLOUD_CLIENT_SECRET")


def qrmi_world(workdir: Path) -> VendorWorld:
    """The vendor world of these tests: the emulator's IQM and Pasqal sides, QRMI's
    secrets the service's alone."""
    emu = Emulator(
        clock=ManualClock(epoch=datetime.now(UTC)),
        iqm=IqmScenario.from_dict(IQM),
        pasqal=PasqalScenario.from_dict(PASQAL),
    )
    seq = resources.files("flux_quantum.vendors.pasqal").joinpath("samples/two_atoms.json")
    files = {"bell.qasm": BELL, "seq.json": seq.read_text()}
    return VendorWorld(
        workdir, emu, ("iqm", "pasqal"), CATALOG, secret_suffixes=SECRETS, files=files
    )


@pytest.fixture(scope="module")
def qrmi(tmp_path_factory) -> Iterator[VendorWorld]:
    world = qrmi_world(tmp_path_factory.mktemp("qrmi"))
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


@pytest.fixture
def service(qrmi: VendorWorld) -> Iterator[VendorWorld]:
    qrmi.start_service()
    yield qrmi
    qrmi.inst.quantum("service", "stop", check=False)


def test_backends_lists_iqm_and_pasqal_devices_online(qrmi):
    # A user with QRMI's settings and their own secrets in their shell, as at a site.
    listing = ("backends", "--json", f"--catalog={qrmi.catalog}")
    out = qrmi.inst.quantum(*listing, env=qrmi.secrets).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["iqm-run"]["vendor"] == "iqm" and rows["iqm-run"]["status"] == "ONLINE", rows
    assert rows["fresnel"]["vendor"] == "pasqal" and rows["fresnel"]["status"] == "ONLINE", rows
    assert rows["iqm-run"]["queue_depth"] == 3  # IQM's queue_length, through QRMI


def test_openqasm_job_on_iqm_and_pulser_job_on_pasqal_read_their_counts(service):
    qrmi = service
    task = ("flux", "quantum", "task", "--wait", "--json")
    on_iqm = qrmi.submit(
        "--setattr=qpu.device=iqm-run",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        *task,
    )
    on_pasqal = qrmi.submit(
        "--setattr=qpu.device=fresnel",
        "--setattr=qpu.program=seq.json",
        "--setattr=qpu.shots=50",
        *task,
    )
    for jobid in (on_iqm, on_pasqal):
        qrmi.wait_event(jobid, "qpu-task", timeout=40)
        assert qrmi.inst.state(jobid) == "DEPEND", json.dumps(qrmi.events(jobid))
    # Three tasks ahead on IQM's device, one on Pasqal's: ours are at the front (IQM's
    # estimated from its pending count: QRMI gives no place) after three service times.
    qrmi.clock.advance(32)
    for jobid in (on_iqm, on_pasqal):
        qrmi.wait_event(jobid, "qpu-release", timeout=40)
    qrmi.clock.advance(30)
    for jobid, shots, device in ((on_iqm, 100, "iqm-run"), (on_pasqal, 50, "fresnel")):
        qrmi.wait_event(jobid, "clean", timeout=60)
        out = qrmi.attach(jobid)
        assert out["task"] == qrmi.context(jobid, "qpu-task")["task"], out
        assert out["device"] == device and out["state"] == "COMPLETED", out
        assert sum(out["counts"].values()) == shots, out
    assert set(qrmi.attach(on_iqm)["counts"]) <= {"00", "11"}
    assert qrmi.inst.run(["flux", "jobs", "-no", "{result}", on_iqm]).stdout.strip() == "COMPLETED"


def test_program_of_the_wrong_kind_fails_while_held_saying_why(service):
    qrmi = service
    jobid = qrmi.submit("--setattr=qpu.device=fresnel", "--setattr=qpu.program=bell.qasm", "true")
    qrmi.wait_event(jobid, "clean", timeout=30)
    note = next(e for e in qrmi.events(jobid) if e["name"] == "exception")["context"]["note"]
    assert "fresnel takes Pulser sequences only (pasqal), the program is an OpenQASM" in note
    assert "qpu-submit" not in qrmi.names(jobid)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[VendorWorld]:
    """A world of its own: the maintenance window is at fixed emulated times."""
    world = qrmi_world(tmp_path)
    world.start_service()
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


def test_device_in_maintenance_holds_its_jobs_and_releases_them_after_it_resumes(fresh):
    qrmi = fresh
    task = ("flux", "quantum", "task", "--wait", "--json")
    held = qrmi.submit("--setattr=qpu.device=iqm-maint", "--setattr=qpu.program=bell.qasm", *task)
    qrmi.wait_event(held, "qpu-task", timeout=40)
    qrmi.clock.set(PAUSE_AT + 1)  # maintenance: QRMI says Paused, the queue stands still
    qrmi.until(lambda: "is paused (maintenance)" in qrmi.memo(held).get("qpu_state", ""))
    waiting = qrmi.submit(
        "--setattr=qpu.device=iqm-maint", "--setattr=qpu.program=bell.qasm", *task
    )
    qrmi.until(
        lambda: (
            "qpu-wait" in qrmi.names(waiting)
            and "iqm-maint is paused" in qrmi.context(waiting, "qpu-wait")["reason"]
        )
    )
    # Emulated time runs on during the maintenance, long past the queue's two tasks:
    # nothing is released onto the paused device and its task keeps its place.
    polls = qrmi.status()["counters"]["polls"]
    qrmi.clock.set(RESUME_AT - 1)
    qrmi.until(lambda: qrmi.status()["counters"]["polls"] >= polls + 3)
    assert qrmi.inst.state(held) == "DEPEND" and "qpu-release" not in qrmi.names(held)
    assert "qpu-submit" not in qrmi.names(waiting)
    assert "qpu-device-unavailable" not in qrmi.names(held)
    assert len(qrmi.emu.iqm.job_ids("qmaint")) == 1
    qrmi.clock.set(RESUME_AT + 25)  # back online: the two ahead and ours are served
    for jobid in (held, waiting):
        qrmi.wait_event(jobid, "qpu-release", timeout=60)
        qrmi.clock.advance(30)
        qrmi.wait_event(jobid, "clean", timeout=60)
        assert qrmi.attach(jobid)["state"] == "COMPLETED"
    assert len(qrmi.emu.iqm.job_ids("qmaint")) == 2  # one task each, none cancelled
