"""Flux tier: the steps of a variational loop share one IBM session, on a real instance
with the handler service and the real qrmi client against the emulator's IBM side (the
world of ``test_ibm_flux``: a ManualClock the test advances).

Step A (``qpu.session=dedicated``, ``qpu.loop=l1``) is held until its task is done,
then runs and submits step B (the same request, the same loop) before it exits, as
``flux quantum loop`` does. B's task rides the session A's task opened; the session is
closed once B has ended, and the emulator saw one session, both tasks in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from ibm_setup import Ibm

pytestmark = pytest.mark.flux

STEP = (
    "--setattr=qpu.device=ibm:ride",
    "--setattr=qpu.session=dedicated",
    "--setattr=qpu.loop=l1",
    "--setattr=qpu.program=bell.qasm",
)


@pytest.fixture
def ibm(tmp_path_factory) -> Iterator[Ibm]:
    world = Ibm(tmp_path_factory.mktemp("loop"))
    world.start_service()
    yield world
    world.close()
    assert world.inst.stop() == 0, world.inst.broker_log()


def test_a_loops_two_steps_ride_one_session_closed_after_the_last_ended(ibm: Ibm):
    stop = ibm.inst.workdir / "stop-loop"
    (ibm.inst.workdir / "step-b.sh").write_text(f"while [ ! -e {stop} ]; do sleep 0.1; done\n")
    # Step A submits step B and exits (release_at=done: held until its task is done).
    first = ibm.submit(*STEP, "flux", "submit", *STEP, "sh", "step-b.sh", at_front=False)
    ibm.wait_event(first, "qpu-task", timeout=40)
    opened = ibm.context(first, "qpu-session")
    assert (opened["mode"], opened["loop"]) == ("dedicated", "l1") and "joined" not in opened
    [session_id] = ibm.emu.ibm.session_ids()
    assert session_id not in json.dumps(ibm.events(first))  # the id is a secret
    ibm.clock.advance(15)  # A's task is done: A runs, submits B, ends
    second = ibm.output(first).strip()
    ibm.wait_event(second, "qpu-task", timeout=40)
    joined = ibm.context(second, "qpu-session")
    assert joined["fingerprint"] == opened["fingerprint"]
    from flux.job import JobID

    assert joined["joined"] == JobID(first) and joined["loop"] == "l1"
    assert ibm.context(second, "qpu-submit")["session"] == opened["fingerprint"]
    tasks = [ibm.context(j, "qpu-task")["task"] for j in (first, second)]
    assert ibm.emu.ibm.session_ids() == [session_id]
    assert ibm.emu.ibm.session_jobs(session_id) == tasks  # both ride it
    assert ibm.emu.call_count("CreateSession") == 1
    ibm.clock.advance(15)  # B's task is done: B runs until told to stop
    ibm.wait_event(second, "qpu-release", timeout=40)
    assert not ibm.closed(session_id) and ibm.status()["sessions_open"] == 1
    stop.touch()
    ibm.wait_event(second, "clean", timeout=30)
    status = json.loads(ibm.inst.quantum("service", "status", "--wait-idle=60", "--json").stdout)
    assert ibm.closed(session_id)
    counters = status["counters"]
    assert (counters["sessions_opened"], counters["sessions_joined"]) == (1, 1)
    assert counters["sessions_closed"] == 1
    assert ibm.emu.call_count("CreateSession") == 1
