"""Flux ingest validator plugin: refuse a malformed ``qpu`` request at submit time.

Load it by path next to the stock plugin::

    [ingest.validator]
    plugins = ["jobspec", "/PREFIX/.../flux_quantum/validator.py"]

It runs in Flux's own Python (the one flux-core was built with), usually without
flux-quantum installed, so it finds the package next to this file. It owns nothing but
that glue: all checks live in :func:`flux_quantum.request.check_jobspec_attributes`. It
never talks to a vendor, never reads the catalog and never changes the jobspec; jobs
without ``attributes.system.qpu`` pass untouched.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flux.job.validator import ValidatorPlugin

if TYPE_CHECKING:
    from flux.job.validator.validator import ValidatorJobInfo

try:
    import flux_quantum.request as qpu_request
except ImportError:
    # Append, never insert: an earlier sys.path entry (a venv) may hold another
    # ``flux`` package that must not shadow the broker's own bindings.
    sys.path.append(str(Path(__file__).resolve().parents[1]))
    import flux_quantum.request as qpu_request


class Validator(ValidatorPlugin):
    """Reject jobs whose ``attributes.system.qpu`` does not parse."""

    def validate(self, args: ValidatorJobInfo) -> tuple[int, str] | None:
        attributes = args.jobspec.get("attributes")
        system = attributes.get("system") if isinstance(attributes, dict) else None
        if not isinstance(system, dict):
            return None
        try:
            qpu_request.check_jobspec_attributes(system)
        except qpu_request.RequestError as exc:
            # EINVAL rather than a raised ValueError (EPERM): the request is invalid,
            # the user is not forbidden anything. flux submit prints the message as is.
            return (errno.EINVAL, str(exc))
        return None
