"""The ``deviceCapabilities`` JSON document of an emulated device, as GetDevice returns it.

This module owns the translation of a ``DeviceSpec`` into the provider-specific Braket
capabilities schema (IonQ, IQM, Rigetti, gate-model simulator) that the SDK parses with
``BraketSchemaBase.parse_raw_schema``: deviceCost, executionWindows, shotsRange, qubit count,
native gates, connectivity. It must never import the Braket SDK (the emulator's import stays
light) nor invent fields the schemas do not have.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from flux_quantum.emulator.scenario import DeviceSpec

OPENQASM_ACTION = "braket.ir.openqasm.program"

# Gates the Braket local simulator accepts, as the managed simulators list them.
SUPPORTED_OPERATIONS = (
    "ccnot",
    "cnot",
    "cphaseshift",
    "cswap",
    "cy",
    "cz",
    "ecr",
    "h",
    "i",
    "iswap",
    "phaseshift",
    "rx",
    "ry",
    "rz",
    "s",
    "si",
    "swap",
    "t",
    "ti",
    "v",
    "vi",
    "x",
    "xx",
    "xy",
    "y",
    "yy",
    "z",
    "zz",
    "gpi",
    "gpi2",
    "ms",
    "prx",
)
_RESULT_TYPES = (
    {"name": "Sample", "observables": ["x", "y", "z", "h", "i"], "minShots": 1, "maxShots": 100000},
    {
        "name": "Expectation",
        "observables": ["x", "y", "z", "h", "i"],
        "minShots": 0,
        "maxShots": 100000,
    },
    {
        "name": "Variance",
        "observables": ["x", "y", "z", "h", "i"],
        "minShots": 0,
        "maxShots": 100000,
    },
    {"name": "Probability", "minShots": 0, "maxShots": 100000},
)

_HEADERS = {
    "IonQ": "braket.device_schema.ionq.ionq_device_capabilities",
    "IQM": "braket.device_schema.iqm.iqm_device_capabilities",
    "Rigetti": "braket.device_schema.rigetti.rigetti_device_capabilities",
}
_PARAMETERS = {
    "IonQ": "braket.device_schema.ionq.ionq_device_parameters",
    "IQM": "braket.device_schema.iqm.iqm_device_parameters",
    "Rigetti": "braket.device_schema.rigetti.rigetti_device_parameters",
}


def _header(name: str, version: str = "1") -> dict[str, str]:
    return {"name": name, "version": version}


def capabilities_json(spec: DeviceSpec, updated_at: datetime) -> str:
    """The JSON string GetDevice returns as ``deviceCapabilities`` for ``spec``."""
    return json.dumps(capabilities(spec, updated_at), separators=(",", ":"))


def capabilities(spec: DeviceSpec, updated_at: datetime) -> dict[str, Any]:
    service = {
        "braketSchemaHeader": _header("braket.device_schema.device_service_properties"),
        "executionWindows": [
            {"executionDay": w.day, "windowStartHour": w.start, "windowEndHour": w.end}
            for w in spec.execution_windows
        ],
        "shotsRange": list(spec.shots),
        "deviceCost": {"price": spec.cost.price, "unit": spec.cost.unit},
        "deviceDocumentation": {
            "imageUrl": None,
            "summary": spec.summary or f"{spec.provider} {spec.name} (emulated)",
            "externalDocumentationUrl": None,
        },
        "deviceLocation": spec.location or (spec.region or "global"),
        "updatedAt": updated_at.replace(tzinfo=None).isoformat(),
        "getTaskPollIntervalMillis": spec.poll_interval_ms,
    }
    action = {
        OPENQASM_ACTION: {
            "actionType": OPENQASM_ACTION,
            "version": ["1"],
            "supportedOperations": list(SUPPORTED_OPERATIONS),
            "supportedResultTypes": [dict(r) for r in _RESULT_TYPES],
            "supportPhysicalQubits": spec.type == "QPU",
            "supportsPartialVerbatimBox": False,
            "requiresContiguousQubitIndices": False,
            "requiresAllQubitsMeasurement": False,
            "disabledQubitRewiringSupported": spec.type == "QPU",
        }
    }
    if spec.type == "SIMULATOR" or spec.provider not in _HEADERS:
        return {
            "braketSchemaHeader": _header(
                "braket.device_schema.simulators.gate_model_simulator_device_capabilities"
            ),
            "service": service,
            "action": action,
            "paradigm": {
                "braketSchemaHeader": _header(
                    "braket.device_schema.simulators.gate_model_simulator_paradigm_properties"
                ),
                "qubitCount": spec.qubits,
            },
            "deviceParameters": {
                "title": "GateModelSimulatorDeviceParameters",
                "braketSchemaHeader": _header(
                    "braket.device_schema.simulators.gate_model_simulator_device_parameters"
                ),
            },
        }
    fully_connected = spec.provider == "IonQ"
    return {
        "braketSchemaHeader": _header(_HEADERS[spec.provider]),
        "service": service,
        "action": action,
        "paradigm": {
            "braketSchemaHeader": _header(
                "braket.device_schema.gate_model_qpu_paradigm_properties"
            ),
            "qubitCount": spec.qubits,
            "nativeGateSet": list(spec.native_gates),
            "connectivity": {
                "fullyConnected": fully_connected,
                "connectivityGraph": {} if fully_connected else grid_connectivity(spec.qubits),
            },
        },
        "deviceParameters": {
            "title": f"{spec.provider}DeviceParameters",
            "braketSchemaHeader": _header(_PARAMETERS[spec.provider]),
        },
    }


def grid_connectivity(qubits: int) -> dict[str, list[str]]:
    """A square-lattice coupling map on qubits numbered from 1, like IQM's and Rigetti's."""
    width = max(1, math.isqrt(qubits - 1) + 1)
    graph: dict[str, list[str]] = {}
    for q in range(qubits):
        neighbours = []
        if (q + 1) % width and q + 1 < qubits:
            neighbours.append(str(q + 2))
        if q + width < qubits:
            neighbours.append(str(q + width + 1))
        if neighbours:
            graph[str(q + 1)] = neighbours
    return graph
