"""What every vendor side of the emulator does around a request: route, run, log and count.

This module owns the plumbing the Braket (``braket``), IBM (``ibm``), IQM (``iqm``) and
Pasqal (``pasqal``) sides share: ``VendorSide.handle`` routes a request (the side's
``_route``), answers a refused one with its ``Refusal``, runs a routed one (the side's
``_run``) and records it as a ``Call``; the call log (``calls``, ``clear_calls``,
``on_call``) and the counts of calls by operation, of matching calls per fault and of
fault effects by kind (``counts``), behind the side's one lock; and, for a side whose
faults are a list, counting a call against them, the ``before``/``after`` commit run and
answering with a delay, a reset or the side's error. It must never know a vendor's
routes, answers or state (those stay in each side's package), never sleep while holding
the lock, and never read a clock but the injected ``Clock``.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from flux_quantum.emulator.clock import Clock
from flux_quantum.emulator.wire import Request, Response, connection_reset, json_response


@dataclass(frozen=True)
class Call:
    """One request the emulator answered.

    ``target`` is the device ARN (GetDevice, CreateQuantumTask), the task ARN
    (GetQuantumTask, CancelQuantumTask, tags), ``s3://bucket/key`` for S3 calls, or None
    (searches). ``task`` is the task a CreateQuantumTask made or, for a repeated clientToken,
    returned. ``t`` is the emulated time of the call.
    """

    operation: str
    target: str | None
    status: int
    error: str | None
    t: float
    task: str | None = None


class Refusal(Exception):
    """A side's answer to a request it refuses: ``response``, in the vendor's error shape."""

    def __init__(self, response: Response, message: str | None = None) -> None:
        super().__init__(response.error if message is None else message)
        self.response = response


class Routed(Protocol):
    """What the call log reads of a side's resolved request."""

    @property
    def operation(self) -> str: ...

    @property
    def target(self) -> str | None: ...


class SideFault(Protocol):
    """What the shared fault selection reads of a side's fault (a ``scenario.BaseFault``
    with the ``device`` it hits)."""

    @property
    def operations(self) -> tuple[str, ...]: ...

    @property
    def device(self) -> str | None: ...

    @property
    def after_commit(self) -> bool: ...

    @property
    def delay(self) -> float: ...

    @property
    def reset(self) -> bool: ...

    def selects(self, n: int, now: float, draw: float = 0.0) -> bool: ...


RouteT = TypeVar("RouteT", bound=Routed)
FaultT = TypeVar("FaultT", bound=SideFault)


class VendorSide(Generic[RouteT, FaultT]):
    """One vendor side's requests answered and logged, from any number of server threads.

    A subclass supplies ``_route`` (the request resolved, or its ``_refusal`` raised),
    ``_refused`` (what a refused request is logged as) and either ``_run`` or the pieces of
    the shared one: ``_faults_of`` and ``_fault_device`` (which faults a call counts against),
    ``_apply`` (the call itself), ``_fault_error`` and ``_internal_error``.
    """

    # The side's refusal: raised by its routes and handlers, answered with its response.
    _refusal: ClassVar[type[Refusal]] = Refusal
    # The seeded draws of a fault's ``rate`` ("<seed>:<draws>:<fault>:<call>"; "": none).
    _draws: ClassVar[str] = ""

    def __init__(
        self,
        clock: Clock,
        seed: int,
        stop: threading.Event | None,
        on_call: Callable[[Call], None] | None,
        faults: int,
    ) -> None:
        self.clock = clock
        self.seed = seed
        self._stop = stop or threading.Event()
        self._on_call = on_call
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._fault_counts = [0] * faults
        # For the report: calls by operation and fault effects by kind, since the start
        # (clear_calls does not reset them).
        self._call_counts: Counter[str] = Counter()
        self._effects: Counter[str] = Counter()

    # -- the call log -------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def clear_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """(calls by operation, fault effects that fired by kind) since the start."""
        with self._lock:
            return dict(self._call_counts), dict(self._effects)

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer one HTTP request: route it, apply faults, run it, log it."""
        now = self.clock.now()
        created: list[str] = []
        try:
            route = self._route(request)
        except self._refusal as refusal:
            route, response = self._refused(request, refusal), refusal.response
        else:
            response = self._run(route, request, now, created)
        call = Call(route.operation, self._target(route), response.status,
                    response.error, now, created[0] if created else None)  # fmt: skip
        with self._lock:
            self._calls.append(call)
            self._call_counts[call.operation] += 1
        if self._on_call is not None:
            self._on_call(call)
        return response

    def _route(self, request: Request) -> RouteT:
        raise NotImplementedError

    def _refused(self, request: Request, refusal: Refusal) -> RouteT:
        """The route a refused request is logged as."""
        raise NotImplementedError

    def _target(self, route: RouteT) -> str | None:
        """What the call log names as the call's target."""
        return route.target

    def _run(self, route: RouteT, request: Request, now: float, created: list[str]) -> Response:
        """Count the call against the faults; answer with those before the commit, or
        apply the call and answer it (a refusal with its response, an emulator bug like
        the service's internal error); then the faults after the commit: the call
        applied, but the client hears of it late, with an error, or not at all."""
        with self._lock:
            hits = self._fired(self._faults_of(), route.operation, self._fault_device(route), now)
        before = [f for f in hits if not f.after_commit]
        after = [f for f in hits if f.after_commit]
        early = self._fault_answer(before, route, late=False)
        if early is not None:
            return early
        try:
            response = self._apply(route, request, before, created)
        except self._refusal as refusal:
            response = refusal.response
        except Exception as exc:  # an emulator bug must still answer like the service
            response = self._internal_error(route, f"emulator error in {route.operation}: {exc!r}")
        late = self._fault_answer(after, route, late=True)
        return late if late is not None else response

    def _faults_of(self) -> Sequence[FaultT]:
        raise NotImplementedError

    def _fault_device(self, route: RouteT) -> str | None:
        raise NotImplementedError

    def _apply(
        self, route: RouteT, request: Request, faults: list[FaultT], created: list[str]
    ) -> Response:
        """Apply the call (``faults``: those that fired before the commit); the id of what
        it created goes to ``created``."""
        raise NotImplementedError

    def _internal_error(self, route: RouteT, message: str) -> Response:
        raise NotImplementedError

    def _fault_error(self, fault: FaultT, route: RouteT) -> Response | None:
        """The error ``fault`` answers with (None: it has none)."""
        raise NotImplementedError

    # -- faults -------------------------------------------------------------------------------

    def _fired(
        self, faults: Sequence[FaultT], operation: str, device: str | None, now: float
    ) -> list[FaultT]:
        """Count this call against every fault matching ``operation`` and ``device``; the
        ones that fire. Lock held."""
        hits = []
        for index, fault in enumerate(faults):
            if fault.operations and operation not in fault.operations:
                continue
            if fault.device is not None and device != fault.device:
                continue
            self._fault_counts[index] += 1
            n = self._fault_counts[index]
            draw = (
                random.Random(f"{self.seed}:{self._draws}:{index}:{n}").random()
                if self._draws
                else 0.0
            )
            if fault.selects(n, now, draw):
                hits.append(fault)
        return hits

    def _fault_answer(self, hits: list[FaultT], route: RouteT, late: bool) -> Response | None:
        """Apply ``hits``' delays, then answer with their reset or error (None: neither);
        each effect is counted for the report (a reset after the commit as ``lost``)."""
        lost = self._delay_or_reset(sum(f.delay for f in hits), any(f.reset for f in hits), late)
        if lost is not None:
            return lost
        for fault in hits:
            error = self._fault_error(fault, route)
            if error is not None:
                self._count(f"error:{error.status}")
                return error
        return None

    def _delay_or_reset(self, delay: float, reset: bool, late: bool) -> Response | None:
        """Wait ``delay`` real seconds (interrupted by stop()), then a connection reset
        without an answer when ``reset`` (None: answer); each effect counted."""
        if delay > 0:
            self._count("delay")
            self._stop.wait(delay)  # real seconds, interrupted by stop()
        if reset:
            self._count("lost" if late else "reset")
            return connection_reset()
        return None

    def _count(self, *kinds: str) -> None:
        with self._lock:
            self._effects.update(kinds)


@dataclass(frozen=True)
class JobRoute:
    """A resolved request of a ``JobSide``: its operation, the handler that answers it,
    what it names (a job, an artifact) and the device it hits (faults select on that)."""

    operation: str
    handler: Callable[..., Response]
    target: str | None = None
    device: str | None = None


class JobSide(VendorSide[JobRoute, FaultT]):
    """A side of one vendor's job API (IQM's, an IBM Quantum System's, Felis's): its
    faults are its scenario's and select on the route's device; a request it cannot route
    is logged as ``Unknown``; its create (``_create_op``) may be failed by a ``fail_job``
    fault, which ``_create`` is told; a job is read as its ``_document`` (``_get_job``).
    The subclass supplies ``_route``, ``_authorize``, ``_create``, ``_job``,
    ``_document`` and the error shapes."""

    _create_op: ClassVar[str] = "CreateJob"

    def __init__(
        self,
        scenario: Any,
        clock: Clock,
        seed: int,
        stop: threading.Event | None,
        on_call: Callable[[Call], None] | None,
    ) -> None:
        super().__init__(clock, seed, stop, on_call, faults=len(scenario.faults))
        self.scenario = scenario

    def _refused(self, request: Request, refusal: Refusal) -> JobRoute:
        return JobRoute("Unknown", self._unknown)

    def _unknown(self, route: JobRoute, request: Request) -> Response:
        raise NotImplementedError

    def _faults_of(self) -> Sequence[FaultT]:
        faults: Sequence[FaultT] = self.scenario.faults
        return faults

    def _fault_device(self, route: JobRoute) -> str | None:
        return route.device

    def _authorize(self, route: JobRoute, request: Request) -> None:
        """Refuse a request whose credentials are not the scenario's."""
        raise NotImplementedError

    def _create(
        self, route: JobRoute, request: Request, failure: str | None, created: list[str]
    ) -> Response:
        """Make the job (``failure``: it will fail with that message)."""
        raise NotImplementedError

    def _job(self, job_id: str | None) -> Any:
        """The job ``job_id`` (the side's refusal if it has none). Lock held."""
        raise NotImplementedError

    def _document(self, job: Any, now: float) -> dict[str, Any]:
        """The job as the vendor's API answers it at ``now``. Lock held."""
        raise NotImplementedError

    def _get_job(self, route: JobRoute, request: Request) -> Response:
        with self._lock:
            doc = self._document(self._job(route.target), self.clock.now())
        return json_response(200, doc)

    def _apply(
        self, route: JobRoute, request: Request, faults: list[FaultT], created: list[str]
    ) -> Response:
        self._authorize(route, request)
        if route.operation != self._create_op:
            return route.handler(route, request)
        failure = next((f for f in (getattr(x, "fail_job", None) for x in faults) if f), None)
        response = self._create(route, request, failure, created)
        if created and failure:
            self._count("fail_job")
        return response
