"""The shapes IBM Quantum's REST API answers with, for the emulator's IBM side.

This module owns where the IBM side answers on the emulator (``PREFIX``, ``API``,
``IAM_PATH``) and the documents it sends: IBM's error body
(``{"errors": [{"code", "message"}], "status_code"}``), timestamps, backend configuration
and calibration properties (seeded, with gate and readout errors a quality-aware policy can
read), a sampler job's result, one entry per pub in the pubs' order, in either of IBM's
two forms: qiskit-ibm-runtime's ``RuntimeEncoder`` JSON (``PrimitiveResult`` >
``SamplerPubResult`` > ``DataBin`` > ``BitArray``) for a job sent with
``support_qiskit: true`` or none, and the plain JSON IBM answers a job sent with
``support_qiskit: false`` (``{"results": [{"data": {REGISTER: {"samples": ["0x3", ...],
"num_bits": N}}, "metadata": {...}}], "metadata": {...}}``), and the name of a
circuit's classical register. It holds no state and does no I/O.
"""

from __future__ import annotations

import base64
import io
import json
import random
import re
import zlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from flux_quantum.emulator import topology
from flux_quantum.emulator.ibm.scenario import ERROR_CODES, IbmBackendSpec
from flux_quantum.emulator.wire import Response

# Where the IBM side answers on the emulator: IAM's token call and the Qiskit Runtime API.
PREFIX = "/ibm"
API = PREFIX + "/api/v1"
IAM_PATH = PREFIX + "/identity/token"

_REGISTER = re.compile(
    r"^\s*(?:bit\s*(?:\[\s*(\d+)\s*\])?\s+(\w+)|creg\s+(\w+)\s*\[\s*(\d+)\s*\])", re.M
)


def ibm_error(status: int, code: int, message: str | None = None) -> Response:
    """An error as IBM Quantum's API sends it."""
    text = message or ERROR_CODES.get(code, (status, "Error."))[1]
    body = json.dumps(
        {"errors": [{"code": code, "message": text, "more_info": ""}], "status_code": status}
    ).encode()
    return Response(status, body, (("Content-Type", "application/json"),), error=str(code))


def iam_error(status: int, message: str) -> Response:
    """An error as IBM Cloud IAM sends it."""
    body = json.dumps({"errorCode": "BXNIM0415E", "errorMessage": message, "context": {}}).encode()
    return Response(status, body, (("Content-Type", "application/json"),), error="BXNIM0415E")


def text_response(text: str) -> Response:
    return Response(200, text.encode(), (("Content-Type", "text/plain; charset=utf-8"),))


def timestamp(moment: datetime) -> str:
    """IBM's timestamp form: ISO 8601, UTC, microseconds, 'Z'."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime:
    """A timestamp a client sent (ISO 8601, 'Z' or an offset; naive means UTC)."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- backends ------------------------------------------------------------------------------


def coupling_map(spec: IbmBackendSpec) -> list[list[int]]:
    """The backend's coupled pairs, both directions (its two-qubit gate is symmetric):
    heavy-hex for IBM's 127-, 133- and 156-qubit processors (see ``topology``)."""
    return topology.both_ways(spec.pairs)


def two_qubit_gates(spec: IbmBackendSpec) -> list[str]:
    return [g for g in spec.basis_gates if g in ("cz", "ecr", "cx")]


def configuration(spec: IbmBackendSpec, version: str) -> dict[str, Any]:
    return {
        "backend_name": spec.name,
        "backend_version": version,
        "n_qubits": spec.qubits,
        "basis_gates": list(spec.basis_gates),
        "coupling_map": coupling_map(spec),
        "simulator": False,
        "local": False,
        "conditional": False,
        "open_pulse": False,
        "memory": True,
        "max_shots": spec.max_shots,
        "max_experiments": 300,
        "gates": [],
        "supported_instructions": [*spec.basis_gates, "measure", "delay", "reset"],
        "processor_type": {"family": spec.processor_family, "revision": spec.processor_revision},
        "dt": 2.2222222222222221e-10,
        "online_date": "2024-01-01T00:00:00Z",
        "description": f"flux-quantum emulator of {spec.name}",
    }


def properties(spec: IbmBackendSpec, version: str, seed: int, when: datetime) -> dict[str, Any]:
    """Calibration data in IBM's BackendProperties shape, drawn around the scenario's means
    from ``seed`` (the same seed gives the same calibration)."""
    rng = random.Random(f"{seed}:{spec.name}:calibration")
    cal = spec.calibration
    date = timestamp(when)

    def item(name: str, value: float, unit: str = "") -> dict[str, Any]:
        return {"date": date, "name": name, "unit": unit, "value": value}

    qubits = []
    for _ in range(spec.qubits):
        readout = min(0.5, cal.readout_error * rng.uniform(0.3, 2.0))
        qubits.append(
            [
                item("T1", cal.t1_us * rng.uniform(0.6, 1.4), "us"),
                item("T2", cal.t2_us * rng.uniform(0.5, 1.5), "us"),
                item("frequency", rng.uniform(4.6, 5.3), "GHz"),
                item("readout_error", readout),
                item("prob_meas0_prep1", min(1.0, readout * 1.2)),
                item("prob_meas1_prep0", readout * 0.8),
                item("readout_length", 1560.0, "ns"),
            ]
        )
    gates = []
    for gate in spec.basis_gates:
        if gate in two_qubit_gates(spec):
            continue
        for q in range(spec.qubits):
            error = 0.0 if gate == "rz" else min(0.5, cal.gate_error_1q * rng.uniform(0.4, 2.5))
            length = 0.0 if gate == "rz" else 32.0
            gates.append(_gate(gate, [q], error, length, date))
    for gate in two_qubit_gates(spec):
        for pair in coupling_map(spec):
            error = min(0.5, cal.gate_error_2q * rng.uniform(0.4, 2.5))
            gates.append(_gate(gate, pair, error, 68.0, date))
    return {
        "backend_name": spec.name,
        "backend_version": version,
        "last_update_date": date,
        "qubits": qubits,
        "gates": gates,
        "general": [],
    }


def _gate(gate: str, qubits: list[int], error: float, length: float, date: str) -> dict[str, Any]:
    return {
        "gate": gate,
        "qubits": qubits,
        "name": f"{gate}{'_'.join(map(str, qubits))}",
        "parameters": [
            {"date": date, "name": "gate_error", "unit": "", "value": error},
            {"date": date, "name": "gate_length", "unit": "ns", "value": length},
        ],
    }


# --- circuits ------------------------------------------------------------------------------


def register_name(qasm: str) -> str:
    """The name of the program's first classical register (the DataBin field a sampler
    result carries its bits under); ``meas`` if it declares none."""
    match = _REGISTER.search(qasm)
    if not match:
        return "meas"
    return match.group(2) or match.group(3)


# --- results -------------------------------------------------------------------------------


def bit_rows(measurements: Sequence[Sequence[Any]]) -> tuple[list[int], int]:
    """Each shot's measured bits as an integer (column i = classical bit i, qiskit's order)
    and the number of bits."""
    num_bits = len(measurements[0]) if measurements else 0
    rows = [sum(int(bit) << i for i, bit in enumerate(shot)) for shot in measurements]
    return rows, num_bits


def ndarray(rows: Iterable[int], num_bits: int) -> dict[str, Any]:
    """A BitArray's array as RuntimeEncoder writes it: numpy.save of uint8 (shots, bytes),
    each row big-endian, zlib-compressed, base64."""
    import numpy as np

    width = max(1, (num_bits + 7) // 8)
    data = [list(row.to_bytes(width, "big")) for row in rows]
    array = np.array(data, dtype=np.uint8).reshape(-1, width)
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    encoded = base64.standard_b64encode(zlib.compress(buffer.getvalue())).decode()
    return {"__type__": "ndarray", "__value__": encoded}


def sampler_result(
    pubs: Sequence[tuple[str, list[int], int, int]], job_id: str, support_qiskit: bool = True
) -> str:
    """A SamplerV2 job's result text: one entry per pub of ``(register, rows, num_bits,
    shots)``, in RuntimeEncoder JSON, or in IBM's plain JSON when not ``support_qiskit``."""
    if not support_qiskit:
        return plain_sampler_result(pubs, job_id)
    results = []
    for register, rows, num_bits, shots in pubs:
        bits = {
            "__type__": "BitArray",
            "__value__": {"array": ndarray(rows, num_bits), "num_bits": num_bits},
        }
        data = {
            "__type__": "DataBin",
            "__value__": {"field_names": [register], "shape": [], "fields": {register: bits}},
        }
        metadata = {"circuit_metadata": {}, "shots": shots}
        results.append(
            {"__type__": "SamplerPubResult", "__value__": {"data": data, "metadata": metadata}}
        )
    document = {
        "__type__": "PrimitiveResult",
        "__value__": {
            "pub_results": results,
            "metadata": {"execution": {"job_id": job_id}, "version": 2},
        },
    }
    return json.dumps(document)


def plain_sampler_result(pubs: Sequence[tuple[str, list[int], int, int]], job_id: str) -> str:
    """A SamplerV2 job's result as IBM answers a job sent with ``support_qiskit: false``:
    per pub, each register's shots as hex numbers (bit i = the register's bit i)."""
    results = [
        {
            "data": {register: {"samples": [hex(row) for row in rows], "num_bits": num_bits}},
            "metadata": {"circuit_metadata": {}},
        }
        for register, rows, num_bits, _shots in pubs
    ]
    metadata = {"execution": {"job_id": job_id}, "version": 2}
    return json.dumps({"results": results, "metadata": metadata})
