"""flux-accounting's periodic update, as a site runs it from cron, with the QPU spend
fed in its one safe place.

The cycle: ``flux account-fetch-job-records`` (new finished jobs into the ``jobs``
table), the feed (:class:`~flux_quantum.site.accounting.usage_feed.UsageFeed`: settled
QPU spend as usage records ending at the latest job the fetch reached, or at the time
this cycle's fetch began while the table holds no job),
``flux account-update-usage`` (usage from the new rows, decayed),
``flux account-update-fshare`` (fair-share from usage) and
``flux account-priority-update`` (the values sent to ``mf_priority.so``, which
reprioritizes jobs). This class owns only that order and what a failed step means:
without a fetch there is no feed (a record at a horizon the fetch did not reach would
hide the jobs it missed); a feed that failed leaves its spend for the next cycle and the
rest runs; the cycle's error names each failed step. It never touches the databases
itself.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flux_quantum.errors import FluxQuantumError
from flux_quantum.site.accounting.usage_feed import FeedReport, UsageFeed

FETCH = "account-fetch-job-records"
AFTER_FEED = ("account-update-usage", "account-update-fshare", "account-priority-update")

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@dataclass
class CycleReport:
    """The steps run (command names), the feed's report, and each failure's sentence."""

    steps: list[str] = field(default_factory=list)
    feed: FeedReport | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


class UpdateCycle:
    """One turn of the cycle on flux-accounting's database at ``database``; ``feed``
    None: the QPU spend is not fed (``qpu_weight`` 0)."""

    def __init__(
        self,
        database: Path,
        feed: UsageFeed | None,
        *,
        run: Runner = run_command,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = Path(database)
        self.feed = feed
        self.run_command = run
        self.clock = clock

    def _step(self, name: str, report: CycleReport) -> bool:
        report.steps.append(name)
        done = self.run_command(["flux", name, "-p", str(self.database)])
        if done.returncode == 0:
            return True
        said = (done.stderr or done.stdout or "").strip().splitlines()
        report.failures.append(
            f"flux {name} exited {done.returncode}" + (f": {said[-1]}" if said else "")
        )
        return False

    def run(self) -> CycleReport:
        report = CycleReport()
        # Not the clock before the fetch as the horizon: a job that ended just before it
        # may not be listed inactive by job-list yet, and a record after it would hide
        # it from every later fetch. The clock only while the table holds no job.
        started = self.clock()
        fetched = self._step(FETCH, report)
        if self.feed is not None and fetched:
            report.steps.append("feed")
            try:
                report.feed = self.feed.run(None, empty=started)
            except FluxQuantumError as exc:
                report.failures.append(f"the QPU spend was not fed (next cycle): {exc}")
        elif self.feed is not None:
            report.failures.append("the QPU spend was not fed: the fetch failed (next cycle)")
        for name in AFTER_FEED:
            self._step(name, report)
        return report
