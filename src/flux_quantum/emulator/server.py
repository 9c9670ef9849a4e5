"""The emulator's HTTP/1.1 socket layer: a threaded loopback server around one request handler.

This module owns sockets and threads: it accepts keep-alive connections, reads each request
(Content-Length or chunked bodies), hands a ``Request`` to the application and writes its
``Response``. It must never block forever: idle connections time out, ``stop()`` closes every
open connection and joins every thread with a deadline, and it never binds a non-loopback
address. It knows nothing about Braket or S3.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flux_quantum.emulator.wire import Request, Response

App = Callable[[Request], Response]

# An idle keep-alive connection is closed after this many seconds.
IDLE_TIMEOUT = 30.0
# stop() waits at most this long for request threads to finish.
STOP_DEADLINE = 5.0
MAX_BODY = 64 * 1024 * 1024


def check_loopback(host: str) -> str:
    """The IPv4 loopback address to bind for ``host``; ValueError for anything else."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or address.version != 4 or not address.is_loopback:
        raise ValueError(f"the emulator only listens on IPv4 loopback (127.0.0.1), not {host!r}")
    return host


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    # Headers and body leave together (a buffered writer, flushed after each request) and
    # without Nagle's delay: otherwise every keep-alive round trip waits ~40 ms for the
    # client's delayed ACK.
    wbufsize = -1
    disable_nagle_algorithm = True
    server: _Server

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            self.send_error(400, "bad request body")
            return
        split = urlsplit(self.path)
        request = Request(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        response = self.server.app(request)
        if response.reset:  # no answer: the connection is reset once this handler returns
            self.close_connection = True
            self.server.reset_later(self.connection)
            return
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("x-amzn-RequestId", "flux-quantum-emulator")
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = bytearray()
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(chunks)
                chunks += self.rfile.read(size)
                self.rfile.readline(1024)
                if len(chunks) > MAX_BODY:
                    raise ValueError("body too large")
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(length) if length else b""

    def handle_expect_100(self) -> bool:
        # The interim "100 Continue" must reach the client now, not with the response.
        self.send_response_only(100)
        self.end_headers()
        self.wfile.flush()
        return True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _serve

    def handle(self) -> None:
        # A client that went away (e.g. after its own read timeout) is not an error.
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            super().handle()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None  # the emulator keeps its own call log


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops bursts of parallel probes.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: App) -> None:
        self.app = app
        self._open: set[socket.socket] = set()
        self._conn_threads: set[threading.Thread] = set()
        self._resets: set[socket.socket] = set()
        self._guard = threading.Lock()
        super().__init__(address, _Handler)

    # A TCP server's requests are sockets (the base class's type also covers UDP's tuples).
    def process_request(self, request: socket.socket, client_address: Any) -> None:  # type: ignore[override]
        thread = threading.Thread(
            target=self._run, args=(request, client_address), name="emulator-conn", daemon=True
        )
        with self._guard:
            self._open.add(request)
            self._conn_threads.add(thread)
        thread.start()

    def _run(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._guard:
                self._open.discard(request)
                self._conn_threads.discard(threading.current_thread())

    def reset_later(self, connection: socket.socket) -> None:
        """Reset ``connection`` (RST, not FIN) instead of shutting it down cleanly."""
        with self._guard:
            self._resets.add(connection)

    # A socket too (see process_request).
    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        with self._guard:
            reset = request in self._resets
            self._resets.discard(request)
        if not reset:
            super().shutdown_request(request)
            return
        with contextlib.suppress(OSError):
            request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_request(request)  # linger 0: the peer sees ECONNRESET

    def handle_error(self, request: object, client_address: Any) -> None:
        return None  # a broken connection must not print a traceback into the user's terminal

    def close_connections(self, deadline: float) -> None:
        """Shut every open connection and join the threads serving them, until ``deadline``."""
        with self._guard:
            sockets, threads = list(self._open), list(self._conn_threads)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


class HttpServer:
    """Serve ``app`` on ``host:port`` from a background thread until ``stop()``."""

    def __init__(self, host: str, port: int, app: App) -> None:
        self._server = _Server((check_loopback(host), port), app)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="emulator-http"
        )
        self._thread.daemon = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        deadline = time.monotonic() + STOP_DEADLINE
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server.close_connections(deadline)
        self._server.server_close()
