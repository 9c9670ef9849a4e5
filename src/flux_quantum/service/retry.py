"""One way to retry: how long to wait after a failed call, when to give up, what to say.

Every loop of the service that calls a vendor, Flux or the ledger keeps a ``Retries``
record for the thing it retries (an attempt's calls, a cancel, a session's close, a
settlement's poll, a device's probe) and asks its ``RetryPolicy`` what a failure
means: the delay before the next try (exponential back-off, capped), whether to give
up, and whether this failure is the first of a run (the one to tell, in an event or at
warning level; the next ones go to the debug log). A retryable error (the vendor
throttling, an outage) and any other error count against separate limits: the first
usually passes by itself, the second (a refused call, a bug, a broken setup) does not,
and a loop must never hammer it. The policy decides only: it never sleeps, never
calls anything and never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from flux_quantum.vendors.errors import VendorError


@dataclass
class Retries:
    """Failures in a row of one thing that calls out, and what is said of them."""

    errors: int = 0  # failed calls in a row, of any kind
    retryable: int = 0  # of those, retryable ones
    other: int = 0  # of those, the others
    said: bool = False  # the first of this run was told
    holding: str | None = None  # why it waits now, and the next try (shown to users)

    def clear(self) -> None:
        """A call succeeded: the next failure starts a new run."""
        self.errors = self.retryable = self.other = 0
        self.said = False
        self.holding = None


@dataclass(frozen=True)
class Decision:
    """What a failure means: wait ``delay`` seconds, or ``give_up``; ``first`` is the
    first failure of a run (tell it once)."""

    delay: float
    give_up: bool
    first: bool


_DEFAULT = -1


@dataclass(frozen=True)
class RetryPolicy:
    """Back-off from ``base`` seconds doubling up to ``cap``; at most ``error_limit``
    non-retryable failures in a row, retryable ones without limit, unless the loop says
    otherwise (a cancel or a session's close gives up after a few tries; a settlement
    never does)."""

    base: float
    cap: float
    error_limit: int | None = 5

    def delay(self, errors: int) -> float:
        """The wait after the ``errors``-th failure in a row."""
        return min(self.cap, self.base * 2 ** max(0, errors - 1))

    def failed(
        self,
        record: Retries,
        *,
        retryable: bool,
        retryable_limit: int | None = None,
        other_limit: int | None = _DEFAULT,
    ) -> Decision:
        """Count a failure on ``record`` and decide."""
        record.errors += 1
        if retryable:
            record.retryable += 1
            limit, count = retryable_limit, record.retryable
        else:
            record.other += 1
            limit = self.error_limit if other_limit == _DEFAULT else other_limit
            count = record.other
        first = not record.said
        record.said = True
        return Decision(
            delay=self.delay(record.errors),
            give_up=limit is not None and count >= limit,
            first=first,
        )

    def failed_call(
        self,
        record: Retries,
        error: BaseException,
        *,
        retryable_limit: int | None = None,
        other_limit: int | None = _DEFAULT,
    ) -> Decision:
        """``failed`` for a call that raised ``error``: retryable when the vendor layer
        says so (throttling, an outage)."""
        return self.failed(
            record,
            retryable=isinstance(error, VendorError) and error.retryable,
            retryable_limit=retryable_limit,
            other_limit=other_limit,
        )

    def waiting(self, record: Retries) -> Decision:
        """Nothing failed, but the thing cannot go on yet (no device answers, every slot
        is busy): wait with the same back-off, never give up."""
        record.errors += 1
        return Decision(delay=self.delay(record.errors), give_up=False, first=record.errors == 1)
