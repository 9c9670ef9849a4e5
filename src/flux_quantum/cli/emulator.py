"""``flux quantum emulator``: run the local Braket and IBM Quantum emulator.

This module owns the command's options and output: it prints the ``export K=V`` lines a
client needs (and writes them to ``--env-file``, with the emulator's pid in a comment),
logs one line per call to stderr with ``-v``, and stops cleanly on SIGTERM or SIGINT.
``--background`` returns once the emulator serves (no wait on a clock), ``--stop``
ends the one an env file names and ``--report`` prints that one's report (its bill,
calls and faults) as JSON. It must never listen on or ask anything but loopback and
never print anything but the export lines (or the report) on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from flux_quantum.emulator import Call, Emulator, Scenario, ScenarioError, WallClock
from flux_quantum.emulator.bill import read_report
from flux_quantum.emulator.ibm_scenario import IbmScenario
from flux_quantum.emulator.server import check_loopback
from flux_quantum.errors import CommandError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "emulator",
        help="run a local Amazon Braket and IBM Quantum emulator (tests, demos, benchmarks)",
        description=(
            "Serve Amazon Braket's API (and the S3 it writes results to) and IBM Quantum's "
            "(IAM and the Qiskit Runtime REST API, under /ibm) on loopback, with emulated "
            "queues, offline or paused periods and faults from scenarios. Prints the "
            "environment Braket and QRMI clients need, then runs until SIGTERM or SIGINT."
        ),
    )
    _add_arguments(parser)
    parser.set_defaults(func=run_emulator)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: any free one)")
    parser.add_argument("--scenario", metavar="FILE", help="scenario YAML (default: built-in)")
    parser.add_argument(
        "--ibm-scenario", metavar="FILE", help="IBM Quantum scenario YAML (default: built-in)"
    )
    parser.add_argument(
        "--speed", type=float, default=1.0, help="emulated seconds per real second (default 1)"
    )
    parser.add_argument("--env-file", metavar="FILE", help="also write the export lines here")
    parser.add_argument(
        "--background",
        action="store_true",
        help="serve from a background process and return once it serves (needs --env-file)",
    )
    parser.add_argument(
        "--stop",
        action="store_true",
        help="stop the emulator that wrote --env-file, wait until it is gone, remove the file",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the report (bill, calls, faults) of the emulator that wrote --env-file",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of queues and faults")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each call to stderr")


def export_lines(env: dict[str, str]) -> list[str]:
    """Shell lines that set ``env`` (source them, or eval them)."""
    return [f"export {key}={shlex.quote(value)}" for key, value in env.items()]


def _log_call(call: Call) -> None:
    outcome = f"{call.status} {call.error}" if call.error else str(call.status)
    print(
        f"flux-quantum-emulator: t={call.t:.3f} {call.operation} {call.target or '-'} {outcome}",
        file=sys.stderr,
        flush=True,
    )


def _write_env_file(path: Path, lines: list[str]) -> None:
    """Write atomically, so a reader never sources half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".emulator-env-", dir=path.parent)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise CommandError(f"--env-file {path}: cannot write it ({exc.strerror})") from exc


PID_PREFIX = "# pid "
STOP_TIMEOUT = 15.0


def _pid_of(path: Path) -> int:
    """The pid an env file records, or CommandError naming the file."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CommandError(f"--env-file {path}: cannot read it ({exc.strerror})") from None
    for line in lines:
        if line.startswith(PID_PREFIX) and line[len(PID_PREFIX) :].strip().isdigit():
            return int(line[len(PID_PREFIX) :])
    raise CommandError(f"--env-file {path} names no emulator process (no '{PID_PREFIX}N' line)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours (a test that started it) is gone for every purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_emulator(path: Path, timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM the emulator ``path`` names, wait until it is gone, remove ``path``."""
    pid = _pid_of(path)
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid):  # not our child: nothing to wait on but the process table
            if time.monotonic() >= deadline:
                raise CommandError(f"the emulator (pid {pid}) did not stop within {timeout:g}s")
            time.sleep(0.05)
    path.unlink(missing_ok=True)
    print(f"flux-quantum-emulator: pid {pid} stopped, {path} removed", file=sys.stderr)
    return 0


URL_KEY = "FLUX_QUANTUM_EMULATOR_URL"
REPORT_TIMEOUT = 30.0


def _url_of(path: Path) -> str:
    """The emulator URL an env file exports, or CommandError naming the file."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CommandError(f"--env-file {path}: cannot read it ({exc.strerror})") from None
    for line in lines:
        if line.startswith(f"export {URL_KEY}="):
            words = shlex.split(line[len("export ") :])
            if len(words) == 1:
                return words[0].partition("=")[2]
    raise CommandError(f"--env-file {path} names no emulator URL (no 'export {URL_KEY}=' line)")


def fetch_report(url: str, timeout: float = REPORT_TIMEOUT) -> dict:
    """The report of the emulator serving at ``url`` (loopback only)."""
    host = urlsplit(url).hostname or ""
    try:
        check_loopback(host)
        return read_report(url, timeout)
    except ValueError as exc:
        raise CommandError(f"emulator URL {url}: {exc}") from None


def print_report(path: Path) -> int:
    """Print the report of the emulator that wrote env file ``path`` (JSON, on stdout)."""
    print(json.dumps(fetch_report(_url_of(path)), indent=2), flush=True)
    return 0


def _background(args: argparse.Namespace) -> int:
    """Fork before any thread exists; the parent returns once the child serves (it says
    so on a pipe) or says why it could not."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the emulator's process
        os.close(read_fd)
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        status = 1
        try:
            status = run_emulator(args, ready_fd=write_fd)
        except CommandError as exc:
            with contextlib.suppress(OSError):
                os.write(write_fd, str(exc).encode())
        finally:
            os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        said = pipe.read().decode(errors="replace")
    if said != "ok":
        raise CommandError(said or f"the emulator (pid {pid}) ended before it served")
    env_file = Path(args.env_file)
    print(
        "\n".join(line for line in env_file.read_text().splitlines() if line.startswith("export")),
        flush=True,
    )
    print(
        f"flux-quantum-emulator: serving in the background (pid {pid}); stop it with "
        f"flux quantum emulator --stop --env-file {env_file}",
        file=sys.stderr,
    )
    return 0


def run_emulator(args: argparse.Namespace, ready_fd: int | None = None) -> int:
    report = getattr(args, "report", False)
    if args.stop or args.background or report:
        if not args.env_file and report:
            raise CommandError("--report needs --env-file FILE (where the emulator's URL is)")
        if not args.env_file:
            what = "--stop" if args.stop else "--background"
            raise CommandError(f"{what} needs --env-file FILE (where the emulator's pid is)")
        if args.stop and report:
            raise CommandError("--report and --stop do not go together: report first, then stop")
        if args.stop:
            return stop_emulator(Path(args.env_file))
        if report:
            return print_report(Path(args.env_file))
        if ready_fd is None:
            args.background = False
            return _background(args)
    try:
        host = check_loopback(args.host)
    except ValueError as exc:
        raise CommandError(f"--host: {exc}") from exc
    if not args.speed > 0:
        raise CommandError(f"--speed must be a number > 0, got {args.speed}")
    if not 0 <= args.port <= 65535:
        raise CommandError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        scenario = Scenario.from_yaml(args.scenario) if args.scenario else Scenario.default()
        ibm = IbmScenario.from_yaml(args.ibm_scenario) if args.ibm_scenario else None
    except ScenarioError as exc:
        raise CommandError(str(exc)) from exc

    emulator = Emulator(
        scenario=scenario,
        clock=WallClock(speed=args.speed),
        host=host,
        port=args.port,
        seed=args.seed,
        on_call=_log_call if args.verbose else None,
        ibm=ibm,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            emulator.start()
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{args.port}: {exc.strerror}") from exc
        lines = export_lines(emulator.env())
        if args.env_file:
            _write_env_file(Path(args.env_file), [f"{PID_PREFIX}{os.getpid()}", *lines])
        print("\n".join(lines), flush=True)
        if ready_fd is not None:
            os.write(ready_fd, b"ok")
            os.close(ready_fd)
        print(
            f"flux-quantum-emulator: serving {len(scenario.devices)} Braket devices from "
            f"{scenario.source} and {len(emulator.ibm_scenario.backends)} IBM backends from "
            f"{emulator.ibm_scenario.source} at {emulator.url} (speed {args.speed:g}, seed "
            f"{args.seed}); "
            "stop with SIGTERM or Ctrl-C",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        emulator.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m flux_quantum.cli.emulator``: the same command without the dispatcher."""
    parser = argparse.ArgumentParser(prog="flux quantum emulator")
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_emulator(args)
    except CommandError as exc:
        print(f"flux-quantum: ERROR: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
