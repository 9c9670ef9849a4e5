"""The Braket side of the flux tier's service tests: ``Qpu``, an emulator (fresh
queues, on a ``ManualClock`` the test advances) and the handler service pointed at it in
a real instance; the scenario, its catalog, the programs and the service's fast timings
the flux tests share. It starts nothing at import; a test that uses it is a flux test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fluxinstance import FluxInstance, until

from flux_quantum.emulator import Emulator, ManualClock, Scenario

BELL = """OPENQASM 3.0;
bit[2] c;
qubit[2] q;
h q[0];
cnot q[0], q[1];
c = measure q;
"""
GHZ = """OPENQASM 3.0;
bit[3] c;
qubit[3] q;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
c = measure q;
"""

# The contract the consumer side reads: attributes.system.qpu_task/qpu_device/qpu_info.
CONSUMER = "flux job info $FLUX_JOB_ID jobspec | python3 -c " + (
    '\'import json,sys; s=json.load(sys.stdin)["attributes"]["system"]; '
    'print(s.get("qpu_task"), s.get("qpu_device"), json.dumps(s.get("qpu_info")))\''
)


def _qpu(name: str, **spec: Any) -> dict[str, Any]:
    queue = spec.pop("queue", {})
    return {
        "arn": f"arn:aws:braket:us-east-1::device/qpu/emulator/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": {"service_time": 10.0, **queue},
        **spec,
    }


SCENARIO: dict[str, Any] = {
    "devices": [
        _qpu("Alpha", queue={"depth": 4}),
        _qpu("Beta", queue={"depth": 3}),
        _qpu("Delta"),
        _qpu("Epsilon", queue={"depth": 2}),
        _qpu(
            "Faulty",
            queue={"service_time": 0.0},
            faults=[{"fail_task": "calibration drifted; task aborted", "calls": [1]}],
        ),
        _qpu(
            "Flaky",
            queue={"depth": 1},
            faults=[
                {"operation": "CreateQuantumTask", "error": "ThrottlingException", "first": 3},
                {"operation": "GetQuantumTask", "error": "ThrottlingException", "first": 4},
            ],
        ),
        _qpu(
            "Doomed",
            queue={"depth": 5},
            offline=[{"start": 15, "end": 100000, "reason": "MAINTENANCE", "accept_tasks": True}],
        ),
        _qpu("Slow", queue={"depth": 100}),
        _qpu("Zeta", queue={"depth": 2}),
        _qpu("Solo", queue={"depth": 2}),
        {
            "arn": "arn:aws:braket:::device/quantum-simulator/emulator/gamma",
            "name": "gamma",
            "qubits": 20,
            "cost": {"price": 0.075, "unit": "minute"},
            "queue": {"service_time": 1.0},
        },
    ]
}

_DRAIN = {"alpha": 10, "beta": 10, "delta": 10, "epsilon": 10, "faulty": 10, "flaky": 10}
_DRAIN.update({"doomed": 10, "slow": 0.01, "zeta": 1})


def catalog_text() -> str:
    """The catalog of ``SCENARIO``'s devices (``local`` vendor, ``q-<name>``)."""
    lines = ["devices:"]
    for spec in SCENARIO["devices"]:
        name = spec["name"].lower()
        sim = "quantum-simulator" in spec["arn"]
        lines += [
            f"  - name: q-{name}",
            "    vendor: local",
            f"    id: {spec['arn']}",
            f"    class: {'simulator' if sim else 'qpu'}",
            "    qubits: 20",
            "    region: us-east-1",
            "    price: {per_task: 0.3, per_shot: 0.001}",
            f"    slots: {1 if name == 'solo' else 4}",
            f"    properties: {{drain_seconds_per_task: {_DRAIN.get(name, 1)}}}",
        ]
    return "\n".join(lines) + "\n"


# Released when the task is next to run: the tests step the vendor clock by hand.
AT_FRONT = "--setattr=qpu.release_at=1"

# Fast timings for tests (seconds of real time).
FAST = (
    "--poll-min=0.2",
    "--poll-cold-max=1",
    "--poll-max=2",
    "--scan-interval=0.3",
    "--device-check-interval=1",
    "--cluster-interval=0.5",
    "--retry-max=0.5",
)


class Qpu:
    """One emulator (fresh queues) and the service pointed at it, in an instance."""

    def __init__(
        self, inst: FluxInstance, catalog: Path, scenario: dict[str, Any] | None = None
    ) -> None:
        import flux

        self.inst = inst
        self.catalog = catalog
        self.clock = ManualClock()
        spec = SCENARIO if scenario is None else scenario
        self.emu = Emulator(Scenario.from_dict(spec), clock=self.clock).start()
        self.handle = flux.Flux(inst.uri)
        # What a job's consumer needs to reach the emulator and find the catalog.
        self.job_env = {
            "FLUX_QUANTUM_EMULATOR_URL": self.emu.url,
            "FLUX_QUANTUM_BACKENDS": str(catalog),
        }

    def start_service(self, *extra: str) -> None:
        self.inst.quantum(
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--emulator-url={self.emu.url}",
            *FAST,
            *extra,
        )

    def stop_service(self) -> None:
        self.inst.quantum("service", "stop", check=False)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def submit(self, *args: str, at_front: bool = True) -> str:
        """Submit with the job environment. These tests step the vendor clock by hand
        to the front of the queue, so a job asking for a QPU gets ``AT_FRONT`` unless
        the test names its own release point; ``at_front=False`` leaves the built-in
        default (``done``)."""
        asks = any(a.startswith("--setattr=qpu.") for a in args)
        if asks and at_front and not any("qpu.release_at" in a for a in args):
            args = (AT_FRONT, *args)
        return self.inst.submit(*args, env=self.job_env)

    def job(self, jobid: str) -> dict[str, Any]:
        from flux.job import JobID

        payload = {"id": int(JobID(jobid)), "attrs": ["state", "annotations"]}
        return self.handle.rpc("job-list.list-id", payload).get()["job"]

    def memo(self, jobid: str) -> dict[str, Any]:
        return (self.job(jobid).get("annotations") or {}).get("user") or {}

    def events(self, jobid: str) -> list[dict[str, Any]]:
        return self.inst.eventlog(jobid)

    def names(self, jobid: str) -> list[str]:
        return [e["name"] for e in self.events(jobid)]

    def context(self, jobid: str, name: str) -> dict[str, Any]:
        found = [e for e in self.events(jobid) if e["name"] == name]
        assert found, f"{jobid}: no {name} event in {self.names(jobid)}"
        return found[-1]["context"]

    def wait_event(self, jobid: str, name: str, timeout: float = 30) -> None:
        self.inst.wait_event(jobid, name, timeout=timeout)

    def until(self, what: Callable[[], Any], timeout: float = 30, step: float = 0.1) -> Any:
        return until(what, timeout, step)

    def position(self, jobid: str, expected: int, timeout: float = 20) -> None:
        self.until(lambda: self.memo(jobid).get("qpu_position") == expected, timeout)

    def output(self, jobid: str) -> str:
        self.wait_event(jobid, "clean", timeout=60)
        return self.inst.run(["flux", "job", "attach", jobid], check=False).stdout

    def close(self) -> None:
        # Shown by pytest only when the test failed.
        status = self.inst.quantum("service", "status", "--json", check=False)
        print("service status:", status.stdout.strip() or status.stderr.strip())
        dmesg = self.inst.run(["flux", "dmesg"], check=False).stdout.splitlines()
        print("\n".join(line for line in dmesg if "qpu_handlers" in line)[-6000:])
        calls = [(c.operation, c.status, c.error, round(c.t, 1)) for c in self.emu.calls]
        print("emulator calls:", [c for c in calls if c[0] != "GetDevice"])
        self.inst.run(["flux", "cancel", "--all"], check=False)
        self.inst.run(["flux", "queue", "drain", "--timeout=30s"], check=False)
        self.stop_service()
        self.emu.stop()


def event_time(qpu: Qpu, jobid: str, name: str) -> float:
    """When the job's first ``name`` event was posted."""
    return next(e["timestamp"] for e in qpu.events(jobid) if e["name"] == name)
