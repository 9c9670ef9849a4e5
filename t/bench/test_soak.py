"""bench/soak.py's pure parts (unit tier, no Flux): the job-manager's purge written
into the instance's ``[job-manager]`` table (or left out), the service's descriptors
counted by kind; and (flux tier) the job keeper against a real
instance's purge, about 10 s. The soak itself (``python bench/soak.py
--quick``, about 2 minutes on 2 cores) is left to people: the flux tier's budget is
smaller."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
import tomllib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
_spec = importlib.util.spec_from_file_location("soak_bench", BENCH / "soak.py")
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
sys.modules["soak_bench"] = soak
_spec.loader.exec_module(soak)

PLUGIN_TABLE = '[job-manager]\nplugins = [ { load = "quantum.so" } ]\n\n[sched]\nx = 1\n'


def test_the_purge_goes_into_the_job_manager_table_that_loads_the_plugin() -> None:
    config = tomllib.loads(soak.purge_config(PLUGIN_TABLE, 60.0))
    assert config["job-manager"]["inactive-age-limit"] == "60s"
    assert config["job-manager"]["plugins"] == [{"load": "quantum.so"}]
    assert config["sched"] == {"x": 1}


def test_an_instance_without_a_job_manager_table_gets_one_and_no_purge_changes_nothing() -> None:
    assert tomllib.loads(soak.purge_config("", 2.5)) == {
        "job-manager": {"inactive-age-limit": "2.5s"}
    }
    assert soak.purge_config(PLUGIN_TABLE, None) == PLUGIN_TABLE


def test_descriptors_are_counted_by_kind_and_a_new_pipe_or_socket_shows() -> None:
    before = soak.fd_kinds(os.getpid())
    assert set(before) == set(soak.FD_KINDS)
    read, write = os.pipe()
    pair = socket.socketpair()
    try:
        after = soak.fd_kinds(os.getpid())
    finally:
        os.close(read)
        os.close(write)
        for end in pair:
            end.close()
    assert after["pipe"] == before["pipe"] + 2
    assert after["unix"] == before["unix"] + 2
    assert after["tcp"] == before["tcp"]
    assert soak.fd_kinds(2**22 + 12345) == {}  # no such process


@pytest.mark.flux
def test_the_keeper_keeps_an_ended_job_before_its_purge_and_counts_one_purged_first(
    tmp_path: Path,
) -> None:
    """A real instance purging inactive jobs after 3 s: a job kept as soon as it ended
    keeps its eventlog after the purge; a job the keeper saw while it ran and next looked
    for after its purge is counted lost (the soak fails on it), not silently dropped."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "purge.toml").write_text(soak.purge_config("", 3.0))
    broker = soak.Broker(tmp_path, os.environ, [])
    broker.start()

    def known() -> set[int]:
        out = broker.run("flux", "jobs", "-a", "-A", "-n", "--format={id.dec}").stdout
        return {int(jobid) for jobid in out.split()}

    def submit(*command: str) -> int:
        fluid = broker.run("flux", "submit", *command).stdout.strip()
        return int(broker.run("flux", "job", "id", fluid).stdout)

    try:
        keeper = soak.JobKeeper(broker.env["FLUX_URI"], every=60.0)  # on demand only
        ended = submit("true")
        broker.run("flux", "job", "wait-event", str(ended), "clean")
        keeper.keep()
        assert ended in keeper.kept and not keeper.lost
        running_id = submit("sleep", "1")
        assert running_id in keeper.keep()  # seen while active, not kept
        deadline = time.monotonic() + 60
        while known() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not known(), "the job-manager did not purge the jobs"
        keeper.keep()
        assert keeper.lost == {running_id}
        job = keeper.kept[ended]
        assert job.state == "INACTIVE" and job.events[-1].name == "clean"
    finally:
        broker.stop()
