"""The emulator's IQM side alone behind its loopback HTTP server (``Served``), for the
tests that drive it through the real qrmi client (the emulator tier): the device the
tests share, ``DEVICE``. Starts nothing at import."""

from __future__ import annotations

from typing import Any

import qrmi
from served_side import ServedSide

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.iqm import PREFIX, IqmScenario, IqmService

DEVICE = {"id": "garnet", "qubits": 5, "queue": {"depth": 2, "service_time": 10}}


class Served(ServedSide):
    """An ``IqmService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        super().__init__(IqmService(IqmScenario.from_dict(scenario), clock), PREFIX)

    def resource(self, device: str = "garnet", **extra: str) -> Any:
        config = {**self.config(device), **extra}
        return qrmi.QuantumResource.from_config(device, qrmi.ResourceType.IQMServer, config)
