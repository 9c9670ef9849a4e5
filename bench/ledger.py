#!/usr/bin/env python3
"""The ledger's reservations: how many a second on SQLite and on PostgreSQL, and what
several services racing for one user's budget overspend (target: $0.00).

Each "service" is a process with its own ``Ledger`` (its own connection) and its own
cluster name, reserving tasks of $0.05 for one user (uid 1000) under a daily spend limit,
as fast as it can, with distinct tokens: exactly what the handler service does before
every create (``Ledger.reserve``: the quota check and the insert in one transaction).
The arms:

throughput
    one service, a limit it never reaches: reservations a second on each backend;
race
    1, 2 and 4 services start together (a barrier) against one budget that half of
    their attempts exhaust: throughput (attempts a second, all services together),
    reservations accepted, refused, and the overspend (what the ledger counts for the
    user minus the limit, never below 0). The accepted count must be the limit / $0.05
    exactly.
control
    the race of 4 services on PostgreSQL with the advisory locks left out (the
    services' ``Ledger._subjects`` returns none): what the locks prevent, shown, never a
    target.

SQLite: one file in a temporary directory (WAL, ``synchronous=NORMAL``, as the service
opens it); the services are processes on that file (BEGIN IMMEDIATE serializes them).
PostgreSQL: a throwaway server that ``flux_quantum.testing.pgserver`` starts (initdb in a
temporary directory, as ``nobody`` when run as root; fsync off, as a test server), or the
one ``--url`` names (``--credentials FILE``: its password); the services are processes
that connect over TCP to 127.0.0.1 (advisory locks on the user, see
``flux_quantum.site.ledger``). No network but 127.0.0.1, no Flux.

    python bench/ledger.py --quick   # 300 attempts per service (< 1 min)
    python bench/ledger.py           # 3000 attempts per service -> bench/results/ledger.*
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import platform
import queue
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import revision  # noqa: E402

from flux_quantum.site.ledger import Ledger, LedgerUnavailable, UsageQuery  # noqa: E402
from flux_quantum.site.quota import Charge, QuotaConfig  # noqa: E402

DEFAULT_OUT = HERE / "results"
PRICE = 0.05  # a task's estimate, in dollars
T0 = datetime(2025, 6, 3, 12, tzinfo=UTC).timestamp()


@dataclass
class Row:
    arm: str
    backend: str
    services: int
    attempts: int
    accepted: int
    refused: int
    seconds: float
    per_second: float
    limit: float
    counted: float
    overspend: float
    busy: int  # reservations tried again: the ledger was busy (LedgerUnavailable)


def quota(limit: float) -> QuotaConfig:
    return QuotaConfig.from_config(
        {"limits": [{"name": "daily", "user": "*", "period": "day", "spend": limit}]}
    )


def service(
    target: str,
    credentials: str | None,
    cluster: str,
    attempts: int,
    limit: float,
    barrier: Any,
    out: Any,
    locks: bool = True,
) -> None:
    """One service: its own Ledger and cluster, ``attempts`` reservations."""
    if not locks:
        Ledger._subjects = staticmethod(lambda charge, limits: [])  # type: ignore[method-assign]
    ledger = Ledger(target, cluster=cluster, credentials=credentials)
    limits = quota(limit)
    ledger.open_reservations()  # connected and migrated before the start
    barrier.wait()
    started = time.perf_counter()
    accepted = busy = 0
    for i in range(attempts):
        charge = Charge(
            token=f"fq-{cluster}-{i}", jobid=i, userid=1000, user="alice", bank=None,
            device="garnet", vendor="braket", device_class="qpu", shots=100,
            estimate=PRICE, t=T0 + i * 1e-3,
        )  # fmt: skip
        while True:
            try:
                accepted += ledger.reserve(charge, limits).allowed
                break
            except LedgerUnavailable:
                busy += 1  # SQLite: another process kept the file past the busy timeout
    out.put((cluster, accepted, time.perf_counter() - started, busy))
    ledger.close()


def counted(target: str, credentials: str | None) -> float:
    with Ledger(target, credentials=credentials) as ledger:
        return sum(r.total for r in ledger.usage(UsageQuery(period="all", group_by=("user",))))


def run(
    arm: str,
    backend: str,
    target: str,
    credentials: str | None,
    services: int,
    attempts: int,
    limit: float,
    locks: bool = True,
) -> Row:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(services + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=service,
            args=(target, credentials, f"c{n}", attempts, limit, barrier, out, locks),
        )
        for n in range(services)
    ]
    for proc in procs:
        proc.start()
    barrier.wait()
    started = time.perf_counter()
    results = []
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a service exited with {dead[0]}") from None
    seconds = time.perf_counter() - started
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a service exited with {proc.exitcode}")
    accepted = sum(r[1] for r in results)
    total = services * attempts
    spent = counted(target, credentials)
    return Row(
        arm=arm,
        backend=backend,
        services=services,
        attempts=total,
        accepted=accepted,
        refused=total - accepted,
        seconds=round(seconds, 3),
        per_second=round(total / seconds, 1),
        limit=limit,
        counted=round(spent, 6),
        overspend=round(max(0.0, spent - limit), 6),
        busy=sum(r[3] for r in results),
    )


class Backends:
    """A new empty ledger per run on each backend."""

    def __init__(self, workdir: Path, url: str | None, credentials: str | None) -> None:
        self.workdir = workdir
        self.url, self.credentials = url, credentials
        self.server: Any = None
        self.n = 0
        if url is None:
            from flux_quantum.testing import pgserver

            why = pgserver.missing()
            if why is not None:
                raise SystemExit(f"bench/ledger.py: {why}")
            self.server = pgserver.PgServer().start()
            self.credentials = str(pgserver.credentials_file(workdir))

    def new(self, backend: str) -> str:
        self.n += 1
        if backend == "sqlite":
            return str(self.workdir / f"ledger{self.n}.db")
        if self.server is not None:
            return self.server.url(self.server.database())
        assert self.url is not None
        with Ledger(self.url, credentials=self.credentials) as ledger:
            ledger._store.execute("DELETE FROM charges")  # a database for the bench alone
        return self.url

    def close(self) -> None:
        if self.server is not None:
            self.server.remove()


def report(rows: list[Row], argv: list[str], wall: float, commit: str) -> str:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 0
    head = (
        f"{'arm':<11}{'backend':<11}{'services':>8}{'attempts':>10}{'accepted':>10}"
        f"{'refused':>9}{'seconds':>9}{'per s':>9}{'limit $':>9}{'counted $':>11}"
        f"{'overspend $':>13}{'busy':>6}"
    )
    lines = [
        f"flux-quantum ledger benchmark: commit {commit}",
        f"reservations of ${PRICE:.2f} for one user under a daily spend limit; each service "
        "a process with its own Ledger and cluster",
        "",
        head,
    ]
    for r in rows:
        lines.append(
            f"{r.arm:<11}{r.backend:<11}{r.services:>8}{r.attempts:>10}{r.accepted:>10}"
            f"{r.refused:>9}{r.seconds:>9.2f}{r.per_second:>9.0f}{r.limit:>9.2f}"
            f"{r.counted:>11.2f}{r.overspend:>13.2f}{r.busy:>6}"
        )
    worst = max((r.overspend for r in rows if r.arm != "control"), default=0.0)
    exact = all(r.accepted == round(r.limit / PRICE) for r in rows if r.arm == "race")
    lines += [
        "",
        f"target (issue 24): overspend $0.00 with 2 and 4 services racing: "
        f"${worst:.2f} -> {'met' if worst == 0 and exact else 'MISSED'}"
        f" (accepted = limit / ${PRICE:.2f} in every race: {'yes' if exact else 'NO'})",
        "control (not a target): the same race of 4 services on PostgreSQL without the "
        "advisory locks overspends whenever two check-then-insert transactions interleave",
        "busy: reservations a service tried again after LedgerUnavailable (SQLite: another "
        "process kept the file past the 5 s busy timeout; one service per file is the "
        "SQLite deployment)",
        "",
        f"machine: nproc {cpus}, Python {platform.python_version()}, {platform.platform()}",
        f"date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S UTC')}",
        f"command: python {shlex.join(argv)}",
        f"wall time: {wall:.1f}s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 attempts per service")
    parser.add_argument(
        "--attempts", type=int, default=3000, help="attempts per service (default 3000)"
    )
    parser.add_argument("--url", help="a PostgreSQL database to use (else a throwaway server)")
    parser.add_argument("--credentials", help="the file holding --url's password")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    attempts = 300 if args.quick else args.attempts
    if attempts < 2:
        parser.error("--attempts must be >= 2")
    commit = revision(HERE.parent)
    # Killed (timeout, Ctrl-C): still stop the throwaway server and remove its files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fq-bench-ledger-") as tmp:
        backends = Backends(Path(tmp), args.url, args.credentials)
        try:
            for backend in ("sqlite", "postgresql"):
                never = PRICE * attempts * 10  # never reached
                rows.append(
                    run("throughput", backend, backends.new(backend), backends.credentials,
                        1, attempts, never)
                )  # fmt: skip
                for services in (1, 2, 4):
                    limit = round(PRICE * (services * attempts // 2), 2)
                    rows.append(
                        run("race", backend, backends.new(backend), backends.credentials,
                            services, attempts, limit)
                    )  # fmt: skip
                    print(rows[-1], flush=True)
            limit = round(PRICE * (4 * attempts // 2), 2)
            rows.append(
                run("control", "postgresql", backends.new("postgresql"), backends.credentials,
                    4, attempts, limit, locks=False)
            )  # fmt: skip
        finally:
            backends.close()
    wall = time.monotonic() - started
    text = report(
        rows, ["bench/ledger.py", *(sys.argv[1:] if argv is None else argv)], wall, commit
    )
    print(text)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = "ledger_quick" if args.quick else "ledger"  # a smoke test never overwrites
    with (args.out_dir / f"{stem}.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))
    (args.out_dir / f"{stem}.txt").write_text(text + "\n")
    print(f"rows: {args.out_dir / (stem + '.csv')}, table: {args.out_dir / (stem + '.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
