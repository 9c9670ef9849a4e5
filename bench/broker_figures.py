"""What a Flux broker holds, module by module: the figures the soak samples to say what
grows inside the broker (``python bench/NAME.py`` finds this module next to it).

The broker is one process whose modules are threads: its RSS cannot be split by module,
so this reads two things beside it. The process's memory by kind (``/proc/PID/status``
and ``smaps``): anonymous memory (what ``malloc`` holds: the main heap and the threads'
malloc arenas) apart from file-backed pages (the libraries), and the arenas' resident
sizes. And each module's own account of what it keeps (``MODULE.stats-get``, what
``flux module stats MODULE`` prints): the job-manager's active and inactive jobs,
job-list's jobs, the KVS cache and the content cache, the scheduler's queues; and the
size of the KVS's job directories. A figure a module does not report is left out.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

# A mapping line of /proc/PID/smaps: "start-end perms offset dev inode [path]".
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(.*)$")


def memory_kinds(pid: int) -> dict[str, int]:
    """``pid``'s resident memory by kind, in kB: ``rss`` (VmRSS), ``anon`` (RssAnon: what
    malloc holds), ``file`` (RssFile: libraries), ``heap`` (the main arena, smaps'
    ``[heap]``), ``arenas`` (every other private anonymous mapping with pages resident:
    the threads' malloc arenas, stacks and mmap'd blocks), ``arena_count`` (how many of
    those hold more than 1 MB) and ``largest_arena``; {} when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        smaps = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)

    def kb(name: str) -> int:
        return int(fields[name].split()[0]) if name in fields else 0

    heap = 0
    anon: list[int] = []
    kind = ""
    for line in smaps.splitlines():
        mapping = _MAPPING.match(line)
        if mapping:
            perms, inode, path = mapping.groups()
            if path == "[heap]":
                kind = "heap"
            elif inode == "0" and not path and perms.startswith("rw"):
                kind = "anon"
            else:
                kind = ""
        elif line.startswith("Rss:") and kind:
            rss = int(line.split()[1])
            if kind == "heap":
                heap += rss
            elif rss:
                anon.append(rss)
    return {
        "rss": kb("VmRSS"),
        "anon": kb("RssAnon"),
        "file": kb("RssFile"),
        "heap": heap,
        "arenas": sum(anon),
        "arena_count": sum(1 for rss in anon if rss > 1024),
        "largest_arena": max(anon, default=0),
    }


# Run inside gdb attached to the broker: reads each thread's malloc arena (glibc's
# ``thread_arena``, with libc's debugging symbols) and each arena's ``system_mem``
# (bytes it holds from the system), by reading memory only: it calls nothing in the
# broker, which is stopped for the read (about a second) and then runs on.
GDB_ARENAS = """
import gdb, json
main = gdb.parse_and_eval("&main_arena")
arenas, a = [], main
while True:
    arenas.append(int(a))
    a = a.dereference()["next"]
    if int(a) == int(main):
        break
held = {}
for th in gdb.selected_inferior().threads():
    th.switch()
    try:
        mine = int(gdb.parse_and_eval("thread_arena"))
    except gdb.error:
        continue
    if mine in arenas:
        held.setdefault(arenas.index(mine), []).append(th.name)
sizes = [int(gdb.parse_and_eval("(struct malloc_state *)%d" % x).dereference()["system_mem"])
         for x in arenas]
print("ARENAS " + json.dumps([[i, held.get(i, []), n] for i, n in enumerate(sizes)]))
"""


def malloc_arenas(pid: int) -> dict[str, int]:
    """``pid``'s glibc malloc arenas: kB each holds from the system, keyed by the names
    of the threads that allocate from it (a Flux broker names each module's thread
    after the module; arena 0, the main one, is the broker's own thread's); {} when gdb
    or libc's debugging symbols are missing or the read fails."""
    if shutil.which("gdb") is None:
        return {}
    with tempfile.NamedTemporaryFile("w", suffix=".py") as script:
        script.write(GDB_ARENAS)
        script.flush()
        try:
            proc = subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", f"source {script.name}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return {}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ARENAS ")), None)
    if line is None:
        return {}
    return {
        "+".join(sorted(names)) or f"arena {index}": size // 1024
        for index, names, size in json.loads(line[len("ARENAS ") :])
    }


def _stats(handle: Any, module: str) -> dict[str, Any]:
    try:
        answer = handle.rpc(f"{module}.stats-get").get()
    except Exception:  # a module not loaded, or one without stats
        return {}
    return dict(answer) if isinstance(answer, dict) else {}


def module_figures(handle: Any) -> dict[str, int | float]:
    """What the broker's modules say they keep (their ``stats-get``), flat: the
    job-manager's jobs and journal listeners, job-list's jobs, the KVS and content caches, the
    content store's object count, the scheduler's queued and running jobs."""
    out: dict[str, int | float] = {}
    jm = _stats(handle, "job-manager")
    if jm:
        out["jm_active"] = int(jm.get("active_jobs", 0))
        out["jm_inactive"] = int(jm.get("inactive_jobs", 0))
        out["jm_journal_listeners"] = int(jm.get("journal", {}).get("listeners", 0))
    jl = _stats(handle, "job-list").get("jobs", {})
    if jl:
        out["job_list_jobs"] = sum(int(n) for n in jl.values())
    kvs = _stats(handle, "kvs").get("cache", {})
    if kvs:
        out["kvs_cache_kb"] = round(float(kvs.get("obj size total (MiB)", 0)) * 1024, 1)
        out["kvs_cache_count"] = int(kvs.get("obj size (KiB)", {}).get("count", 0))
    content = _stats(handle, "content")
    if content:
        out["content_cache_bytes"] = int(content.get("size", 0))
        out["content_cache_count"] = int(content.get("count", 0))
    sqlite = _stats(handle, "content-sqlite")
    if sqlite:
        out["content_store_objects"] = int(sqlite.get("object_count", 0))
    queues = _stats(handle, "sched-fluxion-qmanager").get("queues", {})
    if queues:
        out["sched_jobs"] = sum(
            len(jobs)
            for queue in queues.values()
            for table in ("pending_queues", "scheduled_queues")
            for jobs in queue.get(table, {}).values()
        )
    return out


def kvs_job_dirs(handle: Any) -> dict[str, int]:
    """The KVS's job directories: ``job.AAAA`` holds one entry ``BBBB`` a quarter
    second of job ids (a job's key is its id in four 16-bit parts, and the id starts
    with its submission time in ms), and purging a job unlinks ``job.AAAA.BBBB.CCCC.DDDD``
    only, leaving its parents: the entries of every ``job.AAAA`` together
    (``kvs_job_dir_entries``), and the largest one's size as JSON (``kvs_job_dir_bytes``,
    about the object every commit of one of its jobs writes anew)."""
    from flux.constants import FLUX_KVS_READDIR

    def listing(key: str) -> dict[str, Any]:
        payload = {"key": key, "namespace": "primary", "flags": FLUX_KVS_READDIR}
        try:
            return dict(handle.rpc("kvs.lookup", payload).get()["val"]["data"])
        except Exception:  # no job yet
            return {}

    dirs = [listing(f"job.{name}") for name in listing("job")]
    return {
        "kvs_job_dir_entries": sum(len(d) for d in dirs),
        "kvs_job_dir_bytes": max((len(json.dumps(d)) for d in dirs), default=0),
    }


def broker_figures(handle: Any, arenas: bool = False) -> dict[str, Any]:
    """The broker behind ``handle``: its memory by kind (``mem_*``, kB), what its
    modules keep (``module_figures``) and, with ``arenas``, its malloc arenas by thread
    (``malloc_arenas``, kB; the broker stopped about a second for the read)."""
    pid = int(handle.attr_get("broker.pid"))
    memory = {f"mem_{key}": value for key, value in memory_kinds(pid).items()}
    out: dict[str, Any] = memory | module_figures(handle) | kvs_job_dirs(handle)
    if arenas:
        out["arenas_kb"] = malloc_arenas(pid)
    return out


def tree_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (a content store on disk); 0 if none."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0
