"""The emulator's IonQ side alone behind its loopback HTTP server (``Served``), for the
tests that drive it through IonQ's real client, ionq-core (the emulator tier): the
backends the tests share (``BACKENDS``) and programs (``BELL`` in OpenQASM 3, ``BELL_QIS``
as IonQ's qis gate list). Starts nothing at import."""

from __future__ import annotations

import warnings
from typing import Any

from ionq_core import IonQClient
from served_side import ServedSide

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.ionq import PREFIX, IonqScenario, IonqService

BACKENDS = [
    {"name": "qpu.aria-1", "qubits": 25, "queue": {"depth": 1, "service_time": 10},
     "price": {"per_task": 0.30, "per_shot": 0.03}},
    {"name": "qpu.forte-1", "qubits": 36, "status": "unavailable"},
    {"name": "simulator", "qubits": 29, "queue": {"service_time": 1},
     "noise_models": ["ideal", "aria-1"]},
]  # fmt: skip
BELL = "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncnot q[0], q[1];\nc = measure q;\n"
BELL_QIS = {
    "gateset": "qis",
    "qubits": 2,
    "circuit": [{"gate": "h", "target": 0}, {"gate": "cnot", "control": 0, "target": 1}],
}


class Served(ServedSide):
    """An ``IonqService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        super().__init__(IonqService(IonqScenario.from_dict(scenario), clock), PREFIX)

    def client(self, api_key: str | None = None) -> Any:
        """IonQ's own client pointed at this side (its key unless ``api_key``), retries off."""
        env = self.service.env(self.url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plain HTTP on loopback
            return IonQClient(
                api_key=api_key or env["IONQ_API_KEY"], base_url=env["IONQ_API_URL"], max_retries=0
            )
