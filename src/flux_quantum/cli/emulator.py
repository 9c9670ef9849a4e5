"""``flux quantum emulator``: run the local vendor emulator (every side its table lists).

This module owns the command's options and output: one ``--...-scenario FILE`` per side
of the emulator's table that serves a scenario; it prints the ``export K=V`` lines a
client needs (and writes them to ``--env-file``, with the emulator's pid in a comment),
logs one line per call to stderr with ``-v``, and stops cleanly on SIGTERM or SIGINT.
``--background`` returns once the emulator serves (no wait on a clock), ``--stop``
ends the one an env file names and ``--report`` prints that one's report (its bill,
calls and faults) as JSON. ``--reserve DEVICE`` books a Braket Direct window on the
emulator an env file names, as Braket Direct's console would (its ARN the emulator's), on
the wall clock whatever the emulator's speed, and prints the site's
``[[quantum.reservations]]`` table for it. It must never listen on or ask anything but
loopback and never print anything but the export lines (or the report, or the table) on
stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from flux_quantum.cli import table
from flux_quantum.emulator import Call, Emulator, ScenarioError, WallClock
from flux_quantum.emulator.bill import read_report
from flux_quantum.emulator.braket.direct import book_wall
from flux_quantum.emulator.server import check_loopback
from flux_quantum.emulator.side import SideEntry
from flux_quantum.emulator.sides import SIDES
from flux_quantum.errors import CommandError
from flux_quantum.site import reservations

# The sides that serve a scenario of their own, each read from its --...-scenario FILE.
SCENARIO_SIDES: tuple[SideEntry, ...] = tuple(e for e in SIDES if e.scenario is not None)


def _served() -> str:
    """The sides, as the command's help names them: "Braket, IBM Quantum and IonQ"."""
    names = [entry.label for entry in SCENARIO_SIDES]
    return ", ".join(names[:-1]) + " and " + names[-1]


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "emulator",
        help=f"run a local {_served()} emulator (tests, demos)",
        description=(
            f"Serve the APIs of {_served()} on loopback (each side under its own path, "
            "Braket's S3 under /s3), with emulated queues, offline or paused periods and "
            "faults from scenarios. Prints the environment their clients need, then runs "
            "until SIGTERM or SIGINT."
        ),
    )
    _add_arguments(parser)
    parser.set_defaults(func=run_emulator)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: any free one)")
    for entry in SCENARIO_SIDES:
        parser.add_argument(
            entry.option,
            dest=f"{entry.keyword}_file",
            metavar="FILE",
            help=f"{entry.label} scenario YAML (default: built-in)",
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
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="run programs the vendors would refuse (not in a backend's ISA, outside IQM's "
        "native set or couplers); default: strict, as the vendors are",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each call to stderr")
    reserve = parser.add_argument_group(
        "Braket Direct windows",
        "Book a window of a device on the running emulator that wrote --env-file, on the "
        "wall clock whatever its --speed, and print the [[quantum.reservations]] table "
        "for the instance's configuration: flux quantum emulator --env-file F --reserve "
        "local-forte1 --in 30s --for 3m --name demo >> CONFIG",
    )
    reserve.add_argument(
        "--reserve",
        metavar="DEVICE",
        help="book DEVICE (the catalog's name of a Braket device, e.g. local-forte1)",
    )
    reserve.add_argument(
        "--in",
        dest="opens_in",
        metavar="DURATION",
        help="the window opens this long from now (30s, 5m, 1h; default 0)",
    )
    reserve.add_argument(
        "--for", dest="lasts", metavar="DURATION", help="how long the window lasts (required)"
    )
    reserve.add_argument(
        "--name", help="the window's name (default: DEVICE-YYYYMMDD-HHMMSS of its start, UTC)"
    )
    reserve.add_argument(
        "--price-per-hour",
        type=float,
        metavar="PRICE",
        help="what an hour of the window costs (default 0); the table's cost is PRICE x its hours",
    )
    reserve.add_argument("--users", metavar="LIST", help="who may use it: user names or uids, a,b")
    reserve.add_argument("--banks", metavar="LIST", help="who may use it: banks, a,b")
    reserve.add_argument("--bank", help="the bank that booked it (default: the site)")
    reserve.add_argument(
        "--on-end",
        choices=reservations.ON_END,
        help="a job whose task did not run by the end: on-demand (default) or fail",
    )
    reserve.add_argument(
        "--route", action="store_true", help="the policy may route jobs that named no window"
    )
    reserve.add_argument(
        "--route-within", metavar="DURATION", help="with --route: taken this long before it opens"
    )
    reserve.add_argument("--jobs", type=int, help="its jobs on nodes at once (default 2)")
    reserve.add_argument(
        "--catalog", metavar="FILE", help="backends catalog (default: lookup order)"
    )


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


def fetch_report(url: str, timeout: float = REPORT_TIMEOUT) -> dict[str, Any]:
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
    if getattr(args, "reserve", None) is not None:
        return reserve_window(args)
    given = [option for option, dest in RESERVE_OPTIONS if getattr(args, dest, None)]
    if given:
        raise CommandError(f"{given[0]} goes with --reserve DEVICE (the device to book)")
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
    scenarios: dict[str, Any] = {}
    try:
        for entry in SCENARIO_SIDES:
            path = getattr(args, f"{entry.keyword}_file", None)
            scenarios[entry.keyword] = entry.scenario.from_yaml(path) if path else None
    except ScenarioError as exc:
        raise CommandError(str(exc)) from exc

    emulator = Emulator(
        clock=WallClock(speed=args.speed),
        host=host,
        port=args.port,
        seed=args.seed,
        on_call=_log_call if args.verbose else None,
        strict=not getattr(args, "lenient", False),
        **scenarios,
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
            f"flux-quantum-emulator: serving {_devices(emulator)} at {emulator.url} "
            f"(speed {args.speed:g}, seed {args.seed}); stop with SIGTERM or Ctrl-C",
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


def _devices(emulator: Emulator) -> str:
    """What each side serves: "8 Braket devices from <default scenario>, 3 IBM Quantum
    devices from <default IBM scenario>, ..."."""
    served = []
    for entry in SCENARIO_SIDES:
        scenario = emulator.sides[entry.name].scenario
        served.append(f"{entry.devices(scenario)} {entry.label} devices from {scenario.source}")
    return ", ".join(served)


# --- Braket Direct windows -------------------------------------------------------------

RESERVE_OPTIONS = (
    ("--in", "opens_in"),
    ("--for", "lasts"),
    ("--name", "name"),
    ("--price-per-hour", "price_per_hour"),
    ("--users", "users"),
    ("--banks", "banks"),
    ("--bank", "bank"),
    ("--on-end", "on_end"),
    ("--route", "route"),
    ("--route-within", "route_within"),
    ("--jobs", "jobs"),
    ("--catalog", "catalog"),
)
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(s|m|h|d)?", re.ASCII)
_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Checks the table before the window is booked; the emulator gives the real one.
_PLACEHOLDER_ARN = "arn:aws:braket:us-east-1:000000000000:reservation/not-booked-yet"


def duration(text: str, option: str) -> float:
    """Seconds of ``30s``, ``5m``, ``1.5h``, ``1d`` or plain seconds; CommandError naming
    ``option`` otherwise."""
    match = _DURATION.fullmatch(text.strip())
    seconds = float(match.group(1)) * _SECONDS[match.group(2) or ""] if match else math.nan
    if not math.isfinite(seconds):
        raise CommandError(f"{option} must be a duration such as 90, 30s, 5m or 2h, got {text!r}")
    return seconds


def _names(text: str, option: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise CommandError(f"{option} must be names separated by commas (a,b), got {text!r}")
    return names


def _toml_datetime(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value)  # a JSON string is a TOML basic string


def window_table(fields: dict[str, Any]) -> str:
    """``fields`` (``start``/``end`` in epoch seconds) as one ``[[quantum.reservations]]``
    table, the date-times in UTC (Flux's TOML reader drops any other offset)."""
    lines = [f"[[{reservations.TABLE}]]"]
    for key, value in fields.items():
        shown = _toml_datetime(value) if key in ("start", "end") else _toml_value(value)
        lines.append(f"{key} = {shown}")
    return "\n".join(lines) + "\n"


def check_table(text: str, devices: dict[str, Any]) -> reservations.Reservation:
    """The window ``text`` describes, read back as TOML and checked as the handler service
    checks the instance's tables; CommandError with its sentence."""
    entries = tomllib.loads(text)["quantum"]["reservations"]
    plain = [
        {k: v.isoformat() if isinstance(v, datetime) else v for k, v in entry.items()}
        for entry in entries
    ]
    try:
        [reservation] = reservations.ReservationBook.from_config(plain, devices)
    except reservations.ReservationConfigError as exc:
        raise CommandError(str(exc)) from None
    return reservation


def _window_fields(
    args: argparse.Namespace, name: str, device: str, arn: str, start: float, end: float
) -> dict[str, Any]:
    price = args.price_per_hour or 0.0
    fields: dict[str, Any] = {
        "name": name,
        "device": device,
        "arn": arn,
        "start": start,
        "end": end,
        "cost": round(price * (end - start) / 3600.0, 2),
    }
    if args.users:
        fields["users"] = _names(args.users, "--users")
    if args.banks:
        fields["banks"] = _names(args.banks, "--banks")
    optional = {
        "bank": args.bank,
        "on_end": args.on_end,
        "route": args.route or None,
        "route_within": args.route_within,
        "jobs": args.jobs,
    }
    fields.update({key: value for key, value in optional.items() if value is not None})
    return fields


def reserve_window(args: argparse.Namespace) -> int:
    """Book ``--reserve DEVICE`` on the emulator ``--env-file`` names, from ``--in`` for
    ``--for`` on the wall clock (whole seconds), and print its table on stdout."""
    for option, wanted in (("--stop", args.stop), ("--report", args.report)):
        if wanted:
            raise CommandError(f"{option} and --reserve do not go together: one at a time")
    if args.background:
        raise CommandError("--background and --reserve do not go together: start it first")
    if not args.env_file:
        raise CommandError("--reserve needs --env-file FILE (where the emulator's URL is)")
    if args.lasts is None:
        raise CommandError("--reserve needs --for DURATION (how long the window lasts)")
    lasts = math.ceil(duration(args.lasts, "--for"))
    if lasts <= 0:
        raise CommandError(f"--for must be at least one second, got {args.lasts!r}")
    opens_in = duration(args.opens_in, "--in") if args.opens_in is not None else 0.0
    if args.price_per_hour is not None and not (
        math.isfinite(args.price_per_hour) and args.price_per_hour >= 0
    ):
        raise CommandError(f"--price-per-hour must be a number >= 0, got {args.price_per_hour:g}")
    catalog = table.catalog(args.catalog)
    vendor, _, named = args.reserve.rpartition(":")
    device = next((d for d in catalog if d.name == named), None)
    if device is None or vendor not in ("", device.vendor):
        raise CommandError(
            f"--reserve {args.reserve!r} is not a device of the catalog {catalog.path} "
            f"(devices: {', '.join(catalog.names()) or 'none'})"
        )
    devices = {d.name: d for d in catalog}
    url = _url_of(Path(args.env_file))
    start = math.ceil(time.time() + opens_in)
    end = start + lasts
    stamp = datetime.fromtimestamp(start, UTC).strftime("%Y%m%d-%H%M%S")
    name = args.name or f"{device.name}-{stamp}".lower()
    # Everything the site's table says is checked before anything is booked.
    unbooked = _window_fields(args, name, device.name, _PLACEHOLDER_ARN, start, end)
    check_table(window_table(unbooked), devices)
    try:
        check_loopback(urlsplit(url).hostname or "")
        record = book_wall(url, device.id, start, end, price_per_hour=args.price_per_hour or 0.0)
    except ValueError as exc:
        raise CommandError(f"the emulator at {url} did not book the window: {exc}") from None
    arn = record.get("arn")
    if not isinstance(arn, str) or record.get("device") != device.id:
        raise CommandError(f"the emulator at {url} answered a booking without {device.id}'s ARN")
    text = window_table(_window_fields(args, name, device.name, arn, start, end))
    check_table(text, devices)
    print(text, end="", flush=True)
    timeline = [record.get(key) for key in ("start", "end")]
    on_timeline = (
        f" (the emulator's seconds {timeline[0]:.0f} to {timeline[1]:.0f})"
        if all(isinstance(t, (int, float)) for t in timeline)
        else ""
    )
    print(
        f"flux-quantum-emulator: booked {device.name} ({device.id}) as {name}, "
        f"{_toml_datetime(start)} to {_toml_datetime(end)} on the wall clock{on_timeline}; "
        "append the table to the instance's configuration, then start (or restart) the "
        "handler service",
        file=sys.stderr,
    )
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
