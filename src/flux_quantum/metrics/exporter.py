"""``MetricsExporter``: the handler service's metrics served to Prometheus or written for
node_exporter.

It owns the registry (the service's ``ServiceMeters``, the ``ServiceCollector``, the
process' own CPU and memory), one thread of its own that every ``interval`` seconds
refreshes the ledger's sums, renders the page (the text exposition format) and rewrites
the ``textfile`` atomically (a temporary file renamed over it), and an HTTP server on the
``listen`` address that answers every scrape with the last page rendered: a scrape
costs the service the bytes it sends, not a rendering, and never waits for the ledger.
The reactor only hands it snapshots through ``ServiceMeters``; nothing here runs on the
reactor but ``start`` and ``stop``. What it serves is aggregates: counts, durations,
devices, vendors, banks; never a job, a task or a user.
"""

from __future__ import annotations

import contextlib
import os
import socket
import syslog
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from flux_quantum.metrics.collector import ServiceCollector
from flux_quantum.metrics.config import MetricsConfig
from flux_quantum.metrics.service_meters import SNAPSHOT_BUCKETS, ServiceMeters
from flux_quantum.metrics.spend import SpendReader

Log = Callable[[int, str], None]


class MetricsExporter:
    def __init__(
        self,
        config: MetricsConfig,
        *,
        spend: SpendReader | None = None,
        log: Log | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.spend = spend
        self._log = log or (lambda level, msg: None)
        # No ``*_created`` series beside every counter (the service's process only).
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.meters = ServiceMeters(self.registry, config.interval, clock=clock)
        ProcessCollector(namespace="flux_qpu_service", registry=self.registry)
        self.registry.register(ServiceCollector(self.meters, config, spend))
        self.render_cost = Histogram(
            "flux_qpu_metrics_render_duration_seconds",
            "CPU time the exporter's thread spent rendering the page scrapes get.",
            buckets=SNAPSHOT_BUCKETS,
            registry=self.registry,
        )
        self._server: ThreadingHTTPServer | None = None
        self._page = b""  # the last rendering, replaced whole
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: dict[str, str | None] = {}  # the problem said, by what has it

    @classmethod
    def from_config(
        cls,
        quantum: Mapping[str, Any] | None,
        *,
        currency: str,
        statedir: str | None,
        ledger: bool,
        log: Log | None = None,
    ) -> MetricsExporter | None:
        """The exporter ``[quantum.metrics]`` asks for, or None (metrics off).
        ``ledger``: the service keeps the site's ledger (its spend is exported).
        MetricsConfigError or LedgerConfigError (ValueErrors) name a bad key."""
        config = MetricsConfig.from_config((quantum or {}).get("metrics"))
        if config is None:
            return None
        spend = (
            SpendReader.from_config(quantum, currency=currency, statedir=statedir)
            if ledger
            else None
        )
        return cls(config, spend=spend, log=log)

    @property
    def address(self) -> tuple[str, int] | None:
        """Where it listens (the port chosen when ``listen`` asked for port 0)."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        # An AF_INET server's address is (host, port), the host a str.
        return str(host), int(port)

    def start(self) -> None:
        """Render a first page, listen (OSError when the address is taken) and start
        the refresh thread."""
        self._page = self.render()
        listen = self.config.listen
        if listen is not None:
            self._server = _server(listen, lambda: self._page)
            threading.Thread(
                target=self._server.serve_forever, name="flux-quantum-metrics-http", daemon=True
            ).start()
        self._thread = threading.Thread(target=self._run, name="flux-quantum-metrics", daemon=True)
        self._thread.start()
        where = [f"http://{_hostport(self.address)}/metrics"] if self.address else []
        if self.config.textfile is not None:
            where.append(str(self.config.textfile))
        self._log(syslog.LOG_INFO, f"metrics: {', '.join(where)}")

    def _run(self) -> None:
        while True:
            if self.spend is not None:
                self.spend.refresh()
                error = self.spend.error
                self._say("ledger", None if error is None else f"cannot read the ledger: {error}")
            t0 = time.thread_time()
            self._page = self.render()
            self.render_cost.observe(time.thread_time() - t0)
            textfile = self.config.textfile
            if textfile is not None:
                try:
                    _write_atomically(textfile, self._page)
                    self._say("textfile", None)
                except OSError as exc:
                    self._say("textfile", f"cannot write {textfile}: {exc}")
            if self._stop.wait(self.config.interval):
                return

    def _say(self, what: str, problem: str | None) -> None:
        """A problem with ``what`` said once (warning), and its end."""
        said = self._said.get(what)
        if problem == said:
            return
        if problem is not None:
            self._log(syslog.LOG_WARNING, f"metrics: {problem}")
        elif said is not None:
            self._log(syslog.LOG_INFO, f"metrics: the {what} works again")
        self._said[what] = problem

    def render(self) -> bytes:
        """The page as of now (the text exposition format)."""
        return generate_latest(self.registry)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.shutdown()
                self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.spend is not None:
            self.spend.close()


def _server(listen: tuple[str, int], page: Callable[[], bytes]) -> ThreadingHTTPServer:
    """An HTTP server answering ``GET /metrics`` (and ``/``) with ``page()``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = page()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # a scrape is not news

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET

    return Server(listen, Handler)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _hostport(address: tuple[str, int] | None) -> str:
    if address is None:
        return "-"
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
