"""The service process: ``python -m flux_quantum.service``, in the project's interpreter.

``serve()`` connects to the instance (``FLUX_URI``), registers the service's name (a lock:
one service per instance owner), answers ``<name>.status`` (a guest sees only their own
jobs) and ``<name>.usage`` (the site ledger's report: a guest gets only their own rows),
and runs a ``QuantumService`` on the handle's reactor (``ServiceRunner``: a tick
timer and the workers' pipe; and the metrics exporter ``[quantum.metrics]`` asks for) until SIGTERM/SIGINT, or until its standard input closes
when a supervisor started it (the broker module ``qpu_handlers``: if the supervisor goes,
so does the service). Every reactor callback is fenced: an exception is logged, never
raised into the reactor, and the same message repeated is logged once with a count.

Logs go to standard error: for a supervisor, as ``<level>message`` lines it relays to the
broker log; for a person (``flux quantum service run``), with a time stamp. A start-up
failure (an option, the catalog, ``import flux``, a second service) is one line and a
non-zero exit status: 2 for a setup error, 3 when another service already runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import os
import signal
import sys
import syslog
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from flux_quantum.catalog import Catalog, load_catalog
from flux_quantum.compiler import CompileLimits, CompilePool
from flux_quantum.errors import FluxQuantumError
from flux_quantum.protocol.vendors import load, registry
from flux_quantum.service import sessionkeys, taskread
from flux_quantum.service.context import MODULE_NAME, Log
from flux_quantum.service.core import QuantumService
from flux_quantum.service.fluxside import FluxJobs
from flux_quantum.service.options import ServiceError, ServiceOptions
from flux_quantum.service.sessionkeys import SessionKeys
from flux_quantum.service.workers import VendorWorkers
from flux_quantum.site.ledger import GuestError, serve_usage
from flux_quantum.site.policy import SitePolicy
from flux_quantum.vendors.relayed import SERVICE_SUFFIX

READY_LINE = "@ready"
EXIT_SETUP = 2
EXIT_RUNNING = 3
ROLE_OWNER = 0x1


def service_name(module_name: str) -> str:
    """The name the service process registers, beside its supervisor module's."""
    return module_name + SERVICE_SUFFIX


class RepeatFilter:
    """A log that says a repeated message once: the same (level, message) in a row is
    counted, and the count is said when another message comes or ``every`` seconds
    pass. A broken service says why once, not five times a second."""

    def __init__(
        self, log: Log, every: float = 600.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = log
        self.every = every
        self._monotonic = monotonic
        self._last: tuple[int, str] | None = None
        self._count = 0
        self._since = 0.0

    def __call__(self, level: int, msg: str) -> None:
        now = self._monotonic()
        if self._last == (level, msg):
            self._count += 1
            if now - self._since < self.every:
                return
            self._flush()
            self._since = now
            return
        self._flush()
        self._last, self._count, self._since = (level, msg), 0, now
        self._log(level, msg)

    def _flush(self) -> None:
        if self._last is not None and self._count > 0:
            level, msg = self._last
            self._log(level, f"(repeated {self._count} more time(s)): {msg}")
        self._count = 0


def stream_log(stream: Any, supervised: bool, verbose: bool = False) -> Log:
    """A log writing to ``stream``: ``<level>msg`` lines for a supervisor, time-stamped
    lines for a person (debug messages only when ``verbose``)."""

    def log(level: int, msg: str) -> None:
        if supervised:
            line = f"<{level}>{msg}"
        elif level <= (syslog.LOG_DEBUG if verbose else syslog.LOG_INFO):
            line = f"flux-quantum-service: {time.strftime('%H:%M:%S')} {msg}"
        else:
            return
        with contextlib.suppress(OSError, ValueError):
            print(line, file=stream, flush=True)

    return log


class ServiceRunner:
    """Wires a QuantumService to a Flux handle's reactor: a tick timer and the workers'
    pipe. Every callback is fenced: an exception is logged, never raised into the
    reactor."""

    def __init__(
        self,
        handle: Any,
        options: ServiceOptions,
        log: Log,
        *,
        owner: bool = True,
        module_name: str | None = MODULE_NAME,
    ) -> None:
        import flux.constants

        self.handle = handle
        self.options = options
        self._log = log
        try:
            catalog = load_catalog(options.catalog)
        except FluxQuantumError as exc:
            raise ServiceError(str(exc)) from exc
        # The site's policy is the instance owner's: a guest's own service has none; nor
        # does it export the site's metrics.
        self.site = site_policy(handle, catalog) if owner else None
        self.metrics = (
            instance_metrics(handle, catalog, log, ledger=self.site is not None) if owner else None
        )
        self.workers = VendorWorkers(options.workers)
        # The compile stage's workers ([quantum.compile]; None: programs go as written).
        self.compiler = compile_pool(handle)
        # Its calls wait for a compile worker in threads of their own, never in (nor
        # holding) the vendor calls' workers: a burst of programs to compile holds no
        # other job's poll, create or release back.
        self.compile_lane = (
            self.workers.lane(self.compiler.limits.workers, "qpu-compile")
            if self.compiler is not None
            else None
        )
        self.reads = taskread.TaskReads(self.workers.submit)
        self.service = QuantumService(
            FluxJobs(handle, lead_share=options.lead_share),
            catalog,
            options,
            self.workers,
            log=log,
            site=self.site,
            instance_owner=owner,
            module_name=module_name,
            session_keys=SessionKeys(session_keys_directory(handle, owner), log=_warning(log)),
            meters=self.metrics.meters if self.metrics is not None else None,
            compiler=self.compiler,
            compile_lane=self.compile_lane.submit if self.compile_lane is not None else None,
        )
        self._fd = handle.fd_watcher_create(
            self.workers.fileno(), self._on_wake, events=flux.constants.FLUX_POLLIN
        )
        self._timer = handle.timer_watcher_create(0.0, self._on_tick, repeat=options.tick)
        self._warming = False
        # One-shot, armed after each tick for a step due before the next periodic one.
        self._soon = handle.timer_watcher_create(0.0, self._on_soon)

    def start(self) -> None:
        if self.metrics is not None:
            try:
                self.metrics.start()
            except OSError as exc:
                # The jobs matter more than their metrics: run without, say it loudly.
                self._log(syslog.LOG_ERR, f"metrics: cannot listen: {exc}; running without")
        self._fd.start()
        self._timer.start()
        if self.compiler is not None and self.compile_lane is not None:
            # Its workers import Qiskit now, not when the first job waits for them.
            self.compile_lane.submit(self.compiler.warm, lambda result, error: None)
        catalog = self.service.catalog
        ledger = f", ledger {self.site.ledger.path}" if self.site is not None else ""
        self._log(
            syslog.LOG_INFO,
            f"qpu handlers started: catalog {catalog.path}, {len(catalog)} devices{ledger}, "
            f"python {sys.executable}",
        )

    def stop(self) -> None:
        """Stop watching; tasks keep running at the vendor and a later service
        re-attaches them from the eventlogs."""
        for watcher in (self._timer, self._soon, self._fd):
            with contextlib.suppress(Exception):
                watcher.stop()
        self.workers.stop()
        if self.compiler is not None:
            self.compiler.close()
        with contextlib.suppress(Exception):
            self.service.charges.close()
        if self.metrics is not None:
            with contextlib.suppress(Exception):
                self.metrics.stop()

    def usage(self, msg: Any) -> dict[str, Any]:
        """The ``usage`` request: the caller's own rows, or everyone's for the owner.
        Raises GuestError (EPERM) or ValueError (EINVAL) with one sentence."""
        if self.site is None:
            raise ValueError(
                "this handler service keeps no ledger (it is not the instance owner's)"
            )
        payload = dict(msg.payload) if isinstance(msg.payload, dict) else {}
        caller = _caller(msg, payload.pop("caller", None))
        return serve_usage(self.site.ledger, payload, caller, os.getuid())

    def status(self, userid: int | None = None) -> dict[str, Any]:
        return self.service.status(userid)

    def read_task(self, msg: Any, reply: Callable[[int, Any], None]) -> None:
        """The ``task`` request (``taskread``): checked here, the vendor call in a
        worker; ``reply(0, answer)`` or ``reply(errno, sentence)`` when it is done.
        Raises GuestError (EPERM) or ValueError (EINVAL) for a refused request."""
        payload = dict(msg.payload) if isinstance(msg.payload, dict) else {}
        caller = _caller(msg, payload.pop("caller", None))
        jobid, task, op = taskread.checked_request(payload)
        record = self.service.record(jobid)
        ref = taskread.readable_ref(record, jobid, task, caller, os.getuid())
        self.reads.read(op, ref, self.service.vendor(ref.vendor), reply)

    def _on_tick(self, *args: Any) -> None:
        self._fenced(self.service.tick)
        self._arm_soon()
        if not self._warming:
            # A vendor's SDK may take seconds of CPU to import: in a worker, off the
            # reactor, once the first tick has adopted the held jobs (not competing).
            self._warming = True
            targets = warm_ups(d.vendor for d in self.service.catalog.devices)
            self.workers.submit(functools.partial(_warm_up, targets), lambda result, error: None)

    def _on_soon(self, *args: Any) -> None:
        self._fenced(self.service.step_soon)
        self._arm_soon()

    def _on_wake(self, *args: Any) -> None:
        self._fenced(self.service.completions)
        # A finished vendor call usually makes a next step due (create after select;
        # a release after a poll happens in the completion): take it now rather than
        # at the next tick.
        self._fenced(self.service.step_soon)
        self._arm_soon()

    def _arm_soon(self) -> None:
        """Wake for the next due step when it comes before the next periodic tick."""
        delay = self.service.next_due - self.service.now()
        if delay < self.options.tick:
            self._soon.stop()
            self._soon.reset(after=max(0.0, delay), repeat=0.0)
            self._soon.start()

    def _fenced(self, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            self.service.note_error(text)
            with contextlib.suppress(Exception):
                self._log(syslog.LOG_ERR, f"qpu handlers: {text}")


def instance_config(handle: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The instance's ``[quantum]`` table (None: none) and its ``statedir`` (None: a
    user's own instance, whose ledger goes to XDG_STATE_HOME); ServiceError when the
    configuration cannot be read."""
    try:
        config = handle.rpc("config.get").get()
    except OSError as exc:
        raise ServiceError(
            f"cannot read the instance configuration: {exc.strerror or exc}"
        ) from None
    quantum = config.get("quantum") if isinstance(config, dict) else None
    try:
        statedir = handle.attr_get("statedir") or None
    except OSError:
        statedir = None
    return (quantum if isinstance(quantum, dict) else None), statedir


def compile_pool(handle: Any) -> CompilePool | None:
    """The compile stage's workers as the instance's ``[quantum.compile]`` sets them
    (no table: the defaults, the stage on); None when it says ``enabled = false``. A
    bad table is a ServiceError naming the key."""
    quantum, _ = instance_config(handle)
    try:
        limits = CompileLimits.from_table((quantum or {}).get("compile"))
    except ValueError as exc:
        raise ServiceError(str(exc)) from None
    return CompilePool(limits) if limits.enabled else None


def site_policy(handle: Any, catalog: Catalog) -> SitePolicy:
    """The site policy from the instance's ``[quantum]`` table and ``statedir``; a bad
    table or an unusable ledger is a ServiceError naming the key or the file."""
    quantum, statedir = instance_config(handle)
    try:
        return SitePolicy.from_config(
            quantum,
            currency=catalog.currency,
            statedir=statedir,
            owner=os.getuid(),
            # Each reserved window's device is checked against the catalog.
            devices={device.name: device for device in catalog.devices},
        )
    except (ValueError, FluxQuantumError) as exc:
        raise ServiceError(str(exc)) from None


def instance_metrics(handle: Any, catalog: Catalog, log: Log, *, ledger: bool) -> Any:
    """The metrics exporter the instance's ``[quantum.metrics]`` asks for, or None (no
    table: metrics off, and no metrics library is imported). A bad table is a
    ServiceError naming the key."""
    quantum, statedir = instance_config(handle)
    if quantum is None or "metrics" not in quantum:
        return None
    from flux_quantum.metrics import MetricsExporter

    try:
        return MetricsExporter.from_config(
            quantum, currency=catalog.currency, statedir=statedir, ledger=ledger, log=log
        )
    except (ValueError, FluxQuantumError) as exc:
        raise ServiceError(str(exc)) from None


def session_keys_directory(handle: Any, owner: bool) -> Path | None:
    """Where this service keeps its open sessions' ids (``sessionkeys.directory_for``)."""

    def attr(name: str) -> str | None:
        try:
            return handle.attr_get(name) or None
        except OSError:
            return None

    return sessionkeys.directory_for(
        owner=owner,
        statedir=attr("statedir"),
        rundir=attr("rundir"),
        uri=attr("local-uri") or os.environ.get("FLUX_URI", ""),
    )


def _warning(log: Log) -> Callable[[str], None]:
    return lambda text: log(syslog.LOG_WARNING, text)


def instance_owner(handle: Any) -> bool:
    """Whether this process runs as the instance owner (``security.owner``)."""
    try:
        return int(handle.attr_get("security.owner")) == os.getuid()
    except (OSError, ValueError, TypeError):
        return True  # an instance that does not say: act as before, its owner's


def warm_ups(vendors: Iterable[str]) -> list[str]:
    """The warm-ups (``module:function``) of the descriptors of ``vendors``, each once."""
    found = registry()
    targets = (found.get(name) for name in vendors)
    return list(dict.fromkeys(d.warm_up for d in targets if d is not None and d.warm_up))


def _warm_up(targets: Sequence[str]) -> None:
    """Each vendor's warm-up, one after the other: the modules its first calls use,
    imported once (a create in another worker waits for them rather than racing into
    the same import circle)."""
    for target in targets:
        try:
            load(target)()
        except Exception:  # a warm-up only saves time: the vendor's first call says why
            continue


def _caller(msg: Any, relayed: Any) -> int:
    """Who asks: the requester, or for the instance owner (the supervisor relaying a
    guest's request) the ``caller`` it names."""
    rolemask = getattr(msg, "rolemask", ROLE_OWNER)
    if rolemask & ROLE_OWNER and isinstance(relayed, int) and not isinstance(relayed, bool):
        return relayed
    return int(msg.userid)


def _caller_view(msg: Any, payload: Any) -> int | None:
    """Whose jobs a status request may see: None (all) for the instance owner, else the
    caller's own. The supervisor relays a guest's request with ``userid`` set, which
    only the owner may do."""
    rolemask = getattr(msg, "rolemask", ROLE_OWNER)
    if rolemask & ROLE_OWNER:
        userid = payload.get("userid") if isinstance(payload, dict) else None
        return userid if isinstance(userid, int) else None
    return int(msg.userid)


def serve(
    words: Sequence[str],
    *,
    name: str,
    log: Log,
    supervised: bool = False,
    announce: Callable[[str], None] | None = None,
) -> int:
    """Run the service on the instance until stopped; the exit status for the process."""
    try:
        options = ServiceOptions.from_args(words)
    except ServiceError as exc:
        log(syslog.LOG_ERR, f"error: {exc}")
        return EXIT_SETUP
    try:
        import flux
        import flux.constants
    except ImportError as exc:
        log(
            syslog.LOG_ERR,
            f"error: cannot import Flux's Python bindings in {sys.executable} ({exc}); "
            "install flux-python matching the instance's flux-core into this environment",
        )
        return EXIT_SETUP
    try:
        handle = flux.Flux()
    except OSError as exc:
        log(syslog.LOG_ERR, f"error: cannot connect to the Flux instance: {exc}")
        return EXIT_SETUP
    # The instance owner's service registers the name (a lock: one per instance); a
    # guest's own service (for that guest's qpu.account=user jobs) has neither the
    # right nor the need: no service name, no status endpoint.
    registered = instance_owner(handle)
    if registered:
        try:
            handle.service_register(name).get()
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                log(syslog.LOG_ERR, f"error: the qpu handler service '{name}' is already running")
                return EXIT_RUNNING
            registered = False
    try:
        runner = ServiceRunner(
            handle,
            options,
            log,
            owner=registered,
            module_name=name.removesuffix(SERVICE_SUFFIX) if registered else None,
        )
    except ServiceError as exc:
        log(syslog.LOG_ERR, f"error: {exc}")
        return EXIT_SETUP
    watchers = []

    def on_status(h: Any, typemask: int, msg: Any, arg: Any) -> None:
        try:
            view = _caller_view(msg, msg.payload)
            h.respond(msg, {"running": True, "pid": os.getpid(), **runner.status(view)})
        except Exception as exc:  # never stop the reactor for a status request
            log(syslog.LOG_ERR, f"status: {exc}")

    def on_usage(h: Any, typemask: int, msg: Any, arg: Any) -> None:
        try:
            h.respond(msg, runner.usage(msg))
        except GuestError as exc:
            _respond_error(h, msg, errno.EPERM, str(exc))
        except ValueError as exc:
            _respond_error(h, msg, errno.EINVAL, str(exc))
        except Exception as exc:  # never stop the reactor for a usage request
            log(syslog.LOG_ERR, f"usage: {exc}")
            _respond_error(h, msg, errno.EIO, f"usage: {exc}")

    def on_task(h: Any, typemask: int, msg: Any, arg: Any) -> None:
        def reply(number: int, value: Any) -> None:
            if number:
                _respond_error(h, msg, number, str(value))
            else:
                with contextlib.suppress(OSError):
                    h.respond(msg, value)

        try:
            runner.read_task(msg, reply)
        except GuestError as exc:
            reply(errno.EPERM, str(exc))
        except (ValueError, FluxQuantumError) as exc:
            reply(errno.EINVAL, str(exc))
        except Exception as exc:  # never stop the reactor for a task request
            log(syslog.LOG_ERR, f"task: {exc}")
            reply(errno.EIO, f"task: {exc}")

    def on_signal(signum: int, frame: Any) -> None:
        # A Python handler (it runs at the next callback: the tick timer fires every few
        # tenths of a second); a Flux signal watcher lost to Python's own SIGINT handler,
        # whose KeyboardInterrupt a reactor callback swallowed.
        log(syslog.LOG_INFO, f"signal {signum}: stopping")
        handle.reactor_stop()

    def on_lifeline(h: Any, watcher: Any, fd: int, revents: int, arg: Any) -> None:
        try:
            data = os.read(0, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            log(syslog.LOG_INFO, "the supervisor is gone: stopping")
            h.reactor_stop()

    if registered:
        for topic, callback in (
            ("status", on_status),
            ("usage", on_usage),
            ("task", on_task),
        ):
            w = handle.msg_watcher_create(
                callback,
                flux.constants.FLUX_MSGTYPE_REQUEST,
                f"{name}.{topic}",
                rolemask=flux.constants.FLUX_ROLE_OWNER | flux.constants.FLUX_ROLE_USER,
            )
            w.start()
            watchers.append(w)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    if supervised:
        os.set_blocking(0, False)
        w = handle.fd_watcher_create(0, on_lifeline, events=flux.constants.FLUX_POLLIN)
        w.start()
        watchers.append(w)
    runner.start()
    if announce is not None:
        announce(READY_LINE)
    try:
        handle.reactor_run()
    except KeyboardInterrupt:
        # Flux's reactor_run watches SIGINT itself (stop, then KeyboardInterrupt):
        # Ctrl-C is an orderly stop like SIGTERM.
        log(syslog.LOG_INFO, f"signal {int(signal.SIGINT)}: stopping")
    finally:
        runner.stop()
        for w in watchers:
            with contextlib.suppress(Exception):
                w.stop()
    return 0


def _respond_error(handle: Any, msg: Any, number: int, text: str) -> None:
    with contextlib.suppress(Exception):
        handle.flux_respond_error(msg.handle, number, text.encode())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flux_quantum.service [--name N] [--supervised] KEY=VALUE...``."""
    parser = argparse.ArgumentParser(
        prog="python -m flux_quantum.service",
        description="The flux-quantum handler service (normally started by its supervisor).",
    )
    parser.add_argument("--name", default=service_name("qpu_handlers"))
    parser.add_argument(
        "--supervised",
        action="store_true",
        help="log <level>lines for the supervisor and stop when standard input closes",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("options", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    log = RepeatFilter(stream_log(sys.stderr, args.supervised, args.verbose))

    def announce(line: str) -> None:
        print(line, flush=True)

    return serve(
        args.options,
        name=args.name,
        log=log,
        supervised=args.supervised,
        announce=announce if args.supervised else None,
    )
