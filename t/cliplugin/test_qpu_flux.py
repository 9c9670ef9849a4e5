"""Flux tier: ``flux submit --qpu=DEVICE --qpu-shots=N ...`` through flux-quantum's CLI
plugin, loaded by real flux-core commands in Flux's own Python the way users and sites
load it (FLUX_CLI_PLUGINPATH, a link in a plugin directory).

What reaches the jobspec is read from ``--dry-run`` and, in a real instance, from
``flux job info``; that a bad request is refused before anything is sent is shown by
refusals that come out the same with FLUX_URI pointing at no broker at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from fluxinstance import FluxInstance

import flux_quantum.cliplugin.qpu as cliplugin

pytestmark = pytest.mark.flux

PLUGIN = Path(cliplugin.__file__).resolve()
PACKAGE = PLUGIN.parents[1]
NO_BROKER = "local:///nonexistent/flux-quantum-test/local"
SHOTS = "must be an integer from 1 to 100000, got "
NAME_RULE = "lower-case letters, digits, '-', '_', '.' (at most 64, first a letter or digit)"


def environment(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUX_CLI_PLUGINPATH")}
    env.pop("PYTHONPATH", None)  # Flux's Python must find flux_quantum on its own
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def flux(
    args: Sequence[str], extra: Mapping[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flux", *args],
        env=environment(extra),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def plugin_env() -> dict[str, str]:
    """What a user of their own install exports, from the command that says it."""
    proc = flux(["quantum", "cli-plugin-path", "--dir"], {})
    assert proc.returncode == 0, proc.stderr
    directory = proc.stdout.strip()
    assert Path(directory) == PLUGIN.parent
    return {"FLUX_CLI_PLUGINPATH": directory, "FLUX_URI": NO_BROKER}


def dry_run(command: str, args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    extra = ["-N1", "--wrap"] if command == "batch" else ["-N1"] if command == "alloc" else []
    proc = flux([command, "--dry-run", *extra, *args, "true"], env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["attributes"]["system"]


@pytest.mark.parametrize(
    ("args", "qpu"),
    [
        (
            ["--qpu=local:local-forte1", "--qpu-shots=10"],
            {"device": "local:local-forte1", "shots": 10},
        ),
        # what users type first (issue 17): the short form and one key
        (
            ["--setattr=qpu=local:local-forte1", "--setattr=qpu.shots=10"],
            {"device": "local:local-forte1", "shots": 10},
        ),
        (
            ["-S", "qpu.shots=10", "-S", "qpu=braket:sv1"],
            {"shots": 10, "device": "braket:sv1"},
        ),
        (
            ["-S", "qpu.release_at=1", "-S", 'qpu={"device": "sv1", "shots": 5}'],
            {"release_at": 1, "device": "sv1", "shots": 5},
        ),
        (
            ["--setattr=qpu=sv1", "--qpu-shots=7", "--qpu-max-wait=30m"],
            {"device": "sv1", "shots": 7, "max_wait": "30m"},
        ),
        (
            [
                "--qpu=braket:any",
                "--qpu-policy=min-cost",
                "--qpu-program=a.qasm",
                "--qpu-program=b.qasm",
                "--qpu-release-at=running",
                "--qpu-opt",
                "failover=next",
                "--qpu-opt=max_cost=5",
                "--setattr=qpu.class=qpu",
            ],
            {
                "class": "qpu",
                "device": "braket:any",
                "program": ["a.qasm", "b.qasm"],
                "policy": "min-cost",
                "release_at": "running",
                "failover": "next",
                "max_cost": 5,
            },
        ),
        (["--qpu-release-at=3", "--qpu-program=7"], {"release_at": 3, "program": "7"}),
        # the short form alone is left as Flux reads it
        (["--setattr=qpu=ibm:any"], "ibm:any"),
        # --cc hands plugins a namespace without their options: they went in as --setattr
        (["--cc=1-2", "--qpu=sv1", "--qpu-shots=7"], {"device": "sv1", "shots": 7}),
    ],
)
def test_options_make_the_request(plugin_env, args: list[str], qpu: object) -> None:
    system = dry_run("submit", args, plugin_env)
    assert system["qpu"] == qpu


@pytest.mark.parametrize("command", ["run", "batch", "alloc"])
def test_options_of_run_batch_and_alloc(plugin_env, command: str) -> None:
    args = ["--qpu=sv1", "--qpu-shots=3", "-S", "qpu.release_at=running"]
    system = dry_run(command, args, plugin_env)
    assert system["qpu"] == {"release_at": "running", "device": "sv1", "shots": 3}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--qpu-shots=abc"], "--qpu-shots " + SHOTS + "'abc'"),
        (["--qpu=sv1", "--qpu-shots=0"], "--qpu-shots " + SHOTS + "0"),
        (["--setattr=qpu.shots=abc"], "qpu.shots " + SHOTS + "'abc'"),
        (["-S", "qpu=sv1", "-S", "qpu.shots=1.5"], "qpu.shots " + SHOTS + "1.5"),
        (["--qpu=SV1"], f"--qpu must be 'any' or a device named with {NAME_RULE}, got 'SV1'"),
        (
            ["--qpu=sv1", "--qpu-policy=min-cost"],
            "--qpu-policy must be 'explicit' when qpu.device names a device, got 'min-cost'",
        ),
        (
            ["--qpu=sv1", "--qpu-release-at=-1"],
            "--qpu-release-at must be a queue position >= 0, 'running', 'predict' or 'done',"
            " got -1",
        ),
        (["--qpu=sv1", "--qpu-opt=shots=0"], "qpu.shots " + SHOTS + "0"),
        (
            ["--qpu=sv1", "--qpu-opt=release-at=1"],
            "--qpu-opt must be KEY=VALUE with a KEY from device, vendor, policy, shots, program,"
            " release_at, max_wait, max_cost, min_qubits, min_fidelity, class, failover, group,"
            " session, account, loop, reservation, reservation_end, merge, got 'release-at=1'",
        ),
        (
            ["--qpu=sv1", "--setattr=qpu=ibm:fez"],
            "--qpu and --setattr=qpu both set qpu.device; give it once",
        ),
        (
            ["--qpu-shots=5", "-S", "qpu.shots=6", "-S", "qpu=sv1"],
            "--qpu-shots and --setattr=qpu.shots both set qpu.shots; give it once",
        ),
        (
            ["-S", "qpu=true", "-S", "qpu.shots=1"],
            "qpu must be 'any', DEVICE, VENDOR:DEVICE, VENDOR:any or a table of qpu.KEY values,"
            " got true",
        ),
        (
            ["-S", "qpu=sv1", "-S", "qpu_info={}"],
            "attributes.system.qpu_info is set by flux-quantum at release and may not be given"
            " at submit",
        ),
        (
            ["-S", "qpu_task=arn:x"],
            "attributes.system.qpu_task is set by flux-quantum at release and may not be given"
            " at submit",
        ),
        (
            ["--qpu=sv1", "-S", "qpu_shots=5"],
            "attributes.system.qpu_shots is reserved for flux-quantum and may not be given at"
            " submit (did you mean qpu.shots?)",
        ),
    ],
)
def test_bad_requests_are_refused_before_anything_is_sent(
    plugin_env, args: list[str], message: str
) -> None:
    # FLUX_URI names no broker: a submit that got as far as sending would fail otherwise.
    proc = flux(["submit", *args, "true"], plugin_env)
    assert (proc.returncode, proc.stderr) == (1, f"flux-submit: ERROR: {message}\n")
    proc = flux(["submit", "--dry-run", *args, "true"], plugin_env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1,
        "",
        f"flux-submit: ERROR: {message}\n",
    )


def test_a_good_request_does_get_as_far_as_sending(plugin_env) -> None:
    proc = flux(["submit", "--qpu=sv1", "--qpu-shots=10", "true"], plugin_env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("flux-submit: ERROR: ")
    assert "qpu" not in proc.stderr  # Flux's own failure to connect


def test_without_the_plugin_the_mixed_form_fails_in_flux() -> None:
    # What docs/requests.md tells users who have no plugin loaded.
    env = {"FLUX_CLI_PLUGINPATH_OVERRIDE": "", "FLUX_URI": NO_BROKER}
    proc = flux(["submit", "--dry-run", "-S", "qpu=sv1", "-S", "qpu.shots=10", "true"], env)
    assert proc.returncode == 1
    assert proc.stderr == (
        "flux-submit: ERROR: failed to set attributes.system.qpu.shots to 10:"
        " 'str' object does not support item assignment\n"
    )
    proc = flux(["submit", "--dry-run", "--qpu=sv1", "true"], env)
    assert proc.returncode != 0
    assert "unrecognized arguments: --qpu=sv1" in proc.stderr


API = """\
import json
from flux.job import JobspecV1
spec = JobspecV1.from_submit(["true"], qpu="sv1", qpu_shots=10, qpu_program=["a.qasm"])
print(json.dumps(spec.jobspec["attributes"]["system"]["qpu"]))
try:
    JobspecV1.from_submit(["true"], qpu="sv1", qpu_shots=0)
except ValueError as exc:
    print(exc)
"""


def test_flux_python_api_takes_the_options(plugin_env) -> None:
    proc = flux(["python", "-c", API], plugin_env)
    assert proc.returncode == 0, proc.stderr
    made, refused = proc.stdout.splitlines()
    assert json.loads(made) == {"device": "sv1", "shots": 10, "program": "a.qasm"}
    assert refused == "--qpu-shots " + SHOTS + "0"


PROBE = """\
import json, sys
before = list(sys.path)
from flux.cli.plugin import CLIPluginRegistry
registry = CLIPluginRegistry("submit")
print(json.dumps({
    "executable": sys.executable,
    "path_before": before,
    "path_after": list(sys.path),
    "plugins": {type(p).__name__: p.path for p in registry.plugins},
    "options": [o.name for o in registry.options],
    "modules": sorted(
        name for name, m in sys.modules.items()
        if name.split(".")[0] == "flux_quantum"
    ),
    "files": sorted({
        getattr(m, "__file__", None) or "" for name, m in sys.modules.items()
        if name.split(".")[0] == "flux_quantum"
    }),
}))
"""


def test_plugin_runs_in_fluxs_python_without_the_venv(plugin_env) -> None:
    proc = flux(["python", "-c", PROBE], plugin_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    found = json.loads(proc.stdout)
    # Flux's own interpreter, not this venv's, and nothing added to its sys.path.
    assert not found["executable"].startswith(sys.prefix)
    assert found["path_after"] == found["path_before"]
    assert not any(p.startswith(sys.prefix) for p in found["path_after"])
    assert found["plugins"]["QpuOptions"] == str(PLUGIN)
    assert found["options"][:7] == [
        "--qpu",
        "--qpu-shots",
        "--qpu-program",
        "--qpu-policy",
        "--qpu-release-at",
        "--qpu-max-wait",
        "--qpu-opt",
    ]
    # Only the package's standard-library modules, from the directory next to the plugin:
    # the registry of vendors and what their descriptors are made of (merged_tasks.Limits,
    # plain data that a vendor's face builds), never a vendor's code or its SDK.
    assert found["modules"] == [
        "flux_quantum",
        "flux_quantum.errors",
        "flux_quantum.protocol",
        "flux_quantum.protocol.jobspec",
        "flux_quantum.protocol.merged_tasks",
        "flux_quantum.protocol.programs",
        "flux_quantum.protocol.request",
        "flux_quantum.protocol.vendors",
    ]
    assert found["files"] == [
        str(PACKAGE / "__init__.py"),
        str(PACKAGE / "errors.py"),
        str(PACKAGE / "protocol" / "__init__.py"),
        str(PACKAGE / "protocol" / "jobspec.py"),
        str(PACKAGE / "protocol" / "merged_tasks.py"),
        str(PACKAGE / "protocol" / "programs.py"),
        str(PACKAGE / "protocol" / "request.py"),
        str(PACKAGE / "protocol" / "vendors.py"),
    ]


def test_a_site_links_the_plugin_into_a_plugin_directory(tmp_path: Path) -> None:
    # {confdir}/cli/plugins is Flux's build's own; a directory on FLUX_CLI_PLUGINPATH is
    # searched the same way, so a link there is what a site's link does.
    proc = flux(["quantum", "cli-plugin-path"], {})
    assert proc.returncode == 0, proc.stderr
    site = tmp_path / "cli" / "plugins"
    site.mkdir(parents=True)
    (site / "flux-quantum.py").symlink_to(proc.stdout.strip())
    env = {"FLUX_CLI_PLUGINPATH_OVERRIDE": str(site), "FLUX_URI": NO_BROKER}
    system = dry_run("submit", ["-S", "qpu=sv1", "--qpu-shots=10"], env)
    assert system["qpu"] == {"device": "sv1", "shots": 10}
    proc = flux(["submit", "--list-plugins"], env)
    assert f"QpuOptions loaded from {site / 'flux-quantum.py'}" in proc.stdout


def test_a_copied_plugin_warns_and_leaves_flux_submit_working(tmp_path: Path) -> None:
    site = tmp_path / "plugins"
    site.mkdir()
    shutil.copy(PLUGIN, site / "flux-quantum.py")
    env = {"FLUX_CLI_PLUGINPATH_OVERRIDE": str(site), "FLUX_URI": NO_BROKER}
    proc = flux(["submit", "--dry-run", "-S", "qpu=sv1", "true"], env)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["attributes"]["system"]["qpu"] == "sv1"
    assert proc.stderr == (
        f"flux-quantum: WARNING: {site / 'flux-quantum.py'}: --qpu options unavailable: no"
        f" flux_quantum package at {tmp_path} (link this file, do not copy it)\n"
    )


@pytest.fixture(scope="module")
def inst(tmp_path_factory):
    instance = FluxInstance(tmp_path_factory.mktemp("cliplugin"), size=1).start()
    yield instance
    instance.run(["flux", "cancel", "--all"], check=False)
    assert instance.stop() == 0, instance.broker_log()


def job_count(inst: FluxInstance) -> int:
    return len(inst.run(["flux", "jobs", "-a", "-n", "-o", "{id}"]).stdout.split())


def jobspec_qpu(inst: FluxInstance, jobid: str) -> object:
    spec = json.loads(inst.run(["flux", "job", "info", jobid, "jobspec"]).stdout)
    return spec["attributes"]["system"]["qpu"]


@pytest.mark.parametrize(
    ("args", "qpu", "described"),
    [
        (
            ["--qpu=local:local-forte1", "--qpu-shots=10", "--qpu-release-at=running"],
            {"device": "local:local-forte1", "shots": 10, "release_at": "running"},
            "local:local-forte1 shots=10 release_at=running",
        ),
        (
            ["--setattr=qpu=local:local-forte1", "--setattr=qpu.shots=10"],
            {"device": "local:local-forte1", "shots": 10},
            "local:local-forte1 shots=10 release_at=done",
        ),
    ],
)
def test_submitted_with_options_and_held(
    inst, plugin_env, args: list[str], qpu: object, described: str
) -> None:
    env = {"FLUX_CLI_PLUGINPATH": plugin_env["FLUX_CLI_PLUGINPATH"]}
    jobid = inst.submit(*args, "true", env=env)
    inst.wait_event(jobid, "dependency-add")
    assert jobspec_qpu(inst, jobid) == qpu
    held = json.loads(inst.quantum("jobs", "--json").stdout)
    assert [job["request"] for job in held if job["jobid"] == jobid] == [qpu]
    assert described in inst.quantum("jobs", "-n", "-o", "{id} {request}").stdout
    inst.quantum("fail", jobid, "--note", "test cleanup")


def test_refused_in_the_instance_and_nothing_queued(inst, plugin_env) -> None:
    env = {"FLUX_CLI_PLUGINPATH": plugin_env["FLUX_CLI_PLUGINPATH"]}
    before = job_count(inst)
    proc = inst.run(
        ["flux", "submit", "--qpu=sv1", "--qpu-shots=abc", "true"], check=False, env=env
    )
    assert (proc.returncode, proc.stderr) == (1, f"flux-submit: ERROR: --qpu-shots {SHOTS}'abc'\n")
    assert job_count(inst) == before


def test_validator_refuses_what_the_release_writes_without_the_plugin(inst) -> None:
    # A job sent by other means than a flux submit with the plugin (here: without it).
    env = {"FLUX_CLI_PLUGINPATH_OVERRIDE": ""}
    before = job_count(inst)
    for key, value in (("qpu_info", "{}"), ("qpu_device", "sv1"), ("qpu_task", "arn:x")):
        proc = inst.run(
            ["flux", "submit", "-S", "qpu=sv1", "-S", f"{key}={value}", "true"],
            check=False,
            env=env,
        )
        assert proc.returncode == 1
        assert proc.stderr.strip().endswith(
            f"attributes.system.{key} is set by flux-quantum at release and may not be given"
            " at submit"
        )
    proc = inst.run(["flux", "submit", "-S", "qpu_shots=5", "true"], check=False, env=env)
    assert proc.stderr.strip().endswith(
        "attributes.system.qpu_shots is reserved for flux-quantum and may not be given at"
        " submit (did you mean qpu.shots?)"
    )
    assert job_count(inst) == before
