"""``flux quantum usage``: tasks and spend per period, user, bank and device, from the ledger.

This module only parses arguments, finds the ledger and formats rows the Flux way
(``-o FORMAT``, ``-n``, ``--json``). It never writes the ledger: inside an instance it
asks the handler service's ``usage`` RPC (``qpu_handlers.usage``), which answers the
instance owner with every row and anyone else with their own only; with ``--ledger
FILE``, or when no service runs, the file's owner reads it read-only. With
``--accounting`` each row also shows the spend fed to flux-accounting and the usage it
became there (the ledger's), and flux-accounting's own job usage of the row's user and
bank, read from its database (``[quantum.accounting] db``) read-only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from flux_quantum.cli import table
from flux_quantum.errors import CommandError, FluxQuantumError
from flux_quantum.protocol.request import RequestError, parse_duration
from flux_quantum.site.ledger import (
    CONFIG_KEY,
    DEFAULT_GROUPS,
    GROUPS,
    PERIOD_GROUPS,
    GuestError,
    Ledger,
    LedgerConfig,
    LedgerError,
    UsageQuery,
    ledger_path,
    restrict_to_caller,
)
from flux_quantum.site.quota import format_money

RPC_TOPIC = "qpu_handlers.usage"
RPC_TOPICS = (RPC_TOPIC, "qpu_handlers-service.usage")
FIELDS = (
    "period",
    "user",
    "bank",
    "device",
    "reservation",
    "cluster",
    "tasks",
    "spent",
    "reserved",
    "total",
    "released",
    "qpu_seconds",
    "share",
    "fed",
    "qpu_usage",
    "job_usage",
)
DEFAULT_FIELDS = ("period", "user", "bank", "device", "tasks", "spent", "reserved", "total")
# --accounting: the spend fed to flux-accounting, the usage it became there, and
# flux-accounting's own job usage now (classical jobs and QPU spend together, decayed).
ACCOUNTING_FIELDS = ("fed", "qpu_usage", "job_usage")
# --by ...,reservation: a row per reserved window (its cost is the site's or its bank's
# spend), its tasks' QPU time and their shares of its cost.
WINDOW_FIELDS = (
    *DEFAULT_FIELDS[:4],
    "reservation",
    *DEFAULT_FIELDS[4:],
    "qpu_seconds",
    "share",
)
RIGHT_ALIGNED = FIELDS[FIELDS.index("tasks") :]
MONEY = ("spent", "reserved", "total", "share", "fed")
USAGE = ("qpu_usage", "job_usage")
DEFAULTS: dict[str, Any] = {"reservation": "*", "cluster": "*", "qpu_seconds": 0.0, "share": 0.0}


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    usage = sub.add_parser(
        "usage",
        help="show QPU tasks and spend per period, user, bank and device",
        description="Report the ledger: tasks created and what they cost (settled) or are "
        "estimated to cost (reserved, not yet settled). The instance owner sees everyone; "
        "other users see their own tasks only. Reserved QPU windows (Braket Direct) are "
        "the site's spend (user '(site)', or the bank that booked them); --by "
        "reservation gives a row per window with its tasks' QPU time and shares. A ledger "
        "several instances share ([quantum.ledger] url) holds every cluster's tasks: "
        "--by cluster gives a row per cluster, --cluster NAME only that one's.",
    )
    usage.add_argument("--user", metavar="U", help="only this user (name or uid; owner only)")
    usage.add_argument("--bank", metavar="B", help="only this bank")
    usage.add_argument(
        "--cluster",
        metavar="NAME",
        help="only the tasks of this cluster (instance) of a ledger several share",
    )
    usage.add_argument(
        "--since",
        metavar="DATE",
        help="only tasks reserved since DATE (2025-06-01, 2025-06-01T12:00, or a duration "
        "back from now such as 30d)",
    )
    usage.add_argument("--until", metavar="DATE", help="only tasks reserved before DATE")
    usage.add_argument(
        "--period", choices=PERIOD_GROUPS, default="month", help="rows per day, month or all"
    )
    usage.add_argument(
        "--by",
        metavar="KEYS",
        default=",".join(DEFAULT_GROUPS),
        help=f"comma-separated columns to group by, of {', '.join(GROUPS)} "
        f"(default {','.join(DEFAULT_GROUPS)})",
    )
    usage.add_argument(
        "--accounting",
        action="store_true",
        help="with flux-accounting ([quantum.accounting]): the spend fed to it, the usage it "
        "became there, and its own job usage of each row's user and bank",
    )
    usage.add_argument("--json", action="store_true", help="print JSON for machines")
    usage.add_argument(
        "-o",
        "--format",
        metavar="FORMAT",
        help="Python format string of fields: " + ", ".join(FIELDS),
    )
    usage.add_argument("-n", "--no-header", action="store_true", help="omit the header")
    usage.add_argument("--ledger", metavar="FILE", help="read this ledger file (instance owner)")
    usage.set_defaults(func=cmd_usage)


# --- finding the ledger --------------------------------------------------------------


def flux_output(*words: str, timeout: float = 5.0) -> str | None:
    """Output of ``flux WORDS`` inside an instance, or None (outside one, or it failed):
    how ``flux quantum`` commands read the instance's configuration and attributes."""
    flux = shutil.which("flux")
    if flux is None or not os.environ.get("FLUX_URI"):
        return None
    try:
        proc = subprocess.run(
            [flux, *words], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def find_ledger(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    configured = flux_output("config", "get", "--quiet", "--type=string", "--default=", CONFIG_KEY)
    statedir = flux_output("getattr", "statedir")
    return ledger_path(configured, statedir)


def site_zone() -> Any:
    name = flux_output(
        "config", "get", "--quiet", "--type=string", "--default=", "quantum.quota.timezone"
    )
    try:
        return ZoneInfo(name) if name and name != "UTC" else UTC
    except (ValueError, KeyError):
        return UTC


def parse_when(text: str | None, option: str, now: float, zone: Any) -> float | None:
    """Epoch seconds from an ISO date/time (in the site's timezone unless it says) or a
    duration back from ``now``."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return now - parse_duration(text, option)
        except RequestError:
            raise CommandError(
                f"{option} must be a date such as 2025-06-01 or a duration such as 30d,"
                f" got {text!r}"
            ) from None
    return (when if when.tzinfo else when.replace(tzinfo=zone)).timestamp()


# --- the command ---------------------------------------------------------------------


def build_query(args: argparse.Namespace, now: float, zone: Any) -> UsageQuery:
    group_by = tuple(word.strip() for word in args.by.split(",") if word.strip())
    unknown = [word for word in group_by if word not in GROUPS]
    if unknown:
        raise CommandError(f"--by: unknown column '{unknown[0]}' (accepted: {', '.join(GROUPS)})")
    return UsageQuery(
        user=args.user,
        bank=args.bank,
        since=parse_when(args.since, "--since", now, zone),
        until=parse_when(args.until, "--until", now, zone),
        period=args.period,
        group_by=group_by,
        cluster=args.cluster,
        accounting=args.accounting,
    )


def read_file(path: Path, query: UsageQuery) -> tuple[str, list[dict[str, Any]]]:
    """Rows from the ledger file itself, which only its owner can read."""
    if not (path.exists() and os.access(path, os.R_OK)):
        raise CommandError(
            f"{path}: no ledger here (the handler service creates it when it starts);"
            " run inside the instance with the service running, or give --ledger FILE"
        )
    try:
        query = restrict_to_caller(query, os.getuid(), path.stat().st_uid)
        with Ledger(path, readonly=True) as ledger:
            return ledger.currency, [row.to_dict() for row in ledger.usage(query)]
    except (LedgerError, GuestError) as exc:
        raise CommandError(str(exc)) from None


def ask_service(query: UsageQuery) -> tuple[str, list[dict[str, Any]]] | None:
    """Rows from the running handler service (the supervisor's topic, or a service run in
    the foreground); None when no service answers."""
    import errno

    import flux

    handle = flux.Flux()
    for topic in RPC_TOPICS:
        try:
            answer = handle.rpc(topic, query.to_dict()).get()
        except OSError as exc:
            if exc.errno == errno.ENOSYS:
                continue
            raise CommandError(f"usage: {exc.strerror or exc}") from None
        return str(answer.get("currency", "USD")), list(answer.get("rows", []))
    return None


def read_database(config: LedgerConfig, query: UsageQuery) -> tuple[str, list[dict[str, Any]]]:
    """Rows from the PostgreSQL ledger the instance's ``[quantum.ledger]`` names, read
    with its credentials file, which only the service's user can read."""
    try:
        query = restrict_to_caller(query, os.getuid(), os.getuid())
        with Ledger.from_config(config, readonly=True) as ledger:
            return ledger.currency, [row.to_dict() for row in ledger.usage(query)]
    except (LedgerError, GuestError) as exc:
        raise CommandError(str(exc)) from None


def configured_database() -> LedgerConfig | None:
    """The instance's ``[quantum.ledger]`` when it names a PostgreSQL ledger."""
    text = flux_output("config", "get", "--quiet", "--default={}", "quantum.ledger")
    try:
        config = LedgerConfig.from_config(json.loads(text or "{}"))
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    return config if config.postgresql else None


def read_usage(explicit: str | None, query: UsageQuery) -> tuple[str, list[dict[str, Any]]]:
    """Inside an instance the handler service answers (a guest gets only their own
    rows); without a service, or with ``--ledger``, the owner reads the file (or the
    PostgreSQL database the instance's ``[quantum.ledger] url`` names)."""
    if explicit is None and os.environ.get("FLUX_URI"):
        answer = ask_service(query)
        if answer is not None:
            return answer
        database = configured_database()
        if database is not None:
            return read_database(database, query)
    return read_file(find_ledger(explicit), query)


def with_job_usage(rows: list[dict[str, Any]], group_by: tuple[str, ...]) -> list[dict[str, Any]]:
    """``rows`` with flux-accounting's job usage now of each row's user and bank (its
    database, read only: ``[quantum.accounting] db``), where it has that association,
    bank or user; None (shown "-") elsewhere."""
    from flux_quantum.site.accounting import AccountingConfig, AccountingDatabase

    text = flux_output("config", "get", "--quiet", "--default={}", "quantum.accounting")
    try:
        config = AccountingConfig.from_config(json.loads(text) if text and text != "{}" else None)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if config is None:
        return [{**row, "job_usage": None} for row in rows]
    try:
        database = AccountingDatabase(config.db)
    except FluxQuantumError as exc:
        raise CommandError(str(exc)) from None
    try:
        out = []
        for row in rows:
            user = row.get("user") if "user" in group_by else None
            bank = row.get("bank") if "bank" in group_by else None
            known = user is not None or bank is not None
            value = database.job_usage(user=user, bank=bank) if known else None
            out.append({**row, "job_usage": value})
        return out
    finally:
        database.close()


def _shown(row: dict[str, Any], currency: str) -> dict[str, str]:
    """A row's fields as display strings (a service of an older flux-quantum sends no
    window fields)."""
    shown = {}
    for key in FIELDS:
        value = row.get(key, DEFAULTS.get(key))
        if key in ACCOUNTING_FIELDS and value is None:
            shown[key] = "-"
        elif key in MONEY:
            shown[key] = format_money(float(value or 0.0), currency)
        elif key in USAGE:
            shown[key] = f"{float(value or 0.0):.5g}"
        elif key == "qpu_seconds":
            shown[key] = f"{float(value or 0.0):.0f}"
        else:
            shown[key] = str(value)
    return shown


def cmd_usage(args: argparse.Namespace) -> int:
    now = time.time()
    query = build_query(args, now, site_zone() if args.since or args.until else UTC)
    currency, rows = read_usage(args.ledger, query)
    if args.accounting:
        rows = with_job_usage(rows, query.group_by)
    if args.json:
        json.dump({"currency": currency, "rows": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    shown = [_shown(row, currency) for row in rows]
    columns = WINDOW_FIELDS if "reservation" in query.group_by else DEFAULT_FIELDS
    if "cluster" in query.group_by:
        columns = ("cluster", *columns)
    if args.accounting:
        columns = (*columns, *ACCOUNTING_FIELDS)
    fmt = args.format or table.auto_format(shown, columns, RIGHT_ALIGNED)
    for line in table.render(shown, fmt, FIELDS, header=not args.no_header):
        print(line)
    return 0
