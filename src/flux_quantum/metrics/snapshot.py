"""``ServiceSnapshot``: the handler service's state as the metrics show it, at one moment.

``take_snapshot`` runs on the reactor thread (the only one that may read the service's
state) and copies what the metrics need into a frozen record: held jobs by state and
reason, by device, their nodes and cores, those whose task waited past its
``max_wait``; the devices' status, queue depth and forecast wait; the ledger's
availability; sessions, workers, the service's counters. The exporter's threads read
only the last record published, never the service. Every label value is bounded (a
phase, a reason from a fixed list, a catalog device or vendor): never a job, a task or
a user. It never calls anything outside the service's own objects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.service.state import Attempt, Phase, Unit
from flux_quantum.service.submission import LEDGER_WAIT
from flux_quantum.vendors.base import DeviceStatus

# Why a held job waits, as a label: what its first unfinished attempt is doing.
REASONS = (
    "queued",  # its task is in the vendor's queue
    "at_release_point",  # its task is there; the unit's other tasks are not yet
    "selecting",  # a device is being chosen
    "submitting",  # its task is being created
    "merging",  # waiting to share one task with other jobs' programs
    "reservation",  # waiting for its reserved window (Braket Direct)
    "ledger",  # the site's ledger is unavailable: no task before its reservation
    "device_paused",  # its device takes no work now
    "no_device",  # no device fits now (all slots busy, none answers)
    "retrying",  # a vendor call failed and is retried
)


@dataclass(frozen=True)
class DeviceRow:
    device: str
    vendor: str
    status: str
    available: bool
    queue_depth: int | None
    forecast_wait: float | None


@dataclass(frozen=True)
class ServiceSnapshot:
    """What the service tracked at ``t`` (wall clock), for the exporter's threads."""

    t: float
    started: float
    units: int = 0
    held: dict[tuple[str, str], int] = field(default_factory=dict)  # (state, reason) -> jobs
    held_by_device: dict[str, int] = field(default_factory=dict)
    held_nodes: int = 0
    held_cores: int = 0
    past_max_wait: int = 0
    oldest_held: float = 0.0  # seconds the longest-held job has waited
    devices: tuple[DeviceRow, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)
    sessions_open: int = 0
    looking_up: int = 0
    workers_busy: int = 0
    workers_queued: int = 0
    ledger: bool = False  # the service keeps a ledger (a site policy)
    ledger_up: bool = True
    ledger_unavailable_for: float = 0.0
    ledger_backlog: int = 0
    reservations_put_off: int = 0
    # Measured by the feed between snapshots: node- and core-seconds held jobs waited.
    node_seconds: float = 0.0
    core_seconds: float = 0.0
    build_seconds: float = 0.0  # the reactor's CPU time to take the previous snapshot


def held_state(attempt: Attempt) -> str:
    return "merging" if attempt.pooled else attempt.phase.value


def held_reason(service: Any, unit: Unit, attempt: Attempt) -> str:
    """Why the attempt's jobs wait, one of ``REASONS``."""
    holding = attempt.retry.holding
    if attempt.pooled:
        return "merging"
    if holding is not None and holding.startswith(LEDGER_WAIT):
        return "ledger"
    if service.reservations.waiting_reason(unit) is not None:
        return "reservation"
    if holding is not None:
        return "no_device" if attempt.wait_posted is not None else "retrying"
    phase = attempt.phase
    if phase is Phase.TRACK:
        device = attempt.device
        snap = service.ctx.device_snapshots.get(device.name) if device is not None else None
        if snap is not None and snap.status is DeviceStatus.PAUSED:
            return "device_paused"
        return "queued"
    if phase is Phase.READY:
        return "at_release_point"
    return "selecting" if phase is Phase.SELECT else "submitting"


def take_snapshot(service: Any, now: float) -> ServiceSnapshot:
    """The service's state now (reactor thread). ``service``: a ``QuantumService``."""
    ctx = service.ctx
    held: Counter[tuple[str, str]] = Counter()
    by_device: Counter[str] = Counter()
    nodes = cores = past = 0
    oldest = 0.0
    for unit in ctx.units:
        jobs = len(unit.jobs)
        if not unit.active or not jobs:
            continue
        attempts = unit.attempts()
        first = next((a for a in attempts if a.phase is not Phase.READY), attempts[0])
        held[(held_state(first), held_reason(service, unit, first))] += jobs
        if first.device is not None:
            by_device[first.device.name] += jobs
        for member in unit.jobs.values():
            nodes += member.size.nodes
            cores += member.size.cores
        oldest = max(oldest, now - unit.t_submit)
        limit = unit.request.max_wait
        if limit is not None and any(
            a.queued_at is not None and now - a.queued_at > limit
            for a in attempts
            if a.phase is Phase.TRACK
        ):
            past += jobs
    charges = service.charges
    outage_since = charges.outage_since
    return ServiceSnapshot(
        t=now,
        started=service.started,
        units=len(ctx.units),
        held=dict(held),
        held_by_device=dict(by_device),
        held_nodes=nodes,
        held_cores=cores,
        past_max_wait=past,
        oldest_held=oldest,
        devices=tuple(
            DeviceRow(
                r["device"],
                r["vendor"],
                r["status"],
                r["available"],
                r["queue_depth"],
                r["forecast_wait"],
            )
            for r in service.devices.rows()
        ),
        counters=dict(ctx.counters.__dict__),
        sessions_open=len(service.sessions.leases),
        looking_up=service.lookups.pending,
        workers_busy=ctx.workers.busy,
        workers_queued=ctx.workers.queued,
        ledger=charges.site is not None,
        ledger_up=charges.outage is None,
        ledger_unavailable_for=0.0 if outage_since is None else max(0.0, now - outage_since),
        ledger_backlog=len(charges.backlog),
        reservations_put_off=charges.held_for_ledger,
    )
