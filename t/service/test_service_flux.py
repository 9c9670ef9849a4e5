"""Flux tier: the qpu handler service on real instances, the real plugin, the real
Braket SDK against the emulator (in this process, on 127.0.0.1, on a ManualClock the
tests advance), and consumers that read the released jobspec.

Each test gets a fresh emulator and a freshly started service (a broker module) in one
shared instance, so queues never leak between tests and every test also exercises a
clean module stop/start; the restart and priority tests start their own instances.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fluxinstance import FluxInstance
from qpu_setup import AT_FRONT, BELL, CONSUMER, FAST, GHZ, SCENARIO, Qpu, catalog_text, event_time

from flux_quantum.catalog import load_catalog
from flux_quantum.emulator import Emulator, ManualClock, Scenario
from flux_quantum.vendors.local.vendor import LocalVendor

pytestmark = pytest.mark.flux

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    instance = FluxInstance(tmp_path_factory.mktemp("service"), size=2).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture
def catalog(inst) -> Path:
    path = inst.workdir / "backends.yaml"
    path.write_text(catalog_text())
    return path


@pytest.fixture
def qpu(inst, catalog):
    q = Qpu(inst, catalog)
    yield q
    q.close()


def test_catalog_matches_the_scenario(catalog):
    names = load_catalog(catalog).names()
    assert "q-alpha" in names and "q-gamma" in names


def test_single_job_held_counts_down_released_consumer_reads_task(inst, qpu):
    qpu.start_service()
    (inst.workdir / "bell.qasm").write_text(BELL)
    consumer = CONSUMER + " && flux quantum task --wait --json"
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-alpha",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        "sh",
        "-c",
        consumer,
    )
    qpu.wait_event(jobid, "qpu-task")
    # Alpha: one task running and 4 waiting ahead of ours.
    qpu.position(jobid, 5)
    memo = qpu.memo(jobid)
    assert memo["qpu_device"] == "q-alpha" and memo["qpu_task"].startswith("arn:aws:braket")
    assert memo["qpu_wait"] == 40  # (5 - 1) tasks x 10 s
    jobs = json.loads(inst.quantum("jobs", "--json").stdout)
    row = next(j for j in jobs if j["jobid"] == jobid)
    assert (row["device"], row["position"], row["task"]) == ("q-alpha", 5, memo["qpu_task"])
    text = inst.quantum("jobs").stdout
    assert "DEVICE" in text.splitlines()[0] and "q-alpha" in text
    status = json.loads(inst.quantum("service", "status", "--json").stdout)
    assert status["running"] and status["counters"]["tasks_created"] == 1
    for expected in (4, 3, 2):
        qpu.advance(10)
        qpu.position(jobid, expected)
        assert qpu.job(jobid)["state"] == 2  # DEPEND: no node allocated while it waits
    assert "alloc" not in qpu.names(jobid)
    qpu.advance(10)
    qpu.wait_event(jobid, "qpu-release")
    qpu.advance(30)  # the task runs (10 s) and completes; the consumer reads its counts
    out = qpu.output(jobid)
    task = memo["qpu_task"]
    first, _, rest = out.partition("\n")
    arn, device, info = first.split(" ", 2)
    assert (arn, device) == (task, "q-alpha")
    info = json.loads(info)
    assert info["vendor"] == "local" and info["tasks"] == [task]
    assert info["device_id"].endswith("/Alpha") and info["region"] == "us-east-1"
    assert info["catalog"] == str(qpu.catalog)
    assert task in rest and "counts" in rest
    names = qpu.names(jobid)
    assert names.index("qpu-select") < names.index("qpu-submit") < names.index("qpu-task")
    milestones = [e["context"]["milestone"] for e in qpu.events(jobid) if e["name"] == "qpu-queue"]
    assert milestones == [10, 1]
    select = qpu.context(jobid, "qpu-select")["explanation"]
    assert select["chosen"] == "q-alpha" and select["policy"] == "explicit"
    submit = qpu.context(jobid, "qpu-submit")
    assert submit["program"] == "bell.qasm" and submit["token"].startswith("fq-")
    assert qpu.emu.call_count("CreateQuantumTask") == 1


def test_default_release_waits_for_the_result(inst, qpu):
    """The default release point is ``done``: the job stays held at position 1 and
    while its task runs, and is released only once the task has ended, so its nodes
    are allocated with the result already there."""
    qpu.start_service()
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-alpha",
        "sh",
        "-c",
        CONSUMER + " && flux quantum task --json",
        at_front=False,
    )
    qpu.wait_event(jobid, "qpu-task")
    qpu.position(jobid, 5)
    # 4 tasks ahead and the running one, then its own run: 6 x 10 s to the result
    assert qpu.memo(jobid)["qpu_wait"] == 60
    for expected in (4, 3, 2, 1):
        qpu.advance(10)
        qpu.position(jobid, expected)
    qpu.advance(10)
    qpu.until(lambda: qpu.memo(jobid).get("qpu_state") == "RUNNING")
    time.sleep(2.5)  # more than the longest poll interval (--poll-max=2)
    assert qpu.job(jobid)["state"] == 2 and "qpu-release" not in qpu.names(jobid)
    task = qpu.memo(jobid)["qpu_task"]
    assert qpu.emu.task_timeline(task).ended is None
    qpu.advance(10)
    qpu.wait_event(jobid, "qpu-release")
    assert qpu.emu.task_timeline(task).ended is not None
    assert qpu.context(jobid, "qpu-ready")["tasks"][0]["why"] == "COMPLETED"
    assert qpu.context(jobid, "qpu-submit")["token"].startswith("fq-")
    out = qpu.output(jobid)  # no clock advance needed: the result is there at start
    assert out.startswith(task) and "counts" in out


def test_fanout_group_follower_and_multinode_share_one_task(inst, qpu):
    """The leader keeps running until the late joiners have joined (it waits for the
    test's file, not for a time: the late follower must find it running however long
    their submits take)."""
    qpu.start_service()
    go = inst.workdir / "leader-may-end"
    leader = qpu.submit(
        "-N2",
        "--setattr=qpu.device=local:q-beta",
        "--setattr=qpu.group=fan",
        "sh",
        "-c",
        CONSUMER + f"; while [ ! -e {go} ]; do sleep 0.1; done",
    )
    member = qpu.submit(
        "--setattr=qpu.device=local:q-beta", "--setattr=qpu.group=fan", "sh", "-c", CONSUMER
    )
    follower = qpu.submit(f"--dependency=qpu:{leader}", "sh", "-c", CONSUMER)
    for jobid in (leader, member, follower):
        qpu.wait_event(jobid, "qpu-task")
        qpu.position(jobid, 4)
    assert qpu.context(member, "qpu-join")["via"] == "group"
    assert qpu.context(follower, "qpu-join")["via"] == "follow"
    task = qpu.memo(leader)["qpu_task"]
    assert qpu.memo(member)["qpu_task"] == qpu.memo(follower)["qpu_task"] == task
    # every job's own eventlog records the shared token and task (enough to recover)
    assert qpu.context(follower, "qpu-task")["task"] == task
    qpu.advance(30)
    for jobid in (leader, member, follower):
        qpu.wait_event(jobid, "qpu-release")
    # late joiners ride the released task at once: a group member, and a follower of
    # the leader while it still runs
    late = qpu.submit(
        "--setattr=qpu.device=local:q-beta", "--setattr=qpu.group=fan", "sh", "-c", CONSUMER
    )
    late_follower = qpu.submit(f"--dependency=qpu:{leader}", "sh", "-c", CONSUMER)
    for jobid in (late, late_follower):
        qpu.wait_event(jobid, "qpu-join")
    assert inst.state(leader) == "RUN"
    go.touch()
    outputs = {j: qpu.output(j) for j in (leader, member, follower, late, late_follower)}
    assert len(outputs[leader].splitlines()) == 2  # one consumer task per node
    for out in outputs.values():
        for line in out.splitlines():
            assert line.split()[:2] == [task, "q-beta"]
    assert qpu.context(late, "qpu-join")["late"] is True
    assert qpu.emu.call_count("CreateQuantumTask") == 1


def test_batch_one_task_per_program_released_when_all_are_ready(inst, qpu):
    qpu.start_service()
    (inst.workdir / "a.qasm").write_text(BELL)
    (inst.workdir / "b.qasm").write_text(GHZ)
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-epsilon",
        '--setattr=qpu.program=["a.qasm","b.qasm"]',
        "sh",
        "-c",
        CONSUMER,
    )
    qpu.until(lambda: sum(n == "qpu-task" for n in qpu.names(jobid)) == 2)
    qpu.position(jobid, 4)  # the furthest of the two tasks (3 and 4)
    qpu.advance(20)  # first task at position 1, second at 2: not yet
    qpu.position(jobid, 2)
    time.sleep(1.0)
    assert "qpu-release" not in qpu.names(jobid)
    qpu.advance(10)
    qpu.wait_event(jobid, "qpu-release")
    arn, device, info = qpu.output(jobid).split(" ", 2)
    created = [e["context"] for e in qpu.events(jobid) if e["name"] == "qpu-task"]
    tasks = [c["task"] for c in sorted(created, key=lambda c: c["index"])]
    assert json.loads(info)["tasks"] == tasks and arn == tasks[0] and device == "q-epsilon"
    assert [e["context"]["program"] for e in qpu.events(jobid) if e["name"] == "qpu-submit"] == [
        "a.qasm",
        "b.qasm",
    ]
    assert qpu.emu.call_count("CreateQuantumTask") == 2


def test_vendor_task_failed_fails_the_job_with_the_vendors_reason(inst, qpu):
    qpu.start_service()
    jobid = qpu.submit("--setattr=qpu.device=local:q-faulty", "true")
    qpu.wait_event(jobid, "clean")
    failed = qpu.context(jobid, "qpu-task-failed")
    assert failed["state"] == "FAILED" and "calibration drifted" in failed["reason"]
    exc = qpu.context(jobid, "exception")
    assert exc["type"] == "qpu" and exc["severity"] == 0
    assert "calibration drifted" in exc["note"] and "qpu.failover=fail" in exc["note"]
    assert "qpu-release" not in qpu.names(jobid)


def test_failover_next_chooses_another_device_with_a_new_token(inst, qpu):
    qpu.start_service()
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-faulty",
        "--setattr=qpu.failover=next",
        "--setattr=qpu.class=qpu",
        "sh",
        "-c",
        CONSUMER,
    )
    arn, device, _ = qpu.output(jobid).split(" ", 2)
    assert device == "q-delta"  # the QPU with the shortest expected wait, faulty excluded
    failover = qpu.context(jobid, "qpu-failover")
    assert failover["from"] == "q-faulty" and failover["exclude"] == ["q-faulty"]
    submits = [e["context"] for e in qpu.events(jobid) if e["name"] == "qpu-submit"]
    assert [s["device"] for s in submits] == ["q-faulty", "q-delta"]
    assert submits[0]["token"] != submits[1]["token"]
    assert len(qpu.emu.task_arns()) == 2 and arn == qpu.emu.task_arns()[1]


def test_device_offline_while_waiting_cancels_then_fails_over_to_a_simulator(inst, qpu):
    qpu.start_service()
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-doomed",
        "--setattr=qpu.failover=simulator",
        "sh",
        "-c",
        CONSUMER,
    )
    qpu.wait_event(jobid, "qpu-task")
    doomed = qpu.memo(jobid)["qpu_task"]
    qpu.advance(20)  # Doomed goes down for maintenance at t=15
    arn, device, _ = qpu.output(jobid).split(" ", 2)
    assert device == "q-gamma" and arn != doomed
    gone = qpu.context(jobid, "qpu-device-unavailable")
    assert gone["status"].startswith("OFFLINE") and gone["task"] == doomed
    assert qpu.context(jobid, "qpu-failover")["class"] == "simulator"
    qpu.until(lambda: qpu.emu.call_count("CancelQuantumTask", target=doomed) == 1)


def test_max_wait_exceeded_cancels_the_task_and_fails_the_job(inst, qpu):
    qpu.start_service()
    jobid = qpu.submit("--setattr=qpu.device=local:q-slow", "--setattr=qpu.max_wait=3s", "true")
    qpu.wait_event(jobid, "clean", timeout=30)
    waited = qpu.context(jobid, "qpu-max-wait")
    assert waited["max_wait"] == 3 and waited["waited"] >= 3
    assert "qpu.max_wait" in qpu.context(jobid, "exception")["note"]
    qpu.until(lambda: qpu.emu.call_count("CancelQuantumTask") == 1)


def test_user_cancel_cancels_the_task_only_when_its_last_job_is_gone(inst, qpu):
    qpu.start_service()
    group = ("--setattr=qpu.device=local:q-alpha", "--setattr=qpu.group=pair", "true")
    first, second = qpu.submit(*group), qpu.submit(*group)
    single = qpu.submit("--setattr=qpu.device=local:q-beta", "true")
    for jobid in (first, second, single):
        qpu.wait_event(jobid, "qpu-task")
    # Counted from here: the module's ledger is shared, and the new service's first scan
    # cancels a task an earlier test's teardown left reserved (its job cancelled while
    # held), whose ARN this emulator, seeded alike, may give again.
    before = qpu.emu.call_count("CancelQuantumTask")
    shared = qpu.memo(second)["qpu_task"]
    shared_before = qpu.emu.call_count("CancelQuantumTask", target=shared)
    inst.run(["flux", "cancel", first])
    qpu.wait_event(first, "clean")
    time.sleep(1.5)  # several scans: the task still has a job riding it
    assert qpu.emu.call_count("CancelQuantumTask") - before == 0
    inst.run(["flux", "cancel", second, single])
    qpu.until(lambda: qpu.emu.call_count("CancelQuantumTask") - before == 2)
    assert qpu.emu.call_count("CancelQuantumTask", target=shared) - shared_before == 1


def test_vendor_throttling_is_retried_and_the_job_stays_held(inst, qpu):
    qpu.start_service()
    jobid = qpu.submit("--setattr=qpu.device=local:q-flaky", "sh", "-c", CONSUMER)
    qpu.wait_event(jobid, "qpu-task", timeout=40)
    retry = qpu.context(jobid, "qpu-retry")
    assert retry["code"] == "ThrottlingException" and retry["operation"] == "create"
    qpu.position(jobid, 2, timeout=30)
    assert qpu.job(jobid)["state"] == 2
    qpu.advance(10)
    arn, device, _ = qpu.output(jobid).split(" ", 2)
    assert device == "q-flaky"
    assert qpu.emu.task_arns() == [arn]  # throttled creates made no task; one did


def test_a_vendor_that_does_not_answer_is_said_in_flux_quantum_jobs_and_the_memo(inst, qpu):
    """Nothing listens where the vendor should be: the job waits held, and why is in
    its memo, in ``flux quantum jobs`` and in the service's counters, not only in the
    eventlog."""
    inst.quantum(
        "service",
        "start",
        f"--catalog={qpu.catalog}",
        "--emulator-url=http://127.0.0.1:9",  # the discard port: nothing answers
        *FAST,
    )
    jobid = qpu.submit("--setattr=qpu.device=local:q-alpha", "true")
    qpu.wait_event(jobid, "qpu-wait", timeout=60)
    assert "q-alpha did not answer" in qpu.context(jobid, "qpu-wait")["reason"]
    qpu.until(lambda: qpu.memo(jobid).get("qpu_state", "").startswith("waiting"))
    state = qpu.memo(jobid)["qpu_state"]
    assert "q-alpha did not answer" in state and "next try in" in state
    rows = inst.quantum("jobs").stdout.splitlines()
    assert "QPU_STATE" in rows[0]
    row = next(line for line in rows if jobid in line)
    assert "waiting: q-alpha did not answer" in row
    listed = json.loads(inst.quantum("jobs", "--json").stdout)
    shown = next(j for j in listed if j["jobid"] == jobid)["qpu_state"]
    assert shown.startswith("waiting: q-alpha did not answer")
    status = json.loads(inst.quantum("service", "status", "--json").stdout)
    assert status["counters"]["vendor_errors"] >= 1
    [task] = status["units"][0]["tasks"]
    assert task["waiting"].startswith("q-alpha did not answer")
    inst.run(["flux", "cancel", jobid])


def test_recorded_token_without_a_task_gets_the_same_task_back(inst, qpu, catalog):
    """The service died after the vendor created the task but before qpu-task was
    recorded: a new service creates again with the recorded token, and the vendor
    returns the task it already has."""
    from flux.job import JobID

    from flux_quantum.instance.plugin import PluginClient

    (inst.workdir / "bell.qasm").write_text(BELL)
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-delta",
        "--setattr=qpu.program=bell.qasm",
        "sh",
        "-c",
        CONSUMER,
    )
    qpu.wait_event(jobid, "dependency-add")
    devices = load_catalog(catalog)
    token = "fq-crashed-after-create"
    vendor = LocalVendor.from_emulator(qpu.emu, devices=devices.devices)
    created = vendor.submit(devices.get("q-delta"), BELL, 1000, token)
    number = int(JobID(jobid))
    context = {"unit": number, "index": 0, "attempt": 0, "token": token, "device": "q-delta"}
    context.update(vendor="local", shots=1000, program="bell.qasm")
    PluginClient(qpu.handle).post_event(number, "qpu-submit", context)
    qpu.start_service()
    arn, device, _ = qpu.output(jobid).split(" ", 2)
    assert arn == created.task_id and device == "q-delta"
    assert qpu.emu.task_arns() == [created.task_id]
    assert "qpu-select" not in qpu.names(jobid)


def _status(inst: FluxInstance) -> dict[str, Any]:
    return json.loads(inst.quantum("service", "status", "--json").stdout)


def test_service_killed_is_restarted_reattaches_and_never_submits_twice(inst, qpu):
    """kill -9 of the real service process that `service start` started: its supervisor
    restarts it, the new process re-attaches the recorded tasks from the eventlogs,
    and every task is created exactly once."""

    qpu.start_service()
    first = _status(inst)
    pid = first["pid"]
    assert first["supervisor"]["pid"] == pid and first["supervisor"]["restarts"] == 0
    # The project's interpreter (the CLI may run it as python3, this test as python).
    assert os.path.realpath(first["supervisor"]["python"]) == os.path.realpath(sys.executable)
    a = qpu.submit("--setattr=qpu.device=local:q-alpha", "sh", "-c", CONSUMER)
    b = qpu.submit("--setattr=qpu.device=local:q-beta", "sh", "-c", CONSUMER)
    for jobid in (a, b):
        qpu.wait_event(jobid, "qpu-task")
        qpu.until(lambda jobid=jobid: qpu.memo(jobid).get("qpu_position"))
    os.kill(pid, signal.SIGKILL)
    late = qpu.submit("--setattr=qpu.device=local:q-delta", "sh", "-c", CONSUMER)
    qpu.wait_event(late, "dependency-add")
    restarted = qpu.until(lambda: (s := _status(inst)).get("running") and s["pid"] != pid and s)
    assert restarted["supervisor"]["restarts"] == 1
    assert restarted["supervisor"]["last_exit"] == "killed by SIGKILL"

    def counters() -> dict[str, int]:
        return _status(inst)["counters"]

    # a and b re-attached from their eventlogs; the late job's task is the only create
    qpu.until(lambda: (c := counters())["tasks_attached"] == 2 and c["tasks_created"] == 1)
    qpu.advance(40)
    tasks = {}
    for jobid in (a, b, late):
        arn, device, _ = qpu.output(jobid).split(" ", 2)
        tasks[jobid] = arn
    assert len(set(tasks.values())) == 3
    assert qpu.emu.call_count("CreateQuantumTask") == 3  # exactly one per task
    assert sorted(qpu.emu.task_arns()) == sorted(tasks.values())


def test_the_service_also_runs_in_the_brokers_own_python(inst, qpu, tmp_path_factory):
    """The other set-up: flux-quantum installed into the very Python the broker runs
    (a venv of it). The CLI here is this venv's; the service, the broker's."""
    code = "import sys; print(sys.executable)"
    broker_python = inst.run(["flux", "python", "-c", code]).stdout.strip()
    assert broker_python != sys.executable  # the flux tier itself runs the other set-up
    venv = tmp_path_factory.mktemp("broker-python") / "venv"
    subprocess.run([broker_python, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(REPO)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    python = venv / "bin" / "python"
    qpu.start_service(f"--python={python}")
    status = _status(inst)
    assert status["supervisor"]["python"] == str(python)
    jobid = qpu.submit("--setattr=qpu.device=local:q-delta", "sh", "-c", CONSUMER)
    qpu.wait_event(jobid, "qpu-task")
    qpu.advance(20)
    arn, device, _ = qpu.output(jobid).split(" ", 2)
    assert device == "q-delta" and arn == qpu.emu.task_arns()[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_service_run_stops_cleanly_on_ctrl_c_and_sigterm(inst, qpu, sig):
    """`flux quantum service run` in a terminal: Ctrl-C (or a SIGTERM) stops it with
    status 0 and says why, rather than leaving it running or killing it mid-call."""
    proc = subprocess.Popen(
        ["flux", "quantum", "service", "run", "-v"],
        env=inst.env,
        cwd=inst.workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while inst.quantum("service", "status", check=False).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, "service did not start"
            time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"signal {int(sig)}: stopping" in err


def test_start_fails_with_the_services_own_error_and_leaves_nothing_loaded(inst, qpu):
    """A service that cannot run in the interpreter it was given (here the broker's
    own Python, where flux-quantum is not installed): start says why in the service's
    words, exits non-zero and unloads its supervisor."""
    broker_python = inst.run(["flux", "python", "-c", "import sys; print(sys.executable)"])
    res = inst.quantum(
        "service",
        "start",
        f"--catalog={qpu.catalog}",
        f"--python={broker_python.stdout.strip()}",
        check=False,
    )
    assert res.returncode != 0
    assert "did not start" in res.stderr and "No module named 'flux_quantum'" in res.stderr
    assert "qpu_handlers" not in inst.run(["flux", "module", "list"]).stdout


def test_a_service_that_keeps_failing_is_logged_once_with_a_count(inst, qpu):
    from flux_quantum.cli.service import module_path

    broker_python = inst.run(["flux", "python", "-c", "import sys; print(sys.executable)"])
    load = ["flux", "module", "load", "--name=qpu_crashing", str(module_path())]
    inst.run([*load, f"python={broker_python.stdout.strip()}", "restart-max=0.1"])
    try:

        def status() -> dict[str, Any]:
            code = _RPC.format(topic="qpu_crashing.status")
            return json.loads(inst.run(["flux", "python", "-c", code]).stdout)

        qpu.until(lambda: status()["supervisor"]["restarts"] >= 8, timeout=30)
        said = [
            line
            for line in inst.run(["flux", "dmesg"]).stdout.splitlines()
            if "qpu_crashing" in line and "restarting in" in line
        ]
        # once, then at 2, 4, 8 ... times
        assert 1 <= len(said) <= 4, said
        assert "No module named 'flux_quantum'" in said[0]
        assert any("(8 times)" in line for line in said), said
        relayed = [
            line
            for line in inst.run(["flux", "dmesg"]).stdout.splitlines()
            if "qpu_crashing.err" in line and "qpu service: " in line and "No module" in line
        ]
        assert len(relayed) == 1, relayed  # the service's own words, once
        assert status()["supervisor"]["state"] in ("restarting", "starting")
    finally:
        inst.run(["flux", "module", "remove", "qpu_crashing"], check=False)


_RPC = "import flux, json; print(json.dumps(flux.Flux().rpc('{topic}', {{}}).get()))"


def test_a_service_killed_after_it_worked_is_restarted_at_once_every_time(inst, qpu):
    """A kill -9 of a service that was ready and working (an admin's kill, the OOM
    killer) is no crash loop: every restart comes after 1 s, not after 1, 2, 4 s
    (bench/faults.py measured 8.7 s back to full work after a fourth kill)."""
    from flux_quantum.cli.service import module_path

    words = [f"python={sys.executable}", f"catalog={qpu.catalog}"]
    words += [f"emulator-url={qpu.emu.url}", "healthy-after=0"]
    inst.run(["flux", "module", "load", "--name=qpu_killed", str(module_path()), *words])
    try:

        def supervisor() -> dict[str, Any]:
            code = _RPC.format(topic="qpu_killed.status")
            return json.loads(inst.run(["flux", "python", "-c", code]).stdout)["supervisor"]

        pid = None
        for kills in (1, 2, 3):
            ready = qpu.until(
                lambda pid=pid: (s := supervisor())["state"] == "running" and s["pid"] != pid and s
            )
            pid = ready["pid"]
            os.kill(pid, signal.SIGKILL)
            qpu.until(lambda kills=kills: supervisor()["restarts"] >= kills)
        said = [
            line
            for line in inst.run(["flux", "dmesg"]).stdout.splitlines()
            if "qpu_killed" in line and "restarting in" in line
        ]
        assert len(said) == 2, said  # said at 1 and 2 times, not at the third
        assert all("killed by SIGKILL" in line and "restarting in 1s" in line for line in said)
    finally:
        inst.run(["flux", "module", "remove", "qpu_killed"], check=False)


def test_run_refuses_a_second_service_and_status_reports(inst, qpu):
    qpu.start_service()
    res = inst.quantum(
        "service", "run", f"--catalog={qpu.catalog}", f"--emulator-url={qpu.emu.url}", check=False
    )
    assert res.returncode != 0 and "already running" in res.stderr
    res = inst.quantum("service", "start", f"--catalog={qpu.catalog}", check=False)
    assert res.returncode != 0 and "already running" in res.stderr
    text = inst.quantum("service", "status").stdout
    assert "qpu handler service 'qpu_handlers': up" in text
    qpu.stop_service()
    res = inst.quantum("service", "status", check=False)
    assert res.returncode != 0 and "not running" in res.stderr


def test_busy_instance_releases_early_and_the_released_job_overtakes(inst, qpu):
    """Item 7: every core is busy for a minute by its time limit; the held job's task
    is predicted to reach its release point in ~2 s, so it is released now (its task
    still queued) and, with the plugin's release priority, starts before an older
    ordinary job once the cores free up. The service is told running jobs run 90 % of
    their limits (a fresh instance has no finished jobs to learn it from). The blocker
    ends when the test cancels it, after the release: however long this machine takes
    to create the task (the service's first create imports the vendor's SDK), the
    cores are still busy when the service decides."""
    qpu.start_service("--lead-share=0.9")
    blocker = inst.submit("-N2", "--exclusive", "-t", "60s", "sleep", "60")
    qpu.wait_event(blocker, "start")
    ordinary = inst.submit("-N2", "--exclusive", "true")
    held = qpu.submit("-N2", "--exclusive", "--setattr=qpu.device=local:q-zeta", "true")
    qpu.wait_event(held, "qpu-release", timeout=50)
    ready = qpu.context(held, "qpu-ready")["tasks"][0]["why"]
    assert ready.startswith("classical lead")
    assert qpu.memo(held)["qpu_position"] == 3  # released while its task still waits
    inst.run(["flux", "job", "wait-event", "-t", "30", "-m", "priority=4294967295", held,
              "priority"])  # fmt: skip
    assert inst.state(ordinary) == "SCHED"
    inst.run(["flux", "cancel", blocker])
    for jobid in (held, ordinary):
        qpu.wait_event(jobid, "clean", timeout=30)
    start = {j: event_time(qpu, j, "start") for j in (held, ordinary)}
    assert start[held] < start[ordinary]
    assert qpu.context(held, "priority")["priority"] == 4294967295


def test_predict_releases_by_time_while_the_task_runs(inst, qpu):
    """release_at=predict on an idle device (its task runs at once, 10 s of service by
    the catalog's prior): held while the expected wait for the result exceeds the job
    start-up lead (8 s here), released ~2 s of real time after the task was seen
    RUNNING, task still running; the service then measures the job's start-up."""
    qpu.start_service("--startup-default=8")
    jobid = qpu.submit(
        "--setattr=qpu.device=local:q-delta", "--setattr=qpu.release_at=predict", "true"
    )
    qpu.until(lambda: qpu.memo(jobid).get("qpu_state") == "RUNNING")
    seen = time.monotonic()
    assert "qpu-release" not in qpu.names(jobid)  # 10 s expected > 8 s lead
    qpu.wait_event(jobid, "qpu-release", timeout=10)
    assert time.monotonic() - seen >= 1.0
    why = qpu.context(jobid, "qpu-ready")["tasks"][0]["why"]
    assert why.startswith("predicted: expected wait for the result"), why
    assert qpu.emu.task_timeline(qpu.emu.task_arns()[0]).ended is None  # still running
    qpu.wait_event(jobid, "clean")
    status = lambda: json.loads(inst.quantum("service", "status", "--json").stdout)  # noqa: E731
    assert qpu.until(lambda: status()["startup"]["samples"] >= 1, timeout=10)


def test_instance_restart_mid_wait_reattaches(tmp_path, catalog):
    clock = ManualClock()
    emu = Emulator(Scenario.from_dict(SCENARIO), clock=clock).start()
    inst = FluxInstance(tmp_path, size=1, statedir=True).start()
    args = ("service", "start", f"--catalog={catalog}", f"--emulator-url={emu.url}", *FAST)
    env = {"FLUX_QUANTUM_EMULATOR_URL": emu.url}
    try:
        inst.quantum(*args)
        jobid = inst.submit(
            AT_FRONT, "--setattr=qpu.device=local:q-alpha", "sh", "-c", CONSUMER, env=env
        )
        inst.wait_event(jobid, "qpu-task")
        assert inst.stop() == 0, inst.broker_log()  # the module stops cleanly on SIGTERM
        inst.start()
        assert inst.state(jobid) == "DEPEND"
        inst.quantum(*args)
        clock.advance(40)
        inst.wait_event(jobid, "clean", timeout=60)
        out = inst.run(["flux", "job", "attach", jobid]).stdout
        assert out.split()[0] == emu.task_arns()[0]
        assert emu.call_count("CreateQuantumTask") == 1
    finally:
        inst.stop()
        emu.stop()


def test_one_slot_device_never_has_two_tasks_in_flight(inst, qpu):
    """q-solo has one slot: the second and third jobs wait (qpu-wait) until the task
    before theirs is released, so the site never has two tasks queued there; the
    oldest waiting job gets the slot first."""
    qpu.start_service()
    jobs = [qpu.submit("--setattr=qpu.device=local:q-solo", "true") for _ in range(3)]
    qpu.wait_event(jobs[0], "qpu-task")
    for jobid in jobs[1:]:
        qpu.wait_event(jobid, "qpu-wait")
        assert "slot(s) of q-solo in use" in qpu.context(jobid, "qpu-wait")["reason"]
    assert qpu.emu.call_count("CreateQuantumTask") == 1
    for jobid in jobs:
        # drive the emulated queue until this job is released
        qpu.until(lambda jobid=jobid: qpu.advance(5) or "qpu-release" in qpu.names(jobid))
    # [created, released] of the three tasks never overlap, in submit order
    spans = [(event_time(qpu, j, "qpu-task"), event_time(qpu, j, "qpu-release")) for j in jobs]
    assert spans[1][0] > spans[0][1] and spans[2][0] > spans[1][1]
    assert qpu.emu.call_count("CreateQuantumTask") == 3


def test_demo_runs_end_to_end():
    """flux quantum demo: its own emulator, instance and service; a 4-node job held
    while its task waits, released, every node prints the result."""
    import sys

    env = {k: v for k, v in os.environ.items() if k != "FLUX_URI"}
    cmd = [sys.executable, "-m", "flux_quantum.cli.main", "demo", "--depth=12", "--speed=40"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "DEPEND  device demo-qpu" in out and "nodes allocated: 0" in out
    assert "released (task COMPLETED): Fluxion allocates 4 nodes now" in out
    assert out.count("counts {") == 4
    assert "node-seconds idle waiting for the quantum result: gated" in out


def test_graph_loaded_release_allocates_the_qpu_and_status_follows_the_vendor(tmp_path, catalog):
    """With the catalog's devices in Fluxion's graph (flux quantum graph load), a
    released job also asks for a qpu slot of its task's device, so its allocation
    records the QPU (R.scheduling); a device seen offline is marked down there."""
    clock = ManualClock()
    emu = Emulator(Scenario.from_dict(SCENARIO), clock=clock).start()
    inst = FluxInstance(tmp_path, size=1).start()
    try:
        inst.quantum("graph", "load", str(catalog))
        inst.quantum("service", "start", f"--catalog={catalog}", f"--emulator-url={emu.url}", *FAST)
        quick = inst.submit(AT_FRONT, "--setattr=qpu.device=local:q-delta", "-n1", "true")
        doomed = inst.submit(
            AT_FRONT,
            "--setattr=qpu.device=local:q-doomed",
            "--setattr=qpu.failover=simulator",
            "true",
        )
        inst.wait_event(quick, "clean")
        R = json.loads(inst.run(["flux", "job", "info", quick, "R"]).stdout)
        paths = [n["metadata"]["paths"]["containment"] for n in R["scheduling"]["graph"]["nodes"]]
        assert any(p.startswith("/cluster0/qpu-q-delta/qpu") for p in paths)
        inst.wait_event(doomed, "qpu-task")
        clock.advance(20)
        inst.wait_event(doomed, "clean", timeout=40)
        rows = inst.quantum("graph", "list", "-n", "-o", "{device} {slot} {status}").stdout
        assert "q-doomed 0 down" in rows.splitlines() and "q-gamma 0 up" in rows.splitlines()
        R = json.loads(inst.run(["flux", "job", "info", doomed, "R"]).stdout)
        assert "qpu-q-gamma" in json.dumps(R["scheduling"])
    finally:
        inst.stop()
        emu.stop()


VARIATIONAL = r"""
import os
from flux_quantum.catalog import load_catalog
from flux_quantum.job.consumer import current_task, open_vendor, result_of, watch_task

job = current_task()  # released at the first task: the job now holds its nodes
vendor = open_vendor(job)
device = load_catalog(job.catalog).get(job.device)
ref = job.ref()
for iteration in range(3):
    snapshot = watch_task(vendor, ref, poll_interval=0.2)
    counts = result_of(vendor, ref, snapshot).counts
    print(iteration, ref.task_id, sum(counts.values()), flush=True)
    if iteration < 2:  # the next iteration, from inside the job, same vendor and device
        program = open(os.environ["PROGRAM"]).read()
        token = f"{os.environ['FLUX_JOB_ID']}-iter-{iteration + 1}"
        ref = vendor.submit(device, program, 50, token)
"""


def test_variational_released_at_the_first_task_then_iterates_from_inside(inst, qpu):
    qpu.start_service()
    (inst.workdir / "bell.qasm").write_text(BELL)
    (inst.workdir / "loop.py").write_text(VARIATIONAL)
    env = {**qpu.job_env, "PROGRAM": str(inst.workdir / "bell.qasm")}
    jobid = inst.submit(
        AT_FRONT,
        "--setattr=qpu.device=local:q-delta",
        "--setattr=qpu.program=bell.qasm",
        "--setattr=qpu.shots=100",
        sys.executable,
        str(inst.workdir / "loop.py"),
        env=env,
    )
    qpu.wait_event(jobid, "qpu-release")
    # drive the emulated device until the job's three iterations are done
    qpu.until(lambda: qpu.advance(5) or qpu.job(jobid)["state"] == 64, timeout=60)
    lines = [line.split() for line in qpu.output(jobid).splitlines()]
    assert [int(line[0]) for line in lines] == [0, 1, 2]
    assert lines[0][1] == qpu.context(jobid, "qpu-task")["task"]
    assert [line[2] for line in lines] == ["100", "50", "50"]
    # the service created the first task only; the job created the others
    assert qpu.emu.call_count("CreateQuantumTask") == 3 and len(set(line[1] for line in lines)) == 3
