"""Creates whose outcome is unknown when their attempt is left: looked up by their token.

A create can reach the vendor while its answer never comes back (a lost answer, a
timeout, the service killed between recording the token and the answer), or still be
out when its attempt is left (its jobs cancelled, its unit failed because another
program of the batch failed, a fail-over, a merged task's other members gone). Such an
attempt has no task id, yet the vendor may run, and bill, a task for its token. So
nothing here takes our own word that no task was made:

- a create still out is waited for; its answer, a task, is the task (no lookup);
- otherwise the vendor is asked for the task by its token (``Vendor.lookup_task``, which
  never creates one);
- a task found is cancelled (``Cancels``: one cancel, never while another active unit's
  programs ride it) and handed to ``Charges``, which watches it until it ends and settles
  what the vendor bills;
- the reservation is released only when the vendor says no task has that token;
- a vendor that cannot say (IQM: its jobs cannot be searched by tag) leaves the
  reservation counted, said once at warning level with the token to look for.

A lookup that fails is retried through the one retry policy and never given up: the
ledger must end with the vendor's bill. A restarted service hands over the ledger's
open reservations whose job left while no service ran and whose eventlog names no task
(``Charges.sweep``): they are looked up the same way. Without a site policy the task is
still looked up and cancelled (a job that left has nobody to read it). All on the
reactor thread; the vendor is called in workers only.
"""

from __future__ import annotations

import syslog
from dataclasses import dataclass, field, replace
from typing import Any

from flux_quantum.errors import FluxQuantumError
from flux_quantum.service.cancels import Cancels
from flux_quantum.service.charges import Billing, Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.retry import Retries
from flux_quantum.service.state import Attempt, Program, Unit
from flux_quantum.vendors.base import TaskRef
from flux_quantum.vendors.errors import VendorError


@dataclass
class Unknown:
    """A create whose outcome the service does not know. ``billing`` is what settles the
    task once found (its ``task`` has the vendor, the device and the token the vendor
    knows the create by, and no id yet); ``attempt``: the left attempt, whose create may
    still be out; ``cancel``: cancel the task once found (nobody will read it)."""

    billing: Billing
    since: float
    cancel: bool = True
    reserved: bool = True
    attempt: Attempt | None = None
    due: float = 0.0
    busy: bool = False
    retry: Retries = field(default_factory=Retries)

    @property
    def token(self) -> str:
        return self.billing.token

    @property
    def key(self) -> str:
        """The token the vendor knows the create by (a merged task's key)."""
        # Both makers of an entry set it (leave, Charges' orphans); unmerged, it is the token.
        key = self.billing.task.token
        return key if key is not None else self.billing.token

    @property
    def out(self) -> bool:
        """Its create is still out (a worker has not answered yet)."""
        return self.attempt is not None and self.attempt.creating


class Lookups:
    def __init__(self, ctx: ServiceContext, charges: Charges, cancels: Cancels) -> None:
        self.ctx = ctx
        self.charges = charges
        self.cancels = cancels
        self.unknown: dict[str, Unknown] = {}

    # -- what comes in

    def leave(self, unit: Unit, program: Program, attempt: Attempt, jobs: list[int]) -> None:
        """The service stops tracking ``attempt``: a create that may have reached the
        vendor without an answer is looked up; anything else goes to ``Charges``."""
        if attempt.task is not None or not attempt.sent or attempt.token is None:
            self.charges.leave(unit, program, attempt, jobs)
            return
        if attempt.token in self.unknown or attempt.device is None:
            return
        key = attempt.merge.key if attempt.merge is not None else attempt.token
        slot = attempt.merge.index if attempt.merge is not None else None
        ref = TaskRef(attempt.device.vendor, attempt.device.name, "", key, program=slot)
        billing = self.charges.billing(unit, program, attempt, jobs, ref)
        since = attempt.since if attempt.since is not None else unit.t_submit
        self.unknown[attempt.token] = Unknown(
            billing, since, reserved=attempt.reserved, attempt=attempt
        )
        self.ctx.log(
            syslog.LOG_INFO,
            f"unit {unit.id}: left with a create whose answer did not come "
            f"(token {key}): looked up before its reservation is released",
        )

    def orphan(self, billing: Billing, since: float, cancel: bool) -> None:
        """A reservation a restarted service found open, its job gone and its eventlog
        naming no task (``Charges.sweep``): looked up the same way."""
        if billing.token not in self.unknown:
            self.unknown[billing.token] = Unknown(billing, since, cancel=cancel)

    def created_late(self, attempts: list[Attempt], task: TaskRef) -> bool:
        """A create answered with ``task`` after its attempts were left: the task is
        theirs (no lookup), cancelled once and settled. False when none of them was
        waiting here (the caller cancels the task)."""
        keys = {self.unknown[a.token].key for a in attempts if a.token in self.unknown}
        if not keys:
            return False
        self._settle([e for key in keys for e in self._take(key)], task)
        return True

    # -- the lookups

    def check(self, now: float) -> None:
        """Look up the unknown creates that are due and no longer out (workers): one
        lookup per vendor token, whose answer serves every entry that waits for it (the
        members of a merged task)."""
        looking = {e.key for e in self.unknown.values() if e.busy}
        for entry in list(self.unknown.values()):
            if entry.busy or entry.due > now or entry.out or entry.key in looking:
                continue
            looking.add(entry.key)
            self._look(entry)

    def _take(self, key: str) -> list[Unknown]:
        """Every entry waiting for the create of vendor token ``key``, taken out."""
        entries = [e for e in self.unknown.values() if e.key == key]
        for entry in entries:
            del self.unknown[entry.token]
        return entries

    def _look(self, entry: Unknown) -> None:
        ctx = self.ctx
        billing = entry.billing
        try:
            vendor = ctx.vendor(billing.task.vendor)
        except (ValueError, FluxQuantumError) as exc:
            self._unknowable(entry, str(exc))
            return
        entry.busy = True
        device, key, since = billing.device, entry.key, entry.since

        def look() -> TaskRef | None:
            return vendor.lookup_task(device, key, since=since)

        def done(task: Any, error: BaseException | None) -> None:
            entry.busy = False
            if self.unknown.get(entry.token) is not entry:
                return  # answered meanwhile by its create (created_late)
            if isinstance(error, VendorError) and not error.retryable:
                self._unknowable(entry, str(error))
                return
            if error is not None:
                decision = ctx.retry.failed_call(entry.retry, error, other_limit=None)
                entry.due = ctx.clock() + decision.delay
                level = syslog.LOG_WARNING if decision.first else syslog.LOG_DEBUG
                ctx.log(level, f"token {key}: lookup failed, will retry: {error}")
                return
            entries = self._take(key)
            if task is None:
                for each in entries:
                    self.charges.release(
                        each.token, f"the vendor has no task with token {key}: none was created"
                    )
                ctx.log(syslog.LOG_INFO, f"token {key}: no task at the vendor; released")
                return
            self._settle(entries, task)

        ctx.workers.submit(look, done)

    def _settle(self, entries: list[Unknown], task: TaskRef) -> None:
        """The task of an unknown create: each entry's reservation watched by ``Charges``
        until it ends and settled (a merged task's members, each its share); the task
        cancelled once (never while another active unit rides it)."""
        ctx = self.ctx
        ctx.counters.creates_looked_up += 1
        cancel = any(entry.cancel for entry in entries)
        jobs = ", ".join(str(entry.billing.unit) for entry in entries)
        ctx.log(
            syslog.LOG_NOTICE,
            f"token {entries[0].key}: the vendor has task {task.task_id} for it (job(s) "
            f"{jobs}, which left): {'cancelled and ' if cancel else ''}settled when it ends",
        )
        for entry in entries:
            if entry.reserved:
                found = replace(task, program=entry.billing.task.program)
                self.charges.watch(replace(entry.billing, task=found))
        if cancel:
            slot = entries[0].billing.task.program
            self.cancels.cancel(replace(task, program=slot), "its jobs are gone")

    def _unknowable(self, entry: Unknown, why: str) -> None:
        """The vendor cannot say whether a task has the token: the reservation stays
        counted (said once)."""
        self.unknown.pop(entry.token, None)
        self.ctx.log(
            syslog.LOG_WARNING,
            f"token {entry.key} on {entry.billing.device.name}: cannot tell whether the "
            f"vendor made a task ({why}); its reservation stays counted until the site "
            "settles or releases it",
        )

    @property
    def pending(self) -> int:
        return len(self.unknown)
