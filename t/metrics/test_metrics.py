"""Unit tier: the handler service's metrics (``flux_quantum.metrics``) on the service's
fakes of the outside world (Flux in memory, a scripted vendor, a manual clock).

What a scrape shows is read back through prometheus-client's own parser: held jobs by
state and reason, tasks created and ended, the release lag, vendor calls and how long a
vendor has been unreachable, devices, the ledger's spend; every label value is bounded
(no job, task or user). The exporter serves it over HTTP and writes the textfile
atomically; ``[quantum.metrics]`` is parsed with one sentence per mistake; without it
the service imports no metrics library.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from service_fakes import OWNER, Clock, Harness

from flux_quantum.metrics import (
    MetricsConfig,
    MetricsConfigError,
    MetricsExporter,
    ServiceMeters,
    dashboard_path,
    rules_path,
)
from flux_quantum.metrics.collector import ServiceCollector
from flux_quantum.metrics.spend import SpendReader
from flux_quantum.protocol import events
from flux_quantum.site.ledger import Ledger, LedgerConfig
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.errors import VendorUnavailable

REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(text: bytes | str) -> Samples:
    """Every sample of an exposition, by name and labels."""
    if isinstance(text, bytes):
        text = text.decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


class Metered:
    """A service on the fakes with metrics on (interval 1 s on the manual clock)."""

    def __init__(self, config: MetricsConfig | None = None, **harness: Any) -> None:
        self.config = config or MetricsConfig(interval=1.0, vendor_unreachable_after=30.0)
        self.registry = CollectorRegistry(auto_describe=False)
        clock = Clock()
        self.meters = ServiceMeters(self.registry, self.config.interval, clock=clock)
        self.h = Harness(clock=clock, meters=self.meters, **harness)
        self.spend: SpendReader | None = None

    def with_spend(self, spend: SpendReader) -> Metered:
        self.spend = spend
        return self

    def scrape(self) -> Samples:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            _Both(self.registry, ServiceCollector(self.meters, self.config, self.spend))
        )
        return scrape(generate_latest(registry))


class _Both:
    """The meters' own metrics and the collector's, as the exporter registers them."""

    def __init__(self, registry: CollectorRegistry, collector: ServiceCollector) -> None:
        self.registry = registry
        self.collector = collector

    def collect(self) -> Any:
        yield from self.registry.collect()
        yield from self.collector.collect()


# --- [quantum.metrics] ---------------------------------------------------------------------


def test_metrics_are_off_without_the_table_and_listen_on_loopback_by_default():
    assert MetricsConfig.from_config(None) is None
    assert MetricsConfig.from_config({"enabled": False, "listen": "0.0.0.0:9464"}) is None
    config = MetricsConfig.from_config({})
    assert config is not None and config.listen == ("127.0.0.1", 9464)
    assert config.textfile is None and config.interval == 5.0
    config = MetricsConfig.from_config(
        {"textfile": "/var/lib/node_exporter/flux_quantum.prom", "interval": 15}
    )
    assert config is not None and config.listen is None
    assert config.textfile == Path("/var/lib/node_exporter/flux_quantum.prom")
    assert config.interval == 15.0
    both = MetricsConfig.from_config({"listen": "[::1]:9100", "spend_limit_per_hour": 50})
    assert both is not None and both.listen == ("::1", 9100)
    assert both.spend_limit_per_hour == 50.0


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"port": 9464}, "has no key 'port'"),
        ({"listen": "localhost:9464"}, "must name an IP address and a port"),
        ({"listen": "127.0.0.1:99999"}, "port must be 1-65535"),
        ({"listen": "9464"}, 'must be "HOST:PORT" or a port'),
        ({"textfile": "flux.prom"}, "must be an absolute path"),
        ({"interval": 0}, "interval must be > 0"),
        ({"interval": "5s"}, "interval must be a number"),
        ({"enabled": "yes"}, "enabled must be true or false"),
        ("on", "must be a table"),
    ],
)
def test_a_bad_metrics_table_is_one_sentence_naming_the_key(table, says):
    with pytest.raises(MetricsConfigError, match=says):
        MetricsConfig.from_config(table)


def test_without_the_table_the_service_imports_no_metrics_library():
    code = (
        "import sys, flux_quantum.service, flux_quantum.service.runner; "
        "assert 'prometheus_client' not in sys.modules, 'imported'; "
        "assert 'flux_quantum.metrics' not in sys.modules, 'imported'"
    )
    env_path = str(REPO / "src")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr


# --- what a scrape shows --------------------------------------------------------------------


def test_held_jobs_tasks_and_devices_then_releases_and_the_release_lag():
    m = Metered()
    h = m.h
    jobs = [h.flux.submit({"device": "local:alpha", "release_at": 1}) for _ in range(3)]
    h.until(lambda: all(events.TASK in h.flux.names(j) for j in jobs))
    h.run(3)
    s = m.scrape()
    assert value(s, "flux_qpu_held_jobs", state="track", reason="queued") == 3
    assert value(s, "flux_qpu_device_held_jobs", device="alpha") == 3
    assert value(s, "flux_qpu_held_nodes") == 3
    assert value(s, "flux_qpu_tasks_created_total") == 3
    assert value(s, "flux_qpu_jobs_adopted_total") == 3
    assert total(s, "flux_qpu_vendor_calls_total", vendor="local", operation="submit") == 3
    assert total(s, "flux_qpu_vendor_calls_total", vendor="local", operation="poll") >= 3
    assert value(s, "flux_qpu_vendor_unreachable_seconds", vendor="local") == 0
    # The device as last probed: up, its queue depth and forecast wait.
    assert value(s, "flux_qpu_device_up", device="alpha", vendor="local") == 1
    assert value(s, "flux_qpu_device_status", device="alpha", vendor="local", status="ONLINE") == 1
    assert value(s, "flux_qpu_device_status", device="alpha", vendor="local", status="OFFLINE") == 0
    depth = value(s, "flux_qpu_device_queue_depth", device="alpha", vendor="local")
    wait = value(s, "flux_qpu_device_forecast_wait_seconds", device="alpha", vendor="local")
    assert depth is not None and depth >= 3
    assert wait is not None and wait > 0
    # Node-seconds held, measured: three one-node jobs held for the snapshots' time.
    held = value(s, "flux_qpu_held_node_seconds_total")
    assert held is not None and held > 0
    h.until(lambda: all(h.state(j) == "released" for j in jobs))
    h.run(2)
    s = m.scrape()
    assert total(s, "flux_qpu_held_jobs") == 0
    assert value(s, "flux_qpu_jobs_released_total") == 3
    assert total(s, "flux_qpu_tasks_ended_total", outcome="released") == 3
    assert value(s, "flux_qpu_release_lag_seconds_count") == 3
    # The fakes release in the poll's own step: no lag on the manual clock.
    assert value(s, "flux_qpu_release_lag_seconds_bucket", le="0.005") == 3
    assert value(s, "flux_qpu_hold_duration_seconds_count", outcome="released") == 3
    grown = value(s, "flux_qpu_held_node_seconds_total")
    assert grown is not None and held is not None and grown > held
    snap_cost = value(s, "flux_qpu_metrics_snapshot_duration_seconds_count")
    assert snap_cost is not None and snap_cost >= 2


def test_a_failed_task_and_a_failed_job_are_counted_by_outcome():
    m = Metered()
    h = m.h
    job = h.flux.submit({"device": "local:alpha", "release_at": 1, "failover": "fail"})
    h.until(lambda: events.TASK in h.flux.names(job))
    task = next(iter(h.vendor.tasks.values()))
    task.failed = "calibration drifted"
    h.until(lambda: h.state(job) == "failed")
    h.run(2)
    s = m.scrape()
    assert value(s, "flux_qpu_jobs_failed_total") == 1
    assert total(s, "flux_qpu_tasks_ended_total", outcome="task_failed") == 1
    assert total(s, "flux_qpu_tasks_ended_total", outcome="cancelled") == 0
    assert value(s, "flux_qpu_hold_duration_seconds_count", outcome="failed") == 1


def test_a_vendor_unreachable_counts_seconds_from_its_first_failed_call_until_it_answers():
    m = Metered()
    h = m.h
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.TASK in h.flux.names(job))
    down = VendorUnavailable("connection refused", vendor="local", vendor_code="Unreachable")
    for operation in ("poll", "probe"):  # every call: one answered would be reachable
        h.vendor.fail(operation, down, times=1000)
    h.run(20)
    s = m.scrape()
    unreachable = value(s, "flux_qpu_vendor_unreachable_seconds", vendor="local")
    assert unreachable is not None and 15 <= unreachable <= 20
    assert value(s, "flux_qpu_vendor_unreachable_limit_seconds") == 30
    errors = total(s, "flux_qpu_vendor_call_errors_total", vendor="local", operation="poll")
    assert errors >= 3
    calls = value(
        s,
        "flux_qpu_vendor_calls_total",
        vendor="local",
        operation="poll",
        outcome="VendorUnavailable",
    )
    assert calls == errors
    assert value(s, "flux_qpu_held_jobs", state="track", reason="retrying") == 1
    h.vendor.failures.clear()
    h.run(10)
    assert value(m.scrape(), "flux_qpu_vendor_unreachable_seconds", vendor="local") == 0


def test_no_label_names_a_job_a_task_or_a_user():
    m = Metered()
    h = m.h
    jobs = [
        h.flux.submit({"device": "local:alpha", "release_at": 1}, userid=5001 + i) for i in range(3)
    ]
    h.until(lambda: all(h.state(j) == "released" for j in jobs))
    h.run(2)
    s = m.scrape()
    secrets = {str(j) for j in jobs} | {"5001", "5002", "5003", str(OWNER)}
    secrets |= {t.ref.task_id for t in h.vendor.tasks.values()}
    secrets |= {t.ref.token for t in h.vendor.tasks.values()}
    labels = {name: v for (_, ls) in s for name, v in ls}
    assert set(labels) <= {
        "state",
        "reason",
        "device",
        "vendor",
        "status",
        "operation",
        "outcome",
        "event",
        "le",
        "bank",
        "currency",
    }
    assert not secrets & {v for (_, ls) in s for _, v in ls}


def test_the_ledger_spend_by_bank_and_device(tmp_path):
    ledger_path = tmp_path / "ledger.db"
    quantum = {"ledger": {"path": str(ledger_path)}}
    site = SitePolicy.from_config(quantum)
    m = Metered(site=site)
    spend = SpendReader.from_config(quantum, currency="USD", statedir=None)
    m.with_spend(spend)
    h = m.h
    job = h.flux.submit({"device": "local:alpha", "release_at": "done"})
    h.until(lambda: events.TASK in h.flux.names(job))
    spend.refresh()
    s = m.scrape()
    assert value(s, "flux_qpu_ledger_up") == 1
    assert value(s, "flux_qpu_spend_readable") == 1
    reserved = value(s, "flux_qpu_spend_reserved", bank="-", device="alpha", currency="USD")
    assert reserved == pytest.approx(1.3)  # $0.30 + 1000 shots x $0.001
    h.until(lambda: h.state(job) == "released")
    h.run(5)
    spend.refresh()
    s = m.scrape()
    settled = value(s, "flux_qpu_spend_settled_total", bank="-", device="alpha", currency="USD")
    assert settled == pytest.approx(1.3)
    assert value(s, "flux_qpu_spend_reserved", bank="-", device="alpha", currency="USD") == 0
    spend.close()
    site.close()


def test_the_spend_reader_says_why_it_cannot_read_and_keeps_the_last_sums(tmp_path):
    missing = tmp_path / "nowhere" / "ledger.db"
    reader = SpendReader(lambda: Ledger.from_config(LedgerConfig(path=str(missing)), readonly=True))
    reader.refresh()
    assert reader.error is not None and reader.sums == {}


# --- the status top reads -----------------------------------------------------------------


def test_status_lists_devices_and_recent_outcomes_a_guest_sees_only_their_own():
    h = Harness()
    mine = h.flux.submit({"device": "local:alpha", "release_at": 1}, userid=5001)
    theirs = h.flux.submit({"device": "local:alpha", "release_at": 1}, userid=5002)
    h.until(lambda: h.state(mine) == "released" and h.state(theirs) == "released")
    status = h.service.status()
    rows = {d["device"]: d for d in status["devices"]}
    assert rows["alpha"]["status"] == "ONLINE" and rows["alpha"]["vendor"] == "local"
    assert rows["alpha"]["queue_depth"] is not None
    assert {r["jobs"][0] for r in status["recent"]} == {mine, theirs}
    assert status["recent"][0]["state"] == "released"
    guest = h.service.status(5001)
    assert [r["jobs"] for r in guest["recent"]] == [[mine]]
    assert guest["devices"] == status["devices"]  # counts only: nobody's job


def test_a_held_task_says_when_its_expected_wait_was_computed():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.TASK in h.flux.names(job))
    h.run(2)
    unit = h.service.status()["units"][0]
    task = unit["tasks"][0]
    assert task["expected_wait"] is not None
    assert task["expected_at"] is not None and task["expected_at"] <= h.clock()
    assert unit["t_submit"] <= h.clock()


# --- the exporter -------------------------------------------------------------------------


@pytest.mark.emulator  # a loopback HTTP server of its own
def test_the_exporter_serves_http_and_writes_the_textfile_atomically(tmp_path):
    textfile = tmp_path / "flux_quantum.prom"
    config = MetricsConfig(listen=("127.0.0.1", 0), textfile=textfile, interval=0.2)
    said: list[str] = []
    exporter = MetricsExporter(config, log=lambda level, msg: said.append(msg))
    h = Harness(meters=exporter.meters)
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.TASK in h.flux.names(job))
    h.run(2)
    exporter.start()
    try:
        address = exporter.address
        assert address is not None and address[0] == "127.0.0.1" and address[1] > 0
        url = f"http://127.0.0.1:{address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as rsp:
            s = scrape(rsp.read())
        assert value(s, "flux_qpu_held_jobs", state="track", reason="queued") == 1
        assert total(s, "flux_qpu_service_process_cpu_seconds_total") > 0
        deadline = time.monotonic() + 10
        while not textfile.exists():
            assert time.monotonic() < deadline, "no textfile"
            time.sleep(0.05)
        s = scrape(textfile.read_text())
        assert value(s, "flux_qpu_held_jobs", state="track", reason="queued") == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["flux_quantum.prom"]
        assert any(url.removesuffix("/metrics") in line for line in said)
    finally:
        exporter.stop()


def test_the_shipped_rules_and_dashboard_are_package_data():
    assert rules_path().is_file() and "FluxQpuVendorUnreachable" in rules_path().read_text()
    assert dashboard_path().is_file()
    dashboard = json.loads(dashboard_path().read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert any("flux_qpu_release_lag_seconds_bucket" in e for e in exprs)
