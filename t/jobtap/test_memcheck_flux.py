"""Flux tier, opt-in: the plugins' flux-tier behaviour with the broker and the job shells
under valgrind memcheck, as flux-core's own t/t5000-valgrind.t runs its broker.

Run it with one command (a few minutes; valgrind makes the broker ~20x slower)::

    FLUXQ_MEMCHECK=1 .venv/bin/python -m pytest t/jobtap/test_memcheck_flux.py

(``FLUXQ_MEMCHECK_REPORT=bench/results/memcheck.txt`` also writes the summary there.)
Skipped, with one loud line, without FLUXQ_MEMCHECK=1 or where valgrind is missing
(and, like every flux-tier test, where Flux is). The broker is started through a
``flux-broker`` on FLUX_EXEC_PATH_PREPEND that execs the real one under valgrind; every
job shell through ``[exec] job-shell``, a script that does the same for flux-shell, with
the job-shell plugin loaded by ``-o userrc``. The workload drives everything the
plugins do: holds (a qpu job and a ``--dependency=qpu:JOBID`` follower), every service
with good and malformed payloads (list with and without a generation, records, event,
events, release with task, device, info and a reservation, fail), a cancel while held,
a job-manager reload while jobs are held (the restart rebuild), the plugin unloaded,
refused a bad configuration and loaded again with one, and the released job's tasks
reading FLUX_QPU_* set by the shell plugin. valgrind's XML says, per process, each
error with its stack: an error any frame of which is in the plugins' sources (or
their .so) is the plugins'; the tests require none of those to be an invalid access
or use of uninitialised memory, and no definitely lost block allocated under them.
What the broker and flux-shell report on their own is summed up apart (the
test prints it), not held against the plugins. flux-core's valgrind.supp is used
where its build tree is (FLUXQ_VALGRIND_SUPP to point elsewhere).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import fluxinstance
import pytest
from fluxinstance import FluxInstance, quantum_config

from flux_quantum.instance.plugin import PluginClient, plugin_path
from flux_quantum.job.consumer import shell_plugin_path

VALGRIND = shutil.which("valgrind")
ENABLED = os.environ.get("FLUXQ_MEMCHECK") == "1"
# flux-core's own suppressions (its build tree's t/valgrind/valgrind.supp), where given:
# they quiet what the broker's libraries report, never the plugins' code.
SUPPRESSIONS = Path(os.environ.get("FLUXQ_VALGRIND_SUPP", "/nonexistent"))
# The plugins' own sources, as their debug info names them.
PLUGIN_SOURCES = {
    *(path.name for path in (Path(__file__).resolve().parents[2] / "jobtap").glob("*.c")),
    "_flux_quantum_jobtap.c",
}
PLUGIN_OBJECTS = ("quantum.so", "shell_quantum.so")
ACCESS_KINDS_PREFIX = ("Invalid", "Uninit", "Mismatched", "Overlap", "SyscallParam", "Fishy")
# A jobtap plugin that reads freed memory and loses a block when loaded: the run must
# report both, in its file, or a clean report of the plugins would prove nothing.
CANARY_SOURCE = "memcheck_canary.c"
CANARY = r"""
#include <stdlib.h>
#include <string.h>
#include <flux/jobtap.h>

volatile char canary_seen;

int flux_plugin_init (flux_plugin_t *p)
{
    char *lost = malloc (64);
    char *freed = malloc (8);

    strcpy (lost, "canary");
    lost = NULL;
    free (freed);
    canary_seen = ((volatile char *)freed)[0];
    return flux_plugin_set_name (p, "memcheck-canary");
}
"""

SKIP = (
    "memcheck SKIPPED: set FLUXQ_MEMCHECK=1 to run the plugins under valgrind (minutes)"
    if not ENABLED
    else "memcheck SKIPPED: no valgrind on PATH (apt-get install valgrind)"
    if not VALGRIND
    else None
)

# Skipped in the fixture, which says so in one loud line first (a skipif mark would
# skip quietly).
pytestmark = pytest.mark.flux


@dataclass(frozen=True)
class VgError:
    """One valgrind error: its kind, what it says, and its stack (function, file, obj)."""

    process: str
    kind: str
    what: str
    frames: tuple[tuple[str, str, str], ...]
    bytes_lost: int = 0

    @property
    def in_plugin(self) -> bool:
        return any(
            file in PLUGIN_SOURCES or obj.endswith(PLUGIN_OBJECTS) for _, file, obj in self.frames
        )

    @property
    def is_access(self) -> bool:
        return self.kind.startswith(ACCESS_KINDS_PREFIX)

    def line(self) -> str:
        where = " < ".join(
            f"{fn or '?'}({file or os.path.basename(obj)})" for fn, file, obj in self.frames[:6]
        )
        return f"{self.process}: {self.kind}: {self.what}\n    at {where}"


@dataclass
class Report:
    """Every error of every process that ran under valgrind, and the workload's findings."""

    errors: list[VgError] = field(default_factory=list)
    processes: Counter = field(default_factory=Counter)
    notes: dict[str, object] = field(default_factory=dict)

    def plugin(self) -> list[VgError]:
        return [e for e in self.errors if e.in_plugin]

    def canary(self) -> list[VgError]:
        return [e for e in self.errors if any(f == CANARY_SOURCE for _, f, _ in e.frames)]

    def others(self) -> list[VgError]:
        return [e for e in self.errors if not e.in_plugin and e not in self.canary()]

    def summary(self) -> str:
        lines = [
            "memcheck of the quantum jobtap and job-shell plugins (t/jobtap/test_memcheck_flux.py)",
            f"processes under valgrind: {dict(self.processes)}",
            f"plugins' errors: {len(self.plugin())}",
            *[e.line() for e in self.plugin()],
            f"the canary plugin's errors, found as planted: {sorted({e.kind for e in self.canary()})}",
            "",
            "reported by Flux itself (not the plugins), by process and kind:",
        ]
        kinds = Counter((e.process, e.kind) for e in self.others())
        lines += [f"  {proc} {kind}: {n}" for (proc, kind), n in sorted(kinds.items())] or [
            "  none"
        ]
        lost = sum(e.bytes_lost for e in self.others() if e.kind == "Leak_DefinitelyLost")
        lines.append(f"  definitely lost by Flux itself: {lost} bytes")
        lines += ["", "workload:", *[f"  {k}: {v}" for k, v in self.notes.items()]]
        return "\n".join(lines) + "\n"


def parse_xml(path: Path, process: str) -> list[VgError]:
    text = path.read_text(errors="replace")
    if "</valgrindoutput>" not in text:
        raise AssertionError(f"{path} is incomplete: the process did not exit under valgrind")
    root = ET.fromstring(text)
    out = []
    for err in root.iter("error"):
        kind = err.findtext("kind") or "?"
        what = err.findtext("what") or err.findtext("xwhat/text") or ""
        frames = tuple(
            (f.findtext("fn") or "", f.findtext("file") or "", f.findtext("obj") or "")
            for f in err.findall("stack/frame")
        )
        lost = int(err.findtext("xwhat/leakedbytes") or 0)
        out.append(VgError(process, kind, what, frames, lost))
    return out


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def valgrind_command(logdir: Path, name: str) -> str:
    supp = f"--suppressions={SUPPRESSIONS} " if SUPPRESSIONS.is_file() else ""
    return (
        f"{VALGRIND} --tool=memcheck --leak-check=full --leak-resolution=med "
        "--keep-debuginfo=yes --num-callers=30 --trace-children=no "
        "--child-silent-after-fork=yes --error-limit=no "
        f"{supp}--xml=yes --xml-file={logdir}/{name}.%p.xml"
    )


def real_program(relative: str) -> str:
    """The installed flux-broker or flux-shell (libexec of the ``flux`` on PATH)."""
    prefix = Path(shutil.which("flux") or "/usr/local/bin/flux").resolve().parent.parent
    return str(prefix / "libexec" / "flux" / relative)


def say(request: pytest.FixtureRequest, text: str) -> None:
    """Write TEXT to the terminal as it happens, past pytest's capture."""
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.write_line("")
        for line in text.splitlines():
            reporter.write_line(line)


def wait_inactive(inst: FluxInstance, jobid: str, timeout: float = 300) -> None:
    inst.run(
        ["flux", "job", "wait-event", "-t", str(timeout), jobid, "clean"], timeout=timeout + 30
    )


def build_canary(workdir: Path) -> Path:
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobtap"))
    import build_plugin

    flags = build_plugin.find_flux_core()
    assert not isinstance(flags, str), flags
    source = workdir / CANARY_SOURCE
    source.write_text(CANARY)
    lib = workdir / "memcheck_canary.so"
    subprocess.run(
        [
            *build_plugin._c_compiler(),
            "-shared",
            "-fPIC",
            "-g",
            "-O0",
            *[f"-I{d}" for d in flags.include_dirs],
            str(source),
            "-o",
            str(lib),
        ],
        check=True,
    )
    return lib


def rpc_refusal(handle, method: str, payload: dict) -> str:
    try:
        handle.rpc(f"job-manager.quantum.{method}", payload).get()
    except OSError as exc:
        return str(exc)
    raise AssertionError(f"{method} accepted {payload}")


def workload(inst: FluxInstance, report: Report) -> None:
    import flux

    handle = flux.Flux(inst.uri)
    client = PluginClient(handle)
    userrc = inst.workdir / "quantum-shell.lua"
    userrc.write_text(f'plugin.load {{ file = "{shell_plugin_path()}" }}\n')
    consumer = 'echo "$FLUX_QPU_TASK|$FLUX_QPU_TASKS|$FLUX_QPU_DEVICE|$FLUX_QPU_VENDOR|$AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN"'

    leader = inst.submit(
        "--setattr=qpu=braket:sv1", f"--setopt=userrc={userrc}", "sh", "-c", consumer
    )
    inst.wait_event(leader, "dependency-add", timeout=120)
    follower = inst.submit(f"--dependency=qpu:{leader}", f"--setopt=userrc={userrc}", "true")
    failed = inst.submit("--setattr=qpu.device=sv1", "--setattr=qpu.shots=10", "true")
    cancelled = inst.submit("--setattr=qpu=any", "true")
    for job in (follower, failed, cancelled):
        inst.wait_event(job, "dependency-add", timeout=120)
    ids = {
        j: int(inst.run(["flux", "job", "id", "--to=dec", j]).stdout)
        for j in (leader, follower, failed, cancelled)
    }

    jobs, generation = client.list_since(None)
    assert jobs is not None and {j.id for j in jobs} >= set(ids.values())
    assert client.list_since(generation)[0] is None  # unchanged
    assert ids[leader] in client.records([ids[leader], ids[failed], 1])
    client.post_event(ids[leader], "qpu-select", {"device": "sv1"})
    outcomes = client.post_events(
        [
            (ids[leader], "qpu-task", {"task": "arn:t/1"}),
            (ids[leader], "bad", None),
            (1, "qpu-x", None),
        ]
    )
    assert outcomes[0] is None and outcomes[1] is not None and outcomes[2] is not None
    refusals = {
        "list": rpc_refusal(handle, "list", {"generation": "x"}),
        "release": rpc_refusal(handle, "release", {"ids": "x"}),
        "release-both": rpc_refusal(handle, "release", {"id": 1, "ids": [2]}),
        "release-info": rpc_refusal(handle, "release", {"id": ids[leader], "info": [1]}),
        "fail": rpc_refusal(handle, "fail", {"id": ids[failed]}),
        "event": rpc_refusal(handle, "event", {"id": ids[leader], "name": "QPU"}),
        "events": rpc_refusal(handle, "events", {"events": 1}),
        "records": rpc_refusal(handle, "records", {"ids": [1.5]}),
        "not-held": rpc_refusal(handle, "release", {"id": 12345}),
    }
    report.notes["refusals"] = json.dumps(refusals)

    # The restart rebuild: a job-manager reload while four jobs are held.
    inst.restart_job_manager()
    handle = flux.Flux(inst.uri)
    client = PluginClient(handle)
    held = {j.id for j in client.list()}
    assert held >= set(ids.values()), held
    report.notes["held after job-manager reload"] = len(held)
    # The follower's dependency is checked after its leader's job is known again.
    assert "plugin_check_dependencies" not in inst.broker_log(), inst.broker_log()

    # Configuration: refused, then loaded with values, then as the site has it.
    bad = inst.run(["flux", "jobtap", "load", str(plugin_path()), "bogus=1"], check=False)
    report.notes["bad configuration refused"] = bad.returncode != 0
    inst.run(["flux", "jobtap", "remove", "quantum.so"])
    inst.run(
        [
            "flux",
            "jobtap",
            "load",
            str(plugin_path()),
            "release-priority=16",
            "max-held-per-user=100",
        ]
    )
    held = {j.id for j in client.list()}
    assert held >= set(ids.values()), held

    # A batch: ten held jobs recorded, evented and released in single requests.
    batch = inst.submit("--cc=1-10", "--setattr=qpu=braket:sv1", "true").split()
    for job in batch:
        inst.wait_event(job, "dependency-add", timeout=120)
    batch_ids = [int(inst.run(["flux", "job", "id", "--to=dec", j]).stdout) for j in batch]
    assert set(client.records(batch_ids)) == set(batch_ids)
    assert (
        client.post_events([(i, "qpu-queue", {"position": n}) for n, i in enumerate(batch_ids)])
        == [None] * 10
    )
    assert sorted(client.release(batch_ids, task="arn:t/batch", device="sv1")) == sorted(batch_ids)

    inst.run(["flux", "cancel", cancelled])
    info = {
        "vendor": "braket",
        "tasks": ["arn:t/1", "arn:t/2"],
        "device_id": "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
        "reservation": {"arn": "arn:aws:braket:reservation/r1"},
    }
    client.release(ids[leader], task="arn:t/1", device="sv1", info=info)
    client.release([ids[follower]], task="arn:t/1", device="sv1")
    client.fail(ids[failed], "device sv1 retired (DeviceRetiredException)")
    for job in (leader, follower, failed, cancelled, *batch):
        wait_inactive(inst, job)
    out = inst.run(["flux", "job", "attach", leader]).stdout.strip()
    report.notes["released job's FLUX_QPU_*"] = out
    assert out == "arn:t/1|arn:t/1 arn:t/2|sv1|braket|arn:aws:braket:reservation/r1", out
    # An ordinary job passes the shell plugin untouched.
    plain = inst.submit(f"--setopt=userrc={userrc}", "true")
    wait_inactive(inst, plain)
    report.notes["query"] = inst.run(["flux", "jobtap", "query", "quantum.so"]).stdout.strip()[:200]
    inst.run(["flux", "jobtap", "load", str(build_canary(inst.workdir))])


@pytest.fixture(scope="module")
def memcheck(tmp_path_factory, request) -> Report:
    if SKIP is not None:
        say(request, "!" * 78 + "\n" + SKIP + "\n" + "!" * 78)
        pytest.skip(SKIP)
    work = tmp_path_factory.mktemp("memcheck")
    logdir = work / "valgrind"
    logdir.mkdir()
    bindir = work / "bin"
    bindir.mkdir()
    write_script(
        bindir / "flux-broker",
        f'#!/bin/sh\nexec {valgrind_command(logdir, "broker")} {real_program("cmd/flux-broker")} "$@"\n',
    )
    shell = write_script(
        bindir / "vg-flux-shell",
        f'#!/bin/sh\nexec {valgrind_command(logdir, "shell")} {real_program("flux-shell")} "$@"\n',
    )
    config = quantum_config() + f'\n[exec]\njob-shell = "{shell}"\n'
    before = os.environ.get("FLUX_EXEC_PATH_PREPEND")
    os.environ["FLUX_EXEC_PATH_PREPEND"] = str(bindir)
    start_timeout = fluxinstance.START_TIMEOUT
    fluxinstance.START_TIMEOUT = 600.0  # a broker under valgrind starts in minutes
    report = Report()
    inst = FluxInstance(work, size=1, config=config)
    started = time.monotonic()
    try:
        inst.start()
        workload(inst, report)
    finally:
        rc = inst.stop(timeout=600)
        fluxinstance.START_TIMEOUT = start_timeout
        if before is None:
            os.environ.pop("FLUX_EXEC_PATH_PREPEND", None)
        else:
            os.environ["FLUX_EXEC_PATH_PREPEND"] = before
    report.notes["instance exit code"] = rc
    report.notes["wall seconds"] = round(time.monotonic() - started)
    for path in sorted(logdir.glob("*.xml")):
        process = path.name.split(".", 1)[0]
        report.processes[process] += 1
        report.errors += parse_xml(path, process)
    text = report.summary()
    say(request, text)
    target = os.environ.get("FLUXQ_MEMCHECK_REPORT")
    if target:
        Path(target).write_text(text)
    return report


def test_the_broker_and_every_job_shell_ran_under_valgrind(memcheck: Report) -> None:
    assert memcheck.processes["broker"] == 1, memcheck.processes
    # The qpu job, its follower, the batch and an ordinary job ran; the failed and
    # cancelled did not.
    assert memcheck.processes["shell"] >= 13, memcheck.processes
    assert memcheck.notes["instance exit code"] == 0
    assert memcheck.notes["bad configuration refused"] is True


def test_the_plugins_make_no_invalid_access(memcheck: Report) -> None:
    bad = [e.line() for e in memcheck.plugin() if not e.kind.startswith("Leak_")]
    assert not bad, "\n".join(bad)


def test_nothing_allocated_by_the_plugins_is_definitely_lost(memcheck: Report) -> None:
    lost = [e.line() for e in memcheck.plugin() if e.kind == "Leak_DefinitelyLost"]
    assert not lost, "\n".join(lost)


def test_the_run_catches_a_planted_invalid_read_and_leak(memcheck: Report) -> None:
    kinds = {e.kind for e in memcheck.canary()}
    assert {"InvalidRead", "Leak_DefinitelyLost"} <= kinds, kinds
