"""What the promise checker finds: the violations of each promise and every job's outcome.

This module owns the promises' names (``PROMISES``), the outcomes a job can have
(``OUTCOMES``) and the records :func:`flux_quantum.testing.promises.check` returns
(``Violation``, ``JobOutcome``, ``Findings``) with their JSON form. It holds data only:
it never reads a run, and what it carries has already had every secret redacted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROMISES = (
    "one_task",
    "no_lost_job",
    "sessions_closed",
    "ledger_matches",
    "no_secret",
    "honest_failure",
)
OUTCOMES = ("completed", "failed", "cancelled", "held", "pending", "running")


@dataclass(frozen=True)
class Violation:
    """One broken promise: which, about what (a job, a task, a session, a place), and
    what was found."""

    promise: str
    subject: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"promise": self.promise, "subject": self.subject, "detail": self.detail}


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, or where it stands: one of ``OUTCOMES``, and why (a failed or
    cancelled job's reason; a held job's state in words)."""

    jobid: int
    userid: int
    outcome: str
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobid": self.jobid,
            "userid": self.userid,
            "outcome": self.outcome,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Findings:
    """What ``check`` found: the violations, every job's outcome, what the vendor billed
    and what the ledger settled (None when no ledger was checked). ``not_checked``:
    promises that were not checked, and why; ``scope``: the jobs examined (None: every
    job of the instance)."""

    violations: tuple[Violation, ...]
    outcomes: tuple[JobOutcome, ...]
    billed_total: float
    ledger_total: float | None
    currency: str = "USD"
    not_checked: Mapping[str, str] = field(default_factory=dict)
    scope: tuple[int, ...] | None = None

    def counts(self) -> dict[str, int]:
        """Every promise -> its number of violations (0 included)."""
        out = dict.fromkeys(PROMISES, 0)
        for violation in self.violations:
            out[violation.promise] = out.get(violation.promise, 0) + 1
        return out

    def ok(self) -> bool:
        return not self.violations

    def outcome_counts(self) -> dict[str, int]:
        """Every outcome -> its number of jobs (0 included)."""
        out = dict.fromkeys(OUTCOMES, 0)
        for outcome in self.outcomes:
            out[outcome.outcome] = out.get(outcome.outcome, 0) + 1
        return out

    def reasons(self) -> dict[str, dict[str, int]]:
        """Failed and cancelled jobs by reason (a reason's job-specific numbers kept)."""
        out: dict[str, dict[str, int]] = {"failed": {}, "cancelled": {}}
        for outcome in self.outcomes:
            if outcome.outcome in out:
                reason = outcome.reason or "(no reason)"
                out[outcome.outcome][reason] = out[outcome.outcome].get(reason, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; holds no secret (``check`` redacted every text it carries)."""
        return {
            "ok": self.ok(),
            "counts": self.counts(),
            "checked": {p: p not in self.not_checked for p in PROMISES},
            "not_checked": dict(self.not_checked),
            "violations": [v.to_dict() for v in self.violations],
            "billed_total": round(self.billed_total, 6),
            "ledger_total": None if self.ledger_total is None else round(self.ledger_total, 6),
            "currency": self.currency,
            "outcomes": self.outcome_counts(),
            "reasons": self.reasons(),
            "jobs": [o.to_dict() for o in self.outcomes],
            "scope": "all" if self.scope is None else list(self.scope),
        }
