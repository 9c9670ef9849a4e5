"""A cut job's side: its subexperiments' results, recombined inside the job.

A job submitted by ``flux quantum cut submit`` is an ordinary batch job: one program a
subexperiment, in the manifest's order, its tasks in that order in its jobspec. Its
manifest's path is in ``attributes.user.qpu_cut`` (and, inside the job, in
``FLUX_QPU_CUT``). ``cut_result`` reads the job's tasks (``consumer``), waits for each
result through the vendor layer as any consumer does, and recombines them
(``flux_quantum.cutting.reconstruct``): the expectation values with their standard
errors, the cut that was made, and where each subexperiment ran. The recombination is
classical work and runs here, in the job, never in the handler service.

From a job's Python::

    from flux_quantum.job.cut import cut_result
    result = cut_result()                  # this job's
    for e in result.estimates: print(e.observable, e.value, e.standard_error)
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux_quantum.cutting.experiments import Experiments
from flux_quantum.cutting.manifest import read_manifest
from flux_quantum.cutting.reconstruct import Estimate, reconstruct
from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import (
    JobTask,
    current_task,
    encode_jobid,
    open_vendor,
    resolve_jobid,
    wait_result,
)

MANIFEST_ATTRIBUTE = "qpu_cut"  # attributes.user.qpu_cut
ENV_CUT = "FLUX_QPU_CUT"
# Results read at once (through the service, which asks the vendor once per task).
READERS = 8


@dataclass(frozen=True)
class CutResult:
    """The recombined values, the cut, and each subexperiment's task and device."""

    jobid: int
    manifest: str
    experiments: Experiments
    estimates: tuple[Estimate, ...]
    tasks: tuple[str, ...]
    devices: tuple[str, ...]
    shots: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        e = self.experiments
        return {
            "jobid": encode_jobid(self.jobid),
            "manifest": self.manifest,
            "estimates": [x.to_dict() for x in self.estimates],
            "cut": {
                "qubits": e.qubits,
                "fragments": [
                    {"qubits": list(block), "width": width}
                    for block, width in zip(e.plan.blocks, e.plan.widths, strict=True)
                ],
                "cut_gates": [dict(g) for g in e.cut_gates],
                "terms": len(e.terms),
                "overhead": e.overhead,
            },
            "subexperiments": [
                {
                    "program": i,
                    "fragment": p.fragment,
                    "variant": p.variant,
                    "setting": p.group,
                    "task": task,
                    "device": device,
                    "shots": shots,
                }
                for i, (p, task, device, shots) in enumerate(
                    zip(e.programs, self.tasks, self.devices, self.shots, strict=True)
                )
            ],
            "devices": dict(Counter(self.devices)),
        }


def manifest_path(jobid: int, handle: Any, environ: dict[str, str] | None = None) -> str:
    """Where job ``jobid``'s manifest is: ``FLUX_QPU_CUT`` inside the job, else its
    jobspec's ``attributes.user.qpu_cut``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_CUT) and env.get("FLUX_JOB_ID") and resolve_jobid(None) == jobid:
        return env[ENV_CUT]
    from flux.job import job_kvs_lookup

    try:
        data = job_kvs_lookup(handle, jobid, keys=["jobspec"], decode=True)
    except OSError as exc:
        raise CommandError(f"cannot read job {encode_jobid(jobid)}: {exc}") from None
    user = ((data or {}).get("jobspec") or {}).get("attributes", {}).get("user", {})
    path = user.get(MANIFEST_ATTRIBUTE)
    if not isinstance(path, str):
        raise CommandError(
            f"job {encode_jobid(jobid)} is not a cut job (no attributes.user.{MANIFEST_ATTRIBUTE}): "
            "submit it with flux quantum cut submit"
        )
    return path


def cut_result(
    jobid: str | int | None = None,
    *,
    manifest: str | None = None,
    handle: Any = None,
    timeout: float | None = None,
) -> CutResult:
    """Wait for every subexperiment of the cut job (default: this one) and recombine."""
    job = resolve_jobid(jobid)
    if handle is None:
        import flux

        handle = flux.Flux()
    task = current_task(job, handle=handle)
    path = manifest or manifest_path(job, handle)
    experiments, _ = read_manifest(Path(path))
    if len(task.tasks) != len(experiments.programs):
        raise CommandError(
            f"job {encode_jobid(job)} has {len(task.tasks)} task(s) but its cut manifest "
            f"{path} has {len(experiments.programs)} subexperiments"
        )
    counts = _counts(task, timeout)
    estimates = reconstruct(experiments, counts)
    return CutResult(
        job,
        path,
        experiments,
        tuple(estimates),
        task.tasks,
        tuple(task.device_of(t) for t in task.tasks),
        tuple(sum(c.values()) for c in counts),
    )


def _counts(task: JobTask, timeout: float | None) -> list[dict[str, int]]:
    """Every subexperiment's counts, in program order, read a few at a time (each read
    waits for its task, then asks the service or the vendor once). A reader has a vendor
    of its own: a Flux handle is never shared between threads."""
    local = threading.local()

    def read(task_id: str) -> dict[str, int]:
        if not hasattr(local, "vendor"):
            local.vendor = open_vendor(task)
        result = wait_result(task, task_id=task_id, vendor=local.vendor, timeout=timeout)
        return dict(result.counts)

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return list(pool.map(read, task.tasks))
