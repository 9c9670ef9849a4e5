"""``flux quantum top``: a live terminal view of the QPU jobs, in the manner of ``flux top``.

Three panes under a summary: the devices (status, queue depth, forecast wait, jobs held
on each), the held jobs (device, state, queue position, the expected wait counting down,
how long held) and the recent releases and failures. It refreshes every ``--interval``
seconds from the handler service's ``status`` (through its supervisor, as ``flux
quantum service status`` asks: a guest sees only their own jobs, and the devices), and
today's spend from its ``usage`` (a guest's own); between refreshes the countdowns move
on the clock (from when the service first said it: a poll that says the same again
does not restart it). Keys: ``q`` quits, ``tab`` or ``1``/``2``/``3`` switch panes. Readable on
80 columns. This module only reads and draws: it never changes anything.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from flux_quantum.errors import CommandError

PANES = ("devices", "held jobs", "recent")
SPEND_EVERY = 10.0  # seconds between two asks for today's spend


@dataclass
class View:
    """What the screen shows: the last answers, when they came, the pane chosen."""

    name: str
    status: dict[str, Any] | None = None
    status_at: float = 0.0
    error: str | None = None
    spend: str = "-"
    pane: int = 0
    # Each task's expected wait, with since when it has said that (and its position):
    # a poll that says the same again does not restart its countdown.
    anchors: dict[tuple[int, int], tuple[float, float, Any]] = field(default_factory=dict)

    def countdown(self, unit: int, task: Mapping[str, Any], now: float) -> float | None:
        """The task's expected wait less the time since the service first said it."""
        wait = task.get("expected_wait")
        if wait is None:
            return None
        at = task.get("expected_at")
        at = float(at) if at is not None else self.status_at
        key, position = (unit, int(task.get("index", 0))), task.get("position")
        anchor = self.anchors.get(key)
        if anchor is not None and anchor[0] == wait and anchor[2] == position:
            at = min(at, anchor[1])
        self.anchors[key] = (float(wait), at, position)
        return max(0.0, float(wait) - (now - at))

    def switch(self, key: int) -> bool:
        """Apply a key; False: quit."""
        if key in (ord("q"), ord("Q")):
            return False
        if key == ord("\t"):
            self.pane = (self.pane + 1) % len(PANES)
        elif ord("1") <= key < ord("1") + len(PANES):
            self.pane = key - ord("1")
        return True


# --- drawing (pure: a view and a time in, lines out) ----------------------------------------


def duration(seconds: float | None) -> str:
    """``42s``, ``3m07s``, ``2h05m``, ``3d04h``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def jobid(value: int) -> str:
    try:
        from flux.job import JobID

        return str(JobID(value).f58plain)
    except (ImportError, OSError, AttributeError):
        return str(value)


def lines(view: View, now: float, width: int = 80, height: int = 24) -> list[str]:
    """The whole screen, each line at most ``width`` long."""
    out = _summary(view, now)
    tabs = "  ".join(
        f"[{i + 1}] {name.upper() if i == view.pane else name}" for i, name in enumerate(PANES)
    )
    out.append(f"{tabs}   tab/1-3 switch, q quit")
    out.append("-" * min(width, 80))
    body = [_devices, _held, _recent][view.pane](view, now)
    room = max(0, height - len(out) - 1)
    if len(body) > room:
        more = len(body) - room + 1
        body = [*body[: room - 1], f"... {more} more"]
    out += body
    return [line[:width] for line in out]


def _summary(view: View, now: float) -> list[str]:
    clock = datetime.fromtimestamp(now).strftime("%H:%M:%S")
    status = view.status
    if status is None or not status.get("running"):
        why = view.error or (status or {}).get("supervisor", {}).get("state") or "waiting"
        return [f"flux quantum top - {view.name}".ljust(71) + f" {clock}", why]
    units = status.get("units") or []
    head = (
        f"flux quantum top - {view.name} up {duration(status.get('uptime'))}, "
        f"pid {status.get('pid')}"
    )
    counters = status.get("counters")
    if counters is not None:
        done = f"released {counters.get('released', 0)}  failed {counters.get('failed', 0)}"
    else:
        recent = status.get("recent") or []
        released = sum(1 for r in recent if r.get("state") == "released")
        done = f"yours lately: released {released}  failed {len(recent) - released}"
    second = (
        f"held {status.get('jobs', 0)} jobs in {len(units)} units  {done}  spend today {view.spend}"
    )
    if view.error:
        second = f"(stale: {view.error})"
    return [head.ljust(71)[:71] + f" {clock}", second]


def _devices(view: View, now: float) -> list[str]:
    rows = (view.status or {}).get("devices") or []
    out = [f"{'DEVICE':<20} {'VENDOR':<8} {'STATUS':<12} {'QUEUE':>6} {'FORECAST':>9} {'HELD':>6}"]
    for row in sorted(rows, key=lambda r: str(r.get("device"))):
        depth = row.get("queue_depth")
        status = str(row.get("status") or "-")
        if status == "ONLINE" and not row.get("available", True):
            status = "OUT-WINDOW"
        out.append(
            f"{str(row.get('device'))[:20]:<20} {str(row.get('vendor'))[:8]:<8} "
            f"{status[:12]:<12} {'-' if depth is None else depth:>6} "
            f"{duration(row.get('forecast_wait')):>9} {row.get('held', 0):>6}"
        )
    if len(out) == 1:
        out.append("no device probed yet (the service probes a device when a job asks for it)")
    return out


def _held(view: View, now: float) -> list[str]:
    units = (view.status or {}).get("units") or []
    out = [
        f"{'JOBID':<14} {'DEVICE':<16} {'STATE':<12} {'POS':>5} {'WAIT':>8} {'HELD':>8}  REQUEST"
    ]
    rows = []
    for unit in units:
        jobs = unit.get("jobs") or []
        if not jobs:
            continue
        tasks = unit.get("tasks") or []
        waits = [w for w in (view.countdown(unit["unit"], t, now) for t in tasks) if w is not None]
        positions = [t["position"] for t in tasks if t.get("position") is not None]
        devices = sorted({t["device"] for t in tasks if t.get("device")})
        states = sorted({t.get("state") or t.get("phase") or "-" for t in tasks})
        name = jobid(jobs[0]) + (f"+{len(jobs) - 1}" if len(jobs) > 1 else "")
        wait = max(waits) if waits else None
        held = now - float(unit["t_submit"]) if unit.get("t_submit") else None
        rows.append(
            (
                wait if wait is not None else float("inf"),
                f"{name[:14]:<14} {','.join(devices)[:16] or '-':<16} "
                f"{','.join(states)[:12]:<12} "
                f"{max(positions) if positions else '-':>5} {duration(wait):>8} "
                f"{duration(held):>8}  {unit.get('request', '')}",
            )
        )
    out += [text for _, text in sorted(rows, key=lambda r: r[0])]
    if len(out) == 1:
        out.append("no job held")
    return out


def _recent(view: View, now: float) -> list[str]:
    recent = (view.status or {}).get("recent") or []
    out = [f"{'WHEN':<8} {'JOBID':<14} {'OUTCOME':<9} {'DEVICE':<16} {'HELD':>7}  NOTE"]
    for r in recent:
        jobs = r.get("jobs") or []
        name = (jobid(jobs[0]) + (f"+{len(jobs) - 1}" if len(jobs) > 1 else "")) if jobs else "-"
        at = float(r.get("at") or now)
        held = at - float(r["t_submit"]) if r.get("t_submit") else None
        out.append(
            f"{datetime.fromtimestamp(at).strftime('%H:%M:%S'):<8} {name[:14]:<14} "
            f"{str(r.get('state'))[:9]:<9} {str(r.get('device') or '-')[:16]:<16} "
            f"{duration(held):>7}  {r.get('note') or ''}"
        )
    if len(out) == 1:
        out.append("no job released or failed lately")
    return out


# --- reading ------------------------------------------------------------------------------


def fetch_status(view: View, handle: Any) -> None:
    from flux_quantum.cli.service import _status

    try:
        view.status = _status(view.name, handle)
        view.status_at = time.time()
        view.error = None
    except CommandError as exc:
        view.error = str(exc)


def fetch_spend(view: View) -> None:
    """Today's spend (settled and reserved), the caller's own for a guest."""
    from flux_quantum.cli.usage import ask_service
    from flux_quantum.site.ledger import UsageQuery

    midnight = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    try:
        answer = ask_service(UsageQuery(period="day", since=midnight, group_by=("period",)))
    except CommandError:
        view.spend = "-"  # no ledger (not a site's service), or not readable
        return
    if answer is None:
        view.spend = "-"
        return
    currency, rows = answer
    view.spend = f"{sum(float(r.get('total', 0.0)) for r in rows):.2f} {currency}"


# --- the terminal ----------------------------------------------------------------------------


def run(
    view: View,
    screen: Any,
    refresh: Callable[[], None],
    interval: float,
    clock: Callable[[], float] = time.time,
) -> None:
    """Draw and read keys until ``q``: fetch every ``interval``, redraw every second."""
    import curses

    with contextlib.suppress(curses.error):
        curses.curs_set(0)
    screen.timeout(250)
    due = 0.0
    while True:
        now = clock()
        if now >= due:
            refresh()
            due = now + interval
        height, width = screen.getmaxyx()
        screen.erase()
        for row, text in enumerate(lines(view, clock(), width - 1, height)):
            with contextlib.suppress(curses.error):
                screen.addstr(row, 0, text, curses.A_BOLD if row == 0 else curses.A_NORMAL)
        screen.refresh()
        key = screen.getch()
        if key != -1 and not view.switch(key):
            return


def cmd_top(args: argparse.Namespace) -> int:
    import curses
    import locale

    import flux

    if not args.interval > 0:
        raise CommandError(f"--interval must be a number of seconds > 0, got {args.interval:g}")
    locale.setlocale(locale.LC_ALL, "")
    handle = flux.Flux()
    view = View(args.name)
    spend_due = [0.0]

    def refresh() -> None:
        fetch_status(view, handle)
        if time.time() >= spend_due[0]:
            spend_due[0] = time.time() + SPEND_EVERY
            fetch_spend(view)

    curses.wrapper(lambda screen: run(view, screen, refresh, args.interval))
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "top",
        help="live view of QPU devices, held jobs and recent outcomes (q quits)",
        description=(
            "A live terminal view in the manner of flux top: devices with status, queue "
            "depth and forecast wait; held jobs with position and expected wait counting "
            "down; recent releases and failures; today's spend. Keys: q quit, tab or 1/2/3 "
            "switch panes. A guest sees their own jobs."
        ),
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (2)")
    p.add_argument("--name", default="qpu_handlers", help="service name (default qpu_handlers)")
    p.set_defaults(func=cmd_top)
