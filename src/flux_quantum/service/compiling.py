"""The compile stage: a program written for the device the policy chose, before its task.

Once ``Selection`` has chosen a device for an attempt (and again for each fail-over's
attempt), ``Compiling`` compiles the attempt's OpenQASM program for it in a worker:
the device's target is the vendor's (``Vendor.target``: IBM's backend configuration,
IQM's architecture), kept per device for ``TARGET_TTL`` seconds, and the program is
compiled by the ``CompilePool`` (worker processes under the site's time and memory
limits, ``[quantum.compile]``) in the form the vendor's descriptor names
(``Compiling.form``: mapped onto the device, or checked and sent as written). The
outcome is recorded as ``qpu-compile`` (layout, calibration, expected success, the
compiled text when short) and the vendor receives the compiled text
(``Program.sent_text``). A device that cannot take the program (too narrow, a gate or
a coupling it lacks) is dropped for this program with the reason and another is chosen
(``Program.unfit``: ``qpu-select`` shows it, and a job none can take fails naming each
device's reason); a program over a limit, or one no parser reads, fails its job while
held, before any vendor create and with nothing charged. Without a pool (the stage
off) programs go as written. It never creates a task nor releases a job.
"""

from __future__ import annotations

import syslog
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flux_quantum.catalog import Device
from flux_quantum.compiler import Compiled, CompileError, CompilePool, DeviceTarget
from flux_quantum.compiler.choice import Answer, compile_each, form_of, weighed
from flux_quantum.protocol import events
from flux_quantum.protocol.programs import OPENQASM, kind_of
from flux_quantum.service.attempts import AttemptCalls
from flux_quantum.service.context import ServiceContext
from flux_quantum.service.outcomes import Outcomes
from flux_quantum.service.state import Attempt, Program, Unit
from flux_quantum.service.workers import Submit
from flux_quantum.vendors.base import Vendor

TARGET_TTL = 900.0  # a device's target is read again after 15 minutes (its calibration)
# What compiling for each candidate gave: the target and the program, or why not.
Choices = dict[str, Answer]


class Compiling:
    def __init__(
        self,
        ctx: ServiceContext,
        calls: AttemptCalls,
        outcomes: Outcomes,
        pool: CompilePool | None,
        lane: Submit | None = None,
    ) -> None:
        self.ctx = ctx
        self.calls = calls
        self.outcomes = outcomes
        self.pool = pool
        # Threads of the compile stage's own (the service's: ``VendorWorkers.lane``), so
        # that programs waiting for a compile worker never hold a vendor call back; None:
        # the vendor calls' workers (the unit tier runs every call inline).
        self.lane = lane
        self._targets: dict[str, tuple[float, DeviceTarget]] = {}

    @property
    def enabled(self) -> bool:
        return self.pool is not None

    def needed(self, program: Program) -> bool:
        """Whether the attempt's program is still to be compiled for its device."""
        attempt = program.attempt
        return (
            self.pool is not None
            and attempt.device is not None
            and attempt.compiled is None
            and program.text is not None
            and kind_of(program.text) == OPENQASM
        )

    def _known(self, device: Device) -> DeviceTarget | None:
        cached = self._targets.get(device.name)
        return (
            cached[1] if cached is not None and self.ctx.clock() - cached[0] < TARGET_TTL else None
        )

    def _keep(self, target: DeviceTarget) -> None:
        """A target read from the vendor: kept for ``TARGET_TTL`` seconds (reactor)."""
        cached = self._targets.get(target.device)
        if cached is None or cached[1] != target:
            self._targets[target.device] = (self.ctx.clock(), target)

    def for_choice(
        self, program: Program, devices: Sequence[Device], vendors: Mapping[str, Vendor]
    ) -> Callable[[], Choices] | None:
        """What compiles ``program`` for each of ``devices`` whose programs are mapped,
        in a worker, so that the policy weighs each by the program as compiled for it
        (max-fidelity, min_fidelity); None when the stage is off or the program is not
        OpenQASM. Its answer goes to ``chosen_from`` on the reactor."""
        pool, text = self.pool, program.text
        if pool is None or text is None or kind_of(text) != OPENQASM:
            return None
        return compile_each(text, devices, vendors, pool, self._known)

    def chosen_from(self, program: Program, choices: Choices) -> dict[str, Compiled]:
        """The program as compiled for each device that can take it; those that cannot
        are kept in ``Program.unfit`` with why. A program over a limit raises its
        CompileError (the job fails)."""
        _, unfit = weighed(choices)
        program.unfit.update(unfit)
        compiled: dict[str, Compiled] = {}
        for name, answer in choices.items():
            if isinstance(answer, tuple):
                self._keep(answer[0])
                compiled[name] = answer[1]
        return compiled

    def adopt(self, unit: Unit, program: Program, compiled: Mapping[str, Compiled]) -> None:
        """The device chosen was compiled for while choosing: that program is the one
        its task runs (recorded as ``qpu-compile`` now)."""
        attempt = program.attempt
        found = compiled.get(attempt.device.name) if attempt.device is not None else None
        if found is not None:
            attempt.compiled_for(found)
            self.ctx.post_all(unit, record(program.index, attempt.number, found))

    def start(self, unit: Unit, program: Program) -> None:
        """Compile the attempt's program for its device, in a worker."""
        pool, attempt = self.pool, program.attempt
        device, text = attempt.device, program.text
        assert pool is not None and device is not None and text is not None
        vendor = self.calls.vendor(unit, program, device.vendor, "compile")
        if vendor is None:
            return
        form, writer = form_of(device)
        known = self._known(device)

        def compile_it() -> tuple[DeviceTarget, Compiled]:
            target = known or vendor.target(device)
            return target, pool.compile(text, target, form, writer)

        self.calls.call(unit, program, compile_it, self._compiled, lane=self.lane)

    def _compiled(
        self, unit: Unit, program: Program, attempt: Attempt, result: Any, error: Any
    ) -> None:
        device = attempt.device
        assert device is not None
        if isinstance(error, CompileError):
            self._refused(unit, program, attempt, error)
            return
        if error is not None:
            self.calls.failed(unit, program, "compile", error)
            return
        target, compiled = result
        self._keep(target)
        attempt.compiled_for(compiled)
        self.ctx.post_all(unit, record(program.index, attempt.number, compiled))
        self.ctx.log(
            syslog.LOG_DEBUG,
            f"unit {unit.id}: program {program.index} compiled for {device.name} "
            f"({compiled.form}, {compiled.seconds:.2f}s)",
        )

    def _refused(self, unit: Unit, program: Program, attempt: Attempt, error: CompileError) -> None:
        """A device that cannot take the program is dropped for it (another is chosen,
        or the job fails naming every device's reason); any other refusal fails the job."""
        device = attempt.device
        assert device is not None
        if not error.unfit:
            self.outcomes.fail_unit(unit, f"qpu: {error}")
            return
        program.unfit[device.name] = f"cannot take the program: {error}"
        if attempt.submit_posted:
            # Its token is recorded (a restart): the next attempt is chosen elsewhere.
            self.outcomes.failover(unit, program, device.name, str(error))
            return
        attempt.unchosen()


def record(index: int, attempt: int, compiled: Compiled) -> events.Compile:
    """The ``qpu-compile`` event of ``compiled``: its text only when it differs from the
    program as written and is short enough for an eventlog."""
    size = len(compiled.text.encode())
    kept = compiled.changed and size <= events.PROGRAM_KEPT
    return events.Compile(
        index=index,
        attempt=attempt,
        device=compiled.device,
        form=compiled.form,
        layout=compiled.layout,
        calibration=compiled.calibration or None,
        success=None if compiled.success is None else round(compiled.success, 6),
        two_qubit_gates=compiled.two_qubit_gates,
        depth=compiled.depth,
        seconds=round(compiled.seconds, 3),
        program=compiled.text if kept else None,
        bytes=size if compiled.changed and not kept else None,
    )
