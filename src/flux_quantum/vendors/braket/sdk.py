"""The Braket SDK's heavy modules, imported on first use, by one thread at a time.

The SDK costs seconds to import and most processes need only part of it, so its modules
are imported where they are first used; but that is in worker threads, several at once
(the service's creates, polls and result reads, the emulator's request threads), and
the SDK's packages import one another in circles: two threads importing into the same
circle can see a module another thread is still initialising, or one it dropped from
``sys.modules`` (``KeyError: 'braket.default_simulator'`` from a merged task's create).
``sdk(name)`` imports under one lock; a module already imported costs a dictionary read.
Every import of the SDK outside module level goes through it; ``warm_up`` (the
descriptor's, which the service calls in a worker at start) imports the modules a
vendor's first calls use.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_IMPORTING = threading.RLock()


def sdk(name: str) -> ModuleType:
    """The SDK module ``name`` (e.g. ``"braket.program_sets"``), imported once."""
    module = sys.modules.get(name)
    if (
        module is not None
        and getattr(getattr(module, "__spec__", None), "_initializing", False) is False
    ):
        return module
    with _IMPORTING:
        return importlib.import_module(name)


# The SDK's modules the vendor uses.
WARM_MODULES = (
    "braket.aws",
    "braket.ir.openqasm",
    "braket.program_sets",
    "braket.tasks",
    "braket.schema_common",
)


def warm_up() -> None:
    """The SDK's modules the vendor uses, imported now (an SDK not installed: nothing
    to warm, the vendor says so at its first call)."""
    try:
        for name in WARM_MODULES:
            sdk(name)
    except ImportError:
        pass
