"""The emulator's Felis side alone behind its loopback HTTP server (``Served``), for the
tests that drive it through the real qrmi client (the emulator tier): the targets the
tests share (``TARGETS``) and QIR programs (``BELL``, ``FLIP``). Starts nothing at import."""

from __future__ import annotations

from typing import Any

import qrmi
from served_side import ServedSide

from flux_quantum.emulator import ManualClock
from flux_quantum.emulator.felis import PREFIX, FelisScenario, FelisService

TARGETS = [
    {"name": "EMU:6Q:PHYSICAL_CATS", "qubits": 6, "queue": {"depth": 1, "service_time": 10}},
    {"name": "QPU:1Q:BOSON_4A", "qubits": 1, "instructions": ["x", "mz"]},
]
_HEAD = (
    "; ModuleID = 'flux-quantum'\nsource_filename = \"flux-quantum\"\n\n"
    "%Qubit = type opaque\n%Result = type opaque\n\n"
    "define void @main() #0 {\nentry:\n"
)
_TAIL = '  ret void\n}\n\nattributes #0 = { "entry_point" }\n'


def qir(*calls: str) -> str:
    """A base-profile QIR module whose entry point makes ``calls`` (one line each)."""
    return _HEAD + "".join(f"  call void @__quantum__qis__{c}\n" for c in calls) + _TAIL


def q(i: int) -> str:
    return "%Qubit* null" if i == 0 else f"%Qubit* inttoptr (i64 {i} to %Qubit*)"


def r(i: int) -> str:
    return "%Result* null" if i == 0 else f"%Result* inttoptr (i64 {i} to %Result*)"


BELL = qir(
    f"h__body({q(0)})",
    f"cnot__body({q(0)}, {q(1)})",
    f"mz__body({q(0)}, {r(0)})",
    f"mz__body({q(1)}, {r(1)})",
)
FLIP = qir(f"x__body({q(0)})", f"mz__body({q(0)}, {r(0)})", f"mz__body({q(1)}, {r(1)})")


class Served(ServedSide):
    """A ``FelisService`` alone behind the emulator's HTTP server."""

    def __init__(self, scenario: dict[str, Any], clock: ManualClock) -> None:
        self.clock = clock
        super().__init__(FelisService(FelisScenario.from_dict(scenario), clock), PREFIX)

    def resource(self, resource_id: str = "ab_emu_6q_physical_cats", **extra: str) -> Any:
        config = {**self.config(resource_id), **extra}
        return qrmi.QuantumResource.from_config(
            resource_id, qrmi.ResourceType.AliceBobFelis, config
        )
