"""What the compile stage made of one program for one device: ``Compiled``.

This module owns the record a compile worker hands back and the job keeps: the text
the vendor receives, its form, the physical qubit each of the program's qubits was
placed on (``layout``; None when the program was not mapped), the expected success on
the device's published errors (None without them), the compiled circuit's two-qubit
gates and depth, the device and calibration it was compiled for, and how long it took.
Plain data, standard library only: it crosses the worker's pipe as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Compiled:
    text: str
    form: str
    device: str
    calibration: str = ""
    layout: tuple[int, ...] | None = None
    success: float | None = None
    two_qubit_gates: int | None = None
    depth: int | None = None
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        """Whether the vendor receives another text than the one written."""
        return self.layout is not None

    def summary(self) -> dict[str, Any]:
        """What an eventlog entry says of it (no program text)."""
        out: dict[str, Any] = {"device": self.device, "form": self.form}
        if self.calibration:
            out["calibration"] = self.calibration
        if self.layout is not None:
            out["layout"] = list(self.layout)
        if self.success is not None:
            out["success"] = round(self.success, 4)
        if self.two_qubit_gates is not None:
            out["two_qubit_gates"] = self.two_qubit_gates
        if self.depth is not None:
            out["depth"] = self.depth
        out["seconds"] = round(self.seconds, 3)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "text": self.text, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Compiled:
        layout = data.get("layout")
        return cls(
            text=str(data["text"]),
            form=str(data["form"]),
            device=str(data["device"]),
            calibration=str(data.get("calibration") or ""),
            layout=None if layout is None else tuple(int(q) for q in layout),
            success=data.get("success"),
            two_qubit_gates=data.get("two_qubit_gates"),
            depth=data.get("depth"),
            seconds=float(data.get("seconds") or 0.0),
        )
