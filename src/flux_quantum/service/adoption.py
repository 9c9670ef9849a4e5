"""Which held jobs the service looks after: discovery, adoption, and recovery.

Discovery is level-triggered: every ``scan_interval`` the plugin's ``list`` (the one
authority on which jobs are held) is compared with what the service tracks. Jobs that
appear are adopted: their eventlog is replayed (``flux_quantum.protocol.events.replay``) and they
continue where it left off (a restart), join the unit they belong to (a ``qpu.group``, a
follower, a unit recorded in the eventlog), or start a unit of their own. Jobs that
vanish were released, failed or cancelled, and their eventlog says which. A journal
stream would notice a job sooner, but it is owner-only, ends on every job-manager reload
and can be missed; a list is one cheap RPC, works for guests and cannot drift. A listed
job whose other Flux dependencies still hold its task (``waiting.py``) is not adopted until
they no longer do: its task is created from the moment its inputs are there, and that
moment (``qpu-inputs``) is when its unit's time counts from.

This part never calls a vendor: a recovered task is re-attached by its first poll (and
reserved again in the site's ledger, counted once), a recorded token without a task is
submitted again with the same token (the vendor returns the same task), and a job whose
request does not parse fails at once. A token recorded with a reserved window
(``qpu-submit``'s ``reservation``) was admitted into it: ``Reservations`` counts it there, and
its task, once re-attached, releases the job (or its end rule applies).
"""

from __future__ import annotations

import json
import syslog
import time
from collections.abc import Mapping, Sequence
from typing import Any

from flux_quantum.errors import CommandError
from flux_quantum.instance.plugin import HeldJob
from flux_quantum.protocol import events
from flux_quantum.protocol.jobspec import Released
from flux_quantum.protocol.request import QpuRequest, RequestError, parse_request
from flux_quantum.service.charges import Charges
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.fluxside import JobRecord
from flux_quantum.service.lookups import Lookups
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.programs import programs_of
from flux_quantum.service.release import Release
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.sessions import Sessions
from flux_quantum.service.state import (
    Member,
    Program,
    Unit,
    UnitSession,
    UnitState,
)
from flux_quantum.service.submission import submit_record, task_record
from flux_quantum.service.waiting import Waiting
from flux_quantum.site.accounts import request_account
from flux_quantum.vendors.base import TaskRef

Adoptee = tuple[HeldJob, JobRecord, events.History]


class Adoption:
    SUMMARY_AT = 100  # adopting this many jobs at once is logged in one line

    def __init__(
        self,
        ctx: ServiceContext,
        outcomes: Outcomes,
        release: Release,
        charges: Charges,
        lookups: Lookups,
        sessions: Sessions,
        reservations: Reservations,
    ) -> None:
        self.ctx = ctx
        self.outcomes = outcomes
        self.release = release
        self.charges = charges
        self.lookups = lookups
        self.sessions = sessions
        self.reservations = reservations
        # The held jobs seen waiting for their other dependencies (adoption's own).
        self.waiting = Waiting(ctx)
        self._scan_error: str | None = None
        self._scan_error_count = 0
        # While a batch is adopted: the units it touched, the events it has to post and
        # its groups by key; their events go to Flux in one exchange at the end.
        self._touched: dict[int, Unit] | None = None
        self._joins: list[tuple[Member, events.QpuEvent]] = []  # joins, qpu-inputs
        self._groups: dict[tuple[int, str], Unit] = {}
        self._verbose = True
        self._last_spec: tuple[Mapping[str, Any] | None, str] = (None, "{}")
        # The last list whose every handled job was tracked, and how many jobs the
        # service tracked then: the same list again, with no job forgotten since (only
        # a scan adds jobs, so the count cannot fall and rise back in between), needs
        # no comparison.
        self._quiet: tuple[list[HeldJob] | None, int] = (None, -1)

    # -- discovery

    def scan(self) -> None:
        """Compare the plugin's held jobs with the tracked ones; adopt and forget."""
        ctx = self.ctx
        ctx.rescanning()
        try:
            held = ctx.flux.held()
        except (CommandError, OSError) as exc:
            # Said once, with a count when it changes or clears: never at every scan.
            if str(exc) != self._scan_error:
                self._scan_error, self._scan_error_count = str(exc), 1
                ctx.log(syslog.LOG_WARNING, f"cannot list held jobs: {exc}")
            else:
                self._scan_error_count += 1
            return
        if self._scan_error is not None:
            ctx.log(
                syslog.LOG_INFO,
                f"held jobs listed again after {self._scan_error_count} failed scan(s)",
            )
            self._scan_error = None
        listed, (quiet, tracked) = held, self._quiet
        if listed is quiet and ctx.units.job_count == tracked:
            return
        held = self.handled(held)
        by_id = {job.id: job for job in held}
        for jobid in [j for j in ctx.units.job_ids() if j not in by_id]:
            self.job_left(jobid)
        # A job whose other dependencies still hold its task waits, not adopted.
        new = self.waiting.sort([job for job in held if not ctx.units.tracks(job.id)], held)
        if new:
            self.adopt(sorted(new, key=lambda j: (j.follow is not None, j.t_submit, j.id)))
        # After a restart: the ledger's reservations that no held job owns any more.
        self.charges.sweep(by_id, self.lookups.orphan)
        # A list that has not moved cannot open a waiting job (the plugin moves the
        # generation when a held job's dependencies change).
        settled = all(ctx.units.tracks(j) or self.waiting.waits(j) for j in by_id)
        self._quiet = (listed, ctx.units.job_count) if settled else (None, -1)

    def handled(self, held: list[HeldJob]) -> list[HeldJob]:
        """The held jobs this service handles: the instance owner's service its own and
        guests' site-account jobs; a guest's own service that guest's user-account jobs.
        A follower goes with the job it follows."""
        ctx = self.ctx
        by_id = {job.id: job for job in held}

        def account(job: HeldJob) -> str:
            leader = by_id.get(job.follow) if job.follow is not None else None
            return request_account((leader or job).request)

        if ctx.instance_owner:
            return [j for j in held if j.userid == ctx.userid or account(j) != "user"]
        return [j for j in held if j.userid == ctx.userid and account(j) == "user"]

    def adopt(self, new: list[HeldJob]) -> None:
        """Adopt newly held jobs: their records are read in pipelined batches, and the
        events the whole batch needs are sent at the end in one pipelined exchange, so
        10,000 jobs after a restart cost a few hundred round trips. Their memos are not
        sent here: the unit's first step (a device selection, a task's re-attaching
        poll) sends them, so a large adoption is not held up by 10,000 memos (a volatile
        memo outlives a service restart in the job-manager anyway)."""
        ctx = self.ctx
        t0 = time.monotonic()
        try:
            found = ctx.flux.held_records([job.id for job in new])
        except Exception as exc:
            ctx.log(syslog.LOG_WARNING, f"cannot read eventlogs of {len(new)} job(s): {exc}")
            return
        t1 = time.monotonic()
        self._touched, self._joins = {}, []
        # A few jobs are logged one by one; a large batch in one line at the end.
        self._verbose = len(new) < self.SUMMARY_AT
        self._groups = {u.group_key: u for u in ctx.active_units() if u.group_key is not None}
        try:
            self._adopt(new, found)
        finally:
            touched, joins = self._touched, self._joins
            self._touched, self._joins, self._groups = None, [], {}
            t2 = time.monotonic()
            posts = joins + [p for unit in touched.values() for p in self.history_posts(unit)]
            posted = ctx.post_many(posts)
            self._verbose = True
            if len(new) >= self.SUMMARY_AT:
                ctx.log(
                    syslog.LOG_INFO,
                    f"tracking {sum(1 for j in new if ctx.units.tracks(j.id))} of {len(new)} "
                    f"new held job(s) in "
                    f"{len(touched)} unit(s) in {time.monotonic() - t0:.1f}s (records "
                    f"{t1 - t0:.1f}s, units {t2 - t1:.1f}s, {posted} event(s) "
                    f"{time.monotonic() - t2:.1f}s)",
                )

    def _adopt(self, new: list[HeldJob], found: Mapping[int, JobRecord | None]) -> None:
        ctx = self.ctx
        adoptees: dict[int, Adoptee] = {}
        for job in new:
            if job.id not in found:
                ctx.log(syslog.LOG_DEBUG, f"{job.id}: eventlog not read yet")
                continue
            record = found[job.id]
            if record is not None:
                adoptees[job.id] = (job, record, events.replay(record.events))
        # Units recorded in eventlogs whose jobs the service does not track yet (a
        # restart): rebuilt from every member's history at once.
        recovered: dict[int, list[int]] = {}
        for jobid, (_job, _rec, history) in adoptees.items():
            if history.unit is not None and history.unit not in ctx.units:
                recovered.setdefault(history.unit, []).append(jobid)
        for unit_id, ids in recovered.items():
            try:
                self._recover_unit(unit_id, [adoptees[i] for i in ids])
            except Exception as exc:
                ctx.note_error(f"{type(exc).__name__}: {exc}")
                ctx.log(syslog.LOG_ERR, f"unit {unit_id}: cannot recover: {ctx.last_error}")
        for jobid, (job, record, history) in adoptees.items():
            if ctx.units.tracks(jobid):
                continue
            try:
                self._adopt_one(job, record, history)
            except Exception as exc:
                ctx.note_error(f"{type(exc).__name__}: {exc}")
                ctx.log(syslog.LOG_ERR, f"{job.id}: cannot adopt: {ctx.last_error}")

    def _recover_unit(self, unit_id: int, members: list[Adoptee]) -> None:
        """Rebuild a unit whose jobs' eventlogs name it, from all of them at once."""
        leader = next((m for m in members if m[0].id == unit_id), None)
        owner = leader or next((m for m in members if m[0].follow is None), None)
        request_attr = owner[0].request if owner else None
        t_submit = owner[0].t_submit if owner else members[0][0].t_submit
        if owner is None or owner[0].id != unit_id:
            # The job that started the unit is gone: its jobspec still has the request.
            gone = self._safe_record(unit_id)
            if gone is not None:
                request_attr = gone.system.get("qpu", request_attr)
                t_submit = gone.submit_time() or t_submit
        request = self._parse(request_attr, [m[0] for m in members])
        if request is None:
            return
        cwd = (owner[1] if owner else members[0][1]).cwd
        unit = self._new_unit(unit_id, members[0][0].userid, t_submit, request, cwd)
        unit.t_ready = min((m[2].inputs_at for m in members if m[2].inputs_at), default=None)
        self._restore(unit, events.merge_histories(m[2] for m in members))
        self._restore_session(unit, [m[2] for m in members])
        self.reservations.recovered(unit, {n for m in members for n in m[2].reservations_ended})
        for job, record, history in members:
            self._add_member(unit, job, record, history, via=None)
        self._recount(unit)
        level = syslog.LOG_INFO if self._verbose else syslog.LOG_DEBUG
        self.ctx.log(level, f"unit {unit_id}: recovered {len(members)} job(s)")
        self._settle(unit)

    def _adopt_one(self, job: HeldJob, record: JobRecord, history: events.History) -> None:
        ctx = self.ctx
        ctx.counters.adopted += 1
        recorded = ctx.units.get(history.unit) if history.unit is not None else None
        if recorded is not None and recorded.active:
            self._join(recorded, job, record, history, via="eventlog")
            return
        if job.follow is not None:
            leader = ctx.units.of_job(job.follow)
            if leader is not None:
                self._join(leader, job, record, history, via="follow")
                return
            self._follow_untracked(job)
            return
        request = self._parse(job.request, [job])
        if request is None:
            return
        if request.group is not None:
            key = (job.userid, request.group)
            joined = self._groups.get(key)
            if joined is not None and joined.active:
                self._join(joined, job, record, history, via="group")
                return
            late = ctx.units.released_group(key)
            if late is not None and late.release is not None:
                self.release.release_late(job, late.id, late.release, via="group")
                return
        unit = self._new_unit(job.id, job.userid, job.t_submit, request, record.cwd)
        unit.t_ready = history.inputs_at
        self._restore(unit, dict(history.programs))
        self._restore_session(unit, [history])
        self.reservations.recovered(unit, history.reservations_ended)
        self._add_member(unit, job, record, history, via=None)
        self._recount(unit)
        self._settle(unit)

    def _follow_untracked(self, job: HeldJob) -> None:
        """A follower whose leader the service does not track: the leader was released
        (ride its task now) or ended without a task (fail)."""
        assert job.follow is not None
        leader = self._safe_record(job.follow)
        released = Released.decode(leader.system) if leader else None
        if released is not None and released.task:
            release = {
                "task": released.task,
                "device": released.device or None,
                "info": released.info.to_dict(),
            }
            self.release.release_late(job, job.follow, release, via="follow")
            return
        if leader is not None and not leader.has_event("clean"):
            return  # still held but not adopted yet (e.g. it failed to parse): next scan
        note = (
            f"qpu: the job this one follows ({job.follow}) ended before its quantum task "
            "was ready, so there is no task to ride"
        )
        self.outcomes.fail_ids([job.id], note)

    def _safe_record(self, jobid: int) -> JobRecord | None:
        try:
            return self.ctx.flux.record(jobid)
        except Exception as exc:
            self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: lookup failed: {exc}")
            return None

    def _parse(self, attr: Any, jobs: Sequence[HeldJob]) -> QpuRequest | None:
        try:
            return parse_request(attr)
        except RequestError as exc:
            self.outcomes.fail_ids([j.id for j in jobs], f"qpu: {exc}")
            return None

    def _new_unit(
        self, unit_id: int, userid: int, t_submit: float, request: QpuRequest, cwd: str | None
    ) -> Unit:
        programs = [Program(index=i, path=p) for i, p in enumerate(programs_of(request))]
        unit = Unit(unit_id, userid, t_submit, request, cwd, programs)
        self.ctx.units.add(unit)
        if unit.group_key is not None:
            self._groups[unit.group_key] = unit
        return unit

    def _restore(self, unit: Unit, histories: Mapping[int, events.AttemptHistory]) -> None:
        """Continue each program where its eventlog left it."""
        ctx = self.ctx
        for program in unit.programs:
            h = histories.get(program.index)
            if h is None:
                continue
            attempt = program.recorded(h.attempt, frozenset(h.exclude), h.device_class)
            attempt.milestones = set(h.milestones)
            device = ctx.catalog.get(h.device) if h.device else None
            if h.token is not None and device is None:
                # Its device left the catalog: that attempt cannot be followed; the next
                # one (a new token) chooses again.
                ctx.log(syslog.LOG_WARNING, f"unit {unit.id}: device {h.device} unknown")
                program.attempt = attempt.following(h.device, None)
                continue
            if h.token is None or device is None:
                continue
            window = self.reservations.book.named(h.reservation) if h.reservation else None
            if h.reservation and window is None:
                ctx.log(
                    syslog.LOG_WARNING,
                    f"unit {unit.id}: reservation {h.reservation} is no longer configured: "
                    "its recorded task is followed without it",
                )
            # Recorded, maybe created: look for the task by its token first (IBM,
            # since the recorded time), else the same token gets the same task.
            attempt.resumed(
                device, h.token, since=h.since, ahead=h.ahead, window=window, merge=h.merge
            )
            if h.task:
                # A merged task's member reads its own program's result from it.
                place = h.merge.index if h.merge is not None else None
                task = TaskRef(device.vendor, device.name, h.task, h.token, program=place)
                attempt.tracked(task, queued_at=h.queued_at, attached=False)

    def _restore_session(self, unit: Unit, histories: Sequence[events.History]) -> None:
        """The unit's session as its eventlogs recorded it (its id is read back from a task
        that rode it when it is closed, or when a later task rides it); a session closed
        already is not restored. A loop's is the one its steps share."""
        recorded = next((h.session for h in histories if h.session is not None), None)
        if recorded is None or any(h.session_closed for h in histories):
            if recorded is not None:
                unit.session = UnitSession(
                    recorded.device, "", recorded.requested, "job", None, closing=True
                )
            return
        device = self.ctx.catalog.get(recorded.device)
        unit.session = UnitSession(
            recorded.device,
            device.vendor if device is not None else "",
            recorded.requested,
            recorded.mode,
            recorded.fingerprint,
        )
        self.sessions.restored(unit, recorded.joined)

    def _recount(self, unit: Unit) -> None:
        """Tasks found in the eventlogs exist: reserve them again (``recovering``: the
        ledger counts a token once, and a task that exists is counted whatever the
        limits say now). A recorded token without a task is reserved before its create."""
        for program in unit.programs:
            attempt = program.attempt
            if attempt.task is not None and attempt.device is not None:
                refusal = self.charges.reserve(unit, program, attempt, recovering=True)
                if refusal is not None:
                    self.ctx.log(syslog.LOG_WARNING, f"unit {unit.id}: {refusal}")

    def _add_member(
        self,
        unit: Unit,
        job: HeldJob,
        record: JobRecord,
        history: events.History,
        via: str | None,
    ) -> Member:
        member = Member(
            job.id,
            job.userid,
            size=record.size,
            spec=self._spec(record.jobspec),
            facts=set(history.facts),
        )
        self.ctx.units.add_member(unit, member)
        opened = self.waiting.opened(job.id)
        if opened is not None:
            # It waited for its other dependencies: its eventlog says when they stopped
            # holding its task, and its own unit's time counts from then.
            self._post(member, events.Inputs(after=opened.after))
            if unit.id == job.id:
                unit.t_ready = opened.at
        if via is not None and unit.id != job.id:
            self._post(member, events.Join(unit=unit.id, via=via))
        return member

    def _post(self, member: Member, record: events.QpuEvent) -> None:
        """One event to one job: now, or with the batch being adopted."""
        if self._touched is not None:
            self._joins.append((member, record))
        else:
            self.ctx.post(member, record)

    def _spec(self, jobspec: Mapping[str, Any]) -> str:
        """The jobspec as compact JSON; the same string as the last one when the
        jobspec is the same (a unit's jobs usually are: one string shared, not
        encoded again)."""
        last, text = self._last_spec
        if jobspec != last:
            text = json.dumps(jobspec, separators=(",", ":"))
            self._last_spec = (jobspec, text)
        return text

    def _join(
        self, unit: Unit, job: HeldJob, record: JobRecord, history: events.History, via: str
    ) -> None:
        self._add_member(unit, job, record, history, via=via)
        self._settle(unit)
        level = syslog.LOG_INFO if self._verbose else syslog.LOG_DEBUG
        self.ctx.log(level, f"{job.id}: rides unit {unit.id} ({via})")

    def _settle(self, unit: Unit) -> None:
        """The unit's jobs get the facts they lack: now, or at the end of the batch
        being adopted (their memo comes with the unit's first step)."""
        if self._touched is not None:
            self._touched[unit.id] = unit
            return
        self.sync_history(unit)

    def sync_history(self, unit: Unit) -> None:
        """Give every job of the unit the qpu-submit/qpu-task facts it lacks, so each
        eventlog alone is enough to recover the unit."""
        self.ctx.post_many(self.history_posts(unit))

    def history_posts(self, unit: Unit) -> list[tuple[Member, events.QpuEvent]]:
        """The events ``sync_history`` posts."""
        posts: list[tuple[Member, events.QpuEvent]] = []
        for program in unit.programs:
            attempt = program.attempt
            records: list[events.QpuEvent] = []
            if attempt.token is not None and attempt.device is not None and attempt.submit_posted:
                records.append(submit_record(unit, program))
            if attempt.task is not None:
                records.append(task_record(unit, program))
            for record in records:
                for member in list(unit.jobs.values()):
                    if (record.name, program.index, attempt.number) not in member.facts:
                        posts.append((member, record))
        return posts

    def job_left(self, jobid: int) -> None:
        """A tracked job is no longer held: released or failed elsewhere, or cancelled."""
        ctx = self.ctx
        unit = ctx.units.job_left(jobid)
        if unit is None:
            return
        unit_id = unit.id
        record = self._safe_record(jobid)
        elsewhere = record is not None and record.has_event(events.RELEASE)
        how = "released elsewhere" if elsewhere else "ended"
        ctx.log(syslog.LOG_INFO, f"{jobid}: left unit {unit_id} ({how})")
        if unit.jobs or not unit.active:
            return
        if elsewhere or unit.release is not None:
            # Released by hand, or part of the unit already released: its task may be
            # read, so keep it running.
            self.outcomes.finish(unit, UnitState.RELEASED)
            return
        self.outcomes.abandon(unit)
