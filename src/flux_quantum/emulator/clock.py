"""Clocks that drive the emulator's timeline: a wall clock for demos and a manual one for tests.

This module owns the emulator's notion of "now" (seconds since the emulator started) and the
calendar date that timeline maps to. It must never sleep, never read the wall clock inside
``ManualClock``, and never let emulated time run backwards.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

# A fixed date for manual timelines, so timestamps in tests are reproducible.
MANUAL_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """Emulated time: ``now()`` seconds since the start of the timeline, which began at ``epoch``."""

    epoch: datetime

    def now(self) -> float: ...


@runtime_checkable
class OnWallClock(Protocol):
    """A clock whose timeline runs on the wall clock (``time.time()``), so that a date an
    admin asks for maps to emulated seconds and back: ``WallClock``, ``ScaledClock``."""

    def at(self, wall_time: float) -> float: ...

    def wall(self, emulated: float) -> float: ...


def iso(moment: datetime) -> str:
    """``moment`` as an ISO 8601 UTC text with microseconds and ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def timestamp(clock: Clock, t: float) -> datetime:
    """The calendar date of emulated second ``t`` on ``clock``'s timeline."""
    return clock.epoch + timedelta(seconds=t)


class ManualClock:
    """A clock that only moves when a test calls ``advance``; thread-safe."""

    def __init__(self, start: float = 0.0, epoch: datetime = MANUAL_EPOCH) -> None:
        if start < 0:
            raise ValueError(f"ManualClock start must be >= 0, got {start}")
        self.epoch = epoch
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"ManualClock cannot go backwards (advance({seconds}))")
        with self._lock:
            self._now += float(seconds)
            return self._now

    def set(self, t: float) -> float:
        """Jump to absolute time ``t``, which must not be earlier than now."""
        with self._lock:
            if t < self._now:
                raise ValueError(f"ManualClock cannot go backwards from {self._now} to {t}")
            self._now = float(t)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now():.3f})"


class WallClock:
    """Real elapsed time since construction, multiplied by ``speed`` (time compression)."""

    def __init__(self, speed: float = 1.0, epoch: datetime | None = None) -> None:
        if not speed > 0:
            raise ValueError(f"WallClock speed must be > 0, got {speed}")
        self.speed = float(speed)
        self.epoch = epoch or datetime.now(UTC)
        self._origin = time.monotonic()
        self._wall_origin = time.time()  # the wall time of emulated second 0

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.speed

    def at(self, wall_time: float) -> float:
        """The emulated time at ``wall_time`` (``time.time()`` seconds; negative before
        the clock was made)."""
        return (wall_time - self._wall_origin) * self.speed

    def wall(self, emulated: float) -> float:
        """The wall time (``time.time()`` seconds) at which the clock reads ``emulated``."""
        return self._wall_origin + emulated / self.speed

    def __repr__(self) -> str:
        return f"WallClock(speed={self.speed}, now={self.now():.3f})"


class ScaledClock:
    """Emulated time for demos and benchmarks: wall time times ``speed``, frozen at 0
    until ``start()`` (or from construction when not ``paused``); ``set_speed`` starts a
    new linear segment (0 stops it). ``at(wall)`` and ``wall(t)`` map between the wall
    clock (``time.time()``) and emulated seconds; ``real_time(iso)`` maps a date the
    emulator printed back to the wall clock. Thread-safe."""

    def __init__(self, speed: float, paused: bool = True, epoch: datetime | None = None) -> None:
        if not speed > 0:
            raise ValueError(f"ScaledClock speed must be > 0, got {speed}")
        self.speed = float(speed)
        self.epoch = epoch or datetime.now(UTC).replace(microsecond=0)
        self._lock = threading.Lock()
        # (wall time, emulated time, speed) at the start of each segment
        self._segments = [(time.time(), 0.0, 0.0 if paused else self.speed)]

    def start(self) -> float:
        """Let time run at ``speed`` from now; the wall time it started."""
        self.set_speed(self.speed)
        return self._segments[-1][0]

    def set_speed(self, speed: float) -> None:
        if speed < 0:
            raise ValueError(f"ScaledClock speed must be >= 0, got {speed}")
        with self._lock:
            wall, emulated, old = self._segments[-1]
            t = time.time()
            self._segments.append((t, emulated + (t - wall) * old, float(speed)))

    def now(self) -> float:
        with self._lock:
            wall, emulated, speed = self._segments[-1]
        return emulated + (time.time() - wall) * speed

    def at(self, wall_time: float) -> float:
        """The emulated time at ``wall_time``."""
        with self._lock:
            segments = list(self._segments)
        for wall, start, speed in reversed(segments):
            if wall_time >= wall:
                return start + (wall_time - wall) * speed
        return 0.0

    def wall(self, emulated: float) -> float:
        """The wall time at which the clock reads ``emulated``."""
        with self._lock:
            segments = list(self._segments)
        for wall, start, speed in reversed(segments):
            if emulated >= start and speed > 0:
                return wall + (emulated - start) / speed
            if emulated == start:
                return wall
        return segments[0][0]

    def real_time(self, iso: str) -> float:
        """The wall time of a date on this clock's timeline (``...Z`` ISO 8601)."""
        emulated = datetime.fromisoformat(iso.replace("Z", "+00:00")) - self.epoch
        return self.wall(emulated.total_seconds())

    def __repr__(self) -> str:
        return f"ScaledClock(speed={self.speed}, now={self.now():.3f})"
