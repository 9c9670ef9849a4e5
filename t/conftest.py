"""Test tiers: the unit tier needs no Flux; the flux tier (marker ``flux``) starts
real Flux instances and is skipped, with one loud line, where ``flux`` is not on PATH."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

FLUX = shutil.which("flux")
SKIP_REASON = (
    "flux tier SKIPPED: `flux` is not on PATH (build flux-core and flux-sched, see README)"
)


def pytest_report_header(config: pytest.Config) -> str:
    if FLUX:
        return f"flux tier: RUN with {FLUX}"
    return SKIP_REASON


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FLUX:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "flux" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if not FLUX:
        terminalreporter.write_line("!" * 78)
        terminalreporter.write_line(SKIP_REASON, red=True, bold=True)
        terminalreporter.write_line("!" * 78)
