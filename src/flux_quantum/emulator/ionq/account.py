"""What the emulated IonQ API says about the caller's key, the backends' characterizations
and what a job costs, in the shapes ionq-core 0.2.0 parses.

This module owns four documents of IonQ's API v0.4 that hold no job state: ``GET
/whoami`` (``Whoami``: the key's id and name, its project), a backend's
characterizations (``GET /backends/{b}/characterizations`` and ``.../{id}``: one per
backend, its qubits, an all-to-all connectivity, median fidelities from the scenario's
noise model, IonQ's published timings), a job's cost (``GET /jobs/{id}/cost``,
``GetJobCostResponse``: the estimate at its create, the charge once completed) and a cost
estimate (``GET /jobs/estimate``, ``GetJobEstimateResponse``). Prices are the scenario's
(``per_task`` plus ``per_shot`` times the shots), which the emulator also bills; IonQ
prices by gates, so the rate card says the emulator's rule in IonQ's units (a per-shot
``unit_cost`` and the per-task ``job_cost_minimum``). It must never hold state or read a
clock but the ``now`` it is given.
"""

from __future__ import annotations

import uuid
from typing import Any

from flux_quantum.emulator.ionq.scenario import NOISE_MODELS, IonqBackendSpec

KEY_NAME = "flux-quantum-emulator"
# IonQ's published gate and operation timings (microseconds), as its characterizations give them.
_TIMING = {"readout": 300, "reset": 20, "1q": 135, "2q": 600, "t1": 100_000_000, "t2": 1_000_000}


def _id(seed: int, *what: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"flux-quantum-emulator:{seed}:{':'.join(what)}"))


def whoami(seed: int) -> dict[str, Any]:
    return {"key_id": _id(seed, "key"), "key_name": KEY_NAME, "project_id": _id(seed, "project")}


def characterization(spec: IonqBackendSpec, seed: int, date: str) -> dict[str, Any]:
    """The backend's one characterization (fidelities from its noise model's readout
    error, the simulator's ideal)."""
    model = spec.name.removeprefix("qpu.")
    readout = 1.0 - NOISE_MODELS.get(model, 0.0)
    n = spec.qubits
    return {
        "id": _id(seed, "characterization", spec.name),
        "backend": spec.name,
        "date": date,
        "qubits": n,
        "connectivity": [[a, b] for a in range(n) for b in range(a + 1, n)],
        "fidelity": {
            "spam": {"median": readout},
            "1q": {"median": min(1.0, readout + 0.0045)},
            "2q": {"median": max(0.0, readout - 0.01)},
        },
        "timing": dict(_TIMING),
    }


def job_cost(estimate: float, charged: float | None) -> dict[str, Any]:
    """A job's ``GetJobCostResponse``: its estimate, and its charge once it has one."""
    document: dict[str, Any] = {
        "dry_run": False,
        "estimated_cost": {"value": estimate, "unit": "usd"},
    }
    if charged is not None:
        document["cost"] = {"value": charged, "unit": "usd"}
    return document


def estimate(
    spec: IonqBackendSpec, query: dict[str, Any], waiting_ms: int, at: str
) -> dict[str, Any]:
    """``GET /jobs/estimate``: what a job of ``query`` (``shots``, ``qubits``, ``1q_gates``,
    ``2q_gates``, ``type``) would cost on ``spec`` and how long its queue is."""
    shots = int(query.get("shots") or 100)
    context: dict[str, Any] = {"backend": spec.name, "organization": None, "project": None}
    for key in ("type", "qubits", "shots", "1q_gates", "2q_gates"):
        if query.get(key) is not None:
            context[key] = query[key] if key == "type" else int(query[key])
    return {
        "estimate_context": context,
        "estimated_at": at,
        "estimated_unit": "usd",
        "rate_card": {
            "id": f"flux-quantum-emulator-{spec.name}",
            "rates": [
                {
                    "sku": f"{spec.name}-shot",
                    "unit": "gates",
                    "unit_cost": spec.price.per_shot,
                    "cost_1q_gate": 0.0,
                    "cost_2q_gate": 0.0,
                    "job_cost_minimum": spec.price.per_task,
                }
            ],
        },
        "estimated_total_cost": spec.cost(shots),
        "estimated_execution_time": int(round(spec.queue.service_time * 1000)),
        "current_predicted_queue_time": waiting_ms,
    }
