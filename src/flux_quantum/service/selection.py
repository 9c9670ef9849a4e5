"""Choosing a device for a program's attempt, and saying why.

``Selection`` probes the candidate devices the job's owner may use (in a worker; a
device the site's rules refuse is never probed), lets the policy choose among those
whose task fits the site's quotas, respecting device slots and older jobs waiting for
the same device (first come, first served), and records the choice with its
explanation (``qpu-select``). When no device fits it waits if the obstacle passes by
itself (a vendor that did not answer, all slots busy) and fails over or fails the unit
when it does not. ``compact_explanation`` shortens the policy's explanation for the
eventlog.

Reserved windows (Braket Direct, ``Reservations``): a job that names one is checked (known,
for its user and bank, on the device it asks for) and put on the window's device with
no probing, unless the window takes no more work, when the job's end rule applies at
once (on-demand: an ordinary choice on the window's device; fail). A job that named
none may be routed into a window when the policy chose a Braket QPU and a window opens
sooner than that device's public queue; ``qpu-select``'s explanation says why, or why
not. A window's tasks take no device slot (they skip the public queue). This part never
creates a task.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler import CompileError
from flux_quantum.protocol import events
from flux_quantum.protocol.request import QpuRequest
from flux_quantum.selection.policies import (
    Explanation,
    NoDeviceError,
    select_device,
    slot_limit,
    slot_reason,
)
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.charges import Charges
from flux_quantum.service.compiling import Choices, Compiling
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.merges import Merges
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.state import Attempt, Phase, Program, Unit
from flux_quantum.site import reservations
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus
from flux_quantum.vendors.probing import probe_devices


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
        outcomes: Outcomes,
        charges: Charges,
        reservations: Reservations,
        merges: Merges,
        compiling: Compiling,
    ) -> None:
        self.ctx = ctx
        self.compiling = compiling
        self.calls = calls
        self.outcomes = outcomes
        self.charges = charges
        self.reservations = reservations
        self.merges = merges

    def request_for(self, unit: Unit, attempt: Attempt) -> QpuRequest:
        """The request as a fail-over sees it: a named device is no longer required
        (its replacement is chosen by min-wait), and ``class`` may be forced. A job
        that names a reserved window, or whose window ended (it falls back to the
        public queue), names the window's device."""
        request = unit.request
        named = request.named_reservation
        window = self.reservations.book.named(named) if named is not None else None
        window = window or self.reservations.fell_back(unit)
        if window is not None:
            request = replace(request, device=window.device, policy="explicit")
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
        merged: set[str] = set()
        for other in self.ctx.active_units():
            if other is unit:
                continue
            for program in other.programs:
                attempt = program.attempt
                if (
                    attempt.device is None
                    or attempt.window is not None  # a window's tasks skip the public queue
                    or attempt.phase not in (Phase.SUBMIT, Phase.TRACK, Phase.READY)
                ):
                    continue
                unsent = attempt.phase is Phase.SUBMIT and not attempt.submit_posted
                if unsent and (attempt.pooled or self.merges.alone_reason(other, program) is None):
                    continue  # it may be merged: no task, no slot until it is sent
                if attempt.merge is not None:
                    # A merged task takes one slot, whatever the jobs in it.
                    if attempt.merge.key in merged:
                        continue
                    merged.add(attempt.merge.key)
                counts[attempt.device.name] = counts.get(attempt.device.name, 0) + 1
        return counts

    @staticmethod
    def _own(unit: Unit, program: Program) -> dict[str, int]:
        """The unit's other programs placed on each device and not yet at their
        release point: a batch's own tasks, which its later choices see as waiting
        ahead (so that they spread; they never block each other's slots)."""
        counts: dict[str, int] = {}
        for other in unit.programs:
            attempt = other.attempt
            if other is program or attempt.device is None:
                continue
            if attempt.phase in (Phase.SUBMIT, Phase.TRACK):
                counts[attempt.device.name] = counts.get(attempt.device.name, 0) + 1
        return counts

    def start(self, unit: Unit, program: Program) -> None:
        """Probe the devices the job may use (in a worker), then choose."""
        from flux_quantum.selection.policies import static_candidates

        attempt = program.attempt
        if unit.request.named_reservation is not None and self._into_named(unit, program):
            return
        if not unit.active:
            return
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        # Devices the job's owner may not use are never probed.
        refused = {**self.charges.not_allowed(unit, pool), **program.unfit}
        candidates = static_candidates([d for d in pool if d.name not in refused], request)
        vendors = {}
        for device in candidates:
            vendor = self.calls.vendor(unit, program, device.vendor, "select")
            if vendor is None:
                return
            vendors[device.vendor] = vendor
        timeout = self.ctx.options.probe_timeout
        clock, monotonic = self.ctx.clock, self.ctx.monotonic
        # Weighed by fidelity: each device by the program as compiled for it.
        weighs = request.policy == "max-fidelity" or request.min_fidelity is not None
        choose = self.compiling.for_choice(program, candidates, vendors) if weighs else None
        # Compiling for each candidate may take long: then in the compile stage's lane.
        lane = self.compiling.lane if choose is not None else None

        def probe() -> tuple[dict[str, DeviceSnapshot], Choices]:
            snapshots = probe_devices(
                candidates, vendors, timeout=timeout, clock=clock, monotonic=monotonic
            )
            return snapshots, choose() if choose is not None else {}

        self.calls.call(unit, program, probe, self._selected, lane=lane)

    def _into_named(self, unit: Unit, program: Program) -> bool:
        """A job that names a reserved window: True when it is decided here (put on the
        window's device to wait for its admission, or failed); False when its window
        ended and its end rule sends it to the public queue (an ordinary choice)."""
        ctx = self.ctx
        attempt = program.attempt
        try:
            window = self.reservations.named(
                unit, lambda: self.charges.requester(unit) if self.charges.enabled else None
            )
        except LookupError as exc:
            self.outcomes.fail_unit(unit, f"qpu: {exc.args[0]}")
            return True
        device = ctx.catalog.get(window.device)
        assert device is not None  # Reservations.named checked it
        refused = self.charges.not_allowed(unit, [device])
        if device.name in refused:
            self.outcomes.fail_unit(unit, f"qpu: {refused[device.name]}")
            return True
        now = ctx.clock()
        if self.reservations.ended(window, now):
            seconds = self.reservations.task_seconds(window)
            reason = reservations.admission(
                window, now=now, lead=0.0, active=0, task_seconds=seconds
            ).reason
            self.outcomes.window_ended(unit, window, reason)
            return not unit.active
        attempt.chosen(
            device,
            events.task_token(unit.id, unit.t_submit, program.index, attempt.number),
            None,
            window=window,
        )
        self.reservations.waits(unit, window)
        explanation = {
            "policy": unit.request.policy,
            "order": "reservation",
            "chosen": device.name,
            "candidates": [],
            "reservation": {
                "name": window.name,
                "reason": (
                    f"the job asked for {window.label} on {device.name} "
                    f"({reservations.iso(window.start)}..{reservations.iso(window.end)}); "
                    "it waits held with no task until admitted"
                ),
            },
        }
        record = events.Select(
            index=program.index,
            attempt=attempt.number,
            device=device.name,
            explanation=explanation,
        )
        ctx.post_all(unit, record)
        return True

    def _route(
        self, unit: Unit, attempt: Attempt, chosen: Device, explanation: Explanation
    ) -> tuple[reservations.Reservation | None, str | None]:
        """The window the policy routes the unit into (None: the public queue), with the
        route's sentence for ``qpu-select`` (None: no window could take it)."""
        if not self.reservations.routable(unit, chosen):
            return None, None
        route = self.reservations.route(
            unit, self.charges.requester(unit), explanation, self.ctx.clock()
        )
        window = route.reservation
        if window is not None and (
            window.device in attempt.exclude or self.ctx.catalog.get(window.device) is None
        ):
            window = None
        return window, route.reason or None

    def _selected(
        self, unit: Unit, program: Program, attempt: Attempt, probed: Any, error: Any
    ) -> None:
        ctx = self.ctx
        if error is not None:
            self.calls.failed(unit, program, "select", error)
            return
        snapshots, choices = probed
        try:
            compiled = self.compiling.chosen_from(program, choices)
        except CompileError as exc:
            self.outcomes.fail_unit(unit, f"qpu: {exc}")
            return
        for snapshot in snapshots.values():
            if snapshot.status is DeviceStatus.UNREACHABLE:
                ctx.counters.vendor_errors += 1  # what qpu-wait will say
            ctx.estimator.observe(snapshot)
            ctx.device_snapshots[snapshot.device] = snapshot
        request = self.request_for(unit, attempt)
        pool = self._pool(attempt)
        in_flight = self._in_flight(unit)
        excluded = {
            **program.unfit,
            **self.charges.excluded(unit, program, attempt, pool),
        }
        try:
            selection = select_device(
                pool,
                snapshots,
                request,
                estimator=ctx.estimator,
                in_flight=in_flight,
                program=program.counts,
                excluded=excluded,
                compiled={name: c.success for name, c in compiled.items() if c.success is not None},
                ahead=self._own(unit, program),
            )
        except NoDeviceError as exc:
            self._no_device(unit, program, exc, snapshots, in_flight, request, excluded)
            return
        chosen = selection.device
        window, routing = self._route(unit, attempt, chosen, selection.explanation)
        if window is not None:
            routed = ctx.catalog.get(window.device)
            assert routed is not None
            chosen = routed
        older = self._older_waiters(unit, chosen)
        limit = slot_limit(chosen, snapshots.get(chosen.name))
        if window is None and older >= limit - in_flight.get(chosen.name, 0):
            # First come, first served: older jobs waiting for this device's slots
            # take them first.
            self.calls.wait(
                unit, program, f"all {limit} slot(s) of {chosen.name} in use or promised"
            )
            return
        chosen_snapshot = snapshots.get(chosen.name)
        attempt.chosen(
            chosen,
            events.task_token(unit.id, unit.t_submit, program.index, attempt.number),
            chosen_snapshot.queue_depth if chosen_snapshot is not None else None,
            window=window,
        )
        self.reservations.waits(unit, window)
        explanation = compact_explanation(selection.explanation, site=excluded)
        if routing is not None:
            # Routed into a window, or why not: the job's owner sees which.
            explanation["chosen"] = chosen.name
            explanation["reservation"] = {
                "name": window.name if window is not None else None,
                "reason": routing,
            }
        record = events.Select(
            index=program.index,
            attempt=attempt.number,
            device=chosen.name,
            explanation=explanation,
        )
        ctx.post_all(unit, record)
        self.compiling.adopt(unit, program, compiled)

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
        from flux_quantum.selection.policies import static_reason

        attempt = program.attempt
        transient = []
        for device in self._pool(attempt):
            if static_reason(device, request) is not None or device.name in excluded:
                continue
            snapshot = snapshots.get(device.name)
            if snapshot is not None and snapshot.status is DeviceStatus.UNREACHABLE:
                transient.append(f"{device.name} did not answer ({snapshot.reason})")
            elif snapshot is not None and snapshot.status is DeviceStatus.PAUSED:
                # Up but taking no work now: the job waits for it, as for a busy slot.
                transient.append(f"{device.name} is paused ({snapshot.reason})")
            elif snapshot is not None and snapshot.available:
                busy = slot_reason(device, snapshot, in_flight.get(device.name, 0))
                if busy is not None:
                    transient.append(busy)
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
            # One that will wait to be merged takes no slot of its own.
            count += sum(
                1
                for p in other.programs
                if p.attempt.phase is Phase.SELECT
                and self.merges.alone_reason(other, p, device) is not None
            )
        return count

    # -- submit
