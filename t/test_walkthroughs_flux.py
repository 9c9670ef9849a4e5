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

import contextlib
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.flux

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(section: str, path: Path = README) -> list[str]:
    """The indented command blocks of ``section`` (a heading) of README.md, or of the
    Markdown file ``path``, in order."""
    text = path.read_text()
    start = text.index(f"\n{section}\n")
    following = re.search(r"\n#+ ", text[start + len(section) + 2 :])
    body = text[start : start + len(section) + 2 + (following.start() if following else len(text))]
    out, current = [], []
    for line in body.splitlines():
        if line.startswith("    ") and line.strip():
            current.append(line[4:])
        elif current and not line.strip():
            continue
        elif current:
            out.append("\n".join(current))
            current = []
    if current:
        out.append("\n".join(current))
    return out


PROMPT = "fq-walkthrough$ "


class Terminal:
    """A login shell on a pseudo-terminal, typed into one command at a time: each is
    sent once the shell (or the instance's shell after ``flux start``) shows its prompt
    again, as a reader would type it. ``flux start`` needs a terminal for its shell."""

    def __init__(self, scratch: Path) -> None:
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "HOME": str(scratch),
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "SHELL": "/bin/bash",
            "TERM": "dumb",
            "PS1": PROMPT,  # exported: the instance's shell shows it too
        }
        # The user's own prompt, also in the instance's shell (Debian's bash.bashrc
        # would set its own there).
        (scratch / ".bashrc").write_text(f"PS1='{PROMPT}'\n")
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-i"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=scratch,
            start_new_session=True,
        )
        os.close(slave)
        self.output = ""
        self.wait_prompt(30)

    def wait_prompt(self, timeout: float) -> str:
        """What the terminal printed until the next prompt."""
        start = len(self.output)
        deadline = time.monotonic() + timeout
        while not self.output.endswith(PROMPT) or len(self.output) == start:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no prompt within {timeout:g}s:\n{self.output[-4000:]}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"the shell ended:\n{self.output[-4000:]}")
                self.output += data.decode(errors="replace").replace("\r\n", "\n")
        return self.output[start:]

    def type(self, command: str, timeout: float = 300) -> str:
        os.write(self.master, (command + "\n").encode())
        return self.wait_prompt(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.master, b"exit\n")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def commands(text: str) -> list[str]:
    """A block's commands: lines joined where one ends in a backslash."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if not line.endswith("\\"):
            out.append(pending)
            pending = ""
    return out


def run_walkthrough(
    parts: list[str], scratch: Path, split: Callable[[str], list[str]] = commands
) -> str:
    """Type every command of ``parts`` (``/tmp/fq`` as ``scratch``; ``split`` cuts a
    block into commands); the whole screen. An emulator a failed walkthrough left is
    stopped by its env file."""
    term = Terminal(scratch)
    env_file = scratch / "emulator.env"
    try:
        for part in parts:
            for command in split(part.replace("/tmp/fq", str(scratch))):
                term.type(command)
        # What a reader's login shell still has from it.
        term.type("echo \"left: $(env | grep -c -E '^(AWS_|QRMI_|FLUX_QUANTUM|FLUX_URI)')\"")
        return term.output
    finally:
        term.close()
        if env_file.exists():  # a walkthrough that failed before its last step
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "flux_quantum.cli.emulator",
                    "--stop",
                    "--env-file",
                    str(env_file),
                ],
                capture_output=True,
                timeout=60,
            )


def _no_emulator_left(scratch: Path) -> None:
    assert not (scratch / "emulator.env").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(scratch / "emulator.env") not in ps


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
    _no_emulator_left(tmp_path)


def test_ibm_quantum_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it on the emulator")
    assert len(found) == 2, found
    stop = "flux quantum emulator --stop --env-file /tmp/fq/emulator.env"
    assert f"then `{stop}` in your login shell" in README.read_text()
    out = run_walkthrough([*found, stop], tmp_path)
    # The first job had no IBM key and printed its counts as JSON.
    reports = [json.loads(line) for line in out.splitlines() if line.startswith('{"id"')]
    assert reports and reports[0]["tasks"][0]["state"] == "COMPLETED", out
    assert sum(reports[0]["tasks"][0]["counts"].values()) > 0, out
    # The second printed the names of the session's variables, and the session closed.
    assert re.search(r"^export QRMI_\w+$", out, re.M), out
    assert '"sessions_opened": 1' in out and '"sessions_closed": 1' in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    _no_emulator_left(tmp_path)


def test_a_reserved_window_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it: a window on the emulator")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # The booking printed the window's table into the instance's configuration.
    [window] = tomllib.loads((tmp_path / "conf" / "quantum.toml").read_text())["quantum"][
        "reservations"
    ]
    assert window["name"] == "demo" and window["device"] == "local-forte1", window
    assert window["cost"] == 350.0, window
    arn, start = window["arn"], window["start"].timestamp()
    # While the window was ahead: held in DEPEND, waiting for it, listed with the window.
    jobid = re.search(r"^  demo waiting: (\S+)$", out, re.M)
    assert jobid, out
    assert re.search(
        rf"^{re.escape(jobid[1])} DEPEND demo waiting for reservation demo: reservation demo "
        r"opens in \d+s",
        out,
        re.M,
    ), out
    # Its task was created with the window (no earlier than the lead before it opens)
    # and the job released then; the job saw the window's ARN and read its counts.
    submit = re.search(r"^(\d+\.\d+) qpu-submit .*reservation=\"demo\"", out, re.M)
    assert submit, out
    assert start - 15 <= float(submit[1]) <= start + 5, (submit[0], start)
    assert re.search(r"qpu-ready .*admitted: reservation demo", out), out
    assert re.search(rf"^window {re.escape(arn)}$", out, re.M), out
    assert re.search(r"^state:\s+COMPLETED$", out, re.M), out
    # The second listing: the window open, its one task's QPU time in it, its cost.
    row = re.findall(r"^demo\s+now\s.*$", out, re.M)
    assert row, out
    columns = row[-1].split()
    # NAME STATE START END DEVICE ON_END WAIT ON_NODES TASKS QPU_TIME UTIL COST WHO
    assert columns[6:8] == ["local-forte1", "on-demand"], row
    assert columns[10] == "1" and columns[11] != "0s" and columns[13] == "$350.00", row
    # The emulator recorded the window's ARN on the task.
    assert re.findall(r'^\s*"reservation": "(arn:[^"]+)",?$', out, re.M) == [arn], out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    _no_emulator_left(tmp_path)


def test_three_jobs_one_merged_task_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it: three jobs, one task, on the emulator")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # The last job's place in the one task, recorded before it was created. Places follow
    # the order the jobs joined the pool, which the service's scan need not take in
    # submission order: any of the three.
    submit = re.search(r'qpu-submit .* merge=\{"key":"(merge-\w+)","index":[012],"size":3', out)
    assert submit, out
    # One task for the three jobs, each reading its own program's counts.
    tasks = re.findall(r"^task:\s+(arn:\S+)$", out, re.M)
    assert len(tasks) == 3 and len(set(tasks)) == 1, out
    counts = re.findall(r"^counts:\s+(.*)$", out, re.M)
    assert counts == ["00=100", "11=100", "00=100"], out
    assert re.search(r"tasks created 1,", out) and "tasks merged 1, jobs merged 3" in out, out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    _no_emulator_left(tmp_path)


def test_iqm_and_pasqal_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it: IQM and Pasqal on the emulator")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # Both vendors' devices listed ONLINE through QRMI.
    for name in ("iqm-garnet", "iqm-radiance", "pasqal-fresnel", "pasqal-fresnel-onprem"):
        assert re.search(rf"^{name}\s+(iqm|pasqal)\s+qpu\s+\d+\s+ONLINE\b", out, re.M), out
    # The two jobs completed with their counts; the wrong kind failed while held.
    results = re.findall(r"^\S+ (COMPLETED|FAILED)$", out, re.M)
    assert results == ["COMPLETED", "COMPLETED", "FAILED"], out
    assert '"device": "iqm-garnet"' in out and '"device": "pasqal-fresnel"' in out, out
    iqm = re.search(r'"counts": \{([^}]*)\}', out)
    assert iqm and set(re.findall(r'"(\d+)"', iqm[1])) <= {"00", "11"}, out
    assert '"counts": {"1": 100}' in out, out
    assert "takes Pulser sequences only (pasqal), the program is an OpenQASM circuit" in out
    # The ledger has both tasks' QPU time.
    assert re.search(r"^\S+\s+root\s+-\s+iqm-garnet\s+1\s+\$", out, re.M), out
    assert re.search(r"^\S+\s+root\s+-\s+pasqal-fresnel\s+1\s+\$", out, re.M), out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    _no_emulator_left(tmp_path)


def test_walkthrough_blocks_are_found() -> None:
    """The parser finds what the tests above run (a README edit that moves a block
    fails here with the blocks it saw)."""
    assert blocks("### Running it in your own instance")[1].startswith("flux quantum service start")
    assert os.path.isfile(README)
