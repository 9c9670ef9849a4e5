"""``flux quantum reservations``: the instance's reserved QPU windows (Braket Direct), now.

One row per ``[[quantum.reservations]]`` window of the instance's configuration (``flux
config get quantum``, or ``--config FILE`` to check a TOML file before installing it),
validated against the catalog as the handler service validates it: its state now (next,
now, past), its times, device, who may use it and what happens to a job whose task did
not run by its end; from the running handler service's status, the jobs held for it
and those on nodes in it, the tasks created in it, the QPU time they used and the
window's utilisation. Without a running service it says so in one line and shows what
the ledger recorded (tasks settled in the window and their QPU time). Past windows show
for a day after their end, all of them with ``--all``.

This module only reads and formats: the windows are ``flux_quantum.site.reservations``'s,
the live part the service's (``flux quantum service status --json``), the rest the
ledger's, read-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from flux_quantum.catalog import Catalog
from flux_quantum.cli import table
from flux_quantum.cli.usage import find_ledger, flux_output
from flux_quantum.errors import CommandError
from flux_quantum.site import reservations as braket_direct
from flux_quantum.site.ledger import Ledger, LedgerError
from flux_quantum.site.quota import format_money

RECENT = 86400.0  # a past window shows for this long after its end without --all
FIELDS = (
    "name",
    "state",
    "start",
    "end",
    "device",
    "on_end",
    "wait",
    "on_nodes",
    "tasks",
    "qpu_time",
    "util",
    "cost",
    "who",
    "bank",
    "route",
    "places",  # the window's jobs on nodes at once (its ``jobs`` key)
    "jobids",  # the jobs waiting and on nodes, by id
    "arn",
)
DEFAULT_FIELDS = FIELDS[:12]  # and "who" last, unpadded
RIGHT_ALIGNED = ("wait", "on_nodes", "tasks", "qpu_time", "util", "cost")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "reservations",
        help="list the reserved QPU windows (Braket Direct) and what runs in them",
        description="One row per [[quantum.reservations]] window of this instance: its "
        "state now (next, now, past), start and end (local time), device, what happens "
        "to a job whose task did not run by the end (ON_END), the jobs held for it "
        "(WAIT) and on nodes in it (ON_NODES), its tasks, their QPU time, the window's "
        "utilisation, its cost and who may use it. Jobs, tasks and QPU time come from the running qpu "
        "handler service; without one, from the ledger. Past windows show for a day "
        "after their end.",
    )
    p.add_argument("--all", action="store_true", help="also list windows that ended long ago")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help="Python format string of fields: " + ", ".join(FIELDS),
    )
    p.add_argument("-n", "--no-header", action="store_true", help="omit the header")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="read the [[quantum.reservations]] tables of this TOML file instead of the "
        "instance's configuration (to check a file before installing it)",
    )
    p.add_argument("--catalog", metavar="FILE", help="backends catalog (default: lookup order)")
    p.add_argument("--ledger", metavar="FILE", help="read this ledger file (instance owner)")
    p.add_argument(
        "--name", default="qpu_handlers", help="the handler service's name (qpu_handlers)"
    )
    p.set_defaults(func=cmd_reservations)


# --- the configuration ---------------------------------------------------------------


def _plain(value: Any, where: str) -> Any:
    """A TOML file's values as the instance will see them, date-times as RFC 3339 text.
    Flux's TOML reader keeps a date-time's digits and drops its offset (09:00:00-05:00
    and a local 09:00:00 both read as 09:00:00Z): such a date-time is refused here with
    what the instance would make of it."""
    if isinstance(value, Mapping):
        return {key: _plain(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value, start=1)]
    if isinstance(value, datetime) and value.utcoffset() != timedelta(0):
        as_read = value.replace(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        raise CommandError(
            f"{where} = {value.isoformat()}: Flux reads a TOML date-time's digits as UTC, so "
            f"the instance would take it as {as_read}; write it in UTC (ending in Z) or as a "
            f'quoted string ("{value.isoformat()}")'
        )
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return value


def quantum_table(config: str | None) -> Mapping[str, Any]:
    """The ``[quantum]`` table of ``config`` (a TOML file) or of this instance."""
    if config is not None:
        try:
            with open(config, "rb") as f:
                document = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CommandError(f"{config}: cannot read it as TOML: {exc}") from None
        quantum = document.get("quantum", {})
        return _plain(quantum, f"{config}: quantum") if isinstance(quantum, Mapping) else {}
    if not os.environ.get("FLUX_URI"):
        raise CommandError(
            "flux quantum reservations reads the instance's configuration: run it inside a "
            "Flux instance, or give --config FILE"
        )
    text = flux_output("config", "get", "--default={}", "quantum")
    if text is None:
        raise CommandError("cannot read the instance's configuration (flux config get quantum)")
    try:
        quantum = json.loads(text)
    except ValueError:
        raise CommandError(f"flux config get quantum gave no JSON: {text[:60]!r}") from None
    return quantum if isinstance(quantum, Mapping) else {}


def read_book(args: argparse.Namespace) -> tuple[braket_direct.ReservationBook, Catalog]:
    """The windows, checked against the catalog as the service checks them, and the
    catalog."""
    quantum = quantum_table(args.config)
    catalog = table.catalog(args.catalog)
    try:
        book = braket_direct.ReservationBook.from_config(
            quantum.get("reservations"), {device.name: device for device in catalog}
        )
    except braket_direct.ReservationConfigError as exc:
        raise CommandError(str(exc)) from None
    return book, catalog


# --- what runs in them -----------------------------------------------------------------


def live_windows(name: str) -> tuple[dict[str, Mapping[str, Any]] | None, str | None]:
    """Per window name, the running service's record; or None and why there is none."""
    if not os.environ.get("FLUX_URI"):
        return None, "not inside a Flux instance"
    from flux_quantum.cli import service as service_cli

    try:
        status = service_cli._status(name)
    except CommandError as exc:
        return None, str(exc)
    if not status.get("running"):
        state = (status.get("supervisor") or {}).get("state", "not running")
        return None, f"the qpu handler service '{name}' is {state}"
    windows = status.get("reservations")
    if not isinstance(windows, list):
        return None, f"the qpu handler service '{name}' reports no reservations"
    return {str(w.get("name")): w for w in windows if isinstance(w, Mapping)}, None


def ledger_use(explicit: str | None, names: list[str]) -> dict[str, tuple[int, float, float]]:
    """Per window, what the ledger recorded (tasks, QPU seconds, shares); {} when the
    ledger is not there or not readable by this user (a guest)."""
    path = find_ledger(explicit) if explicit or os.environ.get("FLUX_URI") else None
    if path is None or not (path.exists() and os.access(path, os.R_OK)):
        if explicit:
            raise CommandError(f"{explicit}: no ledger here")
        return {}
    try:
        with Ledger(path, readonly=True) as ledger:
            return {name: ledger.window_use(name) for name in names}
    except LedgerError:
        return {}


# --- the listing ---------------------------------------------------------------------


def _local(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _jobs(ids: Any) -> list[int | str]:
    """Job ids from the service's answer (anything else left out)."""
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, (int, str)) and not isinstance(i, bool)]


def _number(value: Any) -> float | None:
    """A number from the service's answer, or None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _jobid(jobid: int | str) -> str:
    """A job id the Flux way (f58), as ``flux jobs`` shows it."""
    try:
        from flux.job import JobID

        return JobID(jobid).f58
    except (ImportError, OSError, TypeError, ValueError):
        return str(jobid)


def window_record(
    window: braket_direct.Reservation,
    now: float,
    live: Mapping[str, Any] | None,
    ledger: tuple[int, float, float] | None,
) -> dict[str, Any]:
    """One window for --json: the configuration, its state now, what runs in it."""
    record: dict[str, Any] = {**window.to_dict(), "state": window.state(now)}
    if live is not None:
        # The service says None where it cannot (no ledger): shown as "-".
        tasks, used = _number(live.get("tasks")), _number(live.get("used_seconds"))
        util = _number(live.get("utilisation"))
        if util is None and used is not None:
            util = used / window.duration
        record.update(
            waiting=_jobs(live.get("waiting")),
            active=_jobs(live.get("active")),
            tasks=None if tasks is None else int(tasks),
            used_seconds=used,
            utilisation=util,
            source="service",
        )
    else:
        tasks, used, _share = ledger or (0, 0.0, 0.0)
        record.update(
            waiting=None,
            active=None,
            tasks=tasks if ledger is not None else None,
            used_seconds=used if ledger is not None else None,
            utilisation=used / window.duration if ledger is not None else None,
            source="ledger" if ledger is not None else None,
        )
    record["share"] = ledger[2] if ledger is not None else None
    return record


def window_row(record: Mapping[str, Any], currency: str) -> dict[str, str]:
    """All ``-o`` fields of one window, as display strings."""

    def count(key: str) -> str:
        value = record[key]
        if value is None:
            return "-"
        return str(len(value)) if isinstance(value, list) else str(value)

    used = record["used_seconds"]
    util = record["utilisation"]
    jobs = []
    for key, label in (("waiting", "waiting"), ("active", "on nodes")):
        if record[key]:
            jobs.append(f"{label}: {' '.join(_jobid(j) for j in record[key])}")
    return {
        "name": record["name"],
        "state": record["state"],
        "start": _local(record["start"]),
        "end": _local(record["end"]),
        "device": record["device"],
        "who": record["who"],
        "on_end": record["on_end"],
        "wait": count("waiting"),
        "on_nodes": count("active"),
        "tasks": count("tasks"),
        "qpu_time": "-" if used is None else braket_direct.format_seconds(used),
        "util": "-" if util is None else f"{100 * util:.0f}%",
        "cost": format_money(record["cost"], currency),
        "bank": record["bank"] or "(site)",
        "route": "yes" if record["route"] else "no",
        "places": str(record["jobs"]),
        "jobids": "; ".join(jobs) or "-",
        "arn": record["arn"],
    }


def shown_windows(
    book: braket_direct.ReservationBook, now: float, everything: bool
) -> list[braket_direct.Reservation]:
    """The windows to list, by start: past ones only for a day after their end."""
    return sorted(
        (w for w in book if everything or w.end > now - RECENT),
        key=lambda w: (w.start, w.name),
    )


def cmd_reservations(args: argparse.Namespace) -> int:
    book, catalog = read_book(args)
    now = time.time()
    windows = shown_windows(book, now, args.all)
    if args.config is None:
        live, missing = live_windows(args.name)
    else:
        live, missing = None, f"the windows of {args.config}, not of a running instance"
    use = ledger_use(args.ledger, [w.name for w in windows])
    currency = catalog.currency
    records = [
        window_record(w, now, None if live is None else live.get(w.name), use.get(w.name))
        for w in windows
    ]
    note = None
    if live is None and use:
        note = (
            f"no live data ({missing}): jobs waiting and on nodes unknown; tasks and QPU "
            "time are the ledger's (a task's QPU time once it is settled)"
        )
    elif live is None:
        note = (
            f"no live data ({missing}) and no ledger readable here: jobs, tasks and QPU "
            "time unknown"
        )
    if args.json:
        report = {
            "now": now,
            "currency": currency,
            "live": live is not None,
            "note": note,
            "reservations": records,
        }
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not len(book):
        print("no reserved QPU windows in this instance's configuration ([[quantum.reservations]])")
        return 0
    rows = [window_row(record, currency) for record in records]
    zone = time.strftime("%Z", time.localtime(now))  # the times are local: say which zone
    headers = {"start": f"START({zone})", "end": f"END({zone})"}
    titles = {field: headers.get(field, field.upper()) for field in FIELDS}
    fmt = args.format or table.auto_format([*rows, titles], DEFAULT_FIELDS, RIGHT_ALIGNED, "who")
    for line in table.render(rows, fmt, FIELDS, header=not args.no_header, headers=headers):
        print(line)
    for row in rows:
        if row["jobids"] != "-":
            print(f"  {row['name']} {row['jobids']}")
    hidden = len(book) - len(windows)
    if hidden:
        print(f"  ({hidden} window(s) ended more than a day ago: --all lists them)")
    if note:
        print(note, file=sys.stderr)
    return 0
