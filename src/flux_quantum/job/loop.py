"""Variational loops as chains of held steps: the loop's directory, journal and replay.

A *loop* runs the iterations of a variational algorithm (VQE, QAOA, ...) as a chain of
ordinary Flux jobs, the *steps*. Step k is a held qpu job whose program is program k: the
handler service creates task k while the step holds no node, releases the step once
task k is done (``release_at=done`` unless the loop says otherwise), and the step runs the user's classical code, which
reads result k and writes program k+1, or says the loop is done. Before it exits, rank 0
of step k submits step k+1, again a held qpu job. Nodes are free between steps.

This module owns the loop's state, which lives in a directory the user owns (on a file
system every node sees)::

    DIR/loop.json         the spec (LoopSpec): request, resources, command, limits
    DIR/journal.jsonl     what happened, one typed record a line, appended under DIR/.lock
    DIR/programs/K.qasm   the program of iteration K (0: the starting program)
    DIR/steps/K.json      what step K said: its objective value, and whether it is done
    DIR/state.json        the user's own optimiser state (``Step.save_state``)

``replay`` folds the journal into a ``LoopHistory`` (pure; the journal is read, never
trusted). Flux is touched only by ``flux_quantum.job.loopsteps`` (submitting, running and
cancelling steps); the step program's side is ``Step``::

    from flux_quantum.job.loop import Step
    step = Step.current()                       # FLUX_QPU_LOOP_DIR, FLUX_QPU_ITERATION
    counts = step.result().counts               # result of task k, read as consumers do
    state = step.state                          # what save_state stored ({} at k = 0)
    step.save_state(new_state)
    step.next(program_text, value=energy)       # program k+1; value: what task k measured
    step.done(value=energy, reason="converged") # or: the loop ends after this step

A step in another language uses the environment: ``FLUX_QPU_NEXT_PROGRAM`` is where to
write program k+1 (not written: the loop is done), ``FLUX_QPU_LOOP_VALUE`` where to
write the objective value of iteration k (a number, optional).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from flux_quantum.errors import CommandError
from flux_quantum.protocol.events import QpuEvent
from flux_quantum.protocol.request import RequestError, parse_request
from flux_quantum.timing.step_plan import StepAction, StepPlan, check_weight

# The environment of a step's processes.
DIR_VARIABLE = "FLUX_QPU_LOOP_DIR"
ITERATION_VARIABLE = "FLUX_QPU_ITERATION"
NEXT_PROGRAM_VARIABLE = "FLUX_QPU_NEXT_PROGRAM"
VALUE_VARIABLE = "FLUX_QPU_LOOP_VALUE"
LOOP_VARIABLES = (DIR_VARIABLE, ITERATION_VARIABLE, NEXT_PROGRAM_VARIABLE, VALUE_VARIABLE)

# Where a step says who it is, for ``flux jobs -o '{user.qpu_loop} {user.qpu_iteration}'``.
LOOP_ATTRIBUTE = "qpu_loop"
ITERATION_ATTRIBUTE = "qpu_iteration"

SPEC_FILE = "loop.json"
JOURNAL_FILE = "journal.jsonl"
LOCK_FILE = ".lock"
STATE_FILE = "state.json"
PROGRAMS = "programs"
STEPS = "steps"

DEFAULT_MAX_ITERATIONS = 20
MAX_ITERATIONS = 100_000
GOALS = ("min", "max")
# Request keys a loop sets itself on every step.
LOOP_OWNED_KEYS = ("program", "loop", "group")

# How a loop ends. The first two are a loop that did its work.
CONVERGED = "converged"
MAX_REACHED = "max-iterations"
BUDGET = "budget"
FAILED = "failed"
CANCELLED = "cancelled"
OUTCOMES = (CONVERGED, MAX_REACHED, BUDGET, FAILED, CANCELLED)
SUCCESSFUL = (CONVERGED, MAX_REACHED)
# What follows a step (flux_quantum.timing.step_plan), and how a hold ends.
KEEP = StepAction.KEEP.value
IN_PLACE = "in place"
GAVE_UP = "gave up"

_ID = re.compile(r"[a-z][a-z0-9._-]{0,47}", re.ASCII)
_ID_RULE = "lower-case letters, digits, '-', '_', '.' (at most 48, first a letter)"


def check_loop_id(value: object) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise CommandError(f"loop name {value!r} is not valid: use {_ID_RULE}")
    return value


def new_loop_id() -> str:
    return f"loop-{secrets.token_hex(4)}"


def default_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where loops live unless ``--dir`` says otherwise:
    ``$XDG_STATE_HOME/flux-quantum/loops`` (``~/.local/state/...``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(base) / "flux-quantum" / "loops"


# --- the spec ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """What each step asks of the cluster (``flux submit``'s -N, -n, -c, -g, -t, -q, -B)."""

    nodes: int | None = None
    ntasks: int = 1
    cores: int = 1
    gpus: int = 0
    time_limit: str | None = None
    queue: str | None = None
    bank: str | None = None

    def __post_init__(self) -> None:
        for name, least in (("ntasks", 1), ("cores", 1), ("gpus", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise CommandError(f"{name} must be an integer >= {least}, got {value!r}")
        if self.nodes is not None and (not isinstance(self.nodes, int) or self.nodes < 1):
            raise CommandError(f"nodes must be an integer >= 1, got {self.nodes!r}")
        if self.nodes is not None and self.ntasks < self.nodes:
            object.__setattr__(self, "ntasks", self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class LoopSpec:
    """What the user asked for: the request of step 0 (without the keys the loop sets),
    the step command and its resources, and the limits of the whole loop."""

    id: str
    request: Mapping[str, Any]
    command: tuple[str, ...]
    resources: Resources = field(default_factory=Resources)
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_cost: float | None = None
    goal: str = "min"
    cwd: str = "/"
    created: float = 0.0
    # What one second of the loop's time is worth in seconds of idle nodes when a step
    # decides what follows it (flux_quantum.timing.step_plan); None: the site's.
    time_weight: float | None = None

    def __post_init__(self) -> None:
        check_loop_id(self.id)
        if not self.command or not all(isinstance(a, str) for a in self.command):
            raise CommandError("a loop needs a step command (the classical part of one iteration)")
        owned = sorted(set(self.request) & set(LOOP_OWNED_KEYS))
        if owned:
            raise CommandError(
                f"qpu.{owned[0]} is set by the loop itself on every step; leave it out"
            )
        try:
            parse_request({**self.request, "program": "program.qasm"})
        except RequestError as exc:
            raise CommandError(str(exc)) from None
        if (
            not isinstance(self.max_iterations, int)
            or not 1 <= self.max_iterations <= MAX_ITERATIONS
        ):
            raise CommandError(
                f"max-iterations must be an integer from 1 to {MAX_ITERATIONS}, "
                f"got {self.max_iterations!r}"
            )
        if self.max_cost is not None and not (
            isinstance(self.max_cost, int | float)
            and math.isfinite(self.max_cost)
            and self.max_cost > 0
        ):
            raise CommandError(f"max-cost must be an amount > 0, got {self.max_cost!r}")
        if self.goal not in GOALS:
            raise CommandError(f"goal must be 'min' or 'max', got {self.goal!r}")
        if self.time_weight is not None:
            try:
                check_weight(self.time_weight)
            except ValueError as exc:
                raise CommandError(str(exc)) from None

    @property
    def weight(self) -> float:
        """The time weight its steps plan by (0 for a loop from before there was one:
        its steps give their nodes back, as they always did)."""
        return self.time_weight or 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "request": dict(self.request),
            "command": list(self.command),
            "resources": self.resources.to_dict(),
            "max_iterations": self.max_iterations,
            "max_cost": self.max_cost,
            "goal": self.goal,
            "cwd": self.cwd,
            "created": self.created,
            "time_weight": self.time_weight,
        }

    @classmethod
    def from_dict(cls, data: object) -> LoopSpec:
        """The spec from ``loop.json``; CommandError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise CommandError("loop.json does not hold a JSON object")
        try:
            resources = data.get("resources") or {}
            if not isinstance(resources, Mapping):
                raise TypeError("resources")
            return cls(
                id=data["id"],
                request=dict(data["request"]),
                command=tuple(data["command"]),
                resources=Resources(**resources),
                max_iterations=data.get("max_iterations", DEFAULT_MAX_ITERATIONS),
                max_cost=data.get("max_cost"),
                goal=data.get("goal", "min"),
                cwd=str(data.get("cwd") or "/"),
                created=float(data.get("created") or 0.0),
                time_weight=data.get("time_weight"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CommandError(f"loop.json is not a loop spec ({exc})") from None

    def step_request(
        self, iteration: int, program: Path, device: str | None, budget: float | None
    ) -> dict[str, Any]:
        """The ``qpu`` request of step ``iteration``: pinned to ``device`` (the loop's
        device, once its first task chose one) within what is left of the budget."""
        table = dict(self.request)
        if device is not None:
            for key in ("vendor", "policy", "class", "min_qubits", "min_fidelity"):
                table.pop(key, None)
            table["device"] = device
        table["program"] = str(program)
        table["loop"] = self.id
        table.setdefault("release_at", "done")  # the step reads its result at once
        if budget is not None:
            table["max_cost"] = round(budget, 6)
        parse_request(table)  # a loop never submits what the validator would refuse
        return table


# --- the journal ---------------------------------------------------------------------------


class LoopRecord(QpuEvent):
    """A journal line: ``{"name": ..., "t": ..., **context}``."""

    iteration: int  # every record is about one step (declared by each record)

    def to_line(self, t: float) -> str:
        return json.dumps({"name": self.name, "t": t, **self.to_context()}, sort_keys=True)


@dataclass(frozen=True)
class Submitted(LoopRecord):
    """Step ``iteration`` was submitted as ``jobid`` asking for ``device`` (None: the
    loop's own request, for the first step)."""

    name: ClassVar[str] = "submitted"
    iteration: int
    jobid: int
    device: str | None = None
    budget: float | None = None


@dataclass(frozen=True)
class Started(LoopRecord):
    """Step ``iteration`` runs: task ``iteration`` is done and its nodes are allocated;
    ``turnaround``: seconds from its release to running (None: not released, it runs
    in place)."""

    name: ClassVar[str] = "started"
    iteration: int
    jobid: int
    turnaround: float | None = None


@dataclass(frozen=True)
class Stepped(LoopRecord):
    """Step ``iteration`` ended: its task ran on ``device``, cost ``cost`` (None: not
    settled when the step ended), its command exited ``rc`` and reported ``value``."""

    name: ClassVar[str] = "stepped"
    iteration: int
    jobid: int
    rc: int
    device: str | None = None
    task: str | None = None
    cost: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class Moved(LoopRecord):
    """The loop left its device: step ``iteration``'s task failed over."""

    name: ClassVar[str] = "moved"
    iteration: int
    previous: str
    device: str


@dataclass(frozen=True)
class Planned(LoopRecord):
    """What follows step ``iteration - 1`` (job ``jobid``), decided when its work was
    done: its ``StepPlan`` (keep, early or give-back, why, the forecasts and bound)."""

    name: ClassVar[str] = "planned"
    iteration: int
    jobid: int
    plan: Mapping[str, Any]

    @classmethod
    def of(cls, iteration: int, jobid: int, plan: StepPlan) -> Planned:
        return cls(iteration, jobid, plan.to_dict())

    @property
    def action(self) -> str:
        return str(self.plan.get("action"))

    def step_plan(self) -> StepPlan:
        return StepPlan.from_dict(self.plan)


@dataclass(frozen=True)
class Held(LoopRecord):
    """Job ``jobid`` held its nodes ``held`` seconds for step ``iteration``'s result
    (a keep), then ran the iteration in place or gave up (``outcome``), with why."""

    name: ClassVar[str] = "held"
    iteration: int
    jobid: int
    held: float
    outcome: str
    reason: str


@dataclass(frozen=True)
class Ended(LoopRecord):
    """The loop ended after step ``iteration`` (one of OUTCOMES), with why."""

    name: ClassVar[str] = "ended"
    iteration: int
    outcome: str
    reason: str


RECORDS: dict[str, type[LoopRecord]] = {
    cls.name: cls for cls in (Submitted, Started, Stepped, Moved, Planned, Held, Ended)
}


def decode_line(line: str) -> LoopRecord | None:
    """The record of one journal line; None for anything else (a torn last line, an
    unknown name, a value of the wrong type)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("name")
    cls = RECORDS.get(name) if isinstance(name, str) else None
    if cls is None:
        return None
    record = cls.decode(data)
    if isinstance(record, Ended) and record.outcome not in OUTCOMES:
        return None
    if isinstance(record, Planned):
        try:
            record.step_plan()
        except (KeyError, ValueError):
            return None
    return record


@dataclass
class LoopHistory:
    """What the journal says: the steps, the device, spend, values and how it ended."""

    goal: str = "min"
    submitted: dict[int, int] = field(default_factory=dict)  # iteration -> jobid
    started: set[int] = field(default_factory=set)
    steps: dict[int, Stepped] = field(default_factory=dict)
    moves: list[Moved] = field(default_factory=list)
    device: str | None = None  # where the loop's tasks go (after the first task)
    ended: Ended | None = None
    plans: dict[int, Planned] = field(default_factory=dict)  # iteration -> its plan
    holds: dict[int, Held] = field(default_factory=dict)  # iteration -> its hold
    # iteration -> the job that ran it, where it is not its own step job (in place)
    ran_in: dict[int, int] = field(default_factory=dict)
    turnarounds: list[float] = field(default_factory=list)  # released steps' (Started)

    @property
    def iteration(self) -> int:
        """The latest iteration submitted (-1: none)."""
        return max(self.submitted, default=-1)

    @property
    def turnaround(self) -> float:
        """The quickest a released step of the loop went to running (0: none yet)."""
        return min(self.turnarounds, default=0.0)

    @property
    def spent(self) -> float:
        return sum(s.cost or 0.0 for s in self.steps.values())

    @property
    def unsettled(self) -> int:
        """Steps whose cost was not known when they ended."""
        return sum(1 for s in self.steps.values() if s.cost is None and s.task)

    @property
    def best(self) -> tuple[float, int] | None:
        """The best value reported so far and its iteration (by the loop's goal)."""
        values = [(s.value, s.iteration) for s in self.steps.values() if s.value is not None]
        if not values:
            return None
        if self.goal == "max":
            return max(values, key=lambda v: (v[0], -v[1]))
        return min(values, key=lambda v: (v[0], v[1]))

    def live_jobs(self) -> list[int]:
        """Jobs of steps that have not ended as far as the journal knows: a step's job,
        and the job running it in place."""
        live = []
        for k, jobid in sorted(self.submitted.items()):
            if k not in self.steps:
                live += [jobid, *([self.ran_in[k]] if k in self.ran_in else [])]
        return live

    def holding(self, iteration: int) -> bool:
        """Whether a step's job holds its nodes for step ``iteration``'s result now."""
        plan = self.plans.get(iteration)
        return plan is not None and plan.action == KEEP and iteration not in self.holds


def replay(records: Iterable[LoopRecord], goal: str = "min") -> LoopHistory:
    """Fold journal records into a LoopHistory. Pure; the first ``Ended`` wins, and a
    record about a step never submitted is ignored."""
    history = LoopHistory(goal=goal)
    for record in records:
        if history.ended is not None:
            continue
        if isinstance(record, Submitted):
            history.submitted.setdefault(record.iteration, record.jobid)
        elif isinstance(record, Planned):
            history.plans.setdefault(record.iteration, record)
        elif record.iteration not in history.submitted:
            continue
        elif isinstance(record, Started):
            history.started.add(record.iteration)
            if record.turnaround is not None:
                history.turnarounds.append(record.turnaround)
            if record.jobid != history.submitted[record.iteration]:
                history.ran_in[record.iteration] = record.jobid
        elif isinstance(record, Stepped):
            history.steps.setdefault(record.iteration, record)
            if history.device is None and record.device:
                history.device = record.device
        elif isinstance(record, Moved):
            history.moves.append(record)
            history.device = record.device
        elif isinstance(record, Held):
            history.holds.setdefault(record.iteration, record)
        elif isinstance(record, Ended):
            history.ended = record
    return history


# --- the directory ---------------------------------------------------------------------------


class LoopDir:
    """A loop's directory; the one writer of its journal (appends under ``.lock``)."""

    def __init__(self, path: Path, spec: LoopSpec) -> None:
        self.path = path
        self.spec = spec

    @classmethod
    def create(cls, path: Path, spec: LoopSpec, program_text: str) -> LoopDir:
        """Make the directory (mode 0700) with the spec and program 0; refuses a
        directory that already holds a loop."""
        path = path.absolute()
        if (path / SPEC_FILE).exists():
            raise CommandError(f"{path} already holds a loop ({SPEC_FILE}); choose another --dir")
        try:
            (path / PROGRAMS).mkdir(mode=0o700, parents=True, exist_ok=True)
            (path / STEPS).mkdir(mode=0o700, exist_ok=True)
            path.chmod(0o700)
            loop = cls(path, spec)
            _write_atomic(loop.program(0), program_text)
            _write_atomic(path / SPEC_FILE, json.dumps(spec.to_dict(), indent=2) + "\n")
            (path / JOURNAL_FILE).touch(mode=0o600)
        except OSError as exc:
            raise CommandError(f"cannot create the loop directory {path}: {exc}") from None
        return loop

    @classmethod
    def open(cls, path: Path | str) -> LoopDir:
        path = Path(path).absolute()
        try:
            text = (path / SPEC_FILE).read_text()
        except FileNotFoundError:
            raise CommandError(f"{path} holds no loop (no {SPEC_FILE})") from None
        except OSError as exc:
            raise CommandError(f"cannot read {path / SPEC_FILE}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise CommandError(f"{path / SPEC_FILE} is not JSON") from None
        return cls(path, LoopSpec.from_dict(data))

    @property
    def id(self) -> str:
        return self.spec.id

    def program(self, iteration: int) -> Path:
        return self.path / PROGRAMS / f"{iteration}.qasm"

    def step_file(self, iteration: int) -> Path:
        return self.path / STEPS / f"{iteration}.json"

    def value_file(self, iteration: int) -> Path:
        return self.path / STEPS / f"{iteration}.value"

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the journal (step submission against cancel)."""
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def append(self, *records: LoopRecord, t: float | None = None) -> None:
        """Append records in one write (call under ``locked``)."""
        stamp = time.time() if t is None else t
        text = "".join(r.to_line(stamp) + "\n" for r in records)
        fd = os.open(self.path / JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, text.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[LoopRecord]:
        try:
            text = (self.path / JOURNAL_FILE).read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [r for r in (decode_line(line) for line in text.splitlines()) if r is not None]

    def history(self) -> LoopHistory:
        return replay(self.records(), self.spec.goal)

    def report(self, iteration: int) -> StepReport:
        """What step ``iteration`` said (its file, else the shell contract's files)."""
        try:
            data = json.loads(self.step_file(iteration).read_text())
        except (OSError, ValueError):
            data = None
        if isinstance(data, Mapping):
            report = StepReport.from_dict(data)
            if not report.done and not self.program(iteration + 1).exists():
                return replace(report, done=True, reason=f"step {iteration} wrote no next program")
            return report
        value: float | None = None
        with contextlib.suppress(OSError, ValueError):
            value = float(self.value_file(iteration).read_text().strip())
            if not math.isfinite(value):
                value = None
        return StepReport(value=value, done=not self.program(iteration + 1).exists())


@dataclass(frozen=True)
class StepReport:
    """What a step said: the value task k measured, and whether the loop is done."""

    value: float | None = None
    done: bool = False
    reason: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepReport:
        value = data.get("value")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            value = None
        reason = data.get("reason")
        return cls(
            value=None if value is None else float(value),
            done=data.get("done") is True,
            reason=reason if isinstance(reason, str) else None,
        )


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def resolve(loop: str, environ: Mapping[str, str] | None = None) -> LoopDir:
    """A loop named by its directory or by its id (under the default root)."""
    path = Path(loop)
    if (path / SPEC_FILE).exists():
        return LoopDir.open(path)
    if "/" not in loop:
        candidate = default_root(environ) / loop
        if (candidate / SPEC_FILE).exists():
            return LoopDir.open(candidate.resolve())
    raise CommandError(
        f"no loop {loop!r}: give its directory, or the id of a loop under {default_root(environ)}"
    )


def known_loops(environ: Mapping[str, str] | None = None) -> list[LoopDir]:
    """Every loop registered under the default root (directories and links to them)."""
    root = default_root(environ)
    loops = []
    with contextlib.suppress(OSError):
        for entry in sorted(root.iterdir()):
            with contextlib.suppress(CommandError, OSError):
                loops.append(LoopDir.open(entry.resolve()))
    return loops


# --- the step program's side ---------------------------------------------------------------


class Step:
    """The current step of a loop, seen from the step command's process."""

    def __init__(self, loop: LoopDir, iteration: int) -> None:
        self.loop = loop
        self.iteration = iteration
        self._result: Any = None

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> Step:
        env = os.environ if environ is None else environ
        where, k = env.get(DIR_VARIABLE), env.get(ITERATION_VARIABLE)
        if not where or k is None or not k.isdigit():
            raise CommandError(
                f"not in a loop's step: {DIR_VARIABLE} and {ITERATION_VARIABLE} are not set "
                "(run it with 'flux quantum loop submit')"
            )
        return cls(LoopDir.open(where), int(k))

    @property
    def directory(self) -> Path:
        return self.loop.path

    @property
    def program(self) -> str:
        """The program task k ran."""
        return self.loop.program(self.iteration).read_text()

    def result(self, timeout: float | None = None) -> Any:
        """The result of task k (a ``TaskResult``: ``.counts``, ``.shots``), read through
        the handler service as ``flux quantum task`` reads it."""
        if self._result is None:
            from flux_quantum.job.consumer import wait_result

            self._result = wait_result(timeout=timeout)
        return self._result

    @property
    def state(self) -> dict[str, Any]:
        """The optimiser state the previous step saved ({} at the first)."""
        try:
            data = json.loads(self.loop.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CommandError(
                f"cannot read the loop's state {self.loop.state_file}: {exc}"
            ) from None
        return data if isinstance(data, dict) else {}

    def save_state(self, state: Mapping[str, Any]) -> None:
        _write_atomic(self.loop.state_file, json.dumps(state, sort_keys=True) + "\n")

    def next(self, program_text: str, value: float | None = None) -> None:
        """Program k+1 for the next step (the loop goes on unless it reached its
        maximum of iterations or its budget)."""
        _write_atomic(self.loop.program(self.iteration + 1), program_text)
        self._report(StepReport(value=_finite(value), done=False))

    def done(self, value: float | None = None, reason: str = CONVERGED) -> None:
        """The loop ends after this step, for ``reason``."""
        self._report(StepReport(value=_finite(value), done=True, reason=reason))

    def _report(self, report: StepReport) -> None:
        data = {"value": report.value, "done": report.done, "reason": report.reason}
        _write_atomic(self.loop.step_file(self.iteration), json.dumps(data) + "\n")


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"a loop's value must be a finite number, got {value}")
    return value


# --- the decision after a step ---------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What follows step k: the next step (``next_device``, ``budget``) or the end."""

    stepped: Stepped
    moved: Moved | None = None
    ended: Ended | None = None
    next_device: str | None = None
    budget: float | None = None


def decide(spec: LoopSpec, history: LoopHistory, stepped: Stepped, report: StepReport) -> Decision:
    """After step k ran: go on to k+1 (on the loop's device, within what is left of the
    budget), or end, saying why. Pure."""
    k = stepped.iteration
    moved = None
    device = history.device
    if stepped.device:
        if device is not None and stepped.device != device:
            moved = Moved(k, device, stepped.device)
        device = stepped.device
    stepped = replace(stepped, value=report.value)
    spent = history.spent + (stepped.cost or 0.0)

    def end(outcome: str, reason: str) -> Decision:
        return Decision(stepped, moved, Ended(k, outcome, reason))

    if history.ended is not None:
        return Decision(stepped, moved, None)
    if stepped.rc != 0:
        how = f"was killed by signal {-stepped.rc}" if stepped.rc < 0 else f"exited {stepped.rc}"
        return end(FAILED, f"step {k} (job {_f58(stepped.jobid)}) {how}")
    if report.done:
        return end(CONVERGED, report.reason or f"step {k} said the loop is done")
    if k + 1 >= spec.max_iterations:
        return end(MAX_REACHED, f"{spec.max_iterations} iterations done")
    budget = None
    if spec.max_cost is not None:
        # Rounded as the next step's qpu.max_cost is: a float sum a hair under the
        # budget leaves nothing a task could be given.
        budget = round(spec.max_cost - spent, 6)
        if budget <= 0:
            return end(BUDGET, f"spent {spent:.2f} of max-cost {spec.max_cost:.2f}")
        if stepped.cost is not None and budget < stepped.cost:
            # The next task runs the same shots on the same device: one that costs
            # what this one did would be refused by the service for its qpu.max_cost.
            return end(
                BUDGET,
                f"spent {spent:.2f} of max-cost {spec.max_cost:.2f}: the {budget:.2f} left "
                f"would not pay another task like step {k}'s ({stepped.cost:.2f})",
            )
    return Decision(stepped, moved, None, next_device=device, budget=budget)


def _f58(jobid: int) -> str:
    from flux_quantum.job.consumer import encode_jobid

    return encode_jobid(jobid)
