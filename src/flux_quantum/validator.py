"""Flux ingest validator plugin: refuse a malformed ``qpu`` request at submit time.

Load it by path next to the stock plugin::

    [ingest.validator]
    plugins = ["jobspec", "/PREFIX/.../flux_quantum/validator.py"]

It runs in Flux's own Python (the one flux-core was built with), usually without
flux-quantum installed, so it finds the package next to this file. It owns nothing but
that glue: the request checks live in
:func:`flux_quantum.protocol.request.check_jobspec_attributes` and the site's
``[quantum.access]`` rules in :mod:`flux_quantum.site.access` (both standard-library
only); the vendors it knows and their credential variables are their descriptors'
(``flux_quantum.protocol.vendors``, found on the path it extends, vendors installed
beside flux-quantum among them). It never talks to a vendor and never changes the
jobspec; jobs without ``attributes.system.qpu`` pass untouched. Only when access rules
are configured does it read the catalog once, at start, for the vendor and class of
named devices (the YAML catalog needs PyYAML, which flux-core's Python has; without it,
rules on vendors or classes are left to the handlers). A refusal it cannot be sure of
(the bank is filled in after submit) is left to the handlers too.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flux.job.validator import ValidatorPlugin

if TYPE_CHECKING:
    from flux.job.validator.validator import ValidatorJobInfo

try:
    import flux_quantum.protocol.request as qpu_request
except ImportError:
    # Append, never insert: an earlier sys.path entry (a venv) may hold another
    # ``flux`` package that must not shadow the broker's own bindings.
    sys.path.append(str(Path(__file__).resolve().parents[1]))
    import flux_quantum.protocol.request as qpu_request
from flux_quantum.site import access


def _catalog_facts(path: str | None) -> dict[str, access.DeviceFacts]:
    try:
        from flux_quantum.catalog import load_catalog

        return access.device_facts(load_catalog(path, flux_config=lambda: None))
    except Exception:  # no PyYAML here, or a bad catalog: the handlers will say so
        return {}


class Validator(ValidatorPlugin):
    """Reject jobs whose ``attributes.system.qpu`` does not parse, a guest's job that
    carries a vendor credential in its environment (the instance owner could read it),
    or jobs that name a device the site's access rules deny them whatever their bank."""

    def __init__(self, parser: object) -> None:
        super().__init__(parser)
        self.rules = access.AccessRules()
        self.facts: dict[str, access.DeviceFacts] = {}
        # job-ingest runs its validators as the instance owner.
        self.owner = os.getuid()

    def configure(self, args: object) -> None:
        # A bad table fails the validator's start: flux-core logs it and refuses jobs,
        # which is what an admin wants from a broken access policy.
        self.rules = access.AccessRules.from_config(self.flux.conf_get(access.TABLE))
        if self.rules.rules:
            self.facts = _catalog_facts(self.flux.conf_get("quantum.backends"))

    def validate(self, args: ValidatorJobInfo) -> tuple[int, str] | None:
        attributes = args.jobspec.get("attributes")
        system = attributes.get("system") if isinstance(attributes, dict) else None
        if not isinstance(system, dict):
            return None
        try:
            request = qpu_request.check_jobspec_attributes(system)
        except qpu_request.RequestError as exc:
            # EINVAL rather than a raised ValueError (EPERM): the request is invalid,
            # the user is not forbidden anything. flux submit prints the message as is.
            return (errno.EINVAL, str(exc))
        if request is None:
            return None
        # A credential in the environment lands in the jobspec, which the instance owner
        # can read. In one's own instance (flux start, alloc, batch) that is oneself: no
        # one else learns it. A guest's job would hand it to another user.
        secrets = qpu_request.credential_variables(system) if args.userid != self.owner else []
        if secrets:
            return (errno.EPERM, qpu_request.credential_refusal(secrets))
        if request.device is None or not self.rules.rules:
            return None
        device = self.facts.get(request.device) or access.DeviceFacts(
            request.device, request.vendor
        )
        who = access.Requester(args.userid, access.user_name(args.userid), access.bank_of(system))
        decision = self.rules.decide(who, device)
        if decision.allowed is False:
            return (errno.EPERM, f"qpu: {decision.reason}")
        return None
