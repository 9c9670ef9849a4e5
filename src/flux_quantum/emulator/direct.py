"""Braket Direct reservations on the emulator: the route that books one, and its record.

This module owns the emulator's own booking route (``POST /_emulator/reservations``, beside
``GET /_emulator/report``: not a Braket route, no credential), the JSON record a booking
answers with, and ``book``, the client another process (a benchmark driving an emulator it
did not start) books a window through. What a reservation is, and how a bad one is refused,
is the scenario's (``scenario.ReservationSpec``, ``scenario.reservation_from``); what it does
to the device's queue is the queue's (``queue.Window``). Records are pure functions of a
reservation and the clock's epoch; only ``book`` does I/O.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from flux_quantum.emulator.scenario import ReservationSpec
from flux_quantum.emulator.wire import iso8601

RESERVATIONS_PATH = "/_emulator/reservations"


def reservation_document(reservation: ReservationSpec, epoch: datetime) -> dict[str, Any]:
    """A reservation as the route answers it: its fields, its window's dates (ISO 8601 UTC
    on the emulator's timeline) and what it costs."""
    return {
        **reservation.to_dict(),
        "start_at": iso8601(epoch + timedelta(seconds=reservation.start)),
        "end_at": iso8601(epoch + timedelta(seconds=reservation.end)),
        "cost": reservation.cost,
    }


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
    where = url.rstrip("/") + RESERVATIONS_PATH
    body = json.dumps(
        {"arn": arn, "device": device, "start": start, "end": end, "price_per_hour": price_per_hour}
    ).encode()
    request = urllib.request.Request(
        where, data=body, method="POST", headers={"Content-Type": "application/json"}
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
