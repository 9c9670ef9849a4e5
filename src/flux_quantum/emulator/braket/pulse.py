"""A Rigetti QPU's pulse-level description and native gate calibrations, as Braket publishes them.

This module owns the ``pulse`` section of a Rigetti device's capabilities (its ports and
frames: per qubit a charge drive, a flux line and a readout pair, named as Rigetti names
them, ``Transmon_{q}_charge_tx`` and ``Transmon_{q}_readout_rx``; the waveforms and
OpenPulse functions it takes; the URL of its native gate calibrations) and the
calibration document that URL serves (``braket.device_schema.pulse.native_gate_calibrations``:
per qubit ``rx(+-pi/2)`` as a DRAG pulse and ``rz(theta)`` as a phase shift, per coupled
pair an ``iswap`` as a flux pulse), which the SDK's ``AwsDevice.gate_calibrations``
downloads. The figures (frequencies, pulse lengths) are plausible transmon values, not
a real chip's. It must never import the Braket SDK and never run a pulse program: the
emulator runs gate-model programs only.
"""

from __future__ import annotations

from typing import Any

from flux_quantum.emulator.braket.scenario import DeviceSpec

CALIBRATIONS_PATH = "/_braket/calibrations/"
_DT = 1e-9
_DRAG = "wf_drag_gaussian"
_FLUX = "wf_iswap_flux"


def has_pulse(spec: DeviceSpec) -> bool:
    """Whether Braket publishes pulse control for the device: Rigetti's QPUs."""
    return spec.provider == "Rigetti" and spec.type == "QPU"


def calibrations_url(spec: DeviceSpec, base_url: str) -> str:
    return f"{base_url}{CALIBRATIONS_PATH}{spec.arn.split('/')[-1]}.json"


def pulse_properties(spec: DeviceSpec, base_url: str) -> dict[str, Any]:
    """The capabilities' ``pulse`` section (PulseDeviceActionProperties v1)."""
    ports: dict[str, Any] = {}
    frames: dict[str, Any] = {}
    for q in range(spec.qubits):
        for port, direction, kind in (
            (f"q{q}_rf", "tx", "rf"),
            (f"q{q}_ff", "tx", "ff"),
            (f"q{q}_ro_tx", "tx", "ro_tx"),
            (f"q{q}_ro_rx", "rx", "ro_rx"),
        ):
            ports[port] = {
                "portId": port,
                "direction": direction,
                "portType": kind,
                "dt": _DT,
                "qubitMappings": [q],
            }
        drive = 4.5e9 + 1e6 * (q % 17)
        for frame, port, frequency in (
            (f"Transmon_{q}_charge_tx", f"q{q}_rf", drive),
            (f"Transmon_{q}_flux_tx", f"q{q}_ff", 0.0),
            (f"Transmon_{q}_readout_tx", f"q{q}_ro_tx", 7.1e9 + 1e6 * (q % 13)),
            (f"Transmon_{q}_readout_rx", f"q{q}_ro_rx", 7.1e9 + 1e6 * (q % 13)),
        ):
            frames[frame] = {
                "frameId": frame,
                "portId": port,
                "frequency": frequency,
                "centerFrequency": None,
                "phase": 0.0,
                "associatedGate": None,
                "qubitMappings": [q],
            }
    return {
        "braketSchemaHeader": {
            "name": "braket.device_schema.pulse.pulse_device_action_properties",
            "version": "1",
        },
        "supportedQhpTemplateWaveforms": {
            name: {"functionName": name, "arguments": arguments}
            for name, arguments in _TEMPLATES.items()
        },
        "ports": ports,
        "supportedFunctions": {
            name: {"functionName": name, "arguments": arguments}
            for name, arguments in _FUNCTIONS.items()
        },
        "frames": frames,
        "supportsLocalPulseElements": False,
        "supportsDynamicFrames": False,
        "supportsNonNativeGatesWithPulses": False,
        "validationParameters": {
            "MAX_SCALE": 1.0,
            "MAX_AMPLITUDE": 1.0,
            "PERMITTED_FREQUENCY_DIFFERENCE": 400000000.0,
            "MIN_PULSE_LENGTH": 8e-09,
            "MAX_PULSE_LENGTH": 1e-05,
        },
        "nativeGateCalibrationsRef": calibrations_url(spec, base_url),
    }


def native_gate_calibrations(spec: DeviceSpec, pairs: list[tuple[int, int]]) -> dict[str, Any]:
    """The calibration document: each qubit's rx(+-pi/2) and rz(theta), each pair's
    iswap (``pairs``: the device's couplings, numbered from 0)."""
    gates: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for q in range(spec.qubits):
        charge = f"Transmon_{q}_charge_tx"
        rx = [
            _gate(
                "rx",
                [q],
                [angle],
                [
                    _instruction("barrier", [("qubit", str(q), "string")]),
                    _instruction(
                        "shift_phase", [("frame", charge, "frame"), ("phase", phase, "float")]
                    ),
                    _instruction(
                        "play", [("frame", charge, "frame"), ("waveform", _DRAG, "waveform")]
                    ),
                    _instruction(
                        "shift_phase", [("frame", charge, "frame"), ("phase", -phase, "float")]
                    ),
                    _instruction("barrier", [("qubit", str(q), "string")]),
                ],
            )  # fmt: skip
            for angle, phase in (
                ("1.5707963267948966", 0.0),
                ("-1.5707963267948966", 3.141592653589793),
            )
        ]
        rz = _gate("rz", [q], ["theta"], [
            _instruction("shift_phase", [("frame", charge, "frame"), ("phase", "-1.0*theta", "expr")]),
        ])  # fmt: skip
        gates[str(q)] = {"rx": rx, "rz": [rz]}
    for a, b in pairs:
        flux = f"Transmon_{a}_flux_tx"
        gates[f"{a}_{b}"] = {
            "iswap": [
                _gate(
                    "iswap",
                    [a, b],
                    [],
                    [
                        _instruction(
                            "barrier", [("qubit", str(a), "string"), ("qubit", str(b), "string")]
                        ),
                        _instruction(
                            "play", [("frame", flux, "frame"), ("waveform", _FLUX, "waveform")]
                        ),
                        _instruction(
                            "barrier", [("qubit", str(a), "string"), ("qubit", str(b), "string")]
                        ),
                    ],
                )  # fmt: skip
            ]
        }
    return {
        "braketSchemaHeader": {
            "name": "braket.device_schema.pulse.native_gate_calibrations",
            "version": "1",
        },
        "gates": gates,
        "waveforms": {
            _DRAG: {
                "waveformId": _DRAG,
                "name": "drag_gaussian",
                "arguments": [
                    {"name": "length", "value": 6e-08, "type": "float"},
                    {"name": "sigma", "value": 1.5e-08, "type": "float"},
                    {"name": "beta", "value": 0.0, "type": "float"},
                    {"name": "amplitude", "value": 0.36, "type": "float"},
                    {"name": "zero_at_edges", "value": False, "type": "bool"},
                ],
            },
            _FLUX: {
                "waveformId": _FLUX,
                "name": "erf_square",
                "arguments": [
                    {"name": "length", "value": 1.92e-07, "type": "float"},
                    {"name": "width", "value": 1.6e-07, "type": "float"},
                    {"name": "sigma", "value": 8e-09, "type": "float"},
                    {"name": "off_center", "value": 0.0, "type": "float"},
                    {"name": "amplitude", "value": 0.4, "type": "float"},
                    {"name": "zero_at_edges", "value": False, "type": "bool"},
                ],
            },
        },
    }


def _gate(
    name: str, qubits: list[int], arguments: list[str], calibrations: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "qubits": [str(q) for q in qubits],
        "arguments": arguments,
        "calibrations": calibrations,
    }


def _instruction(name: str, arguments: list[tuple[str, Any, str]]) -> dict[str, Any]:
    return {
        "name": name,
        "arguments": [{"name": n, "value": v, "type": t} for n, v, t in arguments],
    }


_FLOAT = "float"
_TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "constant": [
        {"name": "length", "type": _FLOAT, "optional": False},
        {"name": "iq", "type": "complex", "optional": False},
    ],
    "gaussian": [
        {"name": "length", "type": _FLOAT, "optional": False},
        {"name": "sigma", "type": _FLOAT, "optional": False},
        {"name": "amplitude", "type": _FLOAT, "optional": True},
        {"name": "zero_at_edges", "type": "bool", "optional": True},
    ],
    "drag_gaussian": [
        {"name": "length", "type": _FLOAT, "optional": False},
        {"name": "sigma", "type": _FLOAT, "optional": False},
        {"name": "beta", "type": _FLOAT, "optional": False},
        {"name": "amplitude", "type": _FLOAT, "optional": True},
        {"name": "zero_at_edges", "type": "bool", "optional": True},
    ],
    "erf_square": [
        {"name": "length", "type": _FLOAT, "optional": False},
        {"name": "width", "type": _FLOAT, "optional": False},
        {"name": "sigma", "type": _FLOAT, "optional": False},
        {"name": "off_center", "type": _FLOAT, "optional": True},
        {"name": "amplitude", "type": _FLOAT, "optional": True},
        {"name": "zero_at_edges", "type": "bool", "optional": True},
    ],
}
_FUNCTIONS: dict[str, list[dict[str, Any]]] = {
    "shift_phase": [
        {"name": "frame", "type": "frame", "optional": False},
        {"name": "phase", "type": _FLOAT, "optional": False},
    ],
    "set_phase": [
        {"name": "frame", "type": "frame", "optional": False},
        {"name": "phase", "type": _FLOAT, "optional": False},
    ],
    "shift_frequency": [
        {"name": "frame", "type": "frame", "optional": False},
        {"name": "frequency", "type": _FLOAT, "optional": False},
    ],
    "set_frequency": [
        {"name": "frame", "type": "frame", "optional": False},
        {"name": "frequency", "type": _FLOAT, "optional": False},
    ],
    "play": [
        {"name": "frame", "type": "frame", "optional": False},
        {"name": "waveform", "type": "waveform", "optional": False},
    ],
    "capture_v0": [{"name": "frame", "type": "frame", "optional": False}],
}
