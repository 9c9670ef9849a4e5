"""The emulator's IBM Quantum System side alone behind its loopback HTTP server
(``Served``), for the tests that drive it through the real qrmi client (the emulator
tier): the backend the tests share, ``BACKEND``. Starts nothing at import."""

from __future__ import annotations

from typing import Any

import qrmi

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.ibmqs import PREFIX, IbmQsScenario, IbmQsService
from flux_quantum.emulator.server import HttpServer
from flux_quantum.emulator.wire import Request, Response

BACKEND = {"name": "ibm_kobe", "qubits": 5, "lanes": 2, "queue": {"depth": 1, "service_time": 10}}


class Served:
    """An ``IbmQsService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        self.service = IbmQsService(IbmQsScenario.from_dict(scenario), clock)

        def app(request: Request) -> Response:
            if request.path.startswith(PREFIX + "/"):
                return self.service.handle(request)
            return Response(404)

        self.server = HttpServer("127.0.0.1", 0, app)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}"

    def config(self, backend: str = "ibm_kobe", **extra: str) -> dict[str, str]:
        """The env() settings of ``backend``, without the prefix (``from_config``'s keys),
        with a job timeout (QRMI's create needs one)."""
        prefix = f"{backend}_"
        config = {
            k[len(prefix) :]: v
            for k, v in self.service.env(self.url).items()
            if k.startswith(prefix)
        }
        config["QRMI_JOB_TIMEOUT_SECONDS"] = "600"
        config.update(extra)
        return config

    def resource(self, backend: str = "ibm_kobe", **extra: str) -> Any:
        return qrmi.QuantumResource.from_config(
            backend, qrmi.ResourceType.IBMQuantumSystem, self.config(backend, **extra)
        )
