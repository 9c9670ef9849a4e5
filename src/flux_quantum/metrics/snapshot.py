"""``ServiceSnapshot``: the handler service's state as the metrics show it, at one moment.

``take_snapshot`` runs on the reactor thread (the only one that may read the service's
state) and copies what the metrics need into a frozen record: held jobs by state and
reason (the service's own words for them: ``Face.held``), by device, their nodes and
cores, those whose task waited past its ``max_wait``; the devices' status, queue depth
and forecast wait; the ledger's availability; sessions, workers, the service's
counters. The exporter's threads read only the last record published, never the
service. Every label value is bounded (a phase, a reason from a fixed list, a catalog
device or vendor): never a job, a task or a user. It reads the service through the
service's own objects (duck-typed: this package sits below the service, which loads it)
and never calls anything else.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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
        state, reason, device = service.face.held(unit)
        held[(state, reason)] += jobs
        if device is not None:
            by_device[device] += jobs
        for member in unit.jobs.values():
            nodes += member.size.nodes
            cores += member.size.cores
        oldest = max(oldest, now - unit.ready_at)
        limit = unit.request.max_wait
        if limit is not None and any(
            a.queued_at is not None and now - a.queued_at > limit
            for a in unit.attempts()
            if a.phase == "track"
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
