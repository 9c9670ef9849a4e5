"""QAOA for MaxCut on the triangular prism, optimised by SPSA: the pure parts.

This module owns everything both drivers share and nothing that talks to Flux or a
vendor: the graph, its maximum cut (brute force), the OpenQASM 3 program of a parameter
vector, the expected cut of a task's counts, and the optimiser, whose state is a
JSON-able dict advanced one evaluation at a time by :func:`advance`. It never does I/O
(``main`` aside) and never reads a clock; given the same state and value it always
returns the same answer, so a step that runs again after a crash decides the same.

The problem. The triangular prism: 6 nodes, 9 edges, every node of degree 3 (one of the
two 3-regular graphs on 6 nodes; the other, K3,3, is bipartite and easy)::

    0 --- 1        triangles 0-1-2 and 3-4-5,
     \\   /|        rungs 0-3, 1-4, 2-5
      \\ / |
       2  |        maximum cut 7 (two triangles can never be cut whole);
       |  4        a uniformly random assignment cuts 4.5 on average
       | / \\
       |/   \\
       5 --- 3

The objective is the expected cut value of the measured assignments, maximised (no
energy sign flip anywhere): counts' bitstrings are read with ``c[0]`` leftmost, the
order Braket's counts (and flux-quantum's IBM counts) use, and bit ``i`` is node ``i``'s
side.

The circuit (QAOA depth p, parameters ``[gamma_1..gamma_p, beta_1..beta_p]``)::

    H on every qubit; for each layer l:
        exp(-i gamma_l C), C = sum over edges (1 - Z_i Z_j) / 2:
            per edge  cnot q[i], q[j]; rz(-gamma_l) q[j]; cnot q[i], q[j];
        exp(-i beta_l X) on every qubit: rx(2 beta_l)
    c = measure q;

Only h, cnot, rz and rx: gates Braket's OpenQASM runs (the emulator's simulator too).

The optimiser. Simultaneous perturbation stochastic approximation (Spall 1998) with the
standard gains ``a_k = a / (k + 1 + A)^0.602`` and ``c_k = c / (k + 1)^0.101``. One
evaluation is one program (one quantum task, one loop iteration):

- evaluation 0 measures the starting point ``theta_0`` (the baseline the result is
  judged against; it needs no random draw, so program 0 does not depend on the seed);
- SPSA iteration k then takes two evaluations, ``theta_k + c_k delta_k`` and
  ``theta_k - c_k delta_k`` (``delta_k`` of random +-1), and after the second moves
  ``theta_{k+1} = theta_k + a_k (f+ - f-) / (2 c_k delta_k)`` (ascent: f is maximised).

``delta_k`` is drawn from ``numpy.random.default_rng([seed, k])``: the seed kept in the
state and the iteration number fix it, so no generator state has to survive between
steps and a repeated step draws the same perturbation. The best evaluation seen (value
and parameters) and the best single assignment any task sampled are kept.

Command line (prints, never writes files)::

    python examples/qaoa/maxcut.py start [--p P] > start.qasm   # program 0
    python examples/qaoa/maxcut.py info [--p P]                 # the graph and bounds
    python examples/qaoa/maxcut.py report STATE.json            # a run's convergence
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

STATE_VERSION = 1


# --- the problem -----------------------------------------------------------------------


@dataclass(frozen=True)
class Graph:
    """An undirected graph on nodes ``0..nodes-1``."""

    name: str
    nodes: int
    edges: tuple[tuple[int, int], ...]


PRISM = Graph(
    name="triangular prism",
    nodes=6,
    edges=((0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5)),
)
GRAPH = PRISM


def cut_value(bitstring: str, graph: Graph = GRAPH) -> int:
    """How many edges BITSTRING (node i's side at position i) cuts."""
    return sum(1 for i, j in graph.edges if bitstring[i] != bitstring[j])


def max_cut(graph: Graph = GRAPH) -> tuple[int, list[str]]:
    """The maximum cut by brute force over all 2^n assignments, and every assignment
    that reaches it (each cut appears twice: an assignment and its complement)."""
    best, reaching = -1, []
    for number in range(2**graph.nodes):
        bits = format(number, f"0{graph.nodes}b")
        value = cut_value(bits, graph)
        if value > best:
            best, reaching = value, [bits]
        elif value == best:
            reaching.append(bits)
    return best, reaching


def _check_counts(counts: Mapping[str, int], graph: Graph) -> int:
    """The total shots of COUNTS; ValueError naming what is wrong with them."""
    if not isinstance(counts, Mapping) or not counts:
        raise ValueError("counts must be a non-empty mapping of bitstring to count")
    total = 0
    for key, count in counts.items():
        if not isinstance(key, str) or len(key) != graph.nodes or set(key) - {"0", "1"}:
            raise ValueError(
                f"counts key {key!r} is not a bitstring of {graph.nodes} characters 0/1 "
                f"(one bit per node of the {graph.name})"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"counts[{key!r}] must be an integer >= 0, got {count!r}")
        total += count
    if total == 0:
        raise ValueError("counts hold no shots (every count is 0)")
    return total


def expected_cut(counts: Mapping[str, int], graph: Graph = GRAPH) -> float:
    """The mean cut value of the measured assignments: the objective (maximised)."""
    total = _check_counts(counts, graph)
    return sum(cut_value(bits, graph) * n for bits, n in counts.items()) / total


def best_sample(counts: Mapping[str, int], graph: Graph = GRAPH) -> tuple[int, str]:
    """The largest cut among the sampled assignments and one assignment reaching it
    (the lowest bitstring, so the answer does not depend on the counts' order)."""
    _check_counts(counts, graph)
    sampled = [bits for bits, n in counts.items() if n > 0]
    top = max(cut_value(bits, graph) for bits in sampled)
    return top, min(bits for bits in sampled if cut_value(bits, graph) == top)


# --- the circuit -----------------------------------------------------------------------


def _angle(value: float) -> str:
    return repr(float(value))  # shortest text that reads back as the same float


def circuit(parameters: Sequence[float], graph: Graph = GRAPH) -> str:
    """The OpenQASM 3 program of QAOA with PARAMETERS = [gammas..., betas...]."""
    if len(parameters) % 2 or not parameters:
        raise ValueError(
            f"parameters must be [gamma_1..gamma_p, beta_1..beta_p], got {len(parameters)} values"
        )
    depth = len(parameters) // 2
    gammas, betas = parameters[:depth], parameters[depth:]
    n = graph.nodes
    lines = [
        "OPENQASM 3.0;",
        f"// QAOA p={depth} for MaxCut on the {graph.name}: "
        f"gamma={[float(g) for g in gammas]} beta={[float(b) for b in betas]}",
        f"qubit[{n}] q;",
        f"bit[{n}] c;",
    ]
    lines += [f"h q[{i}];" for i in range(n)]
    for gamma, beta in zip(gammas, betas, strict=True):
        for i, j in graph.edges:
            lines += [f"cnot q[{i}], q[{j}];", f"rz({_angle(-gamma)}) q[{j}];"]
            lines.append(f"cnot q[{i}], q[{j}];")
        lines += [f"rx({_angle(2 * beta)}) q[{i}];" for i in range(n)]
    lines += ["c = measure q;", ""]
    return "\n".join(lines)


def exact_expected_cut(parameters: Sequence[float], graph: Graph = GRAPH) -> float:
    """The expected cut of PARAMETERS' circuit without shot noise (a numpy statevector of
    the same unitary as :func:`circuit`, up to global phase): for bounds, not for the loop."""
    n = graph.nodes
    depth = len(parameters) // 2
    numbers = np.arange(2**n)
    # Basis state index -> bit of node i, with node 0 the most significant bit (c[0] leftmost).
    bits = (numbers[:, None] >> (n - 1 - np.arange(n))[None, :]) & 1
    cuts = sum((bits[:, i] != bits[:, j]).astype(float) for i, j in graph.edges)
    psi = np.full(2**n, 2 ** (-n / 2), dtype=complex)
    for gamma, beta in zip(parameters[:depth], parameters[depth:], strict=True):
        psi = psi * np.exp(-1j * gamma * cuts)
        tensor = psi.reshape((2,) * n)
        cos, sin = math.cos(beta), -1j * math.sin(beta)
        for q in range(n):
            zero = np.take(tensor, 0, axis=q)
            one = np.take(tensor, 1, axis=q)
            tensor = np.stack([cos * zero + sin * one, sin * zero + cos * one], axis=q)
        psi = tensor.reshape(-1)
    return float(np.abs(psi) ** 2 @ cuts)


def best_p1(graph: Graph = GRAPH) -> tuple[float, float, float]:
    """The best expected cut QAOA p=1 reaches, with its gamma and beta: a grid over
    gamma in [0, pi] and beta in [0, pi/2] (the other quadrants mirror it), then finer
    grids around the best point (to 3 decimals of the angles). Of mirror points that tie
    (gamma and pi - gamma on a graph like this one) the smaller gamma is kept."""

    def search(gammas: Any, betas: Any) -> tuple[float, float, float]:
        points = [
            (exact_expected_cut([g, b], graph), float(g), float(b)) for g in gammas for b in betas
        ]
        return max(points, key=lambda p: (round(p[0], 9), -p[1]))

    value, gamma, beta = search(np.linspace(0.0, math.pi, 61), np.linspace(0.0, math.pi / 2, 31))
    for width in (0.06, 0.006):
        value, gamma, beta = search(
            np.linspace(gamma - width, gamma + width, 25),
            np.linspace(beta - width, beta + width, 25),
        )
    return value, gamma, beta


# --- the optimiser ---------------------------------------------------------------------


@dataclass(frozen=True)
class SpsaConfig:
    """SPSA's settings. ``iterations`` SPSA iterations take ``1 + 2 * iterations``
    evaluations (the baseline, then a pair each). The gains suit this problem at ~1000
    shots (chosen on 40 seeds of a shot-noise model; see README.md)."""

    depth: int = 1
    start: tuple[float, ...] = (0.1, 0.1)  # [gammas..., betas...]
    iterations: int = 14
    a: float = 0.2
    c: float = 0.1
    stability: float = 2.0  # A
    alpha: float = 0.602
    gamma: float = 0.101
    seed: int = 7

    @property
    def evaluations(self) -> int:
        return 1 + 2 * self.iterations

    def check(self) -> SpsaConfig:
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"depth (QAOA p) must be an integer >= 1, got {self.depth!r}")
        if len(self.start) != 2 * self.depth:
            raise ValueError(
                f"start must hold 2*p = {2 * self.depth} angles "
                f"[gamma_1..gamma_p, beta_1..beta_p], got {len(self.start)}"
            )
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise ValueError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {self.iterations!r}")
        for name in ("a", "c"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if not math.isfinite(self.stability) or self.stability < 0:
            raise ValueError(f"stability (A) must be a number >= 0, got {self.stability!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        return self

    def gains(self, k: int) -> tuple[float, float]:
        """``(a_k, c_k)`` of SPSA iteration k (0-based)."""
        return (
            self.a / (k + 1 + self.stability) ** self.alpha,
            self.c / (k + 1) ** self.gamma,
        )

    def perturbation(self, k: int) -> list[float]:
        """``delta_k``: +-1 per parameter, fixed by the seed and k."""
        rng = np.random.default_rng([self.seed, k])
        return [float(x) for x in rng.choice([-1.0, 1.0], size=2 * self.depth)]


def add_options(parser: argparse.ArgumentParser) -> None:
    """The optimiser's options, the same in both drivers."""
    defaults = SpsaConfig()
    parser.add_argument("--p", type=int, default=defaults.depth, help="QAOA depth")
    parser.add_argument(
        "--iterations", type=int, default=defaults.iterations, help="SPSA iterations"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="perturbations' seed")
    parser.add_argument("--a", type=float, default=defaults.a, help="SPSA's a (step size)")
    parser.add_argument("--c", type=float, default=defaults.c, help="SPSA's c (perturbation)")


def config_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> SpsaConfig:
    """The configuration ADD_OPTIONS' options asked for (the start repeated per layer);
    a bad value ends the program with the parser's usage error."""
    try:
        return SpsaConfig(
            depth=args.p,
            start=SpsaConfig().start * args.p,
            iterations=args.iterations,
            seed=args.seed,
            a=args.a,
            c=args.c,
        ).check()
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
        raise


@dataclass(frozen=True)
class Best:
    value: float
    parameters: tuple[float, ...]
    evaluation: int


@dataclass(frozen=True)
class SpsaState:
    """Where the optimisation is. ``evaluated`` values have been folded in; ``pending``
    is the parameter vector of the next program (evaluation number ``evaluated``)."""

    config: SpsaConfig
    theta: tuple[float, ...]
    evaluated: int = 0
    pending: tuple[float, ...] = ()
    plus_value: float | None = None  # f(theta_k + c_k delta_k), between the pair
    best: Best | None = None
    best_sample: tuple[int, str] | None = None  # (cut, assignment) over every shot
    history: tuple[float, ...] = ()  # the value of every evaluation, in order
    done: bool = False
    version: int = field(default=STATE_VERSION)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"]["evaluations"] = self.config.evaluations  # for readers of state.json
        return _jsonable(d)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def initial_state(config: SpsaConfig | None = None) -> dict[str, Any]:
    """The state before evaluation 0; its ``pending`` parameters are program 0's."""
    config = (config or SpsaConfig()).check()
    start = tuple(float(x) for x in config.start)
    return SpsaState(config=config, theta=start, pending=start).to_dict()


def _field(d: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ValueError(f"{where} has no '{key}'")
    value = d[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ValueError(f"{where}.{key} must be {_kind_name(kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise ValueError(f"{where}.{key} must be {_kind_name(kinds)}, got {value!r}")
    return value


def _kind_name(kinds: type | tuple[type, ...]) -> str:
    names = [k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,))]
    return " or ".join("a number" if n in ("int", "float") else f"a {n}" for n in names)


def _vector(value: Any, length: int, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or len(value) != length:
        raise ValueError(f"{where} must be a list of {length} numbers, got {value!r}")
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise ValueError(f"{where} must be a list of {length} finite numbers, got {value!r}")
    return tuple(float(x) for x in value)


def decode_state(d: Any) -> SpsaState:
    """A state dict (as read from JSON) checked field by field; ValueError says which
    field is wrong and what it accepts."""
    if not isinstance(d, Mapping):
        raise ValueError(f"the optimiser state must be a JSON object, got {type(d).__name__}")
    version = _field(d, "version", int, "state")
    if version != STATE_VERSION:
        raise ValueError(f"state.version {version} is not supported (only {STATE_VERSION})")
    raw = _field(d, "config", Mapping, "state")
    number = (int, float)
    config = SpsaConfig(
        depth=_field(raw, "depth", int, "state.config"),
        start=(),
        iterations=_field(raw, "iterations", int, "state.config"),
        a=float(_field(raw, "a", number, "state.config")),
        c=float(_field(raw, "c", number, "state.config")),
        stability=float(_field(raw, "stability", number, "state.config")),
        alpha=float(_field(raw, "alpha", number, "state.config")),
        gamma=float(_field(raw, "gamma", number, "state.config")),
        seed=_field(raw, "seed", int, "state.config"),
    )
    width = 2 * config.depth if config.depth >= 1 else 0
    config = replace(config, start=_vector(raw.get("start"), width, "state.config.start")).check()
    evaluated = _field(d, "evaluated", int, "state")
    if not 0 <= evaluated <= config.evaluations:
        raise ValueError(
            f"state.evaluated must be between 0 and {config.evaluations}, got {evaluated}"
        )
    done = _field(d, "done", bool, "state")
    history = _field(d, "history", list, "state")
    if len(history) != evaluated:
        raise ValueError(
            f"state.history must hold one value per evaluation ({evaluated}), has {len(history)}"
        )
    history_values = _vector(history, evaluated, "state.history")
    plus = d.get("plus_value")
    in_pair = evaluated >= 1 and evaluated % 2 == 0  # after a pair's first evaluation
    if in_pair and not done:
        if isinstance(plus, bool) or not isinstance(plus, int | float):
            raise ValueError(f"state.plus_value must be a number mid-pair, got {plus!r}")
        plus = float(plus)
    elif plus is not None:
        raise ValueError(f"state.plus_value must be null outside a pair, got {plus!r}")
    best = None
    if d.get("best") is not None:
        b = _field(d, "best", Mapping, "state")
        best = Best(
            value=float(_field(b, "value", number, "state.best")),
            parameters=_vector(b.get("parameters"), width, "state.best.parameters"),
            evaluation=_field(b, "evaluation", int, "state.best"),
        )
    elif evaluated:
        raise ValueError("state.best must be set once anything was evaluated")
    sample = None
    if d.get("best_sample") is not None:
        s = d["best_sample"]
        if (
            not isinstance(s, list)
            or len(s) != 2
            or isinstance(s[0], bool)
            or not isinstance(s[0], int)
            or not isinstance(s[1], str)
        ):
            raise ValueError(f"state.best_sample must be [cut, bitstring], got {s!r}")
        if len(s[1]) != GRAPH.nodes or set(s[1]) - {"0", "1"}:
            raise ValueError(
                f"state.best_sample's bitstring must be {GRAPH.nodes} characters 0/1, got {s[1]!r}"
            )
        sample = (s[0], s[1])
    return SpsaState(
        config=config,
        theta=_vector(d.get("theta"), width, "state.theta"),
        evaluated=evaluated,
        pending=() if done else _vector(d.get("pending"), width, "state.pending"),
        plus_value=plus,
        best=best,
        best_sample=sample,
        history=history_values,
        done=done,
    )


def record_sample(state: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
    """STATE with the best single assignment of COUNTS folded into ``best_sample``."""
    current = decode_state(state)
    cut, bits = best_sample(counts)
    if current.best_sample is None or cut > current.best_sample[0]:
        current = replace(current, best_sample=(cut, bits))
    return current.to_dict()


def advance(
    state: Mapping[str, Any], value: float
) -> tuple[dict[str, Any], list[float] | None, bool]:
    """Fold in VALUE, the objective measured for the pending parameters; return the new
    state, the parameters of the next program (None when done) and whether it is done."""
    s = decode_state(state)
    if s.done:
        raise ValueError("the optimisation is already done: no evaluation is pending")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"value must be a finite number (the expected cut), got {value!r}")
    value = float(value)
    cfg = s.config
    evaluation = s.evaluated
    best = s.best
    if best is None or value > best.value:
        best = Best(value=value, parameters=s.pending, evaluation=evaluation)
    s = replace(s, evaluated=evaluation + 1, history=(*s.history, value), best=best)
    theta = s.theta
    if evaluation % 2 == 0:
        # The baseline, or a pair's second evaluation: update theta (after a pair).
        if evaluation > 0:
            k = (evaluation - 1) // 2
            a_k, c_k = cfg.gains(k)
            delta = cfg.perturbation(k)
            assert s.plus_value is not None
            slope = (s.plus_value - value) / (2 * c_k)
            theta = tuple(t + a_k * slope / d for t, d in zip(theta, delta, strict=True))
        s = replace(s, theta=theta, plus_value=None)
        k = evaluation // 2  # the next pair's iteration
        if k >= cfg.iterations:
            return replace(s, pending=(), done=True).to_dict(), None, True
        sign = 1.0
    else:
        s = replace(s, plus_value=value)
        k = (evaluation - 1) // 2
        sign = -1.0
    _, c_k = cfg.gains(k)
    delta = cfg.perturbation(k)
    pending = tuple(t + sign * c_k * d for t, d in zip(theta, delta, strict=True))
    return replace(s, pending=pending).to_dict(), list(pending), False


def optimise(config: SpsaConfig, evaluate: Callable[[str], Mapping[str, int]]) -> dict[str, Any]:
    """The whole optimisation in one process: EVALUATE runs a program and returns its
    counts (a simulator, or a vendor task). The drivers do the same, one evaluation per
    task; this is what the tests and convergence.py run against a local simulator."""
    state = initial_state(config)
    parameters: list[float] | None = list(state["pending"])
    while parameters is not None:
        counts = evaluate(circuit(parameters))
        state = record_sample(state, counts)
        state, parameters, _ = advance(state, expected_cut(counts))
    return state


def describe(state: Mapping[str, Any]) -> str:
    """One line: evaluations, best value and where, best sampled cut."""
    s = decode_state(state)
    optimum, _ = max_cut()
    parts = [f"{s.evaluated}/{s.config.evaluations} evaluations"]
    if s.best is not None:
        params = ", ".join(f"{x:.3f}" for x in s.best.parameters)
        parts.append(f"best expected cut {s.best.value:.3f} at [{params}] (#{s.best.evaluation})")
    if s.best_sample is not None:
        parts.append(f"best sampled cut {s.best_sample[0]}/{optimum} ({s.best_sample[1]})")
    return "; ".join(parts)


def progress_line(evaluation: int, value: float, state: Mapping[str, Any]) -> str:
    """What either driver prints after evaluation EVALUATION measured VALUE."""
    return f"evaluation {evaluation}: expected cut {value:.3f}; {describe(state)}"


def report(state: Mapping[str, Any]) -> str:
    """The run's summary: every evaluation's value, then the best, against the bounds."""
    s = decode_state(state)
    optimum, _ = max_cut()
    lines = [f"QAOA p={s.config.depth} for MaxCut on the {GRAPH.name} (maximum cut {optimum})"]
    for n, value in enumerate(s.history):
        lines.append(f"  {n:3d}  {value:.3f}")
    lines.append(describe(state))
    if s.best is not None:
        exact = exact_expected_cut(s.best.parameters)
        lines.append(
            f"best parameters without shot noise: expected cut {exact:.3f} "
            f"(ratio {exact / optimum:.3f} of the maximum cut)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="print program 0 (the starting point's circuit)")
    info = sub.add_parser("info", help="print the graph, its maximum cut and QAOA's bound")
    for p in (start, info):
        p.add_argument("--p", type=int, default=1, help="QAOA depth (default 1)")
    show = sub.add_parser("report", help="print a run's convergence from its state file")
    show.add_argument("state", help="the optimiser state (a loop's DIR/state.json)")
    args = parser.parse_args(argv)
    if args.command == "report":
        try:
            with open(args.state, encoding="utf-8") as f:
                print(report(json.load(f)))
        except (OSError, ValueError) as exc:
            parser.exit(1, f"maxcut.py: {args.state}: {exc}\n")
        return 0
    try:
        state = initial_state(SpsaConfig(depth=args.p, start=SpsaConfig().start * args.p))
    except ValueError as exc:
        parser.error(str(exc))
    if args.command == "start":
        sys.stdout.write(circuit(state["pending"]))
        return 0
    optimum, reaching = max_cut()
    print(f"graph: the {GRAPH.name}, {GRAPH.nodes} nodes, edges {list(GRAPH.edges)}")
    print(f"maximum cut (brute force over {2**GRAPH.nodes} assignments): {optimum}")
    print(f"  reached by {', '.join(reaching)}")
    print(f"a uniformly random assignment cuts {len(GRAPH.edges) / 2} on average")
    print(
        f"starting point {list(state['pending'])}: expected cut {exact_expected_cut(state['pending']):.3f}"
    )
    if args.p == 1:
        value, gamma, beta = best_p1()
        print(
            f"best QAOA p=1 expected cut {value:.3f} at gamma {gamma:.3f}, beta {beta:.3f} "
            f"(ratio {value / optimum:.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
