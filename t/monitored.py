"""A real Flux instance whose handler service exports its metrics, for the flux tier's
monitoring tests (``test_metrics_flux``, ``test_top_flux``).

``Monitored`` starts the vendor emulator (Braket, on a ManualClock the test advances) on
a port of its own, so that the test can stop it (the vendor unreachable) and start it
again on the same address; an instance whose ``[quantum.metrics]`` listens on a free
loopback port; and the service (a broker module) with fast timings. Each step a test
waits for is a condition with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fluxinstance import FluxInstance, quantum_config

from flux_quantum.emulator import Emulator, ManualClock, Scenario

BELL = """OPENQASM 3.0;
bit[2] c;
qubit[2] q;
h q[0];
cnot q[0], q[1];
c = measure q;
"""

FAST = (
    "--poll-min=0.2",
    "--poll-cold-max=1",
    "--poll-max=2",
    "--scan-interval=0.3",
    "--device-check-interval=1",
    "--cluster-interval=0.5",
    "--retry-max=0.5",
)


def _qpu(name: str, depth: int = 0, **spec: Any) -> dict[str, Any]:
    queue = {"service_time": 10.0, "depth": depth, **spec.pop("queue", {})}
    return {
        "arn": f"arn:aws:braket:us-east-1::device/qpu/emulator/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": queue,
        **spec,
    }


SCENARIO: dict[str, Any] = {
    "devices": [
        _qpu("Alpha", depth=4),
        _qpu("Slow", depth=100),
        _qpu(
            "Faulty",
            queue={"service_time": 0.0},
            faults=[{"fail_task": "calibration drifted; task aborted", "calls": [1]}],
        ),
    ]
}
DRAIN = {"alpha": 10.0, "slow": 10.0, "faulty": 10.0}


def catalog_text() -> str:
    lines = ["devices:"]
    for spec in SCENARIO["devices"]:
        name = spec["name"].lower()
        lines += [
            f"  - name: q-{name}",
            "    vendor: local",
            f"    id: {spec['arn']}",
            "    class: qpu",
            "    qubits: 20",
            "    region: us-east-1",
            "    price: {per_task: 0.3, per_shot: 0.001}",
            "    slots: 4",
            f"    properties: {{drain_seconds_per_task: {DRAIN[name]}}}",
        ]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(what: Callable[[], Any], timeout: float = 30.0, step: float = 0.2) -> Any:
    """Wait for ``what()`` to be true (returned), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


class Monitored:
    """An instance exporting its service's metrics on ``metrics_port``; the emulator."""

    def __init__(self, workdir: Path, metrics: dict[str, Any] | None = None) -> None:
        self.workdir = workdir
        self.metrics_port = free_port()
        table = {
            "listen": f"127.0.0.1:{self.metrics_port}",
            "interval": 0.5,
            "vendor_unreachable_after": 3,
            **(metrics or {}),
        }
        lines = ["[quantum.metrics]"]
        for key, value in table.items():
            lines.append(f"{key} = {value!r}".replace("'", '"'))
        self.inst = FluxInstance(
            workdir, size=2, config=quantum_config() + "\n" + "\n".join(lines) + "\n"
        )
        self.clock = ManualClock()
        self.emulator_port = free_port()
        self.emu = Emulator(Scenario.from_dict(SCENARIO), clock=self.clock, port=self.emulator_port)
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(catalog_text())
        (workdir / "bell.qasm").write_text(BELL)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> Monitored:
        self.emu.start()
        self.inst.start()
        self.inst.quantum(
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--emulator-url={self.emu.url}",
            *FAST,
        )
        return self

    @property
    def job_env(self) -> dict[str, str]:
        return {
            "FLUX_QUANTUM_EMULATOR_URL": f"http://127.0.0.1:{self.emulator_port}",
            "FLUX_QUANTUM_BACKENDS": str(self.catalog),
        }

    def submit(self, device: str, *args: str, release_at: str = "1") -> str:
        return self.inst.submit(
            f"--setattr=qpu.device=local:{device}",
            f"--setattr=qpu.release_at={release_at}",
            "--setattr=qpu.program=bell.qasm",
            *args,
            "true",
            env=self.job_env,
        )

    def stop(self) -> int:
        self.inst.run(["flux", "cancel", "--all"], check=False)
        self.inst.quantum("service", "stop", check=False)
        self.emu.stop()
        return self.inst.stop()
