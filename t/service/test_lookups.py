"""Unit tier: a job that leaves while its create's outcome is unknown.

A create can land at the vendor while its answer is lost (or still be out when the job
leaves). The task then runs and is billed whatever the service believes; the service
must never release its reservation as "no task was created" on its own word. These
tests run ``QuantumService`` on the fakes (Flux in memory, a scripted Braket-like vendor
whose create is idempotent by token and whose lookup searches by the token tag, an
IBM-like vendor whose create is not, a manual clock) with a real SQLite ledger: in each
the task is found by its token, ONE cancel reaches the vendor, and the ledger settles
what the vendor bills; the reservation is released only when the vendor has no task
with the token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_fakes import CATALOG, Harness, QueueModel

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol import events
from flux_quantum.site.ledger import ChargeRecord
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.errors import InvalidRequest


def site_at(path: Path) -> SitePolicy:
    catalog = parse_catalog(CATALOG)
    return SitePolicy.from_config(
        {"ledger": {"path": str(path)}}, devices={d.name: d for d in catalog.devices}
    )


@pytest.fixture
def site(tmp_path: Path) -> SitePolicy:
    return site_at(tmp_path / "ledger.db")


def busy_alpha(**more: Any) -> dict[str, Any]:
    """A task that waits long in alpha's queue (cancelled while queued)."""
    return {"device": "local:alpha", "release_at": 1, **more}


def row(site: SitePolicy, token: str) -> ChargeRecord:
    record = site.ledger.record(token)
    assert record is not None, f"no ledger row for {token}"
    return record


def settled_with_task(site: SitePolicy, token: str) -> bool:
    record = site.ledger.record(token)
    return record is not None and record.state == "settled"


def cancels(h: Harness, vendor: Any | None = None) -> list[str]:
    return [what for op, what in (vendor or h.vendor).calls if op == "cancel"]


def test_a_job_cancelled_after_a_lost_create_answer_has_its_task_cancelled_and_billed(site):
    h = Harness({"alpha": QueueModel(50)}, site=site)
    h.vendor.lose_answers = 1
    job = h.flux.submit(busy_alpha())
    h.until(lambda: h.vendor.creates)
    token = h.flux.last(job, events.SUBMIT).token
    (task_id,) = h.vendor.tasks  # the create landed; its answer did not come back
    assert not h.flux.decoded(job, events.TASK)
    assert row(site, token).state == "reserved"

    h.flux.cancel(job)  # before the create is tried again
    h.until(lambda: settled_with_task(site, token), limit=120)

    assert cancels(h) == [task_id]  # one cancel reached the vendor
    assert h.vendor.tasks[task_id].cancelled
    record = row(site, token)
    assert record.task_id == task_id
    assert "none was created" not in (record.note or "")
    assert h.vendor.count("submit") == 1  # looked up, never created again
    h.run(30)
    assert cancels(h) == [task_id]  # and never cancelled twice


def test_a_job_cancelled_while_its_create_is_out_cancels_the_task_once(site):
    h = Harness({"alpha": QueueModel(50)}, site=site)
    job = h.flux.submit(busy_alpha())
    # Adopt, choose and send the create, but hold its answer (a worker still out).
    h.service.tick()
    for _ in range(10):
        if h.vendor.creates:
            break
        h.service.completions()
        h.service.step_soon()
    assert h.vendor.creates and h.workers._done  # created; the answer not handed back
    token = h.flux.last(job, events.SUBMIT).token
    (task_id,) = h.vendor.tasks
    h.flux.cancel(job)
    h.clock.advance(h.service.ctx.options.scan_interval)
    h.service.tick()  # the scan sees the job gone while its create is out
    assert row(site, token).state == "reserved"  # not released on our word
    h.until(lambda: settled_with_task(site, token), limit=120)
    assert cancels(h) == [task_id]
    assert row(site, token).task_id == task_id
    assert h.vendor.count("lookup") == 0  # the create's own answer named the task


def test_a_batch_that_fails_while_a_create_answer_is_lost_cancels_and_bills_that_task(
    site, tmp_path
):
    for name in ("a.qasm", "b.qasm"):
        (tmp_path / name).write_text("OPENQASM 3.0;\nqubit[1] q;\n")
    h = Harness({"alpha": QueueModel(50)}, site=site)
    h.vendor.lose_answers = 1  # the first program's create lands, its answer is lost
    refused = InvalidRequest("no such gate", vendor="local", vendor_code="ValidationException")
    h.vendor.fail("submit", None)
    h.vendor.fail("submit", refused)  # the second's is refused: the job fails
    job = h.flux.submit(
        busy_alpha(program=["a.qasm", "b.qasm"], failover="fail"), cwd=str(tmp_path)
    )
    h.until(lambda: h.state(job) == "failed", limit=120)
    first, second = h.flux.decoded(job, events.SUBMIT)
    (task_id,) = h.vendor.tasks
    h.until(lambda: settled_with_task(site, first.token), limit=120)
    assert cancels(h) == [task_id]
    assert row(site, first.token).task_id == task_id
    # The refused create made nothing: the vendor says so, then it is released.
    h.until(lambda: row(site, second.token).state == "released", limit=120)
    assert "none was created" in (row(site, second.token).note or "")


def test_a_restarted_service_looks_up_the_token_of_a_job_that_left_while_it_was_down(tmp_path):
    path = tmp_path / "ledger.db"
    site = site_at(path)
    h = Harness({"alpha": QueueModel(50)}, site=site)
    h.vendor.lose_answers = 1
    job = h.flux.submit(busy_alpha())
    h.until(lambda: h.vendor.creates)  # kill -9 between the create and its answer
    token = h.flux.last(job, events.SUBMIT).token
    (task_id,) = h.vendor.tasks
    site.close()
    h.flux.cancel(job)  # while no service runs

    again = site_at(path)
    h2 = h.restart(site=again)
    h2.until(lambda: settled_with_task(again, token), limit=120)
    assert cancels(h2) == [task_id]
    assert row(again, token).task_id == task_id


def test_a_token_the_vendor_never_saw_is_released_after_the_lookup(site):
    h = Harness({"alpha": QueueModel(50)}, site=site)
    lost = InvalidRequest("timed out", vendor="local", vendor_code="ReadTimeout")
    lost.retryable = True  # a timeout whose create never arrived: the outcome unknown
    h.vendor.fail("submit", lost)
    job = h.flux.submit(busy_alpha())
    h.until(lambda: h.vendor.count("submit") == 1)
    token = h.flux.last(job, events.SUBMIT).token
    assert not h.vendor.tasks
    h.flux.cancel(job)
    h.until(lambda: row(site, token).state == "released", limit=120)
    assert h.vendor.count("lookup") == 1
    assert "the vendor has no task with token" in (row(site, token).note or "")
    assert cancels(h) == []


def test_an_ibm_create_whose_answer_was_lost_is_found_by_its_token_and_cancelled(site):
    h = Harness({"fez": QueueModel(50)}, site=site)
    h.ibm.lose_answers = 1
    job = h.flux.submit({"device": "ibm:fez", "release_at": 1})
    h.until(lambda: h.ibm.count("submit") == 1)
    token = h.flux.last(job, events.SUBMIT).token
    (task_id,) = h.ibm.tasks
    h.flux.cancel(job)
    h.until(lambda: settled_with_task(site, token), limit=120)
    assert cancels(h, h.ibm) == [task_id]
    assert h.ibm.count("submit") == 1  # never a second job for the token
    assert row(site, token).task_id == task_id


def test_without_a_site_policy_the_lost_task_is_still_cancelled():
    h = Harness({"alpha": QueueModel(50)})
    h.vendor.lose_answers = 1
    job = h.flux.submit(busy_alpha())
    h.until(lambda: h.vendor.creates)
    (task_id,) = h.vendor.tasks
    h.flux.cancel(job)
    h.until(lambda: h.vendor.tasks[task_id].cancelled, limit=120)
    assert cancels(h) == [task_id]


def test_members_of_a_merged_task_that_leave_after_a_lost_answer_each_pay_their_share(tmp_path):
    catalog = parse_catalog(CATALOG)
    site = SitePolicy.from_config(
        {"ledger": {"path": str(tmp_path / "ledger.db")}, "merge": {"max_wait": "20s"}},
        devices={d.name: d for d in catalog.devices},
    )
    h = Harness({"alpha": QueueModel(30)}, site=site, vendor_names=("local",))
    h.vendor.lose_answers = 1  # the set's create lands, its answer is lost
    jobs = [h.flux.submit({"device": "alpha", "shots": 100}) for _ in range(3)]
    h.until(lambda: h.vendor.count("submit_set") == 1, limit=120)
    (task_id,) = h.vendor.tasks
    tokens = [h.flux.last(j, events.SUBMIT).token for j in jobs]
    for job in jobs:
        h.flux.cancel(job)
    h.until(lambda: all(settled_with_task(site, t) for t in tokens), limit=300)
    assert cancels(h) == [task_id]  # one cancel for the one task
    assert {row(site, t).task_id for t in tokens} == {task_id}
    assert h.vendor.count("submit_set") == 1
