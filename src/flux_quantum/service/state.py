"""What the handler service tracks, as plain records: units, programs, attempts, members.

A *unit* is the set of held jobs that share quantum tasks: one job, a ``qpu.group``, or a
leader and its followers. It has one *program* per OpenQASM file of the request (a batch
has several), and each program has a current *attempt*: one vendor task, from choosing its
device to its release point. A fail-over replaces the attempt with the next one (a new
token, the failed device excluded); nothing is reset by hand. The records hold state only;
the service's parts (adoption, tasks, outcomes, release, devices, face) act on them, on the
reactor thread. A record whose change shows in its jobs' memo (a phase, a wait, why the
jobs are held) says so itself, through its unit (``Unit.changed``), into the service's
``Changes``; the face sends the memos of the units marked there, once per step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler.compiled import Compiled
from flux_quantum.protocol.events import MergeSlot
from flux_quantum.protocol.request import QpuRequest
from flux_quantum.selection.qasm import ProgramCounts
from flux_quantum.service.fluxside import JobSize
from flux_quantum.service.retry import Retries
from flux_quantum.site.reservations import Reservation
from flux_quantum.vendors.base import (
    DeviceSnapshot,
    TaskRef,
    TaskSnapshot,
    TaskState,
    VendorSession,
)

# Told that what a unit's jobs' memo shows may have changed, with the state to show
# instead of the unit's own (None: its own).
Tell = Callable[[str | None], None]


def _untold(state: str | None = None) -> None:
    """An attempt of no unit: nobody to tell."""


class Phase(StrEnum):
    SELECT = "select"  # choosing a device
    SUBMIT = "submit"  # token recorded, creating the task
    TRACK = "track"  # polling the task
    READY = "ready"  # at its release point, waiting for the unit's other tasks
    DONE = "done"  # the unit was released, failed or abandoned


class UnitState(StrEnum):
    ACTIVE = "active"
    RELEASED = "released"
    FAILED = "failed"
    ABANDONED = "abandoned"  # every job left (cancelled): its tasks were cancelled


@dataclass
class Attempt:
    """One try at running a program: a device, a token, a vendor task and its progress.

    ``number`` counts the program's attempts (0 first); ``exclude`` and ``device_class``
    constrain the choice of device after fail-overs. ``due``/``busy`` schedule the
    attempt's next step; ``retry`` is its record of failed calls in a row. ``window``:
    the reserved window (Braket Direct) its task is created in, with the window's ARN,
    once the job is admitted into it (``reservations.py``); None: the public queue. Its phase
    changes only through the methods below (SELECT -> SUBMIT -> TRACK -> READY, any ->
    DONE), each setting what that phase needs together; those that change what its
    jobs' memo shows ``tell`` its unit so.
    """

    number: int = 0
    exclude: frozenset[str] = frozenset()
    device_class: str | None = None
    phase: Phase = Phase.SELECT
    # What was submitted: the device chosen, the token recorded before the create.
    device: Device | None = None
    token: str | None = None
    window: Reservation | None = None
    submit_posted: bool = False  # the token is in the eventlog
    reserved: bool = False  # its estimate is reserved in the site's ledger
    # What the job may still spend, as its reservation saw it (``quota.headroom``): a
    # session it opens gets it as its cost limit. None: no cap and no spend limit known.
    budget: float | None = None
    since: float | None = None  # taken before the create (qpu-submit): find_task's window
    ahead: int | None = None  # the device's pending count seen before the create
    look_first: bool = False  # token recorded by an earlier service: find before creating
    # The create may have reached the vendor (handed to a worker, or recorded by an
    # earlier service): never released unasked (``lookups.py``); ``creating``: it is out
    # now, no answer yet.
    sent: bool = False
    creating: bool = False
    # Merged tasks (``merges.py``): waiting in the pool to be merged (no task, no slot
    # taken yet); the job's place in the merged task once recorded; why it goes alone.
    pooled: bool = False
    merge: MergeSlot | None = None
    alone: str | None = None
    # The program as the compile stage wrote it for ``device`` (``compiling.py``); None:
    # not compiled (yet, or the stage is off).
    compiled: Compiled | None = None
    # What is tracked: the vendor task and what its polls said.
    task: TaskRef | None = None
    attached: bool = True  # False: found in the eventlog, not yet polled by this service
    snapshot: TaskSnapshot | None = None
    queued_at: float | None = None  # when the task was created: max_wait counts from here
    cancelled: bool = False
    milestones: set[int] = field(default_factory=set)
    expected_wait: float | None = None
    running_seen: float | None = None  # first poll that saw the task RUNNING
    estimated_position: int | None = None  # a vendor without positions (IBM): estimated
    last_poll: float = 0.0
    ready_reason: str | None = None
    ready_at: float | None = None  # when it reached its release point (the release lag)
    # Its scheduling and its retry record.
    due: float = 0.0
    busy: bool = False
    retry: Retries = field(default_factory=Retries)
    wait_posted: str | None = None  # the last qpu-wait reason posted (said once)
    # Its unit's ``changed``, set by the unit (and handed on to the attempts that follow).
    tell: Tell = field(default=_untold, repr=False, compare=False)

    # -- phases

    def chosen(
        self,
        device: Device,
        token: str,
        ahead: int | None,
        window: Reservation | None = None,
    ) -> None:
        """SELECT -> SUBMIT: ``device`` chosen, ``token`` to record before the create;
        ``window``: the reserved window the task goes into (the job waits for its
        admission before the token is recorded)."""
        self.device, self.token, self.ahead = device, token, ahead
        self.window = window
        self.compiled = None
        self.wait_posted = None
        self.retry.clear()
        self.submit_posted = False
        self.phase = Phase.SUBMIT
        self.due = 0.0
        self.tell(None)

    def resumed(
        self,
        device: Device,
        token: str,
        *,
        since: float | None,
        ahead: int | None,
        window: Reservation | None = None,
        merge: MergeSlot | None = None,
    ) -> None:
        """-> SUBMIT after a restart: the token was recorded, the task maybe created
        (looked for by its token first); ``window``: recorded as admitted into it;
        ``merge``: recorded as a member of a merged task."""
        self.device, self.token, self.window = device, token, window
        self.since, self.ahead, self.merge = since, ahead, merge
        self.submit_posted = True
        self.look_first = True
        self.sent = True
        self.phase = Phase.SUBMIT

    def compiled_for(self, compiled: Compiled) -> None:
        """The compile stage wrote its program for its device: it is due to go on."""
        self.compiled = compiled
        self.retry.clear()
        self.due = 0.0

    def unchosen(self) -> None:
        """SUBMIT -> SELECT before its token was recorded: its device cannot take the
        program (the compile stage said why), another is chosen."""
        assert not self.submit_posted
        self.device = self.token = self.window = self.compiled = None
        self.phase = Phase.SELECT
        self.due = 0.0
        self.tell(None)

    def creating_now(self) -> None:
        """Its create goes to a worker: from now on it may reach the vendor."""
        self.sent = self.creating = True

    def tracked(self, task: TaskRef, *, queued_at: float | None, attached: bool) -> None:
        """-> TRACK: ``task`` exists (created now, found again, or recorded in the
        eventlog and ``attached`` at its first poll, which shows it)."""
        self.task = task
        self.queued_at = queued_at
        self.attached = attached
        self.look_first = False
        self.phase = Phase.TRACK
        self.due = 0.0
        if attached:
            self.tell(None)

    def seen(self, snapshot: TaskSnapshot) -> None:
        """A poll of its task answered ``snapshot``."""
        self.snapshot = snapshot
        if snapshot.state is TaskState.RUNNING:
            self.running_seen = self.running_seen or snapshot.t
        self.tell(None)

    def judged(self, expected_wait: float | None, estimated_position: int | None) -> None:
        """The release rule judged its last poll: the seconds to its release point (to
        the result with ``predict`` and ``done``) and, a vendor without positions, its
        estimated place."""
        self.expected_wait = expected_wait
        self.estimated_position = estimated_position
        self.tell(None)

    def hold(self, why: str) -> None:
        """It waits for ``why`` (an error retried, the ledger, the merge pool, a device
        slot): its jobs' memo says so until the obstacle passes (``retry.clear``)."""
        self.retry.holding = why
        self.tell(None)

    def device_paused(self, why: str, due: float) -> None:
        """Its device takes no work now (``why``): no wait to expect, its task polled
        again at ``due``; its jobs' memo says why they wait."""
        self.expected_wait = None
        self.due = due
        self.tell(f"waiting: {why}")

    def ready(self, reason: str, at: float | None = None) -> None:
        """TRACK -> READY: at its release point, for ``reason``, seen at ``at``."""
        self.phase = Phase.READY
        self.ready_reason = reason
        self.ready_at = at
        self.tell(None)

    def ended(self) -> None:
        """-> DONE: its unit was released, failed or abandoned."""
        self.phase = Phase.DONE

    def following(self, failed: str | None, device_class: str | None) -> Attempt:
        """The next attempt after a fail-over away from ``failed``; one whose merged
        create was refused goes alone (``alone``)."""
        exclude = self.exclude | {failed} if failed else self.exclude
        return Attempt(
            number=self.number + 1,
            exclude=frozenset(exclude),
            device_class=device_class or self.device_class,
            alone=self.alone,
            tell=self.tell,
        )

    def live_task(self) -> TaskRef | None:
        """The task if the vendor may still run it (and we did not cancel it)."""
        if self.task is None or self.cancelled:
            return None
        if self.snapshot is not None and self.snapshot.terminal:
            return None
        return self.task


@dataclass
class Program:
    """One OpenQASM program of a unit (``qpu.program``; None: the default circuit)."""

    index: int
    path: str | None
    text: str | None = None
    counts: ProgramCounts | None = None  # gate counts, for max-fidelity and min_fidelity
    # The catalog devices that cannot run it, with why (read with the text).
    unfit: dict[str, str] = field(default_factory=dict)
    attempt: Attempt = field(default_factory=Attempt)

    @property
    def sent_text(self) -> str | None:
        """What the vendor receives: the program as compiled for its attempt's device,
        else as written."""
        compiled = self.attempt.compiled
        return compiled.text if compiled is not None else self.text

    def follow(
        self, failed: str | None, device_class: str | None, shown: str | None = None
    ) -> Attempt:
        """Its next attempt, after a fail-over away from ``failed`` (``Attempt.following``);
        its jobs' memo shows it, or ``shown`` (what the memo says instead, for now)."""
        self.attempt = self.attempt.following(failed, device_class)
        self.attempt.tell(shown)
        return self.attempt

    def recorded(self, number: int, exclude: frozenset[str], device_class: str | None) -> Attempt:
        """Its attempt as the eventlog recorded it (a restart), in place of the first;
        shown at its first step."""
        self.attempt = Attempt(
            number=number, exclude=exclude, device_class=device_class, tell=self.attempt.tell
        )
        return self.attempt


@dataclass
class Member:
    """A held job riding a unit. ``facts`` are the (event, index, attempt) triples its
    eventlog has, so that no event is posted twice to it; ``memo`` what it shows."""

    id: int
    userid: int
    size: JobSize = JobSize()
    # The job's current jobspec as compact JSON (a tenth of the memory of the dict,
    # which counts with 10,000 held jobs): read back by ``jobspec``.
    spec: str = "{}"
    facts: set[tuple[str, int, int]] = field(default_factory=set)
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def jobspec(self) -> dict[str, Any]:
        return json.loads(self.spec)


@dataclass
class UnitSession:
    """The vendor session a unit's tasks ride (``qpu.session``). ``mode`` is the one in
    force (``job``: none could be opened); ``handle`` holds the secret id in memory only,
    None after a restart until read back from a task that rode it; ``closing`` is set
    once the service started to close it."""

    device: str
    vendor: str
    requested: str
    mode: str
    fingerprint: str | None = None
    handle: VendorSession | None = None
    closing: bool = False

    @property
    def open(self) -> bool:
        return self.mode != "job" and self.fingerprint is not None and not self.closing


class Changes:
    """The units whose jobs' memo may show something new since the face last took them,
    each with the state to show instead of its own (the last one given wins): marked by
    the records themselves as they change (``Unit.changed``), taken by the face once per
    step of the service (``Face.refresh``). It holds marks only."""

    def __init__(self) -> None:
        self._marked: dict[int, tuple[Unit, str | None]] = {}

    def mark(self, unit: Unit, state: str | None = None) -> None:
        self._marked[unit.id] = (unit, state)

    def take(self) -> list[tuple[Unit, str | None]]:
        """The units marked since the last take, once each, and no more marks."""
        marked, self._marked = self._marked, {}
        return list(marked.values())


@dataclass
class Unit:
    """Jobs that share tasks: one job, a qpu.group, or a leader and its followers."""

    id: int
    userid: int
    t_submit: float
    request: QpuRequest
    cwd: str | None
    programs: list[Program]
    jobs: dict[int, Member] = field(default_factory=dict)
    state: UnitState = UnitState.ACTIVE
    released_at: float | None = None
    release: dict[str, Any] | None = None
    session: UnitSession | None = None
    released_jobs: list[int] = field(default_factory=list)  # their tasks' costs reach them
    memo_at: float = -math.inf  # when its jobs' memos last moved with the queue
    memo_pending: bool = False  # a queue move not shown yet (sent when the interval ends)
    # When its job's other dependencies stopped holding its task (qpu-inputs); None: they
    # never did, it could be created from the submit.
    t_ready: float | None = None
    # Where it says that what its jobs' memo shows may have changed: the tracked units'
    # (``Units.add``); its own until then.
    changes: Changes = field(default_factory=Changes, repr=False, compare=False)

    def __post_init__(self) -> None:
        for program in self.programs:
            program.attempt.tell = self.changed

    def changed(self, state: str | None = None) -> None:
        """What its jobs' memo shows may have changed; ``state``: what the memo says
        instead of the unit's own state, for now (a fail-over, a paused device)."""
        self.changes.mark(self, state)

    @property
    def active(self) -> bool:
        return self.state is UnitState.ACTIVE

    @property
    def ready_at(self) -> float:
        """When its task could first be created: the unit's time counts from here."""
        return self.t_ready if self.t_ready is not None else self.t_submit

    @property
    def group_key(self) -> tuple[int, str] | None:
        return (self.userid, self.request.group) if self.request.group else None

    def attempts(self) -> list[Attempt]:
        return [p.attempt for p in self.programs]


@dataclass
class DeviceWatch:
    """A device whose tasks are waiting: probed every ``device_check_interval``."""

    device: Device
    due: float = 0.0
    busy: bool = False
    snapshot: DeviceSnapshot | None = None
    retry: Retries = field(default_factory=Retries)


@dataclass
class Counters:
    adopted: int = 0
    released: int = 0
    failed: int = 0
    tasks_created: int = 0
    tasks_attached: int = 0
    tasks_cancelled: int = 0
    polls: int = 0
    failovers: int = 0
    vendor_errors: int = 0
    unexpected_errors: int = 0
    tasks_found: int = 0  # found again after a restart (find_task), not created
    creates_looked_up: int = 0  # tasks of creates left without an answer, found by token
    sessions_opened: int = 0
    sessions_joined: int = 0  # a later step of a loop rode its loop's open session
    sessions_closed: int = 0
    window_admitted: int = 0  # units admitted into a reserved window (Braket Direct)
    window_ended: int = 0  # units whose window ended before their task ran in it
    tasks_merged: int = 0  # vendor tasks that hold several jobs' programs
    jobs_merged: int = 0  # programs sent in them
