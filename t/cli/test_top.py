"""Unit tier: ``flux quantum top``'s screen, drawn from the handler service's real status
(the service on its fakes of the outside world): the panes, the countdown, the keys,
80 columns."""

from __future__ import annotations

from service_fakes import Harness

from flux_quantum.cli.top import PANES, View, duration, lines
from flux_quantum.protocol import events


def _view(h: Harness, userid: int | None = None) -> View:
    status = {"running": True, "pid": 42, **h.service.status(userid)}
    return View("qpu_handlers", status=status, status_at=h.clock(), spend="1.30 USD")


def test_durations_read_like_flux_top():
    assert [duration(s) for s in (None, 4.7, 187, 7500, 277200)] == [
        "-",
        "4s",
        "3m07s",
        "2h05m",
        "3d05h",
    ]


def test_the_three_panes_on_80_columns_and_the_keys():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.TASK in h.flux.names(job))
    h.run(2)
    view = _view(h)
    now = h.clock()
    screen = lines(view, now)
    assert all(len(line) <= 80 for line in screen) and len(screen) <= 24
    assert screen[0].startswith("flux quantum top - qpu_handlers up ")
    assert "held 1 jobs in 1 units" in screen[1] and "spend today 1.30 USD" in screen[1]
    assert "[1] DEVICES" in screen[2]
    alpha = next(line for line in screen if line.startswith("alpha"))
    assert "local" in alpha and "ONLINE" in alpha
    assert view.switch(ord("\t")) and view.pane == 1
    held = lines(view, now)
    assert "[2] HELD JOBS" in held[2]
    row = next(line for line in held[4:] if "alpha" in line)
    assert "queued" in row.lower()
    # The expected wait counts down on the clock between two answers, and an answer
    # that says the same again (the queue did not move) does not restart it.
    unit = view.status["units"][0]
    task = unit["tasks"][0]
    first = view.countdown(unit["unit"], task, now)
    assert first is not None and first > 5
    assert view.countdown(unit["unit"], task, now + 5) == first - 5
    h.run(3)
    again = _view(h).status["units"][0]["tasks"][0]
    assert again["expected_at"] > task["expected_at"]
    assert view.countdown(unit["unit"], again, now + 5) == first - 5
    assert view.switch(ord("3")) and view.pane == 2
    assert "[3] RECENT" in lines(view, now)[2]
    assert view.switch(ord("1")) and view.pane == 0
    assert not view.switch(ord("q"))
    assert len(PANES) == 3


def test_recent_outcomes_and_a_guest_sees_only_their_own():
    h = Harness()
    mine = h.flux.submit({"device": "local:alpha", "release_at": 1}, userid=5001)
    other = h.flux.submit({"device": "local:alpha", "release_at": 1}, userid=5002)
    h.until(lambda: h.state(mine) == "released" and h.state(other) == "released")
    view = _view(h, 5001)
    view.pane = 2
    screen = lines(view, h.clock())
    rows = [line for line in screen[4:] if "released" in line]
    assert len(rows) == 1 and "alpha" in rows[0]
    assert "yours lately: released 1" in screen[1]


def test_a_service_not_running_says_so():
    view = View("qpu_handlers", error="the qpu handler service 'qpu_handlers' is not running")
    screen = lines(view, 0.0)
    assert "is not running" in screen[1]
    assert "no device probed yet" in "\n".join(screen)
