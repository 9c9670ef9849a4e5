"""Flux tier: the QPU stage of a workflow (docs/workflows.md). A real 2-broker instance
with the plugin, the handler service and the vendor emulator on a wall clock: a held
job's task is created only once ``qpu`` is its last dependency (``afterok`` on a step
that writes its program, ``begin-time``); a job whose step fails ends with no
``qpu-submit``, no vendor task and no ledger row; the pipeline example runs as written,
from the shell and from Python; one piece whose device fails finishes on a simulator and
the aggregation still runs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from fluxinstance import FluxInstance, until
from qpu_setup import BELL, FAST

from flux_quantum.emulator import Emulator, Scenario, WallClock

pytestmark = pytest.mark.flux

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pipeline"


def _device(name: str, service: float, **spec: Any) -> dict[str, Any]:
    kind = "quantum-simulator" if name.startswith("sim") else "qpu"
    return {
        "arn": f"arn:aws:braket:us-east-1::device/{kind}/emulator/{name}",
        "name": name,
        "qubits": 20,
        "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
        "queue": {"service_time": service},
        **spec,
    }


SCENARIO = {
    "devices": [
        _device("sim", 0.2),
        _device("one", 0.3),
        _device("broken", 0.1, faults=[{"fail_task": "calibration drifted", "calls": [1]}]),
        _device("doomed", 0.1, faults=[{"fail_task": "device error 17", "every": 1}]),
    ]
}


def catalog_text() -> str:
    lines = ["devices:"]
    for spec in SCENARIO["devices"]:
        name = spec["name"]
        lines += [
            f"  - name: q-{name}",
            "    vendor: local",
            f"    id: {spec['arn']}",
            f"    class: {'simulator' if name.startswith('sim') else 'qpu'}",
            "    qubits: 20",
            "    region: us-east-1",
            "    price: {per_task: 0.3, per_shot: 0.001}",
            "    slots: 8",
            "    properties: {drain_seconds_per_task: 0.3}",
        ]
    return "\n".join(lines) + "\n"


class World:
    """The instance, the emulator (wall clock) and the service, and what tests read."""

    def __init__(self, inst: FluxInstance) -> None:
        import flux

        self.inst = inst
        self.catalog = inst.workdir / "backends.yaml"
        self.catalog.write_text(catalog_text())
        self.emu = Emulator(Scenario.from_dict(SCENARIO), clock=WallClock()).start()
        self.handle = flux.Flux(inst.uri)
        self.env = {
            "FLUX_QUANTUM_EMULATOR_URL": self.emu.url,
            "FLUX_QUANTUM_BACKENDS": str(self.catalog),
        }
        inst.quantum(
            "service", "start", f"--catalog={self.catalog}", f"--emulator-url={self.emu.url}",
            *FAST,
        )  # fmt: skip

    def submit(self, *args: str) -> str:
        return self.inst.submit(*args, env=self.env)

    def names(self, jobid: str) -> list[str]:
        return [e["name"] for e in self.inst.eventlog(jobid)]

    def time_of(self, jobid: str, name: str) -> float:
        return next(e["timestamp"] for e in self.inst.eventlog(jobid) if e["name"] == name)

    def memo(self, jobid: str) -> dict[str, Any]:
        from flux.job import JobID

        payload = {"id": int(JobID(jobid)), "attrs": ["annotations"]}
        job = self.handle.rpc("job-list.list-id", payload).get()["job"]
        return (job.get("annotations") or {}).get("user") or {}

    def creates(self) -> int:
        """The tasks the emulator holds (a create retried with its token is one task)."""
        return len(self.emu.task_arns())

    def ledger_rows(self, jobid: str) -> int:
        from flux.job import JobID

        status = json.loads(self.inst.quantum("service", "status", "--json").stdout)
        with closing(sqlite3.connect(status["ledger"]["path"])) as db:
            query = "SELECT COUNT(*) FROM charges WHERE jobid = ?"
            return int(db.execute(query, (int(JobID(jobid)),)).fetchone()[0])

    def close(self) -> None:
        status = self.inst.quantum("service", "status", "--json", check=False)
        print("service status:", status.stdout.strip() or status.stderr.strip())
        self.inst.run(["flux", "cancel", "--all"], check=False)
        self.inst.run(["flux", "queue", "drain", "--timeout=30s"], check=False)
        self.inst.quantum("service", "stop", check=False)
        self.emu.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    inst = FluxInstance(tmp_path_factory.mktemp("workflow"), size=2).start()
    w = World(inst)
    try:
        yield w
    finally:
        w.close()
        assert inst.stop() == 0, inst.broker_log()


def gate(world: World, name: str) -> tuple[Path, str]:
    """A step that waits for the test's word (a file), then runs ``after``."""
    flag = world.inst.workdir / f"{name}.go"
    flag.unlink(missing_ok=True)
    return flag, f"while [ ! -e {flag} ]; do sleep 0.1; done"


def test_prep_then_qpu_then_consumer_the_task_created_after_prep_ended(world: World) -> None:
    work = world.inst.workdir
    (work / "bell.qasm").write_text(BELL)
    (work / "gen.qasm").unlink(missing_ok=True)
    flag, wait = gate(world, "prep")
    prep = world.submit("sh", "-c", f"{wait}; cp bell.qasm gen.qasm")
    held = world.submit(
        f"--dependency=afterok:{prep}", "--setattr=qpu.device=local:q-one",
        "--setattr=qpu.program=gen.qasm", "--setattr=qpu.shots=200",
        "flux", "quantum", "task", "--wait", "--json",
    )  # fmt: skip
    world.inst.wait_event(held, "dependency-add")
    until(lambda: world.memo(held).get("qpu_state", "").startswith("waiting for dependency"))
    assert world.memo(held)["qpu_state"] == f"waiting for dependency after-success={prep}"
    jobs = json.loads(world.inst.quantum("jobs", "--json").stdout)
    row = next(j for j in jobs if j["jobid"] == held)
    assert row["qpu_state"].startswith("waiting for dependency after-success=")
    assert row["dependencies"] == [f"after-success={prep}"]
    creates = world.creates()
    time.sleep(1.0)  # three of the service's scans: nothing may happen meanwhile
    assert world.creates() == creates
    assert [n for n in world.names(held) if n.startswith("qpu-")] == []
    flag.touch()
    world.inst.wait_event(held, "clean", timeout=60)
    prep_done = world.time_of(prep, "finish")
    assert world.time_of(held, "qpu-inputs") >= prep_done
    assert world.time_of(held, "qpu-submit") >= prep_done
    out = world.inst.run(["flux", "job", "attach", held]).stdout
    counts = json.loads(out)["counts"]
    assert sum(counts.values()) == 200 and set(counts) <= {"00", "11"}


def test_a_failed_prep_ends_the_held_job_with_nothing_created_or_charged(world: World) -> None:
    flag, wait = gate(world, "failing")
    prep = world.submit("sh", "-c", f"{wait}; exit 1")
    held = world.submit(
        f"--dependency=afterok:{prep}", "--setattr=qpu.device=local:q-one",
        "--setattr=qpu.program=never.qasm", "true",
    )  # fmt: skip
    until(lambda: world.memo(held).get("qpu_state", "").startswith("waiting"))
    creates = world.creates()
    flag.touch()
    world.inst.wait_event(held, "clean")
    status = world.inst.run(["flux", "job", "status", held], check=False)
    assert status.returncode != 0
    assert "can never be satisfied" in world.inst.run(["flux", "job", "eventlog", held]).stdout
    time.sleep(1.0)  # the service's scans after the job left
    assert [n for n in world.names(held) if n.startswith("qpu-")] == []
    assert world.creates() == creates
    assert world.ledger_rows(held) == 0


def test_begin_time_holds_the_task_until_it_passes(world: World) -> None:
    (world.inst.workdir / "bell.qasm").write_text(BELL)
    held = world.submit(
        "--begin-time=+4s", "--setattr=qpu.device=local:q-one",
        "--setattr=qpu.program=bell.qasm", "true",
    )  # fmt: skip
    until(lambda: world.memo(held).get("qpu_state", "").startswith("waiting for dependency"))
    state = world.memo(held)["qpu_state"]
    assert state.startswith("waiting for dependency begin-time=")
    begin = float(state.split("=", 1)[1])
    world.inst.wait_event(held, "clean", timeout=60)
    assert world.time_of(held, "qpu-submit") >= begin


def run_example(world: World, *command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **world.inst.env, **world.env, "DEVICE": "local:q-one"}
    return subprocess.run(
        list(command), env=env, cwd=world.inst.workdir, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def results(directory: Path, rounds: int) -> list[dict[str, Any]]:
    return [
        json.loads((directory / f"round-{r}" / "result.json").read_text()) for r in range(rounds)
    ]


def test_the_pipeline_example_runs_as_written_from_the_shell(world: World) -> None:
    directory = world.inst.workdir / "shell-run"
    done = run_example(world, "sh", str(EXAMPLE / "pipeline.sh"), str(directory), "3", "2")
    assert done.returncode == 0, done.stderr
    last = done.stdout.split()[-1]
    world.inst.wait_event(last, "clean", timeout=120)
    assert world.inst.run(["flux", "job", "status", last], check=False).returncode == 0
    rounds = results(directory, 2)
    assert [r["round"] for r in rounds] == [0, 1]
    assert all(len(r["expected_cut"]) == 3 and 0 < r["cut"] <= r["edges"] for r in rounds)
    assert rounds[1]["angles"] == rounds[0]["next"]


def test_the_pipeline_example_runs_from_python_and_a_broken_piece_fails_over(
    world: World,
) -> None:
    directory = world.inst.workdir / "python-run"
    done = run_example(
        world, sys.executable, str(EXAMPLE / "pipeline.py"), str(directory),
        "--pieces=2", "--rounds=1", "--device=local:q-broken",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["expected_cut"]) == 2
    jobs = world.inst.run(["flux", "jobs", "-a", "-n", "-o", "{id} {name}"]).stdout.split("\n")
    pieces = [line.split()[0] for line in jobs if " piece-0." in line]
    devices = {world.inst.run(["flux", "job", "info", j, "jobspec"]).stdout for j in pieces}
    released = [json.loads(d)["attributes"]["system"]["qpu_device"] for d in devices]
    assert "q-sim" in released  # the broken device's first task failed over


def test_a_piece_that_fails_for_good_ends_its_dependants_with_nothing_else_spent(
    world: World,
) -> None:
    directory = world.inst.workdir / "final-run"
    before = world.creates()
    earlier = set(world.inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split())
    env_device = {"DEVICE": "local:q-doomed", "FAILOVER": "fail"}
    # Nothing starts until the whole pipeline is submitted: a job whose dependency has
    # already failed is refused at submit (Flux's rule), which is not what this tests.
    world.inst.run(["flux", "queue", "stop"])
    try:
        done = subprocess.run(
            ["sh", str(EXAMPLE / "pipeline.sh"), str(directory), "1", "2"],
            env={**os.environ, **world.inst.env, **world.env, **env_device},
            cwd=world.inst.workdir, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        world.inst.run(["flux", "queue", "start"])
    assert done.returncode == 0, done.stderr
    last = done.stdout.split()[-1]
    world.inst.wait_event(last, "clean", timeout=120)
    listed = world.inst.run(["flux", "jobs", "-a", "-n", "-o", "{id} {name}"]).stdout
    ids = {
        line.split()[1]: line.split()[0]
        for line in listed.splitlines()
        if line.split()[0] not in earlier
    }
    failed, second = ids["piece-0.0"], ids["piece-1.0"]
    assert "qpu-task-failed" in world.names(failed)
    for name in ("aggregate-0", "decompose-1", "piece-1.0", "aggregate-1"):
        status = world.inst.run(["flux", "job", "status", ids[name]], check=False)
        assert status.returncode != 0, name
    assert [n for n in world.names(second) if n.startswith("qpu-")] == []
    assert world.creates() == before + 1  # the failed piece's task only
    assert world.ledger_rows(second) == 0


def test_parsl_drives_the_pipeline(world: World) -> None:
    pytest.importorskip("parsl", reason="parsl is not installed (pip install parsl)")
    directory = world.inst.workdir / "parsl-run"
    done = run_example(
        world, sys.executable, str(EXAMPLE / "parsl_pipeline.py"), str(directory),
        "--pieces=2", "--rounds=2", "--device=local:q-one",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = results(directory, 2)
    assert json.loads(done.stdout) == rounds[1]
    assert rounds[1]["angles"] == rounds[0]["next"]
    # Each piece was a held QPU job of this instance, released on its own task.
    listed = world.inst.run(["flux", "jobs", "-a", "-n", "-o", "{id} {name}"]).stdout
    stages = [line.split()[0] for line in listed.splitlines() if line.endswith(" qpu-stage")]
    assert len(stages) == 4
    for jobid in stages:
        spec = json.loads(world.inst.run(["flux", "job", "info", jobid, "jobspec"]).stdout)
        assert spec["attributes"]["system"]["qpu_task"].startswith("arn:aws:braket")


def test_hybrid_gives_flux_cores_jobspec_the_request_and_its_waits() -> None:
    from flux.job import JobspecV1

    from flux_quantum.job.hybrid import hybrid

    jobspec = JobspecV1.from_command(["true"])
    jobspec.setattr("system.dependencies", [{"scheme": "begin-time", "value": "+1m"}])
    made = hybrid(jobspec, {"device": "local:q-one", "program": "a.qasm"}, after=[7, "ƒ2"])
    system = made.jobspec["attributes"]["system"]
    assert system["qpu"] == {"device": "local:q-one", "program": "a.qasm"}
    assert system["dependencies"] == [
        {"scheme": "begin-time", "value": "+1m"},
        {"scheme": "afterok", "value": "7"},
        {"scheme": "afterok", "value": "ƒ2"},
    ]
    with pytest.raises(ValueError, match="qpu.shots must be an integer"):
        hybrid(JobspecV1.from_command(["true"]), {"device": "sv1", "shots": "many"})
    with pytest.raises(ValueError, match="when must be one of afterok"):
        hybrid(JobspecV1.from_command(["true"]), "sv1", after=[7], when="before")
