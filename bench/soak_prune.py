"""The soak's ``--prune-job-dirs``: what a real week's clock does to the KVS's job
directories, done to a compressed one (``python bench/NAME.py`` finds this module next
to it).

A job's KVS directory is ``job.AAAA.BBBB.CCCC.DDDD``, its id in four 16-bit parts, and
the id starts with its submission time in ms: ``BBBB`` changes every 256 ms and ``AAAA``
every 2^24 ms (4.66 h). Purging a job unlinks its own directory and leaves its parents,
so ``job.AAAA`` keeps an entry for every job submitted in its 4.66 h, and every commit
of a job under it writes that directory anew. In real time a day of the soak's jobs
spreads over five of these directories (a handful of jobs each, a new one every 4.66 h);
compressed 1440 times, three weeks of jobs land in one that gains an entry a job. The
pruner unlinks, every ``every`` s, the ``job.AAAA.BBBB`` entries no job Flux still keeps
lives under (job-list's jobs, active or inactive), older by at least ``MARGIN`` entries
(2 s) than the newest job's, so one being submitted is never touched.
"""

from __future__ import annotations

import threading
from typing import Any

MARGIN = 8  # entries of 256 ms: never unlink within 2 s of the newest job's


def job_dir_parts(jobid: int) -> tuple[str, str]:
    """``AAAA``, ``BBBB`` of ``jobid``'s KVS directory ``job.AAAA.BBBB.CCCC.DDDD``."""
    return f"{jobid >> 48 & 0xFFFF:04x}", f"{jobid >> 32 & 0xFFFF:04x}"


def stale_entries(
    live: list[int], listing: dict[str, list[str]], margin: int = MARGIN
) -> list[str]:
    """The keys ``job.AAAA.BBBB`` of ``listing`` (``AAAA`` -> its entries) under which
    none of the ``live`` job ids lives, older than the newest live job's by ``margin``
    entries at least (none when no job is live)."""
    if not live:
        return []
    newest = max(live)
    top = job_dir_parts(newest)
    kept = {job_dir_parts(jobid) for jobid in live}
    out = []
    for a, entries in listing.items():
        for b in entries:
            if (a, b) in kept:
                continue
            if a < top[0] or (a == top[0] and int(b, 16) < int(top[1], 16) - margin):
                out.append(f"job.{a}.{b}")
    return sorted(out)


class JobDirPruner:
    """Unlinks the stale ``job.AAAA.BBBB`` entries of the instance at ``uri`` (older than
    the newest job's by ``margin`` entries) from its own thread every ``every`` s;
    ``unlinked`` counts them."""

    def __init__(self, uri: str, every: float, margin: int = MARGIN) -> None:
        self.uri, self.every, self.margin = uri, every, margin
        self.unlinked = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> JobDirPruner:
        self.thread.start()
        return self

    def _loop(self) -> None:
        import flux

        handle = flux.Flux(self.uri)
        while not self.stop.wait(self.every):
            try:
                self.prune(handle)
            except Exception as exc:  # said in the report; the next round tries again
                self.errors.append(f"job directory pruner: {exc}")

    def prune(self, handle: Any) -> int:
        """One round: unlink the stale entries; how many."""
        import flux.kvs
        from flux.constants import FLUX_KVS_READDIR

        def entries(key: str) -> list[str]:
            payload = {"key": key, "namespace": "primary", "flags": FLUX_KVS_READDIR}
            try:
                return list(handle.rpc("kvs.lookup", payload).get()["val"]["data"])
            except Exception:  # no job yet
                return []

        payload = {"max_entries": 0, "attrs": [], "since": 0.0}
        live = [int(row["id"]) for row in handle.rpc("job-list.list", payload).get()["jobs"]]
        listing = {a: entries(f"job.{a}") for a in entries("job")}
        stale = stale_entries(live, listing, self.margin)
        if stale:
            txn = flux.kvs.KVSTxn(handle)
            for key in stale:
                txn.unlink(key)
            txn.commit()
            self.unlinked += len(stale)
        return len(stale)

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=60)
