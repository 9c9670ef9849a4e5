"""Project-wide exception types shared by the CLI, the handlers and the vendor layer."""

from __future__ import annotations


class FluxQuantumError(Exception):
    """Base class of every error flux-quantum raises on purpose."""


class CommandError(FluxQuantumError):
    """A command could not do what it was asked; the message is shown to the user."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
