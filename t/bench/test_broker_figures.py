"""bench/broker_figures.py: a process's memory by kind read from /proc (unit tier, on
this test's own process), and (flux tier) what a real broker's modules say they keep,
before and after a job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import broker_figures  # noqa: E402


def test_memory_by_kind_adds_up_and_sees_a_new_allocation() -> None:
    before = broker_figures.memory_kinds(os.getpid())
    assert before["rss"] >= before["anon"] > 0 and before["file"] > 0
    assert before["heap"] + before["arenas"] <= before["anon"] + 1024
    block = bytearray(64 * 2**20)  # touched: resident, anonymous
    after = broker_figures.memory_kinds(os.getpid())
    assert after["anon"] - before["anon"] >= 60 * 1024
    assert after["largest_arena"] >= 60 * 1024
    del block
    assert broker_figures.memory_kinds(2**22 + 12345) == {}  # no such process


def test_a_tree_counts_its_files_bytes(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    assert broker_figures.tree_bytes(tmp_path) == 15
    assert broker_figures.tree_bytes(tmp_path / "none") == 0


@pytest.mark.flux
def test_a_brokers_modules_count_the_job_they_keep(tmp_path: Path) -> None:
    import flux
    from faults_arm import Broker

    (tmp_path / "conf").mkdir()
    broker = Broker(tmp_path, os.environ, [])
    broker.start()
    try:
        handle = flux.Flux(broker.env["FLUX_URI"])
        before = broker_figures.broker_figures(handle)
        assert before["mem_rss"] > 0 and before["jm_inactive"] == 0
        jobid = broker.run("flux", "submit", "true").stdout.strip()
        broker.run("flux", "job", "wait-event", jobid, "clean")
        after = broker_figures.broker_figures(handle)
        assert after["jm_inactive"] == 1 and after["jm_active"] == 0
        assert after["job_list_jobs"] == 1
        assert after["content_store_objects"] > before["content_store_objects"]
        assert after["content_cache_count"] > before["content_cache_count"]
        assert before["kvs_job_dir_entries"] == 0 and after["kvs_job_dir_entries"] == 1
        assert after["kvs_job_dir_bytes"] > 0
        broker.run("flux", "job", "purge", "--force", "--num-limit=0")
        purged = broker_figures.broker_figures(handle)
        assert purged["jm_inactive"] == 0
        assert purged["kvs_job_dir_entries"] == 1  # the purged job's parent is left
    finally:
        broker.stop()


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed")
def test_the_arenas_are_named_by_the_threads_that_allocate_from_them() -> None:
    """A child whose second thread, named ``fatthread``, holds 48 MB: gdb reads that
    thread's arena (about 48 MB) apart from the main thread's, and the child runs on."""
    code = (
        "import ctypes, threading, sys, time\n"
        "libc = ctypes.CDLL(None)\n"
        "def fat():\n"
        "    libc.prctl(15, b'fatthread', 0, 0, 0)\n"
        "    global block\n"
        "    block = [bytearray(1 << 16) for _ in range(768)]\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=fat, daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        arenas = broker_figures.malloc_arenas(child.pid)
        if not arenas:
            pytest.skip("libc's debugging symbols are not installed")
        assert arenas["fatthread"] >= 45 * 1024
        assert max(kb for name, kb in arenas.items() if name != "fatthread") < 45 * 1024
        assert child.poll() is None  # read, not stopped for good
    finally:
        child.kill()
        child.wait()
    assert broker_figures.malloc_arenas(2**22 + 12345) == {}
