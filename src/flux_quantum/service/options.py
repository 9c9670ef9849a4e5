"""How the handler service behaves: ``ServiceOptions``, one field per tunable.

Every field has a ``key=value`` word (the service process's arguments, and the broker
supervisor's module arguments it passes on) and most have a ``flux quantum service``
flag. This module only validates and converts; it never reads a file or the clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.service.retry import RetryPolicy
from flux_quantum.timing import PollSchedule


class ServiceError(FluxQuantumError):
    """The service cannot start (bad option, unreadable catalog)."""


@dataclass(frozen=True)
class ServiceOptions:
    """How the service behaves; every field has a ``key=value`` argument."""

    catalog: str | None = None
    emulator_url: str | None = None
    scan_interval: float = 1.0
    device_check_interval: float = 15.0
    cluster_interval: float = 5.0
    poll_min: float = 0.5
    poll_max: float = 300.0
    poll_cold_max: float = 30.0
    workers: int = 4
    vendor_timeout: float = 20.0
    probe_timeout: float = 15.0
    retry_base: float = 2.0
    retry_max: float = 60.0
    error_limit: int = 5
    max_tasks: int = 3
    group_linger: float = 60.0
    tick: float = 0.2
    startup_default: float = 1.0
    lead_share: float = 0.0  # classical lead: share of its limit a job runs (0: learn it)
    session_ttl: float = 28800.0  # look back this far for sessions left open (QRMI's max TTL)
    # How long a variational loop's vendor session (qpu.loop with qpu.session) outlives
    # the loop's last job and unit. Short, because a dedicated IBM session bills its wall
    # time; long enough for the next step, which the previous step submits before it
    # exits, so its hold comes before or just after that step ends and the service
    # adopts it at its next scan (at least one scan_interval is always waited).
    loop_linger: float = 5.0

    def __post_init__(self) -> None:
        for name in _POSITIVE:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ServiceError(f"{arg_name(name)} must be a number > 0, got {value!r}")
        if not (isinstance(self.lead_share, int | float) and 0 <= self.lead_share <= 1):
            raise ServiceError(
                f"lead-share must be a number from 0 (learn it) to 1, got {self.lead_share!r}"
            )
        for name in ("group_linger", "loop_linger"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ServiceError(f"{arg_name(name)} must be a number >= 0, got {value!r}")
        for name in _INT_OPTIONS:
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ServiceError(f"{arg_name(name)} must be an integer >= 1, got {value!r}")
        try:
            self.schedule()
        except ValueError as exc:
            raise ServiceError(
                f"poll-min <= poll-cold-max <= poll-max is required ({exc})"
            ) from None

    def schedule(self) -> PollSchedule:
        return PollSchedule(
            min_interval=self.poll_min,
            max_interval=self.poll_max,
            cold_max_interval=min(self.poll_cold_max, self.poll_max),
        )

    def retry_policy(self) -> RetryPolicy:
        """The service's one retry policy: ``retry_base`` doubling to ``retry_max``, at
        most ``error_limit`` failures in a row that are not retryable."""
        return RetryPolicy(self.retry_base, self.retry_max, self.error_limit)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in cls.__dataclass_fields__.values() if f.init]

    @classmethod
    def from_args(cls, args: Iterable[str]) -> ServiceOptions:
        """Options from ``key=value`` words; an unknown key or a bad value fails with one
        sentence naming it and what is accepted."""
        values: dict[str, Any] = {}
        names = cls.names()
        for word in args:
            key, sep, text = word.partition("=")
            name = key.replace("-", "_")
            if not sep or name not in names:
                known = ", ".join(arg_name(n) for n in names)
                raise ServiceError(f"unknown service option {word!r} (known: {known})")
            if name in _TEXT_OPTIONS:
                values[name] = text or None
                continue
            try:
                values[name] = int(text) if name in _INT_OPTIONS else float(text)
            except ValueError:
                kind = "an integer" if name in _INT_OPTIONS else "a number"
                raise ServiceError(f"{key} must be {kind}, got {text!r}") from None
        return cls(**values)

    def to_args(self) -> list[str]:
        """``key=value`` words that ``from_args`` turns back into these options."""
        words = []
        default = ServiceOptions()
        for name in self.names():
            value = getattr(self, name)
            if value != getattr(default, name) and value is not None:
                text = str(value)
                if any(c.isspace() for c in text):
                    raise ServiceError(f"{arg_name(name)} may not contain white space: {text!r}")
                words.append(f"{arg_name(name)}={text}")
        return words

    def to_dict(self) -> dict[str, Any]:
        return {arg_name(name): getattr(self, name) for name in self.names()}


_TEXT_OPTIONS = frozenset({"catalog", "emulator_url"})
_INT_OPTIONS = frozenset({"workers", "max_tasks", "error_limit"})
_POSITIVE = (
    "scan_interval",
    "device_check_interval",
    "cluster_interval",
    "poll_min",
    "poll_max",
    "poll_cold_max",
    "vendor_timeout",
    "probe_timeout",
    "retry_base",
    "retry_max",
    "tick",
    "startup_default",
    "session_ttl",
)


def arg_name(name: str) -> str:
    return name.replace("_", "-")
