"""The tracked units and the indexes over them, kept in step by one owner.

``Units`` holds every active unit by id, which unit each held job rides, and the
released ``qpu.group`` units a late job may still join (for ``group_linger`` seconds).
Every change goes through its methods, so the three never disagree: a member added is
indexed, a job that left is unindexed and taken off its unit, a unit that ended leaves
with all its members. A unit it tracks marks its own changes in its ``changes`` (what
the face sends memos for). It decides nothing and calls nothing outside itself.
"""

from __future__ import annotations

from collections.abc import Iterator

from flux_quantum.service.state import Changes, Member, Unit, UnitState


class Units:
    def __init__(self) -> None:
        self._by_id: dict[int, Unit] = {}
        self._of_job: dict[int, int] = {}
        self._released_groups: dict[tuple[int, str], Unit] = {}
        # The units whose jobs' memo may have changed, as they marked themselves.
        self.changes = Changes()

    # -- reading

    def __iter__(self) -> Iterator[Unit]:
        return iter(list(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._by_id

    def get(self, unit_id: int | None) -> Unit | None:
        return None if unit_id is None else self._by_id.get(unit_id)

    def active(self) -> list[Unit]:
        return [u for u in self._by_id.values() if u.active]

    def of_job(self, jobid: int | None) -> Unit | None:
        """The unit job ``jobid`` rides, if it is tracked."""
        unit_id = self._of_job.get(jobid) if jobid is not None else None
        return None if unit_id is None else self._by_id.get(unit_id)

    def tracks(self, jobid: int) -> bool:
        return jobid in self._of_job

    def job_ids(self) -> list[int]:
        return list(self._of_job)

    @property
    def job_count(self) -> int:
        return len(self._of_job)

    def released_group(self, key: tuple[int, str]) -> Unit | None:
        """A released ``qpu.group`` unit a late job may still join."""
        return self._released_groups.get(key)

    # -- changing

    def add(self, unit: Unit) -> None:
        self._by_id[unit.id] = unit
        unit.changes = self.changes

    def add_member(self, unit: Unit, member: Member) -> None:
        unit.jobs[member.id] = member
        self._of_job[member.id] = unit.id

    def job_left(self, jobid: int) -> Unit | None:
        """Job ``jobid`` is no longer held: unindexed and off its unit, which is
        returned (None if it was not tracked)."""
        unit_id = self._of_job.pop(jobid, None)
        unit = self._by_id.get(unit_id) if unit_id is not None else None
        if unit is not None:
            unit.jobs.pop(jobid, None)
        return unit

    def end(self, unit: Unit, state: UnitState) -> None:
        """The unit ended in ``state``: it and its members leave; a released group stays
        joinable (until ``expire_groups``)."""
        unit.state = state
        for jobid in list(unit.jobs):
            self._of_job.pop(jobid, None)
        self._by_id.pop(unit.id, None)
        if state is UnitState.RELEASED and unit.group_key is not None:
            self._released_groups[unit.group_key] = unit

    def expire_groups(self, now: float, linger: float) -> None:
        """Forget the released groups older than ``linger`` seconds."""
        for key, unit in list(self._released_groups.items()):
            if unit.released_at is None or now - unit.released_at > linger:
                del self._released_groups[key]
