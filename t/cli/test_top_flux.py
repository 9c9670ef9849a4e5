"""Flux tier: ``flux quantum top`` in a real terminal (tmux, 80x24) on a real instance.

The view runs in a detached tmux session (a private tmux server, killed at the end)
inside the instance's environment; the test types keys and reads the screen with
``tmux capture-pane -p``: the device rows, a held job whose expected wait counts down,
the pane switch, the recent release and failure, and ``q`` ending it. As a guest it
shows only the guest's own jobs. Each wait is a condition with a deadline.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import monitoring_tools
import pytest
from monitored import Monitored, until

pytestmark = [
    pytest.mark.flux,
    pytest.mark.skipif(
        monitoring_tools.missing("tmux") is not None,
        reason=str(monitoring_tools.missing("tmux")),
    ),
]


class Terminal:
    """One 80x24 tmux session running a command, on a tmux server of its own."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.socket = f"fq-top-{os.getpid()}-{name}"
        self.name = name
        exports = [f"{k}={v}" for k, v in env.items()]
        self.tmux(
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            name,
            "env",
            *exports,
            "TERM=xterm-256color",
            *command,
        )

    def tmux(self, *args: str) -> str:
        proc = subprocess.run(
            [str(monitoring_tools.path("tmux")), "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def alive(self) -> bool:
        proc = subprocess.run(
            [str(monitoring_tools.path("tmux")), "-L", self.socket, "has-session", "-t", self.name],
            capture_output=True,
        )
        return proc.returncode == 0

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        return until(lambda: (lambda s: s if text in s else None)(self.screen()), timeout)

    def close(self) -> None:
        subprocess.run(
            [str(monitoring_tools.path("tmux")), "-L", self.socket, "kill-server"],
            capture_output=True,
        )


@pytest.fixture
def monitored(tmp_path) -> Iterator[Monitored]:
    m = Monitored(tmp_path).start()
    try:
        yield m
    finally:
        assert m.stop() == 0, m.inst.broker_log()


def _top(m: Monitored, name: str, extra: dict[str, str] | None = None) -> Terminal:
    env = {
        "FLUX_URI": m.inst.env["FLUX_URI"],
        "PATH": m.inst.env["PATH"],
        "LANG": "C.UTF-8",
        **(extra or {}),
    }
    return Terminal(name, ["flux", "quantum", "top", "--interval", "0.5"], env)


def _wait_column(screen: str, jobid: str) -> int:
    """The WAIT of the held job's row, in seconds."""
    row = next(line for line in screen.splitlines() if line.startswith(jobid))
    match = re.search(r"\s(\d+)s\s", row[44:])
    assert match is not None, row
    return int(match.group(1))


def test_top_shows_devices_a_held_job_counting_down_switches_panes_and_quits(monitored):
    m = monitored
    held = m.submit("q-alpha")
    m.inst.wait_event(held, "qpu-task")
    failed = m.submit("q-faulty", release_at="done")
    m.inst.wait_event(failed, "exception", timeout=60)
    term = _top(m, "owner")
    try:
        screen = term.wait_for("q-alpha")
        lines = screen.splitlines()
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        assert lines[0].startswith("flux quantum top - qpu_handlers up ")
        assert "[1] DEVICES" in screen
        alpha = next(line for line in lines if line.startswith("q-alpha"))
        assert "local" in alpha and "ONLINE" in alpha
        assert re.search(r"ONLINE\s+\d+\s+\d+s\s+1$", alpha), alpha
        # The held jobs pane: the job, its device, position 5 and its wait counting down.
        term.keys("Tab")
        short = held.lstrip("ƒf")
        screen = term.wait_for("[2] HELD JOBS")
        row = next(line for line in screen.splitlines() if short in line)
        assert "q-alpha" in row and " 5 " in row
        first = _wait_column(screen, row.split()[0])
        until(lambda: _wait_column(term.screen(), row.split()[0]) < first, timeout=10)
        # Recent outcomes: the failed job, with the vendor's reason.
        term.keys("3")
        screen = term.wait_for("[3] RECENT")
        assert "failed" in screen and "q-faulty" in screen
        # The queue drains: released, it leaves the held pane for the recent one.
        m.clock.advance(40)
        m.inst.wait_event(held, "qpu-release", timeout=60)
        until(lambda: "released" in term.screen(), timeout=30)
        term.keys("2")
        term.wait_for("no job held")
        term.keys("q")
        until(lambda: not term.alive(), timeout=10)
    finally:
        term.close()


def test_a_guest_sees_only_their_own_jobs(monitored):
    m = monitored
    mine = m.submit("q-alpha")
    m.inst.wait_event(mine, "qpu-task")
    guest = m.inst.guest_env(os.getuid() + 1)
    term = _top(m, "guest", guest)
    try:
        screen = term.wait_for("q-alpha")  # the devices: counts, nobody's job
        assert "held 0 jobs in 0 units" in screen
        term.keys("2")
        term.wait_for("no job held")
        term.keys("q")
        until(lambda: not term.alive(), timeout=10)
    finally:
        term.close()
