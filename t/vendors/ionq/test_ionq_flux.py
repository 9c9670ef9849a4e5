"""Flux tier: IonQ direct through the handler service on a real instance, IonQ's own client
(ionq-core) against the project's emulator (its IonQ side, on a ManualClock the tests
advance). A site's set-up: ``vendor: ionq`` devices reached with ``IONQ_API_URL`` and
``IONQ_API_KEY`` in the service's environment, the key kept from the jobs (they read
their results through the service).

Stories: ``flux quantum backends --vendor ionq`` lists the IonQ devices ONLINE; a job on
Aria is held, released and reads its counts with ``flux quantum task --wait --json``; a
session job whose budget (``qpu.max_cost``) is below what IonQ charges for its task is
refused by IonQ's session cost limit, and the job fails with IonQ's reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ibm_setup import BELL
from vendor_world import VendorWorld

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.ionq import IonqScenario

pytestmark = pytest.mark.flux

IONQ = {
    "backends": [
        {"name": "qpu.aria-1", "qubits": 25, "queue": {"depth": 2, "service_time": 10},
         "price": {"per_task": 0.30, "per_shot": 0.03}},
        {"name": "simulator", "qubits": 29, "queue": {"service_time": 1}},
    ]
}  # fmt: skip
# The site's estimate of an Aria task is IonQ's per-task price alone (a contract without
# the per-shot part, say): what IonQ charges is more, and only IonQ's session limit sees it.
CATALOG = """devices:
  - {name: ionq-aria, vendor: ionq, id: qpu.aria-1, class: qpu, qubits: 25,
     price: {per_task: 0.30}, properties: {drain_seconds_per_task: 1000}}
  - {name: ionq-simulator, vendor: ionq, id: simulator, class: simulator, qubits: 29,
     price: {per_task: 0.0}}
"""
KEY = "IONQ_API_KEY"


def ionq_world(workdir: Path) -> VendorWorld:
    """The vendor world of these tests: the emulator's IonQ side, ``IONQ_API_KEY`` the
    service's alone (the jobs get the URL without the key)."""
    emu = Emulator(clock=ManualClock(epoch=datetime.now(UTC)), ionq=IonqScenario.from_dict(IONQ))
    return VendorWorld(
        workdir, emu, ("ionq",), CATALOG, secret_suffixes=(KEY,), files={"bell.qasm": BELL}
    )


@pytest.fixture(scope="module")
def ionq(tmp_path_factory) -> Iterator[VendorWorld]:
    world = ionq_world(tmp_path_factory.mktemp("ionq"))
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


@pytest.fixture
def service(ionq: VendorWorld) -> Iterator[VendorWorld]:
    ionq.start_service()
    yield ionq
    ionq.inst.quantum("service", "stop", check=False)


def test_backends_lists_ionq_devices_online(ionq):
    # A user with IonQ's URL and their own key in their shell, as at a site.
    listing = ("backends", "--json", "--vendor=ionq", f"--catalog={ionq.catalog}")
    rows = {r["name"]: r for r in json.loads(ionq.inst.quantum(*listing, env=ionq.secrets).stdout)}
    assert set(rows) == {"ionq-aria", "ionq-simulator"}, rows
    assert all(r["vendor"] == "ionq" and r["status"] == "ONLINE" for r in rows.values()), rows


def test_job_on_aria_is_held_released_and_reads_its_counts(service):
    ionq = service
    jobid = ionq.submit(
        "--setattr=qpu.device=ionq-aria",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        "--setattr=qpu.release_at=running",
        "flux", "quantum", "task", "--wait", "--json",
    )  # fmt: skip
    ionq.wait_event(jobid, "qpu-task", timeout=40)
    assert ionq.inst.state(jobid) == "DEPEND", json.dumps(ionq.events(jobid))
    # IonQ gives no place in its queue: the job is released when its task runs, after
    # the running and the two waiting background tasks (10 s each), then it completes.
    ionq.clock.advance(35)
    ionq.wait_event(jobid, "qpu-release", timeout=40)
    assert ionq.context(jobid, "qpu-ready")["tasks"][0]["why"].startswith("RUNNING")
    ionq.clock.advance(10)
    ionq.wait_event(jobid, "clean", timeout=60)
    out = ionq.attach(jobid)
    assert out["task"] == ionq.context(jobid, "qpu-task")["task"], out
    assert out["device"] == "ionq-aria" and out["state"] == "COMPLETED", out
    assert set(out["counts"]) <= {"00", "11"} and sum(out["counts"].values()) == 100, out
    assert ionq.inst.run(["flux", "jobs", "-no", "{result}", jobid]).stdout.strip() == "COMPLETED"


def test_session_job_over_its_cost_limit_fails_with_ionqs_reason(service):
    ionq = service
    jobid = ionq.submit(
        "--setattr=qpu.device=ionq-aria",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        "--setattr=qpu.session=dedicated",
        "--setattr=qpu.max_cost=1.0",
        "true",
    )  # fmt: skip
    ionq.wait_event(jobid, "clean", timeout=60)
    session = ionq.context(jobid, "qpu-session")
    assert session["mode"] == "dedicated" and session["fingerprint"], session
    note = next(e for e in ionq.events(jobid) if e["name"] == "exception")["context"]["note"]
    assert "Session cost limit exceeded: the job would cost $3.30" in note, note
    assert "of its $1.00 limit" in note, note
    assert "qpu-task" not in ionq.names(jobid)
    [opened] = ionq.emu.ionq.session_ids()
    assert opened not in note  # the session id is a secret
    # The session is ended once its unit failed.
    ionq.until(lambda: ionq.emu.call_count("EndSession") == 1)
