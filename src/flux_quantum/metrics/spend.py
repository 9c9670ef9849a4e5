"""``SpendReader``: the site ledger's spend by bank and device, for the metrics.

It opens the ledger ``[quantum.ledger]`` names a second time, read-only, on the
exporter's own thread (never the service's connection, never the reactor), and sums
this instance's rows by bank and device every time it is asked to ``refresh``: what was
settled (the tasks' actual costs, and reserved windows' costs) and what is reserved and
not settled yet. Scrapes read the last sums. A ledger it cannot read leaves the last
sums in place and says why in ``error``. It never writes to the ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.site.ledger import Ledger, LedgerConfig, UsageQuery


@dataclass(frozen=True)
class Spend:
    """Sums over this instance's ledger rows of one bank on one device."""

    settled: float
    reserved: float
    tasks: int


class SpendReader:
    def __init__(self, opener: Callable[[], Ledger]) -> None:
        self._opener = opener
        self._ledger: Ledger | None = None
        self._lock = threading.Lock()
        self.currency: str | None = None
        self.sums: dict[tuple[str, str], Spend] = {}
        self.error: str | None = None

    @classmethod
    def from_config(
        cls, quantum: Mapping[str, Any] | None, *, currency: str, statedir: str | None
    ) -> SpendReader:
        config = LedgerConfig.from_config((quantum or {}).get("ledger"))
        return cls(
            lambda: Ledger.from_config(config, currency=currency, statedir=statedir, readonly=True)
        )

    def refresh(self) -> None:
        """Read the sums again (the exporter's thread)."""
        with self._lock:
            try:
                if self._ledger is None:
                    self._ledger = self._opener()
                ledger = self._ledger
                rows = ledger.usage(
                    UsageQuery(period="all", group_by=("bank", "device"), cluster=ledger.cluster)
                )
                self.currency = ledger.currency
            except (FluxQuantumError, OSError, ValueError) as exc:
                self.error = str(exc)
                return
            self.error = None
            self.sums = {
                (row.bank, row.device): Spend(row.spent, row.reserved, row.tasks) for row in rows
            }

    def close(self) -> None:
        with self._lock:
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None
