"""The queue of one emulated device: background load, our tasks, availability, as time passes.

This module owns the queueing model: a FIFO single-server queue per device, fed by an initial
depth and a seeded Poisson stream of background tasks, served with seeded service times, that
pauses while the device is offline or outside its availability window. Its state is a pure
function of the emulated time and of the creates and cancels applied to it; it advances only
forward, in O(events). It must never read a clock, sleep or do I/O: callers pass the time in.

Dedicated use (IBM's dedicated sessions): tasks of a ``Dedication`` wait their turn until
the first of them starts; from then on the device is the dedication's (no other task starts)
and each later task of it starts as soon as the device is free, ahead of everything waiting,
until none of its tasks has been waiting or running for ``idle_timeout`` seconds (IBM's
interactive TTL), ``max_time`` after its first start, or ``release``. A later task after
that waits its turn again, and its start makes the device the dedication's once more.

Priority use (a Braket hybrid job's tasks): a task submitted with ``priority`` goes ahead
of every public task waiting, behind the priority tasks before it; it does not stop the
task running, and the device is not held for it between tasks.

Reserved use (Braket Direct): a ``Window`` books the device for ``[start, end)``. Its tasks
never join the public queue (they have no position and no queue size counts them): they wait
until the window opens, then run one at a time, first come first served, ahead of
everything. From its start to its end the device starts nothing else: the public queue
(background load and our other tasks) only grows, and no public task starts unless it would
end by the next window's start (its service time is drawn ahead for that check, from the same
stream, so the public queue's draws are the same with or without windows). At the end the
window's tasks still waiting are cancelled; one running then runs to completion. A window is
not a ``Dedication``: a dedication holds the device from its first task's start until idle,
and its tasks wait their turn in the public queue; a window holds it for fixed times whatever
runs, and its tasks are never in that queue. Both are decided at the one place the device
picks what starts next.
"""

from __future__ import annotations

import copy
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from flux_quantum.emulator.scenario import Availability as Windows
from flux_quantum.emulator.scenario import OfflinePeriod, QueueSpec

INF = math.inf


class QueuedDevice(Protocol):
    """What the queue reads of a device: Braket's ``DeviceSpec``, or the other sides'
    ``scenario.DeviceQueueSpec``. ``arn`` is its key (it seeds the queue's draws)."""

    @property
    def arn(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> QueueSpec: ...

    @property
    def status(self) -> str: ...

    @property
    def status_reason(self) -> str | None: ...

    @property
    def availability(self) -> Windows | None: ...

    @property
    def offline(self) -> tuple[OfflinePeriod, ...]: ...


# Background tasks waiting between two of ours are kept as one count, so a queue of
# thousands costs one deque entry; our tasks are their task id (a str).
_Entry = int | str


@dataclass(frozen=True)
class DeviceStatus:
    """What GetDevice reports about availability at one instant."""

    status: str
    reason: str | None = None
    started_at: float | None = None
    estimated_end_at: float | None = None


@dataclass(frozen=True)
class TaskTimeline:
    """When one of our tasks was created, became next to run, started and ended (emulated
    seconds; None: not yet). The truth a benchmark measures release lags against."""

    created: float
    front: float | None
    started: float | None
    ended: float | None
    cancelled: float | None = None  # when it became CANCELLED without having run


@dataclass(frozen=True)
class TaskProgress:
    """Where one of our tasks stands at one instant."""

    status: str  # QUEUED, RUNNING, COMPLETED, FAILED, CANCELLING, CANCELLED
    position: int | None  # 1 = next to run; None unless QUEUED
    started_at: float | None
    ended_at: float | None


@dataclass(frozen=True)
class Dedication:
    """Tasks that hold the device for themselves once the first of them starts (an IBM
    dedicated session): ``name`` tells them apart, ``idle_timeout`` is how long the device
    waits for the next of them, ``max_time`` how long after its first start it may hold it."""

    name: str
    idle_timeout: float
    max_time: float = INF


@dataclass(frozen=True)
class Window:
    """The device booked for ``[start, end)`` (emulated seconds) by reservation ``name``
    (Braket Direct): only the tasks submitted with it start in it."""

    name: str
    start: float
    end: float


class _Timing:
    """Mutable schedule of one of our tasks inside a DeviceQueue."""

    __slots__ = (
        "cancel_requested", "cancelled_at", "created", "dedication", "end", "extra", "fails",
        "front", "start", "vendor_cancels", "window",
    )  # fmt: skip

    def __init__(
        self,
        extra: float,
        fails: bool,
        created: float,
        dedication: Dedication | None = None,
        vendor_cancels: bool = False,
        window: str | None = None,
    ) -> None:
        self.extra = extra
        self.fails = fails
        self.vendor_cancels = vendor_cancels
        self.created = created
        self.dedication = dedication
        self.window = window  # the reservation it runs in (None: the public queue)
        self.front: float | None = None  # when it first was next to run (position 1)
        self.start: float | None = None
        self.end: float | None = None
        self.cancelled_at: float | None = None
        self.cancel_requested = False


class Availability:
    """When a device can serve tasks, from its static status, windows and offline periods."""

    def __init__(self, spec: QueuedDevice) -> None:
        self.spec = spec

    def status_at(self, t: float) -> DeviceStatus:
        spec = self.spec
        if spec.status != "ONLINE":
            return DeviceStatus(spec.status, spec.status_reason)
        for period in spec.offline:
            if period.start <= t < period.end:
                end = period.end if period.end != INF else None
                return DeviceStatus("OFFLINE", period.reason, period.start, end)
        window_start = self._window_start_at_or_after(t)
        if window_start != t:
            end = window_start if window_start != INF else None
            return DeviceStatus("OFFLINE", "OUTSIDE_AVAILABILITY_WINDOW", None, end)
        return DeviceStatus("ONLINE")

    def accepts_tasks_at(self, t: float) -> str | None:
        """None when a create is accepted at ``t``, else the Braket error code to answer."""
        spec = self.spec
        if spec.status == "RETIRED":
            return "DeviceRetiredException"
        if spec.status != "ONLINE":
            return "DeviceOfflineException"
        for period in spec.offline:
            if period.start <= t < period.end and not period.accept_tasks:
                return "DeviceOfflineException"
        return None

    def next_online(self, t: float) -> float:
        """The earliest time >= ``t`` at which the device can start a task (INF if never)."""
        if self.spec.status != "ONLINE":
            return INF
        candidate = t
        # Offline periods and windows can push each other forward; a few rounds settle it.
        for _ in range(4 * (len(self.spec.offline) + 2)):
            moved = False
            for period in self.spec.offline:
                if period.start <= candidate < period.end:
                    candidate = period.end
                    moved = True
            window_start = self._window_start_at_or_after(candidate)
            if window_start != candidate:
                candidate = window_start
                moved = True
            if not moved or candidate == INF:
                return candidate
        return INF

    def _window_start_at_or_after(self, t: float) -> float:
        """``t`` if inside an availability window, else when the next one opens (INF: never)."""
        availability = self.spec.availability
        if availability is None or t == INF:
            return t
        period = availability.period
        if period <= 0:
            for start, end in availability.windows:
                if t < end:
                    return max(t, start)
            return INF
        base = math.floor(t / period) * period
        phase = t - base
        for start, end in availability.windows:
            if phase < end:
                return max(t, base + start)
        return base + period + availability.windows[0][0]


class DeviceQueue:
    """FIFO single-server queue of one device; call ``advance(t)`` before reading at ``t``."""

    def __init__(self, spec: QueuedDevice, seed: int) -> None:
        self.spec = spec
        self.availability = Availability(spec)
        self.t = 0.0
        self._arrival_rng = random.Random(f"{seed}:{spec.arn}:arrivals")
        self._service_rng = random.Random(f"{seed}:{spec.arn}:service")
        self._reserved_rng = random.Random(f"{seed}:{spec.arn}:reserved")
        # At t=0 the device is busy with one task and `depth` more are waiting.
        initial = spec.queue.depth + 1 if spec.queue.depth > 0 else 0
        self._waiting: deque[_Entry] = deque([initial] if initial else [])
        self._waiting_count = initial
        self._priority = 0  # priority tasks at the head of ``_waiting``
        self._running: _Entry | None = None  # 0 for a background task, else our task id
        self._running_end = INF
        self._next_arrival = self._draw_arrival(0.0)
        self._tasks: dict[str, _Timing] = {}
        # The dedication holding the device (None: first come, first served), since when
        # none of its tasks waits or runs (None: one does), and each one's first start.
        self._held: Dedication | None = None
        self._held_idle: float | None = None
        self._first_start: dict[str, float] = {}
        # Reservations: every window by name, those not yet closed by start, each one's
        # waiting tasks, and the public queue's next service time once drawn ahead.
        self._reservations: dict[str, Window] = {}
        self._open: list[Window] = []
        self._reserved: dict[str, deque[str]] = {}
        self._peeked: float | None = None
        self.advance(0.0)

    # -- time -------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Play every arrival, start, completion and window's end up to and including ``t``."""
        while True:
            start, entry = self._next_start()
            release = self._held_until()
            closing = self._open[0].end if self._open else INF
            event = min(self._running_end, self._next_arrival, start, release, closing)
            if event > t:
                break
            self.t = event
            if event == self._running_end:
                self._finish_running()
            elif event == self._next_arrival:
                self._push(1)
                self._next_arrival = self._draw_arrival(event)
            elif event == closing:
                self._close_window()
            elif event == start:
                if entry is not None and self._tasks[entry].window is not None:
                    self._start_reserved(entry)
                else:
                    self._start_next(entry)
            else:
                self._held = self._held_idle = None
        self.t = max(self.t, t)

    # -- reservations -----------------------------------------------------------------------

    def reserve(self, window: Window, t: float) -> None:
        """Book ``window`` at ``t`` (advances to ``t`` first). ValueError if its name is
        taken, it has ended by ``t`` or it overlaps another window of this device. One that
        began before ``t`` holds the device from ``t`` (a task running then finishes)."""
        self.advance(t)
        if window.name in self._reservations:
            raise ValueError(f"reservation {window.name} is already booked on {self.spec.name}")
        if not window.start < window.end or window.end <= self.t:
            raise ValueError(
                f"reservation {window.name} [{window.start:g}, {window.end:g}) has no time "
                f"left after {self.t:g}"
            )
        for other in self._reservations.values():
            if window.start < other.end and other.start < window.end:
                raise ValueError(
                    f"reservation {window.name} [{window.start:g}, {window.end:g}) overlaps "
                    f"{other.name} [{other.start:g}, {other.end:g}) on {self.spec.name}"
                )
        self._reservations[window.name] = window
        self._reserved[window.name] = deque()
        self._open = sorted([*self._open, window], key=lambda w: w.start)
        self.advance(t)

    def window_at(self, t: float) -> str | None:
        """The name of the window the device is booked for at ``t``, if one is open."""
        self.advance(t)
        for window in self._open:
            if window.start <= t < window.end:
                return window.name
        return None

    # -- our tasks --------------------------------------------------------------------------

    def submit(
        self,
        task_id: str,
        t: float,
        shots: int,
        fails: bool = False,
        dedication: Dedication | None = None,
        vendor_cancels: bool = False,
        window: str | None = None,
        priority: bool = False,
    ) -> None:
        """Queue our task at time ``t`` (advances to ``t`` first); one of ``dedication``'s
        tasks starts ahead of the others while the dedication holds the device; a
        ``priority`` one ahead of every public task waiting (a hybrid job's). With
        ``vendor_cancels`` the vendor cancels it when it would start: it ends CANCELLED
        (after the cancel latency) without running, and the device moves on. With
        ``window`` (a reserved window's name, not yet ended: ValueError otherwise) it waits
        for that window, not in the public queue."""
        self.advance(t)
        if window is not None and not any(w.name == window for w in self._open):
            raise ValueError(f"reservation {window} is not open on {self.spec.name} at {t:g}")
        extra = shots * self.spec.queue.shot_time
        self._tasks[task_id] = _Timing(
            extra,
            fails,
            created=t,
            dedication=dedication,
            vendor_cancels=vendor_cancels,
            window=window,
        )
        if window is not None:
            self._reserved[window].append(task_id)
        elif priority:
            self._waiting.insert(self._priority, task_id)
            self._priority += 1
            self._waiting_count += 1
            self._mark_front()
        else:
            self._push(task_id)
        self.advance(t)  # an idle device starts it at once

    def refuse(self, task_id: str, t: float) -> None:
        """Record our task as failed at ``t`` without queueing it: the vendor refused its
        program when it validated it (it never waits, runs or blocks another task)."""
        self.advance(t)
        timing = _Timing(0.0, True, created=t)
        timing.end = t
        self._tasks[task_id] = timing

    def release(self, name: str, t: float) -> None:
        """Dedication ``name`` gives the device back at ``t`` (its session was closed)."""
        self.advance(t)
        if self._held is not None and self._held.name == name:
            self._held = self._held_idle = None
        self.advance(t)

    def held_by(self, t: float) -> str | None:
        """The name of the dedication holding the device at ``t``, if one does."""
        self.advance(t)
        return self._held.name if self._held is not None else None

    def cancel(self, task_id: str, t: float) -> str:
        """Cancel our task at ``t``; returns the cancellationStatus to answer."""
        self.advance(t)
        timing = self._tasks[task_id]
        progress = self.progress(task_id, t)
        if progress.status in ("CANCELLING", "CANCELLED"):
            return progress.status
        if progress.status == "RUNNING":
            timing.cancel_requested = True  # the device finishes it, the result is dropped
            return "CANCELLING"
        if timing.window is not None:
            self._reserved[timing.window].remove(task_id)
        else:
            self._remove(task_id)
        timing.cancelled_at = t
        return "CANCELLING" if self.spec.queue.cancel_latency > 0 else "CANCELLED"

    def fail(self, task_id: str) -> None:
        """Our task ends FAILED rather than COMPLETED (its program failed to run); its
        timing is unchanged."""
        self._tasks[task_id].fails = True

    def progress(self, task_id: str, t: float) -> TaskProgress:
        """The state of our task at ``t`` (advances to ``t`` first)."""
        self.advance(t)
        timing = self._tasks[task_id]
        if timing.cancelled_at is not None:
            done = timing.cancelled_at + self.spec.queue.cancel_latency
            if t < done:
                return TaskProgress("CANCELLING", None, None, None)
            return TaskProgress("CANCELLED", None, None, done)
        if timing.end is not None and timing.end <= t:
            if timing.cancel_requested:
                status = "CANCELLED"
            else:
                status = "FAILED" if timing.fails else "COMPLETED"
            return TaskProgress(status, None, timing.start, timing.end)
        if timing.start is not None:
            status = "CANCELLING" if timing.cancel_requested else "RUNNING"
            return TaskProgress(status, None, timing.start, None)
        position = self._position(task_id) if timing.window is None else None
        return TaskProgress("QUEUED", position, None, None)

    def timeline(self, task_id: str, t: float) -> TaskTimeline:
        """The milestones of our task up to ``t`` (advances to ``t`` first)."""
        self.advance(t)
        timing = self._tasks[task_id]
        ended = timing.end if timing.end is not None and timing.end <= t else None
        front = timing.front if timing.front is not None else timing.start
        cancelled = self._cancelled(timing)
        cancelled = cancelled if cancelled is not None and cancelled <= t else None
        return TaskTimeline(timing.created, front, timing.start, ended, cancelled)

    def forecast(self, task_id: str, t: float, horizon: float = 30 * 86400.0) -> TaskTimeline:
        """The milestones our task will reach if, from ``t`` on, nothing but the background
        changes the queue (no create or cancel of ours, no new window): a copy is played
        forward until it ends or is cancelled (at most ``horizon`` seconds); this queue is
        not advanced past ``t``. What a benchmark needs to run the clock fast through a
        wait and slow at its end. A task a window's end will cancel has ``cancelled`` set,
        ``started`` and ``ended`` None."""
        self.advance(t)
        ahead = copy.deepcopy(self)
        step = 60.0
        timing = ahead._tasks[task_id]
        while timing.end is None and timing.cancelled_at is None and ahead.t < t + horizon:
            ahead.advance(ahead.t + step)
            step *= 2
        front = timing.front if timing.front is not None else timing.start
        return TaskTimeline(
            timing.created, front, timing.start, timing.end, self._cancelled(timing)
        )

    # -- the device -------------------------------------------------------------------------

    def queue_size(self, t: float) -> int:
        """Tasks waiting (not running) at ``t``, background and ours."""
        self.advance(t)
        return self._waiting_count

    def priority_size(self, t: float) -> int:
        """Of those, the priority tasks (a hybrid job's) at the head."""
        self.advance(t)
        return self._priority

    def status(self, t: float) -> DeviceStatus:
        return self.availability.status_at(t)

    # -- internals --------------------------------------------------------------------------

    def _draw_arrival(self, after: float) -> float:
        rate = self.spec.queue.arrival_rate
        return after + self._arrival_rng.expovariate(rate) if rate > 0 else INF

    def _draw_service(self, rng: random.Random) -> float:
        mean = self.spec.queue.service_time
        kind = self.spec.queue.distribution
        if mean <= 0 or kind == "fixed":
            return mean
        if kind == "exponential":
            return rng.expovariate(1.0 / mean)
        return rng.uniform(0.5 * mean, 1.5 * mean)

    def _cancelled(self, timing: _Timing) -> float | None:
        """When a task cancelled before it ran becomes CANCELLED (None: it was not)."""
        if timing.cancelled_at is None:
            return None
        return timing.cancelled_at + self.spec.queue.cancel_latency

    def _next_start(self) -> tuple[float, str | None]:
        """When the device next starts a task if nothing arrives, ends or closes first, and
        which: a window's task or a dedication's (their id), or None: the public head."""
        if self._running is not None:
            return INF, None
        best, entry = INF, None
        for window in self._open:
            waiting = self._reserved[window.name]
            if waiting:
                at = self.availability.next_online(max(self.t, window.start))
                if at < window.end and at < best:
                    best, entry = at, waiting[0]
        jumper = self._dedicated_waiting()
        if self._waiting and (self._held is None or jumper):
            at = self._public_start(jumper)
            if at < best:
                best, entry = at, jumper
        return best, entry

    def _public_start(self, jumper: str | None) -> float:
        """The earliest time the public queue's next task (or ``jumper``) can start: the
        device online, outside every window, and done before the next window opens."""
        at = self.availability.next_online(self.t)
        for window in self._open:  # by start; they do not overlap
            if at == INF:
                break
            if window.end <= at:
                continue
            if at < window.start and at + self._public_duration(jumper) <= window.start:
                break
            at = self.availability.next_online(window.end)
        return at

    def _public_duration(self, jumper: str | None) -> float:
        """How long the public queue's next task (or ``jumper``) will run, its service time
        drawn now and kept for its start."""
        entry = jumper if jumper is not None else self._waiting[0]
        if isinstance(entry, str) and self._tasks[entry].vendor_cancels:
            return 0.0
        if self._peeked is None:
            self._peeked = self._draw_service(self._service_rng)
        return self._peeked + (self._tasks[entry].extra if isinstance(entry, str) else 0.0)

    def _start_reserved(self, task_id: str) -> None:
        """Start the first waiting task of its window (one the vendor cancels ends here)."""
        timing = self._tasks[task_id]
        assert timing.window is not None
        self._reserved[timing.window].popleft()
        if timing.vendor_cancels:
            timing.cancelled_at = self.t
            return
        service = self._draw_service(self._reserved_rng) + timing.extra
        timing.start = self.t
        timing.end = self.t + service
        self._running = task_id
        self._running_end = timing.end

    def _close_window(self) -> None:
        """The first open window ends now: its tasks still waiting are cancelled."""
        window = self._open.pop(0)
        waiting = self._reserved[window.name]
        for task_id in waiting:
            self._tasks[task_id].cancelled_at = self.t
        waiting.clear()

    def _push(self, entry: _Entry) -> None:
        if isinstance(entry, int) and self._waiting and isinstance(self._waiting[-1], int):
            self._waiting[-1] += entry
        else:
            self._waiting.append(entry)
        self._waiting_count += entry if isinstance(entry, int) else 1
        self._mark_front()

    def _start_next(self, jumper: str | None) -> None:
        """Start the head of the queue, or ``jumper`` (a task of the dedication holding
        the device) ahead of it; one the vendor cancels ends there, without running."""
        if jumper is not None:
            self._remove(jumper)
            entry: _Entry = jumper
        else:
            entry = self._waiting[0]
            if isinstance(entry, int) and entry > 1:
                self._waiting[0] = entry - 1
            else:
                self._waiting.popleft()
                if self._priority:
                    self._priority -= 1
            self._waiting_count -= 1
            self._mark_front()
        if isinstance(entry, str) and self._tasks[entry].vendor_cancels:
            self._tasks[entry].cancelled_at = self.t
            return
        service = (
            self._peeked if self._peeked is not None else self._draw_service(self._service_rng)
        )
        self._peeked = None
        if isinstance(entry, int):
            self._running = 0
        else:
            timing = self._tasks[entry]
            service += timing.extra
            timing.start = self.t
            timing.end = self.t + service
            self._running = entry
            dedication = timing.dedication
            if dedication is not None:  # the device is the dedication's from now on
                first = self._first_start.setdefault(dedication.name, self.t)
                if self.t < first + dedication.max_time:
                    self._held, self._held_idle = dedication, None
        self._running_end = self.t + service

    def _finish_running(self) -> None:
        ended = self._running
        self._running = None
        self._running_end = INF
        held = self._held
        if held is not None and isinstance(ended, str) and self._dedicated_waiting() is None:
            timing = self._tasks[ended]
            if timing.dedication is not None and timing.dedication.name == held.name:
                self._held_idle = self.t  # the idle timeout runs from here

    def _dedicated_waiting(self) -> str | None:
        """The first waiting task of the dedication holding the device, if any."""
        held = self._held
        if held is None:
            return None
        for entry in self._waiting:
            if isinstance(entry, str):
                dedication = self._tasks[entry].dedication
                if dedication is not None and dedication.name == held.name:
                    return entry
        return None

    def _held_until(self) -> float:
        """When the dedication holding the device gives it back (INF: none holds it, or
        not before one of its tasks ends)."""
        held = self._held
        if held is None:
            return INF
        until = self._first_start[held.name] + held.max_time
        if self._held_idle is not None:
            until = min(until, self._held_idle + held.idle_timeout)
        return until

    def _remove(self, task_id: str) -> None:
        index = self._waiting.index(task_id)
        del self._waiting[index]
        self._waiting_count -= 1
        if index < self._priority:
            self._priority -= 1
        # Merge the background counts that were on either side of the removed task.
        if 0 < index < len(self._waiting):
            before, after = self._waiting[index - 1], self._waiting[index]
            if isinstance(before, int) and isinstance(after, int):
                self._waiting[index - 1] = before + after
                del self._waiting[index]
        self._mark_front()

    def _mark_front(self) -> None:
        head = self._waiting[0] if self._waiting else None
        if isinstance(head, str) and self._tasks[head].front is None:
            self._tasks[head].front = self.t

    def _position(self, task_id: str) -> int:
        ahead = 0
        for entry in self._waiting:
            if entry == task_id:
                return ahead + 1
            ahead += entry if isinstance(entry, int) else 1
        raise KeyError(task_id)
