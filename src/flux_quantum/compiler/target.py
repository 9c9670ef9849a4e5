"""What a device can run, as the compiler maps a program onto it: ``DeviceTarget``.

This module owns the plain record a vendor builds from what it publishes (IBM's backend
configuration and properties, IQM's dynamic quantum architecture, a catalog entry's
width): the number of qubits, the basis gates by their OpenQASM / Qiskit names, the
coupled pairs (None: every pair, as on a trapped-ion device), the gate and readout
errors where the vendor publishes them, and ``calibration``, the id of the figures it
was read from (a calibration set's id, a properties document's date), which keys the
compiled targets' cache. It is pure data: standard library only, no Qiskit, no I/O, so
that a vendor package builds one without importing the compiler's SDK.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Pair = tuple[int, int]
# What every target takes on every qubit beside its basis gates.
ANYWHERE = ("measure", "reset", "barrier", "delay")


@dataclass(frozen=True)
class DeviceTarget:
    """A device as the compiler maps programs onto it.

    ``device``: its catalog name (for messages). ``qubits``: how many it has. ``basis``:
    its gates (``cz``, ``rz``, ``sx``, ``r`` ...), empty when it takes any standard gate
    (a device that compiles on its side). ``pairs``: its coupled qubit pairs, undirected;
    None when every pair is coupled. ``one_qubit_error``, ``two_qubit_error`` and
    ``readout_error``: per qubit ("3") and per pair ("3-4"), as published, else empty.
    ``calibration``: the id of the figures (empty when there are none).
    """

    device: str
    qubits: int
    basis: tuple[str, ...] = ()
    pairs: tuple[Pair, ...] | None = None
    one_qubit_error: tuple[tuple[str, float], ...] = ()
    two_qubit_error: tuple[tuple[str, float], ...] = ()
    readout_error: tuple[tuple[str, float], ...] = ()
    calibration: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.qubits, int) or self.qubits < 1:
            raise ValueError(f"{self.device}: a target's qubits must be >= 1, got {self.qubits!r}")
        for a, b in self.pairs or ():
            if not (0 <= a < self.qubits and 0 <= b < self.qubits) or a == b:
                raise ValueError(
                    f"{self.device}: coupled pair ({a}, {b}) is not two of its {self.qubits} qubits"
                )

    @classmethod
    def build(
        cls,
        device: str,
        qubits: int,
        basis: Iterable[str] = (),
        pairs: Iterable[Iterable[int]] | None = None,
        *,
        one_qubit_error: Mapping[str, float] | None = None,
        two_qubit_error: Mapping[str, float] | None = None,
        readout_error: Mapping[str, float] | None = None,
        calibration: str = "",
    ) -> DeviceTarget:
        """From what a vendor publishes: pairs in either direction (each kept once),
        gates in any order (kept sorted), errors as mappings."""
        undirected: tuple[Pair, ...] | None = None
        if pairs is not None:
            seen: dict[frozenset[int], Pair] = {}
            for pair in pairs:
                a, b = (int(q) for q in pair)
                seen.setdefault(frozenset((a, b)), (min(a, b), max(a, b)))
            undirected = tuple(sorted(seen.values()))
        return cls(
            device=device,
            qubits=qubits,
            basis=tuple(sorted({g for g in basis if g not in ANYWHERE})),
            pairs=undirected,
            one_qubit_error=_sorted(one_qubit_error),
            two_qubit_error=_sorted(two_qubit_error),
            readout_error=_sorted(readout_error),
            calibration=calibration,
        )

    @property
    def key(self) -> tuple[str, str]:
        """What the compiled target is cached by: the device and its calibration."""
        return (self.device, self.calibration)

    @property
    def maps(self) -> bool:
        """Whether programs are mapped onto it (it has basis gates), or only checked and
        normalised (a device that compiles on its side)."""
        return bool(self.basis)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "qubits": self.qubits,
            "basis": list(self.basis),
            "pairs": None if self.pairs is None else [list(p) for p in self.pairs],
            "one_qubit_error": dict(self.one_qubit_error),
            "two_qubit_error": dict(self.two_qubit_error),
            "readout_error": dict(self.readout_error),
            "calibration": self.calibration,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceTarget:
        return cls.build(
            str(data["device"]),
            int(data["qubits"]),
            data.get("basis") or (),
            data.get("pairs"),
            one_qubit_error=data.get("one_qubit_error"),
            two_qubit_error=data.get("two_qubit_error"),
            readout_error=data.get("readout_error"),
            calibration=str(data.get("calibration") or ""),
        )


def _sorted(errors: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    return tuple(
        sorted(
            (str(k), float(v))
            for k, v in (errors or {}).items()
            if isinstance(v, int | float) and 0.0 <= v <= 1.0
        )
    )
