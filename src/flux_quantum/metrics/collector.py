"""``ServiceCollector``: the metrics read at scrape time, from what the service published.

A Prometheus collector (``collect()`` runs on the exporter's threads): it turns the
last ``ServiceSnapshot`` the reactor published, the vendors' reachability
(``VendorCalls``), the ledger's sums (``SpendReader``) and the site's alert thresholds
(``MetricsConfig``) into metric families named by Prometheus' conventions
(``flux_qpu_`` prefix, base units, ``_total`` counters). It reads only those objects,
never the service's own state, and every label value is bounded: a phase, a reason, a
device, a vendor, a bank, a counter's name. No job, task or user is ever a label.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flux_quantum.metrics.config import MetricsConfig
from flux_quantum.metrics.service_meters import ServiceMeters
from flux_quantum.metrics.snapshot import ServiceSnapshot
from flux_quantum.metrics.spend import SpendReader

# The service's own counters (``Counters``) that have a metric of their own; the others
# are ``flux_qpu_service_events_total{event=NAME}``.
NAMED_COUNTERS = {
    "adopted": ("flux_qpu_jobs_adopted", "Held jobs the service adopted."),
    "released": ("flux_qpu_jobs_released", "Held jobs the service released."),
    "failed": ("flux_qpu_jobs_failed", "Held jobs the service failed (a qpu exception)."),
    "tasks_created": ("flux_qpu_tasks_created", "Vendor tasks the service created."),
    "polls": ("flux_qpu_task_polls", "Polls of vendor tasks."),
    "failovers": ("flux_qpu_failovers", "Programs that went on to another task (fail-over)."),
}
DEVICE_STATES = ("ONLINE", "OFFLINE", "PAUSED", "RETIRED", "UNREACHABLE")


class ServiceCollector(Collector):
    def __init__(
        self, meters: ServiceMeters, config: MetricsConfig, spend: SpendReader | None
    ) -> None:
        self.meters = meters
        self.config = config
        self.spend = spend

    def collect(self) -> Iterator[Metric]:
        snapshot = self.meters.latest  # one reference: the record never changes
        yield from self._thresholds()
        yield from self._vendors()
        if snapshot is None:
            return
        yield from self._service(snapshot)
        yield from self._held(snapshot)
        yield from self._devices(snapshot)
        yield from self._ledger(snapshot)

    def _thresholds(self) -> Iterator[Metric]:
        config = self.config
        yield _gauge(
            "flux_qpu_vendor_unreachable_limit_seconds",
            "[quantum.metrics] vendor_unreachable_after: the alert's threshold.",
            config.vendor_unreachable_after,
        )
        yield _gauge(
            "flux_qpu_ledger_unavailable_limit_seconds",
            "[quantum.metrics] ledger_unavailable_after: the alert's threshold.",
            config.ledger_unavailable_after,
        )
        if config.spend_limit_per_hour is not None:
            yield _gauge(
                "flux_qpu_spend_limit_per_hour",
                "[quantum.metrics] spend_limit_per_hour: the spend rate the alert fires "
                "above, in the ledger's currency per hour.",
                config.spend_limit_per_hour,
            )

    def _vendors(self) -> Iterator[Metric]:
        down = GaugeMetricFamily(
            "flux_qpu_vendor_unreachable_seconds",
            "How long the vendor has been unreachable: since the first call that found "
            "it down after its last answer (0: it answered).",
            labels=("vendor",),
        )
        for vendor, seconds in self.meters.vendor_calls.unreachable_seconds().items():
            down.add_metric((vendor,), seconds)
        yield down

    def _service(self, s: ServiceSnapshot) -> Iterator[Metric]:
        yield _gauge(
            "flux_qpu_service_start_time_seconds",
            "When the handler service started (epoch seconds).",
            s.started,
        )
        yield _gauge(
            "flux_qpu_metrics_snapshot_timestamp_seconds",
            "When the service took the snapshot these metrics show (epoch seconds).",
            s.t,
        )
        events = CounterMetricFamily(
            "flux_qpu_service_events",
            "The service's other counters (flux quantum service status), by name.",
            labels=("event",),
        )
        for name, value in sorted(s.counters.items()):
            named = NAMED_COUNTERS.get(name)
            if named is not None:
                yield CounterMetricFamily(named[0], named[1], value=value)
            else:
                events.add_metric((name,), value)
        yield events
        yield _gauge("flux_qpu_sessions_open", "Vendor sessions kept open.", s.sessions_open)
        yield _gauge(
            "flux_qpu_creates_looked_up",
            "Creates left without an answer, being looked up by their token.",
            s.looking_up,
        )
        yield _gauge("flux_qpu_workers_busy", "Worker threads in a vendor call.", s.workers_busy)
        yield _gauge("flux_qpu_workers_queued", "Calls waiting for a worker.", s.workers_queued)

    def _held(self, s: ServiceSnapshot) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "flux_qpu_held_jobs",
            "Jobs held for a QPU, by the phase of their task and why they wait.",
            labels=("state", "reason"),
        )
        for (state, reason), jobs in sorted(s.held.items()):
            held.add_metric((state, reason), jobs)
        yield held
        on_device = GaugeMetricFamily(
            "flux_qpu_device_held_jobs",
            "Held jobs whose task is (or is being created) on the device.",
            labels=("device",),
        )
        for device, jobs in sorted(s.held_by_device.items()):
            on_device.add_metric((device,), jobs)
        yield on_device
        yield _gauge(
            "flux_qpu_held_jobs_past_max_wait",
            "Held jobs whose task has waited longer than their qpu.max_wait (the service "
            "fails them over within a scan: a lasting value is an alert).",
            s.past_max_wait,
        )
        yield _gauge(
            "flux_qpu_held_oldest_seconds",
            "How long the longest-held job has waited (from its unit's submission).",
            s.oldest_held,
        )
        yield _gauge("flux_qpu_held_nodes", "Nodes the held jobs ask for.", s.held_nodes)
        yield _gauge("flux_qpu_held_cores", "Cores the held jobs ask for.", s.held_cores)
        yield CounterMetricFamily(
            "flux_qpu_held_node_seconds",
            "Node-seconds held jobs waited: the nodes they ask for times the time held, "
            "measured between snapshots.",
            value=s.node_seconds,
        )
        yield CounterMetricFamily(
            "flux_qpu_held_core_seconds",
            "Core-seconds held jobs waited, measured as node-seconds are.",
            value=s.core_seconds,
        )

    def _devices(self, s: ServiceSnapshot) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "flux_qpu_device_up",
            "1 when the device takes tasks now (online, in its window), as last probed.",
            labels=("device", "vendor"),
        )
        status = GaugeMetricFamily(
            "flux_qpu_device_status",
            "The device's status as last probed: 1 for the current one.",
            labels=("device", "vendor", "status"),
        )
        depth = GaugeMetricFamily(
            "flux_qpu_device_queue_depth",
            "Tasks in the device's queue, as last probed.",
            labels=("device", "vendor"),
        )
        wait = GaugeMetricFamily(
            "flux_qpu_device_forecast_wait_seconds",
            "The device's queue depth times the drain time per task the service learned.",
            labels=("device", "vendor"),
        )
        for row in s.devices:
            labels = (row.device, row.vendor)
            up.add_metric(labels, 1.0 if row.available else 0.0)
            for state in DEVICE_STATES:
                status.add_metric((*labels, state), 1.0 if row.status == state else 0.0)
            if row.queue_depth is not None:
                depth.add_metric(labels, row.queue_depth)
            if row.forecast_wait is not None:
                wait.add_metric(labels, row.forecast_wait)
        yield from (up, status, depth, wait)

    def _ledger(self, s: ServiceSnapshot) -> Iterator[Metric]:
        if not s.ledger:
            return
        yield _gauge(
            "flux_qpu_ledger_up",
            "1 when the site's ledger answers the service (0: no task is created until it "
            "is back).",
            1.0 if s.ledger_up else 0.0,
        )
        yield _gauge(
            "flux_qpu_ledger_unavailable_seconds",
            "How long the ledger has been unavailable (0: it answers).",
            s.ledger_unavailable_for,
        )
        yield _gauge(
            "flux_qpu_ledger_backlog_writes",
            "Ledger writes kept until it is back.",
            s.ledger_backlog,
        )
        yield CounterMetricFamily(
            "flux_qpu_ledger_reservations_put_off",
            "Reservations (and so creates) put off by a ledger outage.",
            value=s.reservations_put_off,
        )
        spend = self.spend
        if spend is None:
            return
        currency = spend.currency or ""
        settled = CounterMetricFamily(
            "flux_qpu_spend_settled",
            "What this instance's tasks cost, settled in the ledger (and reserved windows' "
            "costs), in the ledger's currency.",
            labels=("bank", "device", "currency"),
        )
        reserved = GaugeMetricFamily(
            "flux_qpu_spend_reserved",
            "Estimates reserved in the ledger for tasks not settled yet.",
            labels=("bank", "device", "currency"),
        )
        for (bank, device), sums in sorted(spend.sums.items()):
            settled.add_metric((bank, device, currency), sums.settled)
            reserved.add_metric((bank, device, currency), sums.reserved)
        yield settled
        yield reserved
        yield _gauge(
            "flux_qpu_spend_readable",
            "1 when the exporter could read the ledger's sums at its last refresh.",
            1.0 if spend.error is None else 0.0,
        )


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)
