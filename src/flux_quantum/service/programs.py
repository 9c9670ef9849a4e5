"""A unit's programs: the OpenQASM file each asks for, read as the job's user may.

``read_program`` reads a job's ``qpu.program`` (relative to the job's cwd) in a worker,
as text of at most ``MAX_PROGRAM_BYTES``; the default circuit when the request names
none. A guest's file is read only if that guest owns it: the service reads with the
instance owner's rights and must never send one of its own files (a key, a credential)
to a vendor as a "program". ``read_counted`` adds the gate counts max-fidelity and
min_fidelity use. Nothing here touches Flux or a vendor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from flux_quantum.catalog import Device
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.request import QpuRequest
from flux_quantum.selection import program_kinds
from flux_quantum.selection.qasm import ProgramCounts, count_program

# Submitted when a request names no program: a Bell pair, enough to prove the path works.
DEFAULT_PROGRAM_NAME = "bell"
DEFAULT_PROGRAM = """OPENQASM 3.0;
bit[2] c;
qubit[2] q;
h q[0];
cnot q[0], q[1];
c = measure q;
"""

MAX_PROGRAM_BYTES = 1 << 20


class ProgramError(FluxQuantumError):
    """A job's qpu.program file cannot be read; the message names the file."""


def read_program(cwd: str | None, path: str | None, owner: int | None = None) -> str:
    """The OpenQASM text of ``path`` (relative to the job's cwd); the default circuit
    when no program was given. Runs in a worker: the file may sit on slow storage.

    ``owner``: a guest's job, whose file the service reads with its own (the instance
    owner's) rights: only a file that guest owns, so that no job can send the
    service's own files (keys, credentials) to a vendor as its "program"."""
    if path is None:
        return DEFAULT_PROGRAM
    full = Path(path) if os.path.isabs(path) or not cwd else Path(cwd) / path
    try:
        with open(full, "rb") as f:
            st = os.fstat(f.fileno())
            if owner is not None and st.st_uid != owner:
                raise ProgramError(
                    f"qpu.program {path!r}: {full} belongs to uid {st.st_uid}, not to the "
                    f"job's user (uid {owner}): the site's service only reads a program "
                    "file the job's user owns"
                )
            data = f.read(MAX_PROGRAM_BYTES + 1)
    except OSError as exc:
        raise ProgramError(
            f"qpu.program {path!r}: cannot read {full} ({exc.strerror or exc})"
        ) from None
    if len(data) > MAX_PROGRAM_BYTES:
        raise ProgramError(f"qpu.program {path!r}: larger than {MAX_PROGRAM_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProgramError(f"qpu.program {path!r}: not UTF-8 text") from None


def read_counted(
    cwd: str | None,
    path: str | None,
    owner: int | None = None,
    devices: Iterable[Device] = (),
) -> tuple[str, ProgramCounts, dict[str, str]]:
    """The program's text, its gate counts (max-fidelity, min_fidelity) and which of
    ``devices`` cannot run it, with why (``program_kinds.cannot_run``), in a worker: read and checked once, not at every
    choice of a device."""
    text = read_program(cwd, path, owner)
    return text, count_program(text), program_kinds.cannot_run(text, devices)


def programs_of(request: QpuRequest) -> Sequence[str | None]:
    """The program paths of a request; one default-circuit program when it names none."""
    return request.program or (None,)
