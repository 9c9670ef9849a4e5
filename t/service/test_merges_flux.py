"""Flux tier: merged tasks (``[quantum.merge]``) on real instances, the real plugin, the
real handler service and the real Braket SDK against the emulator (its Braket program
sets, on a ManualClock the tests advance).

Each test starts its own instance, whose configuration carries the ``[quantum.merge]``
table it needs (or none), an emulator and the service. The emulated QPUs have a public
queue (one task running, 3 waiting, 10 s each), so a held job's program waits in the
service's pool for others to merge with (an idle device would send it at once): at most
``max_wait`` of real time, shorter than the devices' expected queue wait (3 x 10 s). The three programs each job
may ask for always measure one known outcome (``00``, ``11``, ``10``), so the counts a
job reads prove whose program's result it got, and their total its own shots.

Two users cannot be had in this tier: a test instance runs as one user, and Flux takes
a guest's job only signed by a real mechanism (munge, and an IMP to run it), never
``sign-type=none`` (``only instance owner can use sign-type=none``) nor signed by the
owner for the guest (``signer=0 != requestor=1001``); the container tier (t/multiuser)
has real users. So ``across_users`` is left to the unit tier (t/emulator/test_merging.py, and
t/service/test_merges.py through the service on its fakes), and what shares a task here
is decided by the job: ``qpu.merge=no`` takes its own task beside a merged pair.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from catalogs import emulated_catalog
from fluxinstance import FluxInstance, quantum_config, until
from qpu_setup import FAST

from flux_quantum.emulator import Emulator, ManualClock, Scenario

pytestmark = pytest.mark.flux

MAX_WAIT = 6.0  # real seconds a program waits in the pool (< the 30 s queue wait)
MERGE = f'\n[quantum.merge]\nenabled = true\nacross_users = false\nmax_wait = "{MAX_WAIT:g}s"\n'

# Each program always measures one outcome (c[0] first, as flux-quantum hands counts on).
PROGRAMS: dict[str, tuple[str, str]] = {
    "zeros": ("", "00"),
    "ones": ("x q[0];\nx q[1];\n", "11"),
    "first": ("x q[0];\n", "10"),
}

# The job reads its own result exactly as any job does, and prints what it got.
READER = """\
import json
from flux_quantum.job.consumer import current_task, wait_result

task = current_task()
result = wait_result(task, timeout=90, poll_interval=0.2, max_interval=1.0)
print(json.dumps({"task": task.task_id, "program": task.ref().program,
                  "counts": result.counts}))
"""

POLL = "GetQuantumTask"
PRICE = {"per_task": 0.3, "per_shot": 0.001}
FAIL_REASON = "calibration drifted; task aborted"


def _qpu(name: str, depth: int, **more: Any) -> dict[str, Any]:
    return {
        "arn": f"arn:aws:braket:us-east-1::device/qpu/emulator/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": PRICE["per_shot"], "unit": "shot", "task_price": PRICE["per_task"]},
        "queue": {"service_time": 10.0, "depth": depth},
        **more,
    }


def share(shots: int, members: int) -> float:
    """A member's share of a merged task's bill: the per-task fee split equally, its own
    shots (cost_shares.price_shares)."""
    return PRICE["per_task"] / members + PRICE["per_shot"] * shots


class Site:
    """An instance with the quantum plugin (and ``merge``, the ``[quantum.merge]`` table
    or nothing), an emulator and the handler service."""

    def __init__(
        self, workdir: Path, merge: str | None, scenario: dict[str, Any], slots: int
    ) -> None:
        self.workdir = workdir
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(
            emulated_catalog(
                scenario, slots=slots, per_task=PRICE["per_task"], per_shot=PRICE["per_shot"]
            )
        )
        for name, (gates, _) in PROGRAMS.items():
            text = f"OPENQASM 3.0;\nbit[2] c;\nqubit[2] q;\n{gates}c = measure q;\n"
            (workdir / f"{name}.qasm").write_text(text)
        (workdir / "reader.py").write_text(READER)
        self.clock = ManualClock()
        self.emu = Emulator(Scenario.from_dict(scenario), clock=self.clock).start()
        self.inst = FluxInstance(workdir, size=1, config=quantum_config() + (merge or ""))
        self.env = {"FLUX_QUANTUM_EMULATOR_URL": self.emu.url}
        self.started = False

    def start(self, service: bool = True) -> Site:
        self.inst.start()
        self.started = True
        if service:
            self.start_service(*FAST)
        return self

    def start_service(self, *options: str) -> None:
        self.inst.quantum(
            "service", "start", f"--catalog={self.catalog}", f"--emulator-url={self.emu.url}",
            *options,
        )  # fmt: skip

    def submit(
        self,
        program: str,
        shots: int,
        *attrs: str,
        device: str = "q-merge",
        command: tuple[str, ...] = (),
    ) -> str:
        """A job asking for ``program`` on ``device``, released when its task is done
        (the default), that reads its own result (``READER``, or ``command``)."""
        args = [f"qpu.device=local:{device}", f"qpu.program={program}.qasm", f"qpu.shots={shots}"]
        setattrs = [f"--setattr={a}" for a in (*args, *attrs)]
        command = command or (sys.executable, str(self.workdir / "reader.py"))
        return self.inst.submit(*setattrs, *command, env=self.env)

    def events(self, jobid: str, name: str | None = None) -> list[dict[str, Any]]:
        found = self.inst.eventlog(jobid)
        return [e for e in found if name is None or e["name"] == name]

    def context(self, jobid: str, name: str) -> dict[str, Any]:
        found = self.events(jobid, name)
        assert found, f"{jobid}: no {name} event in {[e['name'] for e in self.events(jobid)]}"
        return found[-1]["context"]

    def wait_event(self, jobid: str, name: str, timeout: float = 40) -> None:
        self.inst.wait_event(jobid, name, timeout=timeout)

    def until(self, what: Callable[[], Any], timeout: float = 40, step: float = 0.2) -> Any:
        return until(what, timeout, step)

    def read(self, jobid: str) -> dict[str, Any]:
        """What the job printed (its task, its place in it, its counts); it must end
        with status 0."""
        self.wait_event(jobid, "clean", timeout=90)
        finish = self.context(jobid, "finish")
        out = self.inst.run(["flux", "job", "attach", jobid], check=False)
        assert finish["status"] == 0, f"{jobid}: {out.stdout}\n{out.stderr}"
        return json.loads(out.stdout.strip().splitlines()[-1])

    def released_info(self, jobid: str) -> dict[str, Any]:
        """The release record the job runs with (``attributes.system.qpu_info``)."""
        jobspec = json.loads(self.inst.run(["flux", "job", "info", jobid, "jobspec"]).stdout)
        return jobspec["attributes"]["system"]["qpu_info"]

    def bill(self) -> list[dict[str, Any]]:
        """The emulator's bill: every task it created, oldest first."""
        order = self.emu.task_arns()
        return sorted(self.emu.report()["bill"]["tasks"], key=lambda t: order.index(t["id"]))

    def status(self) -> dict[str, Any]:
        return json.loads(self.inst.quantum("service", "status", "--json").stdout)

    def log(self) -> list[str]:
        lines = self.inst.run(["flux", "dmesg"], check=False).stdout.splitlines()
        return [line for line in lines if "qpu_handlers" in line]

    def pending(self) -> list[str]:
        """Jobs not yet running or done (held ones among them)."""
        out = self.inst.run(["flux", "jobs", "-n", "-f", "pending", "-o", "{id}"]).stdout
        return out.split()

    def close(self) -> None:
        if self.started:
            # Shown by pytest only when the test failed.
            status = self.inst.quantum("service", "status", "--json", check=False)
            print("service status:", status.stdout.strip() or status.stderr.strip())
            print("\n".join(self.log())[-6000:])
            calls = [(c.operation, c.status, c.error, round(c.t, 1)) for c in self.emu.calls]
            print("emulator calls:", [c for c in calls if c[0] not in ("GetDevice", POLL)])
            print(f"{POLL}:", self.emu.call_count(POLL))
            print("bill:", json.dumps(self.bill()))
            self.inst.run(["flux", "cancel", "--all"], check=False)
            self.inst.quantum("service", "stop", check=False)
            self.inst.stop()
        self.emu.stop()


@pytest.fixture
def make_site(tmp_path: Path) -> Iterator[Callable[..., Site]]:
    sites: list[Site] = []

    def make(
        merge: str | None = MERGE,
        scenario: dict[str, Any] | None = None,
        slots: int = 4,
        service: bool = True,
    ) -> Site:
        site = Site(tmp_path, merge, scenario or {"devices": [_qpu("Merge", 3)]}, slots)
        sites.append(site)
        return site.start(service)

    yield make
    for site in sites:
        site.close()


def _merged_members(site: Site, jobs: dict[str, tuple[str, int]]) -> tuple[str, str]:
    """Check that ``jobs`` (jobid: program, shots) share one merged task, each at its own
    place with its own shots; the task and its key."""
    submits = {j: site.context(j, "qpu-submit") for j in jobs}
    slots = {j: s["merge"] for j, s in submits.items()}
    keys = {slot["key"] for slot in slots.values()}
    assert len(keys) == 1, slots
    assert sorted(slot["index"] for slot in slots.values()) == list(range(len(jobs)))
    for jobid, slot in slots.items():
        assert slot["size"] == len(jobs)
        assert slot["shots"][slot["index"]] == jobs[jobid][1] == submits[jobid]["shots"]
    tasks = {site.context(j, "qpu-task")["task"] for j in jobs}
    assert len(tasks) == 1, tasks
    return tasks.pop(), keys.pop()


def test_three_jobs_of_one_user_share_one_task_and_each_reads_its_own_counts(make_site):
    """q-merge has one slot: programs waiting in the pool take none and the merged task
    takes one, so all three are in it (a program that took a slot in the pool would
    leave the others waiting for it until its task is released, in tasks of their own)."""
    site = make_site(slots=1, service=False)
    asked = {"zeros": 100, "ones": 200, "first": 300}
    jobs = {site.submit(p, shots): (p, shots) for p, shots in asked.items()}
    site.start_service(*FAST)  # adopts the three together, whatever the submits took
    for jobid in jobs:
        site.wait_event(jobid, "qpu-task")
    task, key = _merged_members(site, jobs)
    # One vendor task, created once under the merge key, of every job's shots.
    assert site.emu.call_count("CreateQuantumTask") == 1
    (row,) = site.bill()
    assert (row["id"], row["token"], row["shots"]) == (task, key, sum(asked.values()))
    # Held while the task waits: nothing runs before its result is there.
    assert all("qpu-release" not in [e["name"] for e in site.events(j)] for j in jobs)
    site.clock.advance(60)  # one running, 3 waiting and ours: done at 50 s
    for jobid, (program, shots) in jobs.items():
        got = site.read(jobid)
        index = site.context(jobid, "qpu-submit")["merge"]["index"]
        assert got["task"] == task and got["program"] == index
        assert got["counts"] == {PROGRAMS[program][1]: shots}, (jobid, program, got)
        assert site.context(jobid, "qpu-release")["task"] == task
        info = site.released_info(jobid)
        assert info["tasks"] == [task] and info["programs"] == [index]
    assert site.bill()[0]["state"] == "COMPLETED"
    # Each job pays its share: the task fee split three ways, its own shots; the shares
    # add up to the vendor's bill.
    costs = {j: site.context(j, "qpu-cost") for j in jobs}
    for jobid, (_, shots) in jobs.items():
        assert costs[jobid]["state"] == "COMPLETED" and costs[jobid]["task"] == task
        assert costs[jobid]["cost"] == pytest.approx(share(shots, 3), abs=0.01)
    assert sum(c["cost"] for c in costs.values()) == pytest.approx(site.bill()[0]["cost"])
    counters = site.status()["counters"]
    assert (counters["tasks_merged"], counters["jobs_merged"]) == (1, 3)
    assert counters["tasks_created"] == 1 and counters["released"] == 3


def test_without_the_table_every_job_has_its_own_task(make_site):
    site = make_site(merge=None)
    jobs = {site.submit(p, 100): (p, 100) for p in ("zeros", "ones", "first")}
    for jobid in jobs:
        site.wait_event(jobid, "qpu-task")
    assert all("merge" not in site.context(j, "qpu-submit") for j in jobs)
    assert len({site.context(j, "qpu-task")["task"] for j in jobs}) == 3
    assert site.emu.call_count("CreateQuantumTask") == 3
    site.clock.advance(80)
    for jobid, (program, shots) in jobs.items():
        got = site.read(jobid)
        assert got["program"] is None and got["counts"] == {PROGRAMS[program][1]: shots}
        assert "programs" not in site.released_info(jobid)
    assert site.status()["counters"]["tasks_merged"] == 0


def test_a_job_that_opts_out_gets_its_own_task_beside_a_merged_pair(make_site):
    """Only the job decides here (see the module's docstring for across_users): the
    opted-out job's task is created at once under its own token, the other two wait in
    the pool and go out as one task."""
    site = make_site(service=False)
    alone = site.submit("first", 300, "qpu.merge=no")
    pair = {site.submit("zeros", 100): ("zeros", 100), site.submit("ones", 200): ("ones", 200)}
    site.start_service(*FAST)  # adopts the three together, whatever the submits took
    for jobid in (alone, *pair):
        site.wait_event(jobid, "qpu-task")
    task, key = _merged_members(site, pair)
    own = site.context(alone, "qpu-submit")
    assert "merge" not in own
    own_task = site.context(alone, "qpu-task")["task"]
    assert own_task != task
    assert site.emu.call_count("CreateQuantumTask") == 2
    by_id = {row["id"]: row for row in site.bill()}
    assert (by_id[task]["token"], by_id[task]["shots"]) == (key, 300)
    assert (by_id[own_task]["token"], by_id[own_task]["shots"]) == (own["token"], 300)
    # The job that opted out did not wait for the pool: its create began (its token
    # recorded) before the pool sent the pair's. Which create the emulator answers first
    # is not the service's to say: the two run at once in the vendor's threads, and the
    # first create of a service's life takes seconds in the SDK.
    began = {j: site.events(j, "qpu-submit")[-1]["timestamp"] for j in (alone, *pair)}
    assert all(began[alone] < began[j] for j in pair), began
    site.clock.advance(80)
    got = site.read(alone)
    assert got == {"task": own_task, "program": None, "counts": {"10": 300}}
    assert "programs" not in site.released_info(alone)
    for jobid, (program, shots) in pair.items():
        got = site.read(jobid)
        assert got["task"] == task and got["counts"] == {PROGRAMS[program][1]: shots}
    counters = site.status()["counters"]
    merged = (counters["tasks_merged"], counters["jobs_merged"])
    assert merged == (1, 2) and counters["tasks_created"] == 2


def test_a_cancelled_member_leaves_the_merged_task_running_for_the_others(make_site):
    """One of three merged jobs is cancelled after the task was created: the task is
    not cancelled, the two others are released and read their own counts (one through
    ``flux quantum task``, the command a job script would use), and the cancelled job
    still pays its share of what the vendor bills."""
    site = make_site(service=False)
    cli = ("flux", "quantum", "task", "--wait", "--json")
    jobs = {
        site.submit("zeros", 100): ("zeros", 100),
        site.submit("ones", 200): ("ones", 200),
        site.submit("first", 300, command=cli): ("first", 300),
    }
    site.start_service(*FAST)  # adopts the three together, whatever the submits took
    for jobid in jobs:
        site.wait_event(jobid, "qpu-task")
    task, _ = _merged_members(site, jobs)
    gone = next(j for j, (p, _) in jobs.items() if p == "ones")
    site.inst.run(["flux", "cancel", gone])
    site.wait_event(gone, "clean")
    # The service saw the job go and kept the task for the two others.
    site.until(lambda: any(f"task {task} left running" in line for line in site.log()))
    assert site.emu.call_count("CancelQuantumTask") == 0
    assert "qpu-release" not in [e["name"] for e in site.events(gone)]
    site.clock.advance(60)
    for jobid, (program, shots) in jobs.items():
        if jobid == gone:
            continue
        got = site.read(jobid)
        assert got["task"] == task and got["counts"] == {PROGRAMS[program][1]: shots}
    (row,) = site.bill()
    assert row["id"] == task and row["state"] == "COMPLETED"
    assert site.emu.call_count("CancelQuantumTask") == 0
    # The vendor bills the whole task, the cancelled job's program too: its share is
    # settled (watched to the task's end) and the ledger adds up to the bill.
    ledger = site.until(lambda: (u := _usage(site))["reserved"] == 0 and u)
    assert ledger["tasks"] == 3 and ledger["spent"] == pytest.approx(row["cost"])


def _usage(site: Site, device: str = "q-merge") -> dict[str, Any]:
    """The ledger's row for ``device`` (every charge of the test's user there)."""
    out = site.inst.quantum("usage", "--json", "--period=all", "--by=device").stdout
    rows = [row for row in json.loads(out)["rows"] if row["device"] == device]
    assert len(rows) == 1, out
    return rows[0]


def test_a_failed_merged_task_fails_each_job_over_or_fails_it_as_it_asks(make_site):
    """q-merge fails the one task created there; q-other has a long queue (it still has
    one after the first task's 50 s). The two jobs that asked ``qpu.failover=next`` get
    their next attempts on q-other, merged again into one task there; the one that asked
    nothing (``fail``) fails with the vendor's reason. Nothing is left held."""
    fault = {"fail_task": FAIL_REASON, "calls": [1]}
    scenario = {"devices": [_qpu("Merge", 3, faults=[fault]), _qpu("Other", 20)]}
    site = make_site(scenario=scenario, service=False)
    onward = ("qpu.failover=next", "qpu.class=qpu")
    movers = {
        site.submit("zeros", 100, *onward): ("zeros", 100),
        site.submit("ones", 200, *onward): ("ones", 200),
    }
    stayer = site.submit("first", 300)
    site.start_service(*FAST)  # adopts the three together, whatever the submits took
    everyone = {**movers, stayer: ("first", 300)}
    for jobid in everyone:
        site.wait_event(jobid, "qpu-task")
    first_task, first_key = _merged_members(site, everyone)
    site.clock.advance(55)  # q-merge: one running, 3 ahead, ours ends FAILED at 50 s
    site.wait_event(stayer, "clean")
    failed = site.context(stayer, "qpu-task-failed")
    assert failed["state"] == "FAILED" and FAIL_REASON in failed["reason"]
    exc = site.context(stayer, "exception")
    assert exc["type"] == "qpu" and exc["severity"] == 0
    assert FAIL_REASON in exc["note"] and "qpu.failover=fail" in exc["note"]
    assert "qpu-release" not in [e["name"] for e in site.events(stayer)]
    for jobid in movers:
        site.until(lambda jobid=jobid: len(site.events(jobid, "qpu-task")) == 2)
        failover = site.context(jobid, "qpu-failover")
        assert failover["from"] == "q-merge" and failover["exclude"] == ["q-merge"]
    submits = {j: site.events(j, "qpu-submit") for j in movers}
    assert all(
        [s["context"]["device"] for s in subs] == ["q-merge", "q-other"]
        for subs in submits.values()
    )
    second = {j: (subs[-1]["context"], subs[0]["context"]) for j, subs in submits.items()}
    keys = {now["merge"]["key"] for now, _ in second.values()}
    assert len(keys) == 1 and first_key not in keys, keys
    assert sorted(now["merge"]["index"] for now, _ in second.values()) == [0, 1]
    assert all(now["token"] != before["token"] for now, before in second.values())
    tasks = {site.events(j, "qpu-task")[-1]["context"]["task"] for j in movers}
    assert len(tasks) == 1 and first_task not in tasks
    other_task = tasks.pop()
    bill = site.bill()
    assert (bill[0]["id"], bill[0]["state"]) == (first_task, "FAILED")
    assert (bill[1]["id"], bill[1]["token"], bill[1]["shots"]) == (other_task, keys.pop(), 300)
    assert bill[1]["device"].endswith("/Other") and len(bill) == 2
    site.clock.advance(300)  # q-other's remaining queue and ours
    for jobid, (program, shots) in movers.items():
        got = site.read(jobid)
        assert got["task"] == other_task and got["counts"] == {PROGRAMS[program][1]: shots}
        index = site.events(jobid, "qpu-submit")[-1]["context"]["merge"]["index"]
        assert site.released_info(jobid)["programs"] == [index]
    assert site.bill()[1]["state"] == "COMPLETED"
    # The failed task costs nothing (three charges at 0); the two movers share the
    # second task's bill.
    failed_row = site.until(lambda: (u := _usage(site))["reserved"] == 0 and u)
    assert failed_row["tasks"] == 3 and failed_row["spent"] == 0
    other_row = site.until(lambda: (u := _usage(site, "q-other"))["reserved"] == 0 and u)
    assert other_row["tasks"] == 2
    assert other_row["spent"] == pytest.approx(site.bill()[1]["cost"])
    # Nothing left held, in Flux or in the service.
    assert site.pending() == []
    status = site.status()
    assert status["units"] == [] and status["jobs"] == 0
    assert status["counters"]["tasks_merged"] == 2 and status["counters"]["failovers"] == 2


def test_the_merged_task_is_cancelled_only_when_its_last_member_is_gone(make_site):
    """A job cancelled while waiting in the pool is left out of the task (no place, no
    charge); of the two merged, the first cancelled leaves the task running for the
    other, the second cancels it."""
    site = make_site(merge=MERGE.replace(f"{MAX_WAIT:g}s", "30s"))
    # Alone in the pool, it waits for company (its bound: max_wait) ...
    dropped = site.submit("first", 100)
    site.until(lambda: site.status()["merge"]["waiting"].get("q-merge") == 1)
    memo = site.inst.run(["flux", "jobs", "-n", "-o", "{user.qpu_state}", dropped]).stdout
    assert "to merge on q-merge" in memo, memo
    # ... and is cancelled there; the two that come next are merged without it.
    site.inst.run(["flux", "cancel", dropped])
    kept = [site.submit(p, 100) for p in ("zeros", "ones")]
    for jobid in kept:
        site.wait_event(jobid, "qpu-task")
    task, _ = _merged_members(site, {j: ("", 100) for j in kept})
    assert site.events(dropped, "qpu-submit") == []
    (row,) = site.bill()
    assert row["shots"] == 200 and site.emu.call_count("CreateQuantumTask") == 1
    site.inst.run(["flux", "cancel", kept[0]])
    site.until(lambda: any(f"task {task} left running" in line for line in site.log()))
    assert site.emu.call_count("CancelQuantumTask") == 0
    site.inst.run(["flux", "cancel", kept[1]])
    site.until(lambda: site.emu.call_count("CancelQuantumTask", target=task) == 1)
    site.until(lambda: site.bill()[0]["state"] == "CANCELLED")
    # A cancelled QPU task costs nothing: both members settled at 0, nothing reserved.
    ledger = site.until(lambda: (u := _usage(site))["reserved"] == 0 and u)
    assert ledger["tasks"] == 2 and ledger["spent"] == 0
    assert site.pending() == []
    assert site.emu.call_count("CancelQuantumTask") == 1


def test_a_device_that_refuses_the_set_runs_each_job_alone(make_site):
    """q-merge takes no program sets (the emulator refuses one as Braket does, a
    ValidationException): the service's limits cannot know that beforehand, so the set
    is refused once and each job's program goes alone, under a new token of its own."""
    scenario = {"devices": [_qpu("Merge", 3, program_sets=False)]}
    site = make_site(scenario=scenario, service=False)
    jobs = {site.submit(p, 100): (p, 100) for p in ("zeros", "ones", "first")}
    site.start_service(*FAST)  # adopts the three together, whatever the submits took
    for jobid in jobs:
        site.until(lambda jobid=jobid: len(site.events(jobid, "qpu-submit")) == 2)
        site.wait_event(jobid, "qpu-task")
    creates = [c.error for c in site.emu.calls if c.operation == "CreateQuantumTask"]
    assert creates == ["ValidationException", None, None, None]
    keys = set()
    for jobid in jobs:
        merged, alone = (e["context"] for e in site.events(jobid, "qpu-submit"))
        keys.add(merged["merge"]["key"])
        assert "merge" not in alone and alone["token"] != merged["token"]
        assert "program_set" in site.context(jobid, "qpu-submit-failed")["reason"]
        assert "the job's program goes alone" in site.context(jobid, "qpu-failover")["reason"]
    assert len(keys) == 1
    tasks = {site.context(j, "qpu-task")["task"] for j in jobs}
    assert len(tasks) == 3 and sorted(tasks) == sorted(r["id"] for r in site.bill())
    assert all(not r["token"].startswith("merge-") for r in site.bill())
    site.clock.advance(80)
    for jobid, (program, shots) in jobs.items():
        got = site.read(jobid)
        assert got["program"] is None and got["counts"] == {PROGRAMS[program][1]: shots}


def test_a_burst_on_a_one_slot_device_is_merged_into_one_task(make_site):
    """Eight jobs held before the service starts (adopted together), on a device of one
    slot (the catalog's default), the service's own retry timings: all of them wait in
    the pool together and go out as one task, which takes the one slot. Decided once the
    merged task exists and the pool is empty: a job with no ``qpu-submit`` then was left
    out (it waits for the slot the merged task took, until that task is released)."""
    site = make_site(slots=1, service=False)
    jobs = [site.submit("zeros", 100) for _ in range(8)]
    site.start_service()

    def settled() -> bool:
        created = any(site.events(j, "qpu-task") for j in jobs)
        return created and not site.status()["merge"]["waiting"]

    site.until(settled, timeout=60)
    left_out = [j for j in jobs if not site.events(j, "qpu-submit")]
    waits = {e["context"]["reason"] for j in jobs for e in site.events(j, "qpu-wait")}
    assert left_out == [], f"{len(left_out)} of 8 jobs left out of the merged task: {waits}"
    _merged_members(site, {j: ("zeros", 100) for j in jobs})
    assert site.emu.call_count("CreateQuantumTask") == 1 and waits == set()
