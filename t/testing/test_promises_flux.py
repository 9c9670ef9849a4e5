"""Flux tier: the promise checker gathers from a real run and judges it.

A small instance with the quantum plugin and a site ledger, the handler service, and
the emulator in this process on a ManualClock the test advances. Two QPU jobs complete:
``gather`` reads their eventlogs, jobspecs and memos from Flux, the emulator's bill over
HTTP and the ledger read-only, and ``check`` finds no violation, the two jobs completed
and the ledger's total equal to the bill's. Then the same gathering sees broken
promises: a QPU job left held (the service stopped) is lost until it is cancelled (an
outcome, not a violation), and its task's reservation stays open in the ledger until a
service started again settles it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from catalogs import emulated_catalog
from fluxinstance import FluxInstance, quantum_config, until
from ibm_setup import Ibm
from qpu_setup import BELL, FAST

from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.emulator.emulator import SECRET_KEY
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.testing.promises import PROMISES, check, gather, read_ledger

pytestmark = pytest.mark.flux

SHOTS = 100
TASK_COST = 0.3 + 0.001 * SHOTS  # per task + per shot, in the scenario and the catalog
SCENARIO: dict[str, Any] = {
    "devices": [
        {
            "arn": f"arn:aws:braket:us-east-1::device/qpu/emulator/{name}",
            "name": name,
            "qubits": 20,
            "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
            "queue": {"service_time": 10.0},
        }
        for name in ("Alpha", "Beta")
    ]
}


class Run:
    """An instance with a ledger, the emulator and the handler service."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ledger = workdir / "ledger" / "ledger.db"
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(emulated_catalog(SCENARIO))
        (workdir / "bell.qasm").write_text(BELL)
        config = quantum_config() + f'\n[quantum.ledger]\npath = "{self.ledger}"\n'
        self.clock = ManualClock()
        self.emu = Emulator(Scenario.from_dict(SCENARIO), clock=self.clock).start()
        self.inst = FluxInstance(workdir, size=1, config=config)
        self.env = {"FLUX_QUANTUM_EMULATOR_URL": self.emu.url}

    def start_service(self) -> None:
        self.inst.quantum(
            "service", "start", f"--catalog={self.catalog}", f"--emulator-url={self.emu.url}",
            *FAST,
        )  # fmt: skip

    def submit(self, device: str) -> str:
        return self.inst.submit(
            f"--setattr=qpu.device=local:{device}",
            "--setattr=qpu.program=bell.qasm",
            f"--setattr=qpu.shots={SHOTS}",
            "true",
            env=self.env,
        )

    def names(self, jobid: str) -> list[str]:
        return [e["name"] for e in self.inst.eventlog(jobid)]

    def gather(self, **kw: Any) -> Any:
        dmesg = self.inst.run(["flux", "dmesg"], check=False).stdout
        return gather(
            uri=self.inst.uri,
            emulator_url=self.emu.url,
            ledger=self.ledger,
            texts={"dmesg": dmesg, "broker log": self.inst.broker_log()},
            secrets=(SECRET_KEY,),
            **kw,
        )


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    r = Run(tmp_path)
    r.inst.start()
    r.start_service()
    yield r
    r.inst.run(["flux", "cancel", "--all"], check=False)
    r.inst.quantum("service", "stop", check=False)
    assert r.inst.stop() == 0, r.inst.broker_log()
    r.emu.stop()


def _decimal(inst: FluxInstance, jobid: str) -> int:
    return int(inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout)


def test_two_completed_jobs_keep_every_promise(run):
    jobs = [run.submit("q-alpha"), run.submit("q-beta")]
    for jobid in jobs:
        run.inst.wait_event(jobid, "qpu-task")
    # Each task is alone in its queue: it runs 10 emulated seconds, then the job (held
    # until its result is there) is released, runs `true` and ends.
    run.clock.advance(30)
    for jobid in jobs:
        run.inst.wait_event(jobid, "clean", timeout=60)
    # The service settles a task's cost once it has seen it end.
    until(lambda: {r.state for r in read_ledger(run.ledger)} == {"settled"})

    facts = run.gather()
    ids = {_decimal(run.inst, j) for j in jobs}
    assert {job.jobid for job in facts.jobs} == ids
    assert all(job.qpu and job.state == "INACTIVE" for job in facts.jobs)
    assert len(facts.bill.tasks) == 2 and facts.calls.get("CreateQuantumTask") == 2
    assert {task.id for task in facts.bill.tasks} == {
        t for job in facts.jobs for t in job.released_tasks
    }
    assert "dmesg" in facts.texts and f"exec eventlog {min(ids)}" in facts.texts

    findings = check(facts)
    assert findings.ok(), findings.violations
    assert findings.counts() == dict.fromkeys(PROMISES, 0)
    assert [o.outcome for o in findings.outcomes] == ["completed", "completed"]
    assert findings.billed_total == pytest.approx(2 * TASK_COST)
    assert findings.ledger_total == pytest.approx(2 * TASK_COST)
    out = findings.to_dict()
    text = json.dumps(out)
    assert SECRET_KEY not in text and out["scope"] == "all" and all(out["checked"].values())

    # One job only: the bill and the ledger are judged where they concern it.
    first = _decimal(run.inst, jobs[0])
    scoped = check(run.gather(jobs=[first]))
    assert scoped.ok(), scoped.violations
    assert scoped.scope == (first,) and scoped.billed_total == pytest.approx(TASK_COST)


def test_a_job_left_held_is_lost_and_its_charge_open_until_a_service_settles_it(run):
    jobid = run.submit("q-alpha")
    run.inst.wait_event(jobid, "qpu-task")
    run.inst.quantum("service", "stop")
    # The service is gone: nothing will release the job, and its task waits at the vendor.
    findings = check(run.gather(jobs=[_decimal(run.inst, jobid)]))
    assert findings.counts()["no_lost_job"] == 1
    [lost] = [v for v in findings.violations if v.promise == "no_lost_job"]
    assert lost.detail.startswith("still held after the drain")
    assert findings.outcomes[0].outcome == "held"

    run.inst.run(["flux", "cancel", jobid])
    run.inst.wait_event(jobid, "clean")
    findings = check(run.gather())
    assert findings.counts()["no_lost_job"] == 0 and findings.counts()["honest_failure"] == 0
    assert findings.outcomes[0].outcome == "cancelled"
    assert findings.outcomes[0].reason.startswith("cancelled by user")
    # Its task's reservation is still open: nobody settled it while the service was down.
    [open_] = findings.violations
    assert (open_.promise, open_.detail) == (
        "ledger_matches",
        "still reserved (0.40 USD) after the drain",
    )

    # A service started again finds the reservation, follows its task to its end and
    # settles what the vendor billed: every promise is kept again.
    run.start_service()
    run.clock.advance(30)
    until(lambda: {r.state for r in read_ledger(run.ledger)} == {"settled"})
    findings = check(run.gather())
    assert findings.ok(), findings.violations
    assert findings.ledger_total == pytest.approx(findings.billed_total)


IBM_CATALOG = (
    "devices:\n  - {name: promise, vendor: ibm, id: ibm_promise, class: qpu, qubits: 5,"
    " price: {per_minute: 96}, properties: {drain_seconds_per_task: 10}}\n"
)


def test_an_ibm_job_in_a_session_keeps_every_promise(tmp_path):
    """IBM: no idempotent create, a session the service opens and closes, a bill in
    usage seconds x $1.60 (the paid plan; $96 a minute in the catalog)."""
    backend = {"name": "ibm_promise", "qubits": 5, "queue": {"depth": 0, "service_time": 10}}
    scenario = IbmScenario.from_dict({"backends": [backend]})
    emu = Emulator(clock=ManualClock(epoch=datetime.now(UTC)), ibm=scenario)
    ledger = tmp_path / "ledger" / "ledger.db"
    config = quantum_config() + f'\n[quantum.ledger]\npath = "{ledger}"\n'
    ibm = Ibm(tmp_path, emu=emu, catalog=IBM_CATALOG, config=config)
    try:
        ibm.start_service()
        jobid = ibm.submit(
            "--setattr=qpu.device=ibm:promise",
            "--setattr=qpu.session=batch",
            "--setattr=qpu.program=bell.qasm",
            "true",
            at_front=False,  # release_at=done: held until its IBM job has run
        )
        ibm.inst.wait_event(jobid, "qpu-task", timeout=40)
        [session] = ibm.emu.ibm.session_ids()
        ibm.clock.advance(30)  # the IBM job runs its 10 s and completes
        ibm.inst.wait_event(jobid, "clean", timeout=60)
        ibm.until(lambda: ibm.closed(session))
        until(lambda: {r.state for r in read_ledger(ledger)} == {"settled"})

        facts = gather(
            uri=ibm.inst.uri,
            emulator_url=emu.url,
            ledger=ledger,
            texts={"dmesg": ibm.inst.run(["flux", "dmesg"], check=False).stdout},
            secrets=(*ibm.secrets.values(), session),
        )
        [task] = facts.bill.tasks
        assert (task.vendor, task.state, task.session is not None) == ("ibm", "COMPLETED", True)
        findings = check(facts)
        assert findings.ok(), findings.violations
        assert [o.outcome for o in findings.outcomes] == ["completed"]
        assert findings.billed_total == pytest.approx(10 * 1.60)
        assert findings.ledger_total == pytest.approx(findings.billed_total, abs=0.005)
        text = json.dumps(findings.to_dict())
        assert session not in text and all(v not in text for v in ibm.secrets.values())
    finally:
        ibm.close()
        assert ibm.inst.stop() == 0, ibm.inst.broker_log()
