"""Which Braket program sets a device takes: the checks CreateQuantumTask runs on one.

This module owns the rules a ``braket.ir.openqasm.program_set`` action must pass on an
emulated device before it is simulated: the device takes program sets, the set is well
formed and not empty, its executables fit the device's limit, and its shots are not zero,
split evenly over its executables, within the device's total and per-executable range.
It must never simulate anything or hold state; every refusal is a ValidationException
(with Braket's ``programSetValidationFailures`` when programs cannot run).
"""

from __future__ import annotations

from flux_quantum.emulator.braket.scenario import DeviceSpec
from flux_quantum.emulator.braket.wire import BraketRefusal, invalid
from flux_quantum.emulator.simulate import (
    OPENQASM_PROGRAM_SET,
    ProgramError,
    ProgramSetError,
    SetProgram,
    action_type,
    read_program_set,
)


def names_program_set(action: str) -> bool:
    """Whether a create's action says it is a program set (its schema header's name)."""
    try:
        return action_type(action) == OPENQASM_PROGRAM_SET
    except ProgramError:
        return False


def check_program_set(spec: DeviceSpec, action: str, shots: int) -> list[SetProgram]:
    """The programs of a program set ``spec`` can run with ``shots`` in all, or the
    ValidationException saying why not: the device takes no program sets, the set is empty
    or malformed, has more executables than the device takes, or its shots are zero, not
    a multiple of its executables or over the device's total."""
    limits = spec.program_sets
    if limits is None:
        raise invalid(
            f"Device {spec.arn} does not support action type {OPENQASM_PROGRAM_SET}; "
            "run its programs as separate quantum tasks"
        )
    try:
        programs = read_program_set(action)
    except ProgramSetError as exc:
        raise set_invalid(exc) from exc
    if not programs:
        raise invalid("A program set must contain at least one program")
    executables = sum(program.executables for program in programs)
    if executables > limits.max_executables:
        raise invalid(
            f"The program set has {executables} executables; {spec.name} runs at most "
            f"{limits.max_executables} in one quantum task"
        )
    if shots == 0:
        raise invalid("shots must be greater than 0 for a program set (no result types)")
    if shots % executables:
        raise invalid(
            f"shots ({shots}) must be a multiple of the program set's {executables} "
            "executables: each executable runs shots / executables times"
        )
    if shots > limits.max_total_shots:
        raise invalid(
            f"The program set's {shots} total shots exceed {spec.name}'s maximum of "
            f"{limits.max_total_shots} for a program set"
        )
    low, high = spec.shots
    if not low <= shots // executables <= high:
        raise invalid(
            f"shots per executable must be between {low} and {high} on {spec.name}, "
            f"got {shots // executables}"
        )
    return programs


def set_invalid(error: ProgramSetError) -> BraketRefusal:
    """The ValidationException of programs that cannot run, with their failures."""
    return invalid(
        str(error),
        reason="ProgramSetValidationFailed",
        programSetValidationFailures=error.failures,
    )
