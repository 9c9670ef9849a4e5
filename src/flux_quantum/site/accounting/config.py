"""The ``[quantum.accounting]`` table: a site that runs flux-accounting names its
database, and the weight that turns settled QPU spend into flux-accounting usage.

This module only parses and checks the table; it never opens the database::

    [quantum.accounting]
    db = "/var/lib/flux/FluxAccounting.db"   # flux-accounting's database (read only by the service)
    qpu_weight = 3600.0   # usage per unit of the catalog's currency: $1 counts as one node-hour

The handler service reads the database for banks (the job's bank, a user's default
bank, the bank tree that quota limits name). ``qpu_weight`` (0, the default: QPU spend
is not fed) is in flux-accounting's own usage unit, the usage one node makes in one
second at its default weights (``node_weight`` 1): ``flux quantum accounting update``
turns each association's settled QPU spend into that much usage through
flux-accounting's update cycle.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from flux_quantum.site.access import checked_table, shown

TABLE = "quantum.accounting"
KEYS = ("db", "qpu_weight")


class AccountingConfigError(ValueError):
    """A bad ``[quantum.accounting]`` table; the message names the key."""


@dataclass(frozen=True)
class AccountingConfig:
    """Where flux-accounting's database is, and the QPU spend's weight (0: not fed)."""

    db: Path
    qpu_weight: float = 0.0

    @property
    def feeds(self) -> bool:
        """Whether settled QPU spend becomes flux-accounting usage."""
        return self.qpu_weight > 0

    @classmethod
    def from_config(cls, table: object) -> AccountingConfig | None:
        """Parse ``[quantum.accounting]`` as ``flux config get`` returns it (None: the
        site does not run flux-accounting, or does not tell flux-quantum)."""
        if table is None:
            return None
        table = checked_table(table, f"[{TABLE}]", KEYS, AccountingConfigError)
        db = table.get("db")
        if not isinstance(db, str) or not os.path.isabs(db):
            raise AccountingConfigError(
                f"[{TABLE}] db must be the absolute path of flux-accounting's database"
                f" (FluxAccounting.db), got {shown(db)}"
            )
        weight = table.get("qpu_weight", 0.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise AccountingConfigError(
                f"[{TABLE}] qpu_weight must be a number >= 0 (flux-accounting usage per unit"
                f" of currency), got {shown(weight)}"
            )
        return cls(Path(db), float(weight))
