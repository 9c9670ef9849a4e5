"""``flux quantum service``: start, stop, query or run the qpu handler service.

``start`` loads the supervisor broker module (``flux_quantum/service/qpu_handlers.py``)
which runs the service as a process in this interpreter, as the instance owner (the
user, in their own ``flux start``/``alloc``/``batch``), and returns only once the service
answered a status request, or prints the service's own error and exits non-zero;
``stop`` removes it (the vendor tasks keep running and a later start re-attaches them);
``status`` asks what it tracks; ``run`` runs the same service in the foreground as an
ordinary process, for a user in a multi-user instance or under another supervisor. This
module only parses, calls and formats: the service lives in ``flux_quantum.service``. It
never passes a credential on a command line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
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
    ("error_limit", int, "failed calls in a row, other than vendor outages, before failing (5)"),
    ("group_linger", float, "seconds a released qpu.group stays joinable (60)"),
    ("loop_linger", float, "seconds a loop's vendor session outlives its last step (5)"),
    ("tick", float, "seconds between the service's checks for due work (0.2)"),
    ("startup_default", float, "job start-up assumed by release_at=predict until measured (1)"),
    (
        "lead_share",
        float,
        "share of its time limit a running job is trusted to run, for the classical lead "
        "(0: learned from finished jobs)",
    ),
)


START_TIMEOUT = 60.0


def module_path() -> Path:
    """The supervisor broker module file ``flux module load`` takes."""
    return Path(__file__).resolve().parent.parent / "service" / "qpu_handlers.py"


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


def _status(name: str, handle: Any = None) -> dict[str, Any]:
    """The status of the supervised service (``NAME.status``), or of one running in the
    foreground (``NAME-service.status``)."""
    import errno

    import flux

    from flux_quantum.service.runner import service_name

    handle = handle or flux.Flux()
    for topic in (f"{name}.status", f"{service_name(name)}.status"):
        try:
            return handle.rpc(topic, {}).get()
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                continue
            raise CommandError(f"{topic}: {exc.strerror or exc}") from None
    raise CommandError(
        f"the qpu handler service '{name}' is not running "
        "(start it with flux quantum service start)"
    )


def _require_plugin() -> None:
    """The service has nothing to do without the quantum jobtap plugin: say so now."""
    from flux_quantum.instance.plugin import PluginClient, PluginNotLoaded

    try:
        PluginClient().query()
    except CommandError as exc:
        if not isinstance(exc, PluginNotLoaded):
            return  # a guest may not query it (owner only): the service will see
        raise CommandError(
            "the quantum jobtap plugin is not loaded in this instance, so no job is held "
            "for the service to handle (flux jobtap load $(flux quantum plugin-path), or "
            "load it from the TOML that flux quantum config prints)"
        ) from None


def cmd_start(args: argparse.Namespace) -> int:
    options = _options(args)
    _require_plugin()
    python = os.path.abspath(args.python) if args.python else sys.executable
    words = [f"python={python}", *options.to_args()]
    proc = _flux("module", "load", "--name", args.name, str(module_path()), *words)
    if proc.returncode != 0:
        text = proc.stderr.strip()
        if "File exists" in text or "already loaded" in text:
            raise CommandError(f"the qpu handler service '{args.name}' is already running")
        raise CommandError(f"flux module load failed: {text}")
    status = _wait_started(args.name, args.timeout)
    service_pid = status.get("pid")
    print(
        f"qpu handler service '{args.name}' started (pid {service_pid}, "
        f"{python}, catalog {options.catalog})"
    )
    return 0


def _wait_started(name: str, timeout: float) -> dict[str, Any]:
    """Wait until the service answers a status request; on a failure (it exited, or no
    answer within ``timeout``) remove the module and say why, in the service's words."""
    import flux

    handle = flux.Flux()
    deadline = time.monotonic() + timeout
    while True:
        status = _status(name, handle)
        supervisor = status.get("supervisor") or {}
        if status.get("running"):
            return status
        state = supervisor.get("state")
        if state in ("restarting", "failed", "stopped") or time.monotonic() > deadline:
            _flux("module", "remove", name)
            why = supervisor.get("error") or supervisor.get("last_exit")
            if state in ("restarting", "failed", "stopped"):
                raise CommandError(
                    f"the qpu handler service did not start: {why or state}"
                    + (f" ({supervisor.get('last_exit')})" if supervisor.get("last_exit") else "")
                )
            raise CommandError(
                f"the qpu handler service did not answer within {timeout:g}s"
                + (f": {why}" if why else "")
            )
        time.sleep(0.2)


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


def _busy(status: dict[str, Any]) -> list[str]:
    """What the service still has in hand: held jobs, open sessions, creates being
    looked up, tasks settling."""
    busy = []
    if status.get("jobs"):
        busy.append(f"{status['jobs']} held job(s)")
    if status.get("sessions_open"):
        busy.append(f"{status['sessions_open']} open session(s)")
    if status.get("looking_up"):
        busy.append(f"{status['looking_up']} create(s) without an answer being looked up")
    settling = (status.get("ledger") or {}).get("settling")
    if settling:
        busy.append(f"{settling} task(s) settling in the ledger")
    return busy


def _wait_idle(name: str, timeout: float) -> dict[str, Any]:
    """The status once the service holds no job, keeps no session open and settles no
    task; CommandError saying what is left after ``timeout`` seconds."""
    import flux

    handle = flux.Flux()
    deadline = time.monotonic() + timeout
    while True:
        status = _status(name, handle)
        busy = _busy(status) if status.get("running") else []
        if not busy:
            return status
        if time.monotonic() >= deadline:
            raise CommandError(
                f"the qpu handler service '{name}' still has {', '.join(busy)} after {timeout:g}s"
            )
        time.sleep(0.2)  # the service says when it is idle only when asked


def cmd_status(args: argparse.Namespace) -> int:
    if args.wait_idle is not None and not args.wait_idle > 0:
        raise CommandError(f"--wait-idle must be a number of seconds > 0, got {args.wait_idle:g}")
    status = _status(args.name) if args.wait_idle is None else _wait_idle(args.name, args.wait_idle)
    if args.json:
        print(json.dumps(status))
        return 0
    supervisor = status.get("supervisor") or {}
    if not status.get("running"):
        state = supervisor.get("state", "not running")
        print(f"qpu handler service '{args.name}': {state}")
        for key in ("last_exit", "error", "restart_in", "restarts"):
            if supervisor.get(key) is not None:
                print(f"  {key.replace('_', ' ')}: {supervisor[key]}")
        return 1
    print(
        f"qpu handler service '{args.name}': up {status['uptime']:.0f}s (pid {status.get('pid')}"
        + (f", {supervisor['restarts']} restart(s)" if supervisor.get("restarts") else "")
        + f"), catalog {status['catalog']}, {status['jobs']} held job(s) in "
        f"{len(status['units'])} unit(s)"
    )
    counters = status.get("counters")
    if counters:
        print("  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counters.items()))
    if status.get("sessions_open"):
        print(f"  open vendor sessions: {status['sessions_open']}")
    merge = status.get("merge")
    if isinstance(merge, dict):
        waiting = merge.get("waiting") or {}
        jobs = ", ".join(f"{n} on {device}" for device, n in waiting.items()) or "none"
        print(f"  merged tasks: {merge.get('rule')}; waiting to merge: {jobs}")
    ledger = status.get("ledger")
    if isinstance(ledger, dict) and ledger.get("unavailable"):
        lasted = ledger.get("unavailable_for")
        lasted = f" for {lasted:.0f}s" if isinstance(lasted, int | float) else ""
        print(
            f"  ledger UNAVAILABLE{lasted}: {ledger['unavailable']}; QPU jobs wait held with no "
            f"task ({ledger.get('reservations_put_off', 0)} reservation(s) put off), "
            f"{ledger.get('backlog', 0)} write(s) kept until it is back"
        )
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
    for unit in status["units"]:
        for task in unit["tasks"]:
            if task.get("waiting"):
                print(f"  {_jobid(unit['unit'])} waiting: {task['waiting']}")
    return 0


def _jobid(jobid: int) -> str:
    try:
        from flux.job import JobID

        return JobID(jobid).f58
    except (ImportError, OSError):
        return str(jobid)


def cmd_run(args: argparse.Namespace) -> int:
    """The service in the foreground, in this process, until SIGINT or SIGTERM."""
    from flux_quantum.service.runner import RepeatFilter, serve, service_name, stream_log

    options = _options(args)
    _require_plugin()
    log = RepeatFilter(stream_log(sys.stderr, supervised=False, verbose=args.verbose))
    # serve() said why on standard error if it could not run: its status is the answer.
    return serve(options.to_args(), name=service_name(args.name), log=log)


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


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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

    p = verbs.add_parser("start", help="start the service under its broker module supervisor")
    _add_service_options(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=START_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the service to answer ({START_TIMEOUT:g})",
    )
    p.add_argument(
        "--python",
        metavar="PATH",
        help=f"the interpreter flux-quantum is installed in (default: this one, {sys.executable})",
    )
    p.set_defaults(func=cmd_start)

    p = verbs.add_parser("stop", help="remove the broker module (tasks keep running)")
    p.add_argument("--name", default=MODULE_NAME, help=f"service name (default {MODULE_NAME})")
    p.set_defaults(func=cmd_stop)

    p = verbs.add_parser("status", help="what the service tracks")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument(
        "--wait-idle",
        type=float,
        metavar="SECONDS",
        help="first wait until the service holds no job, keeps no vendor session open and "
        "settles no task in the ledger (exit 1 saying what is left after SECONDS)",
    )
    p.add_argument("--name", default=MODULE_NAME, help=f"service name (default {MODULE_NAME})")
    p.set_defaults(func=cmd_status)

    p = verbs.add_parser("run", help="run the service in the foreground (a process)")
    _add_service_options(p)
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    p.set_defaults(func=cmd_run)

    p = verbs.add_parser("module-path", help="print the supervisor broker module file")
    p.set_defaults(func=cmd_module_path)
