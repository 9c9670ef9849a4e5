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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from flux_quantum.emulator.bill import SideBill
from flux_quantum.emulator.clock import Clock
from flux_quantum.emulator.routes import UNKNOWN, Route, RouteTable, SideRoute
from flux_quantum.emulator.wire import Request, Response, connection_reset


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
    def message(self) -> str | None: ...

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

    A subclass supplies ``_route`` (the request resolved, or a ``Refusal`` raised),
    ``_refused`` (what a refused request is logged as) and either ``_run`` or the pieces of
    the shared one: ``_faults_of`` and ``_fault_device`` (which faults a call counts against),
    ``_apply`` (the call itself), ``_fault_error`` and ``_internal_error``.
    """

    # What the side serves (its scenario; None: a side that serves another's, SQS).
    scenario: Any = None
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

    def bill(self) -> SideBill:
        """What the side's vendor charges for what it served so far (nothing by default)."""
        return SideBill()

    def env(self, url: str) -> dict[str, str]:
        """The environment that points the vendor's clients at this side, the emulator
        serving at ``url`` (nothing by default)."""
        return {}

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer one HTTP request: route it, apply faults, run it, log it."""
        now = self.clock.now()
        created: list[str] = []
        try:
            route = self._route(request)
        except Refusal as refusal:
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
        except Refusal as refusal:
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


ScenarioT = TypeVar("ScenarioT")


# What a side that names the request says of a path it does not serve.
UNSERVED = "the emulator does not implement {method} {path}"


@dataclass(frozen=True)
class Missing:
    """A side's words when what a request names is not there: a path it does not serve
    (``{method}``, ``{path}``), a device or a job (``{name}``), each with the error code
    the vendor's body carries (None: the side's default)."""

    path: str
    device: str = "{name} not found."
    job: str = "Job {name} not found."
    codes: tuple[str | None, str | None, str | None] = (None, None, None)


class TableSide(VendorSide[SideRoute, FaultT], Generic[ScenarioT, FaultT]):
    """A side whose API is a table of routes (``ROUTES``: method, path pattern, operation,
    handler; see ``routes``) over its scenario's devices: its faults are its scenario's
    and select on the route's device; a request no route takes is refused with the side's
    ``_not_found`` and logged as ``Unknown``; a route that ``creates`` is answered by a
    handler told the faults that fired (a ``fail_job`` one: the job will fail) that says
    what it created. The subclass supplies ``ROUTES``, its handlers, ``_not_found``,
    ``_error`` (its error body), ``_authorize`` and, where routes name a job's device,
    ``_device_of``."""

    ROUTES: ClassVar[tuple[Route, ...]] = ()
    MISSING: ClassVar[Missing] = Missing("Not Found")
    _table: ClassVar[RouteTable] = RouteTable(())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ROUTES" in cls.__dict__:
            cls._table = RouteTable(cls.ROUTES)
            missing = sorted(
                h for h in cls._table.handlers() if not callable(getattr(cls, h, None))
            )
            if missing:
                raise TypeError(f"{cls.__name__}.ROUTES names no handler {', '.join(missing)}")

    def __init__(
        self,
        scenario: ScenarioT,
        clock: Clock,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
    ) -> None:
        faults: Sequence[Any] = getattr(scenario, "faults", ())
        super().__init__(clock, seed, stop, on_call, faults=len(faults))
        self.scenario: ScenarioT = scenario
        self._setup()

    def _setup(self) -> None:
        """Make the side's own state from its scenario (none by default)."""

    # -- routing ------------------------------------------------------------------------------

    def _route(self, request: Request) -> SideRoute:
        route = self._table.resolve(self, request)
        if route is None:
            raise self._not_found(request)
        return route

    def _not_found(self, request: Request) -> Refusal:
        """The side's answer to a path or method it does not serve."""
        words = self.MISSING.path.format(method=request.method, path=request.path)
        return Refusal(self._error(404, words, code=self.MISSING.codes[0]))

    def _no_device(self, name: str | None) -> Refusal:
        """The side's answer to a device it does not have."""
        words = self.MISSING.device.format(name=name)
        return Refusal(self._error(404, words, code=self.MISSING.codes[1]))

    def _no_job(self, job_id: str | None) -> Refusal:
        """The side's answer to a job it does not have."""
        words = self.MISSING.job.format(name=job_id)
        return Refusal(self._error(404, words, code=self.MISSING.codes[2]))

    def _refused(self, request: Request, refusal: Refusal) -> SideRoute:
        return UNKNOWN

    def _device_of(self, kind: str, key: str) -> str | None:
        """The device of the ``kind`` (a route's path field: job, session) ``key`` names."""
        return None

    # -- answers ------------------------------------------------------------------------------

    def _error(
        self, status: int, message: str, route: SideRoute | None = None, code: str | None = None
    ) -> Response:
        """An error in the side's shape (``code``: the vendor's error code, where its body
        carries one)."""
        raise NotImplementedError

    def _internal_error(self, route: SideRoute, message: str) -> Response:
        return self._error(500, message, route)

    def _fault_error(self, fault: FaultT, route: SideRoute) -> Response | None:
        status = getattr(fault, "status", None)
        if not status:
            return None
        return self._error(status, fault.message or "Injected fault.", route)

    def _faults_of(self) -> Sequence[FaultT]:
        faults: Sequence[FaultT] = getattr(self.scenario, "faults", ())
        return faults

    def _fault_device(self, route: SideRoute) -> str | None:
        return route.device

    def _authorize(self, route: SideRoute, request: Request) -> None:
        """Refuse a request whose credentials are not the scenario's."""

    @staticmethod
    def failure(faults: Sequence[Any]) -> str | None:
        """What a created job fails with, from the ``fail_job`` fault that fired (None)."""
        return next((f.fail_job for f in faults if getattr(f, "fail_job", None)), None)

    def _created_effects(self, faults: Sequence[FaultT]) -> list[str]:
        """The fault effects a create that made something counts for the report."""
        return ["fail_job"] if self.failure(faults) else []

    def _apply(
        self, route: SideRoute, request: Request, faults: list[FaultT], created: list[str]
    ) -> Response:
        self._authorize(route, request)
        if not route.creates:
            response: Response = route.handler(route, request)
            return response
        response, made = route.handler(route, request, faults)
        if made is not None:
            created.append(made)
            self._count(*self._created_effects(faults))
        return response


# -- the sides of an emulator -----------------------------------------------------------------


@dataclass(frozen=True)
class Wiring:
    """What a side is built with: the emulator's clock, seed, stop event and call hook, and
    the sides built before it (by name), for a side that serves another's (SQS, Braket's
    events)."""

    clock: Clock
    seed: int
    stop: threading.Event
    on_call: Callable[[Call], None] | None
    sides: Mapping[str, VendorSide[Any, Any]]


def serve(side: Callable[..., VendorSide[Any, Any]]) -> Callable[[Any, Wiring], Any]:
    """How most sides are built: their class made from their scenario, the emulator's
    clock and seed, its stop event and call hook."""

    def build(scenario: Any, wiring: Wiring) -> VendorSide[Any, Any]:
        return side(scenario, wiring.clock, wiring.seed, stop=wiring.stop, on_call=wiring.on_call)

    return build


@dataclass(frozen=True)
class SideEntry:
    """One side of the emulator, as its table lists it.

    ``name`` is the emulator's attribute for it (``emulator.iqm``); ``vendor`` its name in
    the report; ``prefixes`` the paths it answers under (none: every path no other side
    takes); ``scenario`` what it serves (a class with ``default()``, ``from_yaml`` and
    ``from_dict``; None: it serves no scenario of its own), given as the emulator's
    keyword ``keyword`` and the command's ``option``; ``build`` makes the side from its
    scenario. ``faults`` says whether the report lists its faults; ``label`` names it in
    the command's help and its start line, with the ``devices`` it serves."""

    name: str
    vendor: str
    prefixes: tuple[str, ...]
    build: Callable[[Any, Wiring], VendorSide[Any, Any]]
    scenario: Any = None
    keyword: str = ""
    option: str = ""
    label: str = ""
    devices: Callable[[Any], int] = len
    faults: bool = True

    def serves(self, path: str) -> bool:
        """Whether ``path`` is under one of the side's prefixes."""
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)
