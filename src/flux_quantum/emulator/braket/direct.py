"""Braket Direct reservations on the emulator: the route that books one, and its record.

This module owns the emulator's own booking route (``POST /_emulator/reservations``, beside
``GET /_emulator/report``: not a Braket route, no credential), the JSON record a booking
answers with, the mapping of a window asked for on the wall clock (``wall_start``,
``wall_end``: what an admin books) onto the emulator's timeline, which may run ``--speed``
times faster, and ``book`` and ``book_wall``, the clients another process (a benchmark
driving an emulator it did not start, ``flux quantum emulator --reserve``) books a window
through. What a reservation is, and how a bad one is refused, is the Braket scenario's
(``braket.scenario.ReservationSpec``, ``braket.scenario.reservation_from``); what it does to
the device's queue is the shared queue's (``queue.Window``). Records and the mapping are pure
functions of a reservation and the clock; only ``book`` and ``book_wall`` do I/O.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from typing import Any

from flux_quantum.emulator.braket.scenario import ReservationSpec
from flux_quantum.emulator.braket.wire import iso8601
from flux_quantum.emulator.clock import Clock, OnWallClock, timestamp
from flux_quantum.emulator.scenario import ScenarioError

RESERVATIONS_PATH = "/_emulator/reservations"
WALL_KEYS = ("wall_start", "wall_end")


def reservation_document(reservation: ReservationSpec, clock: Clock) -> dict[str, Any]:
    """A reservation as the route answers it: its fields, its window's dates (ISO 8601 UTC
    on the emulator's timeline) and what it costs; on a clock that runs on the wall clock,
    also the window on the wall clock (``wall_start``, ``wall_end``: ``time.time()``
    seconds), which differs from the timeline's dates when the emulator runs faster."""
    document = {
        **reservation.to_dict(),
        "start_at": iso8601(timestamp(clock, reservation.start)),
        "end_at": iso8601(timestamp(clock, reservation.end)),
        "cost": reservation.cost,
    }
    if isinstance(clock, OnWallClock):
        document["wall_start"] = clock.wall(reservation.start)
        document["wall_end"] = clock.wall(reservation.end)
    return document


def on_timeline(fields: dict[str, Any], clock: Clock) -> dict[str, Any]:
    """A booking's fields with a window asked for on the wall clock (``wall_start`` and
    ``wall_end``, ``time.time()`` seconds) turned into ``start`` and ``end`` on ``clock``'s
    timeline; fields without them unchanged. ScenarioError in one sentence naming the
    field: only one of the two, both forms at once, not a number, or a clock that does not
    run on the wall clock (a test's manual one)."""
    given = [key for key in WALL_KEYS if key in fields]
    if not given:
        return fields
    for key in WALL_KEYS:
        if key not in fields:
            raise ScenarioError(
                f"reservation: field {key!r} is required with {given[0]!r} (both, as "
                "time.time() seconds)"
            )
        value = fields[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(
                f"reservation: field {key!r} must be time.time() seconds, got {value!r}"
            )
        if not math.isfinite(value):
            raise ScenarioError(f"reservation: field {key!r} must be finite, got {value!r}")
    for key in ("start", "end"):
        if key in fields:
            raise ScenarioError(
                f"reservation: field {key!r} goes with neither 'wall_start' nor 'wall_end': "
                "give the window on the emulator's timeline or on the wall clock"
            )
    if not isinstance(clock, OnWallClock):
        raise ScenarioError(
            f"reservation: field 'wall_start' needs an emulator whose clock runs on the wall "
            f"clock; this one's is {type(clock).__name__}: give 'start' and 'end' instead"
        )
    mapped = {key: value for key, value in fields.items() if key not in WALL_KEYS}
    mapped["start"] = clock.at(float(fields["wall_start"]))
    mapped["end"] = clock.at(float(fields["wall_end"]))
    return mapped


def book(
    url: str,
    arn: str,
    device: str,
    start: float,
    end: float,
    price_per_hour: float = 0.0,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Book a window on the emulator serving at ``url`` (``POST {url}/_emulator/reservations``,
    no proxy) and return its record. ValueError with the emulator's one-sentence reason when
    it refuses the reservation, or naming ``emulator_url`` when it cannot be reached."""
    fields = {"arn": arn, "device": device, "start": start, "end": end}
    return _post(url, {**fields, "price_per_hour": price_per_hour}, timeout)


def book_wall(
    url: str,
    device: str,
    wall_start: float,
    wall_end: float,
    price_per_hour: float = 0.0,
    arn: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Book a window given on the wall clock (``time.time()`` seconds), as Braket Direct's
    console books one: the emulator maps it onto its timeline (whatever its speed) and,
    without ``arn``, gives the reservation an ARN of its own. The record as ``book``'s,
    with ``wall_start`` and ``wall_end``; ValueError as ``book``'s."""
    fields: dict[str, Any] = {"device": device, "wall_start": wall_start, "wall_end": wall_end}
    if arn is not None:
        fields["arn"] = arn
    return _post(url, {**fields, "price_per_hour": price_per_hour}, timeout)


def _post(url: str, fields: dict[str, Any], timeout: float) -> dict[str, Any]:
    where = url.rstrip("/") + RESERVATIONS_PATH
    request = urllib.request.Request(
        where,
        data=json.dumps(fields).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as answer:
            record = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("message")
        except (ValueError, AttributeError, OSError):
            message = None
        raise ValueError(message or f"emulator_url: {where} answered {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"emulator_url: cannot book at {where}: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError(f"emulator_url: {where} did not answer with a JSON object")
    return record
