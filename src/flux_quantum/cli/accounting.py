"""``flux quantum accounting``: a site that runs flux-accounting puts the QPU spend in
fair-share.

- ``update``: flux-accounting's periodic update with the feed in its place (fetch the
  job records, feed the settled QPU spend, update usage, fair-share and priorities):
  what a site's cron runs instead of the four ``flux account-*`` commands;
- ``feed``: the feed alone, for a site whose own script runs the cycle (right after
  ``flux account-fetch-job-records``, with ``--horizon`` the time before it);
- ``feeds``: what the ledger fed, each feed with its flux-accounting job id.

This module parses arguments, finds flux-accounting's database (``[quantum.accounting]
db``, or ``-p``) and the ledger (as ``flux quantum usage`` does) and prints; the feed
and the cycle are :mod:`flux_quantum.site.accounting`'s. It runs as the instance owner:
it writes the ledger (what it fed) and flux-accounting's database (new job records).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flux_quantum.cli import table
from flux_quantum.cli.usage import configured_database, find_ledger, flux_output
from flux_quantum.errors import CommandError, FluxQuantumError
from flux_quantum.job.consumer import encode_jobid as f58
from flux_quantum.site.accounting import (
    AccountingConfig,
    FeedReport,
    UpdateCycle,
    UsageFeed,
    usage_jobid,
)
from flux_quantum.site.ledger import Ledger
from flux_quantum.site.quota import format_money

CONFIG_KEY = "quantum.accounting"
FEED_FIELDS = ("feed", "jobid", "user", "bank", "tasks", "spend", "usage", "t_inactive", "state")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "accounting",
        help="feed QPU spend into flux-accounting's fair-share",
        description="At a site that runs flux-accounting ([quantum.accounting] db and "
        "qpu_weight in the instance configuration): turn each association's settled QPU "
        "spend into flux-accounting usage through its own update cycle, once.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    update = verbs.add_parser(
        "update",
        help="run flux-accounting's update cycle with the QPU spend fed in it",
        description="flux account-fetch-job-records, the feed, flux account-update-usage, "
        "flux account-update-fshare, flux account-priority-update: what a site runs from "
        "cron, as the instance owner.",
    )
    feed = verbs.add_parser(
        "feed",
        help="feed the settled QPU spend (inside a cycle of your own)",
        description="Write one usage record per association for the QPU spend settled "
        "since the last feed. Run it after flux account-fetch-job-records and before flux "
        "account-update-usage, with --horizon the time before the fetch.",
    )
    feed.add_argument(
        "--horizon",
        type=float,
        metavar="EPOCH",
        help="when the cycle's fetch began (default: the latest t_inactive of the job "
        "records, which the fetch reached)",
    )
    feed.add_argument("--dry-run", action="store_true", help="write nothing; say what would be")
    feeds = verbs.add_parser("feeds", help="list what the ledger fed to flux-accounting")
    feeds.add_argument("--json", action="store_true", help="print JSON for machines")
    feeds.add_argument("-n", "--no-header", action="store_true", help="omit the header")
    for verb in (update, feed, feeds):
        verb.add_argument(
            "-p",
            "--path",
            metavar="DB",
            help="flux-accounting's database ([quantum.accounting] db)",
        )
        verb.add_argument("--ledger", metavar="FILE", help="this ledger file (SQLite)")
    update.set_defaults(func=cmd_update)
    feed.set_defaults(func=cmd_feed)
    feeds.set_defaults(func=cmd_feeds)


def site_config(path: str | None) -> AccountingConfig:
    """``[quantum.accounting]`` of the instance, its ``db`` replaced by ``path``."""
    text = flux_output("config", "get", "--quiet", "--default={}", CONFIG_KEY)
    try:
        config = AccountingConfig.from_config(json.loads(text) if text and text != "{}" else None)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if path is not None:
        return replace(config, db=Path(path)) if config else AccountingConfig(Path(path))
    if config is None:
        raise CommandError(
            "the instance's configuration has no [quantum.accounting] table: name "
            'flux-accounting\'s database there (db = "...") or give -p DB'
        )
    return config


def open_ledger(explicit: str | None) -> Ledger:
    """The ledger to write what is fed: the file given, the instance's PostgreSQL
    ledger, or its SQLite file (which must exist: the service creates it)."""
    try:
        if explicit is None:
            database = configured_database()
            if database is not None:
                with Ledger.from_config(database, readonly=True) as reader:
                    currency = reader.currency
                return Ledger.from_config(database, currency=currency)
        path = find_ledger(explicit)
        if not path.exists():
            raise CommandError(
                f"{path}: no ledger here (the handler service creates it when it starts): "
                "nothing to feed"
            )
        with Ledger(path, readonly=True) as reader:
            currency = reader.currency
        return Ledger(path, currency)
    except FluxQuantumError as exc:
        raise CommandError(str(exc)) from None


def when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def say_feed(report: FeedReport) -> list[str]:
    """One line per association fed (or that would be), per feed recovered or dropped,
    per spend left unfed."""
    lines = []
    verb = "would feed" if report.dry_run else "fed"
    for record in report.records:
        jobid = "" if report.dry_run else f", job record {f58(record.jobid)}"
        lines.append(
            f"{verb} {record.user or record.userid} ({record.bank}): "
            f"{format_money(record.spend, record.currency)} of QPU spend in {record.tasks} "
            f"task{'s' if record.tasks != 1 else ''} -> usage {record.usage:g}"
            f"{jobid} ending {when(record.at)}"
        )
    for feed in report.recovered:
        lines.append(f"feed {feed} of an interrupted run: its record was written, now fed")
    for feed in report.dropped:
        lines.append(f"feed {feed} of an interrupted run: no record was written, fed again now")
    for unfed in report.unfed:
        lines.append(
            f"not fed: {format_money(unfed.spend)} of {unfed.user or unfed.userid} in bank "
            f"{unfed.bank}: flux-accounting has no such association"
        )
    if not lines:
        lines.append("no settled QPU spend to feed")
    return lines


def cmd_update(args: argparse.Namespace) -> int:
    config = site_config(args.path)
    ledger = open_ledger(args.ledger) if config.feeds else None
    try:
        feed = UsageFeed(ledger, config.db, config.qpu_weight) if ledger is not None else None
        report = UpdateCycle(config.db, feed).run()
    finally:
        if ledger is not None:
            ledger.close()
    if report.feed is not None:
        for line in say_feed(report.feed):
            print(line)
    for failure in report.failures:
        print(f"flux-quantum: ERROR: {failure}", file=sys.stderr)
    return 0 if report.ok else 1


def cmd_feed(args: argparse.Namespace) -> int:
    config = site_config(args.path)
    if not config.feeds:
        raise CommandError("[quantum.accounting] qpu_weight is 0 (or not set): nothing is fed")
    with open_ledger(args.ledger) as ledger:
        try:
            report = UsageFeed(ledger, config.db, config.qpu_weight).run(
                args.horizon, dry_run=args.dry_run
            )
        except FluxQuantumError as exc:
            raise CommandError(str(exc)) from None
    for line in say_feed(report):
        print(line)
    return 0


def cmd_feeds(args: argparse.Namespace) -> int:
    with open_ledger(args.ledger) as ledger:
        feeds = ledger.feeds()
        currency = ledger.currency
    rows: list[dict[str, Any]] = [
        {
            "feed": feed.id,
            "jobid": f58(usage_jobid(feed.id, feed.opened_at)),
            "user": feed.user or str(feed.userid),
            "bank": feed.bank,
            "tasks": feed.tasks,
            "spend": round(feed.spend, 6),
            "usage": feed.usage,
            "t_inactive": feed.t_inactive,
            "state": feed.state,
        }
        for feed in feeds
    ]
    if args.json:
        json.dump({"currency": currency, "feeds": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    shown = [
        {
            **{k: str(v) for k, v in row.items()},
            "spend": format_money(row["spend"], currency),
            "usage": f"{row['usage']:g}",
            "t_inactive": when(row["t_inactive"]),
        }
        for row in rows
    ]
    fmt = table.auto_format(shown, FEED_FIELDS, ("feed", "tasks", "spend", "usage"))
    for line in table.render(shown, fmt, FEED_FIELDS, header=not args.no_header):
        print(line)
    return 0
