"""The ``qpu`` request: the one parser of ``attributes.system.qpu`` and its record.

Every part of flux-quantum that reads what a user asked for (the ingest validator, the
handlers, the policy, the CLI and the tests) goes through :func:`parse_request` and gets
a :class:`QpuRequest`; a second parser anywhere else is a bug. This module is imported
inside Flux's own Python by the ingest validator and by the CLI plugin of ``flux submit``
(``flux_quantum/cliplugin/qpu.py``), so it must stay standard-library only
(no yaml, no third-party or ``flux`` imports), must never do I/O, never look at the
catalog and never block: it checks the shape of a request, not whether the device exists.
The vendors it knows are the registry's (``flux_quantum.protocol.vendors``, which reads the
vendor packages once, on first use).
Every rejection is one short sentence naming the field as the user wrote it, what is
accepted and what was given, because Flux shows it verbatim after ``flux submit``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.jobspec import RELEASE_ATTRIBUTES
from flux_quantum.protocol.vendors import registry, vendor_names

POLICIES: tuple[str, ...] = ("explicit", "min-cost", "min-queue", "min-wait", "max-fidelity")
DEVICE_CLASSES: tuple[str, ...] = ("qpu", "simulator")
FAILOVERS: tuple[str, ...] = ("fail", "next", "simulator")
SESSIONS: tuple[str, ...] = ("dedicated", "batch")
ANY = "any"
RELEASE_RUNNING = "running"
RELEASE_PREDICT = "predict"
RELEASE_DONE = "done"

DEFAULT_SHOTS = 1000
MAX_SHOTS = 100_000
DEFAULT_RELEASE_AT = RELEASE_DONE
DEFAULT_FAILOVER = "fail"
# qpu.reservation=none: the policy never routes the job into a reserved window.
NO_RESERVATION = "none"
# What happens to a job whose window ended before its task ran (default: the window's on_end).
RESERVATION_ENDS: tuple[str, ...] = ("on-demand", "fail")
# qpu.merge: whether the job's programs may share one vendor task with other jobs'
# (where the site merges tasks, ``[quantum.merge]``); unset means yes.
MERGE_CHOICES: tuple[str, ...] = ("yes", "no")

# Table keys in the order they are documented and reported; "class" is the user's
# spelling of QpuRequest.device_class (``class`` is a Python keyword).
TABLE_KEYS: tuple[str, ...] = (
    "device",
    "vendor",
    "policy",
    "shots",
    "program",
    "release_at",
    "max_wait",
    "max_cost",
    "min_qubits",
    "min_fidelity",
    "class",
    "failover",
    "group",
    "session",
    "account",
    "loop",
    "reservation",
    "reservation_end",
    "merge",
)

# Who pays for the task: the site's accounts (the system instance's handler service
# handles the job) or the job's user's own (the user's own handler service does).
ACCOUNTS: tuple[str, ...] = ("site", "user")
DEFAULT_ACCOUNT = "site"

# Written into attributes.system by flux-quantum at release (``protocol.py``); a user
# who set them could point a consumer at somebody else's task, or make the plugin take
# the job for released after a restart, so they are refused at submit. Every other
# ``qpu_*`` key of attributes.system is kept for flux-quantum too (``qpu_shots`` is a
# typo of ``qpu.shots`` that Flux would otherwise store without a word).
RESERVED_ATTRIBUTES: tuple[str, ...] = RELEASE_ATTRIBUTES
RESERVED_PREFIX = "qpu_"

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}", re.ASCII)
_NAME_RULE = "lower-case letters, digits, '-', '_', '.' (at most 64, first a letter or digit)"
_TARGET_FORMS = "'any', DEVICE, VENDOR:DEVICE or VENDOR:any"
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?", re.ASCII)
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_PATH = 4096
_SHOWN_MAX = 40


class RequestError(FluxQuantumError, ValueError):
    """A ``qpu`` request a user got wrong; ``field`` is the key as the user wrote it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _shown(value: object) -> str:
    """A user's value for a message: short, one line, spelled as JSON gave it to us."""
    if isinstance(value, str):
        text = repr(value)
    elif _is_int(value) and abs(value) > 10**30:
        # str() of a huge int is slow, and refused past 4300 digits.
        text = f"an integer of {value.bit_length()} bits"
    else:
        try:
            # JSON spelling (true, null, NaN, lists) because that is what --setattr parsed.
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = repr(value)
    if len(text) > _SHOWN_MAX:
        text = text[: _SHOWN_MAX - 4] + "..." + text[-1]
    return text


def _error(field: str, accepted: str, value: object) -> RequestError:
    return RequestError(field, f"{field} must be {accepted}, got {_shown(value)}")


def _is_int(value: object) -> TypeGuard[int]:
    # JSON true must not pass as 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(value: object) -> float | None:
    """A finite float from a JSON number, else None (bool, NaN, Infinity, 1e400 refused)."""
    if not (_is_int(value) or isinstance(value, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _is_name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def parse_duration(value: object, field: str = "qpu.max_wait") -> float:
    """Seconds > 0 from a number or a Flux Standard Duration string ("90s", "1.5d")."""
    seconds = _as_float(value)
    if isinstance(value, str) and (match := _DURATION.fullmatch(value)):
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or ""]
    if seconds is None or not (math.isfinite(seconds) and seconds > 0):
        raise _error(field, "a duration > 0 such as 90, 90s, 30m, 2h or 1.5d", value)
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact Flux Standard Duration for ``seconds`` (5400 -> "90m")."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _check_choice(field: str, value: object, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    raise _error(field, "one of " + ", ".join(choices), value)


def _check_name(field: str, value: object, what: str) -> str:
    if _is_name(value):
        return value
    raise _error(field, f"{what} with {_NAME_RULE}", value)


def _check_vendor(value: object) -> str:
    try:
        return _check_choice("qpu.vendor", value, vendor_names())
    except RequestError as exc:
        raise _why_missing(exc, value) from None


def _why_missing(error: RequestError, vendor: object) -> RequestError:
    """``error`` (an unknown vendor), with why that vendor is missing if it was offered
    and could not be loaded (a broken install says so where its user looks)."""
    problem = registry().problem(vendor) if isinstance(vendor, str) else None
    return RequestError(error.field, f"{error}; {problem}") if problem else error


def _check_policy(value: object) -> str:
    return _check_choice("qpu.policy", value, POLICIES)


def _check_shots(value: object) -> int:
    if _is_int(value) and 1 <= value <= MAX_SHOTS:
        return value
    raise _error("qpu.shots", f"an integer from 1 to {MAX_SHOTS}", value)


def _is_path(item: object) -> TypeGuard[str]:
    return (
        isinstance(item, str)
        and 0 < len(item) <= _MAX_PATH
        and item.isprintable()
        # "[a.qasm,b.qasm]" is a list that --setattr could not parse as JSON.
        and not item.startswith("[")
    )


def _check_program(value: object) -> tuple[str, ...]:
    if _is_path(value):
        return (value,)
    if isinstance(value, list | tuple) and value and all(_is_path(item) for item in value):
        return tuple(value)
    raise _error(
        "qpu.program", 'a file path or a JSON list of file paths like ["a.qasm","b.qasm"]', value
    )


def _check_release_at(value: object) -> int | str:
    if value in (RELEASE_RUNNING, RELEASE_PREDICT, RELEASE_DONE):
        return value
    if _is_int(value) and value >= 0:
        return value
    accepted = (
        f"a queue position >= 0, '{RELEASE_RUNNING}', '{RELEASE_PREDICT}' or '{RELEASE_DONE}'"
    )
    raise _error("qpu.release_at", accepted, value)


def _check_max_wait(value: object) -> float:
    return parse_duration(value, "qpu.max_wait")


def _check_max_cost(value: object) -> float:
    number = _as_float(value)
    if number is not None and number >= 0:
        return number
    raise _error("qpu.max_cost", "a number of US dollars >= 0", value)


def _check_min_qubits(value: object) -> int:
    if _is_int(value) and value >= 1:
        return value
    raise _error("qpu.min_qubits", "an integer >= 1", value)


def _check_min_fidelity(value: object) -> float:
    number = _as_float(value)
    if number is not None and 0 < number <= 1:
        return number
    raise _error("qpu.min_fidelity", "a probability > 0 and <= 1", value)


def _check_class(value: object) -> str:
    return _check_choice("qpu.class", value, DEVICE_CLASSES)


def _check_failover(value: object) -> str:
    return _check_choice("qpu.failover", value, FAILOVERS)


def _check_group(value: object) -> str:
    return _check_name("qpu.group", value, "a name")


def _check_session(value: object) -> str:
    return _check_choice("qpu.session", value, SESSIONS)


def _check_account(value: object) -> str:
    return _check_choice("qpu.account", value, ACCOUNTS)


def _check_loop(value: object) -> str:
    return _check_name("qpu.loop", value, "a loop name")


def _check_reservation(value: object) -> str:
    # A window's name (``[[quantum.reservations]]``), or "none": never route into one.
    return _check_name("qpu.reservation", value, f"'{NO_RESERVATION}' or a reservation name")


def _check_reservation_end(value: object) -> str:
    return _check_choice("qpu.reservation_end", value, RESERVATION_ENDS)


def _check_merge(value: object) -> str:
    return _check_choice("qpu.merge", value, MERGE_CHOICES)


# Table key -> (QpuRequest field, checker). "device" is parsed apart: it may carry a vendor.
_TABLE_FIELDS: dict[str, tuple[str, Callable[[object], object]]] = {
    "vendor": ("vendor", _check_vendor),
    "policy": ("policy", _check_policy),
    "shots": ("shots", _check_shots),
    "program": ("program", _check_program),
    "release_at": ("release_at", _check_release_at),
    "max_wait": ("max_wait", _check_max_wait),
    "max_cost": ("max_cost", _check_max_cost),
    "min_qubits": ("min_qubits", _check_min_qubits),
    "min_fidelity": ("min_fidelity", _check_min_fidelity),
    "class": ("device_class", _check_class),
    "failover": ("failover", _check_failover),
    "group": ("group", _check_group),
    "session": ("session", _check_session),
    "account": ("account", _check_account),
    "loop": ("loop", _check_loop),
    "reservation": ("reservation", _check_reservation),
    "reservation_end": ("reservation_end", _check_reservation_end),
    "merge": ("merge", _check_merge),
}


def _parse_target(value: object, field: str) -> tuple[str | None, str | None]:
    """(vendor, device) from 'any', DEVICE, VENDOR:DEVICE or VENDOR:any."""
    if not isinstance(value, str):
        raise _error(field, _TARGET_FORMS, value)
    vendor, sep, device = value.rpartition(":")
    if sep and vendor not in (vendors := vendor_names()):
        if not vendor or ":" in vendor:
            raise _error(field, _TARGET_FORMS, value)
        accepted = "VENDOR:DEVICE with a VENDOR from " + ", ".join(vendors)
        raise _why_missing(_error(field, accepted, value), vendor)
    if device == ANY:
        return (vendor or None, None)
    if not device:
        raise _error(field, _TARGET_FORMS, value)
    if not _is_name(device):
        raise _error(field, f"'any' or a device named with {_NAME_RULE}", value)
    return (vendor or None, device)


@dataclass(frozen=True)
class QpuRequest:
    """What a job asked for in ``attributes.system.qpu``, checked and in canonical form.

    Construct it with :func:`parse_request`; the constructor checks and normalizes the
    same way (``program`` may be one path, ``max_wait`` a duration string, ``policy``
    left empty for its default), so an invalid request cannot exist.
    """

    device: str | None = None
    vendor: str | None = None
    policy: str = ""
    shots: int = DEFAULT_SHOTS
    program: tuple[str, ...] = ()
    release_at: int | str = DEFAULT_RELEASE_AT
    max_wait: float | None = None
    max_cost: float | None = None
    min_qubits: int | None = None
    min_fidelity: float | None = None
    device_class: str | None = None
    failover: str = DEFAULT_FAILOVER
    group: str | None = None
    session: str | None = None
    account: str = DEFAULT_ACCOUNT
    # The variational loop this job is a step of (``flux quantum loop submit`` sets it):
    # with ``session``, the loop's steps share one vendor session.
    loop: str | None = None
    # A reserved window by name (``flux quantum reservations``), or "none"; unset: the
    # site's policy may route the job into a window.
    reservation: str | None = None
    reservation_end: str | None = None
    # "no": the job's programs never share a vendor task with other jobs' (None: they
    # may, where the site merges tasks).
    merge: str | None = None

    def __post_init__(self) -> None:
        # Same checks as the table form, so code that builds a request by hand (the
        # policy, tests) cannot make one parse_request would refuse.
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if self.device is not None:
            _check_name("qpu.device", self.device, "a device name")
        if self.vendor is not None:
            _check_vendor(self.vendor)
        put("policy", _check_policy(self.policy or ("explicit" if self.device else "min-wait")))
        if self.device is not None and self.policy != "explicit":
            raise _error("qpu.policy", "'explicit' when qpu.device names a device", self.policy)
        if self.device is None and self.policy == "explicit":
            raise _error(
                "qpu.policy",
                "min-cost, min-queue, min-wait or max-fidelity when no device is named",
                "explicit",
            )
        put("shots", _check_shots(self.shots))
        put("program", _check_program(self.program) if self.program != () else ())
        put("release_at", _check_release_at(self.release_at))
        if self.max_wait is not None:
            put("max_wait", _check_max_wait(self.max_wait))
        if self.max_cost is not None:
            put("max_cost", _check_max_cost(self.max_cost))
        if self.min_qubits is not None:
            _check_min_qubits(self.min_qubits)
        if self.min_fidelity is not None:
            put("min_fidelity", _check_min_fidelity(self.min_fidelity))
        if self.device_class is not None:
            _check_class(self.device_class)
        _check_failover(self.failover)
        if self.group is not None:
            _check_group(self.group)
        if self.session is not None:
            _check_session(self.session)
        _check_account(self.account)
        if self.loop is not None:
            _check_loop(self.loop)
        if self.reservation is not None:
            _check_reservation(self.reservation)
        if self.reservation_end is not None:
            _check_reservation_end(self.reservation_end)
        if self.merge is not None:
            _check_merge(self.merge)

    @property
    def named_reservation(self) -> str | None:
        """The window the job asked for by name (None: none, or ``none``)."""
        return None if self.reservation in (None, NO_RESERVATION) else self.reservation

    @property
    def target(self) -> str:
        """The device part in short form: 'any', 'sv1', 'braket:sv1' or 'braket:any'."""
        device = self.device or ANY
        return f"{self.vendor}:{device}" if self.vendor else device

    def to_attr(self) -> dict[str, object]:
        """Canonical table form; ``parse_request(r.to_attr()) == r`` always holds."""
        attr: dict[str, object] = {}
        if self.device is not None:
            attr["device"] = self.device
        if self.vendor is not None:
            attr["vendor"] = self.vendor
        attr["policy"] = self.policy
        attr["shots"] = self.shots
        if self.program:
            attr["program"] = list(self.program)
        attr["release_at"] = self.release_at
        optional = {
            "max_wait": self.max_wait,
            "max_cost": self.max_cost,
            "min_qubits": self.min_qubits,
            "min_fidelity": self.min_fidelity,
            "class": self.device_class,
        }
        attr.update({key: value for key, value in optional.items() if value is not None})
        attr["failover"] = self.failover
        if self.group is not None:
            attr["group"] = self.group
        if self.session is not None:
            attr["session"] = self.session
        if self.account != DEFAULT_ACCOUNT:
            attr["account"] = self.account
        if self.loop is not None:
            attr["loop"] = self.loop
        if self.reservation is not None:
            attr["reservation"] = self.reservation
        if self.reservation_end is not None:
            attr["reservation_end"] = self.reservation_end
        if self.merge is not None:
            attr["merge"] = self.merge
        return attr

    def describe(self) -> str:
        """One compact line for listings, e.g. 'braket:sv1 shots=1000 release_at=1'."""
        parts = [self.target]
        if self.policy != "explicit":
            parts.append(f"policy={self.policy}")
        parts += [f"shots={self.shots}", f"release_at={self.release_at}"]
        if self.device_class is not None:
            parts.append(f"class={self.device_class}")
        if self.min_qubits is not None:
            parts.append(f"min_qubits={self.min_qubits}")
        if self.min_fidelity is not None:
            parts.append(f"min_fidelity={self.min_fidelity:g}")
        if self.max_cost is not None:
            parts.append(f"max_cost={self.max_cost:g}")
        if self.max_wait is not None:
            parts.append(f"max_wait={format_duration(self.max_wait)}")
        if self.failover != DEFAULT_FAILOVER:
            parts.append(f"failover={self.failover}")
        if self.group is not None:
            parts.append(f"group={self.group}")
        if self.session is not None:
            parts.append(f"session={self.session}")
        if self.account != DEFAULT_ACCOUNT:
            parts.append(f"account={self.account}")
        if self.loop is not None:
            parts.append(f"loop={self.loop}")
        if self.reservation is not None:
            parts.append(f"reservation={self.reservation}")
        if self.reservation_end is not None:
            parts.append(f"reservation_end={self.reservation_end}")
        if len(self.program) == 1:
            parts.append(f"program={self.program[0]}")
        elif self.program:
            parts.append(f"programs={len(self.program)}")
        return " ".join(parts)


def parse_request(value: object) -> QpuRequest:
    """Parse ``attributes.system.qpu``: a short-form string or a table (dict).

    Raises RequestError with a one-sentence message naming the field.
    """
    if isinstance(value, str):
        vendor, device = _parse_target(value, "qpu")
        return QpuRequest(device=device, vendor=vendor)
    if not isinstance(value, Mapping):
        forms = "'any', DEVICE, VENDOR:DEVICE, VENDOR:any or a table of qpu.KEY values"
        raise _error("qpu", forms, value)

    unknown = sorted(str(key) for key in value if key not in TABLE_KEYS)
    if unknown:
        key = _shown(unknown[0])[1:-1]
        if len(key) > 25:  # the message lists every key: keep it one short line
            key = key[:22] + "..."
        raise RequestError(
            f"qpu.{key}", f"qpu.{key} is unknown; the keys are {', '.join(TABLE_KEYS)}"
        )
    fields: dict[str, Any] = {}  # each key's own type, checked by its _TABLE_FIELDS check
    if "device" in value:
        fields["vendor"], fields["device"] = _parse_target(value["device"], "qpu.device")
    # Checked in TABLE_KEYS order so the first error reported does not depend on the
    # order the user gave the keys in.
    for key, (name, check) in _TABLE_FIELDS.items():
        if key in value:
            checked = check(value[key])
            if name == "vendor" and fields.get("vendor") not in (None, checked):
                accepted = f"'{fields['vendor']}' as in qpu.device {_shown(value['device'])}"
                raise _error("qpu.vendor", accepted, checked)
            fields[name] = checked
    return QpuRequest(**fields)


def check_jobspec_attributes(system: Mapping[str, object]) -> QpuRequest | None:
    """Submit-time check of a jobspec's ``attributes.system``, used by the ingest validator
    and, before the job is sent, by the CLI plugin of ``flux submit``.

    Refuses the attributes flux-quantum writes at release (and any other ``qpu_*`` key),
    then parses ``qpu``. Returns the parsed request, or None for a job that did not ask
    for a QPU.
    """
    for key in RESERVED_ATTRIBUTES:
        if key in system:
            raise RequestError(
                key,
                f"attributes.system.{key} is set by flux-quantum at release"
                " and may not be given at submit",
            )
    reserved = sorted(
        key for key in system if isinstance(key, str) and key.startswith(RESERVED_PREFIX)
    )
    if reserved:
        key = reserved[0]
        shown = _shown(key)[1:-1]
        rest = key[len(RESERVED_PREFIX) :]
        hint = f" (did you mean qpu.{rest}?)" if rest in TABLE_KEYS else ""
        raise RequestError(
            key,
            f"attributes.system.{shown} is reserved for flux-quantum"
            f" and may not be given at submit{hint}",
        )
    if "qpu" not in system:
        return None
    return parse_request(system["qpu"])


# Vendor credentials a user may have exported in the shell they submit from. Flux copies
# the submitter's environment into the jobspec (attributes.system.environment), which
# the KVS keeps and the instance owner and admins can read: a QPU job carrying one is
# refused at submit, so that the credential never enters the instance. Which variables
# hold a vendor's secrets is the vendor's descriptor's (``credentials``).


def credential_variables(system: Mapping[str, object]) -> list[str]:
    """The names of vendor credentials in a jobspec's ``attributes.system.environment``."""
    environment = system.get("environment")
    if not isinstance(environment, Mapping):
        return []
    return registry().credentials(environment)


def credential_refusal(names: list[str]) -> str:
    """The one sentence a user sees when their QPU job carries credentials."""
    unset = " ".join(f"--env=-{name}" for name in names)
    return (
        f"qpu: the job's environment holds {', '.join(names)}, which Flux would store in "
        f"the jobspec for the instance's owner to read; submit with {unset} (the job can "
        "still read your credentials files)"
    )
