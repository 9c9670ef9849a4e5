"""The one error of the compile stage: ``CompileError``, whose message is one sentence
naming why a program cannot be compiled (for which device), fit for a job's exception."""

from __future__ import annotations

from flux_quantum.errors import FluxQuantumError


class CompileError(FluxQuantumError):
    """A program cannot be compiled; the message says why in one sentence.

    ``unfit``: the program could be read but this device cannot take it (too narrow, a
    gate its basis cannot express, qubits its coupling map cannot join): another device
    may. Otherwise the program itself is at fault (it does not parse, it is over a
    limit) and no device would take it."""

    def __init__(self, message: str, *, unfit: bool = False) -> None:
        super().__init__(message)
        self.unfit = unfit
