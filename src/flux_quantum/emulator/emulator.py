"""The ``Emulator`` facade: one loopback server for every vendor side of its table, one call log.

This module owns the lifecycle of an emulator (start, stop, context manager): its sides,
built from the table (``sides.SIDES``) with their scenarios, each request handed to the
side whose prefix it is under (Braket's on any other path), the environment a client
needs to reach it (every side's), read access to its call log, and its report (every
side's bill, calls and faults: ``report()``, also served at ``GET /_emulator/report``, a
route of the emulator's own that needs no credential), and booking Braket Direct
reservations while it runs (``add_reservation``, also ``POST /_emulator/reservations``,
beside the report, which also takes a window on the wall clock and gives a reservation
without one its ARN). A side is reached as the attribute its entry names
(``emulator.ibm``). It must never bind anything but IPv4 loopback, never leave a thread
running after ``stop()``, never put a credential in a report, never name a side but
through the table (Braket, whose devices, tasks and reservations it reads, aside), and
never change what the scenario describes: everything it serves comes from the
scenarios, the clock and the seed.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from flux_quantum.emulator.bill import REPORT_PATH, report_document
from flux_quantum.emulator.braket import BraketService, ReservationSpec, Scenario
from flux_quantum.emulator.braket.direct import (
    RESERVATIONS_PATH,
    on_timeline,
    reservation_document,
)
from flux_quantum.emulator.braket.s3 import PREFIX as S3_PREFIX
from flux_quantum.emulator.braket.service import ACCESS_KEY, SECRET_KEY
from flux_quantum.emulator.clock import Clock, WallClock
from flux_quantum.emulator.ibm import IbmService
from flux_quantum.emulator.ibm.cloud import IbmCloud, cloud_service
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.scenario import ScenarioError
from flux_quantum.emulator.server import HttpServer, check_loopback
from flux_quantum.emulator.side import Call, SideEntry, VendorSide, Wiring
from flux_quantum.emulator.sides import SIDES
from flux_quantum.emulator.simulation_pool import shared_pool
from flux_quantum.emulator.sqs import SqsService
from flux_quantum.emulator.wire import Request, Response, json_response

__all__ = ["ACCESS_KEY", "SECRET_KEY", "Emulator"]

SideT = TypeVar("SideT", bound=VendorSide[Any, Any])


class Emulator:
    """A local endpoint of every vendor the table lists, for their unmodified clients.

    ``scenario`` is Braket's; every other side's is the keyword its entry names
    (``ibm=IbmScenario...``), its default when not given. ``sides`` is the table it
    serves (the package's, ``sides.SIDES``, unless a test or bench gives its own).
    ``strict`` (the default) accepts and refuses programs as each vendor does (IBM's ISA,
    IQM's native set and couplers); ``strict=False`` runs what a side can simulate, for a
    test or bench whose point is not the vendor's rules (it overrides every scenario's).

    >>> with Emulator(clock=ManualClock()) as emu:
    ...     os.environ.update(emu.env())
    ...     AwsDevice("arn:aws:braket:::device/quantum-simulator/amazon/sv1").queue_depth()
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        on_call: Callable[[Call], None] | None = None,
        sides: Sequence[SideEntry] = SIDES,
        strict: bool = True,
        **scenarios: Any,
    ) -> None:
        keywords = {entry.keyword for entry in sides if entry.scenario is not None}
        unknown = sorted(set(scenarios) - keywords)
        if unknown:
            raise TypeError(f"Emulator() got an unexpected keyword argument {unknown[0]!r}")
        scenarios["scenario"] = scenario
        self.host = check_loopback(host)
        self.port = port
        self.clock = clock or WallClock()
        self.seed = seed
        self._stop = threading.Event()
        self.table = tuple(sides)
        self.sides: dict[str, VendorSide[Any, Any]] = {}
        for entry in self.table:
            given = scenarios.get(entry.keyword)
            if given is None and entry.scenario is not None:
                given = entry.scenario.default()
            if not strict and dataclasses.is_dataclass(given) and hasattr(given, "strict"):
                given = dataclasses.replace(given, strict=False)  # type: ignore[type-var]
            wiring = Wiring(self.clock, seed, self._stop, on_call, dict(self.sides))
            self.sides[entry.name] = entry.build(given, wiring)
        self._braket = self.side("braket", BraketService)
        self.scenario: Scenario = self._braket.scenario
        self._server: HttpServer | None = None

    def side(self, name: str, kind: type[SideT]) -> SideT:
        """The side the table names ``name``, checked to be a ``kind``."""
        side = self.sides[name]
        if not isinstance(side, kind):
            raise TypeError(f"the emulator's side {name!r} is not a {kind.__name__}")
        return side

    def __getattr__(self, name: str) -> Any:
        # A side by its table name (emulator.ibm); only called for what is not an attribute.
        sides = self.__dict__.get("sides", {})
        if name in sides:
            return sides[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("the emulator is already started")
        self._stop.clear()
        self._server = HttpServer(self.host, self.port, self._handle)
        self._server.start()
        # The simulation workers import the simulator while the emulator serves, so that
        # the first task's result does not wait for them.
        shared_pool().prestart()
        return self

    def _handle(self, request: Request) -> Response:
        if cloud_service(request.headers.get("host")) is not None and "ibm" in self.sides:
            # IBM Cloud's hosts, reached through the emulator as an HTTP proxy (ibm.cloud).
            return IbmCloud(self.side("ibm", IbmService), self.sides["ibm"].scenario).handle(
                request
            )
        if request.path == REPORT_PATH and request.method in ("GET", "HEAD"):
            return json_response(200, self.report())
        if request.path == RESERVATIONS_PATH and request.method == "POST":
            return self._book(request)
        entry = next((e for e in self.table if e.serves(request.path)), None)
        if entry is None:  # every path no other side takes is Braket's
            entry = next(e for e in self.table if not e.prefixes)
        return self.sides[entry.name].handle(request)

    def _book(self, request: Request) -> Response:
        """``POST /_emulator/reservations``: 201 and the reservation's record, or 400 and
        the one-sentence reason it was refused. The window may be given on the wall clock
        (``wall_start``, ``wall_end``) and the ARN left to the emulator."""
        try:
            fields = json.loads(request.body or b"null")
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            return json_response(400, {"message": "reservation: the body must be a JSON object"})
        try:
            reservation = self._braket.add_reservation(on_timeline(fields, self.clock))
        except ScenarioError as exc:
            return json_response(400, {"message": str(exc)})
        return json_response(201, reservation_document(reservation, self.clock))

    def stop(self) -> None:
        """Close every connection and join every thread (bounded); safe to call twice."""
        self._stop.set()  # wakes requests sleeping on a "slow response" fault
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self._braket.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the Braket endpoint; S3 lives under ``/s3``)."""
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        host, port = self._server.address
        return f"http://{host}:{port}"

    @property
    def s3_url(self) -> str:
        return self.url + S3_PREFIX

    @property
    def bucket(self) -> str:
        return self.scenario.bucket

    @property
    def sqs_url(self) -> str:
        """Where boto3's SQS client reaches the emulator (``AWS_ENDPOINT_URL_SQS``)."""
        return self.side("sqs", SqsService).env(self.url)["AWS_ENDPOINT_URL_SQS"]

    @property
    def events_queue(self) -> str:
        """The name of the queue Braket's events go to (the scenario's ``events.queue``)."""
        return self.scenario.events.queue

    @property
    def events_queue_url(self) -> str:
        """That queue's URL, as GetQueueUrl gives it."""
        return self.side("sqs", SqsService).queue_url(self.url, self.events_queue)

    def env(self) -> dict[str, str]:
        """The environment that points every side's clients at this emulator (the Braket
        SDK, boto3, QRMI's resources, IonQ's and OQTOPUS's clients), and flux-quantum's
        own ``local`` vendor at the emulator itself."""
        env: dict[str, str] = {}
        for side in self.sides.values():
            env.update(side.env(self.url))
        return {**env, "FLUX_QUANTUM_EMULATOR_URL": self.url}

    # -- what happened ------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every request every side answered so far, by emulated time (a copy)."""
        calls = [call for side in self.sides.values() for call in side.calls]
        return sorted(calls, key=lambda call: call.t)

    def call_count(self, operation: str | None = None, target: str | None = None) -> int:
        return sum(
            1
            for call in self.calls
            if (operation is None or call.operation == operation)
            and (target is None or call.target == target)
        )

    def clear_calls(self) -> None:
        for side in self.sides.values():
            side.clear_calls()

    def device_arns(self) -> list[str]:
        return [spec.arn for spec in self.scenario.devices]

    def task_arns(self) -> list[str]:
        """Every quantum task created so far, oldest first."""
        return self._braket.task_arns()

    def task_timeline(self, task_arn: str) -> TaskTimeline:
        """When a task was created, became next to run, started and ended (emulated
        seconds on this emulator's clock; see ``clock``)."""
        return self._braket.task_timeline(task_arn)

    def hybrid_job_starts(self) -> dict[str, float]:
        """When each Braket hybrid job started, or will once its start-up is over
        (emulated seconds on this emulator's clock), by ARN."""
        return self._braket.job_starts()

    def task_forecast(self, task_arn: str) -> TaskTimeline:
        """The milestones a task will reach if nothing but the background changes its
        device's queue from now on (no create or cancel, no new reservation): ``ended``
        when it will end, or ``cancelled`` when a reservation's end will cancel it."""
        return self._braket.task_forecast(task_arn)

    # -- Braket Direct ------------------------------------------------------------------------

    def add_reservation(
        self, arn: str, device: str, start: float, end: float, price_per_hour: float = 0.0
    ) -> ReservationSpec:
        """Book ``device`` (a name or an ARN) for reservation ``arn`` during ``[start, end)``
        (emulated seconds on this emulator's clock; ``end`` after now); billed
        ``price_per_hour`` x its hours from now on. ScenarioError (a ValueError) in one
        sentence naming the field when refused (a bad ARN, unknown device, a window over
        another on the device). Thread-safe; also ``POST /_emulator/reservations``."""
        return self._braket.add_reservation(
            {
                "arn": arn,
                "device": device,
                "start": start,
                "end": end,
                "price_per_hour": price_per_hour,
            }
        )

    def reservations(self) -> list[ReservationSpec]:
        """Every reservation booked (the scenario's and those added), by start."""
        return self._braket.reservations()

    def report(self) -> dict[str, Any]:
        """The emulator's bill (every side's tasks, sessions and reservations, what each
        vendor charges for them now), its calls by operation and the faults that fired, by
        vendor and kind, since it was made (``clear_calls`` does not reset them); JSON-able.
        See docs/emulator.md."""
        now = self.clock.now()
        bills = [side.bill() for side in self.sides.values()]
        counts = {entry.vendor: self.sides[entry.name].counts() for entry in self.table}
        return report_document(
            tasks=[task for bill in bills for task in bill.tasks],
            sessions=[session for bill in bills for session in bill.sessions],
            calls={vendor: calls for vendor, (calls, _) in counts.items()},
            faults={e.vendor: counts[e.vendor][1] for e in self.table if e.faults},
            now=now,
            reservations=[window for bill in bills for window in bill.reservations],
        )

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "stopped"
        return f"Emulator({where}, {len(self.scenario.devices)} devices, clock={self.clock!r})"
