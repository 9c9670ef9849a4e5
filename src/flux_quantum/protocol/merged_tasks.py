"""What one merged task may hold: the limits a vendor declares for tasks that carry
several jobs' programs, and the arithmetic that fits programs into them.

A vendor whose tasks take several programs (``Vendor.submit_set``) declares, in its
descriptor (``flux_quantum.protocol.vendors``, ``merged_tasks``), how it lays them out
and what one task may hold: a ``Limits``. The site's merging rules
(``flux_quantum.site.merging``) fill tasks within them and never know which vendor they
are for. This module owns the record and the measures of a set of programs against it
(``problem``, ``room``); it never names a vendor. Standard library only, and pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# How a vendor lays several programs out in one task.
PROGRAM_SET = "program-set"  # executables of equal shots: the programs' shots' gcd each
PUBS = "pubs"  # one entry per program, with its own shots
LAYOUTS = (PROGRAM_SET, PUBS)


@dataclass(frozen=True)
class Limits:
    """What one merged task on a device may hold (None: no such limit).

    ``layout``: ``PROGRAM_SET`` (every executable runs the same shots, so programs of
    unequal shots run as several executables of the shots' greatest common divisor; the
    layout, a dot-separated count of executables per program, must fit
    ``max_layout_chars``) or ``PUBS`` (one entry per program with its own shots;
    executions are the shots summed). Bytes are counted as each program's size in a JSON
    request plus ``program_overhead`` each plus ``base_overhead``.
    """

    layout: str
    max_programs: int | None = None
    max_executables: int | None = None
    max_total_shots: int | None = None
    shots_per_executable: tuple[int, int] | None = None
    max_executions: int | None = None
    max_bytes: int | None = None
    program_overhead: int = 0
    base_overhead: int = 0
    max_layout_chars: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"a merged task's layout must be {' or '.join(LAYOUTS)}, got {self.layout!r}"
            )

    # -- measuring a set

    def executables(self, shots: Sequence[int]) -> int:
        """Executables (``PROGRAM_SET``) or entries (``PUBS``) a task of programs of
        ``shots`` runs."""
        if not shots:
            return 0
        if self.layout == PROGRAM_SET:
            return sum(shots) // math.gcd(*shots)
        return len(shots)

    def payload(self, sizes: Sequence[int]) -> int:
        """The bytes a task of programs of ``sizes`` is counted as."""
        return self.base_overhead + sum(sizes) + self.program_overhead * len(sizes)

    def problem(self, shots: Sequence[int], sizes: Sequence[int]) -> str | None:
        """Why one task cannot hold programs of ``shots`` and ``sizes`` (a sentence naming
        the limit), or None when it can."""
        return self.load_problem(Load.of(shots, sizes))

    def load_problem(self, load: Load) -> str | None:
        n, total, per = load.programs, load.shots, load.per
        if self.max_programs is not None and n > self.max_programs:
            return f"{n} programs, over the limit of {self.max_programs} a task"
        if self.layout == PROGRAM_SET and n:
            executables = total // per
            if self.max_executables is not None and executables > self.max_executables:
                return (
                    f"{executables} executables of {_shots(per)}, over the limit of "
                    f"{self.max_executables} a program set"
                )
            if self.shots_per_executable is not None:
                low, high = self.shots_per_executable
                if not low <= per <= high:
                    return (
                        f"executables of {_shots(per)}, outside the device's {low} to {high} "
                        "shots an executable"
                    )
            if (
                self.max_layout_chars is not None
                and executables > n
                and load.chars > self.max_layout_chars
            ):
                return (
                    f"a layout of {load.chars} characters for programs of unequal shots, "
                    f"over the {self.max_layout_chars} a task tag holds"
                )
        if self.max_total_shots is not None and total > self.max_total_shots:
            return f"{total} shots in all, over the limit of {self.max_total_shots} a task"
        if self.max_executions is not None and total > self.max_executions:
            return (
                f"{total} executions (the shots summed), over the limit of "
                f"{self.max_executions} a job"
            )
        if self.max_bytes is not None and n:
            size = self.base_overhead + load.bytes + self.program_overhead * n
            if size > self.max_bytes:
                return f"an input of {size} bytes, over the limit of {self.max_bytes} a job"
        return None

    def room(self, shots: Sequence[int], sizes: Sequence[int], shot: int, size: int) -> int | None:
        """How many more programs of ``shot`` shots and ``size`` bytes a task of programs
        of ``shots`` and ``sizes`` takes (None: no limit applies; 0 when it is already over
        one)."""
        return self.load_room(Load.of(shots, sizes), shots, shot, size)

    def load_room(self, load: Load, shots: Sequence[int], shot: int, size: int) -> int | None:
        if self.load_problem(load) is not None:
            return 0
        n, total = load.programs, load.shots
        bounds: list[int] = []

        def bound(left: int, each: int) -> None:
            if each > 0:
                bounds.append(max(0, left) // each)
            elif left < 0:
                bounds.append(0)

        if self.max_programs is not None:
            bound(self.max_programs - n, 1)
        if self.max_total_shots is not None:
            bound(self.max_total_shots - total, shot)
        if self.max_executions is not None:
            bound(self.max_executions - total, shot)
        if self.max_bytes is not None:
            used = self.base_overhead + load.bytes + self.program_overhead * n
            bound(self.max_bytes - used, size + self.program_overhead)
        if self.layout == PROGRAM_SET:
            per = math.gcd(load.per, shot)
            if self.shots_per_executable is not None:
                low, high = self.shots_per_executable
                if not low <= per <= high:
                    return 0
            if self.max_executables is not None:
                bound(self.max_executables - total // per, shot // per)
            if self.max_layout_chars is not None and (shot != per or total != n * per):
                # the layout: an entry per program, dot-separated; k more add k entries
                chars = load.chars if per == load.per else _layout_chars(s // per for s in shots)
                used = chars + (1 if n else 0)
                bound(self.max_layout_chars + 1 - used, len(str(shot // per)) + 1)
        return min(bounds) if bounds else None

    def describe(self) -> str:
        parts = []
        if self.max_programs is not None:
            parts.append(f"{self.max_programs} programs")
        if self.max_executables is not None:
            parts.append(f"{self.max_executables} executables")
        if self.max_total_shots is not None:
            parts.append(f"{self.max_total_shots} shots")
        if self.shots_per_executable is not None:
            low, high = self.shots_per_executable
            parts.append(f"{low}-{high} shots an executable")
        if self.max_executions is not None:
            parts.append(f"{self.max_executions} executions")
        if self.max_bytes is not None:
            parts.append(f"{self.max_bytes} bytes")
        return ", ".join(parts) if parts else "no limits"

    def to_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "max_programs": self.max_programs,
            "max_executables": self.max_executables,
            "max_total_shots": self.max_total_shots,
            "shots_per_executable": (
                list(self.shots_per_executable) if self.shots_per_executable else None
            ),
            "max_executions": self.max_executions,
            "max_bytes": self.max_bytes,
        }


def _shots(n: int) -> str:
    return "1 shot" if n == 1 else f"{n} shots"


def _layout_chars(executables: Iterable[int]) -> int:
    """Length of the dot-separated layout of ``executables`` (``12.3.1``)."""
    entries = [len(str(n)) for n in executables]
    return sum(entries) + max(0, len(entries) - 1)


@dataclass(frozen=True)
class Load:
    """What a set of programs adds up to: programs, shots, their greatest common divisor
    (0: none), bytes (their sizes in a JSON request) and the length of their layout."""

    programs: int = 0
    shots: int = 0
    per: int = 0
    bytes: int = 0
    chars: int = 0

    @classmethod
    def of(cls, shots: Sequence[int], sizes: Sequence[int]) -> Load:
        per = math.gcd(*shots) if shots else 0
        chars = _layout_chars(s // per for s in shots) if shots else 0
        return cls(len(shots), sum(shots), per, sum(sizes), chars)

    def plus(self, shots: Sequence[int], shot: int, size: int) -> Load:
        """This load (of programs of ``shots``) and one more program."""
        per = math.gcd(self.per, shot)
        if per == self.per:
            chars = self.chars + (1 if self.programs else 0) + len(str(shot // per))
        else:
            chars = _layout_chars(s // per for s in (*shots, shot))
        return Load(self.programs + 1, self.shots + shot, per, self.bytes + size, chars)
