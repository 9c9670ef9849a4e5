"""Flux tier: a real Prometheus scrapes a real instance's handler service.

Debian's ``prometheus`` server, started here on a loopback port with a generated
configuration, a temporary storage directory, 1 s scrape and evaluation intervals and
the alerting rules shipped with the package, scrapes the service's ``[quantum.metrics]``
endpoint. PromQL through its HTTP API returns what the instance does while jobs are
held, released and failed; the vendor unreachable (the emulator stopped) fires
``FluxQpuVendorUnreachable``, which resolves once the emulator answers again; every
query of the shipped Grafana dashboard evaluates (with ``FLUX_QUANTUM_PANELS=FILE`` their
data over the run is written there, for ``bench/monitoring_panels.py``). Each wait is a
condition with a deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import monitoring_tools
import pytest
from monitored import Monitored, free_port, until

from flux_quantum.metrics import dashboard_path, rules_path

# Where to write the dashboard panels' data over the run (range queries), when set.
PANELS_ENV = "FLUX_QUANTUM_PANELS"

pytestmark = [
    pytest.mark.flux,
    pytest.mark.skipif(
        monitoring_tools.missing("prometheus") is not None,
        reason=str(monitoring_tools.missing("prometheus")),
    ),
]


class Prometheus:
    """One Prometheus server scraping ``target`` (host:port), killed at the end."""

    def __init__(self, workdir: Path, target: str) -> None:
        self.port = free_port()
        self.workdir = workdir
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  evaluation_interval: 1s\n"
            "rule_files:\n"
            f"  - {rules_path()}\n"
            "scrape_configs:\n"
            "  - job_name: flux-quantum\n"
            "    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                str(monitoring_tools.path("prometheus")),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        until(self.ready, timeout=60)

    def _get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as rsp:
            return json.loads(rsp.read()) if path.startswith("/api") else rsp.read()

    def ready(self) -> bool:
        assert self.proc.poll() is None, (self.workdir / "prometheus.log").read_text()[-2000:]
        try:
            self._get("/-/ready")
            return True
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = self._get("/api/v1/query", query=promql)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The single value of an instant query (None: no series)."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def equals(self, promql: str, expected: float) -> bool:
        return self.value(promql) == expected

    def query_range(self, promql: str, start: float, end: float) -> list[dict[str, Any]]:
        answer = self._get(
            "/api/v1/query_range", query=promql, start=f"{start:.3f}", end=f"{end:.3f}", step="1"
        )
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        alerts = self._get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["state"] == state]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def world(tmp_path) -> Iterator[tuple[Monitored, Prometheus]]:
    monitored = Monitored(tmp_path).start()
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{monitored.metrics_port}")
    try:
        yield monitored, prometheus
    finally:
        prometheus.stop()
        status = monitored.inst.quantum("service", "status", "--json", check=False)
        print("service status:", status.stdout.strip() or status.stderr.strip())
        assert monitored.stop() == 0, monitored.inst.broker_log()


def test_prometheus_sees_jobs_held_released_failed_and_a_vendor_alert_fire_and_resolve(world):
    m, prom = world
    t_begin = time.time()
    until(lambda: prom.equals('up{job="flux-quantum"}', 1), timeout=30)
    # Two jobs held on Alpha (4 tasks ahead, 10 s each).
    held = [m.submit("q-alpha", "-N1") for _ in range(2)]
    for jobid in held:
        m.inst.wait_event(jobid, "qpu-task")
    until(lambda: prom.equals('sum(flux_qpu_held_jobs{state="track",reason="queued"})', 2))
    assert prom.value("flux_qpu_tasks_created_total") == 2
    assert prom.value('flux_qpu_device_held_jobs{device="q-alpha"}') == 2
    assert prom.value("flux_qpu_held_nodes") == 2
    until(lambda: prom.value('flux_qpu_device_queue_depth{device="q-alpha"}') is not None)
    depth = prom.value('flux_qpu_device_queue_depth{device="q-alpha"}')
    wait = prom.value('flux_qpu_device_forecast_wait_seconds{device="q-alpha"}')
    assert depth is not None and depth >= 4 and wait == depth * 10
    assert prom.value('flux_qpu_device_up{device="q-alpha"}') == 1
    assert prom.value("flux_qpu_ledger_up") == 1
    until(
        lambda: (prom.value('sum(flux_qpu_spend_reserved{device="q-alpha"})') or 0) > 0,
        timeout=30,
    )
    # A task the vendor fails: its job fails (qpu.failover=fail).
    failed = m.submit("q-faulty", release_at="done")
    m.inst.wait_event(failed, "exception", timeout=60)
    until(lambda: prom.equals("flux_qpu_jobs_failed_total", 1))
    until(lambda: prom.equals('sum(flux_qpu_tasks_ended_total{outcome="task_failed"})', 1))
    # The queue drains: both held jobs are released at the front (their tasks at
    # positions 5 and 6, 10 s each).
    m.clock.advance(50)
    for jobid in held:
        m.inst.wait_event(jobid, "qpu-release", timeout=60)
    until(lambda: prom.equals("flux_qpu_jobs_released_total", 2))
    # No job held: no series (a state nobody is in is not exported).
    until(lambda: prom.equals("sum(flux_qpu_held_jobs) or vector(0)", 0))
    assert prom.value('sum(flux_qpu_tasks_ended_total{outcome="released"})') == 2
    assert prom.value("flux_qpu_release_lag_seconds_count") == 2
    assert prom.value('flux_qpu_hold_duration_seconds_count{outcome="released"}') == 2
    assert prom.value("flux_qpu_hold_duration_seconds_count{outcome='failed'}") == 1
    # Two one-node jobs held for seconds: node- and core-seconds measured.
    node_seconds = prom.value("flux_qpu_held_node_seconds_total")
    assert node_seconds is not None and node_seconds > 0
    assert (prom.value("flux_qpu_held_core_seconds_total") or 0) >= node_seconds
    polls = prom.value('sum(flux_qpu_vendor_calls_total{operation="poll",outcome="ok"})')
    assert polls is not None and polls >= 2
    assert not prom.alerts()

    # The vendor goes away while a job waits on it: the alert fires after
    # vendor_unreachable_after (3 s here), and resolves once the vendor answers again.
    waiting = m.submit("q-slow")
    m.inst.wait_event(waiting, "qpu-task")
    m.emu.stop()
    firing = until(
        lambda: [
            a for a in prom.alerts() if a["labels"]["alertname"] == "FluxQpuVendorUnreachable"
        ],
        timeout=60,
    )
    assert firing[0]["labels"]["vendor"] == "local"
    assert firing[0]["labels"]["severity"] == "critical"
    unreachable = prom.value("flux_qpu_vendor_unreachable_seconds")
    assert unreachable is not None and unreachable > 3
    errors = prom.value('sum(flux_qpu_vendor_call_errors_total{vendor="local"})')
    assert errors is not None and errors > 0
    m.emu.start()
    until(lambda: not prom.alerts() and not prom.alerts("pending"), timeout=60)
    assert prom.value("flux_qpu_vendor_unreachable_seconds") == 0
    assert m.inst.state(waiting) in ("DEPEND", "D")

    # Every query of the shipped dashboard evaluates, and the panels this run fed show
    # data.
    dashboard = json.loads(dashboard_path().read_text())
    empty = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            if not prom.query(target["expr"]):
                empty.append(target["expr"])
    fed = [e for e in empty if "spend_settled" not in e and "release_lag" not in e]
    assert not [e for e in fed if "held_jobs" in e or "vendor_calls" in e or "queue_depth" in e]
    # The panels' data over this run, for docs/monitoring.png (bench/monitoring_panels.py).
    out = os.environ.get(PANELS_ENV)
    if out:
        end = time.time()
        panels = [
            {
                "title": panel["title"],
                "unit": panel["fieldConfig"]["defaults"]["unit"],
                "targets": [
                    {
                        "expr": t["expr"],
                        "legend": t["legendFormat"],
                        "result": prom.query_range(t["expr"], t_begin, end),
                    }
                    for t in panel["targets"]
                ],
            }
            for panel in dashboard["panels"]
        ]
        Path(out).write_text(json.dumps({"start": t_begin, "end": end, "panels": panels}))
