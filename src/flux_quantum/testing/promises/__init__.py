"""The promise checker: does a run keep the promises flux-quantum makes?

The promises (``PROMISES``): a request creates exactly one billed vendor task
(``one_task``); no held job is lost or left held (``no_lost_job``); every vendor session
is closed (``sessions_closed``); the site's ledger is what the vendor bills
(``ledger_matches``); no credential appears in any log, event or memo (``no_secret``);
a job that fails says why (``honest_failure``). ``gather`` (``readers``) reads what a
run left behind into ``Facts`` (``facts``), plain data; ``check`` (``checks``, pure)
turns ``Facts`` into ``Findings`` (``findings``): the violations of each promise and
the outcome of every job. docs/reliability.md is its reference. This face only hands
those names on.
"""

from flux_quantum.testing.promises.checks import TOLERANCE, check
from flux_quantum.testing.promises.facts import (
    COMPLETED,
    MIN_SECRET,
    STATES,
    TERMINAL,
    Bill,
    BilledSession,
    BilledTask,
    Facts,
    JobFacts,
    LedgerRow,
    state_of,
)
from flux_quantum.testing.promises.findings import (
    OUTCOMES,
    PROMISES,
    Findings,
    JobOutcome,
    Violation,
)
from flux_quantum.testing.promises.readers import gather, read_jobs, read_ledger

__all__ = [
    "COMPLETED",
    "MIN_SECRET",
    "OUTCOMES",
    "PROMISES",
    "STATES",
    "TERMINAL",
    "TOLERANCE",
    "Bill",
    "BilledSession",
    "BilledTask",
    "Facts",
    "Findings",
    "JobFacts",
    "JobOutcome",
    "LedgerRow",
    "Violation",
    "check",
    "gather",
    "read_jobs",
    "read_ledger",
    "state_of",
]
