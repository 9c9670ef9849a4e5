"""A hybrid job from Python: flux-core's own jobspec, with a ``qpu`` request and the jobs
it waits for.

``hybrid(jobspec, qpu, after=...)`` takes a ``flux.job.JobspecV1`` (built by flux-core's
own ``from_command`` and friends) and gives it what ``flux submit --setattr=qpu.KEY=...
--dependency=afterok:ID`` would: ``attributes.system.qpu`` (checked here as the ingest
validator checks it, so a bad request fails in the caller with the validator's sentence)
and ``attributes.system.dependencies``. The result goes to ``flux.job.submit`` or a
``flux.job.FluxExecutor`` unchanged. It owns nothing else: resources, environment and
submission are flux-core's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flux_quantum.protocol.request import check_jobspec_attributes

# flux-core's after* dependency schemes (flux-submit(1), --dependency).
AFTER = ("afterok", "afterany", "afternotok", "after", "afterfinish")


def hybrid(
    jobspec: Any,
    qpu: str | Mapping[str, Any],
    *,
    after: Iterable[int | str] = (),
    when: str = "afterok",
) -> Any:
    """``jobspec`` with the ``qpu`` request (a short form such as ``"braket:sv1"`` or a
    table such as ``{"device": "braket:sv1", "program": "gen.qasm"}``) and, for each job
    of ``after`` (an id in any of Flux's forms), a ``when`` dependency on it: the job's
    task is created once they are done. Returns the same jobspec. ValueError (one
    sentence) for a request the validator would refuse or an unknown ``when``."""
    if when not in AFTER:
        raise ValueError(f"when must be one of {', '.join(AFTER)}, got {when!r}")
    request = dict(qpu) if isinstance(qpu, Mapping) else qpu
    system = {**(jobspec.jobspec.get("attributes", {}).get("system") or {}), "qpu": request}
    check_jobspec_attributes(system)  # RequestError is a ValueError
    jobspec.setattr("system.qpu", request)
    waits = [{"scheme": when, "value": str(jobid)} for jobid in after]
    if waits:
        earlier = list(jobspec.jobspec["attributes"]["system"].get("dependencies") or [])
        jobspec.setattr("system.dependencies", earlier + waits)
    return jobspec
