"""Unit tier: a held job whose other Flux dependencies still hold its task
(flux_quantum.service.waiting), through ``QuantumService`` on the fakes: it is not adopted
(no program read, no device chosen, no vendor call, nothing recorded) until they resolve;
a job whose dependency can never be satisfied ends with nothing spent; limits, loop steps,
followers and groups keep their meaning. The flux tier runs the same stories on real
brokers (t/examples/test_pipeline_flux.py)."""

from __future__ import annotations

import pytest
from service_fakes import FAST, Harness, at_front

from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol import events
from flux_quantum.service.waiting import LIMITS, holding, waiting_text

PREP = "after-success=ƒprep"


def qpu_events(h: Harness, job: int) -> list[str]:
    return [name for name in h.flux.names(job) if name.startswith("qpu-")]


def test_a_waiting_job_gets_no_task_until_its_dependency_resolves():
    h = Harness()
    job = h.flux.submit(at_front("alpha"), dependencies=[PREP])
    h.run(60)
    assert not h.service.units.tracks(job)
    assert h.vendor.count("submit") == 0 and h.vendor.count("device") == 0
    assert qpu_events(h, job) == []
    assert h.flux.jobs[job].memo["qpu_state"] == f"waiting for dependency {PREP}"
    resolved_at = h.clock()
    h.flux.resolve(job, PREP)
    h.until(lambda: h.state(job) == "released")
    names = qpu_events(h, job)
    assert names.index(events.INPUTS) < names.index(events.SUBMIT)
    assert h.flux.last(job, events.INPUTS).after == (PREP,)
    inputs = next(e for e in h.flux.jobs[job].events if e.name == events.INPUTS)
    submit = next(e for e in h.flux.jobs[job].events if e.name == events.SUBMIT)
    assert resolved_at <= inputs.timestamp <= submit.timestamp
    assert h.vendor.count("submit") == 1
    # The token is the job's own (its submit time), not the moment it could start.
    assert h.flux.last(job, events.SUBMIT).token == events.task_token(
        job, h.flux.jobs[job].t_submit, 0, 0
    )


def test_the_unit_counts_from_when_its_task_could_be_created():
    h = Harness()
    job = h.flux.submit(at_front("alpha"), dependencies=[PREP])
    h.run(120)
    h.flux.resolve(job, PREP)
    opened = h.clock()
    h.until(lambda: h.service.units.tracks(job))
    unit = h.service.units.of_job(job)
    assert unit is not None and unit.t_submit == h.flux.jobs[job].t_submit
    assert opened <= unit.ready_at <= opened + FAST.scan_interval  # the next scan
    # A restarted service reads it back from the job's qpu-inputs.
    h2 = h.restart()
    h2.until(lambda: h2.service.units.tracks(job))
    again = h2.service.units.of_job(job)
    assert again is not None
    recorded = next(e for e in h.flux.jobs[job].events if e.name == events.INPUTS)
    assert again.ready_at == recorded.timestamp


def test_a_dependency_that_can_never_be_satisfied_ends_the_job_with_nothing_spent():
    h = Harness()
    job = h.flux.submit(at_front("alpha"), dependencies=[PREP])
    h.run(10)
    h.flux.never(job, PREP)
    h.run(10)
    assert h.vendor.count("submit") == 0 and h.vendor.count("device") == 0
    assert qpu_events(h, job) == []
    assert not h.service.units.tracks(job)
    assert any(
        f"{job}: ended while waiting for {PREP}: no task was created" in text for _, text in h.logs
    )


def test_a_flux_accounting_limit_does_not_hold_the_task():
    h = Harness()
    limited = h.flux.submit(at_front("alpha"), dependencies=["max-running-jobs-user-limit"])
    both = h.flux.submit(at_front("alpha"), dependencies=[PREP, "max-running-jobs-user-limit"])
    h.until(lambda: h.flux.decoded(limited, events.TASK))
    assert not h.service.units.tracks(both)
    assert h.flux.jobs[both].memo["qpu_state"] == f"waiting for dependency {PREP}"
    h.flux.resolve(both, PREP)
    h.until(lambda: h.flux.decoded(both, events.TASK))
    # What held it is the input, not the limit that still holds.
    assert h.flux.last(both, events.INPUTS).after == (PREP,)


def test_a_loop_step_does_not_wait_for_the_step_before():
    h = Harness()
    host = "after-finish=ƒstep0"
    step = h.flux.submit(at_front("alpha", loop="loop-1"), dependencies=[host])
    h.until(lambda: h.flux.decoded(step, events.TASK))
    assert events.INPUTS not in qpu_events(h, step)


def test_a_follower_waits_as_long_as_the_job_it_follows():
    h = Harness()
    leader = h.flux.submit(at_front("alpha"), dependencies=[PREP])
    follower = h.flux.submit(None, follow=leader)
    h.run(20)
    assert not h.service.units.tracks(follower)
    assert h.flux.jobs[follower].memo["qpu_state"] == (f"waiting for the job it follows: {PREP}")
    h.flux.resolve(leader, PREP)
    h.until(lambda: h.state(leader) == h.state(follower) == "released")
    assert h.flux.jobs[follower].release["task"] == h.flux.jobs[leader].release["task"]
    assert h.vendor.count("submit") == 1


def test_a_group_member_that_waits_joins_its_group_once_ready():
    h = Harness()
    first = h.flux.submit(at_front("beta", group="fan"))
    second = h.flux.submit(at_front("beta", group="fan"), dependencies=[PREP])
    h.until(lambda: h.flux.decoded(first, events.TASK))
    assert not h.service.units.tracks(second)
    h.flux.resolve(second, PREP)
    h.until(lambda: h.state(first) == h.state(second) == "released")
    assert h.flux.jobs[second].release["task"] == h.flux.jobs[first].release["task"]
    assert h.vendor.count("submit") == 1


def test_dependencies_not_read_yet_hold_the_task():
    h = Harness()
    job = h.flux.submit(at_front("alpha"), dependencies=None)
    h.run(10)
    assert h.vendor.count("submit") == 0
    assert h.flux.jobs[job].memo["qpu_state"] == "waiting for its dependencies to be read"
    h.flux.dependencies_read(job, [])
    h.until(lambda: h.flux.decoded(job, events.TASK))


@pytest.mark.parametrize(
    ("dependencies", "qpu", "held"),
    [
        ((), {"device": "sv1"}, ()),
        ((PREP,), {"device": "sv1"}, (PREP,)),
        (tuple(sorted(LIMITS)), {"device": "sv1"}, ()),
        (("begin-time=1.000", *LIMITS), "sv1", ("begin-time=1.000",)),
        ((PREP,), {"device": "sv1", "loop": "loop-1"}, ()),
        (None, {"device": "sv1"}, None),
    ],
)
def test_holding_is_the_jobs_dependencies_but_limits(dependencies, qpu, held):
    job = HeldJob(7, 1000, qpu, 0.0, dependencies=dependencies)
    assert holding(job, {7: job}) == held


def test_a_follower_of_a_job_not_listed_is_not_held():
    follower = HeldJob(8, 1000, None, 0.0, follow=7, dependencies=(PREP,))
    assert holding(follower, {8: follower}) == ()
    assert waiting_text(follower, (PREP,)) == f"waiting for the job it follows: {PREP}"
