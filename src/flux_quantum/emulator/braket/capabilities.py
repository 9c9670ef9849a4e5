"""The ``deviceCapabilities`` JSON document of an emulated device, as GetDevice returns it.

This module owns the translation of a ``DeviceSpec`` into the provider-specific Braket
capabilities schema (IonQ, IQM, Rigetti, gate-model simulator) that the SDK parses with
``BraketSchemaBase.parse_raw_schema``: deviceCost, executionWindows, shotsRange, qubit count,
native gates, connectivity, a Rigetti QPU's pulse section (``pulse``), the program set action and its limits where the device takes
program sets, and a QPU's calibration the way Braket publishes it
(``standardized``: per-qubit and per-pair fidelities in the version-1 schema for IQM and
Rigetti, device-wide ones in version 3 plus the ``provider`` fidelity for IonQ). It must
never import the Braket SDK (the emulator's import stays light) nor invent fields the
schemas do not have.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from flux_quantum.emulator.braket.pulse import has_pulse, pulse_properties
from flux_quantum.emulator.braket.scenario import CalibrationSpec, DeviceSpec

OPENQASM_ACTION = "braket.ir.openqasm.program"
# The program set action (OpenQASMProgramSetDeviceActionProperties in the schemas).
PROGRAM_SET_ACTION = "braket.ir.openqasm.program_set"

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


_STANDARDIZED = "braket.device_schema.standardized_gate_model_qpu_device_properties"
_IONQ_PROVIDER = "braket.device_schema.ionq.ionq_provider_properties"
# The per-qubit pattern around a typical figure (see CalibrationSpec): symmetric, so the
# median of any multiple of five qubits is the figure itself.
_SPREAD_PATTERN = (0.0, 1.0, -1.0, 0.5, -0.5)


def requires_all_measured(spec: DeviceSpec) -> bool:
    """Whether the device refuses a program that measures only some of its qubits, as
    Braket's managed simulators (SV1, DM1) and IonQ's QPUs do; IQM's and Rigetti's
    measure any subset."""
    return spec.provider == "IonQ" or (
        spec.type == "SIMULATOR" and spec.arn.split("/")[-2] == "amazon"
    )


def _header(name: str, version: str = "1") -> dict[str, str]:
    return {"name": name, "version": version}


def capabilities_json(spec: DeviceSpec, updated_at: datetime, base_url: str = "") -> str:
    """The JSON string GetDevice returns as ``deviceCapabilities`` for ``spec``
    (``base_url``: where the emulator serves, for the URLs a document names)."""
    return json.dumps(capabilities(spec, updated_at, base_url), separators=(",", ":"))


def capabilities(spec: DeviceSpec, updated_at: datetime, base_url: str = "") -> dict[str, Any]:
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
            "requiresContiguousQubitIndices": requires_all_measured(spec),
            "requiresAllQubitsMeasurement": requires_all_measured(spec),
            "disabledQubitRewiringSupported": spec.type == "QPU",
        }
    }
    if spec.program_sets is not None:
        action[PROGRAM_SET_ACTION] = {
            "actionType": PROGRAM_SET_ACTION,
            "version": ["1"],
            "maximumExecutables": spec.program_sets.max_executables,
            "maximumTotalShots": spec.program_sets.max_total_shots,
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
    connectivity = {} if fully_connected else grid_connectivity(spec.qubits)
    document = {
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
                "connectivityGraph": connectivity,
            },
        },
        "deviceParameters": {
            "title": f"{spec.provider}DeviceParameters",
            "braketSchemaHeader": _header(_PARAMETERS[spec.provider]),
        },
    }
    if has_pulse(spec) and base_url:
        document["pulse"] = pulse_properties(spec, base_url)
    if spec.calibration is not None:
        if spec.provider == "IonQ":
            document["provider"] = ionq_provider(spec.calibration)
            document["standardized"] = standardized_v3(spec.calibration, updated_at)
        else:
            document["standardized"] = standardized_v1(spec.calibration, spec.qubits, connectivity)
    return document


def _spread(figure: float, spread: float, index: int) -> float:
    value = figure + spread * _SPREAD_PATTERN[index % len(_SPREAD_PATTERN)]
    return round(min(1.0, max(0.0, value)), 6)


def standardized_v1(
    calibration: CalibrationSpec, qubits: int, connectivity: dict[str, list[str]]
) -> dict[str, Any]:
    """Per-qubit and per-pair fidelities (IQM and Rigetti): qubits numbered as in the
    connectivity graph, a pair for each of its edges, a CZ fidelity per pair."""
    one = {}
    for index in range(qubits):
        one[str(index + 1)] = {
            "T1": {"value": 40.0, "standardError": None, "unit": "us"},
            "T2": {"value": 25.0, "standardError": None, "unit": "us"},
            "oneQubitFidelity": [
                {
                    "fidelityType": {"name": "RANDOMIZED_BENCHMARKING", "description": None},
                    "fidelity": _spread(calibration.one_qubit, calibration.spread, index),
                    "standardError": None,
                },
                {
                    "fidelityType": {"name": "READOUT", "description": None},
                    "fidelity": _spread(calibration.readout, calibration.spread, index),
                    "standardError": None,
                },
            ],
        }
    pairs = [(a, b) for a, neighbours in connectivity.items() for b in neighbours]
    two = {
        f"{a}-{b}": {
            "twoQubitGateFidelity": [
                {
                    "direction": None,
                    "gateName": "CZ",
                    "fidelity": _spread(calibration.two_qubit, calibration.spread, index),
                    "standardError": None,
                    "fidelityType": {"name": "INTERLEAVED_RANDOMIZED_BENCHMARKING"},
                }
            ]
        }
        for index, (a, b) in enumerate(pairs)
    }
    return {
        "braketSchemaHeader": _header(_STANDARDIZED, "1"),
        "oneQubitProperties": one,
        "twoQubitProperties": two,
    }


def standardized_v3(calibration: CalibrationSpec, updated_at: datetime) -> dict[str, Any]:
    """Device-wide fidelities (IonQ): the version-3 standardized properties."""

    def fidelity(value: float) -> list[dict[str, Any]]:
        return [{"fidelity": value, "standardError": None, "unit": "fraction"}]

    return {
        "braketSchemaHeader": _header(_STANDARDIZED, "3"),
        "singleQubitFidelity": fidelity(calibration.one_qubit),
        "twoQubitGateFidelity": fidelity(calibration.two_qubit),
        "readoutFidelity": fidelity(calibration.readout),
        "updatedAt": updated_at.replace(tzinfo=None).isoformat() + "Z",
    }


def ionq_provider(calibration: CalibrationSpec) -> dict[str, Any]:
    """IonQ's own provider properties: mean fidelities and operation timings."""
    return {
        "braketSchemaHeader": _header(_IONQ_PROVIDER),
        "fidelity": {
            "1Q": {"mean": calibration.one_qubit},
            "2Q": {"mean": calibration.two_qubit},
            "spam": {"mean": calibration.readout},
        },
        "timing": {
            "T1": 100.0,
            "T2": 1.0,
            "1Q": 1.35e-4,
            "2Q": 6.5e-4,
            "readout": 3e-4,
            "reset": 2e-5,
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
