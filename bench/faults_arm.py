"""bench/faults.py's arm run: a throwaway instance (``Broker``) and its handler service,
the workload submitted while the faults and disruptions land, each recovery timed, and
the promise checker's findings (``ArmResult``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faults_plan import (
    PROGRAMS,
    STATE_DEPEND,
    STATES_ACTIVE,
    STEP,
    Disruption,
    FaultSpec,
    JobPlan,
    catalog,
    is_qpu_name,
    scenarios,
)

# --- one instance: Flux, the service, the disruptions -------------------------------------


class Broker:
    """``flux start --test-size=1`` with a statedir, in the background; restartable."""

    def __init__(self, work: Path, env: Mapping[str, str], broker_opts: Sequence[str]) -> None:
        self.work, self.base_env, self.opts = work, dict(env), list(broker_opts)
        self.statedir = work / "state"
        self.statedir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}
        self.incarnation = 0

    def start(self) -> float:
        """Start the broker; the wall time its URI was up."""
        urifile, stopfile = self.work / "uri", self.work / "stop"
        urifile.unlink(missing_ok=True)
        stopfile.unlink(missing_ok=True)
        script = (
            f'echo "$FLUX_URI" > {shlex.quote(str(urifile))}.tmp && '
            f"mv {shlex.quote(str(urifile))}.tmp {shlex.quote(str(urifile))}; "
            f"while [ ! -e {shlex.quote(str(stopfile))} ]; do sleep 0.05; done"
        )
        cmd = ["flux", "start", "--test-size=1", "-c", str(self.work / "conf")]
        cmd += [f"-Sstatedir={self.statedir}", *self.opts, "sh", "-c", script]
        self.incarnation += 1
        self.log = open(self.work / f"broker-{self.incarnation}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.base_env
        )
        deadline = time.monotonic() + 60
        while not urifile.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"flux start failed: {self.logs()[-1500:]}")
            time.sleep(0.02)
        up = time.time()
        uri = urifile.read_text().strip()
        self.env = dict(os.environ, FLUX_URI=uri, XDG_STATE_HOME=str(self.work / "xdg"))
        self.env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + self.env["PATH"]
        if self.incarnation == 1:  # not after a restart: running jobs may wait for the service
            self.run("flux", "queue", "idle", "--quiet", "--timeout=30s", check=False)
        return up

    def logs(self) -> str:
        return "".join(
            p.read_text(errors="replace") for p in sorted(self.work.glob("broker-*.log"))
        )

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            list(cmd),
            env=self.env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)}: {(proc.stderr or proc.stdout).strip()}")
        return proc

    def stop(self) -> None:
        """An orderly shutdown, the statedir kept (what ``flux shutdown`` or ``systemctl
        restart flux`` does to a system instance)."""
        if self.proc is None:
            return
        with contextlib.suppress(Exception):  # the service's log, before it goes
            dmesg = self.run("flux", "dmesg", check=False, timeout=30).stdout
            (self.work / f"dmesg-{self.incarnation}.log").write_text(dmesg)
        (self.work / "stop").touch()
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()


def service_options(speed: float) -> list[str]:
    """The service's defaults scaled by the vendor clock's speed, with floors."""

    def scaled(default: float, floor: float) -> str:
        return f"{max(floor, default / speed):.4g}"

    return [
        f"--scan-interval={scaled(1.0, 0.1)}",
        f"--poll-min={scaled(0.5, 0.05)}",
        f"--poll-cold-max={scaled(30.0, 0.2)}",
        f"--poll-max={scaled(300.0, 0.5)}",
        f"--device-check-interval={scaled(15.0, 0.5)}",
        f"--cluster-interval={scaled(5.0, 0.5)}",
        f"--group-linger={scaled(60.0, 1.0)}",
        f"--loop-linger={scaled(5.0, 1.0)}",
        f"--retry-max={scaled(60.0, 1.0)}",
        f"--tick={scaled(0.2, 0.05)}",
        f"--startup-default={scaled(1.0, 0.05)}",
    ]


def python_for_service(work: Path) -> str:
    """The interpreter the supervisor starts the service with. The supervisor scrubs
    PYTHONPATH, so when this flux_quantum is not the one ``sys.executable`` imports
    (a worktree run with PYTHONPATH), a wrapper puts it back for the service only."""
    import flux_quantum

    src = str(Path(flux_quantum.__file__).resolve().parent.parent)
    probe = subprocess.run(
        [sys.executable, "-I", "-c", "import flux_quantum; print(flux_quantum.__file__)"],
        capture_output=True,
        text=True,
    )
    if probe.returncode == 0 and Path(probe.stdout.strip()).resolve().parent.parent == Path(src):
        return sys.executable
    wrapper = work / "python"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH={shlex.quote(src)} exec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def write_locks(pid: int, paths: Iterable[Path]) -> list[str]:
    """The POSIX WRITE locks ``pid`` holds on ``paths`` (by inode), from /proc/locks: SQLite
    holds one on byte 120 of the -shm file (WAL_WRITE_LOCK) for the whole of a write
    transaction, and on the database file in rollback mode."""
    inodes = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = path.stat()
            inodes[st.st_ino] = path.name
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        # 1: POSIX  ADVISORY  WRITE 1234 08:01:5678 120 120
        if len(parts) < 8 or parts[1] != "POSIX" or parts[3] != "WRITE":
            continue
        if parts[4] != str(pid):
            continue
        inode = int(parts[5].rsplit(":", 1)[1])
        if inode not in inodes:
            continue
        name = inodes[inode]
        start, end = parts[6], parts[7]
        on_write_byte = name.endswith("-shm") and int(start) <= 120 <= (
            int(end) if end != "EOF" else 1 << 62
        )
        if on_write_byte or not name.endswith(("-shm", "-wal")):
            held.append(f"{name} {start}-{end}")
    return held


@dataclass
class Recovery:
    kind: str  # kill | restart | ledger
    at: float  # wall seconds after the arm's start
    seconds: float | None  # to full work; None: not back within the limit
    held: int  # jobs held at the moment
    note: str = ""


@dataclass
class ArmResult:
    arm: str
    seed: int
    jobs: dict[str, int] = field(default_factory=dict)  # submitted per pattern
    qpu_jobs: int = 0  # jobs with a qpu request (loop steps and group members included)
    recoveries: list[Recovery] = field(default_factory=list)
    report: dict[str, Any] | None = None
    findings: dict[str, Any] | None = None
    calls: int = 0
    wall_s: float = 0.0
    drained: bool = True
    dropped: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def calls_per_job(self) -> float:
        return self.calls / self.qpu_jobs if self.qpu_jobs else float("nan")


class Arm:
    """One arm: an emulator, an instance, the service, the workload and the disruptions."""

    def __init__(
        self,
        name: str,
        work: Path,
        args: argparse.Namespace,
        plan: Sequence[FaultSpec],
        disruptions: Sequence[Disruption],
        say: Callable[[str], None],
    ) -> None:
        self.name, self.work, self.args, self.say = name, work, args, say
        self.plan, self.disruptions = plan, disruptions
        self.secrets = (
            "fqsec-" + secrets.token_hex(12),  # AWS_SECRET_ACCESS_KEY
            "fqkey-" + secrets.token_hex(12),  # the IBM API key
        )
        self.result = ArmResult(name, args.seed)
        self.jobids: list[int] = []
        self.loops: list[str] = []
        self.cancels: list[tuple[float, int]] = []
        self._local = threading.local()
        self.last_status: dict[str, Any] | None = None
        self.backoff: float | None = None
        self.watch: threading.Thread | None = None

    # -- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        from flux_quantum.cli.plugin import instance_config
        from flux_quantum.emulator import Emulator, ScaledClock, Scenario
        from flux_quantum.emulator.ibm import IbmScenario

        work, args = self.work, self.args
        (work / "conf").mkdir(parents=True)
        self.ledger = work / "ledger.db"
        (work / "conf" / "quantum.toml").write_text(
            instance_config() + f'\n[quantum.ledger]\npath = "{self.ledger}"\n'
        )
        self.catalog = work / "backends.yaml"
        self.catalog.write_text(catalog(args.speed))
        self.programs = []
        for k, text in enumerate(PROGRAMS):
            path = work / f"program{k}.qasm"
            path.write_text(text)
            self.programs.append(path)
        (work / "step.py").write_text(STEP)
        braket, ibm, dropped = scenarios(self.plan)
        self.result.dropped = dropped
        (work / "scenario.json").write_text(json.dumps({"braket": braket, "ibm": ibm}, indent=1))
        self.clock = ScaledClock(args.speed, paused=False, epoch=datetime.now(UTC))
        self.emulator = Emulator(
            Scenario.from_dict(braket),
            clock=self.clock,
            seed=args.seed,
            ibm=IbmScenario.from_dict(ibm),
        ).start()
        exe = Path(sys.executable).parent / "flux-quantum"
        broker_opts = subprocess.run(
            [str(exe), "config", "--broker-opts"], capture_output=True, text=True, check=True
        ).stdout.split()
        # What a site exports for its service: the broker's environment carries the
        # secrets; the campaign's own (that of the jobs it submits) does not.
        env = {
            **os.environ,
            "AWS_SECRET_ACCESS_KEY": self.secrets[0],
            "AWS_ACCESS_KEY_ID": "AKIAFQCAMPAIGN",
            "QRMI_IBM_QCS_IAM_APIKEY": self.secrets[1],
            "FLUX_QUANTUM_EMULATOR_URL": self.emulator.url,
            "XDG_STATE_HOME": str(work / "xdg"),
        }
        self.broker = Broker(work, env, broker_opts)
        self.broker.start()
        self.python = python_for_service(work)
        # The jobs' environment: the campaign's own, never the broker's secrets.
        self.job_env = {
            k: v
            for k, v in self.broker.env.items()
            if k in ("PATH", "PYTHONPATH", "HOME", "LANG", "XDG_STATE_HOME")
        }
        self.start_service()

    def start_service(self) -> None:
        self.broker.run(
            "flux",
            "quantum",
            "service",
            "start",
            f"--catalog={self.catalog}",
            f"--emulator-url={self.emulator.url}",
            f"--python={self.python}",
            *service_options(self.args.speed),
            timeout=120,
        )

    def _h(self) -> Any:
        """This thread's Flux handle on the current broker (the ledger watch runs in a
        thread of its own; a restarted broker has a new URI)."""
        import flux

        uri = self.broker.env["FLUX_URI"]
        if getattr(self._local, "uri", None) != uri:
            self._local.handle, self._local.uri = flux.Flux(uri), uri
        return self._local.handle

    # -- Flux ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        # The supervisor relays the request to the service: while a killed service is
        # being replaced the answer can take seconds, so ask often and give up soon.
        try:
            self.last_status = dict(self._h().rpc("qpu_handlers.status", {}).wait_for(0.5).get())
        except (OSError, TimeoutError):
            self.last_status = None
        return self.last_status

    def jobs(self, states: int) -> list[int]:
        payload = {"max_entries": 0, "attrs": [], "states": states, "results": 0, "userid": -1}
        try:
            answer = self._h().rpc("job-list.list", payload).get()
        except OSError:
            return []
        return [int(j["id"]) for j in answer["jobs"]]

    def held(self) -> set[int]:
        return set(self.jobs(STATE_DEPEND))

    def full_work(self, held: set[int], old_pid: int | None) -> bool:
        """The service is back: a new process answers, and every job held at the moment
        of the disruption that is still held is tracked again."""
        status = self.status()
        if not status or not status.get("running", True):
            return False
        if old_pid is not None and status.get("pid") == old_pid:
            return False
        tracked = {int(j) for unit in status.get("units", []) for j in unit.get("jobs", [])}
        return not self.still_held(held - tracked)

    def still_held(self, jobids: Iterable[int]) -> set[int]:
        """Which of ``jobids`` are held now, asked one by one: after a restart job-list
        fills up slowly, and a job it does not know yet counts as held."""
        out = set()
        for jobid in jobids:
            try:
                future = self._h().rpc("job-list.list-id", {"id": jobid, "attrs": ["state"]})
                state = future.wait_for(0.5).get()["job"]["state"]
            except (OSError, TimeoutError):
                out.add(jobid)
                continue
            if state == STATE_DEPEND:
                out.add(jobid)
        return out

    def wait_full(self, held: set[int], old_pid: int | None, limit: float) -> float | None:
        """Seconds until ``full_work``; None past ``limit``. ``self.backoff``: the
        supervisor's restart delay, as its status announced it (None: not seen)."""
        t0 = time.monotonic()
        self.backoff: float | None = None
        while time.monotonic() - t0 < limit:
            if self.full_work(held, old_pid):
                return time.monotonic() - t0
            supervisor = (self.last_status or {}).get("supervisor") or {}
            if supervisor.get("restart_in") is not None and self.backoff is None:
                self.backoff = time.monotonic() - t0 + float(supervisor["restart_in"])
            time.sleep(0.05)
        return None

    def submit(self, job: JobPlan) -> None:
        import flux.job
        from flux.job import JobspecV1

        if job.pattern == "loop":
            self._loop(job)
            return
        request = job.request(self.programs)
        # A job released before its task is done reads its result as an application
        # does (and fails, saying why, when the task does); one released at done has it.
        command = ["true"]
        if job.release_at != "done":
            exe = str(Path(sys.executable).parent / "flux-quantum")
            command = [exe, "task", "--wait", "--timeout=600", "--interval=0.2"]
        for member in range(job.members):
            spec = JobspecV1.from_command(command, num_tasks=1, cores_per_task=1)
            spec.duration = 600
            spec.environment = self.job_env
            spec.cwd = str(self.work)
            spec.setattr("system.job.name", f"{job.pattern}-{job.index}.{member}")
            spec.setattr("system.qpu", request)
            jobid = int(flux.job.submit(self._h(), spec))
            self.jobids.append(jobid)
            if job.cancel_after is not None:
                self.cancels.append((time.monotonic() + job.cancel_after, jobid))

    def _loop(self, job: JobPlan) -> None:
        name = f"fq-loop-{job.index}"
        cmd = [
            "flux",
            "quantum",
            "loop",
            "submit",
            f"--qpu=local:{job.device}" if job.device != "any" else "--qpu=local:any",
            f"--program={self.programs[job.index % len(self.programs)]}",
            f"--shots={job.shots}",
            f"--max-iterations={job.iterations}",
            f"--name={name}",
            f"--dir={self.work / 'loops' / name}",
            *(["--session=dedicated"] if job.session else []),
            "-n1",
            "-t",
            "10m",
            sys.executable,
            str(self.work / "step.py"),
        ]
        proc = self.broker.run(*cmd, check=False)
        if proc.returncode != 0:
            self.result.errors.append(f"loop {job.index}: {(proc.stderr or proc.stdout).strip()}")
        else:
            self.loops.append(name)

    # -- disruptions ----------------------------------------------------------------------

    def disrupt(self, d: Disruption, at: float) -> Recovery | None:
        """Do ``d``; its recovery, or None for the ledger writer's kill, which a thread
        of its own watches for (the campaign goes on meanwhile: it makes the writes)."""
        self.join_watch()
        held = self.held()
        status = self.status() or {}
        pid = status.get("pid")
        if d.kind == "restart":
            self.broker.stop()
            up = self.broker.start()
            self.start_service()
            t_full = self.wait_full(held, None, 120.0)
            seconds = None if t_full is None else time.time() - up
            return Recovery("restart", at, seconds, len(held), "from the broker up")
        if not pid:
            return Recovery(d.kind, at, None, len(held), "no service pid")
        if d.kind == "ledger":

            def watch(pid: int = int(pid)) -> None:
                note, t_kill = self._stop_mid_write(pid)
                held = self.held()  # the jobs held at the kill
                t_full = self.wait_full(held, pid, 120.0)
                seconds = None if t_full is None else time.monotonic() - t_kill
                rec = Recovery("ledger", at, seconds, len(held), note + self._backoff_note())
                self.result.recoveries.append(rec)
                self.say(
                    f"    ledger writer at {at:.0f}s: {rec.note}; back in "
                    + ("-" if seconds is None else f"{seconds:.2f}s")
                )

            self.watch = threading.Thread(target=watch, daemon=True)
            self.watch.start()
            return None
        os.kill(int(pid), signal.SIGKILL)
        t_kill = time.monotonic()
        t_full = self.wait_full(held, int(pid), 120.0)
        seconds = None if t_full is None else time.monotonic() - t_kill
        return Recovery(d.kind, at, seconds, len(held), self._backoff_note().lstrip("; "))

    def _backoff_note(self) -> str:
        if self.backoff is None:
            return ""
        return f"; supervisor restart delay ~{self.backoff:.1f}s"

    def join_watch(self) -> None:
        if self.watch is not None:
            self.watch.join()
            self.watch = None

    def _stop_mid_write(self, pid: int, limit: float = 40.0) -> tuple[str, float]:
        """Kill the service while it holds the ledger's write lock, proven: watch
        /proc/locks until the service holds SQLite's write lock on the ledger, SIGSTOP it,
        read /proc/locks again and SIGKILL it if it still holds the lock (stopped inside
        the transaction), else SIGCONT it and watch on; a plain kill -9 when no write is
        caught within ``limit`` seconds. What happened, and the monotonic time of the kill."""
        paths = [self.ledger, Path(f"{self.ledger}-wal"), Path(f"{self.ledger}-shm")]
        deadline = time.monotonic() + limit
        stops = 0
        while time.monotonic() < deadline:
            if not write_locks(pid, paths):
                time.sleep(0.0002)
                continue
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return "the service exited first", time.monotonic()
            stops += 1
            locks = write_locks(pid, paths)
            if locks:
                os.kill(pid, signal.SIGKILL)
                t_kill = time.monotonic()
                os.kill(pid, signal.SIGCONT)
                return f"killed mid-write, stopped holding {', '.join(locks)}", t_kill
            os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return (
            f"no ledger write caught in {limit:g}s ({stops} stop(s)): plain kill -9",
            time.monotonic(),
        )

    # -- the run -----------------------------------------------------------------------------

    def run(self, plan: Sequence[JobPlan]) -> ArmResult:
        t0 = time.monotonic()
        self.say(f"  {self.name}: {len(plan)} submissions over {self.args.window:g}s")
        pending = sorted(
            [(j.at, 0, j) for j in plan] + [(d.at, 1, d) for d in self.disruptions],
            key=lambda x: (x[0], x[1]),
        )
        for at, _, item in pending:
            while time.monotonic() - t0 < at:
                self._cancel_due()
                time.sleep(min(0.05, max(0.0, at - (time.monotonic() - t0))))
            if isinstance(item, JobPlan):
                try:
                    self.submit(item)
                except Exception as exc:  # a refusal is the campaign's error: said, not fatal
                    self.result.errors.append(f"submit {item.index}: {exc}")
                self.result.jobs[item.pattern] = self.result.jobs.get(item.pattern, 0) + 1
            else:
                rec = self.disrupt(item, round(time.monotonic() - t0, 1))
                if rec is None:
                    continue
                self.result.recoveries.append(rec)
                took = "not back" if rec.seconds is None else f"{rec.seconds:.2f}s"
                self.say(
                    f"    {rec.kind} at {rec.at:.0f}s: {rec.held} held, back in {took}"
                    + (f" ({rec.note})" if rec.note else "")
                )
        while self.cancels:
            self._cancel_due()
            time.sleep(0.05)
        self.join_watch()
        self.drain()
        self.result.wall_s = time.monotonic() - t0
        return self.result

    def _cancel_due(self) -> None:
        import flux.job

        now = time.monotonic()
        for due, jobid in [c for c in self.cancels if c[0] <= now]:
            self.cancels.remove((due, jobid))
            with contextlib.suppress(Exception):  # already ended: nothing to cancel
                flux.job.cancel(self._h(), jobid, "cancelled by the fault campaign")

    def drain(self) -> None:
        """Until no job is active, then the service idle (sessions closed, costs settled)."""
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline and self.jobs(STATES_ACTIVE):
            time.sleep(0.5)
        active = self.jobs(STATES_ACTIVE)
        left = max(10.0, deadline - time.monotonic())
        idle = self.broker.run(
            "flux",
            "quantum",
            "service",
            "status",
            "--wait-idle",
            f"{left:g}",
            "--json",
            check=False,
            timeout=left + 60,
        )
        self.result.drained = not active and idle.returncode == 0
        if not self.result.drained:
            self.say(
                f"    drain: {len(active)} job(s) still active"
                + ("" if idle.returncode == 0 else f"; {(idle.stderr or idle.stdout).strip()}")
            )

    def collect(self) -> None:
        """The checker's findings, the emulator's report, the calls."""
        res = self.result
        with contextlib.suppress(Exception):
            dmesg = self.broker.run("flux", "dmesg", check=False, timeout=30).stdout
            (self.work / f"dmesg-{self.broker.incarnation}.log").write_text(dmesg)
        res.qpu_jobs = self.qpu_job_count()
        try:
            res.report = self.emulator.report()  # type: ignore[attr-defined]
        except AttributeError:
            res.report = None
        res.calls = self.emulator.call_count()
        texts = {p.name: p.read_text(errors="replace") for p in sorted(self.work.glob("*.log"))}
        for loopdir in sorted((self.work / "loops").glob("*")):
            journal = loopdir / "journal.jsonl"
            if journal.exists():
                texts[f"{loopdir.name}/journal.jsonl"] = journal.read_text(errors="replace")
        try:
            from flux_quantum.testing import promises  # type: ignore[attr-defined]
        except ImportError:
            res.errors.append("the promise checker flux_quantum.testing.promises is not available")
            return
        res.findings = promises.check(self.gather_facts(texts)).to_dict()
        res.evidence = self.evidence(res.findings.get("violations") or [], texts)

    def qpu_job_count(self) -> int:
        """The instance's jobs with a qpu request, as job-list knows them."""
        return sum(1 for j in self.jobs(STATES_ACTIVE | 64) if self._is_qpu(j))

    def gather_facts(self, texts: Mapping[str, str]) -> Any:
        """What the promise checker judges: every job Flux knows, the emulator's bill,
        the ledger and ``texts`` (``flux_quantum.testing.promises.gather``)."""
        from flux_quantum.testing import promises

        return promises.gather(
            uri=self.broker.env["FLUX_URI"],
            emulator_url=self.emulator.url,
            ledger=self.ledger,
            texts=texts,
            secrets=self.secrets,
        )

    def eventlog_lines(self, jobid: int) -> list[str]:
        """Job ``jobid``'s eventlog as ``flux job eventlog`` prints it."""
        proc = self.broker.run("flux", "job", "eventlog", str(jobid), check=False)
        return proc.stdout.splitlines()

    def evidence(
        self, violations: Sequence[Mapping[str, Any]], texts: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """For each violation: the eventlog of every job it names and the log lines that
        name its job, task or session ids (the lead reads these, not the bench)."""
        out = []
        for v in violations[:50]:
            said = f"{v.get('subject', '')} {v.get('detail', '')}"
            jobs = sorted({int(j) for j in re.findall(r"\b(\d{8,})\b", said)})
            ids = set(re.findall(r"arn:aws:braket:\S*quantum-task/[0-9a-f-]+", said))
            ids |= set(re.findall(r"\b[a-z0-9]{20}\b|\b[0-9a-f]{12}\b", said))
            ids |= {str(j) for j in jobs}
            eventlogs = {}
            for jobid in jobs[:4]:
                eventlogs[str(jobid)] = self.eventlog_lines(jobid)[-40:]
            lines = [
                f"{name}: {line}"
                for name, text in texts.items()
                if name.startswith(("dmesg", "broker"))
                for line in text.splitlines()
                if any(i in line for i in ids) and ".debug" not in line
            ]
            out.append({**v, "eventlogs": eventlogs, "log": lines[:40]})
        return out

    def _is_qpu(self, jobid: int) -> bool:
        try:
            job = (
                self._h()
                .rpc("job-list.list-id", {"id": jobid, "attrs": ["annotations", "name"]})
                .get()["job"]
            )
        except OSError:
            return False
        return is_qpu_name(str(job.get("name", "")))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.broker.run("flux", "cancel", "--all", "--quiet", check=False, timeout=30)
        with contextlib.suppress(Exception):
            self.broker.run("flux", "quantum", "service", "stop", check=False, timeout=60)
        with contextlib.suppress(Exception):
            self.broker.stop()
        with contextlib.suppress(Exception):
            self.emulator.stop()
