"""Reading a task through the service: how a guest's job on the site's accounts gets its
task's state and result without the site's credentials.

The service holds the vendor credentials; the job's user holds none. ``flux quantum
task`` (and the consumer library) in such a job asks the supervisor module
(``qpu_handlers.task``), which relays the request with the caller's userid; this part
checks that the job is the caller's (the instance owner may read any) and that the task
is one the service released the job with, then polls or fetches the result in a worker.
The answer carries the state, position and counts: never a credential, a presigned URL
or the vendor's raw result document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flux_quantum.consumer import encode_jobid, job_task_from_jobspec
from flux_quantum.errors import CommandError
from flux_quantum.ledger import GuestError
from flux_quantum.service.fluxside import JobRecord
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot

OPS = ("poll", "result")


def checked_request(payload: Mapping[str, Any]) -> tuple[int, str | None, str]:
    """``(jobid, task or None, op)`` from a request; ValueError naming the field."""
    jobid = payload.get("id")
    if not isinstance(jobid, int) or isinstance(jobid, bool) or jobid <= 0:
        raise ValueError(f"id must be a job id (a positive integer), got {jobid!r}")
    task = payload.get("task")
    if task is not None and not (isinstance(task, str) and task):
        raise ValueError(f"task must be a task id of the job, got {task!r}")
    op = payload.get("op", "poll")
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    return jobid, task, op


def readable_ref(
    record: JobRecord | None, jobid: int, task: str | None, caller: int, owner: int
) -> TaskRef:
    """The task ``caller`` may read: GuestError if the job is not theirs, ValueError if
    it has no such task."""
    name = encode_jobid(jobid)
    if record is None:
        raise ValueError(f"job {name} is not known to this instance")
    if caller != owner and record.submitter() != caller:
        raise GuestError(f"job {name} is not yours: only its owner may read its quantum task")
    try:
        job_task = job_task_from_jobspec(jobid, record.jobspec, record.events)
        ref = job_task.ref(task)
    except CommandError as exc:
        raise ValueError(str(exc)) from None
    if not ref.vendor:
        raise ValueError(f"job {name}'s release does not say which vendor runs {ref.task_id}")
    return ref


def answer(op: str, ref: TaskRef, value: Any) -> dict[str, Any]:
    """The reply: a snapshot's fields for ``poll``, the counts for ``result``."""
    if op == "poll":
        assert isinstance(value, TaskSnapshot)
        return value.to_dict()
    assert isinstance(value, TaskResult)
    return {"task": ref.to_dict(), "counts": dict(value.counts)}
