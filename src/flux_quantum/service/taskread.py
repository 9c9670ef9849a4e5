"""Reading a task through the service: how a released job gets its task's state and
result without credentials of its own, and without every rank asking the vendor.

The service holds the vendor credentials; the job may hold none (a guest's job on the
site's accounts never does). ``flux quantum task`` (and the consumer library) in a
released job asks the supervisor module (``qpu_handlers.task``), which relays the
request with the caller's userid; this part checks that the job is the caller's (the
instance owner may read any) and that the task is one the service released the job
with, then polls or fetches the result in a worker. ``TaskReads`` makes that one vendor
call per task however many ranks ask: requests for a task already being read wait for
that read, and a finished task's last state and counts are answered from memory. The
answer carries the state, position and counts: never a credential, a presigned URL or
the vendor's raw result document. It never blocks the reactor (the vendor calls run in
the workers) and never calls a vendor for a caller it has not checked.
"""

from __future__ import annotations

import errno
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.job.consumer import encode_jobid, job_task_from_jobspec
from flux_quantum.service.fluxside import JobRecord
from flux_quantum.site.ledger import GuestError
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot, TaskState

OPS = ("poll", "result")
# The largest answer the service relays, as JSON. A result's counts grow with shots and
# qubits (a bitstring each); above this the job reads them from the vendor itself.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# How many finished tasks' answers are kept (least recently read dropped first).
KEPT_TASKS = 512
# How long a poll of a task still under way answers other readers (they poll every
# second or more: a rank's view is at most this much older than the vendor's).
FRESH_SECONDS = 1.0
TERMINAL = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})

Reply = Callable[[int, Any], None]
Submit = Callable[[Callable[[], Any], Callable[[Any, BaseException | None], None]], None]


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


# Of a Braket result document's taskMetadata, what a reader may see (times and shots:
# no output location, no account).
RELAYED_METADATA = ("id", "status", "shots", "createdAt", "endedAt")


def answer(op: str, ref: TaskRef, value: Any) -> dict[str, Any]:
    """The reply: a snapshot's fields for ``poll``, the counts for ``result`` (with the
    task's times when the vendor's document has them)."""
    if op == "poll":
        assert isinstance(value, TaskSnapshot)
        return value.to_dict()
    assert isinstance(value, TaskResult)
    body: dict[str, Any] = {"task": ref.to_dict(), "counts": dict(value.counts)}
    raw = value.raw if isinstance(value.raw, Mapping) else {}
    metadata = raw.get("taskMetadata")
    if isinstance(metadata, Mapping):
        kept = {k: metadata[k] for k in RELAYED_METADATA if isinstance(metadata.get(k), str | int)}
        if kept:
            body["task_metadata"] = kept
    return body


def _bytes(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size} bytes"


def too_large(ref: TaskRef, size: int, limit: int = MAX_ANSWER_BYTES) -> str:
    """The sentence a reader gets for counts over the relay's limit."""
    return (
        f"the counts of task {ref.task_id} are {_bytes(size)}, over the {_bytes(limit)} "
        "the handler service relays: read them from the vendor with your own "
        "credentials (flux quantum task --direct)"
    )


class TaskReads:
    """One vendor call per task for every reader: in-flight reads are joined, finished
    tasks answered from memory (their last poll and their counts, the ``KEPT_TASKS``
    most recently read), and a task still under way from its poll of the last
    ``fresh_for`` seconds (ranks polling a running task every second or so share one
    poll). ``submit(call, done)`` runs ``call`` in a worker and ``done`` back on the
    reactor; ``calls`` counts the vendor calls it made."""

    def __init__(
        self,
        submit: Submit,
        *,
        kept: int = KEPT_TASKS,
        max_bytes: int = MAX_ANSWER_BYTES,
        fresh_for: float = FRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._submit = submit
        self._kept = kept
        self.max_bytes = max_bytes
        self.fresh_for = fresh_for
        self._clock = clock
        self._answers: OrderedDict[tuple[str, str], tuple[int, Any]] = OrderedDict()
        self._recent: dict[tuple[str, str], tuple[float, tuple[int, Any]]] = {}
        self._waiting: dict[tuple[str, str], list[Reply]] = {}
        # Readers of a merged task's programs, waiting for its one download.
        self._sets_waiting: dict[str, list[tuple[TaskRef, Reply]]] = {}
        self.calls = 0
        self.answered = 0

    def read(self, op: str, ref: TaskRef, vendor: Any, reply: Reply) -> None:
        """Answer ``reply(0, answer)`` or ``reply(errno, sentence)`` for a checked
        caller: from memory, by joining a read under way, or by one vendor call."""
        # A merged task's members each read their own program's counts.
        merged = op == "result" and ref.program is not None
        key = (op, f"{ref.task_id}#{ref.program}" if merged else ref.task_id)
        kept = self._answers.get(key)
        if kept is not None:
            self._answers.move_to_end(key)
            self.answered += 1
            reply(*kept)
            return
        recent = self._recent.get(key)
        if recent is not None and self._clock() - recent[0] < self.fresh_for:
            self.answered += 1
            reply(*recent[1])
            return
        if merged:
            self._read_set(ref, vendor, reply)
            return
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append(reply)
            return
        self._waiting[key] = [reply]
        self.calls += 1

        def call() -> Any:
            return vendor.poll(ref) if op == "poll" else vendor.result_of(ref)

        def done(value: Any, error: BaseException | None) -> None:
            outcome, keep = self._outcome(op, ref, value, error)
            self._recent.pop(key, None)
            if keep:
                self._keep(key, outcome)
            elif outcome[0] == 0:  # a task under way: good for the next few readers
                self._forget_stale()
                self._recent[key] = (self._clock(), outcome)
            for waiter in self._waiting.pop(key, []):
                self.answered += 1
                waiter(*outcome)

        self._submit(call, done)

    def _read_set(self, ref: TaskRef, vendor: Any, reply: Reply) -> None:
        """A merged task's result: one download of every program's (``results``) for
        all its jobs' readers, each answered with its own program's counts; every
        program's answer is kept, so the other jobs' readers need no vendor call."""
        waiting = self._sets_waiting.get(ref.task_id)
        if waiting is not None:
            waiting.append((ref, reply))
            return
        self._sets_waiting[ref.task_id] = [(ref, reply)]
        self.calls += 1

        def call() -> Any:
            return vendor.results(ref)

        def done(value: Any, error: BaseException | None) -> None:
            results = value if error is None and isinstance(value, list) else []
            outcomes: dict[int, tuple[int, Any]] = {}
            for index, result in enumerate(results):
                mine = replace(ref, program=index)
                outcomes[index], keep = self._outcome("result", mine, result, None)
                if keep:
                    self._keep(("result", f"{ref.task_id}#{index}"), outcomes[index])
            for waiter, answer_to in self._sets_waiting.pop(ref.task_id, []):
                place = waiter.program
                assert place is not None
                if error is None and not 0 <= place < len(results):
                    error_here: BaseException | None = ValueError(
                        f"it has {len(results)} program(s), not a program #{place + 1}"
                    )
                else:
                    error_here = error
                if error_here is not None:
                    outcome, _ = self._outcome("result", waiter, None, error_here)
                else:
                    outcome = outcomes[place]
                self.answered += 1
                answer_to(*outcome)

        self._submit(call, done)

    def _keep(self, key: tuple[str, str], outcome: tuple[int, Any]) -> None:
        self._answers[key] = outcome
        self._answers.move_to_end(key)
        while len(self._answers) > self._kept:
            self._answers.popitem(last=False)

    def _forget_stale(self) -> None:
        now = self._clock()
        for key in [k for k, (t, _) in self._recent.items() if now - t >= self.fresh_for]:
            del self._recent[key]

    def _outcome(
        self, op: str, ref: TaskRef, value: Any, error: BaseException | None
    ) -> tuple[tuple[int, Any], bool]:
        """The reply's arguments, and whether they hold for good (a finished task's
        poll, a result): errors and a task still under way are asked again."""
        if error is not None:
            return (errno.EIO, f"{op} of task {ref.task_id}: {error}"), False
        body = answer(op, ref, value)
        if op == "poll":
            return (0, body), isinstance(value, TaskSnapshot) and value.state in TERMINAL
        size = len(json.dumps(body, separators=(",", ":")))
        if size > self.max_bytes:
            return (errno.EFBIG, too_large(ref, size, self.max_bytes)), True
        return (0, body), True
