"""One vendor side of the emulator alone behind its loopback HTTP server (``ServedSide``),
for the tests that drive a side through the vendor's real client (the emulator tier),
and the one fixture that serves it (``serve_fixture``). Starts nothing at import."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.server import HttpServer
from flux_quantum.emulator.wire import Request, Response


class ServedSide:
    """``service`` (a side with ``handle`` and ``env``) answering under ``prefix``."""

    def __init__(self, service: Any, prefix: str) -> None:
        self.service = service

        def app(request: Request) -> Response:
            if request.path.startswith(prefix + "/"):
                return self.service.handle(request)
            return Response(404)

        self.server = HttpServer("127.0.0.1", 0, app)
        self.server.start()
        host, port = self.server.address
        self.url = f"http://{host}:{port}"

    def config(self, resource_id: str) -> dict[str, str]:
        """The side's ``env()`` settings of ``resource_id`` without their prefix (the keys
        of QRMI's ``from_config``)."""
        prefix = f"{resource_id}_"
        return {
            k[len(prefix) :]: v
            for k, v in self.service.env(self.url).items()
            if k.startswith(prefix)
        }


def serve_fixture(served: Callable[[dict[str, Any], ManualClock], ServedSide], **defaults: Any):
    """The emulator tier's one served-vendor fixture, for a test module to bind as
    ``serve = serve_fixture(Served, devices=DEVICES)``: ``serve(**top)`` starts the side
    ``served`` builds from ``defaults`` updated with ``top`` on the test's ``clock``, and
    every side started is stopped when the test ends."""

    @pytest.fixture
    def serve(clock: ManualClock, emulator_tier: None) -> Iterator[Callable[..., ServedSide]]:
        started: list[ServedSide] = []

        def make(**top: Any) -> ServedSide:
            side = served({**defaults, **top}, clock)
            started.append(side)
            return side

        yield make
        for side in started:
            side.server.stop()

    return serve
