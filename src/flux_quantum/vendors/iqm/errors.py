"""IQM's refusals as ``flux_quantum.vendors.errors``: QRMI's translation, and what IQM's
answers to a create mean.

A create IQM answers with 409 found the quantum computer under maintenance or offline
(``DeviceOffline``); one it answers with 403 found too many jobs waiting or processing
(``QuotaExceeded``); anything else reads as every QRMI vendor's error does
(``flux_quantum.vendors.qrmi.translate``). Pure: it never calls IQM and keeps no state.
"""

from __future__ import annotations

from flux_quantum.vendors.errors import DeviceOffline, QuotaExceeded, VendorError
from flux_quantum.vendors.qrmi import translate as translate_qrmi

_CREATE_REFUSALS: dict[str, type[VendorError]] = {
    "HTTP409": DeviceOffline,
    "HTTP403": QuotaExceeded,
}


def translate(exc: BaseException, *, vendor: str, operation: str, subject: str) -> VendorError:
    """One project error for an exception of a call to QRMI's IQM resource or IQM's API."""
    error = translate_qrmi(exc, vendor=vendor, operation=operation, subject=subject)
    refusal = _CREATE_REFUSALS.get(error.vendor_code) if operation == "create" else None
    if refusal is None:
        return error
    return refusal(str(error), vendor=vendor, vendor_code=error.vendor_code, operation=operation)
