"""Unit tier: merged tasks in the handler service, end to end through ``QuantumService``
on the fakes of the outside world (Flux in memory, a scripted vendor whose ``submit_set``
makes one task of several programs and whose ``results`` gives each program its own
counts, a manual clock) and a real SQLite ledger in a temporary directory.

Held jobs' programs on one device wait in the pool and go out as one task; each job's
place is recorded before the create; each job reads only its own program's result and
pays its share; opting out, users the site keeps apart, a cancelled member, a failed
merged task and a refused set behave as ``docs/service.md`` says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_fakes import CATALOG, OWNER, Harness, InlineWorkers, QueueModel, released_record

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import ReleaseInfo
from flux_quantum.service.taskread import TaskReads, readable_ref
from flux_quantum.site.cost_shares import cost_shares, task_bill
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.base import TaskRef, TaskState
from flux_quantum.vendors.errors import VendorUnavailable

GUEST_A, GUEST_B = 2001, 2002


class MergeHarness(Harness):
    """A Harness whose site merges tasks (``merge``: the [quantum.merge] table)."""

    def __init__(self, ledger: Path, merge: dict[str, Any] | None, **kw: Any) -> None:
        catalog = parse_catalog(CATALOG)
        table: dict[str, Any] = {"ledger": {"path": str(ledger)}}
        if merge is not None:
            table["merge"] = merge
        self.site = SitePolicy.from_config(table, devices={d.name: d for d in catalog.devices})
        queues = kw.pop("queues", None) or {"alpha": QueueModel(30), "beta": QueueModel(30)}
        super().__init__(queues=queues, site=self.site, vendor_names=("local",), **kw)

    def sets(self) -> list[str]:
        return [what for op, what in self.vendor.calls if op == "submit_set"]

    def singles(self) -> list[str]:
        return [what for op, what in self.vendor.calls if op == "submit"]

    def task_of(self, job: int) -> str:
        return self.flux.last(job, events.TASK).task

    def own_result(self, job: int) -> dict[str, int]:
        """What the released job reads: its release record's task and place."""
        info = ReleaseInfo.decode(self.flux.jobs[job].release["info"])
        (task_id,) = info.tasks
        ref = TaskRef("local", "alpha", task_id, program=info.program_of(task_id))
        return dict(self.vendor.result_of(ref).counts)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "state" / "ledger.db"


def alpha(**more: Any) -> dict[str, Any]:
    return {"device": "alpha", "shots": 100, **more}


def test_jobs_on_a_busy_device_share_one_task_each_reading_its_own_result(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    first = h.flux.submit(alpha())
    h.run(5.0)
    # Alone in the pool: no task yet, and the job says why it waits and until when.
    assert h.sets() == [] and h.singles() == []
    assert events.SUBMIT not in h.flux.names(first)
    memo = h.flux.jobs[first].memo["qpu_state"]
    assert memo.startswith("waiting: to merge on alpha: sent when 100 wait or at"), memo
    assert "max_wait, 20s" in memo
    status = h.service.status()
    assert status["merge"]["waiting"] == {"alpha": 1}
    assert status["merge"]["rule"].startswith("merging on (every device that takes merged")
    assert {t["phase"] for u in status["units"] for t in u["tasks"]} == {"merging"}
    # Three more come: once they are all in (none on its way, a scan found no more),
    # the four go at once, well before the first job's 20 s.
    jobs = [first, *(h.flux.submit(alpha()) for _ in range(3))]
    h.until(lambda: bool(h.vendor.creates), limit=60)
    (t, key, _), *_ = h.vendor.creates
    assert t - h.flux.jobs[first].t_submit < 10.0
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    assert len(h.sets()) == 1 and h.singles() == []
    assert key.startswith("merge-")
    assert {h.task_of(j) for j in jobs} == {h.task_of(jobs[0])}
    for place, job in enumerate(jobs):
        submit = h.flux.last(job, events.SUBMIT)
        slot = submit.slot
        assert slot is not None and (slot.key, slot.index) == (key, place)
        assert slot.shots == (100, 100, 100, 100)
        # Its own token (its ledger row), not the task's.
        assert submit.token != key
        assert h.own_result(job) == {f"p{place}": 100}
    assert h.service.ctx.counters.tasks_merged == 1
    assert h.service.ctx.counters.jobs_merged == 4


def test_a_lone_job_waits_its_bound_then_goes_alone(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    job = h.flux.submit(alpha())
    h.until(lambda: bool(h.vendor.creates), limit=60)
    (t, token, _), *_ = h.vendor.creates
    assert 20.0 <= t - h.flux.jobs[job].t_submit < 22.0
    assert h.singles() == [token] and h.sets() == []


def test_the_shares_add_up_to_the_vendor_bill(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    # Braket runs unequal shots as executables of their gcd (100 here: 6 executables).
    jobs = [h.flux.submit(alpha(shots=shots)) for shots in (100, 200, 300)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    h.until(lambda: all(events.COST in h.flux.names(j) for j in jobs), limit=900)
    costs = [h.flux.last(j, events.COST).cost for j in jobs]
    # alpha: $0.30 a task + $0.001 a shot; the fee divided, each its own shots.
    assert costs == cost_shares(0.3, 0.001, [100, 200, 300]) == [0.2, 0.3, 0.4]
    assert round(sum(costs), 2) == task_bill(0.3, 0.001, [100, 200, 300]) == 0.9
    assert sum(costs) == pytest.approx(1.5 - 0.6)  # alone: three fees, $1.50 in all


def test_an_opted_out_job_and_an_idle_device_send_at_once(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"}, queues={"alpha": QueueModel(0)})
    mine = h.flux.submit(alpha())
    h.until(lambda: h.state(mine) == "released", limit=60)
    # Idle device: nothing waits, its task is its own and was never delayed.
    assert h.singles() and h.sets() == []
    assert events.COST not in h.flux.names(mine) or True

    busy = MergeHarness(ledger.with_name("b.db"), {"max_wait": "20s"})
    out = busy.flux.submit(alpha(merge="no"))
    a, b = busy.flux.submit(alpha()), busy.flux.submit(alpha())
    busy.until(lambda: all(busy.state(j) == "released" for j in (out, a, b)), limit=900)
    assert len(busy.sets()) == 1 and len(busy.singles()) == 1
    assert busy.flux.last(out, events.SUBMIT).slot is None
    assert busy.task_of(a) == busy.task_of(b) != busy.task_of(out)


def test_no_table_means_one_task_per_job(ledger):
    h = MergeHarness(ledger, None)
    jobs = [h.flux.submit(alpha()) for _ in range(3)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    assert h.sets() == [] and len(h.singles()) == 3


@pytest.mark.parametrize(
    ("across", "tasks"),
    [(False, 2), (True, 1)],
)
def test_two_users_share_a_task_only_where_the_site_allows_it(ledger, across, tasks):
    h = MergeHarness(ledger, {"max_wait": "20s", "across_users": across})
    jobs = [
        h.flux.submit(alpha(), userid=GUEST_A),
        h.flux.submit(alpha(), userid=GUEST_B),
        h.flux.submit(alpha(), userid=GUEST_A),
    ]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    assert len({h.task_of(j) for j in jobs}) == tasks
    # Guest A's two jobs are together either way.
    assert h.task_of(jobs[0]) == h.task_of(jobs[2])
    assert len(h.sets()) == 1 and len(h.singles()) == tasks - 1


def test_a_cancelled_member_leaves_the_task_to_the_others_the_last_one_cancels_it(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    a, b = h.flux.submit(alpha()), h.flux.submit(alpha())
    h.until(lambda: events.TASK in h.flux.names(a), limit=900)
    task = h.task_of(a)
    h.flux.cancel(a)
    h.run(5.0)
    assert not h.vendor.tasks[task].cancelled
    assert any("left running" in msg for _, msg in h.logs)
    h.until(lambda: h.state(b) == "released", limit=900)
    assert h.own_result(b) == {"p1": 100}

    # Both gone before the release: the task is cancelled (nobody reads it).
    h2 = MergeHarness(ledger.with_name("c.db"), {"max_wait": "20s"})
    c, d = h2.flux.submit(alpha()), h2.flux.submit(alpha())
    h2.until(lambda: events.TASK in h2.flux.names(d), limit=900)
    task = h2.task_of(c)
    h2.flux.cancel(c)
    h2.run(2.0)
    assert not h2.vendor.tasks[task].cancelled
    h2.flux.cancel(d)
    h2.until(lambda: h2.vendor.tasks[task].cancelled, limit=60)


def test_a_failed_merged_task_fails_its_jobs_over_together(ledger):
    # solo costs what alpha costs; its longer queue makes alpha the first choice.
    queues = {"alpha": QueueModel(30), "beta": QueueModel(30), "solo": QueueModel(60)}
    h = MergeHarness(ledger, {"max_wait": "20s"}, queues=queues)
    request = {"policy": "min-cost", "class": "qpu", "shots": 100, "failover": "next"}
    jobs = [h.flux.submit(request), h.flux.submit(request)]
    h.until(lambda: all(events.TASK in h.flux.names(j) for j in jobs), limit=900)
    first = h.task_of(jobs[0])
    assert h.task_of(jobs[1]) == first
    h.vendor.tasks[first].failed = "device error"
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    # Both failed over, away from the failed device, merged again into one task.
    second = {h.task_of(j) for j in jobs}
    assert len(second) == 1 and first not in second
    assert len(h.sets()) == 2 and h.singles() == []
    failed = {h.flux.last(j, events.FAILOVER).failed for j in jobs}
    assert len(failed) == 1  # both away from the device their merged task failed on


def test_a_refused_set_sends_each_job_alone_on_the_same_device(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    h.vendor.set_limit = 1
    jobs = [h.flux.submit(alpha()) for _ in range(2)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    assert len(h.sets()) == 1 and len(h.singles()) == 2
    assert all(h.flux.last(j, events.SUBMIT_FAILED).code == "ValidationException" for j in jobs)
    assert all(h.flux.last(j, events.TASK).device == "alpha" for j in jobs)
    assert len({h.task_of(j) for j in jobs}) == 2


def test_a_restarted_service_keeps_the_merged_task_and_each_place(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    jobs = [h.flux.submit(alpha(release_at="done")) for _ in range(3)]
    h.until(lambda: all(events.TASK in h.flux.names(j) for j in jobs), limit=900)
    h.site.close()
    again = MergeHarness(
        ledger,
        {"max_wait": "20s"},
        flux=h.flux,
        vendor=h.vendor,
        clock=h.clock,
        catalog=h.catalog,
    )
    again.until(lambda: all(again.state(j) == "released" for j in jobs), limit=900)
    assert len(again.sets()) == 1 and again.singles() == []  # the same one, not again
    for place, job in enumerate(jobs):
        assert again.own_result(job) == {f"p{place}": 100}
    assert OWNER  # the harness's instance owner runs the service
    snap = h.vendor.poll(TaskRef("local", "alpha", again.task_of(jobs[0])))
    assert snap.state is TaskState.COMPLETED


def test_a_restart_between_the_record_and_the_create_creates_the_recorded_set_once(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    # The create does not get through (an outage); then the service dies.
    h.vendor.fail("submit_set", VendorUnavailable("down", vendor="local", vendor_code="503"), 3)
    jobs = [h.flux.submit(alpha()) for _ in range(3)]
    h.until(lambda: all(events.SUBMIT in h.flux.names(j) for j in jobs), limit=900)
    h.run(1.0)
    assert h.vendor.tasks == {}
    keys = {h.flux.last(j, events.SUBMIT).slot.key for j in jobs}
    assert len(keys) == 1
    h.site.close()
    h.vendor.failures.clear()
    again = MergeHarness(ledger, {"max_wait": "20s"}, flux=h.flux, vendor=h.vendor, clock=h.clock)
    again.until(lambda: all(again.state(j) == "released" for j in jobs), limit=900)
    # One task, with the recorded key, each job in its recorded place.
    assert len(h.vendor.tasks) == 1
    (fake,) = h.vendor.tasks.values()
    assert fake.ref.token in keys and len(fake.programs) == 3
    for place, job in enumerate(jobs):
        assert again.own_result(job) == {f"p{place}": 100}


def test_a_member_gone_while_the_service_was_down_keeps_the_others_places(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    h.vendor.fail("submit_set", VendorUnavailable("down", vendor="local", vendor_code="503"), 3)
    jobs = [h.flux.submit(alpha()) for _ in range(3)]
    h.until(lambda: all(events.SUBMIT in h.flux.names(j) for j in jobs), limit=900)
    h.site.close()
    h.vendor.failures.clear()
    h.flux.cancel(jobs[1])
    again = MergeHarness(ledger, {"max_wait": "20s"}, flux=h.flux, vendor=h.vendor, clock=h.clock)
    start = again.clock()
    again.until(lambda: h.vendor.tasks != {}, limit=900)
    # Waited for the missing member up to max_wait, then made the set as recorded.
    assert again.clock() - start >= 20.0
    assert any("their places run a copy" in msg for _, msg in again.logs)
    (fake,) = h.vendor.tasks.values()
    assert len(fake.programs) == 3
    again.until(lambda: all(again.state(j) == "released" for j in (jobs[0], jobs[2])), limit=900)
    assert again.own_result(jobs[0]) == {"p0": 100}
    assert again.own_result(jobs[2]) == {"p2": 100}


def test_a_wrong_table_is_one_sentence_naming_the_key(ledger):
    catalog = parse_catalog(CATALOG)
    devices = {d.name: d for d in catalog.devices}
    with pytest.raises(ValueError) as info:
        SitePolicy.from_config({"merge": {"devices": ["garnet"]}}, devices=devices)
    assert str(info.value).startswith("[quantum.merge] devices: 'garnet' is not in the catalog")
    with pytest.raises(ValueError) as info:
        SitePolicy.from_config({"merge": {"max_wait": "soon"}}, devices=devices)
    assert str(info.value) == (
        "[quantum.merge] max_wait must be a duration >= 0 such as 0, 30s, 2m or 1h, got 'soon'"
    )
    assert SitePolicy.from_config({}, devices=devices).merge is None


def test_every_member_reading_a_merged_task_costs_one_download_of_its_results(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    jobs = [h.flux.submit(alpha()) for _ in range(5)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    h.run(600)  # the task completes at the vendor
    workers = InlineWorkers()
    reads = TaskReads(workers.submit)
    got: list[tuple[int, Any]] = []
    refs = []
    for job in jobs:
        refs.append(readable_ref(released_record(h, job), job, None, OWNER, OWNER))
    for ref in refs[:3]:  # three ranks of different jobs at once
        reads.read("result", ref, h.vendor, lambda n, v: got.append((n, v)))
    for done, result, error in workers.drain():
        done(result, error)
    for ref in refs[3:]:  # later readers: answered from memory
        reads.read("result", ref, h.vendor, lambda n, v: got.append((n, v)))
    assert h.vendor.count("results") == 1 and reads.calls == 1
    assert [v["counts"] for _, v in got] == [{f"p{i}": 100} for i in range(5)]


def test_a_burst_on_a_one_slot_device_goes_out_as_one_task_with_no_slot_wait(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"}, queues={"solo": QueueModel(30)})
    jobs = [h.flux.submit({"device": "solo", "shots": 100}) for _ in range(6)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    assert len(h.sets()) == 1 and h.singles() == []
    assert all(events.WAIT not in h.flux.names(j) for j in jobs)


def test_the_jobs_of_a_merged_task_share_its_polls(ledger):
    h = MergeHarness(ledger, {"max_wait": "20s"})
    jobs = [h.flux.submit(alpha()) for _ in range(8)]
    h.until(lambda: all(h.state(j) == "released" for j in jobs), limit=900)
    (task,) = {h.task_of(j) for j in jobs}
    polls = [what for op, what in h.vendor.calls if op == "poll" and what == task]
    # Eight jobs ride it; polled about as often as one job's task would be.
    alone = MergeHarness(ledger.with_name("alone.db"), None)
    one = alone.flux.submit(alpha())
    alone.until(lambda: alone.state(one) == "released", limit=900)
    single = [what for op, what in alone.vendor.calls if op == "poll"]
    assert len(polls) <= 2 * len(single), (len(polls), len(single))
