"""The compile stage's site settings (``[quantum.compile]``) and their defaults.

``enabled``: whether programs are compiled for the device chosen (default true; false
sends every program as written, as before the stage existed). ``timeout``: seconds one
program may take to compile (default 60: Qiskit maps a 156-qubit circuit of a few
thousand gates in seconds). ``memory_mb``: the address space of a compile worker
(default 4096 MiB: Qiskit and its thread pools take about 1.5 GiB before a program).
``workers``: compile workers kept at most (default 2). Each bad value is refused in one
sentence naming the key and what it takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SECTION = "quantum.compile"


@dataclass(frozen=True)
class CompileLimits:
    enabled: bool = True
    timeout: float = 60.0
    memory_mb: int = 4096
    workers: int = 2

    @classmethod
    def from_table(cls, table: Mapping[str, Any] | None) -> CompileLimits:
        """From the ``[quantum.compile]`` table (None or empty: the defaults)."""
        table = dict(table or {})
        unknown = sorted(set(table) - {"enabled", "timeout", "memory_mb", "workers"})
        if unknown:
            raise ValueError(
                f"[{SECTION}] has no key {unknown[0]!r} (enabled, timeout, memory_mb, workers)"
            )
        enabled = table.get("enabled", cls.enabled)
        if not isinstance(enabled, bool):
            raise ValueError(f"[{SECTION}] enabled must be true or false, got {enabled!r}")
        timeout = table.get("timeout", cls.timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"[{SECTION}] timeout must be seconds > 0, got {timeout!r}")
        memory = table.get("memory_mb", cls.memory_mb)
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 512:
            raise ValueError(f"[{SECTION}] memory_mb must be an integer >= 512, got {memory!r}")
        workers = table.get("workers", cls.workers)
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise ValueError(f"[{SECTION}] workers must be an integer 1..64, got {workers!r}")
        return cls(enabled, float(timeout), memory, workers)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb << 20
