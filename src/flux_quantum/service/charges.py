"""The site's policy in the handler service: who may use which device, the reservation
before a vendor task is created, and the settlement when it ends.

This part asks ``flux_quantum.site.policy.SitePolicy`` (access rules, quotas, the
ledger) on behalf of the other parts: ``Selection`` leaves out the devices a job may not
use before probing and drops the ones its task would not fit, ``Submission`` reserves
the task's estimate before the create (a refusal fails the job, and no task is created),
and notes the task's id once created; ``Lookups`` hands over every attempt left behind,
so a reservation whose create never went out is released and a task that may still run
is watched (one poll per task, in a worker) until it ends and is settled at its actual
cost. A create that went out without an answer is never released here: ``Lookups`` asks
the vendor for its task by token first, and hands back the task (``watch``) or the
vendor's word that there is none (``release``). A settled cost goes to the job's eventlog (``qpu-cost``) and memo (``qpu_cost``).
After a restart the recovered attempts are reserved again (``recovering``: never
counted twice, the ledger is keyed by the task's token) and the ledger's open
reservations that no held job owns are settled, released (their token never reached
the eventlog, so no create went out) or looked up (``sweep``).

A task in a reserved window (Braket Direct, ``Attempt.window``) is reserved at nothing
(the window is paid, booked in the ledger when the service starts) and settled at
nothing, with its QPU seconds in the window (from when it was first seen RUNNING, else
from when it could start, to when it was seen ended, clipped to the window) and the
share of the window's cost they are.

The ledger unreachable (a PostgreSQL ledger's server down or restarting:
``LedgerUnavailable``): no task is created without its reservation. ``reserve`` raises
it to ``Submission``, which holds the job and tries again through the service's retry policy;
the writes that must not be lost (a settlement, a release, a task id, a recovered
task's reservation) wait in order in ``backlog`` and are written when the ledger is back
(each keyed by its token: nothing counted twice). The outage is said once, at warning
level, and again when it ends; ``status`` shows it (``ledger.unavailable``).

Who asks is the job's owner as Flux knows it (the plugin's list: the job's userid) and
the bank of its current jobspec (where flux-accounting runs and the jobspec names none
yet, the user's default bank in its database: ``SitePolicy.requester``), never anything
else the user set. Without a site
policy (``site=None``) every verb is a no-op. It never decides a limit itself (the
deciders do) and never calls a vendor on the reactor thread.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.errors import CommandError, FluxQuantumError
from flux_quantum.protocol import events
from flux_quantum.protocol.events import MergeSlot
from flux_quantum.protocol.jobspec import COST_MEMO
from flux_quantum.service.cancels import Cancels
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.reservations import Reservations
from flux_quantum.service.retry import Retries
from flux_quantum.service.state import Attempt, Program, Unit
from flux_quantum.site import reservations
from flux_quantum.site.access import Requester
from flux_quantum.site.ledger import ChargeRecord, LedgerUnavailable
from flux_quantum.site.policy import SitePolicy
from flux_quantum.site.quota import headroom
from flux_quantum.vendors.base import TaskRef, TaskSnapshot, TaskState
from flux_quantum.vendors.errors import NotFound


@dataclass
class Billing:
    """A task the service no longer tracks for a job but whose cost is not settled yet:
    polled until it ends. ``jobs`` get its ``qpu-cost`` event and memo. ``window``: the
    reserved window it runs in, ``created`` and ``running_seen`` bound its QPU time."""

    token: str
    device: Device
    task: TaskRef
    shots: int
    unit: int
    jobs: tuple[int, ...]
    index: int = 0
    attempt: int = 0
    attached: bool = True
    window: reservations.Reservation | None = None
    created: float | None = None
    running_seen: float | None = None
    merged: MergeSlot | None = None  # its job's place in a merged task: it pays its share
    due: float = 0.0
    busy: bool = False
    retry: Retries = field(default_factory=Retries)

    def qpu_seconds(self, ended: float) -> float:
        """Its QPU time in its window: from RUNNING first seen (else from when it could
        start: the window's start or its creation) to ``ended``, clipped to the window."""
        window = self.window
        if window is None:
            return 0.0
        start = self.running_seen
        if start is None:
            start = max(window.start, self.created or window.start)
        start = max(start, window.start)
        return max(0.0, min(ended, window.end) - start)


@dataclass(frozen=True)
class Trail:
    """What a job's eventlog says of one token (``Charges.sweep``)."""

    task: str | None
    released: bool
    submitted: bool  # its qpu-submit is there: the create may have gone out
    window: str | None = None
    merge: MergeSlot | None = None
    since: float | None = None


# Where a reservation goes whose create went out with no task named: (its billing, the
# time before its create, whether to cancel the task once found).
LookUp = Callable[[Billing, float, bool], None]


class Charges:
    def __init__(
        self,
        ctx: ServiceContext,
        site: SitePolicy | None,
        reservations: Reservations,
        cancels: Cancels,
    ) -> None:
        self.ctx = ctx
        self.site = site
        self.reservations = reservations
        self.cancels = cancels
        self.watching: dict[str, Billing] = {}
        self._settled: set[str] = set()
        self.swept = False
        # The ledger unreachable: since when and why (said once), the writes that wait
        # for it (in order), and when they are tried again.
        self.outage: str | None = None
        self.outage_since: float | None = None
        self.backlog: list[tuple[str, Callable[[], object]]] = []  # what, the write
        self.backlog_retry = Retries()
        self.backlog_due = 0.0
        self.held_for_ledger = 0  # reservations put off by an outage (a counter)

    # -- the ledger unreachable

    def unavailable(self, error: LedgerUnavailable) -> None:
        """Note an outage; the first failure of one is said (warning), no other."""
        if self.outage is None:
            self.outage = str(error)
            self.outage_since = self.ctx.clock()
            self.ctx.log(
                syslog.LOG_WARNING,
                f"ledger: {error}; QPU jobs wait held with no task until it is back, "
                "settlements are kept until then",
            )

    def available(self) -> None:
        """A ledger call succeeded: an outage is over (said once)."""
        if self.outage is not None:
            lasted = self.ctx.clock() - (self.outage_since or self.ctx.clock())
            self.outage = self.outage_since = None
            self.ctx.log(syslog.LOG_INFO, f"ledger: reachable again after {lasted:.0f}s")

    def _later(self, what: str, write: Callable[[], object]) -> None:
        """Run ``write`` now, or after the writes already waiting for the ledger; kept
        in order until the ledger takes it."""
        if not self.backlog:
            try:
                write()
                self.available()
                return
            except LedgerUnavailable as exc:
                self.unavailable(exc)
                self.backlog_due = self.ctx.clock() + self.ctx.retry.delay(1)
        self.backlog.append((what, write))

    def _drain(self, now: float) -> None:
        """The writes waiting for the ledger, in order, while it takes them."""
        if not self.backlog or now < self.backlog_due:
            return
        while self.backlog:
            what, write = self.backlog[0]
            try:
                write()
            except LedgerUnavailable as exc:
                self.unavailable(exc)
                decision = self.ctx.retry.failed(self.backlog_retry, retryable=True)
                self.backlog_due = now + decision.delay
                self.ctx.log(syslog.LOG_DEBUG, f"ledger: {what} waits: {exc}")
                return
            except FluxQuantumError as exc:
                self.ctx.log(syslog.LOG_WARNING, f"ledger: {what}: {exc}")
            self.backlog.pop(0)
            self.backlog_retry.clear()
            self.available()

    @property
    def enabled(self) -> bool:
        return self.site is not None

    # -- before selection

    def requester(self, unit: Unit) -> Requester:
        """The unit's owner (the job's userid, from Flux) and the bank of the current
        jobspec of its first job, else flux-accounting's default bank of that user
        (held jobs included: the charge is reserved before the release)."""
        assert self.site is not None
        jobspec = next((m.jobspec for m in unit.jobs.values() if m.spec != "{}"), {})
        return self.site.requester(unit.userid, jobspec)

    def not_allowed(self, unit: Unit, devices: Iterable[Device]) -> dict[str, str]:
        """Devices the unit's owner may not use, with the access rule's sentence."""
        if self.site is None:
            return {}
        return self.site.not_allowed(self.requester(unit), devices)

    def excluded(
        self, unit: Unit, program: Program, attempt: Attempt, devices: Iterable[Device]
    ) -> dict[str, str]:
        """Devices the task may not go to now: not allowed, or over a quota."""
        if self.site is None:
            return {}
        request = unit.request
        pool = list(devices)
        try:
            return self.site.excluded(
                self.requester(unit),
                pool,
                token=self.token(unit, program, attempt),
                jobid=unit.id,
                shots=request.shots,
                t=self.ctx.clock(),
                job_cap=request.max_cost,
            )
        except LedgerUnavailable as exc:
            # The quotas are checked again by the reservation, which waits for the ledger.
            self.unavailable(exc)
            return self.site.not_allowed(self.requester(unit), pool)

    def batch_refusal(self, unit: Unit, devices: Iterable[Device]) -> str | None:
        """Before a batch's first task (a cut's subexperiments, ``qpu.programs``): the
        quotas' refusal of all its tasks at once, each at the priciest of ``devices``
        (those its request allows), or None. Once any of its tasks is reserved, or
        when the ledger cannot be reached (each reservation waits for it), None."""
        site = self.site
        if site is None or len(unit.programs) < 2:
            return None
        if any(p.attempt.reserved or p.attempt.task is not None for p in unit.programs):
            return None
        first = unit.programs[0]
        try:
            decision = site.check_batch(
                self.requester(unit),
                devices,
                tasks=len(unit.programs),
                token=self.token(unit, first, first.attempt),
                jobid=unit.id,
                shots=unit.request.shots,
                t=self.ctx.clock(),
            )
        except LedgerUnavailable as exc:
            self.unavailable(exc)
            return None
        if decision is None or decision.allowed:
            return None
        return decision.reason

    @staticmethod
    def token(unit: Unit, program: Program, attempt: Attempt) -> str:
        return attempt.token or events.task_token(
            unit.id, unit.t_submit, program.index, attempt.number
        )

    # -- around the create

    def reserve(
        self, unit: Unit, program: Program, attempt: Attempt, *, recovering: bool = False
    ) -> str | None:
        """Reserve the attempt's estimate before its task is created; the refusal's
        sentence, or None when reserved (or no site policy). ``recovering``: the task
        exists already (found after a restart) and is counted whatever the limits say.
        Raises LedgerUnavailable when the ledger cannot be reached (the caller holds
        the job and tries again; nothing was reserved, or it was reserved whole and the
        next try finds it); a recovered task's reservation then waits in ``backlog``."""
        if self.site is None or attempt.reserved:
            return None
        assert attempt.device is not None
        if recovering and attempt.task is not None and self._recorded(unit, program, attempt):
            # A restart finds the task where its predecessor left it: one read, no
            # write and no memo (the job's qpu_cost memo outlived the restart).
            attempt.reserved = True
            return None
        request = unit.request
        # In a reserved window the task costs nothing more: estimate 0.
        window = {"reservation": attempt.window} if attempt.window is not None else {}
        charge = self.site.charge(
            attempt.device,
            self.requester(unit),
            token=self.token(unit, program, attempt),
            jobid=unit.id,
            shots=request.shots,
            t=self.ctx.clock(),
            job_cap=request.max_cost,
            **window,
        )
        try:
            reservation = self.site.reserve(charge, recovering=recovering)
        except LedgerUnavailable as exc:
            self.unavailable(exc)
            if not recovering:
                self.held_for_ledger += 1
                raise
            # The task exists: its charge is recorded when the ledger is back.
            site = self.site
            attempt.reserved = True
            self.backlog.append((f"task {charge.token} reserved", lambda: _reserve(site, charge)))
            if attempt.task is not None:
                self.attach(attempt)
            return None
        except FluxQuantumError as exc:
            return f"the site's ledger cannot reserve the task: {exc}"
        self.available()
        if not reservation.allowed:
            return reservation.decision.reason
        attempt.reserved = True
        attempt.budget = headroom(request.max_cost, reservation.decision)
        if recovering and attempt.task is not None:
            self.attach(attempt)
        self.show(unit.id, list(unit.jobs))
        return None

    def _recorded(self, unit: Unit, program: Program, attempt: Attempt) -> bool:
        """Whether the ledger has the attempt's charge with its task id already."""
        assert self.site is not None and attempt.task is not None
        try:
            record = self.site.ledger.record(self.token(unit, program, attempt))
        except FluxQuantumError:
            return False
        return record is not None and record.task_id == attempt.task.task_id

    def attach(self, attempt: Attempt) -> None:
        """Note the vendor's task id beside its reservation."""
        if attempt.token is not None and attempt.task is not None:
            self._attach(attempt.token, attempt.task.task_id)

    def _attach(self, token: str, task_id: str) -> None:
        if self.site is None:
            return
        ledger = self.site.ledger
        try:
            self._later(f"task {task_id} attached", lambda: ledger.attach(token, task_id))
        except FluxQuantumError as exc:
            self.ctx.log(syslog.LOG_WARNING, f"ledger: {exc}")

    def release(self, token: str | None, reason: str) -> None:
        """No task was (or will be) created for ``token``: its estimate no longer counts."""
        if self.site is None or token is None:
            return
        site, now = self.site, self.ctx.clock()
        try:
            self._later(
                f"task {token} released", lambda: site.release(token, now=now, reason=reason)
            )
        except FluxQuantumError as exc:
            self.ctx.log(syslog.LOG_WARNING, f"ledger: {exc}")

    # -- when a task ends or is left behind

    def ended(self, unit: Unit, program: Program, attempt: Attempt, snap: TaskSnapshot) -> None:
        """A tracked task reached a final state: settle it."""
        if self.site is None or attempt.token is None or attempt.device is None:
            return
        if attempt.task is None or attempt.token in self._settled:
            return
        billing = self.billing(unit, program, attempt, list(unit.jobs), attempt.task)
        self._finish(billing, snap.state, snap.t)

    def leave(self, unit: Unit, program: Program, attempt: Attempt, jobs: Sequence[int]) -> None:
        """The service stops tracking ``attempt`` (a fail-over, or its unit was
        released, failed or abandoned): release a reservation whose create never went
        out, watch a task that may still run (and be billed) until it ends. A create
        that went out without an answer is not for here: ``Lookups`` asks the vendor."""
        if self.site is None or attempt.token is None or not attempt.reserved:
            return
        if attempt.token in self._settled or attempt.token in self.watching:
            return
        if attempt.task is None:
            self.release(attempt.token, "no task was created: the job left or failed over")
            return
        if attempt.device is None:
            return
        billing = self.billing(unit, program, attempt, jobs, attempt.task)
        snap = attempt.snapshot
        if snap is not None and snap.terminal:
            self._finish(billing, snap.state, snap.t)
            return
        if snap is not None:
            # Just seen running or queued: the next look is not due at once.
            billing.due = snap.t + self._interval(billing)
        self.watching[attempt.token] = billing

    def watch(self, billing: Billing) -> None:
        """A task found by its token after its job left (``Lookups``): its id beside its
        reservation, then watched until it ends and settled at what the vendor bills."""
        if self.site is None or billing.token in self._settled or billing.token in self.watching:
            return
        self._attach(billing.token, billing.task.task_id)
        self.watching[billing.token] = billing

    def _interval(self, billing: Billing) -> float:
        """How often a watched task is looked at: a window task's QPU time is measured
        by these looks, so at most every device check."""
        cold = self.ctx.schedule.cold_max_interval
        if billing.window is None:
            return cold
        return min(cold, self.ctx.options.device_check_interval)

    @staticmethod
    def billing(
        unit: Unit, program: Program, attempt: Attempt, jobs: Sequence[int], task: TaskRef
    ) -> Billing:
        """What settles ``attempt``'s ``task`` once it ends."""
        assert attempt.token and attempt.device
        return Billing(
            token=attempt.token,
            device=attempt.device,
            task=task,
            shots=unit.request.shots,
            unit=unit.id,
            jobs=tuple(jobs),
            index=program.index,
            attempt=attempt.number,
            attached=attempt.attached,
            window=attempt.window,
            created=attempt.queued_at,
            running_seen=attempt.running_seen,
            merged=attempt.merge,
        )

    def _finish(self, billing: Billing, state: TaskState, ended: float | None = None) -> None:
        """Settle now, or fetch a time-billed simulator's run time first (a worker).
        ``ended``: when the task was seen ended (a window task's QPU time ends there)."""
        self.watching.pop(billing.token, None)
        self._settled.add(billing.token)
        if billing.window is not None:
            at = self.ctx.clock() if ended is None else ended
            self._settle(billing, state, None, qpu_seconds=billing.qpu_seconds(at))
            return
        if state is not TaskState.COMPLETED or billing.device.price.per_minute == 0:
            self._settle(billing, state, None)
            return
        try:
            vendor = self.ctx.vendor(billing.task.vendor)
        except (ValueError, FluxQuantumError) as exc:
            self.ctx.log(syslog.LOG_WARNING, f"task {billing.task.task_id}: no result: {exc}")
            self._settle(billing, state, None)
            return

        def fetch() -> float | None:
            return vendor.billed_seconds(billing.task)

        def done(seconds: Any, error: BaseException | None) -> None:
            if error is not None:
                self.ctx.log(
                    syslog.LOG_WARNING,
                    f"task {billing.task.task_id}: no billed run time ({error}); "
                    "settled at the device's minimum",
                )
            self._settle(billing, state, None if error is not None else seconds)

        self.ctx.workers.submit(fetch, done)

    def _settle(
        self,
        billing: Billing,
        state: TaskState,
        seconds: float | None,
        qpu_seconds: float | None = None,
    ) -> None:
        assert self.site is not None
        window: dict[str, Any] = {}
        if billing.window is not None:
            window = {"reservation": billing.window, "qpu_seconds": qpu_seconds}
        if billing.merged is not None:
            window["merged"] = (billing.merged.index, billing.merged.shots)
        site, now = self.site, self.ctx.clock()

        def settle() -> None:
            record = site.settle(
                billing.token,
                billing.device,
                shots=billing.shots,
                state=state.value,
                now=now,
                billed_seconds=seconds,
                task_id=billing.task.task_id,
                **window,
            )
            self._announce(billing, record, state)

        try:
            self._later(f"task {billing.task.task_id} settled", settle)
        except FluxQuantumError as exc:
            self.ctx.log(syslog.LOG_WARNING, f"ledger: {exc}")

    def _announce(self, billing: Billing, record: ChargeRecord, state: TaskState) -> None:
        """``qpu-cost`` on the task's jobs, and their ``qpu_cost`` memo."""
        assert self.site is not None
        cost = events.Cost(
            index=billing.index,
            attempt=billing.attempt,
            token=billing.token,
            device=billing.device.name,
            cost=round(float(record.cost or 0.0), 6),
            estimate=round(record.estimate, 6),
            currency=self.site.ledger.currency,
            state=state.value,
            task=billing.task.task_id,
            billed_seconds=record.billed_seconds,
        )
        jobs = list(billing.jobs)
        try:
            outcomes = self.ctx.flux.post_events([(j, cost.name, cost.to_context()) for j in jobs])
        except (CommandError, OSError) as exc:
            outcomes = [exc] * len(jobs)
        for jobid, error in zip(jobs, outcomes, strict=True):
            if error is not None:
                self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: no {cost.name} event: {error}")
        self.show(billing.unit, billing.jobs)
        self.ctx.log(
            syslog.LOG_INFO,
            f"task {billing.task.task_id} on {billing.device.name} {state.value}: cost "
            f"{record.cost:g} {self.site.ledger.currency}",
        )

    def show(self, unit_id: int, jobs: Iterable[int]) -> None:
        """The ``qpu_cost`` memo: what the job's tasks count now (settled + reserved)."""
        if self.site is None:
            return
        try:
            amount = round(self.site.job_cost(unit_id), 6)
        except LedgerUnavailable as exc:
            self.unavailable(exc)
            return  # shown again at its next change
        jobs = list(jobs)
        try:
            outcomes = self.ctx.flux.memos([(jobid, {COST_MEMO: amount}) for jobid in jobs])
        except OSError as exc:
            outcomes = [exc] * len(jobs)
        for jobid, error in zip(jobs, outcomes, strict=True):
            if error is not None:
                self.ctx.log(syslog.LOG_DEBUG, f"{jobid}: memo failed: {error}")

    # -- tasks left behind

    def check(self, now: float) -> None:
        """Poll the watched tasks that are due (workers); settle those that ended; write
        what waits for the ledger."""
        self._drain(now)
        for billing in list(self.watching.values()):
            if billing.busy or billing.due > now:
                continue
            self._poll(billing)

    def _poll(self, billing: Billing) -> None:
        ctx = self.ctx
        try:
            vendor = ctx.vendor(billing.task.vendor)
        except (ValueError, FluxQuantumError) as exc:
            ctx.log(syslog.LOG_WARNING, f"task {billing.task.task_id}: not settled: {exc}")
            self.watching.pop(billing.token, None)
            return
        billing.busy = True
        task, attached = billing.task, billing.attached

        def poll() -> TaskSnapshot:
            return vendor.poll(task) if attached else vendor.attach_and_poll(task)

        def done(snap: Any, error: BaseException | None) -> None:
            billing.busy = False
            if isinstance(error, NotFound):
                self.watching.pop(billing.token, None)
                self.release(billing.token, f"the vendor does not know task {task.task_id}")
                return
            if error is not None:
                # A settlement never gives up: the ledger must end with the vendor's bill.
                decision = ctx.retry.failed_call(billing.retry, error, other_limit=None)
                billing.due = ctx.clock() + decision.delay
                level = syslog.LOG_WARNING if decision.first else syslog.LOG_DEBUG
                ctx.log(level, f"task {task.task_id}: not settled yet, will retry: {error}")
                return
            billing.attached = True
            billing.retry.clear()
            if snap.state is TaskState.RUNNING and billing.running_seen is None:
                billing.running_seen = snap.t
            if snap.terminal:
                self._finish(billing, snap.state, snap.t)
            else:
                billing.due = ctx.clock() + self._interval(billing)

        ctx.workers.submit(poll, done)

    def sweep(self, held: Iterable[int], look_up: LookUp) -> None:
        """Once, after the first scan that adopted the held jobs: the ledger's open
        reservations that no tracked attempt owns. One with a task is watched until the
        task ends; one whose job is no longer held (the job ended, or it was released on
        another task) and whose token never reached its eventlog is released (the token
        is recorded before the create); one whose token did, with no task named, goes to
        ``look_up`` (``Lookups``: the vendor is asked for the task by its token)."""
        if self.site is None or self.swept:
            return
        self.swept = True
        held_ids = set(held)
        tracked = {a.token for u in self.ctx.units for a in u.attempts() if a.token is not None}
        try:
            records = self.site.ledger.open_reservations()
        except LedgerUnavailable as exc:
            self.unavailable(exc)
            self.swept = False  # at the next scan
            return
        for record in records:
            if record.token in tracked or record.token in self.watching:
                continue
            if record.jobid in held_ids or self.ctx.units.tracks(record.jobid):
                continue
            self._orphan(record, look_up)

    def _orphan(self, record: ChargeRecord, look_up: LookUp) -> None:
        device = self.ctx.catalog.get(record.device)
        try:
            trail = self._in_eventlog(record)
        except Exception as exc:  # tried again at the service's next start
            self.ctx.log(syslog.LOG_DEBUG, f"{record.jobid}: lookup failed: {exc}")
            return
        task_id = record.task_id or trail.task
        if task_id is None and not trail.submitted:
            self.release(record.token, "no task was created: the job left before its create")
            return
        if device is None:
            self.ctx.log(
                syslog.LOG_WARNING,
                f"ledger: the task of token {record.token} is on {record.device}, no longer "
                "in the catalog: left reserved",
            )
            return
        slot = trail.merge
        billing = Billing(
            token=record.token,
            device=device,
            task=TaskRef(
                record.vendor,
                device.name,
                task_id or "",
                slot.key if slot is not None else record.token,
                program=slot.index if slot is not None else None,
            ),
            shots=record.shots,
            unit=record.jobid,
            jobs=(record.jobid,),
            attached=False,
            window=self.reservations.book.named(trail.window) if trail.window else None,
            merged=slot,
        )
        if task_id is None:
            # The token went out, its task was never named: the vendor says.
            since = trail.since if trail.since is not None else record.reserved_at
            look_up(billing, since, not trail.released)
            return
        self.watching[record.token] = billing
        if not trail.released:
            # Its job left while held (cancelled while no service ran): nobody will
            # read the result, so the task is cancelled as a live service would have.
            self.cancels.cancel(billing.task, f"job {billing.unit} left while held")

    def _in_eventlog(self, record: ChargeRecord) -> Trail:
        """What the job's eventlog says of the charge's token: the task it names, whether
        the job was released (whose consumer may read the task's result), and the
        ``qpu-submit`` of the token (the reserved window the task was created in, its
        place in a merged task, when its create went out)."""
        job = self.ctx.flux.record(record.jobid)
        if job is None:
            # Nothing to tell (the job is gone from Flux): the vendor is asked, and the
            # task, if any, left to run.
            return Trail(None, True, submitted=True)
        task = submit = None
        for event in job.events:
            decoded = events.decode(event)
            if isinstance(decoded, events.TaskCreated) and decoded.token == record.token:
                task = decoded.task
            elif isinstance(decoded, events.Submit) and decoded.token == record.token:
                submit = decoded
        request = job.system.get("qpu")
        if isinstance(request, Mapping) and request.get("group") is not None:
            released = True  # a fan-out group's other jobs may have been released on it
        else:
            released = events.replay(job.events).released
        if submit is None:
            return Trail(task, released, submitted=False)
        return Trail(
            task,
            released,
            submitted=True,
            window=submit.reservation,
            merge=submit.slot,
            since=submit.since,
        )

    def close(self) -> None:
        if self.site is not None:
            self.site.close()


def _reserve(site: SitePolicy, charge: Any) -> None:
    """A recovered task's reservation, written when the ledger is back."""
    site.reserve(charge, recovering=True)
