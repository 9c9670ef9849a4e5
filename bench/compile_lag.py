"""Other jobs' release lag while programs compile (issue 42), the arm bench/compile.py
runs after its corpus.

This module owns that arm: one instance per setting (``flux start --test-size=1``, the
quantum plugin, Fluxion, the handler service with its defaults but fast polls) and the
vendor emulator (its IBM side strict, one Braket QPU), in two settings, each run
``--lag-repeats`` times, interleaved (on, off; off, on; ...), each run a fresh instance:

- **on**: the compile stage as shipped (``[quantum.compile]`` absent: on, 2 workers);
- **off**: ``[quantum.compile] enabled = false``.

Each run: ``--others`` jobs (``qpu.device=others``, the benchmarks' 4-qubit GHZ, checked
and sent as written, ``release_at=done``) are submitted and their tasks created while
the emulator's clock stands still; then the burst: ``--compiles`` jobs to ``ibm:any``,
each an MQT Bench circuit of 20 to 30 qubits in standard gates (the corpus's, written
by Qiskit's exporter), which the stage maps onto the 156-qubit heavy-hex backend. The
clock starts once the service has taken the burst in (adopted every job, chosen its
device, its vendor calls' queue empty again): a burst of
submissions holds other jobs' polls back for about a second whatever the stage (a
shared queue of vendor calls), and that is not what this arm measures. The others'
tasks then run one after the other on their QPU (``--other-task`` seconds each), so
their release points fall while the burst compiles. Every create on the IBM backend is refused by the emulator
(an injected ``CreateJob`` fault, ``qpu.failover=fail``; with the stage off the circuits
are not ISA circuits either): in both settings the burst's jobs cost the service the
same reads, selections and refused creates, and differ by the compile stage alone (the
cost of tracking that many more tasks is bench/scale.py's).

Measured per other job: the release lag, from its task's end on the emulator's
timeline (the release point of ``done``) to its ``qpu-release`` event, split at its
``qpu-ready`` (the service saw the end and released it; then the plugin). The figure
is p50/p99 over the others of every run of a setting, with the stage on against off;
the bar is p99 on/off <= 1.10. Also reported: how many of the others' release points
fell before the burst's last job ended (the measurement's overlap), the burst's span,
and how the service answered a status request meanwhile (``Probe``: its reactor's
responsiveness, its vendor calls' queue).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchlib import PROGRAM, percentile, verdict
from merge import OnInstance

from flux_quantum.protocol import events

BAR = 1.10  # p99 with the stage on over p99 with it off, at most
OTHERS = "others"
OTHERS_ARN = "arn:aws:braket:us-east-1::device/qpu/emulator/Others"
BACKEND = "ibm_kingston"
SHOTS = 100
FAST = (
    "--poll-min=0.1", "--poll-cold-max=1", "--poll-max=2", "--scan-interval=0.2",
    "--cluster-interval=0.5", "--device-check-interval=5", "--tick=0.05", "--error-limit=1",
)  # fmt: skip
SETTINGS = ("on", "off")
TAKEN_IN = 60.0  # seconds the service may take to adopt the burst and read its programs


@dataclass(frozen=True)
class Other:
    """One other job's release: wall times, its task's end the release point."""

    setting: str
    job: str
    task: str
    point: float
    ready: float | None
    release: float

    @property
    def lag(self) -> float:
        return self.release - self.point


@dataclass
class Setting:
    """One setting's run, or its runs pooled (``pooled``)."""

    setting: str
    compiles: int  # a run's burst
    others: int  # other jobs, over the runs
    repeat: int = 0
    runs: int = 1
    lags: list[float] = field(default_factory=list)
    detect: list[float] = field(default_factory=list)  # release point -> qpu-ready
    during: list[float] = field(default_factory=list)  # lags of the others whose
    # release point fell while the burst was handled (before its last job ended)
    compiled: int = 0  # burst jobs with a qpu-compile event
    burst_seconds: float = math.nan  # the burst's submit -> its last job's end
    # The service's status request during the burst (``Probe``): its answer's time,
    # p99 and max (the reactor's responsiveness), and its vendor workers' queue at most.
    status_p99: float = math.nan
    taken_in: float = math.nan  # the burst's submit -> taken in, the others' tasks run
    status_max: float = math.nan
    queued_max: int = 0
    wall: float = 0.0
    error: str = ""
    notes: list[str] = field(default_factory=list)


def pooled(runs: Sequence[Setting]) -> Setting:
    """A setting's runs as one: every other job's lag, the counts summed, the burst's
    and the probe's worst."""
    first = runs[0]
    out = Setting(first.setting, first.compiles, 0, runs=len(runs))
    for run in runs:
        out.others += run.others
        out.lags += run.lags
        out.detect += run.detect
        out.during += run.during
        out.compiled += run.compiled
        out.queued_max = max(out.queued_max, run.queued_max)
        out.wall += run.wall
        out.notes += [note for note in run.notes if note not in out.notes]
        if run.error:
            out.error = "; ".join(filter(None, [out.error, f"run {run.repeat}: {run.error}"]))
    for name in ("burst_seconds", "status_p99", "status_max", "taken_in"):
        values = [getattr(r, name) for r in runs if not math.isnan(getattr(r, name))]
        setattr(out, name, max(values, default=math.nan))
    return out


def after(s: Setting) -> list[float]:
    """The lags of the others released after the burst was handled (the rest)."""
    rest = Counter(s.lags)
    rest.subtract(s.during)
    return sorted(rest.elements())


def settings(runs: Sequence[Setting]) -> tuple[Setting, Setting]:
    """The runs pooled, stage on and off."""
    on, off = (pooled([r for r in runs if r.setting == s]) for s in SETTINGS)
    return on, off


def figures(lags: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 of ``lags`` (NaN for none)."""
    return percentile(lags, 0.5), percentile(lags, 0.99)


def ratio(on: float, off: float) -> float:
    """``on`` over ``off``; infinite when ``off`` is 0 and ``on`` is not, NaN when
    either is missing."""
    if math.isnan(on) or math.isnan(off):
        return math.nan
    if off <= 0:
        return 1.0 if on <= 0 else math.inf
    return on / off


def met(on: Setting, off: Setting) -> bool:
    """The bar: p99 on/off <= BAR, both settings measured every other job, none failed."""
    whole = all(not s.error and len(s.lags) == s.others > 0 for s in (on, off))
    return whole and ratio(figures(on.lags)[1], figures(off.lags)[1]) <= BAR


def summary(on: Setting, off: Setting) -> list[str]:
    """The arm's lines: each setting's figures, the ratio and the bar's verdict."""
    lines = []
    for s in (on, off):
        p50, p99 = figures(s.lags)
        d50, d99 = figures(s.detect)
        line = (
            f"  compile {s.setting}: release lag p50 {p50:.3f} s, p99 {p99:.3f} s, max "
            f"{max(s.lags, default=math.nan):.3f} s over {len(s.lags)}/{s.others} others in "
            f"{s.runs} run(s) (end -> qpu-ready p50 {d50:.3f} s, p99 {d99:.3f} s); "
            f"{len(s.during)} released while the burst was handled (their p99 "
            f"{figures(s.during)[1]:.3f} s); bursts of {s.compiles}: "
            f"{s.compiled} compiled, each ended at most {s.burst_seconds:.1f} s after its "
            f"submit, taken in after at most {s.taken_in:.1f} s"
        )
        lines.append(line)
        lines.append(
            f"  compile {s.setting}: meanwhile the service answered a status request in p99 "
            f"{s.status_p99:.3f} s, max {s.status_max:.3f} s; vendor calls queued at most "
            f"{s.queued_max}"
        )
        if s.error:
            lines.append(f"  compile {s.setting}: FAILED: {s.error}")
        lines += [f"  compile {s.setting}: {note}" for note in s.notes]
    idle = figures(after(off))[1]
    lines.append(
        f"  against the stage off's others released after its burst was handled (the service "
        f"idle again): p99 {idle:.3f} s over {len(after(off))}; the stage on's p99 over it "
        f"{ratio(figures(on.lags)[1], idle):.2f}"
    )
    r = ratio(figures(on.lags)[1], figures(off.lags)[1])
    lines.append(
        f"target other jobs' release lag p99 within 10 % while {on.compiles} programs compile: "
        f"p99 on/off {r:.3f} (<= {BAR:.2f}): {verdict(met(on, off))}"
    )
    return lines


# --- the run ----------------------------------------------------------------------------


class Probe(threading.Thread):
    """Asks the service for its status every ``interval`` seconds (its own handle): how
    long each answer took, and its vendor workers' queue then. ``taken_in`` is set once
    the service has adopted ``expect`` jobs, chosen a device for each and its vendor
    calls' queue is empty: the burst's reads and selections are done (its creates
    follow its compiles)."""

    def __init__(self, uri: str, interval: float = 0.2) -> None:
        super().__init__(name="status-probe", daemon=True)
        self.uri, self.interval = uri, interval
        self.samples: list[tuple[float, float, int]] = []  # (asked at, seconds, queued)
        self.done = threading.Event()
        self.expect: int | None = None
        self.taken_in = threading.Event()

    def run(self) -> None:
        import flux

        handle = flux.Flux(self.uri)
        while not self.done.wait(self.interval):
            asked = time.time()
            try:
                status = handle.rpc("qpu_handlers.status", {}).get()
            except OSError:
                continue
            queued = int((status.get("workers") or {}).get("queued", 0))
            self.samples.append((asked, time.time() - asked, queued))
            adopted = int((status.get("counters") or {}).get("adopted", 0))
            units = status.get("units") or []
            choosing = sum(1 for u in units for t in u.get("tasks") or () if not t.get("device"))
            if self.expect is not None and adopted >= self.expect and not choosing + queued:
                self.taken_in.set()

    def stop(self, run: Setting, start: float, end: float) -> None:
        self.done.set()
        self.join(timeout=10)
        during = [(s, q) for t, s, q in self.samples if start <= t <= end]
        if during:
            run.status_p99 = percentile([s for s, _ in during], 0.99)
            run.status_max = max(s for s, _ in during)
            run.queued_max = max(q for _, q in during)


def emulator_scenarios(other_task: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Braket QPU of the others and the IBM backend of the burst (every create
    refused: a fault with IBM's 400 and code 1002)."""
    braket = {
        "devices": [
            {
                "arn": OTHERS_ARN,
                "name": "Others",
                "qubits": 20,
                "cost": {"price": 0.001, "unit": "shot", "task_price": 0.3},
                "queue": {"depth": 0, "service_time": other_task, "distribution": "fixed"},
            }
        ]
    }
    ibm = {
        "backends": [{"name": BACKEND, "qubits": 156, "queue": {"depth": 0, "service_time": 5}}],
        "faults": [{"operation": "CreateJob", "backend": BACKEND, "status": 400, "code": 1002}],
    }
    return braket, ibm


def catalog(jobs: int, other_task: float) -> str:
    return (
        "devices:\n"
        f"  - {{name: {OTHERS}, vendor: local, id: {OTHERS_ARN}, class: qpu, qubits: 20,"
        f" region: us-east-1, slots: {jobs}, price: {{per_task: 0.3, per_shot: 0.001}},"
        f" properties: {{drain_seconds_per_task: {other_task:g}}}}}\n"
        f"  - {{name: kingston, vendor: ibm, id: {BACKEND}, class: qpu, qubits: 156,"
        f" slots: {jobs}, price: {{per_minute: 96}}, properties: {{drain_seconds_per_task: 5}}}}\n"
    )


class World(OnInstance):
    """One setting's instance, emulator and service."""

    def __init__(self, work: Path, setting: str, jobs: int, other_task: float) -> None:
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, Scenario
        from flux_quantum.emulator.clock import ScaledClock
        from flux_quantum.emulator.ibm import IbmScenario

        self.work = work
        for sub in ("conf", "state", "programs"):
            (work / sub).mkdir(parents=True)
        config = instance_config()
        if setting == "off":
            config += "\n[quantum.compile]\nenabled = false\n"
        (work / "conf" / "quantum.toml").write_text(config)
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(catalog(jobs, other_task))
        braket, ibm = emulator_scenarios(other_task)
        self.clock = ScaledClock(1.0, paused=False)
        self.emulator = Emulator(
            Scenario.from_dict(braket, source="bench"),
            clock=self.clock,
            ibm=IbmScenario.from_dict(ibm),
        ).start()
        self.start_instance(work, self.emulator, self.catalog)
        import flux

        self.handle = flux.Flux(self.env["FLUX_URI"])
        self.flux(
            "quantum", "service", "start", f"--catalog={self.catalog}",
            f"--emulator-url={self.emulator.url}", *FAST,
        )  # fmt: skip

    # -- jobs

    def submit(self, qpu: dict[str, Any]) -> Any:
        """A held job (its future): ``true`` in job-exec's test mode once released."""
        from flux.job import JobspecV1, submit_async

        spec = JobspecV1.from_command(
            ["true"], cwd=str(self.work), environment={"PATH": os.environ.get("PATH", "")}
        )
        spec.setattr("system.exec.test.run_duration", "0.01s")
        spec.setattr("system.qpu", {"shots": SHOTS, "release_at": "done", **qpu})
        return submit_async(self.handle, spec.dumps())

    def other(self, index: int) -> Any:
        path = self.work / "programs" / f"other-{index:03d}.qasm"
        path.write_text(PROGRAM)
        return self.submit({"device": OTHERS, "program": str(path)})

    def compile_job(self, index: int, text: str) -> Any:
        # Its own file and text: no two jobs share a program.
        path = self.work / "programs" / f"compile-{index:03d}.qasm"
        path.write_text(f"// burst job {index}\n{text}")
        return self.submit({"device": "ibm:any", "program": str(path), "failover": "fail"})

    def wait_event(self, jobid: str, name: str, timeout: float) -> None:
        self.flux("job", "wait-event", "-t", f"{timeout:g}", jobid, name, timeout=timeout + 30)

    def eventlog(self, jobid: str) -> list[events.Event]:
        from flux.job import JobID, job_kvs_lookup

        found = job_kvs_lookup(self.handle, JobID(jobid), keys=["eventlog"], decode=False)
        return events.parse_eventlog((found or {}).get("eventlog"))

    def drain(self, timeout: float) -> None:
        self.flux("queue", "drain", f"--timeout={timeout:g}s", timeout=timeout + 30)

    def warm(self, text: str) -> None:
        """One job of each kind first: the vendors' SDKs imported, the compile workers
        started, the IBM backend's target read (a site's service runs for weeks)."""
        for future in (self.other(999), self.compile_job(999, text)):
            future.get_id()
        self.drain(300)
        self.flux("job", "purge", "--force", "--num-limit=0", check=False)


def run_setting(
    base: Path, setting: str, programs: Sequence[str], compiles: int, others: int,
    other_task: float, timeout: float,
) -> Setting:  # fmt: skip
    """One setting: warm up, the others held with their tasks created (clock still),
    the burst submitted as the clock starts, every job ended; the others' lags."""
    run = Setting(setting, compiles, others)
    started = time.monotonic()
    world = World(base / setting, setting, compiles + others + 2, other_task)
    try:
        world.warm(programs[0])
        world.clock.set_speed(0.0)
        ids = [str(f.get_id()) for f in [world.other(i) for i in range(others)]]
        for jobid in ids:
            world.wait_event(jobid, events.TASK, timeout)
        probe = Probe(world.env["FLUX_URI"])
        probe.expect = 2 + others + compiles  # the warm-up's two, the others, the burst
        probe.start()
        t_burst = time.time()
        futures = [world.compile_job(i, programs[i % len(programs)]) for i in range(compiles)]
        burst = [str(f.get_id()) for f in futures]
        # The others' tasks run once the burst is taken in: a burst of submissions holds
        # polls back in both settings (measured apart: ``taken_in`` False), the compiles
        # only with the stage on.
        if not probe.taken_in.wait(TAKEN_IN):
            run.notes.append(f"the burst was not taken in within {TAKEN_IN:g} s")
        world.clock.start()
        run.taken_in = time.time() - t_burst
        world.drain(timeout)
        measure(world, run, ids, burst, t_burst)
        probe.stop(run, t_burst, t_burst + run.burst_seconds)
    except Exception as exc:  # a failed setting is reported, not hidden
        run.error = f"{type(exc).__name__}: {exc}"[:400]
    finally:
        (world.work / "dmesg.log").write_text(world.flux("dmesg", "-H", check=False))
        world.close()
    run.wall = time.monotonic() - started
    return run


def measure(
    world: World, run: Setting, others: list[str], burst: list[str], t_burst: float
) -> None:
    ends = []
    for jobid in burst:
        log = world.eventlog(jobid)
        run.compiled += events.first(log, events.COMPILE) is not None
        end = events.first(log, "clean")
        if end is not None:
            ends.append(end.timestamp)
        exc = events.first(log, "exception")
        if exc is not None and not run.notes:
            note = str(exc.context.get("note"))
            run.notes.append(f"a burst job ended: {note.split('; ')[0]}")  # its first clause
    t_end = max(ends, default=math.nan)
    run.burst_seconds = t_end - t_burst
    for jobid in others:
        log = world.eventlog(jobid)
        release = events.first(log, events.RELEASE)
        ready = events.first(log, events.READY)
        task = str(release.context.get("task")) if release is not None else ""
        ended = world.emulator.task_timeline(task).ended if task else None
        if release is None or ended is None:
            if len(run.notes) < 4:
                run.notes.append(f"other job {jobid}: not released, or its task did not end")
            continue
        other = Other(
            run.setting, jobid, task, world.clock.wall(ended),
            ready.timestamp if ready else None, release.timestamp,
        )  # fmt: skip
        run.lags.append(other.lag)
        if other.ready is not None:
            run.detect.append(other.ready - other.point)
        if t_burst <= other.point <= t_end:
            run.during.append(other.lag)


def measure_lag(
    programs: Sequence[str], compiles: int, others: int, repeats: int = 1,
    other_task: float = 0.5, timeout: float = 900.0,
) -> list[Setting]:  # fmt: skip
    """``repeats`` runs of both settings, interleaved (on, off; then off, on; ...);
    ``programs`` are cycled through by each burst."""
    if shutil.which("flux") is None:
        raise RuntimeError("the release-lag arm needs Flux (flux-core and Fluxion) on PATH")
    base = Path(tempfile.mkdtemp(prefix="fq-compile-lag-"))
    runs = []
    try:
        for repeat in range(repeats):
            for setting in SETTINGS if repeat % 2 == 0 else SETTINGS[::-1]:
                print(f"-- release lag, compile {setting}, run {repeat}: {compiles} programs, "
                      f"{others} others", flush=True)  # fmt: skip
                run = run_setting(
                    base / str(repeat), setting, programs, compiles, others, other_task, timeout
                )
                run.repeat = repeat
                runs.append(run)
                print("\n".join(summary_of(run)), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return runs


def summary_of(s: Setting) -> list[str]:
    p50, p99 = figures(s.lags)
    out = [f"   p50 {p50:.3f} s, p99 {p99:.3f} s, {len(s.lags)}/{s.others} others, "
           f"{s.compiled} compiled, {s.wall:.0f} s wall {s.error}"]  # fmt: skip
    return out + [f"   {note}" for note in s.notes]


def record(runs: Sequence[Setting], command: str, commit: str) -> dict[str, Any]:
    """The arm's part of bench/results/compile.json."""
    return {
        "command": command,
        "commit": commit,
        "runs": [asdict(run) for run in runs],
        "summary": summary(*settings(runs)),
    }


def merged_text(text: str, lines: list[str], command: str, commit: str) -> str:
    """bench/results/compile.txt with the arm's figures: its target line replaced by
    the arm's verdict, and its section (command, commit, figures) in place of an
    earlier one or at the end."""
    marker = "release lag of other jobs while programs compile"
    head = text.split(f"\n{marker}", 1)[0].rstrip("\n")
    target = next(line for line in lines if line.startswith("target "))
    kept = [target if line.startswith("target other jobs' release lag") else line
            for line in head.splitlines()]  # fmt: skip
    section = [
        "",
        f"{marker} (bench/compile_lag.py)",
        f"$ {command}",
        f"commit {commit}",
        *lines,
        "  lag: a job's qpu-release minus its task's end on the emulator (release_at=done);",
        "  the others' tasks were created before the burst, the clock still, and ran once",
        "  the service had taken the burst in; every IBM create refused in both settings",
        "  (the stage is all that differs)",
    ]
    return "\n".join(kept + section) + "\n"


def merged_json(old: Any, lag: dict[str, Any], corpus: dict[str, Any] | None) -> dict[str, Any]:
    """bench/results/compile.json with the arm's record: ``corpus`` (a new corpus run)
    or the one already there (an older record's list of rows is that run's rows)."""
    if corpus is None:
        corpus = old.get("corpus") if isinstance(old, dict) else {"rows": old}
    return {"corpus": corpus, "lag": lag}


if __name__ == "__main__":
    sys.exit("run through bench/compile.py (--only-lag for this arm alone)")
