"""One task's charge: the facts a charge to decide and a ledger row share (``TaskCharge``).

This module owns the one definition of what a task is charged as: its idempotency
token, its job, whose it is (user, bank), the device it runs on (with its vendor and
class), its shots, what it was estimated to cost and the reserved window it runs in.
:class:`flux_quantum.site.quota.Charge` (a task to be charged: when, under which job
cap) and :class:`flux_quantum.site.ledger.ChargeRecord` (a row of the ledger: what it
really cost, its state) extend it. It holds data only: it never decides, reads or
writes anything.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass


@dataclass(frozen=True)
class TaskCharge:
    """What one task is charged as. ``token`` is the task's idempotency token (the
    ledger's key); ``jobid`` the job (unit) it belongs to; ``reservation`` the name of
    the reserved window it runs in (None: the public queue; such a task is estimated
    at nothing, the window is paid), given by keyword."""

    token: str
    jobid: int
    userid: int
    user: str | None
    bank: str | None
    device: str
    vendor: str
    device_class: str
    shots: int
    estimate: float
    _: KW_ONLY
    reservation: str | None = None
