"""The Braket side's devices on the emulator: their queues, GetDevice and SearchDevices.

This module owns the emulated Braket devices of a scenario: one ``DeviceQueue`` each (the
shared queue model, by device ARN) and its capabilities document, which device a region's
endpoint knows, and the answers to GetDevice (status and its reason, queue sizes,
capabilities) and SearchDevices. It must never sleep holding the side's lock, never read
the wall clock, and never change a queue but through the queue's methods.
"""

from __future__ import annotations

import threading
from typing import Any

from flux_quantum.emulator.braket import search
from flux_quantum.emulator.braket.capabilities import capabilities_json, grid_connectivity
from flux_quantum.emulator.braket.pulse import has_pulse, native_gate_calibrations
from flux_quantum.emulator.braket.scenario import DeviceSpec, Scenario
from flux_quantum.emulator.braket.wire import BraketRefusal, braket_error, invalid, iso8601
from flux_quantum.emulator.clock import Clock, timestamp
from flux_quantum.emulator.queue import DeviceQueue
from flux_quantum.emulator.wire import Response, json_response

DEVICE_QUEUE_CAP = 4000


class Devices:
    """The scenario's Braket devices and their queues, behind the side's lock."""

    def __init__(self, scenario: Scenario, clock: Clock, seed: int, lock: threading.Lock) -> None:
        self.scenario = scenario
        self.clock = clock
        self._lock = lock
        self._queues = {spec.arn: DeviceQueue(spec, seed) for spec in scenario.devices}
        # By (device, the emulator's URL as the client reached it): a document may name
        # the emulator's own URLs (a Rigetti QPU's calibrations).
        self._capabilities: dict[tuple[str, str], str] = {}

    def queue(self, arn: str) -> DeviceQueue:
        """The queue of the device ``arn`` (lock held while it is read or changed)."""
        return self._queues[arn]

    def spec(self, arn: str) -> DeviceSpec | None:
        return self.scenario.device(arn)

    def for_region(self, arn: str, region: str, for_create: bool = False) -> DeviceSpec:
        """The device, if this region's endpoint knows it."""
        spec = self.scenario.device(arn)
        device_region = arn.split(":")[3] if arn.count(":") >= 5 else ""
        if spec is not None and not (
            self.scenario.strict_regions and device_region and device_region != region
        ):
            return spec
        where = f" in region {region}" if spec is not None else ""
        if for_create:
            raise invalid(f"Device {arn} was not found{where}")
        raise BraketRefusal(
            "GetDevice",
            braket_error("ResourceNotFoundException", 404, f"Device {arn} not found{where}"),
        )

    # -- GetDevice ----------------------------------------------------------------------------

    def capabilities(self, spec: DeviceSpec, base_url: str) -> str:
        """The device's capabilities document (lock held)."""
        key = (spec.arn, base_url)
        if key not in self._capabilities:
            self._capabilities[key] = capabilities_json(spec, self.clock.epoch, base_url)
        return self._capabilities[key]

    def calibrations(self, name: str) -> Response:
        """GET of a Rigetti QPU's native gate calibrations (its ARN's last segment)."""
        spec = next((s for s in self.scenario.devices if s.arn.split("/")[-1] == name), None)
        if spec is None or not has_pulse(spec):
            return json_response(404, {"message": f"no calibrations for device {name!r}"})
        pairs = [
            (int(a) - 1, int(b) - 1)
            for a, neighbours in grid_connectivity(spec.qubits).items()
            for b in neighbours
        ]
        return json_response(200, native_gate_calibrations(spec, pairs))

    def get(self, arn: str, region: str, base_url: str = "") -> Response:
        with self._lock:
            spec = self.for_region(arn, region)
            queue = self._queues[spec.arn]
            now = self.clock.now()
            status = queue.status(now)
            size = queue.queue_size(now)
            priority = queue.priority_size(now)
            size -= priority
            capabilities_document = self.capabilities(spec, base_url)
        doc: dict[str, Any] = {
            "deviceArn": spec.arn,
            "deviceName": spec.name,
            "providerName": spec.provider,
            "deviceType": spec.type,
            "deviceStatus": status.status,
            "deviceCapabilities": capabilities_document,
            "deviceQueueInfo": [
                {
                    "queue": "QUANTUM_TASKS_QUEUE",
                    "queueSize": str(size) if size <= DEVICE_QUEUE_CAP else f">{DEVICE_QUEUE_CAP}",
                    "queuePriority": "Normal",
                },
                {
                    "queue": "QUANTUM_TASKS_QUEUE",
                    "queueSize": str(priority),
                    "queuePriority": "Priority",
                },
                {"queue": "JOBS_QUEUE", "queueSize": "0"},
            ],
        }
        if status.status != "ONLINE" and status.reason is not None:
            reason: dict[str, str] = {
                "reason": status.reason,
                "updatedAt": iso8601(timestamp(self.clock, now)),
            }
            if status.started_at is not None:
                reason["startedAt"] = iso8601(timestamp(self.clock, status.started_at))
            if status.estimated_end_at is not None:
                reason["estimatedEndAt"] = iso8601(timestamp(self.clock, status.estimated_end_at))
            doc["deviceStatusReason"] = reason
        return json_response(200, doc)

    # -- SearchDevices ------------------------------------------------------------------------

    def search(self, body: dict[str, Any], region: str) -> Response:
        filters = search.filters(body, "SearchDevices")
        arns: set[str] | None = None
        for f in filters:
            if f["name"] != "deviceArn":
                raise invalid(f"filter name {f['name']!r} is not supported (only deviceArn)")
            arns = set(f["values"]) if arns is None else arns & set(f["values"])
        with self._lock:
            now = self.clock.now()
            rows = []
            for spec in self.scenario.devices:
                if arns is not None and spec.arn not in arns:
                    continue
                if self.scenario.strict_regions and spec.region and spec.region != region:
                    continue
                rows.append(
                    {
                        "deviceArn": spec.arn,
                        "deviceName": spec.name,
                        "providerName": spec.provider,
                        "deviceType": spec.type,
                        "deviceStatus": self._queues[spec.arn].status(now).status,
                    }
                )
        page, token = search.paginate(rows, body)
        return json_response(200, {"devices": page, **token})
