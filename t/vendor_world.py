"""The flux tier's one vendor world: an emulator serving some vendors' sides, a catalog of
their devices and the job's files in a work directory, and a real instance whose
environment carries the sides' settings as a site exports them for the service. The
secrets stay with the service: the jobs get the settings without them (they read their
tasks through the service), and a test hands them to a user's command by hand
(``world.secrets``). Each vendor's flux tests build it with their own scenario and
catalog (``VendorWorld(workdir, emu, ("ionq",), CATALOG, ...)``). It starts nothing at
import; a test that uses it is a flux test."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fluxinstance import FluxInstance
from qpu_setup import FAST, Qpu

from flux_quantum.emulator import Emulator


class VendorWorld(Qpu):
    """``Qpu`` of the service tests over ``emu``'s ``sides`` (the emulator's attribute
    names: ``"ibm"``, ``"iqm"``, ``"pasqal"``, ...), with ``catalog`` and ``files``
    written into ``workdir``; settings whose name ends with one of ``secret_suffixes``
    are the service's alone."""

    def __init__(
        self,
        workdir: Path,
        emu: Emulator,
        sides: Iterable[str],
        catalog: str,
        *,
        secret_suffixes: tuple[str, ...],
        files: Mapping[str, str] = {},  # noqa: B006 (read, never changed)
        config: str | None = None,
    ) -> None:
        import flux

        self.emu = emu.start()
        self.clock = self.emu.clock
        self.catalog = workdir / "backends.yaml"
        self.catalog.write_text(catalog)
        for name, text in files.items():
            (workdir / name).write_text(text)
        env: dict[str, str] = {}
        for side in sides:
            env.update(getattr(self.emu, side).env(self.emu.url))
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            self.inst = FluxInstance(workdir, size=1, config=config).start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.handle = flux.Flux(self.inst.uri)
        self.secrets = {k: v for k, v in env.items() if k.endswith(secret_suffixes)}
        self.inst.env = {k: v for k, v in self.inst.env.items() if k not in self.secrets}
        settings = {k: v for k, v in env.items() if k not in self.secrets}
        self.job_env = {**settings, "FLUX_QUANTUM_BACKENDS": str(self.catalog)}

    def start_service(self, *extra: str) -> None:
        self.inst.quantum("service", "start", f"--catalog={self.catalog}", *FAST, *extra)

    def status(self) -> dict[str, Any]:
        return json.loads(self.inst.quantum("service", "status", "--json").stdout)

    def attach(self, jobid: str) -> dict[str, Any]:
        return json.loads(self.inst.run(["flux", "job", "attach", jobid]).stdout)
