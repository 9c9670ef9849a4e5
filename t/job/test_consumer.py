"""Unit tier: how a consumer reads its task from a jobspec, why a job has none, and how
waiting for a result behaves — against the emulator through the real SDK, with the
emulator's ManualClock driving both the vendor's queue and the waiting."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from flux_quantum.catalog import Catalog, load_catalog, packaged_catalog_path
from flux_quantum.cli.task import Progress, TaskReport, format_json, format_text
from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    ENV_VARS,
    JobTask,
    NoTaskError,
    TaskFailedError,
    WaitTimeout,
    describe_snapshot,
    job_task_from_jobspec,
    open_vendor,
    resolve_jobid,
    shell_site_config,
    wait_result,
    watch_task,
)
from flux_quantum.protocol.events import parse_eventlog
from flux_quantum.protocol.jobspec import Released, ReleaseInfo
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState
from flux_quantum.vendors.local.vendor import LocalVendor

BELL = """OPENQASM 3.0;
qubit[2] q;
bit[2] c;
h q[0];
cnot q[0], q[1];
c = measure q;
"""
JOBID = 12345
TASK = "arn:aws:braket:us-east-1:123456789012:quantum-task/aaaa"


def jobspec(**system) -> dict:
    return {"version": 1, "attributes": {"system": {"duration": 0, **system}}}


def event(name: str, **context) -> dict:
    return {"timestamp": 1.0, "name": name, "context": context}


# --- reading the jobspec ------------------------------------------------------------------


def test_released_job_task_with_info():
    info = ReleaseInfo(
        vendor="local",
        device_id="arn:aws:braket:::device/quantum-simulator/amazon/sv1",
        region="us-east-1",
        tasks=(TASK, TASK + "b"),
        catalog="/etc/flux/quantum/backends.yaml",
    )
    spec = jobspec(qpu="local-sv1", **Released(TASK, "local-sv1", info).to_system())
    task = job_task_from_jobspec(JOBID, spec)
    assert task == JobTask(
        jobid=JOBID,
        task_id=TASK,
        device="local-sv1",
        tasks=(TASK, TASK + "b"),
        vendor="local",
        device_id=info.device_id,
        region="us-east-1",
        catalog=info.catalog,
    )
    assert task.info == info and not task.site_paid
    assert task.environment() == {
        "FLUX_QPU_TASK": TASK,
        "FLUX_QPU_TASKS": f"{TASK} {TASK}b",
        "FLUX_QPU_DEVICE": "local-sv1",
        "FLUX_QPU_VENDOR": "local",
    }
    assert set(task.environment()) == set(ENV_VARS)
    assert [r.task_id for r in task.refs()] == [TASK, TASK + "b"]
    assert task.ref().device == "local-sv1" and task.ref().vendor == "local"
    with pytest.raises(CommandError, match="is not one of job"):
        task.ref("arn:other")
    # A batch across devices lists one device per task.
    spanning = job_task_from_jobspec(
        JOBID,
        jobspec(
            qpu="local-sv1",
            **Released(
                TASK, "local-sv1", replace(info, devices=("local-sv1", "local-garnet"))
            ).to_system(),
        ),
    )
    assert [r.device for r in spanning.refs()] == ["local-sv1", "local-garnet"]
    # A device the release did not name usably is the job's device.
    gap = jobspec(qpu="local-sv1", qpu_task=TASK, qpu_device="local-sv1")
    gap["attributes"]["system"]["qpu_info"] = {"tasks": [TASK, TASK + "b"], "devices": [1, "g"]}
    assert [r.device for r in job_task_from_jobspec(JOBID, gap).refs()] == ["local-sv1", "g"]


def test_release_without_info_still_names_the_task():
    spec = jobspec(qpu="sv1", **Released(TASK, "sv1").to_system())
    assert "qpu_info" not in spec["attributes"]["system"]
    task = job_task_from_jobspec(JOBID, spec)
    assert task.tasks == (TASK,) and task.vendor is None and task.catalog is None
    assert "FLUX_QPU_VENDOR" not in task.environment()


def test_follower_job_rides_a_task():
    deps = [{"scheme": "qpu", "value": "f1234"}]
    spec = jobspec(dependencies=deps, qpu_task=TASK, qpu_device="sv1")
    assert job_task_from_jobspec(JOBID, spec).task_id == TASK


def test_ordinary_job_has_no_task():
    with pytest.raises(NoTaskError, match="did not ask for a QPU") as info:
        job_task_from_jobspec(JOBID, jobspec(dependencies=[{"scheme": "afterok"}]))
    assert info.value.reason == "not-qpu"


def test_held_job_has_no_task_yet():
    events = [event("submit"), event("dependency-add", description="qpu")]
    with pytest.raises(NoTaskError) as info:
        job_task_from_jobspec(JOBID, jobspec(qpu="sv1"), events)
    assert str(info.value).endswith("has no quantum task yet: it is still held (DEPEND)")
    assert info.value.reason == "held"


def test_job_that_ended_before_release():
    events = [
        event("dependency-add", description="qpu"),
        event("exception", type="qpu", severity=0, note="device offline"),
        event("clean"),
    ]
    with pytest.raises(NoTaskError) as info:
        job_task_from_jobspec(JOBID, jobspec(qpu="sv1"), events)
    assert str(info.value).endswith(
        "has no quantum task: it ended before it was released (qpu exception: device offline)"
    )
    assert info.value.reason == "ended"


def test_released_without_task_and_left_depend_by_hand():
    with pytest.raises(NoTaskError, match="released without a quantum task"):
        job_task_from_jobspec(JOBID, jobspec(qpu="sv1", qpu_task=""))
    events = [event("dependency-add", description="qpu"), event("depend"), event("alloc")]
    with pytest.raises(NoTaskError, match="left DEPEND without a release") as info:
        job_task_from_jobspec(JOBID, jobspec(qpu="sv1"), events)
    assert info.value.reason == "not-released"


def test_resolve_jobid_and_the_consumer_reads_eventlogs_with_the_protocols_parser():
    text = "\n".join(json.dumps(e) for e in [event("submit"), event("clean")]) + "\n"
    assert [e.name for e in parse_eventlog(text)] == ["submit", "clean"]
    assert parse_eventlog(None) == []
    assert resolve_jobid(None, environ={"FLUX_JOB_ID": "42"}) == 42
    assert resolve_jobid("0x10", environ={}) == 16
    with pytest.raises(CommandError, match="FLUX_JOB_ID is not set"):
        resolve_jobid(None, environ={})
    with pytest.raises(CommandError, match="invalid job id"):
        resolve_jobid("not-a-job", environ={})


def test_site_config_names_the_shell_plugin():
    text = shell_site_config()
    assert all(line.startswith("#") for line in text.splitlines())
    assert "shell_quantum.so" in text or "not built" in text


# --- waiting, against the emulator --------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def catalog() -> Catalog:
    return load_catalog(packaged_catalog_path())


@pytest.fixture
def emulator(clock, emulator_tier):
    emu = Emulator(clock=clock).start()
    yield emu
    emu.stop()


@pytest.fixture
def vendor(emulator, catalog) -> LocalVendor:
    return LocalVendor.from_emulator(emulator, devices=catalog.devices)


def released(catalog: Catalog, ref: TaskRef) -> JobTask:
    device = catalog.get(ref.device)
    info = ReleaseInfo(
        vendor=device.vendor,
        device_id=device.id,
        region=device.region,
        tasks=(ref.task_id,),
        catalog=catalog.path,
    )
    spec = jobspec(qpu=device.name, **Released(ref.task_id, device.name, info).to_system())
    return job_task_from_jobspec(JOBID, spec)


def test_wait_result_follows_the_queue_to_the_counts(vendor, catalog, clock):
    ref = vendor.submit(catalog.get("local-garnet"), BELL, 50, token="queued")
    seen: list[TaskSnapshot] = []
    result = wait_result(
        released(catalog, ref),
        vendor=vendor,
        on_update=seen.append,
        poll_interval=5.0,
        max_interval=60.0,
        clock=clock.now,
        sleep=clock.advance,
    )
    assert sum(result.counts.values()) == 50
    states = [s.state for s in seen]
    assert states[0] is TaskState.QUEUED and states[-1] is TaskState.COMPLETED
    positions = [s.position for s in seen if s.position is not None]
    assert positions == sorted(positions, reverse=True) and positions[0] > 1


def test_open_vendor_uses_the_release_catalog(emulator, catalog, clock):
    vendor = LocalVendor.from_emulator(emulator, devices=catalog.devices)
    ref = vendor.submit(catalog.get("local-sv1"), BELL, 10, token="open")
    task = released(catalog, ref)
    consumer_vendor = open_vendor(task, environ={"FLUX_QUANTUM_EMULATOR_URL": emulator.url})
    clock.advance(10)
    assert consumer_vendor.poll(task.ref()).state is TaskState.COMPLETED
    no_emulator = open_vendor(task, environ={})
    with pytest.raises(CommandError, match="FLUX_QUANTUM_EMULATOR_URL"):
        wait_result(task, vendor=no_emulator, clock=clock.now, sleep=clock.advance)


def test_wait_times_out_with_the_state(vendor, catalog, clock):
    ref = vendor.submit(catalog.get("local-forte1"), BELL, 10, token="long")
    with pytest.raises(WaitTimeout, match=r"is still QUEUED, position \d+ after 30s"):
        watch_task(vendor, ref, timeout=30, clock=clock.now, sleep=clock.advance)


def test_cancelled_task_has_no_result(vendor, catalog, clock):
    ref = vendor.submit(catalog.get("local-forte1"), BELL, 10, token="cancel")
    vendor.cancel(ref)
    clock.advance(1)
    with pytest.raises(TaskFailedError, match="ended CANCELLED") as info:
        wait_result(released(catalog, ref), vendor=vendor, clock=clock.now, sleep=clock.advance)
    assert info.value.snapshot.state is TaskState.CANCELLED


# --- what the command shows ---------------------------------------------------------------


def snapshot(state: TaskState, position: int | None = None) -> TaskSnapshot:
    return TaskSnapshot(task=TaskRef("local", "sv1", TASK), state=state, position=position)


def test_describe_snapshot():
    assert describe_snapshot(snapshot(TaskState.QUEUED, 3)) == "QUEUED, position 3"
    assert describe_snapshot(snapshot(TaskState.RUNNING)) == "RUNNING"
    failed = TaskSnapshot(TaskRef("local", "sv1", TASK), TaskState.FAILED, message="calibration")
    assert describe_snapshot(failed) == "FAILED: calibration"


def test_progress_lines_without_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream, tty=False)
    for s in [snapshot(TaskState.QUEUED, 3)] * 2 + [snapshot(TaskState.QUEUED, 2)]:
        progress.update("job task", s)
    progress.update("job task", snapshot(TaskState.COMPLETED))
    progress.finish()
    assert stream.getvalue().splitlines() == [
        "job task: QUEUED, position 3",
        "job task: QUEUED, position 2",
        "job task: COMPLETED",
    ]


def test_progress_one_line_on_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream, tty=True)
    progress.update("job task", snapshot(TaskState.QUEUED, 3))
    progress.update("job task", snapshot(TaskState.RUNNING))
    progress.finish()
    text = stream.getvalue()
    assert "\n" not in text
    assert text.count("\r\033[K") == 3 and "QUEUED, position 3 (" in text
    assert text.endswith("\r\033[K")


def test_progress_keeps_the_state_on_a_narrow_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    stream = io.StringIO()
    progress = Progress(stream, tty=True)
    progress.update("ƒ2jTNKdQ task 8e70f427 on local-garnet", snapshot(TaskState.QUEUED, 12))
    line = stream.getvalue().removeprefix("\r\033[K")
    assert len(line) == 29 and line.startswith("…") and "QUEUED, position 12 (" in line


def test_text_and_json_output():
    task = JobTask(JOBID, TASK, "local-sv1", (TASK,), vendor="local")
    reports = [TaskReport(task.ref(), snapshot(TaskState.COMPLETED), {"11": 4, "00": 6})]
    text = format_text(task, reports).splitlines()
    assert text[1] == "device:  local-sv1 (vendor local)"
    assert text[2:] == [f"task:    {TASK}", "state:   COMPLETED", "counts:  00=6 11=4"]
    data = json.loads(format_json(task, reports))
    assert data["id"] == JOBID and data["task"] == TASK and data["state"] == "COMPLETED"
    assert data["counts"] == {"00": 6, "11": 4}
    assert data["tasks"][0]["counts"] == {"00": 6, "11": 4}


def test_session_environment_names_qrmis_variables_or_says_why_there_is_none():
    """What `flux quantum task --session-env` prints comes from the vendor, read back
    through the job's task; a task that rode no session is one clear error."""
    from service_fakes import Clock, IbmLikeVendor, QueueModel

    from flux_quantum.catalog import parse_catalog
    from flux_quantum.cli.task import format_environment
    from flux_quantum.job.consumer import JobTask, session_environment

    fez = parse_catalog(
        "devices:\n  - {name: fez, vendor: ibm, id: ibm_fez, class: qpu, qubits: 156,"
        " price: {per_minute: 96}}\n"
    ).get("fez")
    vendor = IbmLikeVendor(Clock(), {"fez": QueueModel(2)}, [])
    session = vendor.open_session(fez, "dedicated").session
    rode = vendor.submit_in(session, fez, "OPENQASM 3.0;", 10, "fq-1-1-0-0")
    alone = vendor.submit(fez, "OPENQASM 3.0;", 10, "fq-2-1-0-0")

    def job(task: str) -> JobTask:
        return JobTask(jobid=42, task_id=task, device="fez", tasks=(task,), vendor="ibm")

    env = session_environment(job(rode.task_id), vendor)
    assert env == {"QRMI_JOB_ACQUISITION_TOKEN": session.session_id}
    assert format_environment({**env, "A_B": "x y"}) == (
        f"export A_B='x y'\nexport QRMI_JOB_ACQUISITION_TOKEN={session.session_id}"
    )
    with pytest.raises(CommandError, match="rode no session"):
        session_environment(job(alone.task_id), vendor)
