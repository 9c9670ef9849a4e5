"""Vendors' event feeds: heard in one worker each, and what an event may make the service do.

A vendor whose site routes its task state changes to a feed (Braket's events through an
SQS queue: ``Vendor.event_source``) has one listener here: one long read of the feed at a
time, in a worker, started again at the next tick. What an event may do is narrow, and
that is the rule this part owns: an event never changes what the service knows of a task
and never releases, fails or charges anything; it only makes the service poll the task
it names now, and that one GetQuantumTask is what acts (through ``Tracking``, as any
poll). The reasons: a queue is not authenticated like the vendor's API (anyone its
policy lets send may write to it), a FAILED or CANCELLED event alone would fail jobs,
and a COMPLETED task needs its read anyway (the charge, the result); the poll costs one
call per state change, where polling a task near its release point costs one every few
tenths of a second. So an event counts only when it names a task the service tracks
(others, and other accounts' tasks, are dropped and counted), is not a copy of one seen
(its id), and moves the task forward of what the last poll saw (states only move
forward: a late or repeated event is stale). An event that came while a poll was under
way asks for one more poll if that poll saw less. A device event makes the device's
next probe come now.

While a feed is heard, a task whose release point is RUNNING or its end is polled only
a little after that point is expected (then backing off), and at least every
``safety_poll`` seconds (``next_poll``): a safety net for an event lost. A feed
is lost when it cannot be read (the queue is gone, the credentials refused) or says
nothing for ``silence`` seconds while tasks are live: then the tasks are polled as
before, at once and on their adaptive schedule, which is said once at warning level;
that events come again is said once too. This part never calls a vendor but through
its source in a worker, and never blocks the reactor.
"""

from __future__ import annotations

import syslog
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.retry import Retries
from flux_quantum.service.state import Attempt, Phase, Program, Unit
from flux_quantum.vendors.base import TaskSnapshot, TaskState
from flux_quantum.vendors.task_events import EventBatch, EventSource, state_rank

# Event ids remembered to drop copies (at least once delivery), oldest forgotten first.
SEEN_IDS = 10_000
_WAITING = (TaskState.CREATED, TaskState.QUEUED)


@dataclass
class _Listener:
    """One vendor's feed and what the service knows of it."""

    vendor: str
    source: EventSource
    busy: bool = False
    due: float = 0.0
    heard: bool = False  # a read succeeded: events may stand in for polls
    lost: str | None = None  # why the feed counts as lost now ("error", "silence")
    quiet_since: float | None = None  # the last message, or when tasks became live
    live: int = 0  # its vendor's tasks being tracked, as last counted
    acknowledge: tuple[str, ...] = ()  # receipts of the last batch, handled
    retry: Retries = field(default_factory=Retries)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def listening(self) -> bool:
        return self.heard and self.lost is None


class VendorEvents:
    def __init__(
        self, ctx: ServiceContext, calls: AttemptCalls, probe_soon: Callable[[str], bool]
    ) -> None:
        self.ctx = ctx
        self.calls = calls
        self._probe_soon = probe_soon
        self._listeners: dict[str, _Listener] | None = None  # found at the first check
        self._seen: OrderedDict[str, None] = OrderedDict()
        # Tasks an event moved on while a poll of them was under way: the rank it said.
        self._wanted: dict[str, int] = {}
        self._count_due = 0.0

    # -- the listeners

    def listeners(self) -> dict[str, _Listener]:
        """Each catalog vendor's feed, asked once (a vendor that cannot be set up has
        none: its tasks fail through their own calls)."""
        if self._listeners is None:
            self._listeners = {}
            for name in self.ctx.catalog.vendors():
                try:
                    source = self.ctx.vendor(name).event_source()
                except Exception as exc:  # its tasks fail through their own calls
                    self.ctx.log(syslog.LOG_DEBUG, f"{name}: no event feed ({exc})")
                    continue
                if source is not None:
                    self._listeners[name] = _Listener(name, source)
        return self._listeners

    def check(self, now: float) -> None:
        """Each tick: count the live tasks (every ``scan_interval``), judge a silent
        feed lost, and start a read of each feed that has none under way."""
        listeners = self.listeners()
        if not listeners:
            return
        if now >= self._count_due:
            self._count_due = now + self.ctx.options.scan_interval
            live = Counter(a.task.vendor for a in self._tracked_attempts() if a.task)
            for listener in listeners.values():
                listener.live = live[listener.vendor]
                if not listener.live:
                    listener.quiet_since = None
                elif listener.quiet_since is None:
                    listener.quiet_since = now
        for listener in listeners.values():
            source = listener.source
            quiet = listener.quiet_since
            if listener.listening and quiet is not None and now - quiet > source.silence:
                self._lose(
                    listener,
                    "silence",
                    f"no event for {now - quiet:.0f}s while {listener.live} task(s) are live",
                    now,
                )
            if not listener.busy and now >= listener.due:
                self._read(listener)

    def _read(self, listener: _Listener) -> None:
        listener.busy = True
        acknowledge, listener.acknowledge = listener.acknowledge, ()
        source = listener.source

        def done(batch: Any, error: BaseException | None) -> None:
            listener.busy = False
            now = self.ctx.clock()
            if error is not None:
                self._failed(listener, error, now)
                return
            self._heard(listener, batch, now)

        self.ctx.workers.submit(lambda: source.receive(acknowledge), done)

    def _failed(self, listener: _Listener, error: BaseException, now: float) -> None:
        decision = self.ctx.retry.failed(listener.retry, retryable=True)
        listener.due = now + decision.delay
        listener.counts["read_errors"] += 1
        text = f"{type(error).__name__}: {error}"
        if listener.lost is None:
            self._lose(listener, "error", f"cannot read it ({text})", now)
        else:
            self.ctx.log(syslog.LOG_DEBUG, f"{listener.source.name}: still unreadable: {text}")

    def _lose(self, listener: _Listener, kind: str, why: str, now: float) -> None:
        """The feed counts as lost: said once, and every task of its vendor polled now
        and on its adaptive schedule from then on."""
        listener.lost = kind
        listener.counts["lost"] += 1
        self.ctx.log(
            syslog.LOG_WARNING,
            f"{listener.source.name}: {why}; polling {listener.vendor} tasks as before "
            "until events come again",
        )
        for unit, program in self._tracked():
            attempt = program.attempt
            if attempt.task is not None and attempt.task.vendor == listener.vendor:
                self._poll_now(unit, program, now)

    def _heard(self, listener: _Listener, batch: EventBatch, now: float) -> None:
        listener.retry.clear()
        listener.due = now + self.ctx.options.tick  # the next read at the next tick
        listener.acknowledge = batch.receipts
        counts = listener.counts
        counts["reads"] += 1
        counts["messages"] += batch.messages
        counts["unreadable"] += batch.unreadable
        counts["unacknowledged"] += batch.unacknowledged
        came = batch.messages > 0
        if came:
            listener.quiet_since = now
        lost = listener.lost
        if not listener.heard or lost == "error" or (lost == "silence" and came):
            listener.heard, listener.lost = True, None
            listener.quiet_since = now if listener.live else None
            what = "events come again" if lost else f"listening for {listener.vendor} tasks"
            self.ctx.log(
                syslog.LOG_INFO,
                f"{listener.source.name}: {what}; its tasks are polled every "
                f"{listener.source.safety_poll:g}s while it is heard",
            )
        if batch.tasks:
            self._task_events(listener, batch, now)
        for event in batch.devices:
            if self._copy(event.event_id):
                counts["duplicate"] += 1
                continue
            device = self.ctx.catalog.get(event.device_id)
            counts["device_events"] += 1
            if device is not None and self._probe_soon(device.name):
                counts["probes_asked"] += 1

    # -- what an event may do

    def _task_events(self, listener: _Listener, batch: EventBatch, now: float) -> None:
        counts = listener.counts
        riders: dict[str, list[tuple[Unit, Program]]] = {}
        for unit, program in self._tracked():
            task = program.attempt.task
            if task is not None:
                riders.setdefault(task.task_id, []).append((unit, program))
        for event in batch.tasks:
            if self._copy(event.event_id):
                counts["duplicate"] += 1
                continue
            tracked = riders.get(event.task_id)
            if not tracked:
                counts["unknown"] += 1  # not ours, or no longer tracked: never polled
                continue
            rank = state_rank(event.state)
            moved = False
            for unit, program in tracked:
                attempt = program.attempt
                if rank <= _seen_rank(attempt):
                    continue
                moved = True
                if attempt.busy:
                    # The poll under way may have left before the change.
                    self._wanted[event.task_id] = max(rank, self._wanted.get(event.task_id, 0))
                else:
                    self._poll_now(unit, program, now)
            counts["used" if moved else "stale"] += 1

    def _poll_now(self, unit: Unit, program: Program, now: float) -> None:
        attempt = program.attempt
        if attempt.busy or attempt.phase is not Phase.TRACK:
            return
        attempt.due = min(attempt.due, now)
        self.calls.completed(unit, program)

    def next_poll(
        self, attempt: Attempt, release_at: int | str, snap: TaskSnapshot, delay: float
    ) -> float:
        """When to poll ``snap``'s task again (its attempt's ``expected_wait`` just
        set by this poll), ``delay`` being the adaptive plan: at once (the shortest
        interval) if an event said more than this poll saw. While its feed is heard and
        the release point is the task's start or end (a queue position still needs the
        polls that see it): a little after the release point is expected, or once
        overdue after as long again as the task has been in its state; within the feed's
        safety interval, and never sooner than the plan."""
        task = snap.task
        wanted = self._wanted.pop(task.task_id, None)
        if wanted is not None and state_rank(snap.state) < wanted:
            return min(delay, self.ctx.schedule.min_interval)
        listener = (self._listeners or {}).get(task.vendor)
        if listener is None or not listener.listening:
            return delay
        if snap.state in _WAITING and isinstance(release_at, int):
            return delay
        grace = 2 * self.ctx.schedule.min_interval
        expected = attempt.expected_wait
        if expected is not None and expected > 0:
            # When the release point should have come, and a little more: an event on
            # time makes this poll moot, a lost one costs about that much lag.
            target = expected + max(grace, 0.1 * expected)
        else:
            # Overdue (or unknown): again after as long as the task has been in its
            # state, so a lost event costs about as long again as the task took.
            since = attempt.running_seen if snap.state is TaskState.RUNNING else attempt.queued_at
            target = max(grace, snap.t - since if since is not None else 0.0)
        return max(delay, min(listener.source.safety_poll, target))

    # -- helpers

    def _copy(self, event_id: str) -> bool:
        """Whether ``event_id`` was seen (at least once delivery); remembers it."""
        if event_id in self._seen:
            return True
        self._seen[event_id] = None
        if len(self._seen) > SEEN_IDS:
            self._seen.popitem(last=False)
        return False

    def _tracked(self) -> list[tuple[Unit, Program]]:
        """Every program whose attempt's task is being polled (TRACK)."""
        return [
            (unit, program)
            for unit in self.ctx.units
            if unit.active
            for program in unit.programs
            if program.attempt.phase is Phase.TRACK
        ]

    def _tracked_attempts(self) -> list[Attempt]:
        return [program.attempt for _, program in self._tracked()]

    def status(self) -> dict[str, Any] | None:
        """Each feed: heard or lost, and what its events did (None: no feed)."""
        if not self._listeners:
            return None
        return {
            name: {
                "source": listener.source.name,
                "state": "lost"
                if listener.lost
                else ("listening" if listener.heard else "starting"),
                "lost": listener.lost,
                "live_tasks": listener.live,
                "safety_poll": listener.source.safety_poll,
                "counts": dict(sorted(listener.counts.items())),
            }
            for name, listener in self._listeners.items()
        }


def _seen_rank(attempt: Attempt) -> int:
    """How far along the attempt's task was at its last poll (a task not polled yet was
    just created: CREATED)."""
    snap = attempt.snapshot
    return state_rank(snap.state if snap is not None else TaskState.CREATED)
