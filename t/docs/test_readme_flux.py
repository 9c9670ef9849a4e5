"""Flux tier: README.md's walkthroughs run as written, from a fresh login shell.

Each walkthrough is read from README.md itself (its indented command blocks, in order)
and fed to a ``bash`` with a clean environment (HOME, and a PATH of this venv, Flux and
the system; nothing else): the commands meant for the login shell run there, those after
``flux start`` in the instance's own shell, which reads the rest of the script until
``exit``. The only change made to the text is its scratch directory (``/tmp/fq`` becomes
a temporary one). The checks are what a reader is told to expect, and that nothing is
left running or exported afterwards.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from walkthrough import README, blocks, no_emulator_left, run_walkthrough

pytestmark = pytest.mark.flux


def test_running_it_in_your_own_instance(tmp_path: Path) -> None:
    found = blocks("### Running it in your own instance")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # Both ranks saw FLUX_QPU_TASK and read the counts (through the service).
    tasks = re.findall(r"^task (arn:\S+)$", out, re.M)
    assert len(tasks) == 2 and len(set(tasks)) == 1, out
    assert len(re.findall(r"COMPLETED", out)) >= 2, out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(tmp_path)


def test_walkthrough_blocks_are_found() -> None:
    """The parser finds what the tests above run (a README edit that moves a block
    fails here with the blocks it saw)."""
    assert blocks("### Running it in your own instance")[1].startswith("flux quantum service start")
    assert os.path.isfile(README)
