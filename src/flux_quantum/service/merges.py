"""Merged tasks: held jobs' programs that go out as one vendor task.

Where the site merges tasks (``[quantum.merge]``, ``flux_quantum.site.merging``), a program
whose device was chosen waits here, in the *pool*, instead of being created at once:
``offer`` groups the pool's programs on its device into batches (``merging.batches``:
same device, vendor and paying account, users only as the site allows, within the
vendor's limits) and says whether the batch the program is in goes out now or when
(``merging.decide``: at once on an idle device or a full task, else when its first
member has waited as long as merging can save it, at most ``max_wait``). A batch that
goes is handed back to ``Submission``, which records each member's place (``MergeSlot``) in
its job's eventlog before the one create (``Vendor.submit_set``). A program waiting in
the pool has no task and takes no slot of its device; the batch takes one once sent.

This part owns the pool and nothing else: it never posts, creates or releases. A program
whose unit ended or whose attempt changed (a fail-over) leaves the pool at the next look.
"""

from __future__ import annotations

import hashlib
import syslog
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from flux_quantum.catalog import Device
from flux_quantum.protocol.merged_tasks import Limits
from flux_quantum.protocol.request import ACCOUNTS
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.state import Attempt, Phase, Program, Unit
from flux_quantum.site import merging
from flux_quantum.site.access import Requester

MERGED_CLASS = "qpu"  # simulators bill by time and take no merged tasks


def _limits(device: Device) -> Limits | None:
    """What one merged task on ``device`` may hold (None: it takes none): its vendor's
    limits, on a QPU."""
    if device.device_class != MERGED_CLASS:
        return None
    return merging.device_limits(device.vendor, device.id)


def merge_key(tokens: Sequence[str]) -> str:
    """The merged task's idempotency token at the vendor, from its members' own tokens
    in the task's order: the same members give the same key (a create retried after a
    lost answer or a restart gets the same task)."""
    digest = hashlib.sha256("\n".join(tokens).encode()).hexdigest()[:32]
    return f"merge-{digest}"


@dataclass
class _Sent:
    """A merged task recorded in its members' eventlogs and not created yet: its members
    in the task's order (each with the attempt recorded) and what the create sends."""

    members: list[tuple[Unit, Program, Attempt]]
    programs: list[tuple[str, int]]


@dataclass
class _Gathering:
    """After a restart: the recorded members of a merged task found so far, by place."""

    size: int
    since: float
    found: dict[int, tuple[Unit, Program, Attempt]] = field(default_factory=dict)


@dataclass
class _Pooled:
    unit: Unit
    program: Program
    attempt: Attempt
    candidate: merging.Candidate


@dataclass(frozen=True)
class Offer:
    """What ``offer`` says: ``members`` go out now as one task (the program offered
    among them, in the task's order; one member: it goes alone), or the program waits
    until ``due``. ``text``: the line for the job's memo (``merging.explain``)."""

    members: tuple[tuple[Unit, Program], ...] = ()
    due: float | None = None
    text: str = ""
    # While the batch waits: every member's line (a job that joined changes them all).
    waiting: tuple[tuple[Unit, str], ...] = ()

    @property
    def send(self) -> bool:
        return bool(self.members)


class Merges:
    def __init__(
        self,
        ctx: ServiceContext,
        config: merging.MergeConfig | None,
        requester: Callable[[Unit], Requester],
    ) -> None:
        self.ctx = ctx
        self.config = config
        self._requester = requester
        self._pool: dict[tuple[int, int], _Pooled] = {}
        self._sent: dict[str, _Sent] = {}
        self._gathering: dict[str, _Gathering] = {}
        self._joined: dict[str, float] = {}  # by device: when a program last joined

    # -- reading

    def alone_reason(
        self, unit: Unit, program: Program, device: Device | None = None, *, coming: bool = False
    ) -> str | None:
        """Why the program's task is its own (None: it may be merged), on its attempt's
        device or, before one is chosen, on ``device``; ``coming``: whether it may come
        to the pool later (its program not read yet is no reason)."""
        attempt = program.attempt
        device = device or attempt.device
        if self.config is None or not self.config.enabled or device is None:
            return "merging is off"
        if attempt.alone is not None:
            return attempt.alone
        if unit.request.merge == "no":
            return "its job opted out (qpu.merge=no)"
        if attempt.window is not None:
            return "it runs in a reserved window"
        if len(unit.programs) > 1:
            return "its job has several programs (they go out together as its own tasks)"
        if unit.request.session is not None or unit.session is not None:
            return "it rides a vendor session"
        if _limits(device) is None:
            return f"{device.name} takes no merged tasks"
        if not self.config.covers(device.name):
            return f"{device.name} is not in [quantum.merge] devices"
        if program.text is None and not coming:
            return "its program is not read yet"
        return None

    def status(self) -> dict[str, object] | None:
        """The site's rule and the programs waiting per device (None: no merging)."""
        if self.config is None:
            return None
        self._prune()
        waiting: dict[str, int] = {}
        for pooled in self._pool.values():
            waiting[pooled.candidate.device] = waiting.get(pooled.candidate.device, 0) + 1
        return {
            "config": self.config.to_dict(),
            "rule": self.config.describe(),
            "waiting": dict(sorted(waiting.items())),
        }

    # -- the pool

    def offer(self, unit: Unit, program: Program, now: float) -> Offer:
        """Put the program in the pool (once) and say whether its batch goes now."""
        attempt = program.attempt
        assert attempt.device is not None and program.text is not None
        key = (unit.id, program.index)
        pooled = self._pool.get(key)
        if pooled is None or pooled.attempt is not attempt:
            pooled = _Pooled(unit, program, attempt, self._candidate(unit, program, now))
            self._pool[key] = pooled
            attempt.pooled = True
            self._joined[attempt.device.name] = now
        self._prune()
        device = attempt.device
        here = [p for p in self._pool.values() if p.candidate.device == device.name]
        assert self.config is not None
        batches = merging.batches([p.candidate for p in here], _limits(device), self.config)
        mine = next(b for b in batches if any(m.unit == unit.id for m in b.members))
        idle, queue = self._queue(device)
        # A burst is all in once no job that may join is still on its way and a scan
        # of the held jobs since the last one joined found no more.
        coming = self._coming(device)
        quiet_at = self._joined.get(device.name, now) + self.ctx.options.scan_interval
        decision = merging.decide(
            mine,
            now=now,
            device_idle=idle,
            expected_queue_wait=queue,
            config=self.config,
            complete=coming == 0 and now >= quiet_at,
        )
        text = merging.explain(mine, decision, pooled.candidate.jobid)
        if not decision.send:
            due = decision.retry_at
            if coming == 0 and len(mine.members) > 1 and (due is None or quiet_at < due):
                due = quiet_at  # looked at again when the burst may be all in
            by_id = {p.unit.id: p for p in here}
            lines = tuple(
                (by_id[m.unit].unit, merging.explain(mine, decision, m.jobid)) for m in mine.members
            )
            return Offer(due=due, text=text, waiting=lines)
        by_unit = {p.unit.id: p for p in here}
        members = []
        for candidate in mine.members:
            taken = by_unit[candidate.unit]
            members.append((taken.unit, taken.program))
            self._pool.pop((taken.unit.id, taken.program.index), None)
            taken.attempt.pooled = False
        return Offer(members=tuple(members), text=text)

    def _coming(self, device: Device) -> int:
        """Programs of held jobs that may still join ``device``'s pool: not in it, no
        task recorded, their device not chosen yet (or this one)."""
        count = 0
        for unit in self.ctx.active_units():
            request = unit.request
            if request.device not in (None, device.name, device.id):
                continue
            if request.vendor not in (None, device.vendor):
                continue
            for program in unit.programs:
                attempt = program.attempt
                if attempt.pooled or attempt.phase not in (Phase.SELECT, Phase.SUBMIT):
                    continue
                if attempt.submit_posted or attempt.device not in (None, device):
                    continue
                if self.alone_reason(unit, program, device, coming=True) is None:
                    count += 1
        return count

    # -- recorded merged tasks

    def sent(
        self,
        key: str,
        members: Sequence[tuple[Unit, Program]],
        programs: Sequence[tuple[str, int]],
    ) -> None:
        """The merged task ``key`` is recorded in every member's eventlog: what its
        create sends, until it exists (``forget``)."""
        self._sent[key] = _Sent([(u, p, p.attempt) for u, p in members], list(programs))

    def programs(self, key: str) -> list[tuple[str, int]] | None:
        sent = self._sent.get(key)
        return None if sent is None else sent.programs

    def forget(self, key: str) -> None:
        """The merged task exists (or was refused): nothing more to create."""
        self._sent.pop(key, None)
        self._gathering.pop(key, None)

    def again(self, unit: Unit, program: Program, now: float) -> Offer | None:
        """A recorded member is due to create its merged task again. The members to
        create it for (every one still waiting for it), an ``Offer`` with a ``due`` when
        a restart has not found them all yet, or None when its create is under way.

        After a restart the members are gathered by their recorded places; the task is
        created again with the same key once all are found, or once ``max_wait`` has
        passed (a job that left while the service was down: its place is filled with a
        copy of another member's program, so that every place stays where the eventlogs
        say; the vendor's idempotent create returns the task if it was made)."""
        attempt = program.attempt
        slot = attempt.merge
        assert slot is not None
        sent = self._sent.get(slot.key)
        if sent is None:
            return self._gather(unit, program, now)
        waiting = [
            (u, p, a)
            for u, p, a in sent.members
            if u.active and p.attempt is a and a.phase is Phase.SUBMIT
        ]
        if any(a.busy for _, _, a in waiting):
            return None
        return Offer(members=tuple((u, p) for u, p, _ in waiting))

    def _gather(self, unit: Unit, program: Program, now: float) -> Offer:
        attempt = program.attempt
        slot = attempt.merge
        assert slot is not None and program.text is not None
        gathering = self._gathering.get(slot.key)
        if gathering is None:
            gathering = self._gathering[slot.key] = _Gathering(slot.size, now)
        gathering.found[slot.index] = (unit, program, attempt)
        for place, (u, p, a) in list(gathering.found.items()):
            if not u.active or p.attempt is not a:
                del gathering.found[place]
        wait = self.config.max_wait if self.config is not None else merging.DEFAULT_MAX_WAIT
        complete = len(gathering.found) == gathering.size
        if not complete and now < gathering.since + wait:
            return Offer(
                due=gathering.since + wait,
                text=(
                    f"its merged task has {len(gathering.found)} of {gathering.size} jobs "
                    f"back after a restart; created again at "
                    f"{merging.clock_time(gathering.since + wait)} at the latest"
                ),
            )
        members = [gathering.found[place] for place in sorted(gathering.found)]
        programs = []
        for place in range(gathering.size):
            u, p, _ = gathering.found.get(place, members[0])
            programs.append((p.sent_text or "", slot.shots[place]))
        if not complete:
            missing = gathering.size - len(gathering.found)
            self.ctx.log(
                syslog.LOG_WARNING,
                f"merged task {slot.key}: {missing} of its {gathering.size} jobs left while "
                "the service was down; their places run a copy of another member's program",
            )
        self._sent[slot.key] = _Sent(members, programs)
        del self._gathering[slot.key]
        return Offer(members=tuple((u, p) for u, p, _ in members))

    def _prune(self) -> None:
        for key, pooled in list(self._pool.items()):
            if not pooled.unit.active or pooled.program.attempt is not pooled.attempt:
                del self._pool[key]
                pooled.attempt.pooled = False

    def _candidate(self, unit: Unit, program: Program, now: float) -> merging.Candidate:
        attempt = program.attempt
        device = attempt.device
        assert device is not None and program.text is not None
        who = self._requester(unit)
        account = "site" if unit.userid != self.ctx.userid else "user"
        assert account in ACCOUNTS
        _, queue = self._queue(device)
        return merging.Candidate(
            unit=unit.id,
            jobid=min(unit.jobs) if unit.jobs else unit.id,
            userid=unit.userid,
            user=who.user,
            bank=who.bank,
            account=account,
            device=device.name,
            vendor=device.vendor,
            size=merging.payload_size(program.sent_text or program.text),
            shots=unit.request.shots,
            since=now,
            # What merging can save it: at most the queue its task would wait anyway.
            gain=queue,
        )

    def _queue(self, device: Device) -> tuple[bool, float | None]:
        """Whether ``device`` is idle, and its expected queue wait (seconds; None: not
        known), from its last probe and the learned drain."""
        snapshot = self.ctx.device_snapshots.get(device.name)
        depth = snapshot.queue_depth if snapshot is not None else None
        if depth is None:
            return False, None
        drain = self.ctx.estimator.estimate(device).seconds_per_task
        return depth == 0, depth * drain
