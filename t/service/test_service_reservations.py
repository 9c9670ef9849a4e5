"""Unit tier: reserved QPU time (Braket Direct windows) in the handler service, end to
end through ``QuantumService`` on the fakes of the outside world (Flux in memory, a
scripted vendor that models a window: a task with its ARN waits QUEUED until it opens
and is cancelled at its end if it did not start; a manual clock) and a real SQLite
ledger in a temporary directory.

A job naming a window waits held with no task until its lead before the window, then
its task is created with the ARN and it is released at once; ``jobs`` bounds the jobs
in a window; a window that ended applies the job's end rule; no task is ever created
with an ARN at or after the window's end; the policy routes a job into a window that
opens sooner than the public queue; a restarted service keeps one task per token and
the window's places; the status lists the windows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from service_fakes import CATALOG, FAST, OWNER, Harness, QueueModel

from flux_quantum.catalog import parse_catalog
from flux_quantum.errors import CommandError
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import ReleaseInfo
from flux_quantum.site.ledger import Ledger
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.errors import VendorUnavailable

ARN = "arn:aws:braket:us-east-1:123456789012:reservation/alpha-w"
NAME = "alpha-w"
T0 = 1_000_000.0  # the Harness clock's start
OPENS = 120.0  # the window opens this long after T0 ...
LASTS = 300.0  # ... and lasts this long
START, END = T0 + OPENS, T0 + OPENS + LASTS
TASK = 10.0  # alpha's drain_seconds_per_task: one task's expected run
LEAD = 1.0  # the service's start-up estimate before it measured any (startup_default)


def window(**more: Any) -> dict[str, Any]:
    return {
        "name": NAME,
        "device": "alpha",
        "arn": ARN,
        "start": START,
        "end": END,
        "cost": 1500.0,
        **more,
    }


class WindowHarness(Harness):
    """A Harness whose site has ``windows`` ([[quantum.reservations]]) and a ledger."""

    def __init__(self, ledger: Path, windows: list[dict[str, Any]], **kw: Any) -> None:
        self.ledger_path = ledger
        self.windows = windows
        catalog = kw.get("catalog") or parse_catalog(CATALOG)
        devices = {d.name: d for d in catalog.devices}
        self.site = SitePolicy.from_config(
            {"reservations": windows, "ledger": {"path": str(ledger)}}, devices=devices
        )
        queues = kw.pop("queues", None) or {"alpha": QueueModel(30)}
        super().__init__(queues=queues, site=self.site, vendor_names=("local",), **kw)
        if "vendor" not in kw:
            self.vendor.add_window(ARN, "alpha", START, END)

    def restart_site(self) -> WindowHarness:
        """A new service on the same world, site and ledger (the old one is gone)."""
        self.site.close()
        return WindowHarness(
            self.ledger_path,
            self.windows,
            flux=self.flux,
            vendor=self.vendor,
            clock=self.clock,
            catalog=self.catalog,
            session_keys=self.keys.survivor(),
        )

    def with_arn(self) -> list[tuple[float, str, str | None]]:
        return [c for c in self.vendor.creates if c[2] is not None]

    def window_status(self) -> dict[str, Any]:
        (status,) = self.service.status()["reservations"]
        return status


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "state" / "ledger.db"


def named(**more: Any) -> dict[str, Any]:
    return {"reservation": NAME, **more}


def no_arn_at_or_after_the_end(h: WindowHarness) -> None:
    """The promise: no create is ever sent with the ARN at or after the window's end."""
    assert all(t < END for t, _, _ in h.with_arn()), h.with_arn()


# --- admission ------------------------------------------------------------------------


def test_a_job_naming_a_window_is_held_with_no_task_until_its_lead_then_created_with_the_arn_and_released(  # noqa: E501
    ledger,
):
    h = WindowHarness(ledger, [window()])
    job = h.flux.submit(named())
    h.run(60.0)
    assert h.state(job) == "held"
    assert h.vendor.calls == []  # no probe, no create: nothing asked of the vendor yet
    select = h.flux.last(job, events.SELECT)
    assert select.device == "alpha"
    assert select.explanation["reservation"]["name"] == NAME
    assert "the job asked for reservation alpha-w" in select.explanation["reservation"]["reason"]
    memo = h.flux.jobs[job].memo
    assert memo["qpu_state"].startswith("waiting for reservation alpha-w: reservation alpha-w")
    assert "opens in 1m" in memo["qpu_state"]
    assert h.flux.jobs[job].annotations["qpu_reservation"] == NAME
    assert events.SUBMIT not in h.flux.names(job)  # no token recorded while it waits
    assert h.window_status()["waiting"] == [job]

    h.until(lambda: h.state(job) == "released")
    # Admitted its lead (the start-up estimate) before the window opens, not sooner.
    assert START - LEAD <= h.clock() < START - LEAD + 0.5
    ((t, token, arn),) = h.vendor.creates
    assert arn == ARN and t < START
    submit = h.flux.last(job, events.SUBMIT)
    assert (submit.reservation, submit.token) == (NAME, token)
    ready = h.flux.last(job, events.READY)
    assert ready.tasks[0]["why"].startswith("admitted: reservation alpha-w opens in 1s")
    info = ReleaseInfo.decode(h.flux.jobs[job].release["info"])
    assert info.reservation is not None
    assert (info.reservation.name, info.reservation.arn, info.reservation.end) == (NAME, ARN, END)
    # The task waits QUEUED for the window with no place in the public queue (30 ahead).
    state, position = h.vendor.state_of(next(iter(h.vendor.tasks.values())))
    assert (state.value, position) == ("QUEUED", None)
    # Its estimate was nothing (the window is paid), and the window is booked once.
    assert h.site.ledger.record(token).estimate == 0.0
    booked = h.site.ledger.record(f"window:{ARN}")
    assert booked is not None and booked.cost == 1500.0


def test_a_waiting_job_is_stepped_at_its_admission_time_not_polled(ledger):
    h = WindowHarness(ledger, [window()])
    job = h.flux.submit(named())
    h.run(5.0)
    (program,) = h.service.units.of_job(job).programs
    assert program.attempt.due == pytest.approx(START - LEAD)
    posts = sum(1 for kind, _ in h.flux.journal if kind == "memos")
    h.run(60.0)
    # A minute of waiting moved no memo (nothing changed) and called no vendor.
    assert sum(1 for kind, _ in h.flux.journal if kind == "memos") == posts
    assert h.vendor.calls == []


def test_jobs_bounds_the_jobs_in_a_window_and_the_next_goes_in_when_one_ends(ledger):
    h = WindowHarness(ledger, [window(jobs=1)])
    first = h.flux.submit(named())
    h.clock.advance(1.0)
    second = h.flux.submit(named())
    h.until(lambda: h.state(first) == "released")
    h.run(30.0)
    assert h.state(second) == "held"
    assert "its 1 place(s) on nodes are taken" in h.flux.jobs[second].memo["qpu_state"]
    assert len(h.vendor.creates) == 1
    status = h.window_status()
    assert (status["waiting"], status["active"]) == ([second], [first])

    h.flux.finish(first)
    ended = h.clock()
    h.until(lambda: h.state(second) == "released", limit=10.0)
    assert h.clock() - ended <= FAST.scan_interval * 2 + 0.5
    assert [arn for _, _, arn in h.vendor.creates] == [ARN, ARN]
    assert h.window_status()["active"] == [second]
    no_arn_at_or_after_the_end(h)


# --- the window's end -------------------------------------------------------------------


def test_a_job_whose_window_ended_before_admission_falls_back_on_demand(ledger):
    """Its one place taken by a job that runs past the window: the waiting job never
    gets in; when the window stops taking work it gets a task in the public queue."""
    h = WindowHarness(ledger, [window(jobs=1)], queues={"alpha": QueueModel(2)})
    first = h.flux.submit(named())
    h.clock.advance(1.0)
    second = h.flux.submit(named(release_at=1))
    h.until(lambda: h.state(first) == "released")
    h.until(lambda: h.flux.decoded(second, events.RESERVATION_ENDED), limit=LASTS + OPENS)
    # It stopped waiting once less than one task's time was left.
    assert END - TASK <= h.clock() < END - TASK + 0.5
    ended = h.flux.last(second, events.RESERVATION_ENDED)
    assert (ended.reservation, ended.end, ended.action) == (NAME, END, "on-demand")
    failover = h.flux.last(second, events.FAILOVER)
    assert (failover.mode, failover.attempt) == ("on-demand", 1)
    assert "the task goes to the public queue" in failover.reason
    h.until(lambda: h.state(second) == "released")
    creates = h.vendor.creates
    assert [arn for _, _, arn in creates] == [ARN, None]
    assert h.flux.last(second, events.SUBMIT).reservation is None
    assert h.flux.last(second, events.SELECT).device == "alpha"
    assert "qpu_reservation" not in h.flux.jobs[second].annotations
    info = ReleaseInfo.decode(h.flux.jobs[second].release["info"])
    assert info.reservation is None
    no_arn_at_or_after_the_end(h)


@pytest.mark.parametrize(
    ("config", "request_more", "rule"),
    [
        ({"on_end": "fail"}, {}, "fail"),
        ({}, {"reservation_end": "fail"}, "fail"),
        ({"on_end": "fail"}, {"reservation_end": "on-demand"}, "on-demand"),
    ],
)
def test_a_job_naming_a_window_that_ended_follows_its_end_rule(ledger, config, request_more, rule):
    h = WindowHarness(ledger, [window(**config)])
    h.clock.advance(OPENS + LASTS + 5.0)
    job = h.flux.submit(named(**request_more))
    h.until(lambda: h.state(job) != "held")
    ended = h.flux.last(job, events.RESERVATION_ENDED)
    assert ended.action == rule
    if rule == "fail":
        assert h.state(job) == "failed"
        assert h.flux.jobs[job].note == (
            "qpu: reservation alpha-w ended at 1970-01-12T13:53:40Z before the job's task ran"
        )
        assert h.vendor.creates == []
    else:
        assert h.state(job) == "released"
        assert [arn for _, _, arn in h.vendor.creates] == [None]
        assert h.flux.last(job, events.SELECT).device == "alpha"  # the window's device


def test_a_window_task_cancelled_at_the_end_while_its_job_is_held_gets_the_end_rule(ledger):
    """Two jobs in a window whose first task runs it whole: the second's task never
    starts, and Braket cancels it at the end. Its release was refused (Flux busy) and
    the service died; the one started after the end finds it held on the cancelled
    task: the job's end rule applies, and no task is created with the ARN again."""
    h = WindowHarness(ledger, [window()], queues={"alpha": QueueModel(0, run=LASTS + 60.0)})
    first = h.flux.submit(named())
    h.clock.advance(1.0)
    second = h.flux.submit(named(reservation_end="on-demand"))

    def refuse(ids: list[int]) -> None:
        h.flux.before_release = refuse
        if second in ids:
            raise CommandError("release: the plugin is busy")

    h.flux.before_release = refuse
    h.until(lambda: h.state(first) == "released" and h.flux.decoded(second, events.TASK))
    assert h.state(second) == "held"
    h.flux.before_release = None
    h.clock.advance(LASTS + OPENS)  # no service runs meanwhile
    h2 = h.restart_site()
    h2.until(lambda: h2.state(second) == "released")
    ended = h2.flux.last(second, events.RESERVATION_ENDED)
    assert (ended.action, ended.task) == ("on-demand", h2.flux.decoded(second, events.TASK)[0].task)
    assert "was cancelled at the end of reservation alpha-w" in ended.reason
    assert [arn for _, _, arn in h2.vendor.creates] == [ARN, ARN, None]
    no_arn_at_or_after_the_end(h2)


def test_a_create_retried_past_the_end_is_never_sent_with_the_arn(ledger):
    """Admitted just before the end, its create fails (an outage) until the window has
    less than one task left: the guard before the create sends it to the public queue."""
    h = WindowHarness(ledger, [window()], queues={"alpha": QueueModel(0)})
    h.clock.advance(OPENS + LASTS - TASK - 4.0)
    h.vendor.fail("submit", VendorUnavailable("down", vendor="local", vendor_code="503"), 3)
    job = h.flux.submit(named())
    h.until(lambda: h.state(job) == "released")
    arns = [arn for _, _, arn in h.vendor.creates]
    assert arns == [ARN, ARN, ARN, None]  # three failed, the fourth was refused by the guard
    ended = h.flux.last(job, events.RESERVATION_ENDED)
    assert ended.action == "on-demand"
    assert "no task is created with its ARN any more" in ended.reason
    no_arn_at_or_after_the_end(h)


# --- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "request_attr", "note"),
    [
        (
            {},
            {"reservation": "nope"},
            "qpu: qpu.reservation 'nope' is not a reservation of this instance "
            "(configured: alpha-w)",
        ),
        (
            {"users": ["someone-else"]},
            {"reservation": NAME},
            "qpu: reservation alpha-w is for users someone-else; user ",
        ),
        (
            {},
            {"reservation": NAME, "device": "beta"},
            "qpu: reservation alpha-w is on device alpha; the request names device beta",
        ),
    ],
)
def test_a_window_the_job_may_not_use_fails_it_in_one_sentence(ledger, config, request_attr, note):
    h = WindowHarness(ledger, [window(**config)])
    job = h.flux.submit(request_attr)
    h.until(lambda: h.state(job) == "failed")
    text = h.flux.jobs[job].note
    assert text.startswith(note)
    assert "\n" not in text and text.count(". ") == 0
    assert h.vendor.calls == []


def test_no_window_for_a_user_not_allowed_names_the_user(ledger):
    h = WindowHarness(ledger, [window(users=["someone-else"])])
    job = h.flux.submit(named(), userid=OWNER)
    h.until(lambda: h.state(job) == "failed")
    assert h.flux.jobs[job].note.endswith("may not use it")


# --- routing ----------------------------------------------------------------------------


def test_a_job_naming_no_window_is_routed_into_one_that_opens_sooner_than_the_public_queue(
    ledger,
):
    h = WindowHarness(ledger, [window(route=True)], queues={"alpha": QueueModel(50)})
    job = h.flux.submit({"device": "alpha"})
    h.until(lambda: h.state(job) == "released", limit=OPENS + 10.0)
    explanation = h.flux.last(job, events.SELECT).explanation
    assert explanation["reservation"]["name"] == NAME
    reason = explanation["reservation"]["reason"]
    assert "reservation alpha-w on alpha opens in 2m, sooner than its public queue" in reason
    assert [arn for _, _, arn in h.vendor.creates] == [ARN]
    assert h.flux.last(job, events.SUBMIT).reservation == NAME


def test_a_job_is_routed_only_when_the_window_opens_sooner_than_the_queue_it_would_join(
    ledger,
):
    """min-wait would send it to solo: routed into alpha's window only when the window
    opens before solo's queue would serve it, whatever alpha's own queue is."""
    any_qpu = {"class": "qpu", "policy": "min-wait", "release_at": 1}
    busy = {"alpha": QueueModel(50), "beta": QueueModel(40), "solo": QueueModel(20)}
    h = WindowHarness(ledger, [window(route=True)], queues=busy)
    job = h.flux.submit(any_qpu)
    h.run(2.0)
    select = h.flux.last(job, events.SELECT)
    assert select.device == "alpha" and select.explanation["reservation"]["name"] == NAME
    # Solo's queue (19 tasks ahead x 10 s), not alpha's own (~8m).
    assert "sooner than its public queue (~3m)" in select.explanation["reservation"]["reason"]

    quiet = {"alpha": QueueModel(50), "beta": QueueModel(40), "solo": QueueModel(1)}
    h = WindowHarness(ledger, [window(route=True)], queues=quiet)
    job = h.flux.submit(any_qpu)
    h.until(lambda: h.state(job) == "released")
    select = h.flux.last(job, events.SELECT)
    assert select.device == "solo" and select.explanation["reservation"]["name"] is None
    assert [arn for _, _, arn in h.vendor.creates] == [None]


@pytest.mark.parametrize(
    ("on_end", "asked", "action"),
    [("fail", None, "on-demand"), ("on-demand", None, "on-demand"), ("on-demand", "fail", "fail")],
)
def test_a_routed_job_whose_window_ends_first_goes_on_demand_unless_it_asked_otherwise(
    ledger, on_end, asked, action
):
    """Routed into a window whose one place stays taken: at the end it goes to the same
    device's public queue whatever the window's ``on_end`` (it never asked for the
    window), unless its own ``qpu.reservation_end`` says fail."""
    busy = {"alpha": QueueModel(50), "beta": QueueModel(40), "solo": QueueModel(30)}
    h = WindowHarness(ledger, [window(route=True, jobs=1, on_end=on_end)], queues=busy)
    first = h.flux.submit(named())
    h.clock.advance(1.0)
    request = {"class": "qpu", "policy": "min-wait", "release_at": 100}
    if asked is not None:
        request["reservation_end"] = asked
    routed = h.flux.submit(request)
    h.until(lambda: h.state(first) == "released")
    assert h.flux.last(routed, events.SELECT).explanation["reservation"]["name"] == NAME
    h.until(lambda: h.state(routed) != "held", limit=LASTS + OPENS)
    assert h.flux.last(routed, events.RESERVATION_ENDED).action == action
    if action == "fail":
        assert h.state(routed) == "failed"
        # It stopped waiting when less than one task's time was left.
        assert h.flux.jobs[routed].note == (
            "qpu: reservation alpha-w ends at 1970-01-12T13:53:40Z, too soon for the "
            "job's task (~10s): it did not run in it"
        )
        assert [arn for _, _, arn in h.vendor.creates] == [ARN]
    else:
        assert h.state(routed) == "released"
        # The same device, in its public queue (min-wait alone would take solo).
        assert h.flux.last(routed, events.SUBMIT).device == "alpha"
        assert [arn for _, _, arn in h.vendor.creates] == [ARN, None]
    no_arn_at_or_after_the_end(h)


def test_a_window_later_than_the_public_queue_is_not_taken_and_the_explanation_says_why(
    ledger,
):
    h = WindowHarness(ledger, [window(route=True)], queues={"alpha": QueueModel(2)})
    job = h.flux.submit({"device": "alpha", "release_at": 1})
    h.until(lambda: h.state(job) == "released")
    explanation = h.flux.last(job, events.SELECT).explanation
    assert explanation["reservation"]["name"] is None
    assert "not sooner than the public queue" in explanation["reservation"]["reason"]
    assert [arn for _, _, arn in h.vendor.creates] == [None]


def test_a_job_that_refuses_windows_is_never_routed(ledger):
    h = WindowHarness(ledger, [window(route=True)], queues={"alpha": QueueModel(50)})
    job = h.flux.submit({"device": "alpha", "reservation": "none", "release_at": 100})
    h.until(lambda: h.state(job) == "released")
    assert "reservation" not in h.flux.last(job, events.SELECT).explanation
    assert [arn for _, _, arn in h.vendor.creates] == [None]
    assert "qpu_reservation" not in h.flux.jobs[job].annotations


# --- recovery ---------------------------------------------------------------------------


def test_a_service_killed_after_the_create_is_replaced_and_the_admitted_job_released_on_the_same_task(  # noqa: E501
    ledger,
):
    h = WindowHarness(ledger, [window()])
    job = h.flux.submit(named())
    h.run(OPENS - LEAD - 1.0)
    h.clock.advance(1.0)
    h.service.tick()  # the create is sent; the service dies before it hears the answer
    assert len(h.vendor.tasks) == 1 and h.flux.decoded(job, events.SUBMIT)
    assert not h.flux.decoded(job, events.TASK)
    h2 = h.restart_site()
    h2.until(lambda: h2.state(job) == "released")
    assert len(h2.vendor.tasks) == 1  # the same token gave the same task
    (task,) = h2.vendor.tasks
    assert h2.flux.jobs[job].release["task"] == task
    info = ReleaseInfo.decode(h2.flux.jobs[job].release["info"])
    assert info.reservation is not None and info.reservation.arn == ARN
    assert h2.flux.last(job, events.READY).tasks[0]["why"].startswith("admitted: admitted into")
    no_arn_at_or_after_the_end(h2)


def test_a_restarted_service_counts_the_jobs_already_in_a_window(ledger):
    h = WindowHarness(ledger, [window(jobs=1)])
    first = h.flux.submit(named())
    h.until(lambda: h.state(first) == "released")
    h2 = h.restart_site()
    second = h2.flux.submit(named())
    h2.run(20.0)
    assert h2.state(second) == "held"
    assert h2.window_status()["active"] == [first]
    h2.flux.finish(first)
    h2.until(lambda: h2.state(second) == "released", limit=10.0)


# --- status and the ledger ------------------------------------------------------------


def test_status_lists_each_window_with_its_jobs_tasks_and_qpu_time(ledger):
    h = WindowHarness(ledger, [window(jobs=1)], queues={"alpha": QueueModel(0, service=20.0)})
    first = h.flux.submit(named())
    h.clock.advance(1.0)
    second = h.flux.submit(named())
    h.until(lambda: h.state(first) == "released")
    status = h.window_status()
    assert status["name"] == NAME and status["device"] == "alpha"
    assert status["state"] == "next"
    assert (status["start_at"], status["end_at"]) == (
        "1970-01-12T13:48:40Z",
        "1970-01-12T13:53:40Z",
    )
    assert (status["waiting"], status["active"], status["tasks"]) == ([second], [first], 1)
    assert status["cost"] == 1500.0
    # The task runs 20 s from the window's start; once it ended it is settled at nothing,
    # with its QPU seconds (seen RUNNING by the settlement's looks, every 2 s here).
    h.until(lambda: h.site.ledger.window_use(NAME)[1] > 0, limit=OPENS + 60.0)
    status = h.window_status()
    assert status["state"] == "now"
    assert status["tasks"] == 1
    assert 16.0 <= status["used_seconds"] <= 20.0
    assert status["utilisation"] == pytest.approx(status["used_seconds"] / LASTS, abs=1e-3)
    ((token, _, _),) = [(c[1], c[0], c[2]) for c in h.vendor.creates]
    row = h.site.ledger.record(token)
    assert row.cost == 0.0 and row.reservation == NAME
    assert row.share == pytest.approx(1500.0 * row.qpu_seconds / LASTS)
    with Ledger(ledger, readonly=True) as read:
        assert read.record(f"window:{ARN}").cost == 1500.0


def test_a_guest_sees_only_their_own_jobs_in_the_windows(ledger):
    h = WindowHarness(ledger, [window()])
    job = h.flux.submit(named())
    h.run(5.0)
    assert h.service.status(userid=OWNER)["reservations"][0]["waiting"] == [job]
    assert h.service.status(userid=OWNER + 1)["reservations"][0]["waiting"] == []
