"""What the host-driven phases of the container tier share: the state one phase leaves
for the next across a restart of node0, the record of a job as the instance shows it,
and the end-of-phase check of the project's promises.

A phase is a pytest file not named ``test_*.py`` (``phase_*.py``), so the multi-user
suite never collects it; containers/check runs its tests one at a time, by node id,
and does between them what cannot be done from inside node0 (restart the rank-0
broker, kill a compute node).  The state lives in /var/tmp of node0, which a restart of
the container keeps.  This module only reads the instance, the emulator and the
ledger: it never releases, fails or cancels a job, never prints a credential, and
never writes anything but its own state files.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster import EMULATOR_URL, URI, eventlog, job, jobid_int, owner, wait_event

STATE_DIR = Path("/var/tmp/fluxq-phases")
# The system instance's ledger (docs/site-policy.md "The ledger": STATEDIR/flux-quantum).
LEDGER = Path("/var/lib/flux/flux-quantum/ledger.db")
# The broker's standard error since the cluster started (all restarts), written here by
# containers/check from `docker logs` before a phase's check: the service's log lines.
BROKER_LOG = STATE_DIR / "node0-docker.log"
# The site's credentials (containers/image/setup.sh): they must appear nowhere.
SITE_SECRETS = ("AKIAFLUXQSITEMARKER", "FLUXQ-MARKER-site-secret-42e1")
# A job's end, as long as a garnet queue may take (minutes at the emulator's speed 1).
END_TIMEOUT = 900.0


def save(name: str, state: Mapping[str, Any]) -> None:
    """Keep STATE for the next phase (root-only, in node0's /var/tmp)."""
    STATE_DIR.mkdir(mode=0o700, exist_ok=True)
    (STATE_DIR / f"{name}.json").write_text(json.dumps(state, indent=1, sort_keys=True))


def load(name: str) -> dict[str, Any]:
    """The state an earlier phase kept; a clear failure when it did not run."""
    path = STATE_DIR / f"{name}.json"
    if not path.exists():
        raise AssertionError(
            f"{path} is missing: the phase before this one did not run (containers/check "
            "runs the phases in order)"
        )
    return json.loads(path.read_text())


def container_started() -> str:
    """The start time of this container's PID 1 (docker-init): a new value after the
    container was restarted."""
    return Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19]


@dataclass(frozen=True)
class JobView:
    """One job as the instance shows it: its state, result and qpu history."""

    jobid: str
    state: str
    result: str | None
    names: tuple[str, ...]
    tasks: tuple[str, ...]  # every qpu-task's task id, in order
    exception: str | None  # the first exception's "type: note", if any

    @property
    def held(self) -> bool:
        return self.state == "DEPEND" and "qpu-release" not in self.names

    @property
    def released(self) -> bool:
        return "qpu-release" in self.names


def view(jobid: str) -> JobView:
    events = eventlog(jobid)
    names = tuple(e["name"] for e in events)
    tasks = tuple(e["context"]["task"] for e in events if e["name"] == "qpu-task")
    exceptions = [e["context"] for e in events if e["name"] == "exception"]
    exception = (
        f"{exceptions[0].get('type')}: {exceptions[0].get('note', '')}" if exceptions else None
    )
    record = job(jobid)
    return JobView(jobid, record["state"], record.get("result"), names, tasks, exception)


def wait_ended(jobids: Iterable[str], timeout: float = END_TIMEOUT) -> dict[str, JobView]:
    """Wait for every job's clean event; each one's view."""
    views = {}
    for jobid in jobids:
        wait_event(jobid, "clean", timeout=timeout)
        views[jobid] = view(jobid)
    return views


def service_running() -> dict[str, Any]:
    """The system service's status (as the owner); fails when it is not running."""
    res = owner("flux", "quantum", "service", "status", "--json", check=False, timeout=60)
    status = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    assert status.get("running") is True, f"the qpu handler service is not running: {res}"
    return status


def wait_service_idle(timeout: float = 180) -> None:
    """No held job, open session or unsettled task left in the system service."""
    owner(
        "flux",
        "quantum",
        "service",
        "status",
        "--wait-idle",
        str(timeout),
        timeout=timeout + 60,
    )


def ledger_rows(jobids: Iterable[str]) -> list[dict[str, Any]]:
    """The ledger's charges of these jobs (read-only)."""
    ids = [jobid_int(j) for j in jobids]
    marks = ",".join("?" * len(ids))
    with sqlite3.connect(f"file:{LEDGER}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(f"SELECT * FROM charges WHERE jobid IN ({marks})", ids).fetchall()
    return [dict(r) for r in rows]


def check_ledger(views: Mapping[str, JobView]) -> None:
    """Each completed QPU job has exactly one settled charge, for the task it was
    released with; nothing of theirs is left reserved."""
    rows = ledger_rows(views)
    by_job: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_job.setdefault(row["jobid"], []).append(row)
    for jobid, v in views.items():
        charges = by_job.get(jobid_int(jobid), [])
        assert all(c["state"] != "reserved" for c in charges), (jobid, charges)
        if v.result == "COMPLETED":
            settled = [c for c in charges if c["state"] == "settled"]
            assert [c["task_id"] for c in settled] == [v.tasks[-1]], (jobid, v.tasks, charges)


def texts() -> dict[str, str]:
    """The logs the checker scans for a credential: every rank's `flux dmesg` and the
    rank-0 broker's standard error since the cluster started (service lines included)."""
    out = {}
    for rank in ("0", "1", "2"):
        res = owner("flux", "exec", "-r", rank, "flux", "dmesg", check=False, timeout=60)
        out[f"dmesg rank {rank}"] = res.stdout + res.stderr
    if BROKER_LOG.exists():
        out["docker logs node0"] = BROKER_LOG.read_text(errors="replace")
    return out


def check_promises(jobids: Iterable[str]) -> dict[str, Any]:
    """The promise checker (flux_quantum.testing.promises) over these jobs, the emulator's
    report, the system ledger and the logs; fails naming every violation."""
    from flux_quantum.testing.promises import check, gather

    ids = [jobid_int(j) for j in jobids]
    facts = gather(
        uri=URI,
        emulator_url=EMULATOR_URL,
        ledger=LEDGER,
        texts=texts(),
        secrets=SITE_SECRETS,
        jobs=ids,
    )
    findings = check(facts)
    report = findings.to_dict()
    print(
        f"promises over {len(ids)} jobs: violations {json.dumps(findings.counts(), sort_keys=True)}"
        f", outcomes {json.dumps(findings.outcome_counts(), sort_keys=True)}"
        f", billed {findings.billed_total:.4f}, ledger {findings.ledger_total}"
    )
    assert findings.ok(), json.dumps(report, indent=1, default=str)
    assert not findings.not_checked, f"promises not checked: {dict(findings.not_checked)}"
    return report
