"""The backends catalog: which QPUs and simulators this site may use, and at what price.

This module owns the YAML catalog format (``etc/flux-quantum/backends.yaml``), its
validation and where the catalog is looked up. It turns the file into frozen
``Device`` records and nothing else; what each vendor accepts (its name, its settings,
the form of its device ids) is its descriptor's, read from the registry of vendors
(``flux_quantum.protocol.vendors``): it never talks to a vendor, never reads a
credential and never keeps state between calls. A bad catalog fails with one sentence
that names the file, the device and the field.

Lookup order of the catalog path (``resolve_catalog_path``):

1. an explicit path (``--catalog FILE``),
2. the environment variable ``FLUX_QUANTUM_BACKENDS``,
3. the Flux configuration key ``[quantum] backends = "path"``, read with
   ``flux config get`` only inside a Flux instance (``FLUX_URI`` set) and with a short
   timeout, so that commands stay cheap outside Flux,
4. the example shipped with flux-quantum (``etc/flux-quantum/backends.yaml``, installed
   as ``flux_quantum/data/backends.yaml``).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.vendors import registry, vendor_names

DEVICE_CLASSES = ("qpu", "simulator")
ENV_CATALOG = "FLUX_QUANTUM_BACKENDS"
FLUX_CONFIG_KEY = "quantum.backends"
DEFAULT_REGION = "us-east-1"
DEFAULT_CURRENCY = "USD"

_DEVICE_FIELDS = ("name", "vendor", "id", "class", "qubits", "region", "price", "slots")
_OPTIONAL_DEVICE_FIELDS = ("properties",)
_PRICE_FIELDS = ("per_task", "per_shot", "per_minute", "min_seconds")
# Same rule as device names in a qpu request (flux_quantum.protocol.request), so that every
# catalog device can be asked for by name.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$", re.ASCII)


class CatalogError(FluxQuantumError):
    """The catalog file is missing, unreadable or invalid; the message says where."""


@dataclass(frozen=True)
class PriceModel:
    """What one task on a device costs, in the catalog's currency (US dollars unless the
    catalog's top-level ``currency`` says otherwise; quotas and the ledger use it too).

    ``per_minute`` bills the device's run time with a minimum of ``min_seconds``
    (Braket's managed simulators: per millisecond, 3 s minimum).
    """

    per_task: float = 0.0
    per_shot: float = 0.0
    per_minute: float = 0.0
    min_seconds: float = 0.0

    def cost(self, shots: int, seconds: float | None = None) -> float:
        """Estimated price of one task of ``shots`` shots running ``seconds`` seconds.

        Without ``seconds`` the time-billed part is the minimum billed duration, so the
        estimate is a lower bound for devices billed by the minute.
        """
        billed_seconds = max(seconds or 0.0, self.min_seconds)
        return self.per_task + self.per_shot * shots + self.per_minute * billed_seconds / 60.0

    def describe(self) -> str:
        """Short human form, e.g. ``$0.30/task + $0.08/shot`` or ``$0.075/min (min 3s)``."""
        parts = []
        if self.per_task:
            parts.append(f"${_money(self.per_task)}/task")
        if self.per_shot:
            parts.append(f"${_money(self.per_shot)}/shot")
        if self.per_minute:
            minimum = f" (min {_num(self.min_seconds)}s)" if self.min_seconds else ""
            parts.append(f"${_money(self.per_minute)}/min{minimum}")
        return " + ".join(parts) if parts else "free"

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in _PRICE_FIELDS if getattr(self, name)}


@dataclass(frozen=True)
class Device:
    """One catalog entry: a QPU or simulator this site may send tasks to."""

    name: str
    vendor: str
    id: str
    device_class: str
    qubits: int
    region: str
    price: PriceModel
    slots: int = 1
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "id": self.id,
            "class": self.device_class,
            "qubits": self.qubits,
            "region": self.region,
            "price": self.price.to_dict(),
            "slots": self.slots,
            "properties": dict(self.properties),
        }


@dataclass(frozen=True)
class Catalog:
    """A validated catalog: its devices in file order and per-vendor settings."""

    path: str
    devices: tuple[Device, ...]
    vendor_settings: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    currency: str = DEFAULT_CURRENCY  # ISO 4217 code of every price, limit and ledger sum

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def names(self) -> list[str]:
        return [device.name for device in self.devices]

    def get(self, name: str) -> Device | None:
        """The device called ``name``, or whose vendor id (ARN) is ``name``."""
        for device in self.devices:
            if name in (device.name, device.id):
                return device
        return None

    def vendors(self) -> list[str]:
        """Vendors that have at least one device, in first-appearance order."""
        return list(dict.fromkeys(device.vendor for device in self.devices))

    def settings(self, vendor: str) -> Mapping[str, str]:
        return self.vendor_settings.get(vendor, MappingProxyType({}))


# --- lookup -------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogLocation:
    """Where the catalog comes from, for messages such as ``flux quantum backends -v``."""

    path: str
    source: str  # "argument", "FLUX_QUANTUM_BACKENDS", "flux config", "packaged example"


def packaged_catalog_path() -> Path:
    """The example catalog shipped with flux-quantum.

    ``etc/flux-quantum/backends.yaml`` is the one copy; the package reaches it through
    ``flux_quantum/data/backends.yaml``, a symlink in a checkout that becomes a real file
    in an installed wheel (package data), so both find it.
    """
    return (Path(__file__).resolve().parent / "data" / "backends.yaml").resolve()


def flux_config_backends(timeout: float = 2.0) -> str | None:
    """``[quantum] backends`` from the enclosing Flux instance, or None.

    Only asked inside an instance (``FLUX_URI`` set) and only if ``flux`` is on PATH;
    any failure means "not configured" because the lookup has further fallbacks.
    """
    if not os.environ.get("FLUX_URI"):
        return None
    flux = shutil.which("flux")
    if flux is None:
        return None
    try:
        proc = subprocess.run(
            [flux, "config", "get", "--quiet", "--type=string", "--default=", FLUX_CONFIG_KEY],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = proc.stdout.strip()
    return value if proc.returncode == 0 and value else None


def resolve_catalog_path(
    explicit: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flux_config: Callable[[], str | None] = flux_config_backends,
    packaged: Callable[[], Path] = packaged_catalog_path,
) -> CatalogLocation:
    """Pick the catalog path: argument > env > Flux config > packaged example."""
    env = os.environ if environ is None else environ
    if explicit:
        return CatalogLocation(os.fspath(explicit), "argument")
    if env.get(ENV_CATALOG):
        return CatalogLocation(env[ENV_CATALOG], ENV_CATALOG)
    configured = flux_config()
    if configured:
        return CatalogLocation(configured, "flux config")
    return CatalogLocation(str(packaged()), "packaged example")


def load_catalog(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flux_config: Callable[[], str | None] = flux_config_backends,
) -> Catalog:
    """Find, read and validate the catalog (see the module docstring for the order)."""
    location = resolve_catalog_path(path, environ=environ, flux_config=flux_config)
    try:
        text = Path(location.path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise CatalogError(
            f"{location.path}: cannot read catalog ({reason}; found via {location.source})"
        ) from None
    return parse_catalog(text, location.path)


# --- validation ---------------------------------------------------------------------


def parse_catalog(text: str, path: str = "backends.yaml") -> Catalog:
    """Validate catalog YAML text; ``path`` is only used in error messages."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(document, dict) or "devices" not in document:
        raise CatalogError(
            f"{path}: the top level must be a mapping with a 'devices' list, "
            f"got {_describe(document)}"
        )
    for key in document:
        if key not in ("devices", "vendors", "currency"):
            raise CatalogError(
                f"{path}: unknown top-level key {key!r} (accepted: devices, vendors, currency)"
            )
    currency = document.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise CatalogError(
            f"{path}: currency must be an ISO 4217 code such as USD or EUR,"
            f" got {_describe(currency)}"
        )
    entries = document["devices"]
    if not isinstance(entries, list) or not entries:
        raise CatalogError(f"{path}: devices must be a non-empty list, got {_describe(entries)}")

    devices: list[Device] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries, start=1):
        device = _parse_device(entry, index, path)
        if device.name in seen:
            raise CatalogError(
                f"{path}: device {device.name!r}: name is already used by device "
                f"#{seen[device.name]}"
            )
        seen[device.name] = index
        devices.append(device)
    settings = _parse_vendor_settings(document.get("vendors"), path)
    return Catalog(path=path, devices=tuple(devices), vendor_settings=settings, currency=currency)


def _parse_device(entry: Any, index: int, path: str) -> Device:
    if not isinstance(entry, dict):
        raise CatalogError(f"{path}: device #{index}: must be a mapping, got {_describe(entry)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise CatalogError(
            f"{path}: device #{index}: name must be lower-case letters, digits, '-', '_', '.' "
            f"(at most 64, starting with a letter or digit), got {_describe(name)}"
        )
    where = f"{path}: device {name!r}"

    def fail(message: str) -> CatalogError:
        return CatalogError(f"{where}: {message}")

    for key in entry:
        if key not in _DEVICE_FIELDS + _OPTIONAL_DEVICE_FIELDS:
            accepted = ", ".join(_DEVICE_FIELDS + _OPTIONAL_DEVICE_FIELDS)
            raise fail(f"unknown field {key!r} (accepted: {accepted})")
    for key in ("vendor", "id", "class", "qubits", "price"):
        if key not in entry:
            raise fail(f"{key} is required")

    vendor = entry["vendor"]
    descriptor = registry().get(vendor)
    if descriptor is None:
        names = ", ".join(vendor_names())
        raise fail(f"vendor must be one of {names}, got {_describe(vendor)}")
    device_id = entry["id"]
    if not isinstance(device_id, str) or not device_id.strip():
        raise fail(f"id must be a non-empty string, got {_describe(device_id)}")
    try:
        id_region = descriptor.region_of(device_id)  # the vendor's own form of an id
    except ValueError as exc:
        raise fail(str(exc)) from None
    device_class = entry["class"]
    if device_class not in DEVICE_CLASSES:
        raise fail(
            f"class must be one of {', '.join(DEVICE_CLASSES)}, got {_describe(device_class)}"
        )
    qubits = entry["qubits"]
    if not _is_int(qubits) or qubits < 1:
        raise fail(f"qubits must be an integer >= 1, got {_describe(qubits)}")
    region = entry.get("region", id_region or DEFAULT_REGION)
    if not isinstance(region, str) or not re.match(r"^[a-z]{2}(-[a-z0-9]+)+$", region):
        raise fail(f"region must be a region name such as us-east-1, got {_describe(region)}")
    if id_region and region != id_region:
        raise fail(f"region must match the region in its id ({id_region}), got {region!r}")
    slots = entry.get("slots", 1)
    if not _is_int(slots) or slots < 1:
        raise fail(f"slots must be an integer >= 1, got {_describe(slots)}")
    price = _parse_price(entry["price"], fail)
    properties = _parse_properties(entry.get("properties", {}), fail)
    return Device(
        name=name,
        vendor=vendor,
        id=device_id,
        device_class=device_class,
        qubits=qubits,
        region=region,
        price=price,
        slots=slots,
        properties=properties,
    )


def _parse_price(value: Any, fail: Callable[[str], CatalogError]) -> PriceModel:
    accepted = ", ".join(_PRICE_FIELDS)
    if not isinstance(value, dict) or not value:
        raise fail(f"price must be a mapping with some of {accepted}, got {_describe(value)}")
    numbers: dict[str, float] = {}
    for key, amount in value.items():
        if key not in _PRICE_FIELDS:
            raise fail(f"price: unknown field {key!r} (accepted: {accepted})")
        ok = isinstance(amount, int | float) and not isinstance(amount, bool)
        if not ok or not math.isfinite(amount) or amount < 0:
            raise fail(f"price.{key} must be a number >= 0, got {_describe(amount)}")
        numbers[key] = float(amount)
    if "min_seconds" in numbers and "per_minute" not in numbers:
        raise fail("price.min_seconds needs price.per_minute")
    return PriceModel(**numbers)


def _parse_properties(value: Any, fail: Callable[[str], CatalogError]) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict):
        raise fail(f"properties must be a mapping of names to strings, got {_describe(value)}")
    properties: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise fail(f"properties: names must be non-empty strings, got {_describe(key)}")
        # Fluxion vertex properties are strings; scalars are accepted and stringified.
        if isinstance(item, bool):
            item = "true" if item else "false"
        if not isinstance(item, str | int | float):
            raise fail(f"properties.{key} must be a string, got {_describe(item)}")
        properties[key] = str(item)
    return MappingProxyType(properties)


def _parse_vendor_settings(value: Any, path: str) -> Mapping[str, Mapping[str, str]]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict):
        raise CatalogError(f"{path}: vendors must be a mapping, got {_describe(value)}")
    result: dict[str, Mapping[str, str]] = {}
    for vendor, settings in value.items():
        descriptor = registry().get(vendor)
        if descriptor is None:
            names = ", ".join(vendor_names())
            raise CatalogError(f"{path}: vendors: unknown vendor {vendor!r} (accepted: {names})")
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            raise CatalogError(
                f"{path}: vendors.{vendor} must be a mapping, got {_describe(settings)}"
            )
        accepted = descriptor.settings
        checked: dict[str, str] = {}
        for key, item in settings.items():
            if key not in accepted:
                raise CatalogError(
                    f"{path}: vendors.{vendor}: unknown setting {key!r} "
                    f"(accepted: {', '.join(accepted)})"
                )
            if isinstance(item, int | float) and not isinstance(item, bool):
                item = str(item)  # a number of seconds (events_poll: 60), read by the vendor
            if not isinstance(item, str) or not item:
                raise CatalogError(
                    f"{path}: vendors.{vendor}.{key} must be a non-empty string, "
                    f"got {_describe(item)}"
                )
            checked[key] = item
        result[vendor] = MappingProxyType(checked)
    return MappingProxyType(result)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def _money(value: float) -> str:
    """Dollars with at least two decimals and no trailing noise: 0.30, 0.075, 0.00145."""
    text = f"{value:.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"


def _num(value: float) -> str:
    return f"{value:g}"
