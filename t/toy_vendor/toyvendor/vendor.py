"""``ToyVendor``: an in-memory vendor on flux-quantum's shared constructor.

Its "client" is a dictionary of tasks; a task completes on its first poll with every
shot measuring zeros; a merged task (``submit_set``) holds each program's shots and
splits back (``results``). A call to a device whose id ends in ``-down`` raises the
client's ``ToyRefused`` (503), which the descriptor's error mapping translates.
``warm_up`` is the descriptor's: what the service calls in a worker at start.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import (
    CatalogVendor,
    DeviceSnapshot,
    DeviceStatus,
    TaskRef,
    TaskResult,
    TaskSnapshot,
    TaskState,
)
from toyvendor import VENDOR
from toyvendor.errors import ToyRefused

WARMED: list[str] = []  # what warm_up did, for the tests to read


def warm_up() -> None:
    WARMED.append("toy")


@dataclass(frozen=True)
class ToySettings:
    endpoint: str = "toy://default"
    queue: int = 0
    timeout: float = 10.0

    @classmethod
    def from_catalog(cls, section: Mapping[str, str], **overrides: Any) -> ToySettings:
        values: dict[str, Any] = {}
        if section.get("endpoint"):
            values["endpoint"] = section["endpoint"]
        if section.get("queue"):
            values["queue"] = int(section["queue"])
        return cls(**values, **overrides)


class ToyVendor(CatalogVendor[ToySettings]):
    descriptor = VENDOR
    settings_type = ToySettings
    translated = (ToyRefused,)

    def __init__(self, settings: ToySettings | None = None, **common: Any) -> None:
        super().__init__(settings, **common)
        self.tasks: dict[str, tuple[str, int, str]] = {}
        self.sets: dict[str, list[int]] = {}  # a merged task's programs' shots
        self._ids = itertools.count(1)

    def _client_call(self, device: Device) -> None:
        if device.id.endswith("-down"):
            raise ToyRefused(f"{device.id} is down", 503)

    def probe(self, device: Device) -> DeviceSnapshot:
        self._call("probe", device.name, lambda: self._client_call(device))
        return DeviceSnapshot(
            device.name,
            DeviceStatus.ONLINE,
            queue_depth=self.settings.queue,
            price=device.price,
            t=self._clock(),
        )

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        self._call("create", device.name, lambda: self._client_call(device))
        task_id = next((t for t, (_, _, k) in self.tasks.items() if k == token), None)
        if task_id is None:
            task_id = f"toy-{next(self._ids)}"
            self.tasks[task_id] = (device.name, shots, token)
        return TaskRef(self.name, device.name, task_id, token)

    def submit_set(
        self,
        device: Device,
        programs: Sequence[tuple[str, int]],
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        task = self.submit(device, programs[0][0], sum(s for _, s in programs), token)
        self.sets[task.task_id] = [shots for _, shots in programs]
        return task

    def results(self, task: TaskRef) -> list[TaskResult]:
        shots = self.sets.get(task.task_id)
        if shots is None:
            return [self.result(task)]
        return [TaskResult(task, {"0": n}) for n in shots]

    def poll(self, task: TaskRef) -> TaskSnapshot:
        return TaskSnapshot(task, TaskState.COMPLETED, t=self._clock())

    def cancel(self, task: TaskRef) -> None:
        self.tasks.pop(task.task_id, None)

    def result(self, task: TaskRef) -> TaskResult:
        _, shots, _ = self.tasks[task.task_id]
        return TaskResult(task, {"0": shots})

    def attach(self, task_id: str) -> TaskRef:
        device, _, token = self.tasks[task_id]
        return TaskRef(self.name, device, task_id, token)
