"""How to reach IBM Quantum: the settings, and QRMI's config built from them per backend.

This module owns where the settings come from and in which order, for the real service
and for the emulator's IBM side, and what a job's later tasks need to ride a session. It
must never read or change ``os.environ`` (the environment is handed in), never do I/O,
and never show an API key or a session id in a ``repr`` or a message.

Settings are QRMI's own names, per backend first (``<backend>_QRMI_IBM_QCS_ENDPOINT``,
``_IAM_ENDPOINT``, ``_IAM_APIKEY``, ``_SERVICE_CRN``, ``_SESSION_MODE``), then the same
without the backend prefix, then the catalog's ``vendors.ibm`` (never the API key: the
catalog is world-readable). Each backend gets ``QuantumResource.from_config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.vendors.base import VendorSession
from flux_quantum.vendors.errors import AccessDenied

SETTING_PREFIX = "QRMI_IBM_QCS_"
DEFAULT_ENDPOINT = "https://quantum.cloud.ibm.com/api/v1"
DEFAULT_IAM_ENDPOINT = "https://iam.cloud.ibm.com"
SESSION_MODES = ("dedicated", "batch")


@dataclass(frozen=True)
class IbmSettings:
    """How to reach IBM Quantum. Every field may be overridden per backend by QRMI's own
    environment variables; ``apikey`` is for the emulator only (real keys come from the
    job owner's environment).

    ``session_mode`` is the default for ``open_session``; ``timeout`` bounds the REST
    reads this module makes itself; ``skew`` widens ``find_task``'s time window for
    clock differences; ``settle`` is how long after a create's recorded start
    ``find_task`` waits before it trusts a "not found" (a create still in flight at IBM
    when the service restarted would otherwise be missed).
    """

    endpoint: str | None = None
    iam_endpoint: str | None = None
    service_crn: str | None = None
    session_mode: str = "dedicated"
    apikey: str | None = field(default=None, repr=False)
    timeout: float = 20.0
    skew: float = 300.0
    settle: float = 60.0

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str], **overrides: Any) -> IbmSettings:
        values: dict[str, Any] = {}
        for key, name in (
            ("endpoint", "endpoint"),
            ("iam_endpoint", "iam_endpoint"),
            ("instance", "service_crn"),
            ("session_mode", "session_mode"),
        ):
            if settings.get(key):
                values[name] = settings[key]
        values.update(overrides)
        return cls(**values)


def emulator_settings(url: str, apikey: str, crn: str, **overrides: Any) -> IbmSettings:
    """Settings that reach the IBM side of the flux-quantum emulator listening at ``url``
    (it serves IBM's API under ``/ibm``); a create there lands at once, so no settle."""
    url = url.rstrip("/")
    values: dict[str, Any] = {
        "endpoint": url + "/ibm/api/v1",
        "iam_endpoint": url + "/ibm",
        "service_crn": crn,
        "apikey": apikey,
        "settle": 0.0,
    }
    values.update(overrides)
    return IbmSettings(**values)


def resource_config(
    backend: str, settings: IbmSettings, environ: Mapping[str, str]
) -> dict[str, str]:
    """QRMI's config for ``backend`` (keys without the backend prefix)."""

    def pick(key: str, default: str | None) -> str | None:
        return environ.get(f"{backend}_{SETTING_PREFIX}{key}") or environ.get(
            SETTING_PREFIX + key, default
        )

    config = {
        SETTING_PREFIX + "ENDPOINT": pick("ENDPOINT", settings.endpoint or DEFAULT_ENDPOINT),
        SETTING_PREFIX + "IAM_ENDPOINT": pick(
            "IAM_ENDPOINT", settings.iam_endpoint or DEFAULT_IAM_ENDPOINT
        ),
        SETTING_PREFIX + "IAM_APIKEY": pick("IAM_APIKEY", settings.apikey),
        SETTING_PREFIX + "SERVICE_CRN": pick("SERVICE_CRN", settings.service_crn),
        SETTING_PREFIX + "SESSION_MODE": pick("SESSION_MODE", settings.session_mode),
    }
    # A session handed to a job (QRMI's names): its tasks ride it.
    session = next(
        (environ[name] for name in (
            f"{backend}_{SETTING_PREFIX}SESSION_ID",
            f"{backend}_QRMI_JOB_ACQUISITION_TOKEN",
            SETTING_PREFIX + "SESSION_ID",
            "QRMI_JOB_ACQUISITION_TOKEN",
        ) if environ.get(name)),
        None,
    )  # fmt: skip
    config[SETTING_PREFIX + "SESSION_ID"] = session
    missing = [k for k in ("IAM_APIKEY", "SERVICE_CRN") if not config[SETTING_PREFIX + k]]
    if missing:
        names = " and ".join(
            f"{backend}_{SETTING_PREFIX}{k} (or {SETTING_PREFIX}{k})" for k in missing
        )
        raise AccessDenied(
            f"ibm: no IBM Quantum credentials for {backend}: set {names} in the job owner's "
            "environment (the service instance CRN may also be vendors.ibm.instance)",
            vendor="ibm",
            vendor_code="NoCredentials",
        )
    return {k: v for k, v in config.items() if v}


def session_environment(session: VendorSession, backend: str) -> dict[str, str]:
    """What a job's later tasks need to ride ``session`` (QRMI's names). Secret: put it
    only into the job's own environment, never into an eventlog, the KVS or a log."""
    return {
        "QRMI_JOB_ACQUISITION_TOKEN": session.session_id,
        f"{backend}_{SETTING_PREFIX}SESSION_ID": session.session_id,
    }
