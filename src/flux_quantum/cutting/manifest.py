"""A cut's manifest: its experiments as JSON, written by ``prepare`` and read back by the
job that recombines them.

The manifest holds everything the recombination needs (the plan, the cut gates, the
observables and their settings, every program with the bits it reads, the terms) and the
programs' texts, so that a job never needs the original circuit. ``load`` checks the
version and the shape it reads; nothing here does I/O but ``read_manifest`` and
``write_manifest``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flux_quantum.cutting.experiments import Experiments, Program, Term
from flux_quantum.cutting.plan import Plan
from flux_quantum.errors import FluxQuantumError

VERSION = 1


class ManifestError(FluxQuantumError, ValueError):
    """A manifest that cannot be read; the message says why."""


def dump(experiments: Experiments) -> dict[str, Any]:
    return {
        "version": VERSION,
        "qubits": experiments.qubits,
        "plan": experiments.plan.to_dict(),
        "cut_gates": [dict(g) for g in experiments.cut_gates],
        "observables": list(experiments.observables),
        "groups": [list(g) for g in experiments.groups],
        "overhead": experiments.overhead,
        "terms": [
            {"coefficient": t.coefficient, "variants": list(t.variants)} for t in experiments.terms
        ],
        "variants": [
            [[list(op) for op in ops] for ops in fragment] for fragment in experiments.variants
        ],
        "programs": [p.to_dict() for p in experiments.programs],
    }


def load(doc: Any) -> Experiments:
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise ManifestError(f"not a cut manifest of version {VERSION}")
    try:
        plan = Plan(
            tuple(tuple(b) for b in doc["plan"]["blocks"]),
            tuple(doc["plan"]["cuts"]),
            tuple(doc["plan"]["widths"]),
        )
        programs = tuple(
            Program(
                int(p["fragment"]),
                int(p["variant"]),
                int(p["group"]),
                tuple(p["qubits"]),
                tuple(p["signs"]),
                str(p["text"]),
            )
            for p in doc["programs"]
        )
        terms = tuple(Term(float(t["coefficient"]), tuple(t["variants"])) for t in doc["terms"])
        variants = tuple(
            tuple(tuple(tuple(op) for op in ops) for ops in fragment)
            for fragment in doc.get("variants", [])
        )
        return Experiments(
            int(doc["qubits"]),
            plan,
            tuple(doc["cut_gates"]),
            tuple(doc["observables"]),
            tuple(tuple(g) for g in doc["groups"]),
            programs,
            terms,
            variants,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"a cut manifest lacks or misspells {exc}") from None


def write_manifest(
    path: Path, experiments: Experiments, extra: dict[str, Any] | None = None
) -> None:
    doc = dump(experiments)
    doc.update(extra or {})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def read_manifest(path: Path) -> tuple[Experiments, dict[str, Any]]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"cannot read the cut manifest {path}: {exc}") from None
    return load(doc), doc
