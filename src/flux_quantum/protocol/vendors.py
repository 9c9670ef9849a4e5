"""What a vendor is before its code loads: the descriptor each vendor exports, and the
registry that finds them.

A vendor is one package: ``flux_quantum/vendors/<name>/`` for those flux-quantum ships,
or a distribution of its own that declares an entry point in the group
``flux_quantum.vendors`` (``acme = acme_quantum:VENDOR``). The package's face (its
``__init__.py``) exports one ``VendorDescriptor`` and imports nothing but the standard
library and ``flux_quantum.protocol``, so that Flux's own Python (the ingest validator, the
CLI plugin) reads every vendor's name, settings and credential variables without the
vendor's SDK. The descriptor names its vendor class, its error mapping, its program
check and its warm-up as ``module:attribute`` strings, loaded only when they are used;
what the site's rules read of it (the program kinds, what one merged task may hold, how
its QPUs are reserved) is plain data.

This module owns the descriptor record and the registry (``registry()``), the one list of
vendors: the catalog, the ``qpu`` request parser, the program-kind rules, the vendor
factory, merged tasks, reserved windows and the service's warm-up read it, and nothing
else names a vendor. The registry looks in the
``flux_quantum/vendors`` folder, then at the entry points of the distributions on
``sys.path`` and in the folder that holds the ``flux_quantum`` package (where the CLI
plugin, loaded by path, finds a vendor installed beside flux-quantum). A vendor that
cannot be loaded is left out, its reason kept in ``problems``: it never stops the others.
Standard library only; it never imports a vendor's SDK and reads nothing but packages
and distributions' metadata.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import pkgutil
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flux_quantum.protocol.merged_tasks import Limits
from flux_quantum.protocol.programs import NAMES, OPENQASM, kind_of, kind_reason

if TYPE_CHECKING:
    import importlib.metadata

GROUP = "flux_quantum.vendors"  # the entry-point group of vendors shipped apart
FACE = "VENDOR"  # what a vendor package of flux-quantum's own exports
DEFAULT_RANK = 100  # where a vendor that gives no rank stands: after flux-quantum's own
_ROOT = __name__.split(".")[0]
_PACKAGE = Path(__file__).resolve().parents[1]  # flux_quantum/
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", re.ASCII)


@dataclass(frozen=True)
class ReservedWindows:
    """How a vendor's QPUs are booked for a window of time, in which the tasks created
    with the reservation's id skip the public queue (``[[quantum.reservations]]``:
    ``flux_quantum.site.reservations``).

    ``service``: what the vendor calls it (``Braket Direct``); ``devices`` and ``label``:
    its devices and the vendor in the sentence that refuses a window on another device
    (``only Braket devices (vendor braket) have reservations``); ``reservation``: a
    regular expression a reservation's id (the table's ``arn``) matches in full, and
    ``reservation_form``: what such an id is, for the sentence that refuses another
    (``a Braket Direct reservation ARN (arn:aws:braket:REGION:ACCOUNT:reservation/ID)``);
    ``on``: which of the vendor's device ids it covers (None: every QPU of the vendor).
    """

    service: str
    devices: str
    label: str
    reservation: str
    reservation_form: str
    on: Callable[[str], bool] | None = None
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "_pattern", re.compile(self.reservation))
        except re.error as exc:
            raise ValueError(
                f"reserved windows of {self.service}: reservation must be a regular "
                f"expression, got {self.reservation!r} ({exc})"
            ) from None

    def covers(self, device_id: str) -> bool:
        """Whether the vendor's device ``device_id`` (a QPU) can be reserved."""
        return self.on is None or self.on(device_id)

    def takes(self, reservation: str) -> bool:
        """Whether ``reservation`` is the id of one of these windows."""
        return self._pattern.fullmatch(reservation) is not None


# How the compile stage writes a program for a vendor's devices (``Compiling.form``):
# mapped onto the device's target (its basis gates, coupling map and calibration) with
# Qiskit's transpiler, or parsed and checked against the device's width and sent as
# written (the vendor compiles on its side).
MAPPED = "mapped"
CHECKED = "checked"
FORMS = (MAPPED, CHECKED)


@dataclass(frozen=True)
class Compiling:
    """How a vendor's OpenQASM programs are compiled once a device is chosen
    (``flux_quantum.compiler``; the device's target comes from the vendor's
    ``Vendor.target``).

    ``form``: ``MAPPED`` or ``CHECKED`` (above). ``writer``: ``module:function``, the
    text the vendor takes of a mapped Qiskit circuit (IQM's JSON circuit); None:
    OpenQASM 3 as Qiskit's exporter writes it (IBM's ISA circuits). ``on``: which of its
    device ids take ``form`` (None: all); the others are ``CHECKED`` (a vendor's
    simulators).
    """

    form: str = CHECKED
    writer: str | None = None
    on: Callable[[str], bool] | None = None

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(
                f"compiling: form must be one of {', '.join(FORMS)}, got {self.form!r}"
            )
        if self.writer is not None and not _TARGET.fullmatch(self.writer):
            raise ValueError(f"compiling: writer must be 'module:name', got {self.writer!r}")

    def form_on(self, device_id: str) -> str:
        """The form a program for the vendor's device ``device_id`` is compiled in."""
        return self.form if self.on is None or self.on(device_id) else CHECKED


@dataclass(frozen=True)
class VendorDescriptor:
    """One vendor as the rest of flux-quantum knows it.

    ``name``: its key in the catalog (``vendor:``, ``vendors.NAME``) and the VENDOR of a
    ``qpu`` request. ``vendor``: ``module:Class`` of its ``CatalogVendor``.
    ``errors``: ``module:function``, its one mapping of what its client raises to
    ``flux_quantum.vendors.errors`` (``(exc, *, vendor, operation, subject)``).
    ``settings``: the keys its catalog section ``vendors.NAME`` takes (never a secret).
    ``id_region``: reads a catalog device's ``id``: the region it names, or None;
    ValueError with the sentence ``id must be ...`` when the id is not one of its own
    (None: any non-empty id). ``programs``: the program kinds it runs
    (``flux_quantum.protocol.programs``); ``program_check``: ``module:function``
    ``(text, qubits) -> reason or None``, what it checks of a program of those kinds
    beyond its kind. ``credentials`` and ``credential_suffixes``: the environment
    variables that hold its secrets (by name, or by the end of a per-device name), which a
    guest's job may not carry. ``rank``: its place in the lists users read (lower first).
    ``merged_tasks``: what one task on its QPUs may hold when it carries several jobs'
    programs (``Vendor.submit_set``), or a function of a device's id that says it per
    device (None: every task carries one program). ``reserved_windows``: how its QPUs
    are reserved (None: they are not). ``warm_up``: ``module:function``, called once in
    a worker when the service starts: what its first calls would import (an SDK that
    takes seconds). ``compiling``: how its programs are compiled for the device chosen
    (``Compiling``; default: checked and sent as written).
    """

    name: str
    title: str
    vendor: str
    errors: str
    settings: tuple[str, ...] = ()
    id_region: Callable[[str], str | None] | None = None
    programs: tuple[str, ...] = (OPENQASM,)
    program_check: str | None = None
    credentials: tuple[str, ...] = ()
    credential_suffixes: tuple[str, ...] = ()
    rank: int = DEFAULT_RANK
    merged_tasks: Limits | Callable[[str], Limits | None] | None = None
    reserved_windows: ReservedWindows | None = None
    warm_up: str | None = None
    compiling: Compiling = Compiling()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"a vendor's name must be lower-case letters, digits, '-', '_', '.', "
                f"got {self.name!r}"
            )
        for key, value in (
            ("vendor", self.vendor),
            ("errors", self.errors),
            ("program_check", self.program_check or "module:name"),
            ("warm_up", self.warm_up or "module:name"),
        ):
            if not isinstance(value, str) or not _TARGET.fullmatch(value):
                raise ValueError(f"{self.name}: {key} must be 'module:name', got {value!r}")
        unknown = [kind for kind in self.programs if kind not in NAMES]
        if not self.programs or unknown:
            raise ValueError(
                f"{self.name}: programs must name some of {', '.join(NAMES)}, "
                f"got {list(self.programs)!r}"
            )
        merged = self.merged_tasks
        if merged is not None and not isinstance(merged, Limits) and not callable(merged):
            raise ValueError(
                f"{self.name}: merged_tasks must be a merged_tasks.Limits or a function of "
                f"a device's id, got {merged!r}"
            )
        if not isinstance(self.compiling, Compiling):
            raise ValueError(f"{self.name}: compiling must be a Compiling, got {self.compiling!r}")
        windows = self.reserved_windows
        if windows is not None and not isinstance(windows, ReservedWindows):
            raise ValueError(
                f"{self.name}: reserved_windows must be a ReservedWindows, got {windows!r}"
            )

    def load(self) -> Any:
        """The vendor's class (its module imported now: it may import the SDK)."""
        return load(self.vendor)

    def translate(self, exc: BaseException, *, vendor: str, operation: str, subject: str) -> Any:
        """``exc``, raised by ``operation`` on ``subject``, as a ``VendorError``."""
        mapping = load(self.errors)
        return mapping(exc, vendor=vendor, operation=operation, subject=subject)

    def region_of(self, device_id: str) -> str | None:
        """The region a catalog device's ``id`` names (ValueError: not one of its ids)."""
        return self.id_region(device_id) if self.id_region is not None else None

    def kind_reason(self, kind: str) -> str | None:
        """Why this vendor's devices cannot run a program of ``kind``, or None."""
        return kind_reason(self.name, self.programs, kind)

    def program_reason(self, qubits: int, text: str | None) -> str | None:
        """Why a device of this vendor with ``qubits`` qubits (atoms) cannot run ``text``,
        or None: its kind first, then the vendor's own check."""
        reason = self.kind_reason(kind_of(text))
        if reason is not None or text is None or self.program_check is None:
            return reason
        check: Callable[[str, int], str | None] = load(self.program_check)
        return check(text, qubits)

    def merge_limits(self, device_id: str) -> Limits | None:
        """What one merged task on its QPU ``device_id`` may hold (None: it takes none)."""
        merged = self.merged_tasks
        return merged(device_id) if callable(merged) else merged

    def windows_on(self, device_id: str) -> ReservedWindows | None:
        """How its QPU ``device_id`` is reserved (None: it cannot be)."""
        windows = self.reserved_windows
        return windows if windows is not None and windows.covers(device_id) else None

    def holds_credential(self, variable: str) -> bool:
        """Whether the environment variable ``variable`` holds one of its secrets."""
        return variable in self.credentials or variable.endswith(self.credential_suffixes)


@dataclass(frozen=True)
class Registry:
    """The vendors found, in the order users read them (rank, then name), and why any
    vendor that was offered could not be taken."""

    descriptors: tuple[VendorDescriptor, ...] = ()
    problems: tuple[str, ...] = ()
    # Read on every request parsed: kept, not rebuilt.
    _by_name: dict[str, VendorDescriptor] = field(init=False, repr=False, compare=False)
    _names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {d.name: d for d in self.descriptors})
        object.__setattr__(self, "_names", tuple(self._by_name))

    def __iter__(self) -> Iterator[VendorDescriptor]:
        return iter(self.descriptors)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> tuple[str, ...]:
        return self._names

    def get(self, name: object) -> VendorDescriptor | None:
        return self._by_name.get(name) if isinstance(name, str) else None

    def problem(self, name: str) -> str | None:
        """Why a vendor called ``name`` was offered and left out, or None."""
        return next((p for p in self.problems if p.startswith(f"{name}: ")), None)

    def credentials(self, names: Iterable[object]) -> list[str]:
        """The ``names`` (environment variables) that hold some vendor's secrets, sorted."""
        return sorted(
            name
            for name in names
            if isinstance(name, str) and any(d.holds_credential(name) for d in self.descriptors)
        )


_lock = threading.RLock()  # find() loads faces through load(), under the same lock
_found: Registry | None = None
_loaded: dict[str, Any] = {}


def registry() -> Registry:
    """The vendors of this process, found on first use."""
    global _found
    found = _found
    if found is not None:
        return found
    with _lock:
        if _found is None:
            _found = find()
        return _found


def refresh() -> Registry:
    """Find the vendors again (one was installed while the process runs)."""
    global _found
    with _lock:
        _loaded.clear()
        _found = find()
        return _found


def vendor_names() -> tuple[str, ...]:
    """Every vendor's name, in the order users read them."""
    return registry().names()


def load(target: str) -> Any:
    """What ``module:attribute`` names, its module imported once."""
    with _lock:
        if target in _loaded:
            return _loaded[target]
    module, _, attribute = target.partition(":")
    value = getattr(_import(module), attribute)
    with _lock:
        return _loaded.setdefault(target, value)


def find(path: Iterable[str] | None = None) -> Registry:
    """The vendors in the ``flux_quantum/vendors`` folder, then those of the entry points
    in ``path`` (default: ``sys.path``), and in the folder holding ``flux_quantum``."""
    found: dict[str, VendorDescriptor] = {}
    problems: list[str] = []

    def admit(origin: str, offered: Callable[[], object], name: str | None = None) -> None:
        """Take what ``offered()`` gives (``name``: the name it was offered under)."""
        where = f"{name}: {origin}" if name else origin
        try:
            descriptor = offered()
        except Exception as exc:  # a broken vendor must never hide the others
            problems.append(f"{where} cannot be loaded ({type(exc).__name__}: {exc})")
            return
        if not isinstance(descriptor, VendorDescriptor):
            problems.append(f"{where} is not a VendorDescriptor")
        elif name is not None and descriptor.name != name:
            problems.append(f"{where} describes a vendor called {descriptor.name!r}")
        elif descriptor.name in found:
            problems.append(f"{descriptor.name}: {origin} is left out: the name is taken")
        else:
            found[descriptor.name] = descriptor

    for info in pkgutil.iter_modules([str(_PACKAGE / "vendors")]):
        if info.ispkg:
            module = f"{_ROOT}.vendors.{info.name}"
            admit(module, functools.partial(_face, module))
    search = [*(sys.path if path is None else path), str(_PACKAGE.parent)]
    for entry in _entry_points(list(dict.fromkeys(search))):
        admit(f"entry point {entry.value}", functools.partial(load, entry.value), entry.name)
    ordered = sorted(found.values(), key=lambda d: (d.rank, d.name))
    return Registry(tuple(ordered), tuple(problems))


def _face(module: str) -> object:
    """What a vendor package of flux-quantum's own exports."""
    return getattr(_import(module), FACE, None)


def _entry_points(path: list[str]) -> list[importlib.metadata.EntryPoint]:
    """The group's entry points of every distribution in ``path``, each once."""
    import importlib.metadata  # costs a tenth of a second: only when vendors are looked for

    seen: set[tuple[str, str]] = set()
    entries = []
    for distribution in importlib.metadata.distributions(path=path):
        for entry in distribution.entry_points:
            if entry.group == GROUP and (entry.name, entry.value) not in seen:
                seen.add((entry.name, entry.value))
                entries.append(entry)
    return entries


def _import(name: str) -> ModuleType:
    """The module ``name``: imported, or, when its top package is not on ``sys.path`` but
    beside ``flux_quantum`` (Flux's Python running the CLI plugin), loaded from there by
    path without adding anything to ``sys.path``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.split(".")[0]
        if exc.name != top or top in sys.modules:
            raise
        spec = importlib.machinery.PathFinder.find_spec(top, [str(_PACKAGE.parent)])
        if spec is None or spec.loader is None:
            raise
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[top]
        raise
    return importlib.import_module(name)
