"""The emulator's IBM Quantum System side alone behind its loopback HTTP server
(``Served``), for the tests that drive it through the real qrmi client (the emulator
tier): the backend the tests share, ``BACKEND``. Starts nothing at import."""

from __future__ import annotations

from typing import Any

import qrmi
from served_side import ServedSide

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.ibmqs import PREFIX, IbmQsScenario, IbmQsService

BACKEND = {"name": "ibm_kobe", "qubits": 5, "lanes": 2, "queue": {"depth": 1, "service_time": 10}}


class Served(ServedSide):
    """An ``IbmQsService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        super().__init__(IbmQsService(IbmQsScenario.from_dict(scenario), clock), PREFIX)

    def config(self, backend: str = "ibm_kobe", **extra: str) -> dict[str, str]:
        """The backend's settings (``from_config``'s keys) with a job timeout (QRMI's
        create needs one)."""
        return {**super().config(backend), "QRMI_JOB_TIMEOUT_SECONDS": "600", **extra}

    def resource(self, backend: str = "ibm_kobe", **extra: str) -> Any:
        return qrmi.QuantumResource.from_config(
            backend, qrmi.ResourceType.IBMQuantumSystem, self.config(backend, **extra)
        )
