"""Flux tier: the site policy in the handler service on real instances, the real plugin
and the real Braket SDK against the emulator (a ManualClock the tests advance).

Each test starts its own instance whose configuration carries the ``[quantum.access]``,
``[quantum.quota]`` and ``[quantum.ledger]`` tables it needs. Jobs are all submitted
by the test's own user (Flux refuses a job signed for somebody else); a second user is
simulated as Flux allows for RPCs (not for submitting): their past tasks are in the
ledger, and their RPCs carry ``FLUX_HANDLE_USERID`` with the guest role.
"""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from catalogs import emulated_catalog
from fluxinstance import FluxInstance, quantum_config, user_daily_limit
from qpu_setup import FAST, GHZ

from flux_quantum.catalog import load_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import Charge

pytestmark = pytest.mark.flux

GUEST = 1001  # bob, simulated
OWNER = os.getuid()
OWNER_NAME = pwd.getpwuid(OWNER).pw_name


def _qpu(name: str, one: float, two: float, readout: float) -> dict[str, Any]:
    return {
        "arn": f"arn:aws:braket:eu-north-1::device/qpu/iqm/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": {"service_time": 10.0},
        "calibration": {"one_qubit": one, "two_qubit": two, "readout": readout},
    }


# Best to worst for a GHZ program: best (denied by the site), good, fair.
SCENARIO = {
    "devices": [
        _qpu("Best", 0.9999, 0.998, 0.995),
        _qpu("Good", 0.999, 0.99, 0.98),
        _qpu("Fair", 0.998, 0.97, 0.95),
    ]
}
# Every task: $0.30 + $0.001 x 1000 shots = $1.30.
TASK = 1.3


class Site:
    """An instance with a site policy, an emulator and the handler service."""

    def __init__(self, workdir: Path, policy: str) -> None:
        self.workdir = workdir
        self.ledger = workdir / "ledger" / "ledger.db"
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(emulated_catalog(SCENARIO, region=None))
        config = quantum_config() + policy + f'\n[quantum.ledger]\npath = "{self.ledger}"\n'
        self.clock = ManualClock()
        self.emu = Emulator(Scenario.from_dict(SCENARIO), clock=self.clock).start()
        self.inst = FluxInstance(workdir, size=1, config=config)
        self.env = {"FLUX_QUANTUM_EMULATOR_URL": self.emu.url}

    def start(self) -> Site:
        self.inst.start()
        self.start_service()
        return self

    def start_service(self) -> None:
        self.inst.quantum(
            "service", "start", f"--catalog={self.catalog}", f"--emulator-url={self.emu.url}",
            *FAST,
        )  # fmt: skip

    def stop(self) -> None:
        self.inst.run(["flux", "cancel", "--all"], check=False)
        self.inst.quantum("service", "stop", check=False)
        self.inst.stop()
        self.emu.stop()

    def submit(self, *attrs: str) -> str:
        args = [f"--setattr={a}" for a in ("qpu.release_at=1", *attrs)]
        return self.inst.submit(*args, "true", env=self.env)

    def note(self, jobid: str) -> str:
        """The note of the exception that ended a job."""
        self.inst.wait_event(jobid, "clean")
        for event in self.inst.eventlog(jobid):
            if event["name"] == "exception":
                return event["context"]["note"]
        raise AssertionError(f"{jobid} ended without an exception")

    def usage(self, *args: str, guest: bool = False, check: bool = True) -> Any:
        env = self.inst.guest_env(GUEST) if guest else None
        return self.inst.quantum("usage", *args, env=env, check=check)

    def past_task(self, userid: int, user: str, bank: str, cost: float) -> None:
        """A task another user ran earlier, recorded in the site's ledger."""
        import time

        site = SitePolicy.from_config({"ledger": {"path": str(self.ledger)}})
        device = load_catalog(self.catalog).get("q-fair")
        charge = Charge(
            token=f"past-{user}", jobid=1, userid=userid, user=user, bank=bank,
            device=device.name, vendor=device.vendor, device_class=device.device_class,
            shots=1000, estimate=cost, t=time.time(),
        )  # fmt: skip
        try:
            assert site.reserve(charge).allowed
            site.settle(charge.token, device, shots=1000, state="COMPLETED", now=time.time())
        finally:
            site.close()


@pytest.fixture
def make_site(tmp_path: Path) -> Iterator[Any]:
    sites: list[Site] = []

    def make(policy: str) -> Site:
        site = Site(tmp_path, policy)
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


def test_over_quota_job_fails_with_the_limit_and_no_vendor_task_is_created(make_site):
    site = make_site(user_daily_limit(1.0)).start()
    jobid = site.submit("qpu.device=local:q-good")
    note = site.note(jobid)
    assert "over quota: [quantum.quota] limit 1 'user-daily'" in note, note
    assert "$1.00 a day; $0.00 spent or reserved this day" in note
    assert "this task on q-good would cost $1.30" in note
    assert site.emu.call_count("CreateQuantumTask") == 0
    names = [e["name"] for e in site.inst.eventlog(jobid)]
    assert "qpu-submit" not in names


def test_a_bank_limit_is_shared_by_its_users(make_site):
    """bob spent $1.30 in bank chem today. The owner's first job in chem fits the
    bank's $3.00; the second does not, although the owner's own limit ($3.00 each)
    would still take it: it is bob's spend that counts against the bank."""
    site = make_site(
        """
[[quantum.quota.limits]]
name = "each-user"
user = "*"
period = "day"
spend = 3.0

[[quantum.quota.limits]]
name = "chem"
bank = "chem"
period = "day"
spend = 3.0
"""
    )
    site.past_task(GUEST, "bob", "chem", TASK)
    site.start()
    first = site.submit("qpu.device=local:q-good", "bank=chem")
    site.inst.wait_event(first, "qpu-task")
    second = site.submit("qpu.device=local:q-good", "bank=chem")
    note = site.note(second)
    assert "[quantum.quota] limit 2 'chem': bank chem, $3.00 a day" in note, note
    assert "$2.60 spent or reserved this day" in note
    assert site.emu.call_count("CreateQuantumTask") == 1
    # Outside the bank the owner still has room of their own.
    third = site.submit("qpu.device=local:q-good")
    site.inst.wait_event(third, "qpu-task")
    assert site.emu.call_count("CreateQuantumTask") == 2


def test_usage_as_the_owner_and_as_a_guest(make_site):
    site = make_site("")
    site.past_task(GUEST, "bob", "chem", TASK)
    site.start()
    jobid = site.submit("qpu.device=local:q-good", "qpu.release_at=done")
    site.inst.wait_event(jobid, "qpu-task")
    site.clock.advance(60)
    site.inst.wait_event(jobid, "qpu-cost")
    cost = next(e["context"] for e in site.inst.eventlog(jobid) if e["name"] == "qpu-cost")
    assert cost["state"] == "COMPLETED" and cost["cost"] == pytest.approx(TASK)
    memo = site.inst.run(["flux", "jobs", "-n", "-o", "{user.qpu_cost}", jobid]).stdout
    assert float(memo) == pytest.approx(TASK)

    owner = json.loads(site.usage("--json", "--by=user").stdout)
    totals = {row["user"]: row["total"] for row in owner["rows"]}
    assert totals == {"bob": pytest.approx(TASK), OWNER_NAME: pytest.approx(TASK)}
    table = site.usage("--by=user,device", "-o", "{user} {device} {tasks} {spent}").stdout
    assert f"{OWNER_NAME} q-good 1 $1.30" in table.splitlines()

    guest = json.loads(site.usage("--json", guest=True).stdout)
    assert [row["user"] for row in guest["rows"]] == ["bob"]
    refused = site.usage("--user", OWNER_NAME, guest=True, check=False)
    assert refused.returncode != 0
    assert "a guest sees only their own usage" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_max_fidelity_lands_on_the_best_device_the_site_allows(make_site):
    site = make_site(
        """
[[quantum.access.rules]]
name = "best-reserved"
devices = ["q-best"]
allow = false
"""
    ).start()
    (site.workdir / "ghz.qasm").write_text(GHZ)
    jobid = site.submit("qpu.policy=max-fidelity", "qpu.class=qpu", "qpu.program=ghz.qasm")
    site.inst.wait_event(jobid, "qpu-task")
    select = next(e["context"] for e in site.inst.eventlog(jobid) if e["name"] == "qpu-select")
    assert select["device"] == "q-good", select
    verdicts = {c["device"]: c["verdict"] for c in select["explanation"]["candidates"]}
    assert verdicts["q-best"].startswith("dropped: not allowed:")
    assert "[quantum.access] rule 1 'best-reserved'" in verdicts["q-best"]
    assert verdicts["q-fair"] == "eligible: rank 2"
    success = {c["device"]: c.get("success") for c in select["explanation"]["candidates"]}
    assert success["q-good"] > success["q-fair"]
    probed = {c.target for c in site.emu.calls if c.operation == "GetDevice"}
    assert not any("Best" in (t or "") for t in probed)


def test_a_restarted_service_settles_its_task_exactly_once(make_site):
    """The service stops while the task waits; the next one re-reserves it (counted
    once, by its token) and settles it when it ends."""
    site = make_site("").start()
    jobid = site.submit("qpu.device=local:q-good", "qpu.release_at=done")
    site.inst.wait_event(jobid, "qpu-task")
    site.inst.quantum("service", "stop")
    site.start_service()
    site.clock.advance(60)
    site.inst.wait_event(jobid, "qpu-cost")
    rows = json.loads(site.usage("--json", "--period=all").stdout)["rows"]
    assert [(r["tasks"], r["spent"], r["reserved"]) for r in rows] == [(1, TASK, 0.0)]
    assert site.emu.call_count("CreateQuantumTask") == 1
    costs = [e for e in site.inst.eventlog(jobid) if e["name"] == "qpu-cost"]
    assert len(costs) == 1
