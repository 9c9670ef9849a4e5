"""The soak's plain-Flux control: an instance of its own beside the soak's, without the
plugin, the validator, the job-shell plugin or the service, purging inactive jobs at the
same age, into which every job the soak's instance shows is submitted once, as soon as
it appears, with the same jobspec (attributes, ``system.qpu`` included, environment,
duration) but ``true`` for its command (``python bench/NAME.py`` finds this module next
to it). The same jobs at the same moments, purged after the same age, minus everything
flux-quantum adds (the hold, the plugin's events and memos, the service's annotations
and its RPCs): where the two instances' brokers differ, the difference is ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from broker_figures import broker_figures, tree_bytes
from faults_arm import Broker


class Mirror:
    """Copies each job of the instance at ``source_uri`` into a plain instance of its own
    (``work``, inactive jobs purged after ``purge_age`` s; None: kept), polling every
    ``every`` s; ``figures`` samples its broker."""

    def __init__(self, work: Path, source_uri: str, purge_age: float | None, every: float) -> None:
        (work / "conf").mkdir(parents=True, exist_ok=True)
        (work / "conf" / "purge.toml").write_text(purge_config("", purge_age))
        self.source_uri, self.every = source_uri, every
        self.broker = Broker(work, os.environ, [])
        self.seen: set[int] = set()
        self.submitted = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Mirror:
        self.broker.start()
        self.thread.start()
        return self

    def _loop(self) -> None:
        import flux

        source = flux.Flux(self.source_uri)
        target = flux.Flux(self.broker.env["FLUX_URI"])
        while not self.stop.wait(self.every):
            try:
                self.copy_new(source, target)
            except Exception as exc:  # said in the report; the next round tries again
                self.errors.append(f"mirror: {exc}")

    def copy_new(self, source: Any, target: Any) -> int:
        """Submit to the mirror the source's jobs not seen yet; how many."""
        import flux.job

        payload = {"max_entries": 0, "attrs": [], "since": 0.0}
        rows = source.rpc("job-list.list", payload).get()["jobs"]
        new = sorted(int(row["id"]) for row in rows if int(row["id"]) not in self.seen)
        for jobid in new:
            self.seen.add(jobid)
            try:
                answer = source.rpc(
                    "job-info.lookup", {"id": jobid, "keys": ["jobspec"], "flags": 0}
                )
                spec = plain_jobspec(json.loads(answer.get()["jobspec"]))
            except Exception as exc:  # purged meanwhile: counted, not copied
                self.errors.append(f"mirror: job {jobid}: {exc}")
                continue
            flux.job.submit(target, json.dumps(spec))
            self.submitted += 1
        return len(new)

    def figures(self, arenas: bool = False) -> dict[str, Any]:
        import flux

        out = broker_figures(flux.Flux(self.broker.env["FLUX_URI"]), arenas)
        return out | {"submitted": self.submitted, "store_bytes": tree_bytes(self.broker.statedir)}

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=60)
        with contextlib.suppress(Exception):
            self.broker.stop()


def plain_jobspec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` as a plain instance runs it: every task's command ``true``, no batch
    script and no dependency (a loop's next step names a job of the soak's instance)."""
    spec = json.loads(json.dumps(spec))
    for task in spec.get("tasks", []):
        task["command"] = ["true"]
    system = spec.get("attributes", {}).get("system", {})
    for key in ("batch", "dependencies"):
        system.pop(key, None)
    return spec


def purge_config(text: str, age: float | None) -> str:
    """``text`` (the instance's TOML, whose ``[job-manager]`` table loads the plugin)
    with the job-manager purging inactive jobs older than ``age`` wall seconds (None:
    unchanged, Flux keeps every job)."""
    if age is None:
        return text
    table = "[job-manager]\n"
    if table not in text:
        return text + f'\n{table}inactive-age-limit = "{age:g}s"\n'
    return text.replace(table, f'{table}inactive-age-limit = "{age:g}s"\n', 1)
