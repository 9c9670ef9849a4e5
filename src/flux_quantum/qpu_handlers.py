"""The qpu handler service as a Flux Python broker module (``flux module load``).

This file only hosts ``flux_quantum.service`` inside a broker: it makes the package and
its dependencies importable by the broker's Python (``pythonpath=`` argument, which
``flux quantum service start`` fills in), turns module arguments into
``ServiceOptions``, serves ``qpu_handlers.status`` and stops cleanly on ``flux module
remove``, on SIGTERM at instance shutdown and on a broken start. It must never let an
exception reach the reactor or make ``run()`` fail: in a user instance a Python module
that exits with an error is a "module runtime failure" and the broker panics.

    flux module load $(flux quantum service module-path) catalog=/path/backends.yaml

(``flux quantum service start`` does this with the right arguments.)
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import syslog
from typing import Any

from flux.brokermod import BrokerModule, request_handler

MODULE_NAME = "qpu_handlers"


def _extend_path(args: tuple[str, ...]) -> tuple[str, ...]:
    """Put ``pythonpath=A:B`` entries (and this file's source tree) on sys.path, ahead
    of the broker's own site-packages, and return the remaining arguments."""
    rest = []
    entries = []
    for word in args:
        if word.startswith("pythonpath="):
            entries += [p for p in word.split("=", 1)[1].split(os.pathsep) if p]
        else:
            rest.append(word)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    entries.append(here)
    for entry in reversed(entries):
        if entry not in sys.path and os.path.isdir(entry):
            sys.path.insert(1, entry)
    return tuple(rest)


class QpuHandlers(BrokerModule):
    """Broker module: runs one ServiceRunner on the module's handle."""

    def __init__(self, h: Any, *args: str) -> None:
        super().__init__(h, *args)
        self.runner: Any = None
        self.start_error: str | None = None
        # At instance shutdown exec'd modules get SIGTERM: stop cleanly, exit 0.
        self._sigterm = h.signal_watcher_create(signal.SIGTERM, self._on_sigterm)
        self._sigterm.start()
        try:
            words = _extend_path(args)
            from flux_quantum.service import ServiceOptions, ServiceRunner

            options = ServiceOptions.from_args(words)
            self.runner = ServiceRunner(h, options, log=self._log)
            self.runner.start()
        except Exception as exc:
            # Stay loaded and say why on status: an error exit would panic the broker.
            self.start_error = f"{type(exc).__name__}: {exc}"
            self.log.error(f"qpu handlers cannot start: {self.start_error}")

    def _log(self, level: int, msg: str) -> None:
        self.log(level, msg)

    def _on_sigterm(self, *args: Any) -> None:
        self.log.info("qpu handlers: SIGTERM, stopping")
        self._shutdown()
        self.stop()

    def _shutdown(self) -> None:
        if self.runner is not None:
            try:
                self.runner.stop()
            except Exception as exc:
                self.log.error(f"qpu handlers: stop: {exc}")
            self.runner = None

    def run(self) -> None:
        try:
            super().run()
        except OSError as exc:
            # A callback raised despite the fences: log it and exit cleanly rather than
            # take the broker down with a module runtime failure.
            self.log(syslog.LOG_ERR, f"qpu handlers: reactor stopped: {exc}")
        finally:
            self._shutdown()

    @request_handler("status")
    def status(self, msg: Any) -> None:
        try:
            if self.runner is None:
                payload = {"running": False, "error": self.start_error or "stopped"}
            else:
                payload = {"running": True, **self.runner.status()}
            self.handle.respond(msg, payload)
        except Exception as exc:
            try:
                text = f"status: {exc}".encode()
                self.handle.flux_respond_error(msg.handle, errno.EIO, text)
            except Exception:
                self.log.error(f"qpu handlers: status: {exc}")


def mod_main(h: Any, *args: str) -> None:
    QpuHandlers(h, *args).run()
