"""Typed, located reads of a vendor scenario (IBM, IQM, Pasqal), and loading one from YAML.

This module owns what those scenarios read alike: ``load_yaml`` (a file's document, read
once) and ``Reader``'s checks of one value each (a mapping and its keys, a number, an
integer, a choice, a non-empty string, a flag, emulated-time periods), of a device list
and its names, of a queue (the shared ``QueueSpec``), and of a fault's operations and call
selection. Each vendor's scenario module keeps its own fields, defaults and rules. It must
never know a vendor's fields, never touch the network, a clock or emulator state, and
every mistake it finds is one ``ScenarioError``: "<vendor> scenario <source>: <where>
<problem>".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml

from flux_quantum.emulator.scenario import DISTRIBUTIONS, JobFault, QueueSpec, ScenarioError

QUEUE_KEYS = ("depth", "arrival_rate", "service_time", "distribution", "shot_time")


def load_yaml(path: str | Path, label: str) -> tuple[Any, str]:
    """The document of the YAML file at ``path`` ({} when it is empty) and the source its
    scenario names; ScenarioError naming the ``label`` scenario when it cannot be read."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{label} scenario {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{label} scenario {path}: not valid YAML") from exc
    return (data if data is not None else {}), str(path)


class ScenarioFile:
    """A scenario class's ``from_yaml`` and ``default``: the class names itself in errors
    with ``LABEL``, has its default as the plain dict ``DEFAULT`` and reads a dict with
    its own ``from_dict``."""

    LABEL: ClassVar[str]
    DEFAULT: ClassVar[Mapping[str, Any]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Self:
        raise NotImplementedError

    @classmethod
    def from_yaml(cls, path: str | Path) -> Self:
        return cls.from_dict(*load_yaml(path, cls.LABEL))

    @classmethod
    def default(cls) -> Self:
        """The built-in scenario (``DEFAULT``)."""
        return cls.from_dict(cls.DEFAULT, source=f"<default {cls.LABEL} scenario>")


class Reader:
    """Typed reads from a vendor scenario's dict; every error says where it is."""

    def __init__(self, label: str, source: str) -> None:
        self.label = label
        self.source = source

    def fail(self, where: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{self.label} scenario {self.source}: {where} {problem}")

    def mapping(self, value: Any, where: str, accepted: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"must be a mapping, got {value!r:.40}")
        for key in value:
            if key not in accepted:
                raise self.fail(f"{where}.{key}", f"is unknown (accepted: {', '.join(accepted)})")
        return value

    def number(self, value: Any, where: str, low: float = 0.0) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise self.fail(where, f"must be a number, got {value!r:.40}")
        if value < low:
            raise self.fail(where, f"must be >= {low:g}, got {value!r}")
        return float(value)

    def integer(self, value: Any, where: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(where, f"must be an integer >= {low}, got {value!r:.40}")
        return value

    def choice(self, value: Any, where: str, accepted: Sequence[Any]) -> Any:
        if value not in accepted:
            raise self.fail(where, f"must be one of {', '.join(map(str, accepted))}, got {value!r}")
        return value

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"must be a non-empty string, got {value!r:.40}")
        return value

    def flag(self, data: Mapping[str, Any], key: str, where: str) -> bool:
        value = data.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"must be true or false, got {value!r:.40}")
        return value

    def periods(self, value: Any, where: str) -> tuple[tuple[float, float], ...]:
        if not isinstance(value, list):
            raise self.fail(where, "must be a list of [start, end] pairs")
        periods = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{where}[{i}]", f"must be [start, end], got {pair!r:.40}")
            start = self.number(pair[0], f"{where}[{i}]")
            end = self.number(pair[1], f"{where}[{i}]")
            if end <= start:
                raise self.fail(f"{where}[{i}]", f"must end after it starts, got {pair!r}")
            periods.append((start, end))
        return tuple(sorted(periods))

    def listed(self, value: Any, key: str, noun: str) -> list[Any]:
        """The top level's non-empty list under ``key`` (of ``noun`` entries)."""
        if not isinstance(value, list) or not value:
            raise self.fail(key, f"must list at least one {noun}")
        return value

    def distinct(self, names: Sequence[str], where: str, noun: str) -> None:
        """Refuse a name listed twice; ``where`` is the entry's field, "{i}" its index."""
        for i, name in enumerate(names):
            if name in names[:i]:
                raise self.fail(where.format(i=i), f"repeats {noun} {name!r}")

    def queue(self, value: Any, where: str, service_time: float) -> QueueSpec:
        """A device's ``queue`` mapping (``where`` ends with a colon), its service time
        ``service_time`` unless given."""
        queue = self.mapping(value, f"{where} queue", QUEUE_KEYS)
        service = self.number(
            queue.get("service_time", service_time), f"{where} queue.service_time"
        )
        depth = self.integer(queue.get("depth", 0), f"{where} queue.depth")
        arrivals = self.number(queue.get("arrival_rate", 0.0), f"{where} queue.arrival_rate")
        if service == 0 and (depth or arrivals):
            raise self.fail(f"{where} queue.service_time", "must be > 0 with depth or arrivals")
        return QueueSpec(
            depth=depth,
            arrival_rate=arrivals,
            service_time=service,
            distribution=self.choice(
                queue.get("distribution", "fixed"), f"{where} queue.distribution", DISTRIBUTIONS
            ),
            shot_time=self.number(queue.get("shot_time", 0.0), f"{where} queue.shot_time"),
        )

    def operations(self, f: Mapping[str, Any], where: str, accepted: Sequence[str]) -> list[str]:
        """A fault's ``operation``: one of ``accepted`` or a list of them (none: every one)."""
        ops = f.get("operation", [])
        ops = [ops] if isinstance(ops, str) else ops
        if not isinstance(ops, list):
            raise self.fail(f"{where}.operation", "must be an operation or a list of them")
        for op in ops:
            self.choice(op, f"{where}.operation", accepted)
        return ops

    def target(self, f: Mapping[str, Any], key: str, where: str, names: Sequence[str]) -> Any:
        """A fault's device (under ``key``): one of ``names``, or None."""
        value = f.get(key)
        if value is not None:
            self.choice(value, f"{where}.{key}", names)
        return value

    def optional(self, f: Mapping[str, Any], key: str, where: str) -> str | None:
        """A non-empty string under ``key`` when given."""
        return self.text(f[key], f"{where}.{key}") if key in f else None

    def effects(
        self, f: Mapping[str, Any], where: str, ops: Sequence[str], create: str
    ) -> dict[str, Any]:
        """A fault's one effect (an HTTP error ``status``, a ``delay``, a ``reset`` or a
        ``fail_job`` on the ``create`` operation; a delay may go with ``after_commit``),
        its ``message`` and its call selection, as the keyword arguments of its fault."""
        status = self.integer(f["status"], f"{where}.status", 400) if "status" in f else None
        if status is not None and status > 599:
            raise self.fail(f"{where}.status", f"must be an HTTP error status, got {status}")
        delay = self.number(f.get("delay", 0.0), f"{where}.delay")
        fail_job = self.optional(f, "fail_job", where)
        flags = {key: self.flag(f, key, where) for key in ("after_commit", "reset")}
        effects = [status is not None, delay > 0, fail_job is not None, flags["reset"]]
        if sum(effects) != 1 and not (flags["after_commit"] and delay > 0 and sum(effects) == 2):
            raise self.fail(where, "needs exactly one effect: status, delay, reset or fail_job")
        if fail_job is not None and list(ops) != [create]:
            raise self.fail(f"{where}.operation", f"must be {create} with fail_job")
        return {
            "status": status,
            "message": self.optional(f, "message", where),
            "delay": delay,
            "fail_job": fail_job,
            **flags,
            **self.selection(f, where),
        }

    def devices_and_faults(
        self,
        top: Mapping[str, Any],
        key: str,
        read: Callable[[Any, int], Any],
        operations: Sequence[str],
        create: str,
    ) -> tuple[list[Any], tuple[JobFault, ...]]:
        """A job-API scenario's devices under ``key`` (each read by ``read``, named by its
        ``name``, none twice) and its ``faults``, each a ``JobFault`` on one of
        ``operations`` naming its device under the singular of ``key``."""
        noun = key.removesuffix("s")
        raw = self.listed(top.get(key), key, noun)
        specs = [read(entry, i) for i, entry in enumerate(raw)]
        names = [spec.name for spec in specs]
        self.distinct(names, f"{key}[{{i}}].name", noun)
        accepted = (
            "operation", noun, "status", "message", "after_commit", "delay", "reset",
            "fail_job", "calls", "first", "after", "every", "rate", "start", "end",
        )  # fmt: skip
        faults = []
        for index, entry in enumerate(top.get("faults") or []):
            where = f"faults[{index}]"
            f = self.mapping(entry, where, accepted)
            ops = self.operations(f, where, operations)
            faults.append(
                JobFault(
                    operations=tuple(ops),
                    device=self.target(f, noun, where, names),
                    **self.effects(f, where, ops, create),
                )
            )
        return specs, tuple(faults)

    def selection(self, f: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A fault's call selection (``rate`` when given, ``calls``, ``first``, ``after``,
        ``every``, ``start``, ``end``), as the keyword arguments of its fault."""
        rate = self.number(f["rate"], f"{where}.rate") if "rate" in f else None
        if rate is not None and rate > 1:
            raise self.fail(f"{where}.rate", f"must be between 0 and 1, got {rate!r}")
        calls = f.get("calls", [])
        if not isinstance(calls, list):
            raise self.fail(f"{where}.calls", "must be a list of call numbers")
        return {
            "rate": rate,
            "calls": tuple(self.integer(c, f"{where}.calls", 1) for c in calls),
            "first": self.integer(f["first"], f"{where}.first", 1) if "first" in f else None,
            "after": self.integer(f["after"], f"{where}.after") if "after" in f else None,
            "every": self.integer(f["every"], f"{where}.every", 1) if "every" in f else None,
            "start": self.number(f["start"], f"{where}.start") if "start" in f else None,
            "end": self.number(f["end"], f"{where}.end") if "end" in f else None,
        }
