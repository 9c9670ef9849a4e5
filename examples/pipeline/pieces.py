#!/usr/bin/env python3
"""The classical steps of the pipeline example: decompose a graph into pieces and write
one QAOA program per piece, then aggregate the pieces' counts into one cut and the next
round's angles.

The graph is a ring of N triangular prisms (examples/qaoa's 6-node graph), prism i joined
to prism i+1 by one edge; piece i is prism i. Each round runs QAOA at depth 1 on every
piece with the round's angles (gamma, beta); the aggregation reads each piece's counts
through the handler service (``flux quantum task JOBID --json``), takes each piece's best
sampled assignment, flips whole pieces where that cuts more of the ring's edges, and
scores the whole graph. The next round's angles come from a coordinate search: keep the
best angles so far, try a step along gamma, then beta, halving the step when neither
helps. Everything lives in one directory::

    DIR/state.json                 the search: best angles and value, the next try
    DIR/round-R/piece-I.qasm       round R's program of piece I (written by decompose)
    DIR/round-R/result.json        round R's scores and cut (written by aggregate)

    pieces.py decompose DIR ROUND --pieces N
    pieces.py aggregate DIR ROUND JOBID...    # the QPU jobs, piece 0 first
    pieces.py aggregate DIR ROUND --files F...  # counts already read ({"counts": ...})
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qaoa"))
from maxcut import PRISM, circuit, cut_value, expected_cut  # noqa: E402

START = {"gamma": 0.1, "beta": 0.1, "step": 0.2}


def ring_edges(pieces: int) -> list[tuple[int, int]]:
    """The edges joining prism i (its node 2) to prism i+1 (its node 0), in global node
    numbers (prism i's node k is 6 i + k)."""
    n = PRISM.nodes
    if pieces < 2:
        return []
    return [(n * i + 2, n * ((i + 1) % pieces)) for i in range(pieces)]


def load_state(directory: Path) -> dict[str, Any]:
    path = directory / "state.json"
    if not path.exists():
        return {"round": 0, "try": [START["gamma"], START["beta"]], "best": None, **START}
    return json.loads(path.read_text())


def decompose(directory: Path, round_: int, pieces: int) -> list[Path]:
    """Write round ``round_``'s program of every piece; the paths, piece 0 first."""
    state = load_state(directory)
    gamma, beta = state["try"]
    out = directory / f"round-{round_}"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(pieces):
        path = out / f"piece-{index}.qasm"
        path.write_text(circuit([gamma, beta], PRISM))
        written.append(path)
    state["pieces"] = pieces
    (directory / "state.json").write_text(json.dumps(state, indent=1))
    return written


def counts_of(jobid: str) -> dict[str, int]:
    """A QPU job's counts, read through the handler service."""
    out = subprocess.run(
        ["flux", "quantum", "task", jobid, "--wait", "--json", "--timeout=120"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(json.loads(out)["counts"])


def combine(best: Sequence[str]) -> str:
    """One assignment of the whole ring from each piece's best one: each piece in turn
    is flipped (its complement cuts the same edges inside it) when that cuts the edge to
    the piece before it."""
    placed = best[0] if best else ""
    n = PRISM.nodes
    for bits in best[1:]:
        if placed[len(placed) - n + 2] == bits[0]:  # the joining edge is not cut: flip
            bits = "".join("1" if b == "0" else "0" for b in bits)
        placed += bits
    return placed


def aggregate(directory: Path, round_: int, counts: Sequence[Mapping[str, int]]) -> dict:
    """Score round ``round_`` from its pieces' counts; choose the next round's angles."""
    state = load_state(directory)
    values = [expected_cut(c, PRISM) for c in counts]
    best = [max(c, key=lambda bits: (cut_value(bits, PRISM), c[bits], bits)) for c in counts]
    assignment = combine(best)
    n = PRISM.nodes
    edges = [(n * p + i, n * p + j) for p in range(len(counts)) for i, j in PRISM.edges]
    edges += ring_edges(len(counts))
    cut = sum(1 for i, j in edges if assignment[i] != assignment[j])
    value = sum(values) / len(values)
    angles = list(state["try"])
    if state["best"] is None or value > state["best"]["value"]:
        state["best"] = {"value": value, "angles": angles, "round": round_}
    elif state["round"] % 2 == 1:
        state["step"] /= 2  # neither direction helped
    gamma, beta = state["best"]["angles"]
    step = state["step"]
    state["round"] = round_ + 1
    state["try"] = [gamma + step, beta] if state["round"] % 2 == 0 else [gamma, beta + step]
    result = {
        "round": round_,
        "angles": angles,
        "expected_cut": values,
        "mean_expected_cut": value,
        "assignment": assignment,
        "cut": cut,
        "edges": len(edges),
        "next": state["try"],
    }
    (directory / f"round-{round_}" / "result.json").write_text(json.dumps(result, indent=1))
    (directory / "state.json").write_text(json.dumps(state, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dec = sub.add_parser("decompose", help="write one QAOA program per piece")
    dec.add_argument("dir", type=Path)
    dec.add_argument("round", type=int)
    dec.add_argument("--pieces", type=int, default=4)
    agg = sub.add_parser("aggregate", help="score the round from its QPU jobs' counts")
    agg.add_argument("dir", type=Path)
    agg.add_argument("round", type=int)
    agg.add_argument("jobs", nargs="+", help="the round's QPU jobs, piece 0 first")
    agg.add_argument(
        "--files", action="store_true", help="JOBS are JSON files with the counts instead"
    )
    args = parser.parse_args(argv)
    if args.command == "decompose":
        for path in decompose(args.dir, args.round, args.pieces):
            print(path)
        return 0
    if args.files:
        counts = [dict(json.loads(Path(f).read_text())["counts"]) for f in args.jobs]
    else:
        counts = [counts_of(job) for job in args.jobs]
    result = aggregate(args.dir, args.round, counts)
    print(
        f"round {result['round']}: angles {result['angles']}, mean expected cut per piece "
        f"{result['mean_expected_cut']:.3f}, cut {result['cut']} of {result['edges']} edges; "
        f"next {result['next']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
