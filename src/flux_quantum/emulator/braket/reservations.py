"""Braket Direct reservations booked on the emulated Braket side, and what they bill.

This module owns the reservations booked (the scenario's at the start, then those added
while the emulator runs, by ARN), the ARN a booking without one is given (drawn from the
seed), a window's place on its device's queue (``DeviceQueue.reserve``), the check that a
create's reservation is booked on its device and not over, the reservation a create's
``associations`` name, and each reservation's bill. It must never sleep holding the side's
lock nor read the wall clock; how a bad booking is refused is the scenario's
(``reservation_from``).
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from flux_quantum.emulator.bill import BilledReservation, window_seconds
from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.scenario import DeviceSpec, ReservationSpec, reservation_from
from flux_quantum.emulator.braket.task_record import TaskRecord
from flux_quantum.emulator.braket.wire import invalid, iso8601
from flux_quantum.emulator.clock import timestamp
from flux_quantum.emulator.queue import Window

RESERVATION_ASSOCIATION = "RESERVATION_TIME_WINDOW_ARN"


class Reservations:
    """The Braket Direct reservations booked, behind the side's lock."""

    def __init__(self, devices: Devices, seed: int, lock: threading.Lock) -> None:
        self.scenario = devices.scenario
        self.clock = devices.clock
        self._devices = devices
        self._lock = lock
        self._ids = random.Random(f"{seed}:reservation-ids")
        self._booked: dict[str, ReservationSpec] = {}
        for reservation in self.scenario.reservations:
            self._book(reservation, 0.0)

    def add(self, fields: Any) -> ReservationSpec:
        """Book a reservation while running (``fields``: arn, device, start, end,
        price_per_hour; without ``arn``, the emulator gives it one, as Braket Direct does
        when a window is booked); ScenarioError in one sentence naming the field when
        refused."""
        with self._lock:
            if isinstance(fields, dict) and fields.get("arn") is None:
                fields = {**fields, "arn": self._new_arn(fields.get("device"))}
            reservation = reservation_from(
                fields,
                self.scenario.devices,
                booked=list(self._booked.values()),
                now=self.clock.now(),
            )
            self._book(reservation, self.clock.now())
            return reservation

    def _new_arn(self, device: object) -> str:
        """A reservation ARN in the device's region (the scenario's for a global device)
        and the scenario's account, its id drawn from the seed (lock held)."""
        spec = next((d for d in self.scenario.devices if device in (d.arn, d.name)), None)
        region = (spec.arn.split(":")[3] if spec is not None else "") or self.scenario.region
        reservation_id = uuid.UUID(int=self._ids.getrandbits(128), version=4)
        return f"arn:aws:braket:{region}:{self.scenario.account}:reservation/{reservation_id}"

    def all(self) -> list[ReservationSpec]:
        """Every reservation booked, by start."""
        with self._lock:
            return sorted(self._booked.values(), key=lambda r: (r.start, r.arn))

    def _book(self, reservation: ReservationSpec, now: float) -> None:
        window = Window(reservation.arn, reservation.start, reservation.end)
        self._devices.queue(reservation.device).reserve(window, now)
        self._booked[reservation.arn] = reservation

    def check(self, arn: str, spec: DeviceSpec, now: float) -> None:
        """Refuse a create in reservation ``arn`` on ``spec`` unless it is booked on that
        device and its window has not ended (lock held)."""
        # Braket's own words lead (the SDK's integration suite matches them).
        reservation = self._booked.get(arn)
        if reservation is not None and reservation.device != spec.arn:
            raise invalid(f"Reservation {arn} is for device {reservation.device}, not {spec.arn}")
        if spec.type == "SIMULATOR":
            raise invalid(
                f"Braket Direct is not supported for {spec.name}: simulators take no reservations"
            )
        if reservation is None:
            raise invalid(f"Reservation arn is invalid: {arn} was not found in this account")
        if reservation.end <= now:
            ended = iso8601(timestamp(self.clock, reservation.end))
            raise invalid(f"Reservation {arn} ended at {ended}; it takes no more quantum tasks")

    def bill(self, tasks: Sequence[TaskRecord], now: float) -> list[BilledReservation]:
        """Every reservation booked, with its cost and what its ``tasks`` did by ``now``
        (lock held)."""
        rows = []
        for reservation in self._booked.values():
            queue = self._devices.queue(reservation.device)
            progress = [
                queue.progress(task.arn, now)
                for task in tasks
                if task.reservation == reservation.arn
            ]
            runs = [(p.started_at, p.ended_at) for p in progress]
            rows.append(
                BilledReservation(
                    arn=reservation.arn,
                    device=reservation.device,
                    start=reservation.start,
                    end=reservation.end,
                    start_at=iso8601(timestamp(self.clock, reservation.start)),
                    end_at=iso8601(timestamp(self.clock, reservation.end)),
                    price_per_hour=reservation.price_per_hour,
                    cost=reservation.cost,
                    tasks=len(progress),
                    completed=sum(p.status == "COMPLETED" for p in progress),
                    cancelled=sum(p.status in ("CANCELLING", "CANCELLED") for p in progress),
                    used_seconds=window_seconds((reservation.start, reservation.end), runs, now),
                )
            )
        return rows


def reservation_arn(associations: Any) -> str | None:
    """The reservation ARN a create's ``associations`` name (None: none); ValidationException
    for anything but a list of one {arn, type: RESERVATION_TIME_WINDOW_ARN}."""
    if associations is None:
        return None
    if not isinstance(associations, list):
        raise invalid("associations must be a list of {arn, type} objects")
    arns = []
    for i, association in enumerate(associations):
        if not isinstance(association, dict) or not isinstance(association.get("arn"), str):
            raise invalid(f"associations[{i}] must be an object with a string arn and a type")
        kind = association.get("type")
        if kind != RESERVATION_ASSOCIATION:
            raise invalid(f"associations[{i}].type must be {RESERVATION_ASSOCIATION}, got {kind!r}")
        arns.append(association["arn"])
    if len(arns) > 1:
        raise invalid(f"associations name {len(arns)} reservations; a quantum task takes one")
    return arns[0] if arns else None
