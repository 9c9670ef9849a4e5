"""The IBM sampler payload and its result: pure text in, text or counts out.

This module owns the SamplerV2 input built from requests' OpenQASM 3 programs (one pub
per program, holding it as written, marked with the idempotency token), IBM's limits on
that input, and the decoding of a sampler job's result into counts per pub. It must never
do I/O, never import qiskit and never change a program's statements: it adds the one
comment line that carries the token (and drops an old one).

- Payload: SamplerV2 pubs holding the requests' OpenQASM 3 text as written, each plus a
  comment line ``// flux-quantum-token: TOKEN`` after the version line; ``version: 2``,
  ``support_qiskit: false``. One program: one pub ``[circuit]`` and ``shots`` at the top
  level. Several (a merged task): one pub ``[circuit, null, shots]`` each, every circuit
  marked with the one token of the job. IBM runs ISA circuits only: the programs must
  already use the backend's basis gates and qubits. No parameters.
- Limits (IBM's job validation, per job, not per pub, declared in the package's face):
  ``MAX_EXECUTIONS`` executions (circuits x shots: without parameters, the pubs' shots
  summed) and ``MAX_INPUT_BYTES`` of input; IBM sets none on the number of pubs.
  ``sampler_set_input`` refuses a set over either with ``OverLimit`` before anything is
  sent.
- Results: one per pub, in the pubs' order, read from either form IBM answers in: plain
  JSON (``{"results": [{"data": {REG: {"samples": [hex, ...], "num_bits": N}}}]}``, a job
  sent with ``support_qiskit: false``, as flux-quantum sends them) or qiskit-ibm-runtime's
  RuntimeEncoder JSON (``PrimitiveResult``, a job sent with ``support_qiskit: true``).
- Counts: written bit 0 first (``c[0]`` leftmost), the order Braket's counts use, so a
  consumer reads the same keys from either vendor; IBM's own tools print them reversed.
  Several classical registers are joined per shot, in the result's field order.
"""

from __future__ import annotations

import base64
import io
import json
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from flux_quantum.vendors.ibm import MAX_EXECUTIONS, MAX_INPUT_BYTES

TOKEN_MARK = "// flux-quantum-token: "


class OverLimit(ValueError):
    """A set of programs over one of IBM's job limits (``limit``: which one)."""

    vendor_code = "OverLimit"  # how the vendor's refusal of the create names it

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


_TOKEN_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_MARK_RE = re.compile(r"^// flux-quantum-token: (\S+)\s*$", re.M)


def mark_program(program_text: str, token: str) -> str:
    """``program_text`` with the token comment after its ``OPENQASM`` version line."""
    if not _TOKEN_RE.fullmatch(token):
        raise ValueError(
            f"an idempotency token of letters, digits and ._:- is required, got {token!r}"
        )
    lines = program_text.splitlines()
    at = next((i + 1 for i, line in enumerate(lines) if line.strip().startswith("OPENQASM")), None)
    if at is None or not lines[at - 1].strip().startswith("OPENQASM 3"):
        raise ValueError("the program must be OpenQASM 3 and start with its 'OPENQASM 3' line")
    kept = [line for line in lines if not _MARK_RE.match(line)]
    at = next(i + 1 for i, line in enumerate(kept) if line.strip().startswith("OPENQASM"))
    return "\n".join([*kept[:at], TOKEN_MARK + token, *kept[at:]]) + "\n"


def program_token(circuit: object) -> str | None:
    """The token a marked circuit carries, or None."""
    if not isinstance(circuit, str):
        return None
    match = _MARK_RE.search(circuit)
    return match.group(1) if match else None


def sampler_input(program_text: str, shots: int, token: str) -> str:
    """The SamplerV2 input (JSON text) of one task: the marked program as its one pub."""
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
        raise ValueError(f"shots must be an integer >= 1, got {shots!r}")
    document = {
        "pubs": [[mark_program(program_text, token)]],
        "shots": shots,
        "version": 2,
        "support_qiskit": False,
    }
    return json.dumps(document)


def _shots(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1, got {value!r}")
    return value


def sampler_set_input(programs: Sequence[tuple[str, int]], token: str) -> str:
    """The SamplerV2 input (JSON text) of one job running several programs: one pub
    ``[marked program, null, shots]`` per ``(program, shots)``, in order.

    Raises ValueError for a malformed program, shots or token, and ``OverLimit`` for a
    set over IBM's executions or input-size limit.
    """
    if isinstance(programs, str | bytes) or not isinstance(programs, Sequence) or not programs:
        raise ValueError("programs must be a non-empty list of (OpenQASM 3 program, shots)")
    pubs: list[list[Any]] = []
    for index, entry in enumerate(programs):
        if not isinstance(entry, tuple | list) or len(entry) != 2:
            raise ValueError(
                f"programs[{index}] must be (OpenQASM 3 program, shots), got {entry!r:.60}"
            )
        text, shots = entry
        if not isinstance(text, str):
            raise ValueError(f"programs[{index}] must hold the program as text, got {text!r:.40}")
        try:
            marked = mark_program(text, token)
        except ValueError as exc:
            raise ValueError(f"programs[{index}]: {exc}") from None
        pubs.append([marked, None, _shots(shots, f"programs[{index}] shots")])
    executions = sum(pub[2] for pub in pubs)
    if executions > MAX_EXECUTIONS:
        raise OverLimit(
            f"the {len(pubs)} programs ask for {executions} shots in all, over IBM's limit of "
            f"{MAX_EXECUTIONS} executions a Sampler job",
            "executions",
        )
    document = {"pubs": pubs, "version": 2, "support_qiskit": False}
    text = json.dumps(document, separators=(",", ":"))
    size = len(text.encode())
    if size > MAX_INPUT_BYTES:
        raise OverLimit(
            f"the {len(pubs)} programs make a job input of {size} bytes, over IBM's limit of "
            f"{MAX_INPUT_BYTES} bytes",
            "input_bytes",
        )
    return text


def _decode_bits(value: Mapping[str, Any]) -> list[str]:
    """A RuntimeEncoder BitArray as one bit string per shot, classical bit 0 first."""
    import numpy as np

    array = value["array"]
    if not isinstance(array, dict) or array.get("__type__") != "ndarray":
        raise ValueError("a BitArray without an encoded ndarray")
    raw = array["__value__"]
    if isinstance(raw, list):
        rows = np.array(raw, dtype=np.uint8)
    else:
        data = zlib.decompress(base64.standard_b64decode(raw))
        rows = np.load(io.BytesIO(data), allow_pickle=False)
    num_bits = int(value["num_bits"])
    rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim else rows.reshape(-1, 1)
    shots = []
    for row in rows:
        number = int.from_bytes(bytes(int(b) for b in row), "big")
        shots.append("".join("1" if number >> i & 1 else "0" for i in range(num_bits)))
    return shots


def _count(registers: list[list[str]]) -> dict[str, int]:
    if not registers:
        raise ValueError("a pub result with no classical register")
    counts: dict[str, int] = {}
    for bits in zip(*registers, strict=True):
        key = "".join(bits)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _encoded_pub_counts(pub: Mapping[str, Any]) -> dict[str, int]:
    """Counts of one RuntimeEncoder ``SamplerPubResult``."""
    data = pub["__value__"]["data"]
    if data.get("__type__") != "DataBin":
        raise ValueError("a pub result without a DataBin")
    fields = data["__value__"]["fields"]
    names = data["__value__"].get("field_names") or list(fields)
    registers = []
    for name in names:
        entry = fields[name]
        if isinstance(entry, dict) and entry.get("__type__") == "BitArray":
            registers.append(_decode_bits(entry["__value__"]))
    return _count(registers)


def _plain_pub_counts(pub: Mapping[str, Any]) -> dict[str, int]:
    """Counts of one pub result in IBM's plain JSON (hex samples per register)."""
    data = pub["data"]
    if not isinstance(data, dict):
        raise ValueError("a pub result whose data is not an object")
    registers = []
    for entry in data.values():
        if not isinstance(entry, dict) or "samples" not in entry:
            continue
        num_bits = int(entry["num_bits"])
        shots = []
        for sample in entry["samples"]:
            number = int(sample, 16)
            shots.append("".join("1" if number >> i & 1 else "0" for i in range(num_bits)))
        registers.append(shots)
    return _count(registers)


def split_result(text: str) -> list[tuple[dict[str, int], dict[str, Any]]]:
    """Per pub of a sampler job's result, in the pubs' order: its counts and the result
    document as if that pub had been a job of its own (the same form, that pub only).

    Raises ValueError (or KeyError, TypeError) for anything that is not a SamplerV2
    result, or one with no pub results.
    """
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("not a sampler result")
    if document.get("__type__") == "PrimitiveResult":
        value = document["__value__"]
        pubs = value["pub_results"]
        if not pubs:
            raise ValueError("a PrimitiveResult with no pub results")
        return [
            (
                _encoded_pub_counts(pub),
                {"__type__": "PrimitiveResult", "__value__": {**value, "pub_results": [pub]}},
            )
            for pub in pubs
        ]
    if isinstance(document.get("results"), list):
        if not document["results"]:
            raise ValueError("a sampler result with no pub results")
        return [
            (_plain_pub_counts(pub), {**document, "results": [pub]}) for pub in document["results"]
        ]
    raise ValueError("neither a PrimitiveResult nor a sampler result with results")


def counts_from_result(text: str) -> dict[str, int]:
    """Counts of a sampler job's result (either form) for its first pub.

    Raises ValueError for anything that is not a SamplerV2 result.
    """
    return split_result(text)[0][0]
