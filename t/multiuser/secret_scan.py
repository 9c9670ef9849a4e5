"""Secret-scan harness: collect everything the system instance shows anyone
(the KVS as `flux dump` writes it, `flux dmesg` of every rank, every job's
jobspec, eventlogs and memos, and the outputs of `flux quantum` commands as
every user) and report where any marker string appears.

Tests give credentials marker values (unique strings nothing else contains),
run a flow, then assert ``scan(collect(), markers)`` is empty.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass

from cluster import OWNER, USERS, owner, run

DUMP = "/tmp/fluxq-secret-scan.tar"


@dataclass(frozen=True)
class Hit:
    """MARKER was found in ARTIFACT (what was read, e.g. 'jobspec f2Z..')."""

    marker: str
    artifact: str
    excerpt: str


def _kvs_dump() -> dict[str, str]:
    """Every KVS value, by key, from a `flux dump` archive written by the owner."""
    owner("rm", "-f", DUMP, check=False)
    owner("flux", "dump", "--no-cache", DUMP, timeout=300)
    values = {}
    with tarfile.open(DUMP) as tar:
        for member in tar:
            if member.isfile():
                data = tar.extractfile(member).read()
                values[f"kvs {member.name}"] = data.decode("utf-8", "replace")
    owner("rm", "-f", DUMP, check=False)
    return values


def _all_jobs() -> list[str]:
    out = owner("flux", "jobs", "-a", "-A", "-no", "{id}").stdout
    return out.split()


def collect() -> dict[str, str]:
    """Name -> text of everything a marker must never appear in."""
    artifacts: dict[str, str] = {}
    artifacts.update(_kvs_dump())
    for rank in ("0", "1", "2"):
        res = owner("flux", "exec", "-r", rank, "flux", "dmesg", check=False)
        artifacts[f"dmesg rank {rank}"] = res.stdout + res.stderr
    jobs = _all_jobs()
    for jobid in jobs:
        for key in ("jobspec", "eventlog", "guest.exec.eventlog", "R"):
            res = owner("flux", "job", "info", jobid, key, check=False)
            artifacts[f"{key} {jobid}"] = res.stdout
    # Memos (annotations), as job-list serves them to each user and the owner.
    for user in (OWNER, *USERS):
        res = run(user, "flux", "jobs", "-a", "--json", check=False)
        artifacts[f"flux jobs --json as {user}"] = res.stdout
        for args in (("jobs", "--json"), ("service", "status", "--json")):
            res = run(user, "flux", "quantum", *args, check=False, timeout=60)
            artifacts[f"flux quantum {' '.join(args)} as {user}"] = res.stdout + res.stderr
        for jobid in jobs:
            res = run(user, "flux", "quantum", "task", jobid, "--json", check=False, timeout=60)
            artifacts[f"flux quantum task {jobid} as {user}"] = res.stdout + res.stderr
    return artifacts


def scan(artifacts: dict[str, str], markers: Iterable[str]) -> list[Hit]:
    hits = []
    for marker in markers:
        for name, text in artifacts.items():
            at = text.find(marker)
            if at >= 0:
                hits.append(Hit(marker, name, text[max(0, at - 60) : at + len(marker) + 20]))
    return hits


def describe(hits: list[Hit]) -> str:
    return json.dumps([h.__dict__ for h in hits], indent=1)
