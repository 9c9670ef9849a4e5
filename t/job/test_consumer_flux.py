"""Flux tier: consumers find their task — FLUX_QPU_* from the job-shell plugin on every
rank, ``flux quantum task`` and the Python helper inside and outside the job.

The test plays the handlers' part: it creates a real task on the emulator (127.0.0.1,
ManualClock) through the vendor layer and releases the held job with PluginClient. The
shell plugin is loaded the way ``flux quantum config`` tells a site to: its lua.d drop-in
line (in a copy of the system initrc, set with ``conf.shell_initrc`` on every rank).
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fluxinstance import FluxInstance

from flux_quantum.catalog import Catalog, load_catalog, packaged_catalog_path
from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.instance.plugin import PluginClient
from flux_quantum.protocol.jobspec import ReleasedWindow, ReleaseInfo
from flux_quantum.vendors.base import TaskRef
from flux_quantum.vendors.local.vendor import LocalVendor

pytestmark = pytest.mark.flux

BELL = """OPENQASM 3.0;
qubit[2] q;
bit[2] c;
h q[0];
cnot q[0], q[1];
c = measure q;
"""
SHOTS = 100
SHOW_ENV = (
    'echo "$(flux getattr rank)|${FLUX_QPU_TASK-unset}|${FLUX_QPU_DEVICE-unset}|'
    '${FLUX_QPU_VENDOR-unset}|${FLUX_QPU_TASKS-unset}"'
)


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(scope="module")
def emulator(clock):
    emu = Emulator(clock=clock).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(packaged_catalog_path())


@pytest.fixture(scope="module")
def vendor(emulator, catalog) -> LocalVendor:
    return LocalVendor.from_emulator(emulator, devices=catalog.devices)


def dropin_line(config: str) -> str:
    """The Lua line `flux quantum config` tells a site to drop into lua.d."""
    for line in config.splitlines():
        if line.startswith("#") and "echo '" in line and "lua.d/flux-quantum.lua" in line:
            return line.split("echo '", 1)[1].split("' >", 1)[0]
    raise AssertionError(f"no lua.d drop-in line in flux quantum config:\n{config}")


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("consumer")
    instance = FluxInstance(workdir, size=2).start()
    # A site puts the line into $sysconfdir/flux/shell/lua.d/; here the same line goes
    # into a private copy of the system initrc, so the machine's Flux is not touched.
    system_initrc = instance.run(["flux", "config", "builtin", "shell_initrc"]).stdout.strip()
    shelldir = workdir / "shell"
    (shelldir / "lua.d").mkdir(parents=True)
    shutil.copyfile(system_initrc, shelldir / "initrc.lua")
    line = dropin_line(instance.quantum("config").stdout)
    (shelldir / "lua.d" / "flux-quantum.lua").write_text(line + "\n")
    instance.run(
        ["flux", "exec", "-r", "all", "flux", "setattr", "conf.shell_initrc"]
        + [str(shelldir / "initrc.lua")]
    )
    instance.system_initrc = system_initrc
    instance.site_initrc = str(shelldir / "initrc.lua")
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture(scope="module")
def plugin(inst):
    import flux

    return PluginClient(flux.Flux(inst.uri))


@pytest.fixture
def job_env(emulator) -> dict[str, str]:
    """What a user submitting hybrid jobs has in the environment: where the vendor is."""
    return {"FLUX_QUANTUM_EMULATOR_URL": emulator.url}


def jobid_int(inst: FluxInstance, jobid: str) -> int:
    return int(inst.run(["flux", "job", "id", "--to=dec", jobid]).stdout.strip())


def create_task(vendor: LocalVendor, catalog: Catalog, device: str, token: str) -> TaskRef:
    return vendor.submit(catalog.get(device), BELL, SHOTS, token=token)


def release(
    inst: FluxInstance,
    plugin: PluginClient,
    catalog: Catalog,
    jobid: str,
    refs: list[TaskRef],
) -> None:
    """Release a held job the way the handlers do, with real emulator tasks."""
    inst.wait_event(jobid, "dependency-add")
    device = catalog.get(refs[0].device)
    info = ReleaseInfo(
        vendor=device.vendor,
        device_id=device.id,
        region=device.region,
        tasks=tuple(r.task_id for r in refs),
        catalog=catalog.path,
    )
    released = plugin.release(
        jobid_int(inst, jobid), task=refs[0].task_id, device=device.name, info=info.to_dict()
    )
    assert released == [jobid_int(inst, jobid)]


def finish(inst: FluxInstance, jobid: str) -> subprocess.CompletedProcess[str]:
    """Wait for the job and return its output (stdout, stderr) and exit status."""
    return inst.run(["flux", "job", "attach", jobid], check=False, timeout=120)


@contextmanager
def running(cmd: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A command in the background for the duration of the block (killed if still up)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def first_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The first line ``proc`` writes on stderr (AssertionError after ``timeout``)."""
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], timeout)
    assert ready, f"nothing on stderr in {timeout:g}s"
    return proc.stderr.readline()


def env_rows(out: str) -> dict[str, list[str]]:
    rows = [line.split("|") for line in out.splitlines() if "|" in line]
    return {row[0]: row[1:] for row in rows}


def test_released_job_has_task_env_on_every_rank(inst, plugin, vendor, catalog, job_env):
    ref = create_task(vendor, catalog, "local-sv1", "env-every-rank")
    jobid = inst.submit("-N2", "-n2", "--setattr=qpu=local-sv1", "sh", "-c", SHOW_ENV, env=job_env)
    release(inst, plugin, catalog, jobid, [ref])
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    rows = env_rows(proc.stdout)
    assert set(rows) == {"0", "1"}, proc.stdout  # one task on each broker rank
    for rank, values in rows.items():
        assert values == [ref.task_id, "local-sv1", "local", ref.task_id], rank


SHOW_WINDOW = (
    'echo "$(flux getattr rank)|${AMZN_BRAKET_RESERVATION_DEVICE_ARN-unset}|'
    '${AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN-unset}"'
)
WINDOW_ARN = "arn:aws:braket:us-east-1:123456789012:reservation/consumer-window"


def test_a_job_released_into_a_window_gets_the_sdk_reservation_variables(
    inst, plugin, vendor, catalog, job_env
):
    """What DirectReservation sets, on every rank, so the job's own tasks carry the ARN;
    a job released without a window has neither, even when its submitter had them."""
    device = catalog.get("local-sv1")
    ref = create_task(vendor, catalog, "local-sv1", "env-window")
    jobid = inst.submit(
        "-N2", "-n2", "--setattr=qpu=local-sv1", "sh", "-c", SHOW_WINDOW, env=job_env
    )
    inst.wait_event(jobid, "dependency-add")
    window = ReleasedWindow(name="consumer-window", arn=WINDOW_ARN, end=time.time() + 3600)
    info = ReleaseInfo(
        vendor=device.vendor, device_id=device.id, tasks=(ref.task_id,), reservation=window
    )
    plugin.release(
        jobid_int(inst, jobid), task=ref.task_id, device=device.name, info=info.to_dict()
    )
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    assert env_rows(proc.stdout) == {"0": [device.id, WINDOW_ARN], "1": [device.id, WINDOW_ARN]}

    inherited = dict(job_env)
    inherited["AMZN_BRAKET_RESERVATION_DEVICE_ARN"] = device.id
    inherited["AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN"] = WINDOW_ARN
    jobid = inst.submit("--setattr=qpu=local-sv1", "sh", "-c", SHOW_WINDOW, env=inherited)
    release(inst, plugin, catalog, jobid, [ref])
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    assert list(env_rows(proc.stdout).values()) == [["unset", "unset"]]


def test_batch_job_has_every_task(inst, plugin, vendor, catalog, clock, job_env):
    refs = [create_task(vendor, catalog, "local-sv1", f"batch-{i}") for i in range(3)]
    clock.advance(30)  # all three run and complete on the emulator
    cmd = f"{SHOW_ENV}; flux quantum task --json"
    jobid = inst.submit("--setattr=qpu=local-sv1", "sh", "-c", cmd, env=job_env)
    release(inst, plugin, catalog, jobid, refs)
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    (values,) = env_rows(proc.stdout).values()
    assert values[0] == refs[0].task_id
    assert values[3].split() == [r.task_id for r in refs]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert [t["task"] for t in report["tasks"]] == [r.task_id for r in refs]
    assert all(t["state"] == "COMPLETED" for t in report["tasks"])
    assert all(sum(t["counts"].values()) == SHOTS for t in report["tasks"])


def test_task_json_inside_job_gives_counts_once_completed(
    inst, plugin, vendor, catalog, clock, job_env
):
    ref = create_task(vendor, catalog, "local-sv1", "json-completed")
    clock.advance(10)
    python = (
        f"{sys.executable} -c 'from flux_quantum.job.consumer import current_task, wait_result; "
        "t = current_task(); r = wait_result(t); "
        'print("helper", t.task_id, t.device, sorted(r.counts), sum(r.counts.values()))\''
    )
    cmd = f"flux quantum task --json && {python}"
    jobid = inst.submit("--setattr=qpu=local-sv1", "sh", "-c", cmd, env=job_env)
    release(inst, plugin, catalog, jobid, [ref])
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    report = json.loads(lines[0])
    assert report["jobid"] == jobid
    assert report["task"] == ref.task_id
    assert report["device"] == "local-sv1" and report["vendor"] == "local"
    assert report["state"] == "COMPLETED"
    assert sum(report["counts"].values()) == SHOTS
    assert set(report["counts"]) <= {"00", "11"}  # a Bell pair
    helper = lines[1].split(" ", 3)
    assert helper[:3] == ["helper", ref.task_id, "local-sv1"]
    assert helper[3].endswith(f" {SHOTS}")


def wait_for_polls(emulator: Emulator, task_id: str, count: int, timeout: float = 60) -> None:
    """Block until the emulator has answered COUNT GetQuantumTask calls for TASK_ID."""
    deadline = time.monotonic() + timeout
    while emulator.call_count("GetQuantumTask", target=task_id) < count:
        assert time.monotonic() < deadline, f"no {count} polls of {task_id} in {timeout}s"
        time.sleep(0.05)


def test_wait_inside_job_follows_queue_until_completed(
    inst, plugin, vendor, catalog, clock, emulator, job_env
):
    # Garnet's emulated queue: eight tasks ahead, so the task is QUEUED with a position.
    ref = create_task(vendor, catalog, "local-garnet", "wait-queued")
    assert vendor.poll(ref).position
    polls = emulator.call_count("GetQuantumTask", target=ref.task_id)
    cmd = "flux quantum task --wait --json --interval 0.1"
    jobid = inst.submit("--setattr=qpu=local-garnet", "sh", "-c", cmd, env=job_env)
    release(inst, plugin, catalog, jobid, [ref])
    wait_for_polls(emulator, ref.task_id, polls + 2)  # the consumer is waiting
    assert inst.state(jobid) == "RUN"
    clock.advance(100_000)  # the queue drains, the task runs and completes
    proc = finish(inst, jobid)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["state"] == "COMPLETED" and sum(report["counts"].values()) == SHOTS
    # Not a terminal: one progress line per change, on stderr.
    progress = [line for line in proc.stderr.splitlines() if "task" in line]
    assert "QUEUED, position" in progress[0], proc.stderr
    assert progress[-1].endswith(": COMPLETED"), proc.stderr
    assert len(progress) == len(set(progress))


def test_wait_outside_job_waits_for_release(inst, plugin, vendor, catalog, clock, job_env):
    jobid = inst.submit("--setattr=qpu=local-sv1", "true", env=job_env)
    inst.wait_event(jobid, "dependency-add")
    cmd = ["flux", "quantum", "task", "--wait", "--interval", "0.1", "--timeout", "60", jobid]
    with running(cmd, {**inst.env, **job_env}) as waiter:
        # It has looked at the job, held, before the job is released (a fixed sleep
        # could end before the command has started, on a busy machine).
        seen = first_line(waiter)
        assert waiter.poll() is None, waiter.communicate()
        ref = create_task(vendor, catalog, "local-sv1", "outside-wait")
        release(inst, plugin, catalog, jobid, [ref])
        clock.advance(10)
        out, err = waiter.communicate(timeout=60)
        err = seen + err
    assert waiter.returncode == 0, err
    assert "held (DEPEND), waiting for its quantum task" in err
    assert f"task:    {ref.task_id}" in out
    assert "state:   COMPLETED" in out
    assert "counts:  " in out
    finish(inst, jobid)


def test_inside_the_job_a_lagging_view_is_waited_for(inst, plugin, vendor, catalog, job_env):
    """A process that runs in a job (its FLUX_JOB_ID) knows the job was allocated, so a
    lookup that still shows it held is a view that lags the release (a broker rank's KVS
    follows rank 0's): `flux quantum task` waits for it instead of failing. Played here
    with FLUX_JOB_ID naming a job that is really still held, released a second later."""
    jobid = inst.submit("--setattr=qpu=local-sv1", "true", env=job_env)
    inst.wait_event(jobid, "dependency-add")
    cmd = ["flux", "quantum", "task", "--json"]
    with running(cmd, {**inst.env, **job_env, "FLUX_JOB_ID": jobid}) as asker:
        time.sleep(1.0)
        assert asker.poll() is None, asker.communicate()
        ref = create_task(vendor, catalog, "local-sv1", "inside-lagging-view")
        release(inst, plugin, catalog, jobid, [ref])
        out, err = asker.communicate(timeout=30)
    assert asker.returncode == 0, err
    assert json.loads(out)["task"] == ref.task_id
    finish(inst, jobid)


def test_ordinary_jobs_are_untouched(inst, job_env):
    proc = inst.run(["flux", "run", "-N2", "-n2", "sh", "-c", SHOW_ENV])
    rows = env_rows(proc.stdout)
    assert set(rows) == {"0", "1"}
    assert all(values == ["unset"] * 4 for values in rows.values())
    # A user's own value is theirs: the plugin does not look at non-qpu jobs at all.
    proc = inst.run(["flux", "run", "sh", "-c", SHOW_ENV], env={"FLUX_QPU_TASK": "mine"})
    (values,) = env_rows(proc.stdout).values()
    assert values[0] == "mine"
    # ... and the shell said nothing about them.
    assert "quantum" not in proc.stderr


def test_errors_for_jobs_without_a_task(inst, plugin, job_env):
    held = inst.submit("--setattr=qpu=local-sv1", "true", env=job_env)
    inst.wait_event(held, "dependency-add")
    proc = inst.quantum("task", held, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"flux-quantum: ERROR: job {held} has no quantum task yet: it is still held (DEPEND)"
    )
    proc = inst.quantum("task", "--wait", "--timeout", "0.5", held, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(f"ERROR: job {held} is still held after 0.5s")

    plugin.fail(jobid_int(inst, held), note="no device is available")
    inst.wait_event(held, "clean")
    proc = inst.quantum("task", held, check=False)
    assert proc.stderr.strip() == (
        f"flux-quantum: ERROR: job {held} has no quantum task: it ended before it was "
        "released (qpu exception: no device is available)"
    )

    plain = inst.submit("true")
    proc = inst.quantum("task", plain, check=False)
    assert proc.stderr.strip() == (
        f"flux-quantum: ERROR: job {plain} did not ask for a QPU (it has no attributes.system.qpu)"
    )
    # Inside an ordinary job, without a JOBID.
    proc = inst.run(["flux", "run", "flux", "quantum", "task"], check=False)
    assert proc.returncode != 0
    assert "did not ask for a QPU" in proc.stderr

    proc = inst.quantum("task", "ƒ1", check=False)
    assert proc.stderr.strip() == "flux-quantum: ERROR: job ƒ1 does not exist in this instance"
    proc = inst.run(["flux", "quantum", "task"], check=False, env={"FLUX_JOB_ID": ""})
    assert "FLUX_JOB_ID is not set" in proc.stderr


def test_plugin_also_loads_from_shell_pluginpath(inst, plugin, vendor, catalog, job_env):
    """The per-instance alternative `flux quantum config` prints: conf.shell_pluginpath."""
    config = inst.quantum("config").stdout
    value = next(
        line.split("conf.shell_pluginpath=", 1)[1]
        for line in config.splitlines()
        if "conf.shell_pluginpath=" in line
    )
    default = inst.run(["flux", "config", "builtin", "shell_pluginpath"]).stdout.strip()
    value = value.replace("$(flux config builtin shell_pluginpath)", default)
    assert Path(value.split(":")[-1], "shell_quantum.so").is_file()
    setattr_all = ["flux", "exec", "-r", "all", "flux", "setattr"]
    inst.run([*setattr_all, "conf.shell_initrc", inst.system_initrc])
    inst.run([*setattr_all, "conf.shell_pluginpath", value])
    try:
        ref = create_task(vendor, catalog, "local-sv1", "pluginpath")
        jobid = inst.submit(
            "-N2", "-n2", "--setattr=qpu=local-sv1", "sh", "-c", SHOW_ENV, env=job_env
        )
        release(inst, plugin, catalog, jobid, [ref])
        proc = finish(inst, jobid)
        assert proc.returncode == 0, proc.stderr
        rows = env_rows(proc.stdout)
        assert set(rows) == {"0", "1"}
        assert all(values[:2] == [ref.task_id, "local-sv1"] for values in rows.values())
    finally:
        inst.run([*setattr_all, "conf.shell_pluginpath", default])
        inst.run([*setattr_all, "conf.shell_initrc", inst.site_initrc])
