"""``flux quantum service``: start, stop, query or run the qpu handler service.

``start`` loads ``flux_quantum/qpu_handlers.py`` as a Python broker module running as
the instance owner (the user, in their own ``flux start``/``alloc``/``batch``);
``stop`` removes it (the vendor tasks keep running and a later start re-attaches them);
``status`` asks it what it tracks; ``run`` runs the same service in the foreground as
an ordinary process, for a user in a multi-user instance or for a supervisor that wants
a pid. This module only parses, calls and formats: the service lives in
``flux_quantum.service``. It never passes a credential on a command line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import syslog
import time
from pathlib import Path
from typing import Any

from flux_quantum.errors import CommandError, FluxQuantumError

MODULE_NAME = "qpu_handlers"
ENV_EMULATOR_URL = "FLUX_QUANTUM_EMULATOR_URL"

# ServiceOptions fields offered as --flags (the others keep their defaults).
_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("scan_interval", float, "seconds between scans for held jobs (1)"),
    ("device_check_interval", float, "seconds between device status checks (15)"),
    ("cluster_interval", float, "seconds between looks at free cores (5)"),
    ("poll_min", float, "shortest queue poll interval, seconds (0.5)"),
    ("poll_max", float, "longest queue poll interval, seconds (300)"),
    ("poll_cold_max", float, "longest poll interval before the drain is learned (30)"),
    ("workers", int, "worker threads for vendor calls (4)"),
    ("max_tasks", int, "tasks per program, fail-overs included, before failing (3)"),
    ("retry_max", float, "longest back-off after a vendor error, seconds (60)"),
    ("group_linger", float, "seconds a released qpu.group stays joinable (60)"),
    ("tick", float, "seconds between the service's checks for due work (0.2)"),
    ("startup_default", float, "job start-up assumed by release_at=predict until measured (1)"),
)


def module_path() -> Path:
    """The broker module file ``flux module load`` takes."""
    return Path(__file__).resolve().parent.parent / "qpu_handlers.py"


def _python_path() -> str:
    """This interpreter's import path, for the broker's Python to find the package
    and its dependencies (the broker runs its own interpreter, not this venv's)."""
    entries = []
    for entry in sys.path:
        if entry and os.path.isdir(entry) and not any(c.isspace() for c in entry):
            entries.append(os.path.abspath(entry))
    return os.pathsep.join(dict.fromkeys(entries))


def _options(args: argparse.Namespace) -> Any:
    from flux_quantum.catalog import load_catalog, resolve_catalog_path
    from flux_quantum.service import ServiceError, ServiceOptions

    try:
        catalog = load_catalog(resolve_catalog_path(args.catalog).path)
    except FluxQuantumError as exc:
        raise CommandError(str(exc)) from exc
    values: dict[str, Any] = {
        "catalog": str(Path(catalog.path).resolve()),
        "emulator_url": args.emulator_url or os.environ.get(ENV_EMULATOR_URL) or None,
    }
    for name, _kind, _help in _FLAGS:
        value = getattr(args, name)
        if value is not None:
            values[name] = value
    try:
        return ServiceOptions(**values)
    except ServiceError as exc:
        raise CommandError(str(exc)) from exc


def _flux(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["flux", *argv], capture_output=True, text=True)


def _status(name: str) -> dict[str, Any]:
    import errno

    import flux

    try:
        return flux.Flux().rpc(f"{name}.status", {}).get()
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            raise CommandError(
                f"the qpu handler service '{name}' is not running "
                "(start it with flux quantum service start)"
            ) from None
        raise CommandError(f"{name}.status: {exc.strerror or exc}") from None


def _require_plugin() -> None:
    """The service has nothing to do without the quantum jobtap plugin: say so now."""
    from flux_quantum.plugin import PluginClient

    try:
        PluginClient().query()
    except CommandError:
        raise CommandError(
            "the quantum jobtap plugin is not loaded in this instance, so no job is held "
            "for the service to handle (flux jobtap load $(flux quantum plugin-path), or "
            "load it from the TOML that flux quantum config prints)"
        ) from None


def cmd_start(args: argparse.Namespace) -> int:
    options = _options(args)
    _require_plugin()
    words = [*options.to_args(), f"pythonpath={_python_path()}"]
    proc = _flux("module", "load", "--name", args.name, str(module_path()), *words)
    if proc.returncode != 0:
        text = proc.stderr.strip()
        if "File exists" in text or "already loaded" in text:
            raise CommandError(f"the qpu handler service '{args.name}' is already running")
        raise CommandError(f"flux module load failed: {text}")
    status = _status(args.name)
    if not status.get("running"):
        _flux("module", "remove", args.name)
        raise CommandError(f"the qpu handler service did not start: {status.get('error')}")
    print(f"qpu handler service '{args.name}' started (catalog {options.catalog})")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    proc = _flux("module", "remove", args.name)
    if proc.returncode != 0:
        text = proc.stderr.strip()
        if "No such file" in text or "not loaded" in text or "nonexistent" in text:
            raise CommandError(f"the qpu handler service '{args.name}' is not running")
        raise CommandError(f"flux module remove failed: {text}")
    print(f"qpu handler service '{args.name}' stopped")
    return 0


def _short(task: str | None) -> str:
    if not task:
        return "-"
    return task.rsplit("/", 1)[-1][:8]


def cmd_status(args: argparse.Namespace) -> int:
    status = _status(args.name)
    if args.json:
        print(json.dumps(status))
        return 0
    if not status.get("running"):
        print(f"qpu handler service '{args.name}': not running ({status.get('error')})")
        return 1
    counters = status.get("counters", {})
    print(
        f"qpu handler service '{args.name}': up {status['uptime']:.0f}s, "
        f"catalog {status['catalog']}, {status['jobs']} held job(s) in "
        f"{len(status['units'])} unit(s)"
    )
    print("  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counters.items()))
    if status.get("last_error"):
        print(f"  last error: {status['last_error']}")
    rows = [("UNIT", "JOBS", "PROG", "PHASE", "DEVICE", "TASK", "POS", "WAIT", "REQUEST")]
    for unit in status["units"]:
        for task in unit["tasks"]:
            wait = task["expected_wait"]
            rows.append(
                (
                    _jobid(unit["unit"]),
                    str(len(unit["jobs"])),
                    str(task["index"]),
                    task["phase"],
                    task["device"] or "-",
                    _short(task["task"]),
                    "-" if task["position"] is None else str(task["position"]),
                    "-" if wait is None else f"{wait:.0f}s",
                    unit["request"],
                )
            )
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
            print("  " + "  ".join(cells) + "  " + row[-1])
    return 0


def _jobid(jobid: int) -> str:
    try:
        from flux.job import JobID

        return JobID(jobid).f58
    except (ImportError, OSError):
        return str(jobid)


def cmd_run(args: argparse.Namespace) -> int:
    """The service in the foreground, on its own handle, until SIGINT or SIGTERM."""
    import flux
    import flux.constants

    from flux_quantum.service import ServiceError, ServiceRunner

    options = _options(args)
    _require_plugin()
    handle = flux.Flux()

    def log(level: int, msg: str) -> None:
        if level <= (syslog.LOG_DEBUG if args.verbose else syslog.LOG_INFO):
            stamp = time.strftime("%H:%M:%S")
            print(f"flux-quantum-service: {stamp} {msg}", file=sys.stderr, flush=True)

    # The service name is also a lock: one service per instance owner.
    watchers = []
    try:
        handle.service_register(args.name).get()
        registered = True
    except OSError as exc:
        import errno

        if exc.errno == errno.EEXIST:
            raise CommandError(
                f"the qpu handler service '{args.name}' is already running"
            ) from None
        registered = False  # a guest: no service name, no status endpoint
    try:
        runner = ServiceRunner(handle, options, log=log)
    except ServiceError as exc:
        raise CommandError(str(exc)) from exc

    def on_status(h: Any, typemask: int, msg: Any, arg: Any) -> None:
        try:
            h.respond(msg, {"running": True, **runner.status()})
        except Exception as exc:  # never stop the reactor for a status request
            log(syslog.LOG_ERR, f"status: {exc}")

    def on_signal(h: Any, watcher: Any, signum: int, arg: Any) -> None:
        log(syslog.LOG_INFO, f"signal {signum}: stopping")
        h.reactor_stop()

    if registered:
        w = handle.msg_watcher_create(
            on_status, flux.constants.FLUX_MSGTYPE_REQUEST, f"{args.name}.status"
        )
        w.start()
        watchers.append(w)
    for sig in (signal.SIGINT, signal.SIGTERM):
        w = handle.signal_watcher_create(sig, on_signal)
        w.start()
        watchers.append(w)
    runner.start()
    try:
        handle.reactor_run()
    finally:
        runner.stop()
        for w in watchers:
            w.stop()
    return 0


def cmd_module_path(args: argparse.Namespace) -> int:
    print(module_path())
    return 0


def _add_service_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", metavar="FILE", help="backends catalog (default: lookup order)")
    p.add_argument(
        "--emulator-url",
        metavar="URL",
        help=f"where the local vendor finds the emulator (default: ${ENV_EMULATOR_URL})",
    )
    for name, kind, text in _FLAGS:
        p.add_argument("--" + name.replace("_", "-"), type=kind, metavar="N", help=text)
    p.add_argument("--name", default=MODULE_NAME, help=f"service name (default {MODULE_NAME})")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "service",
        help="start, stop or query the qpu handler service",
        description=(
            "The qpu handler service submits the producer quantum task of every job the "
            "quantum plugin holds, watches its queue and releases the job in time."
        ),
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True

    p = verbs.add_parser("start", help="load the service as a broker module")
    _add_service_options(p)
    p.set_defaults(func=cmd_start)

    p = verbs.add_parser("stop", help="remove the broker module (tasks keep running)")
    p.add_argument("--name", default=MODULE_NAME, help=f"service name (default {MODULE_NAME})")
    p.set_defaults(func=cmd_stop)

    p = verbs.add_parser("status", help="what the service tracks")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--name", default=MODULE_NAME, help=f"service name (default {MODULE_NAME})")
    p.set_defaults(func=cmd_status)

    p = verbs.add_parser("run", help="run the service in the foreground (a process)")
    _add_service_options(p)
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    p.set_defaults(func=cmd_run)

    p = verbs.add_parser("module-path", help="print the broker module file")
    p.set_defaults(func=cmd_module_path)
