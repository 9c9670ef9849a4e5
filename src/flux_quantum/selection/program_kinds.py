"""What kind of program a job supplies, and which devices can run it.

Gate-based devices (Braket's, IBM's, IQM's, the emulator's) run OpenQASM 3 circuits; an
IQM device also takes IQM's own JSON circuits (``{"circuits": [{"instructions": ...}]}``);
a Pasqal device is analog and runs pulse-level Pulser sequences (Pulser's abstract JSON
representation, ``Sequence.to_abstract_repr()``: ``register``, ``channels``,
``operations``) and nothing else; an Alice & Bob Felis target runs human-readable QIR
(LLVM IR text calling ``@__quantum__qis__*``) and nothing else. This module tells the
four apart from the text alone and says in one sentence why a device cannot run a
program (its kind, then the checks of ``flux_quantum.vendors.iqm_program``,
``pasqal_program`` and ``felis_program``); the service drops such
devices when it chooses one, so a job whose every allowed device cannot run its program
fails while held, before it gets nodes or a task. It is pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from flux_quantum.catalog import Device

OPENQASM = "openqasm"
IQM_JSON = "iqm-json"
PULSER = "pulser"
QIR = "qir"
NAMES = {
    OPENQASM: "an OpenQASM circuit",
    IQM_JSON: "an IQM JSON circuit",
    PULSER: "a Pulser sequence",
    QIR: "a QIR program",
}

# What each catalog vendor runs; a vendor not listed runs OpenQASM only.
ACCEPTED: dict[str, tuple[str, ...]] = {
    "braket": (OPENQASM,),
    "local": (OPENQASM,),
    "ibm": (OPENQASM,),
    "iqm": (OPENQASM, IQM_JSON),
    "pasqal": (PULSER,),
    "ibm-quantum-system": (OPENQASM,),
    "alice-bob-felis": (QIR,),
    "oqtopus": (OPENQASM,),
    "ionq": (OPENQASM,),
}


def kind_of(text: str | None) -> str:
    """``openqasm``, ``iqm-json``, ``pulser`` or ``qir``: a JSON object is one of the two
    JSON kinds by its keys, an LLVM module calling QIR's instructions is QIR; anything else
    is taken for OpenQASM (checked where it runs)."""
    if text is None:
        return OPENQASM  # the default program: a Bell pair in OpenQASM
    from flux_quantum.vendors.felis_program import is_qir

    if is_qir(text):
        return QIR
    doc = _json(text)
    if isinstance(doc, dict):
        if "register" in doc and ("operations" in doc or "channels" in doc):
            return PULSER
        if "circuits" in doc or "instructions" in doc:
            return IQM_JSON
    return OPENQASM


def device_reason(vendor: str, kind: str) -> str | None:
    """Why a device of ``vendor`` cannot run a program of ``kind``, or None."""
    accepted = ACCEPTED.get(vendor, (OPENQASM,))
    if kind in accepted:
        return None
    takes = " or ".join(NAMES[k].split(" ", 1)[1] + "s" for k in accepted)
    return f"takes {takes} only ({vendor}), the program is {NAMES.get(kind, kind)}"


def program_reason(vendor: str, qubits: int, text: str | None) -> str | None:
    """Why a device of ``vendor`` with ``qubits`` qubits (atoms) cannot run ``text``, or
    None: its kind first, then, for the vendors whose programs flux-quantum translates or
    reads itself (IQM's circuits, Pasqal's sequences), what that vendor's check says
    (a gate IQM's translation lacks, a register larger than the device), Felis's QIR."""
    kind = kind_of(text)
    reason = device_reason(vendor, kind)
    if reason is not None or text is None:
        return reason
    if vendor == "iqm":
        from flux_quantum.vendors import iqm_program

        return iqm_program.check(text, qubits)
    if vendor == "pasqal":
        from flux_quantum.vendors import pasqal_program

        return pasqal_program.check(text, qubits)
    if vendor == "alice-bob-felis":
        from flux_quantum.vendors import felis_program

        return felis_program.check(text, qubits)
    return None


def cannot_run(text: str | None, devices: Iterable[Device]) -> dict[str, str]:
    """The ``devices`` that cannot run ``text`` (``program_reason``), with the reason."""
    reasons = {d.name: program_reason(d.vendor, d.qubits, text) for d in devices}
    return {name: why for name, why in reasons.items() if why is not None}


def _json(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None
