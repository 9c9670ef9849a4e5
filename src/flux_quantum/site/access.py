"""Site access rules: which users and banks may send tasks to which QPU devices.

This module owns the ``[quantum.access]`` table of the instance configuration, its
validation and the decision "may this job use this device". It is imported by the
ingest validator, which runs in the broker's own Python: it must stay standard-library
only, never do I/O (the caller hands it the table, the user's name and the device's
vendor and class) and never block. It decides from data; it never reads the clock.

The table, first matching rule wins::

    [quantum.access]
    default = "allow"                  # or "deny": when no rule matches

    [[quantum.access.rules]]
    name = "qpu-for-physics"           # optional, quoted in refusals
    banks = ["physics"]                # who: users (names or uids) and/or banks
    classes = ["qpu"]                  # what: devices (catalog names), vendors, classes
    allow = true

    [[quantum.access.rules]]
    classes = ["qpu"]
    allow = false

A rule matches a job when every selector it has matches (a missing selector matches
everything). The bank is the job's ``attributes.system.bank``; flux-accounting fills in
a user's default bank after submit, so at submit a bank may be unknown: the decision is
then ``allowed=None`` ("depends on the bank") unless every bank gives the same answer,
and the handlers decide again on the job's current jobspec. Device facts (vendor,
class) unknown to the caller are handled the same way.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

TABLE = "quantum.access"
SELECTOR_KEYS = ("devices", "vendors", "classes")
RULE_KEYS = ("name", "users", "banks", *SELECTOR_KEYS, "allow")
TABLE_KEYS = ("default", "rules")
DEFAULTS = ("allow", "deny")


class AccessConfigError(ValueError):
    """The ``[quantum.access]`` table is invalid; the message names the key."""


@dataclass(frozen=True)
class DeviceFacts:
    """What the rules may ask of a device; None where the caller does not know."""

    name: str
    vendor: str | None = None
    device_class: str | None = None


@dataclass(frozen=True)
class DeviceSelector:
    """Which devices a rule or a quota limit is about: catalog names, vendors, classes
    (None: any). Shared with ``flux_quantum.site.quota``."""

    devices: frozenset[str] | None = None
    vendors: frozenset[str] | None = None
    classes: frozenset[str] | None = None

    @classmethod
    def parse(
        cls, entry: Mapping[str, object], where: str, error: type[ValueError]
    ) -> DeviceSelector:
        return cls(*(name_list(entry.get(key), f"{where}.{key}", error) for key in SELECTOR_KEYS))

    def match(self, device: DeviceFacts) -> bool | None:
        """True, False, or None when a fact it asks about is not known."""
        if self.devices is not None and device.name not in self.devices:
            return False
        maybe = False
        for wanted, fact in ((self.vendors, device.vendor), (self.classes, device.device_class)):
            if wanted is None:
                continue
            if fact is None:
                maybe = True
            elif fact not in wanted:
                return False
        return None if maybe else True

    def describe(self) -> str:
        """``class qpu``, ``devices forte1, garnet of vendor braket``, ``every device``."""
        parts = [
            f"{label} {', '.join(sorted(values))}"
            for label, values in (
                ("devices", self.devices),
                ("vendor", self.vendors),
                ("class", self.classes),
            )
            if values is not None
        ]
        return " of ".join(parts) if parts else "every device"


@dataclass(frozen=True)
class Requester:
    """Who asks: the job's user (uid and name, if known) and bank (None: not known yet)."""

    userid: int
    user: str | None = None
    bank: str | None = None

    def describe(self) -> str:
        who = f"user {self.user or self.userid}"
        return f"{who} (bank {self.bank})" if self.bank else who


@dataclass(frozen=True)
class Rule:
    """One ``[[quantum.access.rules]]`` entry; selectors are None when absent."""

    index: int  # 1-based, as an admin counts them in the file
    allow: bool
    name: str | None = None
    users: frozenset[str] | None = None
    banks: frozenset[str] | None = None
    what: DeviceSelector = DeviceSelector()

    @property
    def label(self) -> str:
        named = f" '{self.name}'" if self.name else ""
        return f"[quantum.access] rule {self.index}{named}"

    def who(self) -> str:
        parts = [
            f"{label} {', '.join(sorted(values))}"
            for label, values in (("users", self.users), ("banks", self.banks))
            if values is not None
        ]
        return " in ".join(parts) if parts else "everyone"

    def describe(self) -> str:
        verb = "allows" if self.allow else "denies"
        return f"{self.label} {verb} {self.what.describe()} to {self.who()}"

    def _match_requester(self, requester: Requester) -> bool | None:
        if self.users is not None and not (
            str(requester.userid) in self.users
            or (requester.user is not None and requester.user in self.users)
        ):
            return False
        if self.banks is not None:
            if requester.bank is None:
                return None
            if requester.bank not in self.banks:
                return False
        return True

    def matches(self, requester: Requester, device: DeviceFacts) -> bool | None:
        """True, False, or None when it depends on what the caller does not know."""
        who = self._match_requester(requester)
        if who is False:
            return False
        what = self.what.match(device)
        if what is False:
            return False
        return None if who is None or what is None else True


@dataclass(frozen=True)
class AccessDecision:
    """``allowed`` True/False, or None when it depends on the job's bank (or on device
    facts the caller did not have); ``rule`` decided it (None: the default);
    ``reason`` is one sentence for a refusal or an explanation."""

    allowed: bool | None
    rule: Rule | None
    reason: str


@dataclass(frozen=True)
class AccessRules:
    """The site's rules, in file order, and the default."""

    rules: tuple[Rule, ...] = ()
    default_allow: bool = True

    @classmethod
    def from_config(cls, table: object) -> AccessRules:
        """Validate ``[quantum.access]`` as ``flux config get`` returns it (None: allow all)."""
        if table is None:
            return cls()
        table = checked_table(table, f"[{TABLE}]", TABLE_KEYS, AccessConfigError)
        default = table.get("default", "allow")
        if default not in DEFAULTS:
            raise AccessConfigError(
                f'[{TABLE}] default must be "allow" or "deny", got {shown(default)}'
            )
        entries = table.get("rules", [])
        if not isinstance(entries, list):
            raise AccessConfigError(f"[{TABLE}] rules must be a list of tables")
        rules = tuple(_parse_rule(entry, index) for index, entry in enumerate(entries, start=1))
        return cls(rules=rules, default_allow=default == "allow")

    def decide(self, requester: Requester, device: DeviceFacts) -> AccessDecision:
        """May ``requester`` send tasks to ``device``?"""
        possible: list[tuple[bool, Rule | None]] = []
        for candidate in self.rules:
            match = candidate.matches(requester, device)
            if match is False:
                continue
            possible.append((candidate.allow, candidate))
            if match is True:
                break
        else:
            possible.append((self.default_allow, None))
        outcomes = {allow for allow, _ in possible}
        allow, rule = possible[-1]
        if len(outcomes) > 1:
            rule = next(r for _, r in possible if r is not None)
            return AccessDecision(
                None,
                rule,
                f"whether {requester.describe()} may use device {device.name} depends on"
                f" {_unknown(requester, device)} ({rule.describe()})",
            )
        if rule is None:
            verb = "allow" if allow else "deny"
            because = f'[{TABLE}] default = "{verb}" and no rule matches'
        else:
            because = rule.describe()
        if allow:
            reason = f"{requester.describe()} may use device {device.name}: {because}"
            return AccessDecision(True, rule, reason)
        return AccessDecision(
            False, rule, f"{requester.describe()} may not use device {device.name}: {because}"
        )

    def excluded(self, requester: Requester, devices: Iterable[DeviceFacts]) -> dict[str, str]:
        """Devices ``requester`` may not use (or may not be known to be allowed), mapped
        to the reason: the ``excluded`` argument of ``policy.select_device``."""
        refused: dict[str, str] = {}
        for device in devices:
            decision = self.decide(requester, device)
            if decision.allowed is not True:
                refused[device.name] = f"not allowed: {decision.reason}"
        return refused


def user_name(userid: int) -> str | None:
    """The login name of ``userid`` (rules may name users), None if it has none."""
    try:
        return pwd.getpwuid(userid).pw_name
    except KeyError:
        return None


def bank_of(system: Mapping[str, object]) -> str | None:
    """A job's bank from its ``attributes.system`` (None: none yet; flux-accounting
    fills in a user's default bank after submit)."""
    bank = system.get("bank")
    return str(bank) if bank not in (None, "") else None


class CatalogDevice(Protocol):
    """What ``device_facts`` reads of a catalog device (``catalog.Device``)."""

    @property
    def name(self) -> str: ...
    @property
    def vendor(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def device_class(self) -> str: ...


def device_facts(devices: Iterable[CatalogDevice]) -> dict[str, DeviceFacts]:
    """Facts of catalog devices (anything with ``name``, ``vendor``, ``id``,
    ``device_class``), by name and by vendor id, without importing the catalog module."""
    facts: dict[str, DeviceFacts] = {}
    for device in devices:
        fact = DeviceFacts(device.name, device.vendor, device.device_class)
        facts[fact.name] = fact
        facts.setdefault(device.id, fact)
    return facts


def _unknown(requester: Requester, device: DeviceFacts) -> str:
    missing = []
    if requester.bank is None:
        missing.append("the job's bank")
    if device.vendor is None or device.device_class is None:
        missing.append("the device's vendor and class")
    return " and ".join(missing) or "what is not known"


def _parse_rule(entry: object, index: int) -> Rule:
    where = f"[{TABLE}] rules[{index}]"
    entry = checked_table(entry, where, RULE_KEYS, AccessConfigError)
    allow = entry.get("allow")
    if not isinstance(allow, bool):
        raise AccessConfigError(f"{where}.allow must be true or false, got {shown(allow)}")
    return Rule(
        index=index,
        allow=allow,
        name=optional_name(entry.get("name"), f"{where}.name", AccessConfigError),
        users=name_list(entry.get("users"), f"{where}.users", AccessConfigError, numbers=True),
        banks=name_list(entry.get("banks"), f"{where}.banks", AccessConfigError),
        what=DeviceSelector.parse(entry, where, AccessConfigError),
    )


# --- table checks, shared with the site's other tables -----------------------------------------


def checked_table(
    value: object, where: str, accepted: tuple[str, ...], error: type[ValueError]
) -> Mapping[str, object]:
    """``value`` as a table with only ``accepted`` keys, else ``error`` naming ``where``."""
    if not isinstance(value, Mapping):
        raise error(f"{where} must be a table, got {shown(value)}")
    for key in value:
        if key not in accepted:
            raise error(f"{where} has an unknown key '{key}' (accepted: {', '.join(accepted)})")
    return value


def optional_name(value: object, where: str, error: type[ValueError]) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise error(f"{where} must be a non-empty string, got {shown(value)}")
    return value


def name_list(
    value: object, where: str, error: type[ValueError], numbers: bool = False
) -> frozenset[str] | None:
    """A non-empty list of names (or uids with ``numbers``) as a set; None if absent."""
    if value is None:
        return None
    accepted = (str, int) if numbers else (str,)
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, accepted) and not isinstance(v, bool) and v != "" for v in value)
    ):
        what = "names or uids" if numbers else "names"
        raise error(f"{where} must be a non-empty list of {what}, got {shown(value)}")
    return frozenset(str(v) for v in value)


def shown(value: object, width: int = 40) -> str:
    """A configured value for an error message: its repr, cut to ``width`` characters."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
