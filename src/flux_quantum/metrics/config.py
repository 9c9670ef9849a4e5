"""``MetricsConfig``: the instance's ``[quantum.metrics]`` table, checked.

Metrics are off unless the table is there (and not ``enabled = false``). They go to a
``listen`` address (``"127.0.0.1:9464"``: loopback unless the site names another
address) where Prometheus scrapes them, or to a node_exporter ``textfile`` rewritten
atomically every ``interval`` seconds, or both. ``interval`` is also how often the
service publishes the snapshot its metrics are read from, and the page is rendered. The alert thresholds a site
sets here are exported as gauges the shipped rules compare with, so the rules file needs
no edit. This module only parses: it never opens a socket or a file.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PORT = 9464  # the port Prometheus' registry of exporters gives OpenTelemetry's
DEFAULT_INTERVAL = 5.0
DEFAULT_VENDOR_UNREACHABLE_AFTER = 300.0
DEFAULT_LEDGER_UNAVAILABLE_AFTER = 60.0
KEYS = (
    "enabled",
    "listen",
    "textfile",
    "interval",
    "vendor_unreachable_after",
    "ledger_unavailable_after",
    "spend_limit_per_hour",
)


class MetricsConfigError(ValueError):
    """A bad ``[quantum.metrics]`` table; the message names the key."""


@dataclass(frozen=True)
class MetricsConfig:
    """Where the metrics go, how fresh they are, and the site's alert thresholds."""

    listen: tuple[str, int] | None = None
    textfile: Path | None = None
    interval: float = DEFAULT_INTERVAL
    vendor_unreachable_after: float = DEFAULT_VENDOR_UNREACHABLE_AFTER
    ledger_unavailable_after: float = DEFAULT_LEDGER_UNAVAILABLE_AFTER
    spend_limit_per_hour: float | None = None

    @classmethod
    def from_config(cls, table: Any) -> MetricsConfig | None:
        """The table parsed, or None when metrics are off (no table, or ``enabled =
        false``). A table with neither ``listen`` nor ``textfile`` listens on
        ``127.0.0.1:9464``."""
        if table is None:
            return None
        if not isinstance(table, Mapping):
            raise MetricsConfigError("[quantum.metrics] must be a table")
        for key in table:
            if key not in KEYS:
                raise MetricsConfigError(
                    f"[quantum.metrics] has no key '{key}' (known: {', '.join(KEYS)})"
                )
        enabled = table.get("enabled", True)
        if not isinstance(enabled, bool):
            raise MetricsConfigError(
                f"[quantum.metrics] enabled must be true or false, got {enabled!r}"
            )
        if not enabled:
            return None
        listen = table.get("listen")
        textfile = table.get("textfile")
        if textfile is not None and (not isinstance(textfile, str) or not textfile.startswith("/")):
            raise MetricsConfigError(
                f"[quantum.metrics] textfile must be an absolute path, got {textfile!r}"
            )
        if listen is None and textfile is None:
            listen = f"127.0.0.1:{DEFAULT_PORT}"
        limit = table.get("spend_limit_per_hour")
        return cls(
            listen=None if listen is None else parse_listen(listen),
            textfile=None if textfile is None else Path(textfile),
            interval=_seconds(table, "interval", DEFAULT_INTERVAL),
            vendor_unreachable_after=_seconds(
                table, "vendor_unreachable_after", DEFAULT_VENDOR_UNREACHABLE_AFTER
            ),
            ledger_unavailable_after=_seconds(
                table, "ledger_unavailable_after", DEFAULT_LEDGER_UNAVAILABLE_AFTER
            ),
            spend_limit_per_hour=None if limit is None else _number(limit, "spend_limit_per_hour"),
        )


def parse_listen(value: Any) -> tuple[str, int]:
    """``"HOST:PORT"`` (an IP address; ``[::1]:PORT`` for IPv6) or a port alone (on
    loopback) -> (host, port)."""
    if isinstance(value, int) and not isinstance(value, bool):
        host, port_text = "127.0.0.1", str(value)
    elif isinstance(value, str) and ":" in value:
        host, _, port_text = value.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
    else:
        raise MetricsConfigError(
            f'[quantum.metrics] listen must be "HOST:PORT" or a port, got {value!r}'
        )
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise MetricsConfigError(
            f"[quantum.metrics] listen must name an IP address and a port, got {value!r}"
        ) from None
    if not 0 < port < 65536:
        raise MetricsConfigError(f"[quantum.metrics] listen port must be 1-65535, got {port}")
    return host, port


def _seconds(table: Mapping[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    return _number(value, key)


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MetricsConfigError(f"[quantum.metrics] {key} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise MetricsConfigError(f"[quantum.metrics] {key} must be > 0, got {value!r}")
    return float(value)
