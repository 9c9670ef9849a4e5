"""The IBM sampler payload and its result: pure text in, text or counts out.

This module owns the SamplerV2 input built from a request's OpenQASM 3 program (one pub
holding the program as written, marked with the idempotency token) and the decoding of a
sampler job's result into counts. It must never do I/O, never import qiskit and never
change a program's statements: it adds the one comment line that carries the token (and
drops an old one).

- Payload: one SamplerV2 pub holding the request's OpenQASM 3 text as written, plus a
  comment line ``// flux-quantum-token: TOKEN`` after the version line; ``shots`` at the
  top level; ``version: 2``. IBM runs ISA circuits only: the program must already use the
  backend's basis gates and qubits. No parameters, one circuit per task.
- Counts: written bit 0 first (``c[0]`` leftmost), the order Braket's counts use, so a
  consumer reads the same keys from either vendor; IBM's own tools print them reversed.
"""

from __future__ import annotations

import base64
import io
import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

TOKEN_MARK = "// flux-quantum-token: "
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


def counts_from_result(text: str) -> dict[str, int]:
    """Counts of a sampler job's result (RuntimeEncoder JSON) for its first pub.

    Several classical registers are joined per shot, in the result's field order.
    Raises ValueError for anything that is not a SamplerV2 result.
    """
    document = json.loads(text)
    if not isinstance(document, dict) or document.get("__type__") != "PrimitiveResult":
        raise ValueError("not a PrimitiveResult")
    pubs = document["__value__"]["pub_results"]
    if not pubs:
        raise ValueError("a PrimitiveResult with no pub results")
    data = pubs[0]["__value__"]["data"]
    if data.get("__type__") != "DataBin":
        raise ValueError("a pub result without a DataBin")
    fields = data["__value__"]["fields"]
    names = data["__value__"].get("field_names") or list(fields)
    registers = []
    for name in names:
        entry = fields[name]
        if isinstance(entry, dict) and entry.get("__type__") == "BitArray":
            registers.append(_decode_bits(entry["__value__"]))
    if not registers:
        raise ValueError("a DataBin with no BitArray")
    counts: dict[str, int] = {}
    for bits in zip(*registers, strict=True):
        key = "".join(bits)
        counts[key] = counts.get(key, 0) + 1
    return counts
