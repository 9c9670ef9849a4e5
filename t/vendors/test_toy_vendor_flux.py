"""Flux tier: a vendor installed beside flux-quantum, seen by Flux's own Python.

The CLI plugin of ``flux submit`` and the ingest validator run in Flux's Python, not in
the one flux-quantum is installed in: the CLI plugin loads the package by path and adds
nothing to ``sys.path``, the validator appends the folder that holds it. Here that
folder is a copy of a site-packages holding flux-quantum's package and the toy vendor's
distribution (``t/toy_vendor``, as pip lays one out beside it). Real flux-core commands
take ``toy:DEVICE`` through both, with no file of flux-quantum edited; the instance holds
the job; a guest's job carrying the toy's API key is refused at submit, naming it; and
the same request through the package without the toy is refused, naming the vendors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from fluxinstance import FluxInstance, quantum_config, until

import flux_quantum

pytestmark = pytest.mark.flux

TOY = Path(__file__).parents[1] / "toy_vendor"
PACKAGE = Path(flux_quantum.__file__).resolve().parent
GUEST = os.getuid() + 4545
NO_BROKER = "local:///nonexistent/flux-quantum-test/local"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site-packages of flux-quantum's package with the toy vendor installed beside it."""
    site = tmp_path_factory.mktemp("toy-site") / "site-packages"
    shutil.copytree(TOY, site, ignore=shutil.ignore_patterns("__pycache__", "*.md"))
    shutil.copytree(PACKAGE, site / "flux_quantum", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def flux_env(plugins: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The user's environment with the CLI plugin of ``plugins`` (a flux_quantum folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUX_CLI_PLUGINPATH")}
    env.pop("PYTHONPATH", None)  # Flux's Python must find flux_quantum on its own
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["FLUX_CLI_PLUGINPATH"] = str(plugins / "cliplugin")
    env.update(extra)
    return env


def flux(args: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flux", *args], env=dict(env), capture_output=True, text=True, timeout=120
    )


def test_the_cli_plugin_takes_the_toy_only_where_it_is_installed(site: Path) -> None:
    beside = flux_env(site / "flux_quantum", {"FLUX_URI": NO_BROKER})
    proc = flux(["submit", "--dry-run", "--qpu=toy:toy-dev", "--qpu-shots=5", "true"], beside)
    assert proc.returncode == 0, proc.stderr
    qpu = json.loads(proc.stdout)["attributes"]["system"]["qpu"]
    assert qpu == {"device": "toy:toy-dev", "shots": 5}
    # The package installed without the toy: the same request is refused, before sending.
    alone = flux_env(PACKAGE, {"FLUX_URI": NO_BROKER})
    proc = flux(["submit", "--dry-run", "--qpu=toy:toy-dev", "true"], alone)
    assert proc.returncode != 0
    assert "--qpu must be VENDOR:DEVICE with a VENDOR from braket, ibm, " in proc.stderr
    assert "local, got 'toy:toy-dev'" in proc.stderr


@pytest.fixture(scope="module")
def inst(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FluxInstance]:
    """An instance whose jobtap plugin and ingest validator are the copy's."""
    config = quantum_config().replace(str(PACKAGE), str(site / "flux_quantum"))
    assert str(site / "flux_quantum" / "validator.py") in config
    instance = FluxInstance(tmp_path_factory.mktemp("toy-flux"), config=config).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


def test_the_validator_takes_a_toy_job_and_the_instance_holds_it(
    site: Path, inst: FluxInstance
) -> None:
    env = flux_env(site / "flux_quantum", {"FLUX_URI": inst.env["FLUX_URI"]})
    # The validator alone (no CLI plugin): --setattr reaches it as the user wrote it.
    env.pop("FLUX_CLI_PLUGINPATH")
    jobid = flux(["submit", "--setattr=qpu=toy:toy-dev", "true"], env)
    assert jobid.returncode == 0, jobid.stderr
    assert until(lambda: inst.state(jobid.stdout.strip()) == "DEPEND")
    inst.run(["flux", "cancel", jobid.stdout.strip()])
    refused = flux(["submit", "--setattr=qpu=toys:toy-dev", "true"], env)
    assert refused.returncode != 0
    assert "a VENDOR from braket, " in refused.stderr and ", local, toy, got" in refused.stderr


@pytest.mark.flux_security  # signs as the guest with flux.security
def test_a_guests_job_with_the_toys_key_is_refused_naming_it(
    site: Path, inst: FluxInstance
) -> None:
    env = flux_env(
        site / "flux_quantum", {"FLUX_URI": inst.env["FLUX_URI"], "TOY_API_KEY": "toy-secret"}
    )
    res = inst.submit_as(GUEST, ["--qpu=toy:toy-dev", "true"], env)
    assert res.returncode != 0, res.stdout
    assert "the job's environment holds TOY_API_KEY" in res.stderr, res.stderr
    assert "--env=-TOY_API_KEY" in res.stderr and "toy-secret" not in res.stderr
    env.pop("TOY_API_KEY")
    ok = inst.submit_as(GUEST, ["--qpu=toy:toy-dev", "true"], env)
    assert ok.returncode == 0, ok.stderr
    inst.run(["flux", "cancel", ok.stdout.strip()], check=False)
