"""The site's policy as the handler service asks it: who may use which device, what a
task may cost, and what it did cost.

This module owns only the glue between the service and five libraries: the access
rules (:mod:`flux_quantum.site.access`), the quota deciders (:mod:`flux_quantum.site.quota`), the
ledger (:mod:`flux_quantum.site.ledger`), the reserved windows
(:mod:`flux_quantum.site.reservations`) and, where the site runs flux-accounting
(``[quantum.accounting]``), its database read only (:mod:`flux_quantum.site.accounting`:
a job's bank when its jobspec names none yet, the bank tree quota limits name), built
from the instance configuration's ``[quantum]`` table. A reserved window is charged once, to the site or the bank that
booked it (:meth:`SitePolicy.book_windows`); the tasks that run in it cost nothing and
record their QPU time and share of it. Every method is meant for the service's reactor thread: none calls
a vendor or sleeps; the ledger's writes are short transactions, on SQLite or on the
PostgreSQL server ``[quantum.ledger] url`` names (see ``flux_quantum.site.ledger`` for what
that assumes). It never decides itself: refusals come
from the deciders, worded by them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flux_quantum.catalog import Device

# Braket Direct windows; not the ledger's Reservation (a quota hold before a create).
from flux_quantum.site import reservations as braket_direct
from flux_quantum.site.access import AccessRules, DeviceFacts, Requester, bank_of, user_name
from flux_quantum.site.accounting import AccountingConfig, AccountingDatabase
from flux_quantum.site.accounts import SiteAccounts
from flux_quantum.site.cost_shares import price_shares
from flux_quantum.site.ledger import (
    ChargeRecord,
    Ledger,
    LedgerConfig,
    LedgerUnavailable,
    Reservation,
)
from flux_quantum.site.merging import MergeConfig
from flux_quantum.site.quota import Charge, QuotaConfig, QuotaDecision, actual_cost

# Braket bills a QPU task that failed or was cancelled nothing (the SDK's Tracker agrees).
UNBILLED_STATES = ("FAILED", "CANCELLED")


def job_bank(jobspec: Mapping[str, Any]) -> str | None:
    """The bank in a job's *current* jobspec (read it again: flux-accounting fills in
    the default bank after submit)."""
    attributes = jobspec.get("attributes")
    system = attributes.get("system") if isinstance(attributes, Mapping) else None
    return bank_of(system) if isinstance(system, Mapping) else None


@dataclass
class SitePolicy:
    """Access rules, quota and ledger of one instance."""

    access: AccessRules
    quota: QuotaConfig
    ledger: Ledger
    # What the site's accounts pay for, and whose jobs are guests' (everyone's but the
    # instance owner's, when the service knows its owner).
    accounts: SiteAccounts = field(default_factory=SiteAccounts)
    owner: int | None = None
    # The site's Braket Direct windows ([[quantum.reservations]]) and the catalog's
    # devices by name (a window's row names its device's vendor and class).
    reservations: braket_direct.ReservationBook = field(
        default_factory=braket_direct.ReservationBook
    )
    devices: Mapping[str, Device] = field(default_factory=dict)
    # Merged tasks ([quantum.merge]): None without the table (every job its own task).
    merge: MergeConfig | None = None
    # flux-accounting's database ([quantum.accounting] db), read only: the banks' one
    # source where the site runs it (None: banks are the jobspec's alone).
    accounting: AccountingDatabase | None = None

    @classmethod
    def from_config(
        cls,
        quantum: Mapping[str, Any] | None,
        *,
        currency: str = "USD",
        statedir: str | None = None,
        environ: Mapping[str, str] | None = None,
        owner: int | None = None,
        devices: Mapping[str, Device] | None = None,
    ) -> SitePolicy:
        """From the ``[quantum]`` table (``flux config get quantum``), the catalog's
        currency and devices by name (each reservation's device is checked against
        them; None: not checked) and the broker's ``statedir`` attribute. Raises the
        access, quota or reservation ``*ConfigError`` (a ValueError naming the key) or
        ``LedgerError``; the tables are all checked before the ledger is opened."""
        table = quantum or {}
        ledger_config = LedgerConfig.from_config(table.get("ledger"))
        access = AccessRules.from_config(table.get("access"))
        accounts = SiteAccounts.from_config(table.get("accounts"))
        quota = QuotaConfig.from_config(table.get("quota"))
        accounting_config = AccountingConfig.from_config(table.get("accounting"))
        book = braket_direct.ReservationBook.from_config(table.get("reservations"), devices)
        merge_table = table.get("merge")
        merge = None if merge_table is None else MergeConfig.from_config(merge_table, devices)
        accounting = None
        if accounting_config is not None:
            # Raises AccountingError naming the file; the quota's banks must be its banks.
            accounting = AccountingDatabase(accounting_config.db)
            try:
                quota = quota.with_banks(
                    accounting.banks().coverage(),
                    f"flux-accounting's database {accounting_config.db}",
                )
            except ValueError:
                accounting.close()
                raise
        try:
            ledger = Ledger.from_config(
                ledger_config, currency=currency, statedir=statedir, environ=environ
            )
        except BaseException:
            if accounting is not None:
                accounting.close()
            raise
        return cls(
            access=access,
            accounts=accounts,
            owner=owner,
            quota=quota,
            ledger=ledger,
            reservations=book,
            devices=dict(devices or {}),
            merge=merge,
            accounting=accounting,
        )

    def close(self) -> None:
        self.ledger.close()
        if self.accounting is not None:
            self.accounting.close()

    # -- before selection

    def requester(self, userid: int, jobspec: Mapping[str, Any]) -> Requester:
        """Who asks: the job's user, and its bank: the current jobspec's, else (where
        flux-accounting runs) the user's default bank in its database, which is what
        its plugin writes into the jobspec (at job.new, or later for a job submitted
        before the plugin knew the user): a job still held is charged to it too."""
        bank = job_bank(jobspec)
        if bank is None and self.accounting is not None:
            bank = self.accounting.default_bank(userid)
        return Requester(userid, user_name(userid), bank)

    def not_allowed(self, requester: Requester, devices: Iterable[Device]) -> dict[str, str]:
        """Devices the job may not use (or may not yet be known to be allowed), with the
        reason: leave them out of probing, and pass them to ``select_device(excluded=)``."""
        pool = list(devices)
        facts = [DeviceFacts(d.name, d.vendor, d.device_class) for d in pool]
        refused = self.access.excluded(requester, facts)
        if self.owner is not None and requester.userid != self.owner:
            # A guest's job on the site's accounts: only what they pay for.
            unpaid = self.accounts.not_paid(pool, requester.user or str(requester.userid))
            refused.update({k: v for k, v in unpaid.items() if k not in refused})
        return refused

    def charge(
        self,
        device: Device,
        requester: Requester,
        *,
        token: str,
        jobid: int,
        shots: int,
        t: float,
        job_cap: float | None = None,
        reservation: braket_direct.Reservation | None = None,
    ) -> Charge:
        """What a task of ``shots`` on ``device`` would be charged (estimate from the
        catalog price; a time-billed simulator at its recent billed run times); in a
        reserved window nothing (the window is paid): estimate 0."""
        if reservation is not None:
            history: list[float] = []
        else:
            history = self._history(device) if device.price.per_minute else []
        return Charge.for_device(
            device,
            token=token,
            jobid=jobid,
            userid=requester.userid,
            user=requester.user,
            bank=requester.bank,
            shots=shots,
            t=t,
            job_cap=job_cap,
            history=history,
            reservation=None if reservation is None else reservation.name,
        )

    def _history(self, device: Device) -> list[float]:
        """The device's billed run times; none while the ledger cannot be reached (the
        estimate is then the device's minimum; the reservation waits for the ledger)."""
        try:
            return self.ledger.billed_history(device.name)
        except LedgerUnavailable:
            return []

    def excluded(
        self,
        requester: Requester,
        devices: Iterable[Device],
        *,
        token: str,
        jobid: int,
        shots: int,
        t: float,
        job_cap: float | None = None,
    ) -> dict[str, str]:
        """Every device the job may not use now, with the reason: access refusals first,
        then the allowed devices whose task would not fit the quota. The ``excluded``
        argument of ``policy.select_device``, so ``any`` and policy selection consider
        only allowed devices that fit, and say which were dropped and why."""
        pool = list(devices)
        refused = self.not_allowed(requester, pool)
        for device in pool:
            if device.name in refused:
                continue
            charge = self.charge(
                device, requester, token=token, jobid=jobid, shots=shots, t=t, job_cap=job_cap
            )
            decision = self.ledger.check(charge, self.quota)
            if not decision.allowed:
                refused[device.name] = decision.reason
        return refused

    def check_batch(
        self,
        requester: Requester,
        devices: Iterable[Device],
        *,
        tasks: int,
        token: str,
        jobid: int,
        shots: int,
        t: float,
    ) -> QuotaDecision | None:
        """Would a batch of ``tasks`` tasks fit the quotas, each at the estimate of the
        priciest device the job may use (the bound ``qpu.max_cost`` is checked against
        by ``flux quantum cut submit``)? Checked before the batch's first task, so that
        a batch that cannot fit spends nothing; None when no allowed device is left
        (selection says why). Each task's own reservation still checks the limits."""
        pool = list(devices)
        refused = self.not_allowed(requester, pool)
        charges = [
            self.charge(d, requester, token=token, jobid=jobid, shots=shots, t=t)
            for d in pool
            if d.name not in refused
        ]
        if not charges:
            return None
        priciest = max(charges, key=lambda c: c.estimate)
        batch = replace(priciest, estimate=priciest.estimate * tasks)
        return self.ledger.check(batch, self.quota, tasks=tasks)

    # -- around the vendor task

    def reserve(self, charge: Charge, *, recovering: bool = False) -> Reservation:
        """Reserve before the vendor task is created (after the token is chosen). A
        refusal is final for that device; ``recovering=True`` records a task that
        already exists (its reservation was lost) whatever the limits say."""
        return self.ledger.reserve(charge, self.quota, enforce=not recovering)

    def settle(
        self,
        token: str,
        device: Device,
        *,
        shots: int,
        state: str,
        now: float,
        billed_seconds: float | None = None,
        task_id: str | None = None,
        reservation: braket_direct.Reservation | None = None,
        qpu_seconds: float | None = None,
        merged: tuple[int, Sequence[int]] | None = None,
    ) -> ChargeRecord:
        """Record what a finished task cost: a QPU task that FAILED or was CANCELLED
        costs nothing, a simulator its billed run time (``execution_seconds`` of its
        result; its minimum when not reported), anything else its price model. A task
        in a reserved window costs nothing (no per-task or per-shot charge: the window
        is paid); its row records the window, its ``qpu_seconds`` in it and its share of
        the window's cost. ``merged`` (the job's place in a merged task and every
        member's shots): the job pays its share of the task's bill (``price_shares``:
        the per-task fee divided equally, its own shots), the members' shares adding up
        to the bill."""
        if reservation is not None:
            seconds = None if qpu_seconds is None else max(0.0, qpu_seconds)
            return self.ledger.settle(
                token,
                0.0,
                now=now,
                task_id=task_id,
                billed_seconds=billed_seconds,
                reservation=reservation.name,
                qpu_seconds=seconds,
                share=reservation.share(seconds or 0.0),
            )
        if state in UNBILLED_STATES and device.price.per_minute == 0:
            cost = 0.0
        elif state in UNBILLED_STATES and billed_seconds is None:
            cost = 0.0  # a simulator task that never ran
        elif merged is not None:
            place, every = merged
            cost = price_shares(device.price, every, billed_seconds)[place]
        else:
            cost = actual_cost(device.price, shots, billed_seconds)
        return self.ledger.settle(
            token, cost, now=now, task_id=task_id, billed_seconds=billed_seconds
        )

    def book_windows(self, now: float) -> list[ChargeRecord]:
        """One settled ledger row per configured window, charged to the site (user
        "(site)") or to the bank that booked it, at the window's start, costing the
        window: the service calls it when it starts (``now``); windows already booked
        (by their ARN) are left as they are, whenever they are (windows past, open or
        still to come are all paid)."""
        del now  # every window is booked whatever the time: its row is dated by its start
        rows = []
        for window in self.reservations:
            device = self.devices.get(window.device)
            rows.append(
                self.ledger.book_window(
                    name=window.name,
                    arn=window.arn,
                    bank=window.bank,
                    device=window.device,
                    vendor=device.vendor if device else braket_direct.vendor_of(window.arn) or "",
                    device_class=device.device_class if device else "qpu",
                    cost=window.cost,
                    start=window.start,
                    note=f"{window.label} {braket_direct.iso(window.start)}.."
                    f"{braket_direct.iso(window.end)}",
                    zone=self.quota.zone,
                )
            )
        return rows

    def window_use(self, window: braket_direct.Reservation) -> tuple[int, float, float]:
        """The window's tasks, QPU seconds and shares of its cost so far (the ledger's)."""
        return self.ledger.window_use(window.name)

    def release(self, token: str, *, now: float, reason: str) -> ChargeRecord | None:
        """No task was created for ``token`` (the vendor refused it, the job left)."""
        return self.ledger.release(token, now=now, reason=reason)

    def job_cost(self, jobid: int) -> float:
        """The job's ``qpu_cost`` memo: settled costs plus open estimates."""
        return self.ledger.job_cost(jobid)
