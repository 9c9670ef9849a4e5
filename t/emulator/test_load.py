"""The emulator under the load its own simulations used to die of (emulator tier).

The Braket local simulator forces numba's ``workqueue`` threading layer, which aborts a
process two threads simulate in at once: 16 clients on dm1 killed the emulator when its
simulations ran in the request threads. Here a ``flux quantum emulator --background``
process takes 16 threads x 50 tasks on dm1 (an 8-qubit GHZ program, the shape that
aborted it) and as many on SV1 at once, each task read to its result through the
Braket SDK (bench/sdk_suites.py's ``load`` part, which this runs): every task
COMPLETES, and the emulator's pid is the same at the end.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # sdk_suites imports benchlib beside it
_spec = importlib.util.spec_from_file_location("sdk_suites_bench", BENCH / "sdk_suites.py")
assert _spec is not None and _spec.loader is not None
sdk_suites = importlib.util.module_from_spec(_spec)
sys.modules["sdk_suites_bench"] = sdk_suites
_spec.loader.exec_module(sdk_suites)


@pytest.mark.emulator
def test_16_threads_x_50_tasks_on_dm1_and_sv1_all_complete_and_the_emulator_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    emulator = sdk_suites.Emulator(tmp_path, None, speed=200)
    try:
        for name, value in emulator.env.items():
            monkeypatch.setenv(name, value)
        result = sdk_suites.run_load(emulator, threads=16, per_thread=50)
    finally:
        emulator.stop()
    assert result.errors == []
    assert result.tasks == 2 * 16 * 50
    assert result.completed == result.tasks, result.other
    assert result.alive and result.pid_after == result.pid_before
