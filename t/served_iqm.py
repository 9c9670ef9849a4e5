"""The emulator's IQM side alone behind its loopback HTTP server (``Served``), for the
tests that drive it through the real qrmi client (the emulator tier): the device the
tests share, ``DEVICE``. Starts nothing at import."""

from __future__ import annotations

from typing import Any

import qrmi

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.iqm import PREFIX, IqmScenario, IqmService
from flux_quantum.emulator.server import HttpServer
from flux_quantum.emulator.wire import Request, Response

DEVICE = {"id": "garnet", "qubits": 5, "queue": {"depth": 2, "service_time": 10}}


class Served:
    """An ``IqmService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        self.service = IqmService(IqmScenario.from_dict(scenario), clock)

        def app(request: Request) -> Response:
            if request.path.startswith(PREFIX + "/"):
                return self.service.handle(request)
            return Response(404)

        self.server = HttpServer("127.0.0.1", 0, app)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}"

    def resource(self, device: str = "garnet", **extra: str) -> Any:
        prefix = f"{device}_"
        config = {
            k[len(prefix) :]: v
            for k, v in self.service.env(self.url).items()
            if k.startswith(prefix)
        }
        config.update(extra)
        return qrmi.QuantumResource.from_config(device, qrmi.ResourceType.IQMServer, config)
