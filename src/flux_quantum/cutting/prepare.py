"""Preparing a cut: circuit, observables and width in, the manifest out, as JSON.

``prepare`` is the whole classical work before any task: parse the circuit, choose the
cut, build the subexperiments. It is pure and quick for the circuits a cut takes (a
24-qubit circuit with a few hundred gates and three cut gates: well under a second), yet
its cost grows as 6^cuts, so ``run_bounded`` runs it in a child process (``python -m
flux_quantum.cutting``, JSON on stdin and stdout) bounded in CPU seconds and
memory: a pathological circuit ends that process with a sentence, never the caller. An
error is ``{"error": SENTENCE}``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any

from flux_quantum.cutting.circuit import CircuitError, parse_circuit
from flux_quantum.cutting.experiments import build_experiments
from flux_quantum.cutting.manifest import dump
from flux_quantum.cutting.observables import ObservableError, parse_observables
from flux_quantum.cutting.plan import PlanError, plan_cut
from flux_quantum.errors import FluxQuantumError

CPU_SECONDS = 60
MEMORY_BYTES = 2 << 30


class PrepareError(FluxQuantumError):
    """The cut cannot be prepared; the message is one sentence."""


def prepare(request: dict[str, Any]) -> dict[str, Any]:
    """The manifest of cutting ``request["circuit"]`` (OpenQASM text) into fragments of at
    most ``request["max_width"]`` qubits, for ``request["observables"]``."""
    try:
        circuit = parse_circuit(str(request["circuit"]))
        observables = parse_observables(list(request["observables"]), circuit.qubits)
        plan = plan_cut(circuit, int(request["max_width"]))
        return dump(build_experiments(circuit, plan, observables))
    except (CircuitError, ObservableError, PlanError) as exc:
        return {"error": str(exc)}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_bounded(request: dict[str, Any], timeout: float = 2.0 * CPU_SECONDS) -> dict[str, Any]:
    """``prepare(request)`` in a child process bounded in CPU time and memory; the
    manifest, or PrepareError with the reason."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "flux_quantum.cutting"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=_limit,
        )
    except subprocess.TimeoutExpired:
        raise PrepareError(f"preparing the cut took more than {timeout:g}s") from None
    if done.returncode != 0:
        raise PrepareError(
            f"preparing the cut failed (over {CPU_SECONDS}s of CPU or "
            f"{MEMORY_BYTES >> 30} GiB of memory?): "
            + (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        )
    out: dict[str, Any] = json.loads(done.stdout)
    if "error" in out:
        raise PrepareError(out["error"])
    return out


def main() -> int:
    request = json.load(sys.stdin)
    json.dump(prepare(request), sys.stdout)
    return 0
