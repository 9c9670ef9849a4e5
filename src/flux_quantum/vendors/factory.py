"""The vendor objects a catalog needs: ``make_vendor``.

This module owns building a vendor from the registry of vendors
(``flux_quantum.protocol.vendors``) and the catalog: the descriptor named, its class
loaded (and with it the vendor's SDK), configured from the catalog's ``vendors.NAME``
section through the class's ``from_catalog``. It names no vendor, never talks to one and
keeps no state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from flux_quantum.catalog import Catalog
from flux_quantum.protocol.vendors import registry
from flux_quantum.vendors.base import CatalogVendor, Clock, RetryBudget, Sleep, Vendor


def make_vendor(
    name: str,
    catalog: Catalog,
    *,
    timeout: float | None = None,
    retry: RetryBudget | None = None,
    clock: Clock = time.time,
    sleep: Sleep = time.sleep,
    environ: Mapping[str, str] | None = None,
    emulator: Any = None,
) -> Vendor:
    """The vendor object for ``name`` configured from the catalog's ``vendors:`` section.

    ``timeout`` bounds each network call (connect and read); ``emulator`` (an
    ``Emulator``) overrides where a vendor that serves one connects (``local``).
    """
    vendors = registry()
    descriptor = vendors.get(name)
    if descriptor is None:
        problem = vendors.problem(name)
        raise ValueError(f"unknown vendor {name!r}" + (f" ({problem})" if problem else ""))
    vendor_class = descriptor.load()
    if not (isinstance(vendor_class, type) and issubclass(vendor_class, CatalogVendor)):
        raise TypeError(f"{name}: {descriptor.vendor} is not a CatalogVendor")
    if vendor_class.descriptor is not descriptor:
        raise TypeError(f"{name}: {descriptor.vendor} carries another vendor's descriptor")
    common: dict[str, Any] = {"devices": catalog.devices, "clock": clock, "sleep": sleep}
    if retry is not None:
        common["retry"] = retry
    return vendor_class.from_catalog(
        catalog.settings(name), timeout=timeout, environ=environ, emulator=emulator, **common
    )
