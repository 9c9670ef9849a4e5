"""Who pays for a guest's quantum task: the site's accounts or the user's own.

In a multi-user (system) instance the handler service runs as the instance owner with
the owner's vendor credentials: the *site accounts*. ``[quantum.accounts]`` says which
vendors and devices they pay for::

    [quantum.accounts]
    site = ["local", "braket:sv1", "braket:forte1"]   # VENDOR (all its devices) or VENDOR:DEVICE

A guest's job with ``qpu.account = "site"`` (the default) is then handled by the system
service like the owner's own: selection, graph slots, early release, fail-over, tagged
with the job's user and bank in the ledger. It may only go to devices listed here; a job
that can go nowhere fails at once, saying what an admin would configure. A job with
``qpu.account = "user"`` is paid by its user: the system service leaves it alone and the
user's own handler service (``flux quantum service run``, run by that user, with that
user's credentials) handles it; the credentials never leave that user's processes.

This module only parses and decides; it reads no file and no credential.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError

KEYS = ("site",)


class AccountsConfigError(FluxQuantumError, ValueError):
    """A malformed ``[quantum.accounts]`` table; the message names the key."""


@dataclass(frozen=True)
class SiteAccounts:
    """The vendors (``"braket"``) and devices (``"braket:sv1"``) the site pays for."""

    site: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, table: Mapping[str, Any] | None) -> SiteAccounts:
        if table is None:
            return cls()
        if not isinstance(table, Mapping):
            raise AccountsConfigError(f"[quantum.accounts] must be a table, got {table!r}")
        unknown = sorted(str(k) for k in table if k not in KEYS)
        if unknown:
            raise AccountsConfigError(
                f"[quantum.accounts] {unknown[0]} is not a known key; the keys are "
                f"{', '.join(KEYS)}"
            )
        site = table.get("site", [])
        if not isinstance(site, list) or not all(
            isinstance(s, str) and s and s.count(":") <= 1 and all(s.split(":")) for s in site
        ):
            raise AccountsConfigError(
                f"[quantum.accounts] site must be a list of VENDOR or VENDOR:DEVICE "
                f"strings, got {site!r}"
            )
        return cls(tuple(site))

    def pays_for(self, device: Device) -> bool:
        return device.vendor in self.site or f"{device.vendor}:{device.name}" in self.site

    def not_paid(self, devices: Iterable[Device], user: str) -> dict[str, str]:
        """The devices no site account pays for, each with the sentence a guest sees."""
        listed = ", ".join(self.site) if self.site else "nothing"
        return {
            d.name: (
                f"no site account pays for {d.vendor}:{d.name} ([quantum.accounts] site = "
                f"{listed}): an admin may add it, or {user} may submit with "
                f"qpu.account=user and run their own `flux quantum service run`"
            )
            for d in devices
            if not self.pays_for(d)
        }


def request_account(request: Any) -> str:
    """The ``account`` of a raw ``attributes.system.qpu`` (a table or the short string
    form, which cannot name one); the validator has already refused a bad value."""
    if isinstance(request, Mapping):
        account = request.get("account")
        if isinstance(account, str):
            return account
    return "site"
