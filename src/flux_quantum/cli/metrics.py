"""``flux quantum metrics``: where the monitoring files shipped with the package are.

``rules`` prints the path of the Prometheus alerting rules (``rule_files:`` in a site's
prometheus.yml, ``promtool check rules``); ``dashboard`` the Grafana dashboard's. What
the metrics are and how to turn them on: docs/monitoring.md. This module only prints.
"""

from __future__ import annotations

import argparse


def cmd_rules(args: argparse.Namespace) -> int:
    from flux_quantum.metrics import rules_path

    print(rules_path())
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from flux_quantum.metrics import dashboard_path

    print(dashboard_path())
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "metrics",
        help="print the paths of the shipped Prometheus rules and Grafana dashboard",
        description="The handler service's metrics ([quantum.metrics]): the files shipped "
        "with flux-quantum for a site's Prometheus and Grafana.",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    p = verbs.add_parser("rules", help="print the path of the Prometheus alerting rules")
    p.set_defaults(func=cmd_rules)
    p = verbs.add_parser("dashboard", help="print the path of the Grafana dashboard JSON")
    p.set_defaults(func=cmd_dashboard)
