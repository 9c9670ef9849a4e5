"""The contract between ``FakeFlux`` (t/service_fakes.py), the Flux the service's unit
tier runs on, and ``FluxJobs`` (src/flux_quantum/service/fluxside.py), the one that
talks to a real instance: the same cases, the same inputs, the same observable results,
run against both (the real one in the flux tier). What a case observes is what the
service can see through ``FluxSide`` and what ``flux jobs`` shows a user (a job's memo
annotations, whether it is still active): never either side's insides.

A case drives its world through a few verbs (``World``): submit a job held for a QPU (or
following another's task), cancel it, let a released job start and end. ``cluster``,
``qpu_resources`` and ``set_device_up`` are left out: the fake's answers are what a test
configures, the real ones need Fluxion's graph.
"""

from __future__ import annotations

import errno
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fluxinstance import FluxInstance, until
from service_fakes import OWNER, Clock, FakeFlux

from flux_quantum.errors import CommandError
from flux_quantum.protocol.jobspec import RESERVATION_MEMO, SESSION_MEMO
from flux_quantum.service.fluxside import FluxSide

REQUEST = {"device": "sv1", "shots": 10}
UNKNOWN = 1  # a well-formed job id no job has, in either world


class FakeWorld:
    """``FakeFlux`` on a manual clock."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.fake = FakeFlux(self.clock)
        self.side: FluxSide = self.fake
        self.userid = OWNER
        self.cwd = "/tmp/contract"

    def submit(self, request: Any = REQUEST, *, follow: int | None = None) -> int:
        return self.fake.submit(None if follow else request, follow=follow, cwd=self.cwd)

    def cancel(self, jobid: int) -> None:
        self.fake.cancel(jobid)

    def start(self, jobid: int) -> None:
        """A released job got its nodes and runs."""
        self.fake.jobs[jobid].t_run = self.clock()
        self.clock.advance(1)

    def end(self, jobid: int) -> None:
        """A released job ends."""
        self.fake.finish(jobid)
        self.clock.advance(1)

    def settle(self, jobid: int) -> None:
        """A job that was failed has left the instance."""

    def annotations(self, jobid: int) -> dict[str, Any]:
        """The job's memos as ``flux jobs`` shows them."""
        job = self.fake.jobs[jobid]
        return {**job.memo, **job.annotations}

    def eventually(self, read: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
        """What ``read`` gives (at once: the fake has no lag)."""
        return read()

    def now(self) -> float:
        return self.clock()


class RealWorld:
    """``FluxJobs`` on a handle to a real instance with the quantum plugin (and no
    service: held jobs stay held). Each job waits for its own stop file once released,
    so a case says when it ends."""

    _numbers = itertools.count()

    def __init__(self, inst: FluxInstance) -> None:
        import flux

        from flux_quantum.service.fluxside import FluxJobs

        self.inst = inst
        self.handle = flux.Flux(inst.uri)
        self.side = FluxJobs(self.handle)
        self.userid = os.getuid()
        self.cwd = str(inst.workdir)
        self.stops: dict[int, Path] = {}

    def submit(self, request: Any = REQUEST, *, follow: int | None = None) -> int:
        n = next(self._numbers)
        stop = self.inst.workdir / f"stop-{n}"
        if follow:
            asks = [f"--dependency=qpu:{follow}"]
        else:
            asks = [f"--setattr=qpu.{key}={value}" for key, value in request.items()]
        command = f"while [ ! -e {stop} ]; do sleep 0.1; done"
        jobid = self.inst.submit("-N1", "-n1", *asks, "sh", "-c", command)
        self.inst.wait_event(jobid, "dependency-add")
        number = int(self.inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout)
        self.stops[number] = stop
        return number

    def cancel(self, jobid: int) -> None:
        self.inst.run(["flux", "cancel", str(jobid)])
        self.settle(jobid)

    def start(self, jobid: int) -> None:
        self.inst.wait_event(str(jobid), "start")
        self._listed(jobid, lambda job: job.get("t_run", 0) > 0)

    def end(self, jobid: int) -> None:
        self.stops[jobid].touch()
        self.settle(jobid)

    def settle(self, jobid: int) -> None:
        """The job ended, and the job list (which ``alive`` and the job lists ask)
        knows it."""
        import flux.constants

        self.inst.wait_event(str(jobid), "clean")
        inactive = flux.constants.FLUX_JOB_STATE_INACTIVE
        self._listed(jobid, lambda job: job.get("state") == inactive)

    def annotations(self, jobid: int) -> dict[str, Any]:
        """The job's memos as ``flux jobs`` shows them (the job list)."""
        return dict((self._job(jobid).get("annotations") or {}).get("user") or {})

    def eventually(self, read: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
        """What ``read`` gives once ``done`` says so, or after 30 s: the job list follows
        the job-manager's journal, and an eventlog is committed, a moment behind."""
        try:
            return until(lambda: done(value := read()) and (value,), timeout=30)[0]
        except AssertionError:
            return read()

    def _job(self, jobid: int) -> dict[str, Any]:
        attrs = ["state", "t_run", "annotations"]
        return self.handle.rpc("job-list.list-id", {"id": jobid, "attrs": attrs}).get()["job"]

    def _listed(self, jobid: int, what: Any) -> dict[str, Any]:
        return until(lambda: (job := self._job(jobid)) and what(job) and job, timeout=30)

    def now(self) -> float:
        return time.time()

    def close(self) -> None:
        for stop in self.stops.values():
            stop.touch()
        self.inst.run(["flux", "cancel", "--all"], check=False)
        self.inst.run(["flux", "queue", "drain", "--timeout=60s"], check=False)


World = FakeWorld | RealWorld


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FluxInstance]:
    inst = FluxInstance(tmp_path_factory.mktemp("fluxside"), size=1).start()
    yield inst
    assert inst.stop() == 0, inst.broker_log()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.flux)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    if request.param == "fake":
        yield FakeWorld()
        return
    real = RealWorld(request.getfixturevalue("instance"))
    try:
        yield real
    finally:
        real.close()


def names(world: World, jobid: int) -> list[str]:
    record = world.side.record(jobid)
    assert record is not None
    return [event.name for event in record.events]


def qpu_events(world: World, jobid: int, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The job's ``qpu-*`` events as ``record`` reads its eventlog, once their names are
    ``names``."""

    def read() -> list[tuple[str, dict[str, Any]]]:
        record = world.side.record(jobid)
        assert record is not None
        return [(e.name, dict(e.context)) for e in record.events if e.name.startswith("qpu-")]

    return world.eventually(read, lambda got: [name for name, _ in got] == names)


def annotations(world: World, jobid: int, expected: dict[str, Any]) -> dict[str, Any]:
    """The job's memos as ``flux jobs`` shows them, once they are ``expected``."""
    return world.eventually(lambda: world.annotations(jobid), lambda got: got == expected)


# --- held jobs and their records ------------------------------------------------------------


def test_held_lists_held_jobs_and_is_the_same_list_until_the_set_moves(world: World) -> None:
    leader = world.submit()
    follower = world.submit(follow=leader)
    held = {job.id: job for job in world.side.held()}
    assert {leader, follower} <= set(held)
    assert (held[leader].userid, held[leader].request, held[leader].follow) == (
        world.userid,
        REQUEST,
        None,
    )
    assert (held[follower].request, held[follower].follow) == (None, leader)
    record = world.side.record(leader)
    assert record is not None
    assert held[leader].t_submit == pytest.approx(record.submit_time(), abs=1e-3)
    first = world.side.held()
    assert world.side.held() is first  # nothing moved
    world.cancel(follower)
    assert follower not in {job.id for job in world.side.held()}


def test_record_gives_the_submitter_the_request_the_cwd_and_the_size(world: World) -> None:
    jobid = world.submit()
    record = world.side.record(jobid)
    assert record is not None and record.id == jobid
    assert record.submitter() == world.userid
    assert record.system["qpu"] == REQUEST and record.cwd == world.cwd
    assert (record.size.nodes, record.size.cores) == (1, 1)
    assert record.has_event("submit")
    assert world.side.record(UNKNOWN) is None


def test_records_maps_an_unknown_job_to_none(world: World) -> None:
    jobid = world.submit()
    found = world.side.records([jobid, UNKNOWN])
    assert set(found) == {jobid, UNKNOWN} and found[UNKNOWN] is None
    assert found[jobid] is not None and found[jobid].system["qpu"] == REQUEST


def test_held_records_give_the_jobspec_and_the_qpu_events(world: World) -> None:
    jobid = world.submit()
    world.side.post_event(jobid, "qpu-select", {"device": "sv1"})
    record = world.side.held_records([jobid])[jobid]
    assert record is not None
    assert record.system["qpu"] == REQUEST and record.cwd == world.cwd
    assert [(e.name, dict(e.context)) for e in record.events] == [("qpu-select", {"device": "sv1"})]


# --- events and memos -----------------------------------------------------------------------


def test_events_go_to_held_jobs_in_order_and_nowhere_else(world: World) -> None:
    held = world.submit()
    gone = world.submit()
    world.cancel(gone)
    world.side.post_event(held, "qpu-select", {"device": "sv1"})
    outcomes = world.side.post_events(
        [
            (held, "qpu-submit", {"n": 1}),
            (gone, "qpu-submit", {"n": 2}),
            (UNKNOWN, "qpu-submit", {"n": 3}),
            (held, "qpu-queue", {"n": 4}),
        ]
    )
    assert [type(outcome) for outcome in outcomes] == [
        type(None),
        CommandError,
        CommandError,
        type(None),
    ]
    assert qpu_events(world, held, ["qpu-select", "qpu-submit", "qpu-queue"]) == [
        ("qpu-select", {"device": "sv1"}),
        ("qpu-submit", {"n": 1}),
        ("qpu-queue", {"n": 4}),
    ]
    assert qpu_events(world, gone, []) == []
    with pytest.raises(CommandError):
        world.side.post_event(gone, "qpu-select", {})


def test_only_qpu_events_are_posted(world: World) -> None:
    held = world.submit()
    (outcome,) = world.side.post_events([(held, "start", {})])
    assert isinstance(outcome, CommandError)
    assert "start" not in names(world, held)


def test_after_the_release_only_the_cost_is_posted_until_the_job_ends(world: World) -> None:
    jobid = world.submit()
    world.side.release([jobid], "arn:task/1", "sv1", {})
    world.start(jobid)
    outcomes = world.side.post_events(
        [(jobid, "qpu-cost", {"cost": 0.3}), (jobid, "qpu-queue", {"position": 1})]
    )
    assert outcomes[0] is None and isinstance(outcomes[1], CommandError)
    world.end(jobid)
    with pytest.raises(OSError):
        world.side.post_event(jobid, "qpu-cost", {"cost": 0.3})
    found = qpu_events(world, jobid, ["qpu-release", "qpu-cost"])
    assert [name for name, _ in found] == ["qpu-release", "qpu-cost"]


def test_memos_show_on_active_jobs_and_fail_on_ended_ones(world: World) -> None:
    held, gone, failed, ended = (world.submit() for _ in range(4))
    world.cancel(gone)
    world.side.fail([failed], "no")
    world.settle(failed)
    world.side.release([ended], "arn:task/1", "sv1", {})
    world.start(ended)
    world.end(ended)
    world.side.memo(held, {"qpu_position": 3})
    outcomes = world.side.memos(
        [
            (held, {"qpu_wait": 40}),
            (gone, {"qpu_wait": 1}),
            (failed, {"qpu_wait": 1}),
            (ended, {"qpu_wait": 1}),
        ]
    )
    assert outcomes[0] is None
    assert [isinstance(outcome, OSError) for outcome in outcomes[1:]] == [True, True, True]
    expected = {"qpu_position": 3, "qpu_wait": 40}
    assert annotations(world, held, expected) == expected
    with pytest.raises(OSError) as raised:
        world.side.memo(gone, {"qpu_position": 1})
    assert raised.value.errno == errno.ENOENT


def test_annotate_persists_and_null_removes_a_key(world: World) -> None:
    jobid = world.submit()
    world.side.annotate(jobid, {SESSION_MEMO: "s-1", "qpu_loop": "l1"})
    world.side.annotate(jobid, {"qpu_loop": None})
    assert annotations(world, jobid, {SESSION_MEMO: "s-1"}) == {SESSION_MEMO: "s-1"}
    world.cancel(jobid)
    with pytest.raises(OSError):
        world.side.annotate(jobid, {SESSION_MEMO: "s-2"})


# --- release, fail, and the jobs that are left ------------------------------------------------


def test_release_records_the_task_and_is_all_or_nothing(world: World) -> None:
    first, second = world.submit(), world.submit()
    gone = world.submit()
    world.cancel(gone)
    with pytest.raises(CommandError):
        world.side.release([first, gone], "arn:task/0", "sv1", {})
    assert first in {job.id for job in world.side.held()}
    assert world.side.release([first, second], "arn:task/1", "sv1", {"n": 1}) == [first, second]
    assert not {first, second} & {job.id for job in world.side.held()}
    for jobid in (first, second):
        ((_, release),) = qpu_events(world, jobid, ["qpu-release"])
        assert (release["task"], release["device"]) == ("arn:task/1", "sv1")
    with pytest.raises(CommandError):
        world.side.release([first], "arn:task/2", "sv1", {})


def test_fail_ends_held_jobs_with_a_qpu_exception_and_is_all_or_nothing(world: World) -> None:
    first, second = world.submit(), world.submit()
    gone = world.submit()
    world.cancel(gone)
    with pytest.raises(CommandError):
        world.side.fail([first, gone], "never")
    assert first in {job.id for job in world.side.held()}
    assert world.side.fail([first, second], "the vendor said no") == [first, second]
    for jobid in (first, second):
        world.settle(jobid)
        record = world.side.record(jobid)
        assert record is not None
        (exception,) = [e.context for e in record.events if e.name == "exception"]
        assert (exception["type"], exception["severity"], exception["note"]) == (
            "qpu",
            0,
            "the vendor said no",
        )
    assert world.side.alive([first, second]) == set()


def test_alive_is_the_jobs_that_have_not_ended(world: World) -> None:
    held, released, ended, cancelled = (world.submit() for _ in range(4))
    world.side.release([released, ended], "arn:task/1", "sv1", {})
    world.start(released)
    world.start(ended)
    world.end(ended)
    world.cancel(cancelled)
    assert world.side.alive([held, released, ended, cancelled, UNKNOWN]) == {held, released}


def test_start_times_are_zero_until_a_job_starts(world: World) -> None:
    held, released = world.submit(), world.submit()
    world.side.release([released], "arn:task/1", "sv1", {})
    world.start(released)
    times = world.side.start_times([held, released])
    assert set(times) == {held, released}
    assert times[held] == 0.0 and times[released] > 0.0


def test_session_jobs_are_the_users_active_or_recently_ended_jobs_naming_a_session(
    world: World,
) -> None:
    before, plain, after = world.submit(), world.submit(), world.submit()
    for jobid in (before, after):
        world.side.annotate(jobid, {SESSION_MEMO: "s-1"})
    world.side.release([before], "arn:task/1", "sv1", {})
    world.start(before)
    world.end(before)
    since = world.now()
    world.side.release([after], "arn:task/2", "sv1", {})
    world.start(after)
    world.end(after)
    assert set(world.side.session_jobs(world.userid, 0.0)) >= {before, after}
    found = set(world.side.session_jobs(world.userid, since))
    assert after in found and before not in found and plain not in found
    assert world.side.session_jobs(world.userid + 1, 0.0) == []


def test_reservation_jobs_are_the_released_ones_not_ended(world: World) -> None:
    held, running, ended = world.submit(), world.submit(), world.submit()
    for jobid in (held, running, ended):
        world.side.annotate(jobid, {RESERVATION_MEMO: "w-now"})
    world.side.release([running, ended], "arn:task/1", "sv1", {})
    world.start(running)
    world.start(ended)
    world.end(ended)
    found = world.side.reservation_jobs()
    assert found.get(running) == ("w-now", world.userid)
    assert held not in found and ended not in found


def test_no_graph_means_no_qpu_devices(world: World) -> None:
    assert world.side.graph_devices() == frozenset()
