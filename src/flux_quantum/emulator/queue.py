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
"""

from __future__ import annotations

import copy
import math
import random
from collections import deque
from dataclasses import dataclass

from flux_quantum.emulator.scenario import DeviceSpec

INF = math.inf
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


class _Timing:
    """Mutable schedule of one of our tasks inside a DeviceQueue."""

    __slots__ = (
        "cancel_requested", "cancelled_at", "created", "dedication", "end", "extra", "fails",
        "front", "start", "vendor_cancels",
    )  # fmt: skip

    def __init__(
        self,
        extra: float,
        fails: bool,
        created: float,
        dedication: Dedication | None = None,
        vendor_cancels: bool = False,
    ) -> None:
        self.extra = extra
        self.fails = fails
        self.vendor_cancels = vendor_cancels
        self.created = created
        self.dedication = dedication
        self.front: float | None = None  # when it first was next to run (position 1)
        self.start: float | None = None
        self.end: float | None = None
        self.cancelled_at: float | None = None
        self.cancel_requested = False


class Availability:
    """When a device can serve tasks, from its static status, windows and offline periods."""

    def __init__(self, spec: DeviceSpec) -> None:
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

    def __init__(self, spec: DeviceSpec, seed: int) -> None:
        self.spec = spec
        self.availability = Availability(spec)
        self.t = 0.0
        self._arrival_rng = random.Random(f"{seed}:{spec.arn}:arrivals")
        self._service_rng = random.Random(f"{seed}:{spec.arn}:service")
        # At t=0 the device is busy with one task and `depth` more are waiting.
        initial = spec.queue.depth + 1 if spec.queue.depth > 0 else 0
        self._waiting: deque[_Entry] = deque([initial] if initial else [])
        self._waiting_count = initial
        self._running: _Entry | None = None  # 0 for a background task, else our task id
        self._running_end = INF
        self._next_arrival = self._draw_arrival(0.0)
        self._tasks: dict[str, _Timing] = {}
        # The dedication holding the device (None: first come, first served), since when
        # none of its tasks waits or runs (None: one does), and each one's first start.
        self._held: Dedication | None = None
        self._held_idle: float | None = None
        self._first_start: dict[str, float] = {}
        self.advance(0.0)

    # -- time -------------------------------------------------------------------------------

    def advance(self, t: float) -> None:
        """Play every arrival, start and completion up to and including time ``t``."""
        while True:
            start = INF
            jumper = self._dedicated_waiting()
            if self._running is None and self._waiting and (self._held is None or jumper):
                start = self.availability.next_online(self.t)
            release = self._held_until()
            event = min(self._running_end, self._next_arrival, start, release)
            if event > t:
                break
            self.t = event
            if event == self._running_end:
                self._finish_running()
            elif event == self._next_arrival:
                self._push(1)
                self._next_arrival = self._draw_arrival(event)
            elif event == start:
                self._start_next(jumper)
            else:
                self._held = self._held_idle = None
        self.t = max(self.t, t)

    # -- our tasks --------------------------------------------------------------------------

    def submit(
        self,
        task_id: str,
        t: float,
        shots: int,
        fails: bool = False,
        dedication: Dedication | None = None,
        vendor_cancels: bool = False,
    ) -> None:
        """Queue our task at time ``t`` (advances to ``t`` first); one of ``dedication``'s
        tasks starts ahead of the others while the dedication holds the device. With
        ``vendor_cancels`` the vendor cancels it when it would start: it ends CANCELLED
        (after the cancel latency) without running, and the device moves on."""
        self.advance(t)
        extra = shots * self.spec.queue.shot_time
        self._tasks[task_id] = _Timing(
            extra, fails, created=t, dedication=dedication, vendor_cancels=vendor_cancels
        )
        self._push(task_id)
        self.advance(t)  # an idle device starts it at once

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
        self._remove(task_id)
        timing.cancelled_at = t
        return "CANCELLING" if self.spec.queue.cancel_latency > 0 else "CANCELLED"

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
        return TaskProgress("QUEUED", self._position(task_id), None, None)

    def timeline(self, task_id: str, t: float) -> TaskTimeline:
        """The milestones of our task up to ``t`` (advances to ``t`` first)."""
        self.advance(t)
        timing = self._tasks[task_id]
        ended = timing.end if timing.end is not None and timing.end <= t else None
        front = timing.front if timing.front is not None else timing.start
        return TaskTimeline(timing.created, front, timing.start, ended)

    def forecast(self, task_id: str, t: float, horizon: float = 30 * 86400.0) -> TaskTimeline:
        """The milestones our task will reach if, from ``t`` on, nothing but the background
        changes the queue (no create or cancel of ours): a copy is played forward until it
        starts (at most ``horizon`` seconds); this queue is not advanced past ``t``. What
        a benchmark needs to run the clock fast through a wait and slow at its end."""
        self.advance(t)
        ahead = copy.deepcopy(self)
        step = 60.0
        while ahead._tasks[task_id].end is None and ahead.t < t + horizon:
            ahead.advance(ahead.t + step)
            step *= 2
        timing = ahead._tasks[task_id]
        front = timing.front if timing.front is not None else timing.start
        return TaskTimeline(timing.created, front, timing.start, timing.end)

    # -- the device -------------------------------------------------------------------------

    def queue_size(self, t: float) -> int:
        """Tasks waiting (not running) at ``t``, background and ours."""
        self.advance(t)
        return self._waiting_count

    def status(self, t: float) -> DeviceStatus:
        return self.availability.status_at(t)

    # -- internals --------------------------------------------------------------------------

    def _draw_arrival(self, after: float) -> float:
        rate = self.spec.queue.arrival_rate
        return after + self._arrival_rng.expovariate(rate) if rate > 0 else INF

    def _draw_service(self) -> float:
        mean = self.spec.queue.service_time
        kind = self.spec.queue.distribution
        if mean <= 0 or kind == "fixed":
            return mean
        if kind == "exponential":
            return self._service_rng.expovariate(1.0 / mean)
        return self._service_rng.uniform(0.5 * mean, 1.5 * mean)

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
            self._waiting_count -= 1
            self._mark_front()
        if isinstance(entry, str) and self._tasks[entry].vendor_cancels:
            self._tasks[entry].cancelled_at = self.t
            return
        service = self._draw_service()
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
