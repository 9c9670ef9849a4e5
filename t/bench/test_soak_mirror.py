"""bench/soak_mirror.py: a job's jobspec as the plain-Flux control runs it, the purge
table (unit tier), and (flux tier) the control copying each job of a source instance
once, about 10 s."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import soak_mirror  # noqa: E402


def test_the_control_runs_true_without_batch_script_or_dependencies() -> None:
    spec = {
        "version": 1,
        "tasks": [{"command": ["flux-quantum", "task", "--wait"], "slot": "task"}],
        "attributes": {
            "system": {
                "duration": 600,
                "qpu": {"device": "braket:sv1", "shots": 100},
                "batch": {"script": "#!/bin/sh\n"},
                "dependencies": [{"scheme": "afterany", "value": "123"}],
            }
        },
    }
    plain = soak_mirror.plain_jobspec(spec)
    assert plain["tasks"] == [{"command": ["true"], "slot": "task"}]
    assert plain["attributes"]["system"] == {
        "duration": 600,
        "qpu": {"device": "braket:sv1", "shots": 100},
    }
    assert spec["tasks"][0]["command"][0] == "flux-quantum"  # the source left alone


def test_the_purge_goes_into_a_job_manager_table_of_its_own_when_there_is_none() -> None:
    assert tomllib.loads(soak_mirror.purge_config("", 60.0)) == {
        "job-manager": {"inactive-age-limit": "60s"}
    }


@pytest.mark.flux
def test_the_control_copies_each_job_of_the_source_once(tmp_path: Path) -> None:
    import flux
    from faults_arm import Broker

    (tmp_path / "src" / "conf").mkdir(parents=True)
    source = Broker(tmp_path / "src", os.environ, [])
    source.start()
    mirror = soak_mirror.Mirror(tmp_path / "mirror", source.env["FLUX_URI"], 30.0, every=60.0)
    mirror.broker.start()  # copied on demand below, not by its thread
    try:
        src = flux.Flux(source.env["FLUX_URI"])
        dst = flux.Flux(mirror.broker.env["FLUX_URI"])
        source.run("flux", "submit", "--cc=1-2", "--setattr=system.qpu.shots=5", "sleep", "0")
        assert mirror.copy_new(src, dst) == 2
        assert mirror.copy_new(src, dst) == 0  # seen: not copied again
        mirror.broker.run("flux", "queue", "idle", "--timeout=60s")
        out = mirror.broker.run("flux", "jobs", "-a", "-n", "--format={result}").stdout
        assert out.split() == ["COMPLETED", "COMPLETED"]
        jobid = mirror.broker.run("flux", "jobs", "-a", "-n", "--format={id}").stdout.split()[0]
        spec = json.loads(mirror.broker.run("flux", "job", "info", jobid, "jobspec").stdout)
        assert spec["attributes"]["system"]["qpu"] == {"shots": 5}
        assert spec["tasks"][0]["command"] == ["true"]
        figures = mirror.figures()
        assert figures["submitted"] == 2 and figures["jm_inactive"] == 2
    finally:
        mirror.close()
        source.stop()
