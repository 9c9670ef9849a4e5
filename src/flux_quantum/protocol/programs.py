"""The kinds of program a job may supply, told apart from the text alone.

Gate-based devices run OpenQASM 3 circuits; IQM's also take IQM's own JSON circuits
(``{"circuits": [{"instructions": ...}]}``); neutral-atom devices run pulse-level Pulser
sequences (Pulser's abstract JSON representation, ``Sequence.to_abstract_repr()``:
``register``, ``channels``, ``operations``); some targets run human-readable QIR (LLVM IR
text calling ``@__quantum__qis__*``). This module owns the names of those kinds, how a
text is recognised as one (``kind_of``) and the one sentence that says a vendor does not
take a kind (``kind_reason``). Which kinds a vendor takes is its descriptor's
(``flux_quantum.protocol.vendors``); what else a vendor checks is its own program
module's. Standard library only, and pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

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
_DEFINE = re.compile(r"^\s*define\s", re.M)


def is_qir(text: str) -> bool:
    """Whether ``text`` is human-readable QIR (an LLVM module calling QIR's QIS)."""
    return bool(_DEFINE.search(text)) and "@__quantum__" in text


def kind_of(text: str | None) -> str:
    """``openqasm``, ``iqm-json``, ``pulser`` or ``qir``: a JSON object is one of the two
    JSON kinds by its keys, an LLVM module calling QIR's instructions is QIR; anything else
    is taken for OpenQASM (checked where it runs)."""
    if text is None:
        return OPENQASM  # the default program: a Bell pair in OpenQASM
    if is_qir(text):
        return QIR
    doc = _json(text)
    if isinstance(doc, dict):
        if "register" in doc and ("operations" in doc or "channels" in doc):
            return PULSER
        if "circuits" in doc or "instructions" in doc:
            return IQM_JSON
    return OPENQASM


def kind_reason(vendor: str, accepted: tuple[str, ...], kind: str) -> str | None:
    """Why a device of ``vendor``, which takes the kinds ``accepted``, cannot run a
    program of ``kind``, or None."""
    if kind in accepted:
        return None
    takes = " or ".join(_plural(k) for k in accepted)
    return f"takes {takes} only ({vendor}), the program is {NAMES.get(kind, kind)}"


def _plural(kind: str) -> str:
    """``OpenQASM circuits`` for ``openqasm``: the kind's name without its article."""
    return NAMES.get(kind, f"a {kind} program").split(" ", 1)[1] + "s"


def _json(text: str) -> Any:
    stripped = text.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None
