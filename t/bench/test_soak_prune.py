"""bench/soak_prune.py: which job directories a purge left that no live job needs (unit
tier), and (flux tier) the pruner unlinking them from a real instance's KVS while a
live job's directory stays, a few seconds."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import soak_prune  # noqa: E402


def jobid(a: int, b: int) -> int:
    return a << 48 | b << 32 | 0xABCD1234


def test_a_job_id_names_its_directory_by_its_two_high_parts() -> None:
    assert soak_prune.job_dir_parts(jobid(0x12, 0x3F4)) == ("0012", "03f4")


def test_only_entries_well_older_than_the_newest_job_and_with_no_live_job_go() -> None:
    live = [jobid(1, 0x100), jobid(1, 0x50)]
    listing = {
        "0000": ["0001", "fff0"],  # an older job.AAAA: every entry stale
        "0001": ["0010", "0050", "00f8", "00f7", "0100", "0101"],
    }
    assert soak_prune.stale_entries(live, listing) == [
        "job.0000.0001",
        "job.0000.fff0",
        "job.0001.0010",
        "job.0001.00f7",  # 0x100 - 8 = 0xf8: 0xf8 itself is within the margin
    ]
    assert soak_prune.stale_entries([], listing) == []  # nothing live: nothing known


def listed_by_job_list(handle: Any) -> list[int]:
    """The ids job-list still lists, active or inactive."""
    payload = {"max_entries": 0, "attrs": [], "since": 0.0}
    return [int(row["id"]) for row in handle.rpc("job-list.list", payload).get()["jobs"]]


@pytest.mark.flux
def test_the_pruner_unlinks_what_purged_jobs_left_and_keeps_a_live_jobs(tmp_path: Path) -> None:
    import flux
    from faults_arm import Broker
    from flux.constants import FLUX_JOB_STATE_INACTIVE
    from fluxinstance import until

    (tmp_path / "conf").mkdir()
    broker = Broker(tmp_path, os.environ, [])
    broker.start()
    try:
        handle = flux.Flux(broker.env["FLUX_URI"])
        pruner = soak_prune.JobDirPruner(broker.env["FLUX_URI"], every=60.0, margin=0)

        def kvs_key(job: str) -> str:
            return broker.run("flux", "job", "id", "--to=kvs", job).stdout.strip()

        old = broker.run("flux", "submit", "--wait", "true").stdout.strip()
        parent = ".".join(kvs_key(old).split(".")[:3])
        live = old
        while ".".join(kvs_key(live).split(".")[:3]) == parent:  # a job 256 ms newer
            live = broker.run("flux", "submit", "--wait", "true").stdout.strip()
        live_key = kvs_key(live)
        # Purge every job but the newest (those submitted in old's 256 ms too); job-list
        # learns of jobs and purges from events, after the commands return, and the
        # pruner asks it what lives: wait until it knows just the live job.
        live_id = int(broker.run("flux", "job", "id", "--to=dec", live).stdout)
        inactive = {"id": live_id, "attrs": [], "state": FLUX_JOB_STATE_INACTIVE}
        handle.rpc("job-list.list-id", inactive).get()
        broker.run("flux", "job", "purge", "--force", "--num-limit=1")
        until(lambda: listed_by_job_list(handle) == [live_id])
        assert broker.run("flux", "kvs", "ls", parent, check=False).returncode == 0
        assert pruner.prune(handle) == 1
        assert broker.run("flux", "kvs", "ls", parent, check=False).returncode != 0
        assert broker.run("flux", "job", "eventlog", live).returncode == 0
        assert broker.run("flux", "kvs", "ls", live_key).returncode == 0
        assert pruner.prune(handle) == 0
    finally:
        broker.stop()
