"""The handler service's metrics for a site's operators: Prometheus, alerts, a dashboard.

Off by default; the instance's ``[quantum.metrics]`` table turns them on
(``docs/monitoring.md``). Where each concern lives:

=====================  ============================================================
``config.py``          ``MetricsConfig``: the ``[quantum.metrics]`` table, checked
``service_meters.py``  ``ServiceMeters``: the service's hooks, its snapshots published
``snapshot.py``        ``ServiceSnapshot``: the service's state at one moment (reactor)
``vendor_calls.py``    ``VendorCalls``: vendor calls timed and counted, reachability
``spend.py``           ``SpendReader``: the ledger's spend by bank and device, read-only
``collector.py``       ``ServiceCollector``: the metric families read at scrape time
``exporter.py``        ``MetricsExporter``: the registry, the HTTP server, the textfile
``alerts.yml``         the Prometheus alerting rules shipped with the package
``dashboard.json``     a Grafana dashboard built from the same queries
=====================  ============================================================

The service imports this package only when the table is there: without it no metrics
library is loaded and every hook (``flux_quantum.service.meters.NoMeters``) does nothing.
"""

from __future__ import annotations

from pathlib import Path

from flux_quantum.metrics.config import MetricsConfig, MetricsConfigError
from flux_quantum.metrics.exporter import MetricsExporter
from flux_quantum.metrics.service_meters import ServiceMeters
from flux_quantum.metrics.snapshot import ServiceSnapshot

HERE = Path(__file__).resolve().parent


def rules_path() -> Path:
    """The alerting rules file shipped with the package (``promtool check rules``)."""
    return HERE / "alerts.yml"


def dashboard_path() -> Path:
    """The Grafana dashboard shipped with the package."""
    return HERE / "dashboard.json"


__all__ = [
    "MetricsConfig",
    "MetricsConfigError",
    "MetricsExporter",
    "ServiceMeters",
    "ServiceSnapshot",
    "dashboard_path",
    "rules_path",
]
