"""Flux tier: an OQTOPUS device through the handler service on a real instance, the real
oqtopus-client SDK against the project's emulator (its OQTOPUS side, on a ManualClock the
tests advance). A site's set-up: ``vendor: oqtopus`` devices reached through QRMI's names
for OQTOPUS's settings (``<id>_QRMI_OQTOPUS_URL`` and ``_API_TOKEN``) in the instance's
environment, the token kept from the jobs (they read their results through the service).

Stories: ``flux quantum backends --json`` lists the emulator's OQTOPUS devices ONLINE
with their pending jobs; a job with ``--setattr=qpu=oqtopus:anemone`` is held, released
and reads its counts with ``flux quantum task --wait --json``; a QIR program fails while
held, saying why, before OQTOPUS is asked anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from vendor_world import VendorWorld

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.oqtopus import OqtopusScenario

pytestmark = pytest.mark.flux

OQTOPUS = {
    "devices": [
        {"name": "anemone", "type": "QPU", "qubits": 8, "queue": {"depth": 1, "service_time": 10}},
        {"name": "qulacs", "type": "simulator", "qubits": 8, "queue": {"service_time": 1}},
    ]
}
# drain_seconds_per_task is large so that, until the emulated queue moves, the estimate
# rests on the pending counts alone (the tests move the emulator's clock by hand).
CATALOG = """devices:
  - {name: anemone, vendor: oqtopus, id: anemone, class: qpu, qubits: 8,
     price: {per_minute: 18}, properties: {drain_seconds_per_task: 1000}}
  - {name: qulacs, vendor: oqtopus, id: qulacs, class: simulator, qubits: 8,
     price: {per_task: 0.0}}
"""
QIR = (
    "%Qubit = type opaque\n%Result = type opaque\ndefine void @main() #0 {\nentry:\n"
    "  call void @__quantum__qis__x__body(%Qubit* null)\n  ret void\n}\n"
)
SECRET = "_QRMI_OQTOPUS_API_TOKEN"


def oqtopus_world(workdir: Path) -> VendorWorld:
    """The vendor world of these tests: the emulator's OQTOPUS side, its token the
    service's alone."""
    emu = Emulator(
        clock=ManualClock(epoch=datetime.now(UTC)), oqtopus=OqtopusScenario.from_dict(OQTOPUS)
    )
    return VendorWorld(
        workdir, emu, ("oqtopus",), CATALOG, secret_suffixes=(SECRET,), files={"flip.ll": QIR}
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[VendorWorld]:
    world = oqtopus_world(tmp_path_factory.mktemp("oqtopus"))
    world.start_service()
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


def test_backends_lists_the_oqtopus_devices_online(world):
    # A user with the settings and their own token in their shell, as at a site.
    listing = ("backends", "--json", f"--catalog={world.catalog}")
    rows = {
        r["name"]: r for r in json.loads(world.inst.quantum(*listing, env=world.secrets).stdout)
    }
    assert rows["anemone"]["vendor"] == "oqtopus" and rows["anemone"]["status"] == "ONLINE", rows
    assert rows["qulacs"]["status"] == "ONLINE", rows
    assert rows["anemone"]["queue_depth"] == 1  # OQTOPUS's n_pending_jobs


def test_a_job_is_held_released_and_reads_its_counts_through_the_sdk(world):
    jobid = world.submit(
        "--setattr=qpu=oqtopus:anemone", "flux", "quantum", "task", "--wait", "--json"
    )
    world.wait_event(jobid, "qpu-task", timeout=40)
    assert world.inst.state(jobid) == "DEPEND", json.dumps(world.events(jobid))
    [job_id] = world.emu.oqtopus.job_ids("anemone")
    assert world.context(jobid, "qpu-task")["task"] == job_id
    # One job ahead of ours and one running, 10 s each; ours is released when done.
    world.clock.advance(35)
    world.wait_event(jobid, "qpu-release", timeout=60)
    world.wait_event(jobid, "clean", timeout=60)
    out = world.attach(jobid)
    assert out["task"] == job_id and out["device"] == "anemone", out
    assert out["state"] == "COMPLETED" and set(out["counts"]) <= {"00", "11"}, out
    assert sum(out["counts"].values()) == 1000, out  # the default shots
    assert world.inst.run(["flux", "jobs", "-no", "{result}", jobid]).stdout.strip() == "COMPLETED"
    ops = {c.operation for c in world.emu.oqtopus.calls}
    assert {"RegisterJob", "UploadInput", "SubmitJob", "GetJobStatus", "GetJob"} <= ops


def test_a_qir_program_fails_while_held_saying_why(world):
    before = len(world.emu.oqtopus.job_ids())
    jobid = world.submit("--setattr=qpu.device=qulacs", "--setattr=qpu.program=flip.ll", "true")
    world.wait_event(jobid, "clean", timeout=30)
    note = next(e for e in world.events(jobid) if e["name"] == "exception")["context"]["note"]
    assert "qulacs takes OpenQASM circuits only (oqtopus), the program is a QIR program" in note
    assert "qpu-submit" not in world.names(jobid)
    assert len(world.emu.oqtopus.job_ids()) == before
