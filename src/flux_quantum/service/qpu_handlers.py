"""Broker module ``qpu_handlers``: supervise the qpu handler service process.

The service needs flux-quantum's own interpreter (its dependencies: the Braket SDK,
pydantic-core, ...), which at a site is never the Python the broker runs. So this module,
which does run in the broker's Python, only supervises: it starts
``<python> -m flux_quantum.service`` as a child process connected to this broker,
relays its log lines to the broker log, restarts it with back-off if it dies, stops it on
``flux module remove`` and at instance shutdown, and answers ``qpu_handlers.status``
(guests too) with its own state and the service's status, and relays
``qpu_handlers.usage`` (guests too, their userid attached) to the service.

    flux module load --name qpu_handlers $(flux quantum service module-path) \
        python=/path/to/venv/bin/python catalog=/path/backends.yaml

(``flux quantum service start`` does this with the right arguments; a system instance
loads it at boot through modprobe.) Arguments: ``python=`` (required), the service's own
``key=value`` options (passed on), and the supervisor's ``restart-max=SECONDS`` (60),
``stop-timeout=SECONDS`` (10) and ``healthy-after=SECONDS`` (10). A service that dies
before it is ready, or within ``healthy-after`` of being ready, is restarted with a
doubling delay (a crash loop); one that was killed after working a while (a kill -9,
an OOM kill) is restarted after 1 s, so its held jobs are served again at once.

It must run on any Python 3.6+ a broker may have, with nothing but the standard library
and Flux's bindings; it must never import flux_quantum, never pass a credential on a
command line, and never let an exception reach the reactor (a module that exits with an
error is a "module runtime failure" and fails the instance's shutdown). The child gets
a scrubbed environment (no PYTHONPATH/PYTHONHOME: it must not see the broker's bindings)
and its standard input as a lifeline: when this module goes, the service stops.
"""

import contextlib
import errno
import os
import signal
import subprocess
import syslog
import time

from flux.brokermod import BrokerModule, request_handler

SERVICE_SUFFIX = "-service"
READY_LINE = "@ready"
STABLE_SECONDS = 60.0
HEALTHY_AFTER = 10.0  # seconds of being ready after which an exit is no crash loop
ROLE_OWNER = 0x1

STARTING = "starting"
RUNNING = "running"
BACKOFF = "restarting"
STOPPED = "stopped"
FAILED = "failed"  # cannot start at all (no python= given, not executable)


def _parse_line(line):
    """``<level>message`` as the service writes it; anything else (a traceback from an
    interpreter that could not even import the service) is an error line."""
    if line.startswith("<") and ">" in line[:4]:
        head, _, rest = line[1:].partition(">")
        if head.isdigit():
            return int(head), rest
    return syslog.LOG_ERR, line


class QpuHandlers(BrokerModule):
    """Start, watch, restart and stop the service process; relay its status."""

    def __init__(self, h, *args):
        super().__init__(h, *args)
        self.python = None
        self.words = []
        self.restart_max = 60.0
        self.stop_timeout = 10.0
        self.healthy_after = HEALTHY_AFTER
        self.ready_at = None
        self.proc = None
        self.state = STOPPED
        self.started_at = None
        self.restarts = 0
        self.backoff = 1.0
        self.restart_at = None
        self.last_exit = None
        self.error = None
        self.first_error = None
        self.same_exits = 0
        self._errors = set()
        self._previous_errors = set()
        self._buffer = b""
        self._out_watcher = None
        self._timer = None
        self._reap_timer = None
        self._stopping = False
        self._sigterm = h.signal_watcher_create(signal.SIGTERM, self._on_sigterm)
        self._sigterm.start()
        try:
            self._parse_args(args)
        except ValueError as exc:
            self.state = FAILED
            self.error = str(exc)
            self.log.error("qpu handlers: " + self.error)
            return
        self._spawn()

    # -- arguments

    def _parse_args(self, args):
        for word in args:
            key, sep, value = word.partition("=")
            if key == "python" and sep:
                self.python = value
            elif key in ("restart-max", "restart_max") and sep:
                self.restart_max = _seconds(key, value)
            elif key in ("stop-timeout", "stop_timeout") and sep:
                self.stop_timeout = _seconds(key, value)
            elif key in ("healthy-after", "healthy_after") and sep:
                self.healthy_after = _seconds(key, value, zero=True)
            else:
                self.words.append(word)
        if not self.python:
            raise ValueError(
                "python= is required: the interpreter flux-quantum is installed in "
                "(flux quantum service start passes it)"
            )
        if not os.access(self.python, os.X_OK):
            raise ValueError(f"python={self.python}: not an executable file")

    # -- the child

    def _environment(self):
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PYTHON") and k != "FLUX_MODULE_URI"
        }
        env["PYTHONUNBUFFERED"] = "1"
        with contextlib.suppress(OSError):
            env["FLUX_URI"] = self.handle.attr_get("local-uri")
        return env

    def _spawn(self):
        argv = [
            self.python,
            "-m",
            "flux_quantum.service",
            "--supervised",
            "--name=" + self.name + SERVICE_SUFFIX,
        ] + self.words
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                cwd="/",
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            self._exited(f"cannot start {self.python}: {exc}")
            return
        self.state = STARTING
        self.started_at = time.time()
        self._buffer = b""
        self._previous_errors, self._errors = self._errors, set()
        assert self.proc.stdout is not None  # stdout=PIPE
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        import flux.constants

        self._out_watcher = self.handle.fd_watcher_create(
            fd, self._on_output, events=flux.constants.FLUX_POLLIN
        )
        self._out_watcher.start()
        self.log.debug(f"qpu handlers: started pid {self.proc.pid}")

    def _on_output(self, h, watcher, fd, revents, arg):
        try:
            self._read_output()
        except Exception as exc:  # never into the reactor
            self.log.error(f"qpu handlers: reading the service's output: {exc}")

    def _read_output(self):
        if self.proc is None:
            return
        eof = False
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                eof = True
                break
            self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if eof and self._buffer:
            lines.append(self._buffer)
            self._buffer = b""
        for raw in lines:
            self._line(raw.decode("utf-8", errors="replace").rstrip())
        if eof:
            assert self._out_watcher is not None  # made with the child
            self._out_watcher.stop()
            self._reap()

    def _line(self, line):
        if not line:
            return
        if line == READY_LINE:
            self.state = RUNNING
            self.ready_at = time.time()
            assert self.proc is not None  # its output is being read
            self.log.info(f"qpu handlers: service running (pid {self.proc.pid})")
            return
        level, message = _parse_line(line)
        if level <= syslog.LOG_ERR:
            self.error = message
            if self.first_error is None:
                self.first_error = message
            self._errors.add(message)
            if message in self._previous_errors:
                # What the last run already said: once is enough (a crash loop).
                level = syslog.LOG_DEBUG
        self.log(level, "qpu service: " + message)

    def _reap(self):
        """The child closed its output: collect its exit status (it may take a moment)."""
        assert self.proc is not None  # cleared only once it is reaped or stopped
        status = self.proc.poll()
        if status is None:
            self._reap_timer = self.handle.timer_watcher_create(0.05, self._on_reap_timer)
            self._reap_timer.start()
            return
        self._exited(_describe_status(status))

    def _on_reap_timer(self, *args):
        try:
            self._reap()
        except Exception as exc:
            self.log.error(f"qpu handlers: reap: {exc}")

    def _exited(self, how):
        now = time.time()
        ran = now - self.started_at if self.started_at else 0.0
        served = now - self.ready_at if self.ready_at else None
        self.proc = None
        self.ready_at = None
        self.last_exit = how
        if self._stopping:
            self.state = STOPPED
            return
        if ran >= STABLE_SECONDS or (served is not None and served >= self.healthy_after):
            self.backoff = 1.0  # it worked: not a crash loop
        delay = min(self.backoff, self.restart_max)
        self.backoff = min(self.restart_max, self.backoff * 2)
        self.restarts += 1
        self.state = BACKOFF
        self.restart_at = time.time() + delay
        text = "qpu service {}: {}; restarting in {:g}s".format(
            how, self.error or "no error message", delay
        )
        # Said once per distinct failure, then at 2, 4, 8 ... times: never in a loop.
        key = (how, self.error)
        if key == getattr(self, "_last_key", None):
            self.same_exits += 1
        else:
            self._last_key, self.same_exits = key, 1
        if self.same_exits & (self.same_exits - 1) == 0:
            suffix = "" if self.same_exits == 1 else f" ({self.same_exits} times)"
            self.log.error(text + suffix)
        self._timer = self.handle.timer_watcher_create(delay, self._on_restart)
        self._timer.start()

    def _on_restart(self, *args):
        try:
            if not self._stopping and self.proc is None:
                self._spawn()
        except Exception as exc:
            self.log.error(f"qpu handlers: restart: {exc}")

    def _terminate(self):
        """Stop the child: close its lifeline, SIGTERM, then SIGKILL after stop-timeout."""
        self._stopping = True
        proc = self.proc
        if proc is None:
            self.state = STOPPED
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(OSError):
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            self.log.warning("qpu handlers: service did not stop in time: SIGKILL")
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
        self.proc = None
        self.state = STOPPED
        self.last_exit = _describe_status(proc.returncode)

    # -- module life

    def _on_sigterm(self, *args):
        self.log.info("qpu handlers: SIGTERM, stopping")
        self.stop()

    def run(self):
        try:
            super().run()
        except Exception as exc:
            # A callback raised despite the fences: exit cleanly rather than take the
            # instance's shutdown down with a module runtime failure.
            self.log.error(f"qpu handlers: reactor stopped: {exc}")
        finally:
            try:
                self._terminate()
            except Exception as exc:
                self.log.error(f"qpu handlers: stop: {exc}")

    # -- status

    def _supervisor(self):
        now = time.time()
        return {
            "state": self.state,
            "pid": self.proc.pid if self.proc is not None else None,
            "python": self.python,
            "restarts": self.restarts,
            "uptime": round(now - self.started_at, 1)
            if self.started_at and self.proc is not None
            else None,
            "restart_in": round(max(0.0, self.restart_at - now), 1)
            if self.state == BACKOFF and self.restart_at
            else None,
            "last_exit": self.last_exit,
            "error": self.error,
            "first_error": self.first_error,
        }

    @request_handler("status", allow_guest=True)
    def status(self, msg):
        try:
            self._status(msg)
        except Exception as exc:
            try:
                text = f"status: {exc}".encode()
                self.handle.flux_respond_error(msg.handle, errno.EIO, text)
            except Exception:
                self.log.error(f"qpu handlers: status: {exc}")

    def _status(self, msg):
        supervisor = self._supervisor()
        if self.state != RUNNING:
            self.handle.respond(msg, {"running": False, "supervisor": supervisor})
            return
        payload = {}
        if not (msg.rolemask & ROLE_OWNER):
            payload["userid"] = msg.userid
        future = self.handle.rpc(self.name + SERVICE_SUFFIX + ".status", payload)

        def relay(f):
            try:
                service = f.get()
                self.handle.respond(msg, dict(service, supervisor=self._supervisor()))
            except OSError as exc:
                reply = {
                    "running": False,
                    "supervisor": self._supervisor(),
                    "relay_error": exc.strerror or str(exc),
                }
                with contextlib.suppress(OSError):
                    self.handle.respond(msg, reply)
            except Exception as exc:
                self.log.error(f"qpu handlers: status relay: {exc}")

        future.then(relay, timeout=10.0)

    @request_handler("usage", allow_guest=True)
    def usage(self, msg):
        """``flux quantum usage``: relayed to the service, which keeps the ledger."""
        self._relay(msg, "usage", "no usage report now", 30.0)

    @request_handler("task", allow_guest=True)
    def task(self, msg):
        """A guest's job on the site's accounts reads its task's state and result
        through the service, which holds the credentials (``flux quantum task``)."""
        self._relay(msg, "task", "a task cannot be read through it now", 60.0)

    def _relay(self, msg, method, unavailable, timeout):
        """Relay a request to the service; a guest's request carries the guest's userid
        as ``caller`` (set here, never taken from the guest)."""
        try:
            if self.state != RUNNING:
                self._respond_error(
                    msg, errno.EAGAIN, f"the qpu handler service is {self.state}: {unavailable}"
                )
                return
            payload = dict(msg.payload) if isinstance(msg.payload, dict) else {}
            payload.pop("caller", None)
            if not (msg.rolemask & ROLE_OWNER):
                payload["caller"] = msg.userid
            future = self.handle.rpc(self.name + SERVICE_SUFFIX + "." + method, payload)

            def relay(f):
                try:
                    self.handle.respond(msg, f.get())
                except OSError as exc:
                    self._respond_error(msg, exc.errno or errno.EIO, exc.strerror or str(exc))
                except Exception as exc:
                    self.log.error(f"qpu handlers: {method} relay: {exc}")

            future.then(relay, timeout=timeout)
        except Exception as exc:
            self._respond_error(msg, errno.EIO, f"{method}: {exc}")

    def _respond_error(self, msg, number, text):
        try:
            self.handle.flux_respond_error(msg.handle, number, text.encode())
        except Exception as exc:
            self.log.error(f"qpu handlers: cannot respond: {exc}")


def _seconds(key, value, zero=False):
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 if zero else seconds > 0):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(f"{key} must be a number of seconds {bound}, got {value!r}")
    return seconds


def _describe_status(status):
    if status is None:
        return "still running"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"killed by {name}"
    return f"exited with status {status}"


def mod_main(h, *args):
    QpuHandlers(h, *args).run()
