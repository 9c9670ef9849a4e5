"""Typed, located reads of a vendor scenario, declared on its records, and loading one from YAML.

This module owns how every side's scenario (but Braket's) is read: a scenario class is a
``ScenarioFile`` (``from_yaml``, ``default``, ``from_dict``) whose dataclass fields say
what they read: a plain field by its default's type (a flag, an integer >= 1, a number
>= 0, a non-empty string, a choice, a queue, a nested record, a list), a ``setting`` with
its bounds, choices or checks, its ``devices`` (a list of records, each named by its
first field) and its ``faults`` (``JobFault``s on its operations, or its own reader);
``load_yaml`` reads a file's document once, and ``Reader`` checks one value each and
reads a whole scenario, device or fault from those declarations. A record may complete
its values (``completed``: a default computed from another field) and refuse a
combination (``invalid``). It must never know a vendor's fields (they are declared in
each side's ``scenario``), never touch the network, a clock or emulator state, and every
mistake it finds is one ``ScenarioError``: "<vendor> scenario <source>: <where>
<problem>".
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml

from flux_quantum.emulator.scenario import DISTRIBUTIONS, JobFault, QueueSpec, ScenarioError

QUEUE_KEYS = ("depth", "arrival_rate", "service_time", "distribution", "shot_time")
# A job fault's keys beside the one naming its device (``Reader.job_fault``).
FAULT_KEYS = (
    "operation", "status", "message", "after_commit", "delay", "reset", "fail_job", "calls",
    "first", "after", "every", "rate", "start", "end",
)  # fmt: skip
_JOB_FAULT_FIELDS = {f.name for f in dataclasses.fields(JobFault)}


def setting(
    default: Any = dataclasses.MISSING,
    *,
    low: float | None = None,
    choices: Sequence[Any] | None = None,
    noun: str | None = None,
    empty: bool = False,
    kind: Any = None,
    check: Callable[[Any], str | None] | None = None,
    key: str | None = None,
) -> Any:
    """A scenario field with how it is read: ``low`` bounds a number, ``choices`` the
    accepted values (of a list's items too), ``noun`` names a list's items (``empty``: it
    may be empty), ``kind`` the type when the default does not say it (``str`` for a label
    taken as written, ``"periods"`` for emulated-time windows, ``"pairs"`` for a coupling
    map), ``check`` returns a
    problem or None, ``key`` is its name in the file when not the field's."""
    meta = {"low": low, "choices": choices, "noun": noun, "empty": empty, "kind": kind,
            "check": check, "key": key}  # fmt: skip
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def device_list(noun: str) -> Any:
    """A scenario's list of device records (at least one; each a ``noun``, named by its
    record's first field, none twice); the faults name one under ``noun``."""
    return dataclasses.field(metadata={"devices": noun})


def fault_list(
    operations: Sequence[str] = (),
    create: str = "",
    read: Callable[[Reader, Any, int, Sequence[str]], Any] | None = None,
) -> Any:
    """A scenario's faults: ``JobFault``s (or the field's subclass of it) on
    ``operations``, ``fail_job`` on ``create`` only; or each read by ``read`` (the reader,
    the entry, its index, the devices' names)."""
    meta = {"faults": True, "operations": tuple(operations), "create": create, "read": read}
    return dataclasses.field(default=(), metadata=meta)


def _key(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("key") or f.name


def _default(f: dataclasses.Field[Any]) -> Any:
    """The field's default (a queue's: its service time is the side's default)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _at(prefix: str, key: str) -> str:
    """Where a field is: ``key`` at the top level, ``device 'x': key`` in a device,
    ``device 'x': price.key`` in a nested record."""
    if prefix.endswith("."):
        return prefix + key
    return f"{prefix} {key}" if prefix else key


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


class Record:
    """What the reader asks of a scenario, device or fault record beyond its fields: its
    values completed (a default computed from another field) and a combination of them
    refused (the field and the problem, or None)."""

    @classmethod
    def completed(cls, values: dict[str, Any]) -> dict[str, Any]:
        return values

    def invalid(self) -> tuple[str, str] | None:
        return None


class ScenarioFile(Record):
    """A scenario class's ``from_yaml`` and ``default``: the class names itself in errors
    with ``LABEL``, has its default as the plain dict ``DEFAULT`` and reads a dict with
    its own ``from_dict``."""

    LABEL: ClassVar[str]
    DEFAULT: ClassVar[Mapping[str, Any]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Self:
        """The scenario ``data`` describes, read from the class's declared fields;
        ScenarioError naming ``source`` and the field otherwise."""
        scenario: Self = Reader(cls.LABEL, source).scenario(cls, data)
        return scenario

    @property
    def specs(self) -> tuple[Any, ...]:
        """The devices the scenario lists (its ``device_list`` field)."""
        listed = next(f for f in dataclasses.fields(self) if "devices" in f.metadata)  # type: ignore[arg-type]
        specs: tuple[Any, ...] = getattr(self, listed.name)
        return specs

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

    def pairs(self, value: Any, where: str) -> tuple[tuple[int, int], ...]:
        """A coupling map: a list of [a, b] pairs of distinct qubit indices (>= 0)."""
        if not isinstance(value, list):
            raise self.fail(where, "must be a list of [a, b] qubit pairs")
        pairs = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise self.fail(f"{where}[{i}]", f"must be [a, b], got {pair!r:.40}")
            a, b = (self.integer(q, f"{where}[{i}]", low=0) for q in pair)
            if a == b:
                raise self.fail(f"{where}[{i}]", f"must couple two qubits, got {pair!r}")
            pairs.append((a, b))
        return tuple(pairs)

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

    # -- records, from their declared fields ----------------------------------------------

    def value(self, f: dataclasses.Field[Any], hint: Any, raw: Any, prefix: str) -> Any:
        """The value of field ``f`` (of type ``hint``) read from ``raw``, as declared."""
        meta = f.metadata
        where = _at(prefix, _key(f))
        kind = meta.get("kind") or _kind(hint)
        if kind == "periods":
            return self.periods(raw, where)
        if kind == "pairs":
            return self.pairs(raw, where)
        if kind is QueueSpec:
            return self.queue(raw, prefix, service_time=_default(f).service_time)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            mapping = self.mapping(raw, where, _keys(kind))
            return kind(**self.record(kind, mapping, f"{where}."))
        if kind is tuple:
            return self.items(raw, where, meta)
        if kind is bool:
            if not isinstance(raw, bool):
                raise self.fail(where, f"must be true or false, got {raw!r:.40}")
            return raw
        if kind is int:
            return self.integer(raw, where, low=int(meta.get("low") or 1))
        if kind is float:
            return self.number(raw, where, low=meta.get("low") or 0.0)
        if meta.get("choices"):
            return self.choice(raw, where, meta["choices"])
        if meta.get("kind") is str:
            return str(raw)  # a label, taken as written
        value = self.text(raw, where)
        problem = meta["check"](value) if meta.get("check") else None
        if problem:
            raise self.fail(where, problem)
        return value

    def items(self, raw: Any, where: str, meta: Mapping[str, Any]) -> tuple[Any, ...]:
        """A list field: its items, each a non-empty string or one of its choices."""
        noun = meta.get("noun") or "item"
        if not isinstance(raw, list) or not (raw or meta.get("empty")):
            problem = f"must be a list of {noun}s" if meta.get("empty") else None
            raise self.fail(where, problem or f"must list at least one {noun}")
        choices = meta.get("choices")
        return tuple(
            self.choice(i, where, choices) if choices else self.text(i, where) for i in raw
        )

    def record(self, cls: Any, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """The given fields of record class ``cls`` read from ``data`` (a mapping already
        checked for unknown keys), by field name; absent ones keep their defaults."""
        hints = _hints(cls)
        return {
            f.name: self.value(f, hints[f.name], data[_key(f)], prefix)
            for f in dataclasses.fields(cls)
            if f.init and _key(f) in data and f.name != "source"
        }

    def refuse_invalid(self, record: Any, where: str) -> None:
        """Refuse a record whose ``invalid()`` names a field and its problem."""
        check = getattr(record, "invalid", None)
        found = check() if check is not None else None
        if found:
            raise self.fail(_at(where, found[0]), found[1])

    def device(self, cls: Any, raw: Any, index: int, key: str, noun: str) -> Any:
        """Device ``index`` of the list under ``key``: its name (the record's first field),
        checked, then every other field where it says ``<noun> '<name>':``."""
        name_field, *rest = [f for f in dataclasses.fields(cls) if f.init]
        where = f"{key}[{index}]"
        d = self.mapping(raw, where, _keys(cls))
        name = self.value(name_field, str, d.get(_key(name_field)), f"{where}.")
        prefix = f"{noun} {name!r}:"
        values = self.record(cls, {k: v for k, v in d.items() if k != _key(name_field)}, prefix)
        spec = cls(**cls.completed({name_field.name: name, **values}))
        self.refuse_invalid(spec, prefix)
        return spec

    def job_fault(
        self, cls: Any, raw: Any, index: int, noun: str, names: Sequence[str], meta: Any
    ) -> Any:
        """Fault ``index``: a ``JobFault`` (or subclass ``cls``, whose own fields are
        optional strings) on the scenario's operations, naming its device under ``noun``."""
        where = f"faults[{index}]"
        extra = [f.name for f in dataclasses.fields(cls) if f.name not in _JOB_FAULT_FIELDS]
        f = self.mapping(raw, where, (*FAULT_KEYS[:1], noun, *FAULT_KEYS[1:], *extra))
        ops = self.operations(f, where, meta["operations"])
        fault = cls(
            operations=tuple(ops),
            device=self.target(f, noun, where, names),
            **{name: self.optional(f, name, where) for name in extra},
            **self.effects(f, where, ops, meta["create"]),
        )
        self.refuse_invalid(fault, f"{where}.")
        return fault

    def scenario(self, cls: Any, data: Mapping[str, Any]) -> Any:
        """The scenario of class ``cls`` ``data`` describes: its settings, its devices
        and its faults, as its fields declare them."""
        declared = [f for f in dataclasses.fields(cls) if f.init and f.name != "source"]
        listed = next(f for f in declared if "devices" in f.metadata)
        fault_field = next(f for f in declared if "faults" in f.metadata)
        top = self.mapping(data, "(top level)", [_key(f) for f in declared])
        noun = listed.metadata["devices"]
        spec_type = _item_type(cls, listed.name)
        raw = self.listed(top.get(listed.name), listed.name, noun)
        specs = [self.device(spec_type, entry, i, listed.name, noun) for i, entry in enumerate(raw)]
        first = _key(next(f for f in dataclasses.fields(spec_type) if f.init))
        names = [getattr(spec, first) for spec in specs]
        self.distinct(names, f"{listed.name}[{{i}}].{first}", noun)
        settings = self.record(
            cls, {k: v for k, v in top.items() if k not in (listed.name, fault_field.name)}, ""
        )
        read = fault_field.metadata["read"]
        fault_type = _item_type(cls, fault_field.name)
        fault_records = tuple(
            read(self, entry, i, names)
            if read
            else self.job_fault(fault_type, entry, i, noun, names, fault_field.metadata)
            for i, entry in enumerate(top.get(fault_field.name) or [])
        )
        values = cls.completed(
            {**settings, listed.name: tuple(specs), fault_field.name: fault_records}
        )
        scenario = cls(**values, source=self.source)
        self.refuse_invalid(scenario, "")
        return scenario


def _keys(cls: Any) -> list[str]:
    return [_key(f) for f in dataclasses.fields(cls) if f.init and f.name != "source"]


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _item_type(cls: Any, name: str) -> Any:
    """The item type of ``cls``'s tuple field ``name`` (``tuple[Spec, ...]``)."""
    return typing.get_args(_hints(cls)[name])[0]


def _kind(hint: Any) -> Any:
    """What a field of type ``hint`` reads as: its type (``int | None``: int), ``tuple``
    for a list, ``"periods"`` for a tuple of (start, end) pairs."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "periods" if args and typing.get_origin(args[0]) is tuple else tuple
    if origin is not None and args:  # a union with None
        return _kind(args[0])
    return hint
