"""flux-accounting beside flux-quantum, at a site that runs both: one source of banks,
and QPU spend in fair-share.

- ``config``: the ``[quantum.accounting]`` table (the database, ``qpu_weight``);
- ``bank_tree``: flux-accounting's banks and their parents;
- ``database``: its database read only (banks, associations, default banks, weights,
  job usage), for the handler service and ``flux quantum usage --accounting``;
- ``usage_record``: one ``jobs`` row carrying an association's QPU spend as usage;
- ``usage_feed``: the feed that writes those rows, once, from the ledger's settled spend;
- ``update_cycle``: the site's update cycle with the feed in its place
  (``flux quantum accounting update``).

Nothing here changes flux-accounting's banks, users or limits, and the service never
writes its database.
"""

from flux_quantum.site.accounting.bank_tree import BankTree
from flux_quantum.site.accounting.config import AccountingConfig, AccountingConfigError
from flux_quantum.site.accounting.database import (
    AccountingDatabase,
    AccountingError,
    Association,
    UsageWeights,
)
from flux_quantum.site.accounting.update_cycle import CycleReport, UpdateCycle
from flux_quantum.site.accounting.usage_feed import FeedReport, Unfed, UsageFeed
from flux_quantum.site.accounting.usage_record import UsageRecord, usage_jobid

__all__ = [
    "AccountingConfig",
    "AccountingConfigError",
    "AccountingDatabase",
    "AccountingError",
    "Association",
    "BankTree",
    "CycleReport",
    "FeedReport",
    "Unfed",
    "UpdateCycle",
    "UsageFeed",
    "UsageRecord",
    "UsageWeights",
    "usage_jobid",
]
