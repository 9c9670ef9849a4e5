"""The emulator's OQTOPUS side alone behind its loopback HTTP server (``Served``), for the
tests that drive it through the real oqtopus-client SDK (the emulator tier): the devices
the tests share (``DEVICES``) and OpenQASM programs (``BELL``, ``FLIP``). Starts nothing
at import."""

from __future__ import annotations

from typing import Any

from oqtopus_client import OqtopusClient, OqtopusConfig
from served_side import ServedSide

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.oqtopus import PREFIX, OqtopusScenario, OqtopusService

DEVICES = [
    {"name": "anemone", "type": "QPU", "qubits": 4, "queue": {"depth": 1, "service_time": 10},
     "unavailable": [[1000, 2000]]},
    {"name": "qulacs", "type": "simulator", "qubits": 8, "queue": {"service_time": 1}},
]  # fmt: skip
BELL = (
    'OPENQASM 3;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\n'
    "h q[0];\ncx q[0], q[1];\nc[0] = measure q[0];\nc[1] = measure q[1];\n"
)
# Bit 0 set, bit 1 clear: "10" written bit 0 first, "01" in Qiskit's order.
FLIP = (
    'OPENQASM 3;\ninclude "stdgates.inc";\nqubit[2] q;\nbit[2] c;\n'
    "x q[0];\nc[0] = measure q[0];\nc[1] = measure q[1];\n"
)


class Served(ServedSide):
    """An ``OqtopusService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        super().__init__(OqtopusService(OqtopusScenario.from_dict(scenario), clock), PREFIX)

    def client(self, token: str | None = None) -> Any:
        """The SDK's client of this side (the scenario's token unless given), its own
        retries off."""
        config = OqtopusConfig(
            url=self.url + PREFIX,
            api_token=token or self.service.scenario.token,
            retry_max_attempts=1,
        )
        return OqtopusClient(config)
