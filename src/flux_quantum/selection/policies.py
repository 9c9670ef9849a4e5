"""Backend selection: which catalog device a ``qpu`` request goes to, and why.

This module owns the selection policies (explicit, min-cost, min-queue, min-wait,
max-fidelity), the request's constraints (vendor, class, min_qubits, max_cost, max_wait,
min_fidelity), the drain-rate estimate behind min-wait (``DrainEstimator``), a program's
expected success on a device (``expected_success``) and the ``Explanation`` of a choice
that the CLI prints and the handlers write to the job eventlog. It decides from data it
is given (catalog devices, ``DeviceSnapshot``s, a program's gate counts and the devices
the caller rules out, e.g. by site access rules or quota); it never calls a vendor,
never sleeps and never reads the clock itself.

Ranking, lowest first, ties broken left to right (the device name last makes every
choice deterministic):

- ``explicit``:  the named device only
- ``min-cost``:  estimated cost, then expected wait, then name
- ``min-queue``: queue depth (unknown last, a capped ``>N`` after an exact ``N``), then
  cost, then name
- ``min-wait``:  expected wait (unknown last), then cost, then name
- ``max-fidelity``: expected success, highest first (to 0.001; unknown last), then
  cost, then expected wait, then name

Estimated cost is the device's price model at the request's shots (time-billed
simulators at their minimum billed duration). Expected wait is the queue depth times
the drain time per task: learned from successive probes or task positions when there
are any, else the device's ``drain_seconds_per_task`` catalog property, else a
per-class prior (``DEFAULT_DRAIN_SECONDS``).

Expected success is the probability that no gate or readout goes wrong: the device's
median one-qubit fidelity to the power of the program's one-qubit gates, times the
two-qubit median to the two-qubit gates, times the readout median to the qubits
measured (``flux_quantum.selection.qasm`` counts them; without a program, the handlers' default
Bell pair). A simulator is noise-free (1). A QPU whose vendor publishes no calibration
has no figure: it ranks last under max-fidelity and never meets ``min_fidelity``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.request import QpuRequest
from flux_quantum.selection.qasm import BELL_COUNTS, ProgramCounts
from flux_quantum.vendors.base import Calibration, DeviceSnapshot, DeviceStatus

DRAIN_PROPERTY = "drain_seconds_per_task"
# Priors when nothing was learned and the catalog says nothing: managed simulators turn
# a small task around in seconds, a QPU task (calibration, shots, readout) in about a
# minute. They only order devices until real observations arrive.
DEFAULT_DRAIN_SECONDS: Mapping[str, float] = {"simulator": 5.0, "qpu": 60.0}

ORDERS: Mapping[str, str] = {
    "explicit": "the named device only",
    "min-cost": "estimated cost, then expected wait, then name",
    "min-queue": "queue depth, then estimated cost, then name",
    "min-wait": "expected wait, then estimated cost, then name",
    "max-fidelity": "expected success (highest first), then estimated cost, then wait, then name",
}
# Expected success is compared to this many decimals, so that devices of practically
# equal quality are told apart by cost and wait.
FIDELITY_DECIMALS = 3


class NoDeviceError(FluxQuantumError):
    """No catalog device satisfies a request; ``explanation`` says why for each one."""

    def __init__(self, message: str, explanation: Explanation) -> None:
        super().__init__(message)
        self.explanation = explanation


# --- drain estimation ----------------------------------------------------------------


@dataclass(frozen=True)
class DrainEstimate:
    """Seconds the device needs per queued task, and where the number comes from."""

    seconds_per_task: float
    source: str  # "learned", "catalog" or "prior"
    samples: int = 0

    def describe(self) -> str:
        where = f"learned from {self.samples}" if self.source == "learned" else self.source
        return f"{_seconds(self.seconds_per_task)}/task ({where})"


@dataclass(frozen=True)
class _Observation:
    depth: int
    t: float


class DrainEstimator:
    """Learns each device's drain rate (tasks per second) from timestamped observations.

    Two kinds of observation feed it. A task's queue position only moves when tasks
    ahead of it are served (new tasks join behind), so a falling position measures the
    service rate exactly: ``observe_position``. A device's queue depth is served work
    minus arrivals, so a falling depth gives a lower bound of the rate (a cautious,
    longer wait): ``observe``. A rise (arrivals) restarts the measurement, an unchanged
    value extends it, capped values (``>2000``) are ignored. The rate is tasks served
    over time elapsed, both summed over samples with older ones decayed by
    ``1 - alpha`` per sample.

    The two are kept apart: a depth's lower bound of the rate is a cautious *wait*
    (what a policy wants), but a poller that trusted it would poll late, and a late poll
    stretches the next sample, so the bound would feed on itself. ``estimate(device,
    polling=True)`` therefore uses position moves only (else the catalog or the prior).
    """

    def __init__(
        self,
        *,
        alpha: float = 0.3,
        priors: Mapping[str, float] = DEFAULT_DRAIN_SECONDS,
    ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self._alpha = alpha
        self._priors = dict(priors)
        self._lock = threading.Lock()
        # device -> (decayed tasks served, decayed seconds, samples), from positions
        # (exact) and from depths (a lower bound of the rate)
        self._rates: dict[str, tuple[float, float, int]] = {}
        self._depth_rates: dict[str, tuple[float, float, int]] = {}
        self._depths: dict[str, _Observation] = {}
        self._positions: dict[tuple[str, str], _Observation] = {}

    def observe(self, snapshot: DeviceSnapshot) -> None:
        """Learn from a device probe (queue depth at ``snapshot.t``)."""
        if snapshot.queue_depth is None or snapshot.queue_capped:
            return
        with self._lock:
            self._learn(self._depths, snapshot.device, snapshot.device, snapshot, self._depth_rates)

    def observe_position(
        self, device: str, task_id: str, position: int | None, t: float, capped: bool = False
    ) -> None:
        """Learn from one of our tasks' queue position at time ``t``."""
        if position is None or capped:
            return
        with self._lock:
            observation = _Observation(position, t)
            self._learn(self._positions, (device, task_id), device, observation, self._rates)

    def forget_task(self, device: str, task_id: str) -> None:
        with self._lock:
            self._positions.pop((device, task_id), None)

    def _learn(
        self,
        table: dict[Any, _Observation],
        key: Any,
        device: str,
        now: DeviceSnapshot | _Observation,
        rates: dict[str, tuple[float, float, int]],
    ) -> None:
        depth = now.queue_depth if isinstance(now, DeviceSnapshot) else now.depth
        assert depth is not None
        previous = table.get(key)
        if previous is not None and now.t < previous.t:
            return  # out of order; keep the newer one
        if previous is None or depth > previous.depth:
            table[key] = _Observation(depth, now.t)  # first sight, or arrivals: new baseline
            return
        if depth == previous.depth:
            # Keep the older baseline: "no move in 3 s" is part of the next sample, and
            # forgetting it would make short polls see only the moves (a biased rate).
            return
        table[key] = _Observation(depth, now.t)
        served, elapsed = previous.depth - depth, now.t - previous.t
        if elapsed <= 0:
            return
        # A decayed ratio of sums: long intervals weigh as much as the tasks they saw.
        old_served, old_elapsed, samples = rates.get(device, (0.0, 0.0, 0))
        keep = 1.0 - self._alpha
        rates[device] = (
            keep * old_served + served,
            keep * old_elapsed + elapsed,
            samples + 1,
        )

    def estimate(
        self, device: Device, polling: bool = False, learned: bool = True
    ) -> DrainEstimate:
        """Seconds per task for ``device``: learned, else catalog property, else prior.
        Learned from position moves, else (unless ``polling``) from depth changes;
        ``learned=False``: what the catalog or the prior says."""
        with self._lock:
            rate = self._rates.get(device.name) if learned else None
            if (rate is None or rate[0] <= 0) and learned and not polling:
                rate = self._depth_rates.get(device.name)
        if rate is not None and rate[0] > 0:
            served, elapsed, samples = rate
            return DrainEstimate(elapsed / served, "learned", samples)
        configured = _positive_float(device.properties.get(DRAIN_PROPERTY))
        if configured is not None:
            return DrainEstimate(configured, "catalog")
        return DrainEstimate(self._priors.get(device.device_class, 60.0), "prior")


# --- explanation ---------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One catalog device as the policy saw it: its numbers and the verdict."""

    device: str
    vendor: str
    device_class: str
    qubits: int
    status: str | None  # "ONLINE", "OFFLINE (MAINTENANCE)", None if not probed
    queue_depth: int | None
    queue_capped: bool
    cost: float
    drain: DrainEstimate | None
    expected_wait: float | None
    eligible: bool
    rank: int | None  # 1 = chosen, among eligible devices
    reason: str  # why it won, ranked where it did, or was dropped
    success: float | None = None  # expected success of the program, None if unknown
    calibration: Calibration | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "vendor": self.vendor,
            "class": self.device_class,
            "qubits": self.qubits,
            "status": self.status,
            "queue_depth": self.queue_depth,
            "queue_capped": self.queue_capped,
            "cost": round(self.cost, 6),
            "drain_seconds_per_task": self.drain.seconds_per_task if self.drain else None,
            "drain_source": self.drain.source if self.drain else None,
            "expected_wait": self.expected_wait,
            "expected_success": None if self.success is None else round(self.success, 6),
            "fidelity_1q": _figure(self.calibration, "one_qubit_median"),
            "fidelity_2q": _figure(self.calibration, "two_qubit_median"),
            "fidelity_readout": _figure(self.calibration, "readout_median"),
            "eligible": self.eligible,
            "rank": self.rank,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Explanation:
    """Every catalog device considered for a request (for an explicit request, the named
    device only): ranked eligible ones first, the chosen one on top, then the dropped ones
    in catalog order."""

    request: str
    policy: str
    order: str
    shots: int
    chosen: str | None
    candidates: tuple[Candidate, ...]
    program: ProgramCounts | None = None  # set when fidelity took part in the choice

    def to_dict(self) -> dict[str, Any]:
        record = {
            "request": self.request,
            "policy": self.policy,
            "order": self.order,
            "shots": self.shots,
            "chosen": self.chosen,
            "candidates": [candidate.to_dict() for candidate in self.candidates],
        }
        if self.program is not None:
            record["program"] = self.program.to_dict()
        return record

    def render_text(self) -> str:
        header: tuple[str, ...]
        header = ("DEVICE", "VENDOR", "CLASS", "QUBITS", "STATUS", "QUEUE", "COST", "DRAIN", "WAIT")
        if self.program is not None:
            header += ("F1Q", "F2Q", "FRO", "SUCCESS")
        rows: list[tuple[str, ...]] = [header]
        for c in self.candidates:
            queue = "-" if c.queue_depth is None else f"{'>' if c.queue_capped else ''}"
            queue += "" if c.queue_depth is None else str(c.queue_depth)
            wait = "-" if c.expected_wait is None else _seconds(c.expected_wait)
            if c.expected_wait is not None and c.queue_capped:
                wait = ">" + wait
            rows.append(
                (
                    c.device,
                    c.vendor,
                    c.device_class,
                    str(c.qubits),
                    c.status or "-",
                    queue,
                    f"${c.cost:.4f}",
                    f"{_seconds(c.drain.seconds_per_task)} {c.drain.source}" if c.drain else "-",
                    wait,
                )
            )
            if self.program is not None:
                rows[-1] += (
                    _percent(_figure(c.calibration, "one_qubit_median")),
                    _percent(_figure(c.calibration, "two_qubit_median")),
                    _percent(_figure(c.calibration, "readout_median")),
                    _percent(c.success),
                )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [
            f"policy {self.policy} for '{self.request}': {self.order}",
        ]
        if self.program is not None:
            lines.append(f"program: {self.program.describe()}")
        for index, row in enumerate(rows):
            cells = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            verdict = "RESULT" if index == 0 else self.candidates[index - 1].reason
            lines.append(f"  {cells}  {verdict}")
        lines.append(f"chosen: {self.chosen}" if self.chosen else "chosen: none")
        return "\n".join(lines)


@dataclass(frozen=True)
class Selection:
    """The chosen device, its snapshot at choice time and the full explanation."""

    device: Device
    snapshot: DeviceSnapshot
    explanation: Explanation


# --- selection -----------------------------------------------------------------------


def static_reason(device: Device, request: QpuRequest) -> str | None:
    """Why ``device`` can never serve ``request`` whatever its state, or None.

    Callers probe only the devices that pass, which keeps vendor calls down.
    """
    if request.device is not None and request.device not in (device.name, device.id):
        return f"not the requested device '{request.device}'"
    if request.vendor is not None and device.vendor != request.vendor:
        return f"vendor {device.vendor}, request asks for {request.vendor}"
    if request.device_class is not None and device.device_class != request.device_class:
        return f"class {device.device_class}, request asks for {request.device_class}"
    if request.min_qubits is not None and device.qubits < request.min_qubits:
        return f"{device.qubits} qubits < min_qubits {request.min_qubits}"
    cost = device.price.cost(request.shots)
    if request.max_cost is not None and cost > request.max_cost + 1e-12:
        return f"estimated cost ${cost:.4f} > max_cost ${request.max_cost:g}"
    return None


def static_candidates(devices: Iterable[Device], request: QpuRequest) -> list[Device]:
    """The devices worth probing for ``request``."""
    return [device for device in devices if static_reason(device, request) is None]


def slot_limit(device: Device, snapshot: DeviceSnapshot | None) -> int:
    """How many tasks this site keeps in flight on ``device``: the catalog's ``slots``,
    no more than the device's own capacity when it publishes one (QRMI's
    ``ResourceCapacity`` of an on-premises QPU: its ``max_slots``)."""
    if snapshot is None or snapshot.capacity is None:
        return device.slots
    return max(0, min(device.slots, snapshot.capacity[1]))


def slot_reason(
    device: Device, snapshot: DeviceSnapshot | None, in_flight: int, *, named: bool = True
) -> str | None:
    """Why no new task goes to ``device`` now for want of a slot, else None: all of the
    site's slots there in use, or the device itself has none free (its capacity).
    ``named``: the sentence names the device."""
    where = f" of {device.name}" if named else ""
    if snapshot is not None and snapshot.capacity is not None and snapshot.capacity[0] <= 0:
        return f"no free slot{where} (0 of {snapshot.capacity[1]} available)"
    limit = slot_limit(device, snapshot)
    if in_flight >= limit:
        if named:
            return f"all {limit} slot(s) of {device.name} in use"
        return f"all {limit} slot{'s' if limit != 1 else ''} in use"
    return None


def _runtime_reason(
    device: Device,
    snapshot: DeviceSnapshot | None,
    request: QpuRequest,
    expected_wait: float | None,
    in_flight: int,
    success: float | None,
) -> str | None:
    if snapshot is None:
        return "not probed"
    if snapshot.status is not DeviceStatus.ONLINE:
        detail = f" ({snapshot.reason})" if snapshot.reason else ""
        return f"{snapshot.status.value.lower()}{detail}"
    if not snapshot.in_window:
        return "outside its execution window"
    slots = slot_reason(device, snapshot, in_flight, named=False)
    if slots is not None:
        return slots
    max_wait = request.max_wait
    if max_wait is not None and expected_wait is not None and expected_wait > max_wait:
        wait, limit = _seconds(expected_wait), _seconds(max_wait)
        return f"expected wait {wait} > max_wait {limit}"
    if request.min_fidelity is not None:
        if success is None:
            return f"no calibration data to meet min_fidelity {request.min_fidelity:g}"
        if success < request.min_fidelity:
            return f"expected success {success:.3f} < min_fidelity {request.min_fidelity:g}"
    return None


def expected_success(
    device: Device, calibration: Calibration | None, program: ProgramCounts
) -> float | None:
    """Probability that ``program`` runs on ``device`` without a gate or readout error,
    from the device's median fidelities; 1 on a simulator, None when a figure the
    program needs is missing."""
    if device.device_class == "simulator":
        return 1.0
    if calibration is None:
        return None
    success = 1.0
    for count, figure in (
        (program.one_qubit_gates, calibration.one_qubit_median),
        (program.two_qubit_gates, calibration.two_qubit_median),
        (program.measured, calibration.readout_median),
    ):
        if count == 0:
            continue
        if figure is None:
            return None
        success *= figure**count
    return success


def _rank_key(policy: str, c: Candidate) -> tuple[Any, ...]:
    cost = round(c.cost, 9)
    wait = math.inf if c.expected_wait is None else round(c.expected_wait, 6)
    if policy == "min-cost":
        return (cost, wait, c.device)
    if policy == "min-queue":
        depth = (c.queue_depth is None, c.queue_depth or 0, c.queue_capped)
        return (depth, cost, c.device)
    if policy == "max-fidelity":
        success = math.inf if c.success is None else -round(c.success, FIDELITY_DECIMALS)
        return (success, cost, wait, c.device)
    return (wait, cost, c.device)  # min-wait and explicit (a single candidate)


_WIN_REASON = {
    "explicit": "chosen: the requested device",
    "min-cost": "chosen: lowest estimated cost",
    "min-queue": "chosen: shortest queue",
    "min-wait": "chosen: shortest expected wait",
    "max-fidelity": "chosen: highest expected success",
}


def select_device(
    devices: Iterable[Device],
    snapshots: Mapping[str, DeviceSnapshot],
    request: QpuRequest,
    *,
    estimator: DrainEstimator | None = None,
    in_flight: Mapping[str, int] | None = None,
    program: ProgramCounts | None = None,
    excluded: Mapping[str, str] | None = None,
    compiled: Mapping[str, float] | None = None,
    ahead: Mapping[str, int] | None = None,
) -> Selection:
    """Pick the device for ``request`` among ``devices`` given their ``snapshots``.

    ``snapshots`` maps device names to their latest probe; ``in_flight`` maps device
    names to the tasks this site has running there (a device whose slots are all taken
    is dropped). ``program`` is the gate count of the task's program (default: a Bell
    pair), used by max-fidelity and min_fidelity. ``excluded`` maps device names the
    caller rules out to the reason, shown as the verdict (``flux_quantum.site.access``:
    "not allowed: ...", ``flux_quantum.site.quota``: "over quota: ..."). ``compiled``
    maps device names to the program's expected success as compiled for them (its
    gates and depth after routing, on the chosen qubits, with the device's errors:
    ``flux_quantum.compiler``), which replaces the estimate from the counts. ``ahead``
    maps device names to the job's own other tasks placed there since the probe (a
    batch, a cut's subexperiments): they wait ahead of this one, so a batch spreads over
    equal devices instead of piling onto the first. Raises NoDeviceError, with the
    explanation, when nothing qualifies.
    """
    estimator = estimator or DrainEstimator()
    busy = in_flight or {}
    ruled_out = excluded or {}
    uses_fidelity = request.policy == "max-fidelity" or request.min_fidelity is not None
    counts = (program or BELL_COUNTS) if uses_fidelity else None
    eligible: list[Candidate] = []
    dropped: list[Candidate] = []
    catalog = list(devices)
    for device in catalog:
        if request.device is not None and request.device not in (device.name, device.id):
            continue  # an explicit request has one candidate; the rest are not listed
        snapshot = snapshots.get(device.name)
        cost = device.price.cost(request.shots)
        drain = estimator.estimate(device)
        wait = None
        depth = snapshot.queue_depth if snapshot is not None else None
        if depth is not None:
            depth += (ahead or {}).get(device.name, 0)
            wait = depth * drain.seconds_per_task
        calibration = snapshot.calibration if snapshot is not None else None
        success = expected_success(device, calibration, counts) if counts else None
        if counts and compiled is not None and device.name in compiled:
            success = compiled[device.name]
        reason = static_reason(device, request) or ruled_out.get(device.name)
        if reason is None:
            reason = _runtime_reason(
                device, snapshot, request, wait, busy.get(device.name, 0), success
            )
        candidate = Candidate(
            device=device.name,
            vendor=device.vendor,
            device_class=device.device_class,
            qubits=device.qubits,
            status=snapshot.describe_status() if snapshot else None,
            queue_depth=depth,
            queue_capped=snapshot.queue_capped if snapshot else False,
            cost=cost,
            drain=drain,
            expected_wait=wait,
            eligible=reason is None,
            rank=None,
            reason=f"dropped: {reason}" if reason else "",
            success=success,
            calibration=calibration,
        )
        (dropped if reason else eligible).append(candidate)

    policy = request.policy
    eligible.sort(key=lambda c: _rank_key(policy, c))
    ranked = [
        replace(c, rank=i, reason=_WIN_REASON[policy] if i == 1 else f"eligible: rank {i}")
        for i, c in enumerate(eligible, start=1)
    ]
    chosen = ranked[0].device if ranked else None
    explanation = Explanation(
        request=request.describe(),
        policy=policy,
        order=ORDERS[policy],
        shots=request.shots,
        chosen=chosen,
        candidates=tuple(ranked + dropped),
        program=counts,
    )
    if chosen is None:
        raise NoDeviceError(_nothing_qualifies(request, dropped, catalog), explanation)
    device = next(d for d in catalog if d.name == chosen)
    return Selection(device=device, snapshot=snapshots[chosen], explanation=explanation)


def _nothing_qualifies(request: QpuRequest, dropped: list[Candidate], catalog: list[Device]) -> str:
    head = f"no device satisfies qpu request '{request.target}'"
    if request.device is not None and not any(request.device in (d.name, d.id) for d in catalog):
        known = ", ".join(d.name for d in catalog) or "none"
        return f"{head}: no catalog device is named '{request.device}' (known: {known})"
    details = ", ".join(f"{c.device} {c.reason.removeprefix('dropped: ')}" for c in dropped)
    return f"{head}: {details or 'the catalog is empty'}"


def _figure(calibration: Calibration | None, name: str) -> float | None:
    return getattr(calibration, name) if calibration is not None else None


def _percent(value: float | None) -> str:
    """A probability for tables: 99.5%, 62.1%; - when unknown."""
    return "-" if value is None else f"{100 * value:.1f}%"


def _positive_float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _seconds(seconds: float) -> str:
    """Compact duration for tables: 0.5s, 42s, 2m40s, 12m, 3.5h, 2.1d."""
    if seconds < 10:
        return f"{seconds:.1f}s".replace(".0s", "s")
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h".replace(".0h", "h")
    return f"{seconds / 86400:.1f}d".replace(".0d", "d")
