"""The site's policy as the handler service asks it: who may use which device, what a
task may cost, and what it did cost.

This module owns only the glue between the service and three libraries: the access
rules (:mod:`flux_quantum.access`), the quota deciders (:mod:`flux_quantum.quota`) and
the ledger (:mod:`flux_quantum.ledger`), built from the instance configuration's
``[quantum]`` table. Every method is meant for the service's reactor thread: none calls
a vendor or sleeps; the ledger's writes are short SQLite transactions (see
``flux_quantum.ledger`` for what that assumes). It never decides itself: refusals come
from the deciders, worded by them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.access import AccessRules, DeviceFacts, Requester, bank_of, user_name
from flux_quantum.accounts import SiteAccounts
from flux_quantum.catalog import Device
from flux_quantum.ledger import ChargeRecord, Ledger, Reservation, ledger_path
from flux_quantum.quota import Charge, QuotaConfig, actual_cost

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

    @classmethod
    def from_config(
        cls,
        quantum: Mapping[str, Any] | None,
        *,
        currency: str = "USD",
        statedir: str | None = None,
        environ: Mapping[str, str] | None = None,
        owner: int | None = None,
    ) -> SitePolicy:
        """From the ``[quantum]`` table (``flux config get quantum``), the catalog's
        currency and the broker's ``statedir`` attribute. Raises the access or quota
        ``*ConfigError`` (a ValueError naming the key) or ``LedgerError``."""
        table = quantum or {}
        ledger_table = table.get("ledger") or {}
        path = ledger_path(ledger_table.get("path"), statedir, environ)
        return cls(
            access=AccessRules.from_config(table.get("access")),
            accounts=SiteAccounts.from_config(table.get("accounts")),
            owner=owner,
            quota=QuotaConfig.from_config(table.get("quota")),
            ledger=Ledger(path, currency=currency),
        )

    def close(self) -> None:
        self.ledger.close()

    # -- before selection

    def requester(self, userid: int, jobspec: Mapping[str, Any]) -> Requester:
        return Requester(userid, user_name(userid), job_bank(jobspec))

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
    ) -> Charge:
        """What a task of ``shots`` on ``device`` would be charged (estimate from the
        catalog price; a time-billed simulator at its recent billed run times)."""
        history = self.ledger.billed_history(device.name) if device.price.per_minute else []
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
        )

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
    ) -> ChargeRecord:
        """Record what a finished task cost: a QPU task that FAILED or was CANCELLED
        costs nothing, a simulator its billed run time (``execution_seconds`` of its
        result; its minimum when not reported), anything else its price model."""
        if state in UNBILLED_STATES and device.price.per_minute == 0:
            cost = 0.0
        elif state in UNBILLED_STATES and billed_seconds is None:
            cost = 0.0  # a simulator task that never ran
        else:
            cost = actual_cost(device.price, shots, billed_seconds)
        return self.ledger.settle(
            token, cost, now=now, task_id=task_id, billed_seconds=billed_seconds
        )

    def release(self, token: str, *, now: float, reason: str) -> ChargeRecord | None:
        """No task was created for ``token`` (the vendor refused it, the job left)."""
        return self.ledger.release(token, now=now, reason=reason)

    def job_cost(self, jobid: int) -> float:
        """The job's ``qpu_cost`` memo: settled costs plus open estimates."""
        return self.ledger.job_cost(jobid)
