#!/usr/bin/env python3
"""A week's soak, compressed: does anything grow while flux-quantum runs for days?

This module owns the soak and its figures. It reuses bench/faults.py's machinery by
import (the emulator's fault plan, the seeded mixed workload, the ``Arm`` that starts the
emulator, a Flux instance with the plugin, validator, job-shell plugin and a site
ledger, and the handler service under its supervisor, and that gathers the promise
checker's findings), and adds only what a soak needs: one instance for the whole run,
``--days`` simulated days one after the other, each a fresh seeded day of submissions
(single jobs, fan-out groups, batches, variational loops, IBM sessions, failover=next,
jobs cancelled while held; vendor faults of every kind at the plan's rates over the
whole week) with task merging on (``[quantum.merge]``), and a sampler that records,
every ``--sample`` seconds and at each day's end: the service's RSS, open file
descriptors and threads, the broker's RSS (the job-manager and the plugin live in it),
the ledger's size on disk, the content cache and KVS cache (``flux module stats
content`` / ``kvs``) and the content store on disk; and inside the broker
(``broker_figures``): its memory by kind, what its modules say they keep, the KVS's job
directories and, at each day's end, its malloc arenas by module thread (read by gdb).
It never fixes what it finds.

The plain-Flux control (``soak_mirror``, on unless ``--no-mirror``): an instance beside
the soak's without the plugin, the validator, the shell plugin or the service, purging
at the same age, into which each job of the soak's instance is copied as it appears
(same jobspec, command ``true``), sampled with the same figures at the same moments.

Time: the vendor clock runs at ``--speed``; a simulated day is ``86400 / speed`` wall
seconds of arrivals (quick: x4320, a day in 20 s; full: x1440, a day in 60 s), then the
day drains (every job ended, the service idle) before the day's figures are taken.
Growth per day once warm (``soak_growth``): the least-squares slope of the end-of-day
figures from the warm day on, as a percentage of their mean (target <= 1 % a day for
the service and the broker; the ledger and the content store hold the history by design
and are reported per job). Warm is a rule of Flux's own: the day the plain-Flux
control's broker stops growing (day 2 without a control, said so). The KVS cache, a
cache of recently used objects, is judged by its bound (its highest value over the
run's second half no higher than over the first). Nothing lost: the promise checker over
the whole run, 0 violations.

Purging: the instance runs as a site runs one, its job-manager purging inactive jobs
(``[job-manager] inactive-age-limit``, ``--purge-age``, one simulated day's wall time
by default). Without it Flux keeps every inactive job (the job-manager's table, the KVS,
the content cache) and the broker grows with the history, not with anything flux-quantum
holds: ``--no-purge`` runs that arm again, and ``--control`` measures the per-job growth
in instances of their own with and without the plugin. A purged job's eventlog is gone,
so a ``JobKeeper`` reads every inactive job's records (eventlog, jobspec, memo, exec
eventlog, name) once, as soon as job-list shows it inactive and long before its age
reaches the limit (an inactive job's records no longer change), and the checker reads
those kept records plus the live jobs; a job purged before it was kept is counted and
fails the run. Descriptors: the service's are counted by kind, TCP connections (the
HTTP connection pools to the vendors' endpoints, open or closed as requests come and go)
apart from the rest (files, pipes, Unix sockets to the broker, event descriptors), whose
count is the one a leak would grow.

    python bench/soak.py --quick     # 3 days, < 5 min; files only with --out
    python bench/soak.py             # 7 days -> bench/results/soak.{txt,json}
    python bench/soak.py --no-purge  # the same without purging (Flux keeps every job)
    python bench/soak.py --days 21 --control 0 --stem soak_21d  # -> soak_21d.{txt,json}
    python bench/soak.py --days 21 --control 0 --prune-job-dirs --stem soak_21d_pruned
                                     # the KVS job directories purged jobs leave unlinked
                                     # in both instances, as a real week's clock does
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import revision  # noqa: E402
from broker_figures import broker_figures, tree_bytes  # noqa: E402
from faults_arm import Arm, Broker  # noqa: E402
from faults_plan import STATES_ACTIVE, JobPlan, fault_plan, is_qpu_name, workload  # noqa: E402
from faults_report import PROMISE_NAMES, violations_by_promise  # noqa: E402
from soak_growth import analyse, day_ends, flat_verdicts  # noqa: E402
from soak_mirror import Mirror, purge_config  # noqa: E402
from soak_prune import JobDirPruner  # noqa: E402
from soak_report import FD_KINDS, report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DAY = 86400.0
STATE_INACTIVE = 64


def proc_status(pid: int) -> dict[str, int]:
    """RSS (kB), threads and open descriptors of ``pid`` from /proc; {} when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]) if "VmRSS" in fields else 0,
        "threads": int(fields.get("Threads", "0").strip() or 0),
        "fds": fds,
    }


def _socket_inodes(pid: int, table: str, column: int) -> set[str]:
    """The socket inodes of /proc/PID/net/TABLE (the process's network namespace)."""
    try:
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {fields[column] for fields in (line.split() for line in lines) if len(fields) > column}


def fd_kinds(pid: int) -> dict[str, int]:
    """``pid``'s open descriptors by kind (``FD_KINDS``): TCP sockets (the HTTP
    connection pools' connections to the vendors' endpoints), Unix sockets (the Flux
    handles), pipes, anonymous inodes (eventfd, epoll, timerfd), files and other
    sockets; {} when it is gone."""
    tcp = _socket_inodes(pid, "tcp", 9) | _socket_inodes(pid, "tcp6", 9)
    unix = _socket_inodes(pid, "unix", 6)
    out = dict.fromkeys(FD_KINDS, 0)
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inode = target[len("socket:[") : -1]
            kind = "tcp" if inode in tcp else "unix" if inode in unix else "socket"
        elif target.startswith("pipe:"):
            kind = "pipe"
        elif target.startswith("anon_inode:"):
            kind = "anon"
        else:
            kind = "file"
        out[kind] += 1
    return out


class JobKeeper:
    """Keeps every inactive job's records (the promise checker's ``JobFacts``, its exec
    eventlog, its name) once, before the job-manager can purge the job: ``keep`` reads
    the jobs job-list shows inactive and not yet kept, from its own thread every
    ``every`` seconds and on demand. A job job-list showed once and no longer knows,
    never kept, was purged first: it is counted in ``lost``."""

    def __init__(self, uri: str, every: float) -> None:
        self.uri, self.every = uri, every
        self.kept: dict[int, Any] = {}  # jobid -> JobFacts
        self.texts: dict[str, str] = {}  # the kept jobs' exec eventlogs
        self.names: dict[int, str] = {}  # every job job-list showed -> its name
        self.lost: set[int] = set()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> JobKeeper:
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.keep()
            except Exception as exc:  # said in the report; the next round tries again
                self.errors.append(f"job keeper: {exc}")

    def keep(self) -> list[int]:
        """Read and keep the inactive jobs not kept yet; the ids of the jobs Flux knows."""
        import flux

        from flux_quantum.testing import promises

        with self.lock:
            payload = {"max_entries": 0, "attrs": ["state", "name"], "since": 0.0}
            rows = flux.Flux(self.uri).rpc("job-list.list", payload).get()["jobs"]
            known = {int(row["id"]): row for row in rows}
            self.lost |= set(self.names) - set(known) - set(self.kept)
            self.names.update({jobid: str(row.get("name", "")) for jobid, row in known.items()})
            new = sorted(
                jobid
                for jobid, row in known.items()
                if row.get("state") == STATE_INACTIVE and jobid not in self.kept
            )
            try:
                batches = [new]
                self._read(promises, new)
            except ValueError:  # one of them purged meanwhile: one by one
                batches = [[jobid] for jobid in new]
                for batch in batches:
                    try:
                        self._read(promises, batch)
                    except ValueError:
                        self.lost |= set(batch)
            return sorted(known)

    def _read(self, promises: Any, ids: list[int]) -> None:
        if not ids:
            return
        facts, texts = promises.read_jobs(self.uri, ids)
        self.kept.update({job.jobid: job for job in facts})
        self.texts.update(texts)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


class SoakArm(Arm):
    """``faults.Arm`` whose promise checker reads the ``keeper``'s records of the jobs
    that ended (purged or not) plus the live jobs Flux still shows, over the whole run."""

    keeper: JobKeeper | None = None

    def keep_jobs(self, every: float) -> JobKeeper:
        self.keeper = JobKeeper(self.broker.env["FLUX_URI"], every).start()
        return self.keeper

    def qpu_job_count(self) -> int:
        if self.keeper is None:
            return super().qpu_job_count()
        self.keeper.keep()
        return sum(1 for name in self.keeper.names.values() if is_qpu_name(name))

    def gather_facts(self, texts: Mapping[str, str]) -> Any:
        if self.keeper is None:
            return super().gather_facts(texts)
        from flux_quantum.testing import promises

        keeper = self.keeper
        live = [jobid for jobid in keeper.keep() if jobid not in keeper.kept]
        facts = promises.gather(
            uri=self.broker.env["FLUX_URI"],
            emulator_url=self.emulator.url,
            ledger=self.ledger,
            texts=texts,
            secrets=self.secrets,
            jobs=live,
        )
        kept = tuple(keeper.kept[jobid] for jobid in sorted(keeper.kept))
        # The whole run (scope None): every task the vendor billed must be named by a
        # job, kept or live, as in an unpurged instance.
        return dataclasses.replace(
            facts,
            jobs=(*kept, *facts.jobs),
            texts={**keeper.texts, **facts.texts},
            scope=None,
        )

    def eventlog_lines(self, jobid: int) -> list[str]:
        job = self.keeper.kept.get(jobid) if self.keeper is not None else None
        if job is None:
            return super().eventlog_lines(jobid)
        return [json.dumps(event.to_dict()) for event in job.events]


class Sampler:
    """Takes the soak's figures from a running arm, and the plain-Flux ``mirror``'s
    broker beside it when there is one, on demand and every ``every`` s."""

    def __init__(self, arm: Arm, every: float, mirror: Mirror | None = None) -> None:
        self.arm, self.every, self.mirror = arm, every, mirror
        self.samples: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.t0 = time.monotonic()

    def start(self) -> Sampler:
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            with contextlib.suppress(Exception):
                self.take(day=None)

    def take(self, day: int | None) -> dict[str, Any]:
        import flux

        arm = self.arm
        status = arm.status() or {}
        service = proc_status(int(status["pid"])) if status.get("pid") else {}
        fds = fd_kinds(int(status["pid"])) if status.get("pid") else {}
        in_flux = arm.jobs(STATES_ACTIVE | STATE_INACTIVE)  # what Flux keeps, purged or not
        # At a day's end (every job ended), each broker's malloc arenas too.
        arenas = day is not None
        inside = broker_figures(flux.Flux(arm.broker.env["FLUX_URI"]), arenas)
        sample = {
            "t": round(time.monotonic() - self.t0, 1),
            "vendor_days": round((time.monotonic() - self.t0) * arm.args.speed / DAY, 3),
            "day_end": day,
            "service_pid": status.get("pid"),
            "service_rss_kb": service.get("rss_kb"),
            "service_fds": service.get("fds"),
            "service_fds_held": sum(n for kind, n in fds.items() if kind != "tcp") if fds else None,
            "service_fd_kinds": fds,
            "service_threads": service.get("threads"),
            "broker_rss_kb": inside.get("mem_rss"),
            "ledger_bytes": sum(
                p.stat().st_size for p in arm.work.glob("ledger.db*") if p.is_file()
            ),
            "content_cache_bytes": inside.get("content_cache_bytes"),
            "content_cache_count": inside.get("content_cache_count"),
            "kvs_cache_kb": inside.get("kvs_cache_kb", 0.0),
            "content_store_bytes": tree_bytes(arm.broker.statedir),
            "jobs": len(arm.jobids),
            "jobs_in_flux": len(in_flux),
            "jobs_kept": len(arm.keeper.kept) if isinstance(arm, SoakArm) and arm.keeper else 0,
            "broker": inside,
            "control": self.mirror.figures(arenas) if self.mirror is not None else None,
        }
        self.samples.append(sample)
        return sample

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def broker_kb_per_job(
    work: Path, qpu: bool, jobs: int, rounds: int = 4, purge_age: float | None = None
) -> float:
    """The control: the broker's RSS growth per job, ``rounds`` of ``jobs`` jobs after a
    warm-up round, in an instance of its own: ordinary jobs without the plugin (qpu
    False), or qpu jobs the plugin holds and then releases in one request (qpu True). Equal
    figures say the broker's growth is Flux keeping its inactive jobs, not the plugin.
    ``purge_age``: the job-manager purges inactive jobs older than that many seconds,
    and each round waits until Flux keeps none."""
    import flux

    from flux_quantum.cli.plugin import instance_config
    from flux_quantum.instance.plugin import PluginClient

    (work / "conf").mkdir(parents=True)
    (work / "conf" / "quantum.toml").write_text(
        purge_config(instance_config() if qpu else "", purge_age)
    )
    broker = Broker(work, os.environ, [])
    broker.start()
    try:
        client = PluginClient(flux.Flux(broker.env["FLUX_URI"]))
        pid = int(broker.run("flux", "getattr", "broker.pid").stdout)

        def one_round(n: int) -> None:
            qpu_args = ["--setattr=qpu=braket:sv1"] if qpu else []
            broker.run("flux", "submit", f"--cc=1-{n}", "--quiet", *qpu_args, "true")
            if qpu:
                deadline = time.monotonic() + 120
                held = [j.id for j in client.list()]
                while len(held) < n and time.monotonic() < deadline:
                    time.sleep(0.2)
                    held = [j.id for j in client.list()]
                client.release(held, task="arn:soak/control", device="sv1")
            broker.run("flux", "queue", "idle", "--timeout=300s", timeout=360)
            deadline = time.monotonic() + (purge_age or 0) + 30
            while purge_age is not None and time.monotonic() < deadline:
                if not broker.run("flux", "jobs", "-a", "-A", "-n", "--format={id}").stdout.split():
                    break
                time.sleep(0.5)

        one_round(jobs)
        before = proc_status(pid)["rss_kb"]
        for _ in range(rounds):
            one_round(jobs)
        return (proc_status(pid)["rss_kb"] - before) / (rounds * jobs)
    finally:
        broker.stop()


def merge_table(speed: float) -> str:
    # Held jobs on one device wait up to 10 vendor minutes to share a task.
    return f'\n[quantum.merge]\nenabled = true\nmax_wait = "{600.0 / speed:.3f}s"\n'


def day_plan(seed: int, day: int, jobs: int, window: float) -> tuple[JobPlan, ...]:
    """Day ``day``'s submissions, numbered apart from every other day's (groups and
    loops are named by index)."""
    return tuple(
        dataclasses.replace(job, index=day * 10_000 + job.index)
        for job in workload(seed * 1000 + day, jobs, window)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 days, < 5 min")
    parser.add_argument("--days", type=int, help="simulated days (7; quick 3)")
    parser.add_argument("--jobs-per-day", type=int, help="submissions a day (24; quick 8)")
    parser.add_argument("--speed", type=float, help="vendor clock speed (1440; quick 4320)")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--drain", type=float, default=240.0, help="drain limit a day (s)")
    parser.add_argument("--fault-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--control", type=int, help="jobs a round of the broker control (100; quick 30; 0: none)"
    )
    parser.add_argument(
        "--purge-age",
        type=float,
        help="inactive-age-limit, wall seconds (one simulated day's: 60; quick 20)",
    )
    parser.add_argument(
        "--no-purge", action="store_true", help="keep every inactive job (Flux's default)"
    )
    parser.add_argument(
        "--no-mirror",
        action="store_true",
        help="no plain-Flux control beside the soak (its jobs copied into an instance "
        "without the plugin)",
    )
    parser.add_argument(
        "--prune-job-dirs",
        action="store_true",
        help="unlink the KVS job directories purged jobs leave, as a real week's clock "
        "would (see bench/soak_prune.py)",
    )
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument("--stem", help="results' file name (soak; quick soak_quick)")
    args = parser.parse_args()
    days = args.days or (3 if args.quick else 7)
    per_day = args.jobs_per_day or (8 if args.quick else 24)
    args.speed = args.speed or (4320.0 if args.quick else 1440.0)
    args.window = DAY / args.speed  # the Arm's name for wall seconds of arrivals
    purge_age = None if args.no_purge else (args.purge_age or args.window)
    rev = revision(REPO, ("jobtap", "src", "bench"))

    def say(text: str) -> None:
        print(text, flush=True)

    work = Path(tempfile.mkdtemp(prefix="fq-soak-"))
    plan = fault_plan(args.fault_scale, horizon=days * DAY)
    arm = SoakArm("soak", work / "soak", args, plan, (), say)
    started = time.monotonic()
    sampler: Sampler | None = None
    mirror: Mirror | None = None
    pruners: list[JobDirPruner] = []
    submissions = 0
    try:
        arm.setup()
        # Task merging on for the whole run: the service reads [quantum.merge] at start.
        conf = work / "soak" / "conf" / "quantum.toml"
        conf.write_text(purge_config(conf.read_text(), purge_age) + merge_table(args.speed))
        arm.broker.run("flux", "config", "reload")
        arm.broker.run("flux", "quantum", "service", "stop", check=False, timeout=60)
        arm.start_service()
        # Kept well before the purge can take them (an inactive job's records are final).
        arm.keep_jobs(min(5.0, (purge_age or args.window) / 4))
        if not args.no_mirror:
            say("plain-Flux control: every job copied into an instance without the plugin")
            mirror = Mirror(work / "mirror", arm.broker.env["FLUX_URI"], purge_age, 1.0).start()
        if args.prune_job_dirs:
            say("job directories pruned as a real week's clock would (--prune-job-dirs)")
            uris = [arm.broker.env["FLUX_URI"]]
            uris += [mirror.broker.env["FLUX_URI"]] if mirror is not None else []
            pruners = [JobDirPruner(uri, 5.0).start() for uri in uris]
        sampler = Sampler(arm, args.sample, mirror).start()
        sampler.take(day=0)
        for day in range(1, days + 1):
            jobs = day_plan(args.seed, day, per_day, args.window)
            submissions += len(jobs)
            say(f"day {day}: {len(jobs)} submissions over {args.window:g} s")
            arm.run(jobs)
            sample = sampler.take(day=day)
            say(
                f"  end of day {day}: service RSS {sample['service_rss_kb']} kB, "
                f"fds {sample['service_fds']}, broker RSS {sample['broker_rss_kb']} kB, "
                f"ledger {sample['ledger_bytes']} B"
            )
        sampler.close()
        arm.collect()
    finally:
        if sampler is not None:
            sampler.close()
        if arm.keeper is not None:
            arm.keeper.close()
        for pruner in pruners:
            pruner.close()
        if mirror is not None:
            mirror.close()
        arm.close()
    control_jobs = args.control if args.control is not None else (30 if args.quick else 100)
    control = {}
    if control_jobs:
        say(f"broker control: {control_jobs} jobs a round, without and with the plugin")
        control = {
            "ordinary_jobs_without_plugin": broker_kb_per_job(work / "plain", False, control_jobs),
            "qpu_jobs_held_and_released": broker_kb_per_job(work / "qpu", True, control_jobs),
        }
        if purge_age is not None:
            # The same with the purge (2 s): what the broker keeps once Flux keeps no job.
            control |= {
                "ordinary_jobs_without_plugin_purged": broker_kb_per_job(
                    work / "plain-purged", False, control_jobs, purge_age=2.0
                ),
                "qpu_jobs_held_and_released_purged": broker_kb_per_job(
                    work / "qpu-purged", True, control_jobs, purge_age=2.0
                ),
            }
    samples = sampler.samples if sampler else []
    analysis = analyse(samples)
    ends = day_ends(samples)
    jobs_run = max(1, len(arm.jobids))
    history = (
        {
            key: (float(ends[-1][key] or 0) - float(samples[0][key] or 0)) / jobs_run
            for key in ("ledger_bytes", "content_store_bytes")
        }
        if ends
        else {}
    )
    result = {
        "revision": rev,
        "days": days,
        "quick": args.quick,
        "speed": args.speed,
        "seconds_a_day": args.window,
        "wall_s": round(time.monotonic() - started, 1),
        "submissions": submissions,
        "purge_age_s": purge_age,
        "jobs_kept": len(arm.keeper.kept) if arm.keeper else 0,
        "jobs_lost_to_purge": sorted(arm.keeper.lost) if arm.keeper else [],
        "qpu_jobs": arm.result.qpu_jobs,
        "drained": arm.result.drained,
        **analysis,
        "history_bytes_per_job": history,
        "broker_kb_per_job_control": control,
        "violations": violations_by_promise(arm.result.findings),
        "faults": (arm.result.report or {}).get("faults") if arm.result.report else None,
        "errors": arm.result.errors
        + (arm.keeper.errors if arm.keeper else [])
        + [e for p in pruners for e in p.errors[:10]],
        "job_dirs_unlinked": [p.unlinked for p in pruners] if pruners else None,
        "mirror": {"submitted": mirror.submitted, "errors": mirror.errors[:20]} if mirror else None,
        "samples": samples,
    }
    text = report(result)
    print(text, end="")
    out = args.out or (None if args.quick else RESULTS)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = args.stem or ("soak_quick" if args.quick else "soak")
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        (out / f"{stem}.txt").write_text(text)
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        say(f"work directory kept: {work}")
    lost = any(result["violations"].get(name) for name in PROMISE_NAMES)
    lost = lost or bool(result["jobs_lost_to_purge"])
    # A quick run's few days show the figures, not whether they are flat: its status says
    # whether anything was lost; the full run's says both.
    flat = args.quick or all(ok is not False for ok in flat_verdicts(result).values())
    return 0 if not lost and flat and arm.result.findings is not None else 1


if __name__ == "__main__":
    sys.exit(main())
