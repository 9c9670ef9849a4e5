"""The walkthroughs of README.md and docs/ as a reader runs them: their indented command
blocks under a heading (``blocks``), split into commands (``commands``), fed to a
``bash`` with a clean environment on a pseudo-terminal (``Terminal``,
``run_walkthrough``; the text's ``/tmp/fq`` becomes a scratch directory), and the check
that no emulator is left afterwards (``no_emulator_left``)."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def no_emulator_left(scratch: Path) -> None:
    assert not (scratch / "emulator.env").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(scratch / "emulator.env") not in ps
