"""The emulator's Pasqal side behind a loopback HTTP server (``Served``), for the tests
that drive it through the real qrmi client (the emulator tier): the devices they share
(``DEVICES``) and a two-atom Pulser sequence (``SEQUENCE``). Starts nothing at import."""

from __future__ import annotations

from importlib import resources
from typing import Any

from flux_quantum.emulator.clock import ManualClock
from flux_quantum.emulator.pasqal import LOCAL_PREFIX, PREFIX, PasqalScenario, PasqalService
from flux_quantum.emulator.server import HttpServer
from flux_quantum.emulator.wire import Request, Response, json_response

SEQUENCE = (
    resources.files("flux_quantum.vendors.pasqal").joinpath("samples/two_atoms.json").read_text()
)
DEVICES = [
    {"name": "FRESNEL", "atoms": 4, "max_runs": 500, "queue": {"service_time": 10.0}},
    {"name": "FRESNEL_CAN1", "atoms": 4, "status": "offline"},
    {"name": "EMU_MPS", "atoms": 4, "paused": [[0, 100]], "queue": {"service_time": 10.0}},
    {"name": "ONPREM", "kind": "local", "atoms": 1, "max_slots": 1,
     "queue": {"service_time": 10.0}},
]  # fmt: skip


class Served:
    """A PasqalService behind a loopback HTTP server."""

    def __init__(self, scenario: PasqalScenario, clock: ManualClock) -> None:
        self.service = PasqalService(scenario, clock, seed=7)
        self.server = HttpServer("127.0.0.1", 0, self.app)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}"

    def app(self, request: Request) -> Response:
        if request.path.startswith((PREFIX + "/", LOCAL_PREFIX + "/")):
            return self.service.handle(request)
        return json_response(404, {"message": "not here"})

    def config(self, device: str) -> dict[str, str]:
        """The env() settings of ``device``, without the prefix (``from_config``'s keys)."""
        prefix = device + "_"
        env = self.service.env(self.url)
        return {k[len(prefix) :]: v for k, v in env.items() if k.startswith(prefix)}

    def cloud(self, device: str = "FRESNEL") -> Any:
        import qrmi

        return qrmi.QuantumResource.from_config(
            device, qrmi.ResourceType.PasqalCloud, self.config(device)
        )
