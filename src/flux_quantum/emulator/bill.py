"""The emulator's own bill and report: what each emulated vendor would charge, and what it saw.

This module owns the bill rules (what a Braket task or an IBM job costs once it has ended,
from the scenario's prices and the same quantities the vendors' documents carry: shots,
a managed simulator's ``executionDuration``, an IBM job's ``usage.seconds``, a Braket
Direct reservation's window), the billed task, session and reservation records, what one
side bills (``SideBill``), and the report document served at ``GET /_emulator/report``
(``Emulator.report()``). It is pure: it never reads a clock, takes a lock or does I/O, and
a report never carries a credential (tokens in it are idempotency tokens, not secrets).
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator.queue import TaskProgress
from flux_quantum.emulator.scenario import Cost

CURRENCY = "USD"
# Braket bills a managed simulator's run time with a 3 s minimum.
SIMULATOR_MIN_SECONDS = 3.0
# IBM Quantum Pay-As-You-Go: $96 a minute of quantum time; the Open plan is free.
IBM_PAID_PRICE_PER_SECOND = 1.60
REPORT_PATH = "/_emulator/report"


def execution_ms(started: float, ended: float) -> int:
    """A managed simulator's ``executionDuration`` (ms), as its results.json carries it."""
    return round((ended - started) * 1000)


def usage_seconds(started: float, ended: float) -> float:
    """An IBM job's ``usage.seconds``, as its job document carries it."""
    return round(ended - started, 3)


def braket_charge(
    cost: Cost, state: str, shots: int, started: float | None, ended: float | None
) -> tuple[float | None, float]:
    """(billed seconds or None, dollars) of one Braket task in ``state``.

    Only a COMPLETED task is billed. A program set is one task whose ``shots`` are those of
    all its executables. Per shot: ``task_price + price x shots``; per task:
    ``task_price + price``; per minute (managed simulators): ``task_price + price / 60 x
    max(3, executionDuration / 1000)``, the billed seconds being that max.
    """
    if state != "COMPLETED":
        return None, 0.0
    if cost.unit == "minute":
        if started is None or ended is None:
            return None, 0.0
        seconds = max(SIMULATOR_MIN_SECONDS, execution_ms(started, ended) / 1000.0)
        return seconds, cost.task_price + cost.price / 60.0 * seconds
    if cost.unit == "task":
        return None, cost.task_price + cost.price
    return None, cost.task_price + cost.price * shots


def ibm_charge(
    price_per_second: float, state: str, started: float | None, ended: float | None
) -> tuple[float | None, float]:
    """(billed seconds or None, dollars) of one IBM job in ``state``: a COMPLETED job is
    billed its usage seconds x the plan's price per second; any other state nothing."""
    if state != "COMPLETED" or started is None or ended is None:
        return None, 0.0
    seconds = usage_seconds(started, ended)
    return seconds, seconds * price_per_second


def window_seconds(
    window: tuple[float, float], runs: Iterable[tuple[float | None, float | None]], now: float
) -> float:
    """Seconds of ``window`` (start, end) the device spent on ``runs`` (started, ended or
    None: still running at ``now``; a task that never started has started None)."""
    start, end = window
    used = 0.0
    for started, ended in runs:
        if started is None:
            continue
        stop = now if ended is None else ended
        used += max(0.0, min(stop, end) - max(started, start))
    return used


@dataclass(frozen=True)
class BilledTask:
    """One vendor task on the bill (every task the emulator created, billed or not)."""

    vendor: str  # "braket" or "ibm"
    id: str
    device: str
    token: str | None
    state: str
    shots: int
    billed_seconds: float | None
    cost: float
    session: str | None
    created: float
    reservation: str | None = None  # the Braket Direct reservation it ran in (its ARN)
    started: float | None = None  # when it ran (emulated seconds; None: not yet, or never)
    ended: float | None = None  # when it ended, whatever the state (None: not yet)
    programs: int | None = None  # a Braket program set's programs (None: one program)
    executables: int | None = None  # and its executables

    def to_dict(self) -> dict[str, Any]:
        """The bill's row; ``programs`` and ``executables`` only for a program set."""
        row: dict[str, Any] = {
            "vendor": self.vendor,
            "id": self.id,
            "device": self.device,
            "token": self.token,
            "state": self.state,
            "shots": self.shots,
            "billed_seconds": self.billed_seconds,
            "cost": self.cost,
            "session": self.session,
            "created": self.created,
            "reservation": self.reservation,
            "started": self.started,
            "ended": self.ended,
        }
        if self.programs is not None:
            row["programs"] = self.programs
            row["executables"] = self.executables
        return row


def timed_task(
    vendor: str,
    task_id: str,
    device: str,
    token: str | None,
    shots: int,
    created: float,
    progress: TaskProgress,
    price_per_second: float,
) -> BilledTask:
    """A task billed by its QPU seconds (IQM's, Pasqal's, an IBM Quantum System's): a
    completed one its run time x ``price_per_second``, any other nothing; a task being
    cancelled is on the bill as CANCELLED."""
    seconds = None
    if progress.status == "COMPLETED" and progress.started_at is not None:
        assert progress.ended_at is not None
        seconds = round(progress.ended_at - progress.started_at, 3)
    return BilledTask(
        vendor=vendor,
        id=task_id,
        device=device,
        token=token,
        state="CANCELLED" if progress.status == "CANCELLING" else progress.status,
        shots=shots,
        billed_seconds=seconds,
        cost=(seconds or 0.0) * price_per_second,
        session=None,
        created=created,
        started=progress.started_at,
        ended=progress.ended_at,
    )


@dataclass(frozen=True)
class BilledSession:
    """One IBM session: ``open`` (neither closed by its client nor expired), ``closed`` (its
    client closed it, or stopped it taking jobs) or ``expired`` (its max TTL ran out);
    ``ibm_state`` is what IBM's session document says now."""

    id: str
    backend: str
    mode: str
    state: str
    ibm_state: str
    jobs: tuple[str, ...]
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "backend": self.backend,
            "mode": self.mode,
            "state": self.state,
            "ibm_state": self.ibm_state,
            "jobs": list(self.jobs),
            "cost": self.cost,
        }


@dataclass(frozen=True)
class BilledReservation:
    """One Braket Direct reservation: its window (emulated seconds, and dates), what it
    costs (its length x ``price_per_hour``, whatever runs in it), its tasks by outcome and
    the seconds of the window they used."""

    arn: str
    device: str
    start: float
    end: float
    start_at: str
    end_at: str
    price_per_hour: float
    cost: float
    tasks: int
    completed: int
    cancelled: int
    used_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "arn": self.arn,
            "device": self.device,
            "start": self.start,
            "end": self.end,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "price_per_hour": self.price_per_hour,
            "cost": self.cost,
            "tasks": self.tasks,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "used_seconds": self.used_seconds,
        }


@dataclass(frozen=True)
class SideBill:
    """What one side of the emulator bills: its tasks, its sessions (IBM's; Braket's
    hybrid jobs, billed their instance time) and its reservations (Braket Direct's), each
    in the order the side made them. Every side's ``bill()`` answers one."""

    tasks: list[BilledTask] = field(default_factory=list)
    sessions: list[BilledSession] = field(default_factory=list)
    reservations: list[BilledReservation] = field(default_factory=list)


def report_document(
    tasks: Iterable[BilledTask],
    sessions: Iterable[BilledSession],
    calls: Mapping[str, Mapping[str, int]],
    faults: Mapping[str, Mapping[str, int]],
    now: float,
    reservations: Iterable[BilledReservation] = (),
) -> dict[str, Any]:
    """The report: the bill, calls by operation (both vendors merged, and per vendor),
    faults that fired by vendor and kind, and the emulated time it was taken at."""
    task_list = sorted(tasks, key=lambda t: (t.created, t.vendor, t.id))
    windows = sorted(reservations, key=lambda r: (r.start, r.device, r.arn))
    merged: dict[str, int] = {}
    for counts in calls.values():
        for operation, n in counts.items():
            merged[operation] = merged.get(operation, 0) + n
    return {
        "bill": {
            "currency": CURRENCY,
            "tasks": [t.to_dict() for t in task_list],
            "sessions": [s.to_dict() for s in sessions],
            "reservations": [r.to_dict() for r in windows],
            "total": math.fsum([*(t.cost for t in task_list), *(r.cost for r in windows)]),
        },
        "calls": dict(sorted(merged.items())),
        "calls_by_vendor": {v: dict(sorted(c.items())) for v, c in calls.items()},
        "faults": {v: dict(sorted(c.items())) for v, c in faults.items()},
        "now": now,
    }


def read_report(url: str, timeout: float = 30.0) -> dict[str, Any]:
    """The report of the emulator serving at ``url`` (``GET {url}/_emulator/report``, no
    proxy: the emulator is on this host or the project's own network). ValueError in one
    sentence naming ``emulator_url`` when it cannot be read or is not a JSON object."""
    where = url.rstrip("/") + REPORT_PATH
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(where, timeout=timeout) as answer:
            report = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        raise ValueError(f"emulator_url: cannot read {where}: {exc}") from None
    if not isinstance(report, dict):
        raise ValueError(f"emulator_url: {where} did not answer with a JSON object")
    return report
