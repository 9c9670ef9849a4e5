"""Devices with waiting tasks: their vendor status, and the Fluxion graph following it.

Every ``device_check_interval`` each device that has a task waiting is probed (in a
worker); what the vendor says feeds the drain estimator, marks the device's qpu vertices
up or down in Fluxion's graph (only for devices in the graph, only on a change), and a
device that went offline or out of its window fails over the tasks waiting on it. This
part never creates or releases anything.
"""

from __future__ import annotations

import functools
import math
import syslog
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol import events
from flux_quantum.selection.policies import slot_limit
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.outcomes import Outcomes, problem_base
from flux_quantum.service.state import DeviceWatch, Phase
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus


class Devices:
    def __init__(self, ctx: ServiceContext, outcomes: Outcomes) -> None:
        self.ctx = ctx
        self.outcomes = outcomes
        self.watches: dict[str, DeviceWatch] = {}
        self._up: dict[str, tuple[bool, int | None]] = {}
        # The devices with waiting tasks, found once per scan_interval (not at every
        # tick: a walk over every unit).
        self._watched: dict[str, Device] = {}
        self._watched_due = -math.inf

    def check(self, now: float) -> None:
        """Probe each device that has waiting tasks every device_check_interval."""
        ctx = self.ctx
        if now >= self._watched_due:
            self._watched_due = now + ctx.options.scan_interval
            self._watched = {}
            for unit in ctx.units:
                for attempt in unit.attempts():
                    if attempt.phase is Phase.TRACK and attempt.device is not None:
                        self._watched[attempt.device.name] = attempt.device
        watched = self._watched
        for name in [n for n in self.watches if n not in watched]:
            if not self.watches[name].busy:
                del self.watches[name]
        for name, device in watched.items():
            watch = self.watches.setdefault(
                name, DeviceWatch(device, due=now + ctx.options.device_check_interval)
            )
            if watch.busy or watch.due > now:
                continue
            try:
                vendor = ctx.vendor(device.vendor)
            except (ValueError, FluxQuantumError):
                continue
            watch.busy = True

            def done(snapshot: Any, error: Any, watch: DeviceWatch = watch) -> None:
                watch.busy = False
                watch.due = ctx.clock() + ctx.options.device_check_interval
                if error is not None or snapshot.status is DeviceStatus.UNREACHABLE:
                    ctx.counters.vendor_errors += 1
                    # Probed again at the next check, later while it keeps failing.
                    decision = ctx.retry.failed(watch.retry, retryable=True)
                    watch.due = max(watch.due, ctx.clock() + decision.delay)
                    why = error if error is not None else snapshot.reason
                    level = syslog.LOG_WARNING if decision.first else syslog.LOG_DEBUG
                    ctx.log(level, f"device {watch.device.name}: probe failed: {why}")
                else:
                    watch.retry.clear()
                if error is None:
                    watch.snapshot = snapshot
                    ctx.device_snapshots[snapshot.device] = snapshot
                    ctx.estimator.observe(snapshot)
                    self.seen(watch.device, snapshot)

            ctx.workers.submit(functools.partial(vendor.probe, device), done)

    def rows(self) -> list[dict[str, Any]]:
        """Each catalog device the service has probed: its status, queue depth and
        forecast wait (the depth at the drain it learned), as of the latest probe
        (``status`` and the metrics: aggregates only, nobody's job)."""
        ctx = self.ctx
        out = []
        for device in ctx.catalog.devices:
            snap = ctx.device_snapshots.get(device.name)
            if snap is None:
                continue
            depth = snap.queue_depth
            drain = ctx.estimator.estimate(device).seconds_per_task
            out.append(
                {
                    "device": device.name,
                    "vendor": device.vendor,
                    "status": snap.status.value,
                    "available": snap.available,
                    "queue_depth": depth,
                    "forecast_wait": None if depth is None else round(depth * drain, 1),
                    "probed_at": round(snap.t, 3),
                }
            )
        return out

    def probe_soon(self, name: str) -> bool:
        """Probe device ``name`` at the next check rather than at its interval (a vendor
        event says it changed); False when it is not watched or a probe is under way."""
        watch = self.watches.get(name)
        if watch is None or watch.busy:
            return False
        watch.due = min(watch.due, self.ctx.clock())
        return True

    def seen(self, device: Device, snapshot: DeviceSnapshot) -> None:
        """What a probe said: graph status, and fail-over of tasks on a device gone."""
        if snapshot.status is DeviceStatus.UNREACHABLE:
            return
        capacity = None if snapshot.capacity is None else slot_limit(device, snapshot)
        self.graph_status(device, snapshot.available, capacity)
        if snapshot.available:
            return
        if snapshot.status is DeviceStatus.PAUSED:
            # Up but taking no work (QRMI's Paused): its queued tasks keep their place
            # and start when it resumes, so they stay; their jobs stay held (``Release``
            # releases nothing onto a paused device) and no new task goes there.
            return
        status = snapshot.describe_status()
        for unit in self.ctx.units:
            for program in unit.programs:
                if not unit.active:
                    break
                attempt = program.attempt
                if (
                    attempt.phase is Phase.TRACK
                    and not attempt.busy
                    and attempt.device is not None
                    and attempt.device.name == device.name
                ):
                    record = events.DeviceUnavailable(
                        **problem_base(program, attempt), status=status
                    )
                    self.outcomes.task_problem(
                        unit,
                        program,
                        record,
                        f"device {device.name} became {status} while the task waited",
                    )

    def graph_status(self, device: Device, up: bool, slots: int | None = None) -> None:
        """Keep the device's Fluxion vertices up or down as the vendor says, and as many
        slot vertices up as the capacity it publishes (``slots``; only for devices in
        the graph, only on a change)."""
        if self._up.get(device.name) == (up, slots):
            return
        self._up[device.name] = (up, slots)
        try:
            if device.name in self.ctx.flux.graph_devices():
                self.ctx.flux.set_device_up(device.name, up, slots)
                state = "up" if up else "down"
                if up and slots is not None:
                    state += f" ({min(slots, device.slots)} of {device.slots} slots)"
                self.ctx.log(syslog.LOG_INFO, f"graph: {device.name} {state}")
        except Exception as exc:
            self.ctx.log(syslog.LOG_WARNING, f"graph: cannot mark {device.name}: {exc}")
