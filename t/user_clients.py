"""The vendors' clients a user runs in an environment of their own, for the tests.

qiskit-ibm-runtime 0.51 (IBM's client) needs urllib3 >= 2.4, which oqtopus-client 1.3
(flux-quantum's) does not admit: one pip resolution cannot hold both. A user's job runs
its client in its own environment, apart from the site's service; so do the tests:
``client_python`` makes (once, cached under ``~/.cache/flux-quantum/clients/``) a venv
with the client installed from the package index, and gives its Python; a test runs
the client there in a subprocess against the emulator. Without an index to install from,
the test skips with one loud line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

QISKIT_IBM_RUNTIME = "qiskit-ibm-runtime>=0.51,<0.52"
CLIENTS = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flux-quantum" / "clients"
)


def client_python(name: str, requirement: str, module: str) -> Path:
    """The Python of the venv ``CLIENTS/name`` where ``module`` imports (made, with
    ``requirement`` installed, on first use; the test is skipped if pip cannot)."""
    venv = CLIENTS / name
    python = venv / "bin" / "python"
    if python.exists() and _imports(python, module):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if install.returncode != 0 or not _imports(python, module):
        pytest.skip(
            f"cannot install {requirement} into {venv} (no package index?): "
            + (install.stderr.strip().splitlines() or ["pip failed"])[-1]
        )
    return python


def qiskit_runtime_python() -> Path:
    return client_python("qiskit-ibm-runtime-0.51", QISKIT_IBM_RUNTIME, "qiskit_ibm_runtime")


def _imports(python: Path, module: str) -> bool:
    return (
        subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0
    )
