"""Small helpers the benchmarks share (``python bench/NAME.py`` finds this module
next to them)."""

from __future__ import annotations

import csv
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# The benchmarks' quantum program: a 4-qubit GHZ state.
PROGRAM = """OPENQASM 3.0;
bit[4] c;
qubit[4] q;
h q[0];
cnot q[0], q[1];
cnot q[1], q[2];
cnot q[2], q[3];
c = measure q;
"""


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def verdict(ok: bool) -> str:
    """How a benchmark prints a target: met or MISSED."""
    return "met" if ok else "MISSED"


def read_rows(path: Path, cls: type[T]) -> list[T]:
    """The rows of a CSV a benchmark wrote from dataclass ``cls`` (one column a field),
    each field's type restored from its annotation (``float | None``: empty is None)."""
    kinds = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            values: dict[str, Any] = {}
            for key, text in raw.items():
                kind = kinds.get(key, "str")
                if "None" in kind and text in ("", "None"):
                    values[key] = None
                elif kind.startswith("float"):
                    values[key] = float(text)
                elif kind.startswith("int"):
                    values[key] = int(text)
                else:
                    values[key] = text
            rows.append(cls(**values))
    return rows


def revision(repo: Path, paths: Iterable[str] = ("src", "examples", "bench")) -> str:
    """The commit being measured, "(modified)" when ``paths`` of ``repo`` differ from it
    (new files count too; the results in bench/results do not: they are what a run
    writes, not what it runs). Read when the run starts."""
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", *paths, ":!bench/results"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (commit or "?") + (" (modified)" if dirty else "")


def write_record(
    results: Path, name: str, args: Sequence[str], runs: Iterable[Any], summary: list[str]
) -> None:
    """A full run's record: ``results/NAME.json`` (the command, the commit, every run
    and the summary) and ``results/NAME.txt`` (the command, the commit, the summary)."""
    results.mkdir(parents=True, exist_ok=True)
    record = {
        "command": f"python bench/{name}.py " + " ".join(args),
        "commit": revision(results.parents[1]),
        "runs": [asdict(r) for r in runs],
        "summary": summary,
    }
    (results / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    (results / f"{name}.txt").write_text(
        f"$ {record['command']}\ncommit {record['commit']}\n\n" + "\n".join(summary) + "\n"
    )


def flux_command(
    env: Mapping[str, str],
    cwd: Path,
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 120.0,
) -> str:
    """``flux ARGV`` in an instance's environment, its output; RuntimeError with what
    it said (on one line, its end) when it fails and ``check``."""
    proc = subprocess.run(
        ["flux", *argv], env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        said = " ".join(f"{proc.stdout.strip()} {proc.stderr.strip()}".split())
        raise RuntimeError(f"flux {' '.join(argv)}: {said[-600:]}")
    return proc.stdout
