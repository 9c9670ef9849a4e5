"""Unit tier: the service's internals that every part relies on.

The queue of what is due when (``DueQueue``), the one retry policy (``RetryPolicy``) and
each loop that uses it (an attempt's calls, cancels, session closes, settlements, device
probes), the fence around each periodic part, and the units registry. All on the fakes:
a manual clock, Flux in memory, scripted vendors, inline workers.
"""

from __future__ import annotations

import syslog
from typing import Any

import pytest
from service_fakes import CATALOG, FAST, FakeFlux, Harness, QueueModel

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.protocol.request import parse_request
from flux_quantum.service.due import DueQueue
from flux_quantum.service.retry import Retries, RetryPolicy
from flux_quantum.service.state import Member, Program, Unit, UnitState
from flux_quantum.service.units import Units
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState
from flux_quantum.vendors.errors import InvalidRequest, VendorThrottled

DEVICE = parse_catalog(CATALOG, "t.yaml").get("alpha")
TASK = TaskRef("local", "alpha", "task-1")


def at_front(device: str, **more: Any) -> dict[str, Any]:
    return {"device": f"local:{device}", "release_at": 1, **more}


def throttled() -> VendorThrottled:
    return VendorThrottled("slow down", vendor="local", vendor_code="Throttling")


def unit_of(unit_id: int, programs: int = 1) -> Unit:
    return Unit(
        unit_id,
        1000,
        0.0,
        parse_request("local:alpha"),
        None,
        [Program(index=i, path=None) for i in range(programs)],
    )


# --- the queue of what is due when ------------------------------------------------------


def test_due_queue_gives_what_is_due_oldest_first_each_once():
    queue = DueQueue(retry_after=0.2)
    a, b = unit_of(1), unit_of(2)
    a.programs[0].attempt.due = 5.0
    b.programs[0].attempt.due = 3.0
    queue.push(a, a.programs[0])
    queue.push(b, b.programs[0])
    queue.push(b, b.programs[0])  # queued twice: given once
    assert queue.next_due() == 3.0
    assert queue.pop_due(2.0) == []
    assert queue.pop_due(4.0) == [(b, b.programs[0])]
    assert queue.pop_due(10.0) == [(a, a.programs[0])]
    assert queue.pop_due(10.0) == [] and queue.next_due() == float("inf")


def test_due_queue_drops_stale_entries_and_waits_before_an_attempt_that_did_nothing():
    queue = DueQueue(retry_after=0.2)
    unit = unit_of(1)
    program = unit.programs[0]
    program.attempt.due = 5.0
    queue.push(unit, program)
    program.attempt.due = 8.0  # changed elsewhere: its old entry is stale
    queue.push(unit, program)
    assert queue.pop_due(6.0) == []
    assert queue.pop_due(8.0) == [(unit, program)]
    # Stepped at 8.0 and still due: comes up again a retry_after later, not at once.
    queue.push(unit, program, now=8.0)
    assert queue.pop_due(8.1) == [] and queue.pop_due(8.2) == [(unit, program)]
    program.attempt.busy = True  # waiting for a worker: its completion queues it
    queue.push(unit, program)
    assert len(queue) == 0
    program.attempt.busy = False
    queue.reset([(unit, program), (unit_of(2), unit_of(2).programs[0])])
    unit.state = UnitState.FAILED
    assert [u.id for u, _ in queue.pop_due(9.0)] == [2]


# --- the retry policy -------------------------------------------------------------------


def test_retry_policy_backs_off_doubling_to_its_cap_and_tells_the_first_failure():
    policy = RetryPolicy(base=2.0, cap=10.0, error_limit=3)
    record = Retries()
    decisions = [policy.failed(record, retryable=True) for _ in range(5)]
    assert [d.delay for d in decisions] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert [d.first for d in decisions] == [True, False, False, False, False]
    assert not any(d.give_up for d in decisions)  # retryable: as long as it lasts
    record.clear()
    other = [policy.failed(record, retryable=False) for _ in range(3)]
    assert [d.give_up for d in other] == [False, False, True]
    assert other[0].first
    limited = Retries()
    assert [
        policy.failed(limited, retryable=True, retryable_limit=2).give_up for _ in range(2)
    ] == [False, True]
    never = Retries()
    assert not any(
        policy.failed(never, retryable=False, other_limit=None).give_up for _ in range(20)
    )


# --- each loop that retries -------------------------------------------------------------


def test_an_attempts_refused_call_is_given_up_after_the_error_limit():
    h = Harness()
    h.vendor.fail("poll", InvalidRequest("no such field", vendor="local", vendor_code="V"), 100)
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "failed")
    assert h.vendor.count("poll") == FAST.error_limit
    assert "poll failed 5 times in a row, giving up" in h.flux.jobs[job].note


def test_a_cancel_is_retried_by_the_policy_then_left_to_the_vendor():
    h = Harness({"alpha": QueueModel(20)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.vendor.fail("cancel", throttled(), times=2)
    h.flux.cancel(job)
    h.until(lambda: h.service.counters.tasks_cancelled == 1)
    assert h.vendor.count("cancel") == 3
    said = [m for level, m in h.logs if "cannot cancel task" in m and level == syslog.LOG_INFO]
    assert len(said) == 1  # the first failure is told, the next one only logged at debug
    # One that keeps failing is given up after five retryable failures, said once.
    other = h.flux.submit(at_front("beta"))
    h.until(lambda: h.flux.decoded(other, events.TASK))
    h.vendor.fail("cancel", throttled(), times=100)
    h.flux.cancel(other)

    def given_up() -> bool:
        return any("cannot cancel task" in m and lvl == syslog.LOG_WARNING for lvl, m in h.logs)

    h.until(given_up)
    h.run(120)
    assert h.vendor.count("cancel") == 3 + 5


def test_a_session_close_is_retried_by_the_policy():
    h = Harness()
    job = h.flux.submit({"device": "ibm:fez", "release_at": "running", "session": "dedicated"})
    h.until(lambda: h.state(job) == "released")
    h.ibm.fail("close_session", throttled(), times=2)
    h.flux.finish(job)
    h.until(lambda: not h.ibm.open_sessions())
    assert h.ibm.count("close_session") == 3
    assert h.service.counters.sessions_closed == 1


def test_a_settlement_never_gives_up(tmp_path):
    from flux_quantum.site.policy import SitePolicy

    site = SitePolicy.from_config({"ledger": {"path": str(tmp_path / "ledger.db")}})
    h = Harness({"alpha": QueueModel(3)}, site=site)
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.state(job) == "released")
    task = h.flux.last(job, events.TASK)
    refused = InvalidRequest("refused", vendor="local", vendor_code="V")
    h.vendor.fail("poll", refused, times=FAST.error_limit * 3)
    h.until(lambda: site.ledger.record(task.token).state == "settled", limit=3600)
    assert h.vendor.count("poll") > FAST.error_limit * 3


def test_a_device_probe_that_fails_is_counted_and_said_once():
    h = Harness({"alpha": QueueModel(50)})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    probes = h.vendor.count("probe")
    h.vendor.fail("probe", throttled(), times=4)
    h.until(lambda: h.vendor.count("probe") >= probes + 5)
    said = [m for level, m in h.logs if "probe failed" in m and level == syslog.LOG_WARNING]
    assert len(said) == 1
    assert h.service.counters.vendor_errors >= 4


# --- the fence around each periodic part ------------------------------------------------


class BrokenListing(FakeFlux):
    """Flux whose held-job listing has a bug (an exception the scan does not expect)."""

    def __init__(self, clock: Any) -> None:
        super().__init__(clock)
        self.asked_sessions = 0

    def held(self) -> list[Any]:
        raise RuntimeError("held broke")

    def session_jobs(self, userid: int, since: float) -> list[int]:
        self.asked_sessions += 1
        return super().session_jobs(userid, since)


def test_a_part_that_raises_is_said_once_and_the_others_go_on():
    from service_fakes import Clock

    clock = Clock()
    h = Harness(flux=BrokenListing(clock), clock=clock)
    h.run(5)
    failed = [m for level, m in h.logs if level == syslog.LOG_ERR]
    assert failed == ["scan failed: RuntimeError: held broke"]
    assert h.flux.asked_sessions == 1  # the sessions part ran after the scan failed
    assert h.service.status()["last_error"] == "scan: RuntimeError: held broke"


# --- the units registry -----------------------------------------------------------------


def test_units_keep_their_indexes_in_step():
    units = Units()
    unit = unit_of(10)
    units.add(unit)
    for jobid in (10, 11):
        units.add_member(unit, Member(jobid, 1000))
    assert units.of_job(11) is unit and units.job_count == 2 and 10 in units
    assert units.job_left(11) is unit and 11 not in unit.jobs and not units.tracks(11)
    assert units.job_left(11) is None
    unit.request = parse_request({"device": "local:alpha", "group": "g"})
    unit.released_at = 100.0
    units.end(unit, UnitState.RELEASED)
    assert len(units) == 0 and not units.tracks(10) and unit.state is UnitState.RELEASED
    assert units.released_group((1000, "g")) is unit
    units.expire_groups(150.0, linger=60.0)
    assert units.released_group((1000, "g")) is unit
    units.expire_groups(161.0, linger=60.0)
    assert units.released_group((1000, "g")) is None


def test_a_records_change_that_shows_marks_its_unit_itself():
    """What a job's memo shows changes through the records' own methods, and each marks
    its unit in the registry's ``changes`` (the face sends those, once each); what a
    restart restores waits for the unit's first step."""
    units = Units()
    unit = unit_of(10, programs=2)
    units.add(unit)
    first, second = (p.attempt for p in unit.programs)
    assert units.changes.take() == []
    first.chosen(DEVICE, "token", None)
    second.hold("all 1 slot(s) of alpha in use")
    second.hold("all 1 slot(s) of alpha in use or promised")  # a unit once per take
    assert units.changes.take() == [(unit, None)]
    assert units.changes.take() == []
    restored = unit.programs[1].recorded(2, frozenset({"beta"}), None)
    restored.tracked(TASK, queued_at=1.0, attached=False)  # shown at its first poll
    assert units.changes.take() == []
    restored.seen(TaskSnapshot(TASK, TaskState.QUEUED, 3, False, None, 5.0))
    restored.judged(30.0, None)
    restored.device_paused("alpha is paused (calibration)", due=35.0)
    assert units.changes.take() == [(unit, "waiting: alpha is paused (calibration)")]
    assert restored.expected_wait is None and restored.due == 35.0
    following = unit.programs[1].follow("alpha", None, "fail-over: alpha FAILED")
    assert following.number == 3 and following.exclude == {"alpha", "beta"}
    assert units.changes.take() == [(unit, "fail-over: alpha FAILED")]
    following.ready("position 1 <= release_at 1", 9.0)
    assert units.changes.take() == [(unit, None)]


@pytest.mark.parametrize(
    "part", ["adoption", "submission", "tracking", "outcomes", "release", "sessions"]
)
def test_no_part_is_handed_a_callback_slot_after_construction(part):
    """Collaborators are given at construction: the context has no slots to fill."""
    h = Harness()
    ctx = h.service.ctx
    for slot in ("on_cancel", "unit_ended", "joined_late", "on_orphan_session"):
        assert not hasattr(ctx, slot), slot
    assert getattr(h.service, part) is not None
