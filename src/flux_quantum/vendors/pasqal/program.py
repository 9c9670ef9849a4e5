"""Pulser sequences as Pasqal takes them: the check, the idempotency mark and a sampler.

Pasqal's QPUs take a Pulser ``Sequence`` serialized to its abstract JSON representation
(``Sequence.to_abstract_repr()``: ``version``, ``name``, ``register`` (atoms with ``name``,
``x``, ``y``), ``channels`` (a name to a channel id such as ``rydberg_global``),
``operations`` (``pulse`` operations on a channel, their ``amplitude`` a waveform with a
``duration`` in ns), ``measurement``, ``device``). This module reads that JSON itself
(pulser is not a dependency). It is pure: no I/O, no clock, no state.

- ``check(program_text, atoms)``: None when the text is a Pulser sequence of at most
  ``atoms`` atoms, else one sentence saying what is wrong and what is accepted.
- ``mark(program_text, token)`` / ``token_of(sequence_text)``: the idempotency token rides
  the sequence's ``name`` (Pasqal keeps a batch's sequence as sent), so a create whose
  outcome is unknown can be found again.
- ``sample(program_text, runs, seed)``: the emulator's model, deterministic for a seed:
  atoms do not interact; each is excited to the Rydberg state with probability
  ``sin^2(A/2)``, ``A`` the summed area (rad) of the amplitude of every pulse on a global
  Rydberg channel; a bitstring has one character per atom in register order, ``1`` for
  an excited atom (Pulser's ground-rydberg basis).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeGuard

TOKEN_MARK = "flux-quantum:"
ACCEPTED = "Pasqal devices take Pulser sequences (the JSON of Sequence.to_abstract_repr())"
_MARKED = re.compile(r"\s*\[" + re.escape(TOKEN_MARK) + r"([^\]]+)\]$")


@dataclass(frozen=True)
class PulserSequence:
    """What the emulator needs of a sequence: its atoms in order, the global Rydberg
    pulse area (rad) and its name."""

    atoms: tuple[str, ...]
    area: float
    name: str


def parse(program_text: str) -> PulserSequence:
    """The sequence in ``program_text``; ValueError in one sentence when it is not one."""
    text = program_text.lstrip()
    if text.startswith("OPENQASM") or "OPENQASM" in text[:200]:
        raise ValueError(f"an OpenQASM circuit cannot run on a Pasqal device: {ACCEPTED}")
    try:
        doc = json.loads(program_text)
    except ValueError:
        raise ValueError(f"the program is not JSON: {ACCEPTED}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"the program is not a JSON object: {ACCEPTED}")
    if "setup" in doc and "hamiltonian" in doc:
        raise ValueError(
            f"the program is a CUDA-Q sequence, which flux-quantum does not send: {ACCEPTED}"
        )
    register = doc.get("register")
    if not isinstance(register, list) or not register:
        raise ValueError(f"the sequence has no 'register' list of atoms: {ACCEPTED}")
    atoms = []
    for i, atom in enumerate(register):
        if not isinstance(atom, dict) or not isinstance(atom.get("name"), str | int):
            raise ValueError(f"register atom #{i} has no 'name': {ACCEPTED}")
        atoms.append(str(atom["name"]))
    if len(set(atoms)) != len(atoms):
        raise ValueError("the sequence's register names an atom twice")
    channels = doc.get("channels")
    operations = doc.get("operations")
    if not isinstance(channels, dict) or not isinstance(operations, list):
        raise ValueError(
            f"the sequence needs a 'channels' object and an 'operations' list: {ACCEPTED}"
        )
    area = 0.0
    for i, op in enumerate(operations):
        if not isinstance(op, dict) or op.get("op") != "pulse":
            continue
        channel = str(channels.get(op.get("channel"), op.get("channel")))
        if not channel.startswith("rydberg_global"):
            continue
        area += _area(op.get("amplitude"), f"operation #{i}")
    name = doc.get("name")
    return PulserSequence(tuple(atoms), area, name if isinstance(name, str) else "")


def _area(waveform: Any, where: str) -> float:
    """The area (rad) of an amplitude waveform (rad/µs over a duration in ns)."""
    if not isinstance(waveform, dict):
        raise ValueError(f"{where}: the pulse has no 'amplitude' waveform")
    kind = waveform.get("kind")
    if kind == "composite":
        parts = waveform.get("waveforms")
        if not isinstance(parts, list):
            raise ValueError(f"{where}: a composite waveform needs a 'waveforms' list")
        return sum(_area(part, where) for part in parts)
    duration = waveform.get("duration")
    if kind == "custom":
        samples = waveform.get("samples")
        if not isinstance(samples, list) or not all(_number(s) for s in samples):
            raise ValueError(f"{where}: a custom waveform needs numeric 'samples'")
        return math.fsum(samples) / 1000.0
    if not _number(duration) or duration < 0:
        raise ValueError(f"{where}: the amplitude waveform needs a 'duration' in ns")
    if kind == "constant" and _number(waveform.get("value")):
        return waveform["value"] * duration / 1000.0
    if kind == "blackman" and _number(waveform.get("area")):
        return float(waveform["area"])
    if kind == "ramp" and _number(waveform.get("start")) and _number(waveform.get("stop")):
        return (waveform["start"] + waveform["stop"]) / 2.0 * duration / 1000.0
    raise ValueError(
        f"{where}: the emulator reads constant, blackman, ramp, custom and composite "
        f"amplitude waveforms, got {kind!r}"
    )


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check(program_text: str, atoms: int) -> str | None:
    """None when ``program_text`` is a Pulser sequence a device of ``atoms`` atoms takes,
    else one sentence naming what is wrong and what is accepted."""
    try:
        sequence = parse(program_text)
    except ValueError as exc:
        return str(exc)
    if len(sequence.atoms) > atoms:
        return (
            f"the sequence's register has {len(sequence.atoms)} atoms, more than the "
            f"device's {atoms}"
        )
    return None


def mark(program_text: str, token: str) -> str:
    """``program_text`` with ``token`` in its ``name`` (a name already marked is re-marked)."""
    doc = json.loads(program_text)
    name = doc.get("name") if isinstance(doc.get("name"), str) else ""
    doc["name"] = f"{_MARKED.sub('', name)} [{TOKEN_MARK}{token}]".lstrip()
    return json.dumps(doc, separators=(",", ":"))


def token_of(sequence_text: Any) -> str | None:
    """The token ``mark`` put into a sequence's name, or None."""
    if not isinstance(sequence_text, str):
        return None
    try:
        doc = json.loads(sequence_text)
    except ValueError:
        return None
    name = doc.get("name") if isinstance(doc, dict) else None
    match = _MARKED.search(name) if isinstance(name, str) else None
    return match.group(1) if match else None


def sample(program_text: str, runs: int, seed: str) -> dict[str, int]:
    """Bitstring counts of ``runs`` runs of the sequence (see the module docstring)."""
    sequence = parse(program_text)
    p = math.sin(sequence.area / 2.0) ** 2
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    for _ in range(runs):
        counts["".join("1" if rng.random() < p else "0" for _ in sequence.atoms)] += 1
    return dict(sorted(counts.items()))
