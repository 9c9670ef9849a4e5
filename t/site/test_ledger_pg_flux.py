"""Flux tier: one budget across clusters (issue 24). Two ``flux start`` instances on one
machine, each with its own handler service, share one PostgreSQL ledger (a real server,
``flux_quantum.testing.pgserver``) with a $1.00 daily limit per user; the emulator's tasks
cost $0.40.

Stories: the user's jobs on both instances together never reserve more than $1.00 (two
go, the others fail held with the quota's sentence, whichever instance they were
submitted to); ``flux quantum usage --by cluster`` in either instance shows both
clusters' rows; a PostgreSQL restart while the two jobs are held loses nothing: both are
released and settled once, at $0.80 in all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fluxinstance import FluxInstance, quantum_config, user_daily_limit
from qpu_setup import FAST

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.braket.scenario import Scenario
from flux_quantum.testing import pgserver

pytestmark = pytest.mark.flux

ARN = "arn:aws:braket:us-east-1::device/qpu/emulator/Ledger"
SCENARIO = {
    "devices": [
        {
            "arn": ARN,
            "name": "Ledger",
            "qubits": 20,
            "cost": {"price": 0.0, "unit": "shot", "task_price": 0.4},
            "queue": {"depth": 2, "service_time": 10.0},
        }
    ]
}
CATALOG = f"""devices:
  - {{name: q-ledger, vendor: local, id: "{ARN}", class: qpu, qubits: 20, slots: 8,
     price: {{per_task: 0.40}}, properties: {{drain_seconds_per_task: 10}}}}
"""
LIMIT = user_daily_limit(1.0)


class Cluster:
    """One instance and its service on the shared ledger, as cluster ``name``."""

    def __init__(self, workdir: Path, name: str, url: str, credentials: Path, emu: Emulator):
        ledger = (
            f'[quantum.ledger]\nurl = "{url}"\ncredentials = "{credentials}"\ncluster = "{name}"\n'
        )
        workdir.mkdir()
        self.name = name
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(CATALOG)
        self.inst = FluxInstance(workdir, config=quantum_config() + LIMIT + ledger).start()
        self.job_env = {
            "FLUX_QUANTUM_EMULATOR_URL": emu.url,
            "FLUX_QUANTUM_BACKENDS": str(self.catalog),
        }
        self.inst.quantum(
            "service", "start", f"--catalog={self.catalog}", f"--emulator-url={emu.url}", *FAST
        )

    def submit(self) -> str:
        return self.inst.submit(
            "--setattr=qpu.device=local:q-ledger",
            "--setattr=qpu.release_at=1",
            "--setattr=qpu.shots=10",
            "true",
            env=self.job_env,
        )

    def names(self, jobid: str) -> list[str]:
        return [e["name"] for e in self.inst.eventlog(jobid)]

    def usage(self, *args: str) -> list[dict[str, Any]]:
        out = self.inst.quantum("usage", "--json", "--period", "day", *args).stdout
        return json.loads(out)["rows"]

    def stop(self) -> None:
        self.inst.quantum("service", "stop", check=False)
        self.inst.run(["flux", "cancel", "--all"], check=False)
        assert self.inst.stop() == 0, self.inst.broker_log()


@pytest.fixture
def clusters(pg_server, tmp_path: Path) -> Iterator[tuple[Cluster, Cluster, Any, Emulator]]:
    url = pg_server.url(pg_server.database())
    credentials = pgserver.credentials_file(tmp_path)
    emu = Emulator(Scenario.from_dict(SCENARIO), clock=ManualClock()).start()
    made: list[Cluster] = []
    try:
        for name in ("hpc-a", "hpc-b"):
            made.append(Cluster(tmp_path / name, name, url, credentials, emu))
        yield made[0], made[1], pg_server, emu
    finally:
        for cluster in made:
            cluster.stop()
        emu.stop()


def test_two_instances_one_budget_usage_by_cluster_and_a_database_restart(clusters):
    a, b, pg, emu = clusters
    first = a.submit()
    a.inst.wait_event(first, "qpu-task", timeout=40)
    second = b.submit()
    b.inst.wait_event(second, "qpu-task", timeout=40)
    # $0.80 reserved on the two clusters together: a third task on either would pass
    # $1.00, so each instance refuses its next job while held, with the quota's sentence.
    for cluster in (a, b):
        refused = cluster.submit()
        cluster.inst.wait_event(refused, "clean", timeout=40)
        assert "qpu-submit" not in cluster.names(refused)
        note = next(e for e in cluster.inst.eventlog(refused) if e["name"] == "exception")
        assert "[quantum.quota] limit 1 'user-daily'" in note["context"]["note"], note
    assert len(emu.task_arns()) == 2
    # Either instance sees both clusters' rows of the one ledger.
    rows = {r["cluster"]: r for r in b.usage("--by", "cluster")}
    assert set(rows) == {"hpc-a", "hpc-b"}, rows
    assert all(r["tasks"] == 1 and r["reserved"] == pytest.approx(0.40) for r in rows.values())
    # The database restarts while both jobs are held with their tasks queued: nothing is
    # lost, each job is released once its task reaches the front, and each settles once.
    pg.restart()
    emu.clock.advance(60)
    a.inst.wait_event(first, "clean", timeout=60)
    b.inst.wait_event(second, "clean", timeout=60)
    for cluster in (a, b):
        cluster.inst.quantum("service", "status", "--wait-idle", "60")
    rows = {r["cluster"]: r for r in a.usage("--by", "cluster")}
    assert set(rows) == {"hpc-a", "hpc-b"}, rows
    for row in rows.values():
        assert row["tasks"] == 1 and row["spent"] == pytest.approx(0.40), rows
        assert row["reserved"] == pytest.approx(0.0), rows
    assert len(emu.task_arns()) == 2
