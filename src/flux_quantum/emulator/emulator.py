"""The ``Emulator`` facade: one loopback server speaking Braket and S3, with its call log.

This module owns the lifecycle of an emulator (start, stop, context manager), the environment
a client needs to reach it, and read access to its call log. It must never bind anything but
IPv4 loopback, never leave a thread running after ``stop()``, and never change what the
scenario describes: everything it serves comes from the scenario, the clock and the seed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from flux_quantum.emulator.clock import Clock, WallClock
from flux_quantum.emulator.queue import TaskTimeline
from flux_quantum.emulator.s3 import PREFIX as S3_PREFIX
from flux_quantum.emulator.scenario import Scenario
from flux_quantum.emulator.server import HttpServer, check_loopback
from flux_quantum.emulator.service import BraketService, Call

ACCESS_KEY = "flux-quantum-emulator"
SECRET_KEY = "flux-quantum-emulator-secret"


class Emulator:
    """A local Amazon Braket (and S3) endpoint for the unmodified SDK and boto3.

    >>> with Emulator(clock=ManualClock()) as emu:
    ...     os.environ.update(emu.env())
    ...     AwsDevice("arn:aws:braket:::device/quantum-simulator/amazon/sv1").queue_depth()
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        on_call: Callable[[Call], None] | None = None,
    ) -> None:
        self.host = check_loopback(host)
        self.port = port
        self.scenario = scenario or Scenario.default()
        self.clock = clock or WallClock()
        self.seed = seed
        self._stop = threading.Event()
        self._service = BraketService(self.scenario, self.clock, seed, self._stop, on_call)
        self._server: HttpServer | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("the emulator is already started")
        self._stop.clear()
        self._server = HttpServer(self.host, self.port, self._service.handle)
        self._server.start()
        return self

    def stop(self) -> None:
        """Close every connection and join every thread (bounded); safe to call twice."""
        self._stop.set()  # wakes requests sleeping on a "slow response" fault
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the Braket endpoint; S3 lives under ``/s3``)."""
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        host, port = self._server.address
        return f"http://{host}:{port}"

    @property
    def s3_url(self) -> str:
        return self.url + S3_PREFIX

    @property
    def bucket(self) -> str:
        return self.scenario.bucket

    def env(self) -> dict[str, str]:
        """The environment that points the Braket SDK, boto3 and botocore at this emulator.

        ``AWS_ENDPOINT_URL_BRAKET`` applies to every region, so regional device ARNs and
        ``AwsQuantumTask(arn)`` in any region reach the emulator too.
        """
        return {
            "AWS_ENDPOINT_URL_BRAKET": self.url,
            "BRAKET_ENDPOINT": self.url,
            "AWS_ENDPOINT_URL_S3": self.s3_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": self.scenario.region,
            "AMZN_BRAKET_OUT_S3_BUCKET": self.scenario.bucket,
            # No instance-metadata lookups: there is nothing but loopback to ask.
            "AWS_EC2_METADATA_DISABLED": "true",
            # Where flux-quantum's own `local` vendor finds this emulator.
            "FLUX_QUANTUM_EMULATOR_URL": self.url,
        }

    # -- what happened ------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every request answered so far, oldest first (a copy)."""
        return self._service.calls

    def call_count(self, operation: str | None = None, target: str | None = None) -> int:
        return sum(
            1
            for call in self._service.calls
            if (operation is None or call.operation == operation)
            and (target is None or call.target == target)
        )

    def clear_calls(self) -> None:
        self._service.clear_calls()

    def device_arns(self) -> list[str]:
        return [spec.arn for spec in self.scenario.devices]

    def task_arns(self) -> list[str]:
        """Every quantum task created so far, oldest first."""
        return self._service.task_arns()

    def task_timeline(self, task_arn: str) -> TaskTimeline:
        """When a task was created, became next to run, started and ended (emulated
        seconds on this emulator's clock; see ``clock``)."""
        return self._service.task_timeline(task_arn)

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "stopped"
        return f"Emulator({where}, {len(self.scenario.devices)} devices, clock={self.clock!r})"
