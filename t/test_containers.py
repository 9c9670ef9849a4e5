"""The container tier: `containers/check` builds the cluster image, starts a
3-node multi-user system instance in Docker and runs t/multiuser inside it.

Runs where Docker is installed (containers/check starts dockerd itself when
run as root); elsewhere it is skipped with one loud line naming the reason,
as the flux tier is where `flux` is missing.  Deselect it with
``-m 'not container'``: a cold run builds Flux from source (see
containers/README.md for how long that takes)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parent.parent / "containers" / "check"
EXIT_NO_DOCKER = 77  # containers/lib.sh
TIMEOUT = 80 * 60


def _loud_skip(request: pytest.FixtureRequest, reason: str) -> None:
    line = f"container tier SKIPPED: {reason}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line("!" * 78)
        reporter.write_line(line, red=True, bold=True)
        reporter.write_line("!" * 78)
    pytest.skip(line)


@pytest.mark.container
def test_containers_check(request: pytest.FixtureRequest) -> None:
    missing = [tool for tool in ("docker", "dockerd", "docker-compose") if not shutil.which(tool)]
    if missing:
        _loud_skip(
            request,
            f"{', '.join(missing)} not installed (apt-get install -y docker.io docker-compose debootstrap)",
        )
    proc = subprocess.run(
        [str(CHECK)], capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL
    )
    if proc.returncode == EXIT_NO_DOCKER:
        _loud_skip(request, proc.stderr.strip().splitlines()[-1].strip("! "))
    assert proc.returncode == 0, (
        f"containers/check exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-20000:]}"
        f"\n--- stderr ---\n{proc.stderr[-20000:]}"
    )
