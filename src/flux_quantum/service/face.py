"""The service's face: what users see of it while their jobs are held.

Two views, both computed from the tracked units and nothing else: the volatile memos on
every held job (``flux jobs -o '{user.qpu_position}'``: device, task, queue position,
expected wait, state), sent only when they change and once per step of the service (the
records mark their units as they change, ``Unit.changed``; the core has the marked ones
sent, ``refresh``); and the
answer to a ``status`` request (``flux quantum service status``, ``flux quantum top``),
where a guest sees only their own units and their own units that ended lately. It never
calls a vendor and never decides anything.
"""

from __future__ import annotations

import syslog
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from flux_quantum.protocol.jobspec import POSITION_MEMO, WAIT_MEMO, HeldMemo, session_memo
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.state import Attempt, Member, Phase, Unit, UnitState
from flux_quantum.vendors.base import DeviceStatus

# Keys that move with every poll of a queue: sent at most every QUEUE_MEMO_INTERVAL
# seconds per unit (any other change goes at once, and takes them along).
QUEUE_KEYS = frozenset({POSITION_MEMO, WAIT_MEMO})
QUEUE_MEMO_INTERVAL = 2.0
# How many ended units ``status`` shows (``recent``: releases and failures).
RECENT = 20
# What a job's memo says while the site's ledger cannot take its reservation.
LEDGER_WAIT = "the site's ledger is unavailable: no task is created before its reservation"
# Why a held job waits, in a word (the metrics' label): what its first unfinished attempt
# is doing.
HELD_REASONS = (
    "queued",  # its task is in the vendor's queue
    "at_release_point",  # its task is there; the unit's other tasks are not yet
    "selecting",  # a device is being chosen
    "submitting",  # its task is being created
    "merging",  # waiting to share one task with other jobs' programs
    "reservation",  # waiting for its reserved window (Braket Direct)
    "ledger",  # the site's ledger is unavailable: no task before its reservation
    "device_paused",  # its device takes no work now
    "no_device",  # no device fits now (all slots busy, none answers)
    "retrying",  # a vendor call failed and is retried
)


class Face:
    def __init__(self, ctx: ServiceContext, reservations: Reservations) -> None:
        self.ctx = ctx
        self.reservations = reservations
        # The last units that ended (released, failed, abandoned), newest last.
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT)

    def memo_of(self, unit: Unit, state: str | None = None) -> dict[str, Any]:
        """The memo every job of the unit shows now."""
        attempts = unit.attempts()
        devices = sorted({a.device.name for a in attempts if a.device is not None})
        first_task = next((a.task.task_id for a in attempts if a.task is not None), None)
        waiting = [a for a in attempts if a.phase is not Phase.READY]
        # A vendor without positions (IBM): the estimated place stands in.
        places = [
            a.snapshot.position if a.snapshot.position is not None else a.estimated_position
            for a in (waiting or attempts)
            if a.snapshot is not None
        ]
        positions = [place for place in places if place is not None]
        waits = [a.expected_wait for a in waiting if a.expected_wait is not None]
        holding = [a.retry.holding for a in waiting if a.retry.holding]
        if state is None:
            window = self.reservations.waiting_reason(unit)
            if holding:
                # Why the job is held, until the obstacle passes: a vendor that does
                # not answer, an error retried, all slots busy.
                state = f"waiting: {holding[0]}"
            elif window is not None:
                state = window  # held with no task until admitted into its window
            elif any(a.phase is Phase.SELECT for a in attempts):
                state = "selecting a device"
            elif any(a.phase is Phase.SUBMIT for a in attempts):
                state = "submitting"
            elif all(a.phase is Phase.READY for a in attempts):
                state = "ready"
            else:
                states = sorted({a.snapshot.state.value for a in waiting if a.snapshot})
                state = ",".join(states) or "submitted"
            if len(attempts) > 1 and waiting:  # a batch (a cut's subexperiments): how far
                state += f" ({len(attempts) - len(waiting)}/{len(attempts)} ready)"
        return HeldMemo(
            device=",".join(devices) or None,
            task=first_task,
            position=max(positions) if positions else None,
            wait=round(max(waits)) if waits else (0 if not waiting else None),
            state=state,
        ).to_memo()

    def refresh(self) -> None:
        """Send the memos of the units that marked a change since the last refresh
        (``Unit.changed``: a record changed what its jobs show), once each, with the last
        state a change gave (a fail-over, a paused device), the changed keys only, in one
        exchange; not by each part that changed something. A unit that ended meanwhile
        shows nothing more (its released jobs got their last memo with the release)."""
        changed = self.ctx.units.changes.take()
        if not changed:
            return
        self.send(
            [
                change
                for unit, state in changed
                if unit.active
                for change in self.memos_of(unit, state)
            ]
        )

    def released(self, unit: Unit, ids: Iterable[int]) -> None:
        """The last memo of the unit's jobs ``ids``, released now: sent with their
        release, as they leave the unit at once."""
        self.send(self.memos_of(unit, "released", ids))

    def memos_of(
        self, unit: Unit, state: str | None = None, only: Iterable[int] | None = None
    ) -> list[tuple[Member, dict[str, Any]]]:
        """The memo changes of the unit's jobs (``only`` those), to be sent with others:
        none when only the queue moved and the unit's memos moved less than
        ``QUEUE_MEMO_INTERVAL`` seconds ago (a unit of many jobs polled often would
        otherwise send a memo per job per poll)."""
        if not unit.active and state is None:
            return []
        memo = self.memo_of(unit, state)
        wanted = None if only is None else set(only)
        out = []
        queue_only = True
        for member in list(unit.jobs.values()):
            if wanted is not None and member.id not in wanted:
                continue
            changed = {k: v for k, v in memo.items() if member.memo.get(k, None) != v}
            if changed:
                out.append((member, changed))
                queue_only = queue_only and changed.keys() <= QUEUE_KEYS
        now = self.ctx.clock()
        if out and queue_only:
            if now - unit.memo_at < QUEUE_MEMO_INTERVAL:
                unit.memo_pending = True  # sent by ``pending`` once the interval is over
                return []
            unit.memo_at = now
        unit.memo_pending = False
        return out

    def pending(self, units: Iterable[Unit]) -> None:
        """Send the queue memos held back by the interval, for the units whose interval
        is over, in one exchange."""
        now = self.ctx.clock()
        self.send(
            [
                change
                for unit in units
                if unit.memo_pending and now - unit.memo_at >= QUEUE_MEMO_INTERVAL
                for change in self.memos_of(unit)
            ]
        )

    def send(self, changes: Sequence[tuple[Member, dict[str, Any]]]) -> None:
        """Memo changes of any units' jobs, in one pipelined exchange with Flux."""
        if not changes:
            return
        try:
            outcomes = self.ctx.flux.memos([(member.id, memo) for member, memo in changes])
        except OSError as exc:
            outcomes = [exc] * len(changes)
        for (member, memo), error in zip(changes, outcomes, strict=True):
            if error is None:
                member.memo.update(memo)
            else:
                self.ctx.log(syslog.LOG_DEBUG, f"{member.id}: memo failed: {error}")

    def mark_session(self, unit: Unit) -> None:
        """A persistent memo ``qpu_session`` (mode and fingerprint, never the id) on the
        unit's jobs: it outlives the job, so a restarted service finds the jobs whose
        session it must close (``flux jobs -o '{user.qpu_session}'`` shows it too)."""
        session = unit.session
        if session is None or session.fingerprint is None:
            return
        for member in list(unit.jobs.values()):
            try:
                self.ctx.flux.annotate(member.id, session_memo(session.mode, session.fingerprint))
            except OSError as exc:
                self.ctx.log(syslog.LOG_DEBUG, f"{member.id}: session memo failed: {exc}")

    def held(self, unit: Unit) -> tuple[str, str, str | None]:
        """Where the unit's jobs stand, in words from fixed lists: the phase of its first
        unfinished attempt (or ``merging``), why they wait (``HELD_REASONS``) and that
        attempt's device (None: not chosen yet)."""
        attempts = unit.attempts()
        attempt = next((a for a in attempts if a.phase is not Phase.READY), attempts[0])
        device = attempt.device.name if attempt.device is not None else None
        state = "merging" if attempt.pooled else attempt.phase.value
        return state, self._reason(unit, attempt), device

    def _reason(self, unit: Unit, attempt: Attempt) -> str:
        holding = attempt.retry.holding
        if attempt.pooled:
            return "merging"
        if holding is not None and holding.startswith(LEDGER_WAIT):
            return "ledger"
        if self.reservations.waiting_reason(unit) is not None:
            return "reservation"
        if holding is not None:
            return "no_device" if attempt.wait_posted is not None else "retrying"
        if attempt.phase is Phase.TRACK:
            device = attempt.device
            snap = self.ctx.device_snapshots.get(device.name) if device is not None else None
            paused = snap is not None and snap.status is DeviceStatus.PAUSED
            return "device_paused" if paused else "queued"
        if attempt.phase is Phase.READY:
            return "at_release_point"
        return "selecting" if attempt.phase is Phase.SELECT else "submitting"

    def ended(self, unit: Unit, state: UnitState, note: str | None = None) -> None:
        """The unit was released, failed or abandoned: kept among the recent ones
        ``status`` shows (its owner's and the instance owner's view only)."""
        devices = sorted({a.device.name for a in unit.attempts() if a.device is not None})
        self._recent.append(
            {
                "unit": unit.id,
                "userid": unit.userid,
                "jobs": sorted({*unit.jobs, *unit.released_jobs}),
                "state": state.value,
                "device": ",".join(devices) or None,
                "t_submit": unit.t_submit,
                "at": round(self.ctx.clock(), 3),
                "note": note,
            }
        )

    def recent(self, userid: int | None = None) -> list[dict[str, Any]]:
        """The units that ended lately, newest first (only ``userid``'s when given)."""
        return [r for r in reversed(self._recent) if userid is None or r["userid"] == userid]

    def units(self, userid: int | None = None) -> list[dict[str, Any]]:
        """The tracked units (only ``userid``'s when given), for ``status``."""
        out = []
        for unit in self.ctx.units:
            if userid is not None and unit.userid != userid:
                continue
            out.append(
                {
                    "unit": unit.id,
                    "userid": unit.userid,
                    "jobs": sorted(unit.jobs),
                    "t_submit": unit.t_submit,
                    "max_wait": unit.request.max_wait,
                    "request": unit.request.describe(),
                    "state": unit.state.value,
                    "tasks": [
                        {
                            "index": p.index,
                            "phase": "merging" if p.attempt.pooled else p.attempt.phase.value,
                            "attempt": p.attempt.number,
                            "device": p.attempt.device.name if p.attempt.device else None,
                            "reservation": p.attempt.window.name if p.attempt.window else None,
                            "task": p.attempt.task.task_id if p.attempt.task else None,
                            "merge": p.attempt.merge.to_context() if p.attempt.merge else None,
                            "state": p.attempt.snapshot.state.value if p.attempt.snapshot else None,
                            "position": p.attempt.snapshot.position if p.attempt.snapshot else None,
                            "expected_wait": None
                            if p.attempt.expected_wait is None
                            else round(p.attempt.expected_wait, 1),
                            # When the expected wait was computed (its poll): a reader
                            # counts down from there.
                            "expected_at": p.attempt.snapshot.t if p.attempt.snapshot else None,
                            "queued_at": p.attempt.queued_at,
                            "ready": p.attempt.ready_reason,
                            "waiting": p.attempt.retry.holding,
                        }
                        for p in unit.programs
                    ],
                    "session": None
                    if unit.session is None
                    else {
                        "device": unit.session.device,
                        "mode": unit.session.mode,
                        "fingerprint": unit.session.fingerprint,
                    },
                }
            )
        return out
