"""What the toy checks of an OpenQASM program beyond its kind: its width."""

from __future__ import annotations

import re

_QUBITS = re.compile(r"\bqubit\[(\d+)\]")


def check(text: str, qubits: int) -> str | None:
    wanted = sum(int(n) for n in _QUBITS.findall(text))
    if wanted > qubits:
        return f"the program declares {wanted} qubits and the toy device has {qubits}"
    return None
