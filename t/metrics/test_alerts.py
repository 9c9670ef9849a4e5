"""The alerting rules shipped with the package pass ``promtool check rules``, and each
one's expression only names metrics the exporter serves (or Prometheus' own).

``promtool`` comes with Debian's ``prometheus`` package; where it is absent the check is
skipped with one loud line (``apt-get install prometheus``).
"""

from __future__ import annotations

import re
import subprocess

import monitoring_tools
import pytest
import yaml

from flux_quantum.metrics import rules_path
from flux_quantum.metrics.collector import NAMED_COUNTERS

PROMTOOL = monitoring_tools.path("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason=str(monitoring_tools.missing("promtool")))
def test_promtool_checks_the_shipped_rules():
    assert PROMTOOL is not None
    proc = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules_path())], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 5 rules found" in proc.stdout


def test_the_rules_cover_the_issues_alerts_with_metrics_the_exporter_serves():
    rules = yaml.safe_load(rules_path().read_text())["groups"][0]["rules"]
    names = {rule["alert"] for rule in rules}
    assert {
        "FluxQpuVendorUnreachable",
        "FluxQpuLedgerUnavailable",
        "FluxQpuHeldPastMaxWait",
        "FluxQpuSpendRateHigh",
    } <= names
    served = {
        "flux_qpu_vendor_unreachable_seconds",
        "flux_qpu_vendor_unreachable_limit_seconds",
        "flux_qpu_ledger_unavailable_seconds",
        "flux_qpu_ledger_unavailable_limit_seconds",
        "flux_qpu_held_jobs_past_max_wait",
        "flux_qpu_spend_settled_total",
        "flux_qpu_spend_limit_per_hour",
        "flux_qpu_metrics_snapshot_timestamp_seconds",
        *(name + "_total" for name, _ in NAMED_COUNTERS.values()),
    }
    for rule in rules:
        used = set(re.findall(r"\bflux_qpu_[a-z_]+", rule["expr"]))
        assert used and used <= served, (rule["alert"], used - served)
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
