"""Choosing a device for a program's attempt, and saying why.

``Selection`` probes the candidate devices the job's owner may use (in a worker; a
device the site's rules refuse is never probed), lets the policy choose among those
whose task fits the site's quotas, respecting device slots and older jobs waiting for
the same device (first come, first served), and records the choice with its
explanation (``qpu-select``). When no device fits it waits if the obstacle passes by
itself (a vendor that did not answer, all slots busy) and fails over or fails the unit
when it does not. ``compact_explanation`` shortens the policy's explanation for the
eventlog. This part never creates a task.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from flux_quantum import events
from flux_quantum.catalog import Device
from flux_quantum.policy import Explanation, NoDeviceError, select_device
from flux_quantum.request import QpuRequest
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.face import Face
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.state import Attempt, Phase, Program, Unit
from flux_quantum.vendors import probe_devices
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus


def compact_explanation(
    explanation: Explanation, limit: int = 6, site: Collection[str] = ()
) -> dict[str, Any]:
    """The policy's explanation, short enough for an eventlog entry: the eligible devices
    first, then those the ``site`` policy dropped (a job's owner wants to know why those
    were left out), then the rest."""
    order = {True: 0, False: 2}
    shown = sorted(
        explanation.candidates,
        key=lambda c: 1 if not c.eligible and c.device in site else order[c.eligible],
    )
    rows = []
    for c in shown[:limit]:
        rows.append(
            {
                "device": c.device,
                "status": c.status,
                "queue": c.queue_depth,
                "wait": None if c.expected_wait is None else round(c.expected_wait, 1),
                "cost": round(c.cost, 4),
                "verdict": c.reason,
            }
        )
        if c.success is not None:  # the figure max-fidelity and min_fidelity used
            rows[-1]["success"] = round(c.success, 4)
    out: dict[str, Any] = {
        "policy": explanation.policy,
        "order": explanation.order,
        "chosen": explanation.chosen,
        "candidates": rows,
    }
    if len(explanation.candidates) > limit:
        out["more"] = len(explanation.candidates) - limit
    return out


class Selection:
    def __init__(
        self,
        ctx: ServiceContext,
        calls: AttemptCalls,
        face: Face,
        outcomes: Outcomes,
        charges: Charges,
    ) -> None:
        self.ctx = ctx
        self.calls = calls
        self.face = face
        self.outcomes = outcomes
        self.charges = charges

    def request_for(self, unit: Unit, attempt: Attempt) -> QpuRequest:
        """The request as a fail-over sees it: a named device is no longer required
        (its replacement is chosen by min-wait), and ``class`` may be forced."""
        request = unit.request
        if attempt.number == 0 or request.failover == "fail":
            return request
        changes: dict[str, Any] = {}
        if request.device is not None:
            changes.update(device=None, policy="min-wait")
        if attempt.device_class is not None:
            changes["device_class"] = attempt.device_class
        return replace(request, **changes) if changes else request

    def _pool(self, attempt: Attempt) -> list[Device]:
        return [d for d in self.ctx.catalog.devices if d.name not in attempt.exclude]

    def _in_flight(self, unit: Unit) -> dict[str, int]:
        """Tasks this service watches per device, other units' only: a batch's own
        tasks never block each other (or it could never be released)."""
        counts: dict[str, int] = {}
        for other in self.ctx.active_units():
            if other is unit:
                continue
            for attempt in other.attempts():
                if attempt.device is not None and attempt.phase in (
                    Phase.SUBMIT,
                    Phase.TRACK,
                    Phase.READY,
                ):
                    counts[attempt.device.name] = counts.get(attempt.device.name, 0) + 1
        return counts

    def start(self, unit: Unit, program: Program) -> None:
        """Probe the devices the job may use (in a worker), then choose."""
        from flux_quantum.policy import static_candidates

        attempt = program.attempt
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        # Devices the job's owner may not use are never probed.
        refused = self.charges.not_allowed(unit, pool)
        candidates = static_candidates([d for d in pool if d.name not in refused], request)
        vendors = {}
        for device in candidates:
            vendor = self.calls.vendor(unit, program, device.vendor, "select")
            if vendor is None:
                return
            vendors[device.vendor] = vendor
        timeout = self.ctx.options.probe_timeout
        clock, monotonic = self.ctx.clock, self.ctx.monotonic

        def probe() -> dict[str, DeviceSnapshot]:
            return probe_devices(
                candidates, vendors, timeout=timeout, clock=clock, monotonic=monotonic
            )

        self.calls.call(unit, program, probe, self._selected)

    def _selected(
        self, unit: Unit, program: Program, attempt: Attempt, snapshots: Any, error: Any
    ) -> None:
        ctx = self.ctx
        if error is not None:
            self.calls.failed(unit, program, "select", error)
            return
        for snapshot in snapshots.values():
            if snapshot.status is DeviceStatus.UNREACHABLE:
                ctx.counters.vendor_errors += 1  # what qpu-wait will say
            ctx.estimator.observe(snapshot)
            ctx.device_snapshots[snapshot.device] = snapshot
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        in_flight = self._in_flight(unit)
        excluded = self.charges.excluded(unit, program, attempt, pool)
        try:
            selection = select_device(
                pool,
                snapshots,
                request,
                estimator=ctx.estimator,
                in_flight=in_flight,
                program=program.counts,
                excluded=excluded,
            )
        except NoDeviceError as exc:
            self._no_device(unit, program, exc, snapshots, in_flight, request, excluded)
            return
        chosen = selection.device
        older = self._older_waiters(unit, chosen)
        if older >= chosen.slots - in_flight.get(chosen.name, 0):
            # First come, first served: older jobs waiting for this device's slots
            # take them first.
            self.calls.wait(
                unit, program, f"all {chosen.slots} slot(s) of {chosen.name} in use or promised"
            )
            return
        chosen_snapshot = snapshots.get(chosen.name)
        attempt.chosen(
            chosen,
            events.task_token(unit.id, unit.t_submit, program.index, attempt.number),
            chosen_snapshot.queue_depth if chosen_snapshot is not None else None,
        )
        record = events.Select(
            index=program.index,
            attempt=attempt.number,
            device=chosen.name,
            explanation=compact_explanation(selection.explanation, site=excluded),
        )
        ctx.post_all(unit, record)
        self.face.update_memos(unit)

    def _no_device(
        self,
        unit: Unit,
        program: Program,
        exc: NoDeviceError,
        snapshots: Mapping[str, DeviceSnapshot],
        in_flight: Mapping[str, int],
        request: QpuRequest,
        excluded: Mapping[str, str],
    ) -> None:
        """Wait when the obstacle passes by itself (a vendor that did not answer, all
        slots busy); fail over or fail when it does not (offline, out of window, too
        long a queue for max_wait, nothing that matches, nothing the site allows)."""
        from flux_quantum.policy import static_reason

        attempt = program.attempt
        transient = []
        for device in self._pool(attempt):
            if static_reason(device, request) is not None or device.name in excluded:
                continue
            snapshot = snapshots.get(device.name)
            if snapshot is not None and snapshot.status is DeviceStatus.UNREACHABLE:
                transient.append(f"{device.name} did not answer ({snapshot.reason})")
            elif (
                snapshot is not None
                and snapshot.available
                and in_flight.get(device.name, 0) >= device.slots
            ):
                transient.append(f"all {device.slots} slot(s) of {device.name} in use")
        if transient:
            self.calls.wait(unit, program, "; ".join(transient))
            return
        forced = request.device is not None or (
            unit.request.failover == "simulator" and request.device_class != "simulator"
        )
        if (
            unit.request.failover != "fail"
            and forced
            and attempt.number + 1 < self.ctx.options.max_tasks
        ):
            self.outcomes.failover(unit, program, request.device, str(exc))
            return
        self.outcomes.fail_unit(unit, f"qpu: {exc}")

    def _older_waiters(self, unit: Unit, device: Device) -> int:
        """Older units still choosing a device that can only be this one."""
        count = 0
        for other in self.ctx.active_units():
            if other is unit:
                continue
            if (other.t_submit, other.id) >= (unit.t_submit, unit.id):
                continue
            if other.request.device not in (device.name, device.id):
                continue
            count += sum(1 for a in other.attempts() if a.phase is Phase.SELECT)
        return count

    # -- submit
