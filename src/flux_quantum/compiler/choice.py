"""A program compiled for each device a policy may choose, to weigh them by it.

This module owns ``form_of`` (the form a device's vendor takes, from its descriptor's
``compiling``) and ``compile_each``: the program compiled through a ``CompilePool`` for
each device whose programs are mapped, with its target read from the vendor
(``Vendor.target``) unless one is known, each answer the target and the program, or why
not (a ``CompileError``: the device cannot take it or the program is over a limit; a
``VendorError``: the vendor did not answer, no estimate). The handler service runs it in
a worker before max-fidelity or min_fidelity choose; ``flux quantum select`` runs it
directly. It never chooses a device itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from flux_quantum.compiler.compiled import Compiled
from flux_quantum.compiler.errors import CompileError
from flux_quantum.compiler.pool import CompilePool
from flux_quantum.compiler.target import DeviceTarget
from flux_quantum.protocol.vendors import CHECKED, registry
from flux_quantum.vendors.errors import VendorError

if TYPE_CHECKING:
    from flux_quantum.catalog import Device
    from flux_quantum.vendors.base import Vendor

Answer = tuple[DeviceTarget, Compiled] | CompileError | VendorError


def form_of(device: Device) -> tuple[str, str | None]:
    """The form a program for ``device`` is written in, and its vendor's writer."""
    descriptor = registry().get(device.vendor)
    if descriptor is None:
        return CHECKED, None
    return descriptor.compiling.form_on(device.id), descriptor.compiling.writer


def compile_each(
    text: str,
    devices: Iterable[Device],
    vendors: Mapping[str, Vendor],
    pool: CompilePool,
    known: Callable[[Device], DeviceTarget | None] = lambda device: None,
) -> Callable[[], dict[str, Answer]]:
    """What compiles ``text`` for each of ``devices`` whose programs are mapped (the
    call to run, in a worker); ``known``: a target already read for a device."""
    plans = []
    for device in devices:
        form, writer = form_of(device)
        vendor = vendors.get(device.vendor)
        if form != CHECKED and vendor is not None:
            plans.append((device, vendor, form, writer, known(device)))

    def run() -> dict[str, Answer]:
        out: dict[str, Answer] = {}
        for device, vendor, form, writer, target in plans:
            try:
                target = target or vendor.target(device)
                out[device.name] = (target, pool.compile(text, target, form, writer))
            except (CompileError, VendorError) as exc:
                out[device.name] = exc
        return out

    return run


def weighed(answers: Mapping[str, Answer]) -> tuple[dict[str, float], dict[str, str]]:
    """The expected success per device of the program compiled for it, and the devices
    that cannot take it with why; a program over a limit raises its CompileError."""
    success: dict[str, float] = {}
    unfit: dict[str, str] = {}
    for name, answer in answers.items():
        if isinstance(answer, CompileError):
            if not answer.unfit:
                raise answer
            unfit[name] = f"cannot take the program: {answer}"
        elif isinstance(answer, tuple) and answer[1].success is not None:
            success[name] = answer[1].success
    return success, unfit
