"""bench/scale.py's probes of the processes it measures: a process's CPU seconds, memory and
children from /proc, the sampler that follows the service, the service started,
stopped and asked for its status, the exporter's scrape cost, waits on a condition.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib import percentile

from flux_quantum.service.runner import service_name

SERVICE_NAME = "qpu_handlers"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- small helpers --------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


# --- /proc sampling -------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_memory_kb(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) in kB."""
    rss = hwm = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def proc_children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def count_brokers(exclude: str | None = None) -> int:
    """flux-broker processes of other instances on this machine (they make timings
    noisy): brokers rename themselves flux-broker-RANK; ours have EXCLUDE (their
    config directory) on their command line."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if not (entry / "comm").read_text().startswith("flux-broker"):
                    continue
            except OSError:
                continue
            if exclude is None or exclude not in proc_cmdline(int(entry.name)):
                count += 1
    return count


@dataclass
class Sample:
    t: float
    cpu: float
    rss: int | None
    hwm: int | None


class Sampler(threading.Thread):
    """Reads CPU time and memory of some processes every ``interval`` seconds."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[Sample]] = {name: [] for name in pids}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        now = time.time()
        for name, pid in self.pids.items():
            cpu = proc_cpu_seconds(pid)
            if cpu is None:
                continue
            rss, hwm = proc_memory_kb(pid)
            self.samples[name].append(Sample(now, cpu, rss, hwm))

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
        self.sample()

    def cpu_share(self, name: str, t0: float, t1: float) -> float:
        """CPU of ``name`` between ``t0`` and ``t1`` as % of one core (nearest samples
        inside the window)."""
        inside = [s for s in self.samples[name] if t0 <= s.t <= t1]
        if len(inside) < 2 or inside[-1].t - inside[0].t <= 0:
            return float("nan")
        return 100.0 * (inside[-1].cpu - inside[0].cpu) / (inside[-1].t - inside[0].t)

    def memory_at(self, name: str, t: float) -> tuple[int | None, int | None]:
        before = [s for s in self.samples[name] if s.t <= t]
        if not before:
            return None, None
        return before[-1].rss, before[-1].hwm

    def peak(self, name: str) -> int | None:
        hwms = [s.hwm for s in self.samples[name] if s.hwm is not None]
        return max(hwms) if hwms else None


def plugin_query(h: Any) -> dict[str, Any]:
    return h.rpc("job-manager.jobtap-query", {"name": "quantum.so"}).get()


def wait_until(what: str, test: Callable[[], bool], timeout: float, step: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


def wait_inactive(h: Any, ids: Iterable[int], timeout: float = 300.0) -> None:
    """Wait until none of IDS is active (job-list, polled every 0.1 s)."""
    wanted = set(ids)
    payload = {"max_entries": 0, "attrs": [], "constraint": {"states": ["active"]}}
    deadline = time.monotonic() + timeout
    while True:
        active = {j["id"] for j in h.rpc("job-list.list", payload).get()["jobs"]}
        if not wanted & active:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(wanted & active)} jobs still active after {timeout:g}s")
        time.sleep(0.1)


# --- the service process --------------------------------------------------------------


def python_pid(pid: int) -> int:
    """``flux quantum ...`` may exec the Python command in place or run it as a child:
    the process whose CPU is the service's."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "service run" in proc_cmdline(pid) and "flux-quantum" in proc_cmdline(pid):
            return pid
        for kid in proc_children(pid):
            if "service" in proc_cmdline(kid) and "run" in proc_cmdline(kid):
                return kid
        time.sleep(0.1)
    return pid


def start_service(cmd: list[str], inst: Any, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    with log.open("ab") as f:
        proc = subprocess.Popen(cmd, env=inst.env, cwd=inst.workdir, stdout=f, stderr=f)
    return proc, python_pid(proc.pid)


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def idle_baseline(h: Any, cmd: list[str], inst: Any, log: Path) -> dict[str, float]:
    """The service with nothing held: memory once the vendor SDK is imported, and CPU
    over a few idle seconds."""
    proc, pid = start_service(cmd, inst, log)
    try:
        wait_until("the service to come up", lambda: service_status(h) is not None, 60)
        last, deadline = -1, time.monotonic() + 30
        while time.monotonic() < deadline:  # until the SDK import settles
            time.sleep(1.0)
            rss = proc_memory_kb(pid)[0] or 0
            if abs(rss - last) < 512:
                break
            last = rss
        t0, c0 = time.time(), proc_cpu_seconds(pid) or 0.0
        time.sleep(5.0)
        t1, c1 = time.time(), proc_cpu_seconds(pid) or 0.0
        rss, _ = proc_memory_kb(pid)
        return {"rss_kb": float(rss or 0), "cpu_pct": 100.0 * (c1 - c0) / (t1 - t0)}
    finally:
        stop_service(proc)


def service_status(h: Any) -> dict[str, Any] | None:
    try:
        return h.rpc(f"{service_name(SERVICE_NAME)}.status", {}).get()
    except OSError:
        return None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(request: Any, url: str) -> tuple[float, int]:
    """One scrape: seconds to the whole answer, and its size in bytes."""
    t = time.perf_counter()
    with request.urlopen(url, timeout=10) as rsp:
        body = rsp.read()
    return time.perf_counter() - t, len(body)


def metrics_cost(
    request: Any, url: str, pid: int, scrapes: list[tuple[float, int]], window: float
) -> dict[str, Any]:
    """Scrape times, the snapshots' cost on the reactor, the CPU of one scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    with request.urlopen(url, timeout=10) as rsp:
        text = rsp.read().decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    snap_sum = values.get("flux_qpu_metrics_snapshot_duration_seconds_sum", 0.0)
    snap_count = values.get("flux_qpu_metrics_snapshot_duration_seconds_count", 0.0)
    # The page rendered on the exporter's thread (older exporters rendered per scrape).
    render_sum = values.get("flux_qpu_metrics_render_duration_seconds_sum", 0.0)
    render_count = values.get("flux_qpu_metrics_render_duration_seconds_count", 0.0)
    uptime = time.time() - values.get("flux_qpu_service_start_time_seconds", time.time())
    c0 = proc_cpu_seconds(pid) or 0.0
    burst = [scrape(request, url) for _ in range(20)]
    c1 = proc_cpu_seconds(pid) or 0.0
    times = sorted(t for t, _ in scrapes)
    per_scrape = (c1 - c0) / len(burst)
    snap_pct = 100.0 * (snap_sum + render_sum) / uptime if uptime > 0 else float("nan")
    return {
        "scrapes": len(scrapes),
        "scrape_p50_ms": round(1000 * percentile(times, 0.5), 1),
        "scrape_p99_ms": round(1000 * percentile(times, 0.99), 1),
        "scrape_max_ms": round(1000 * max(times), 1),
        "scrape_bytes": scrapes[-1][1] if scrapes else None,
        "burst_max_ms": round(1000 * max(t for t, _ in burst), 1),
        "snapshots": int(snap_count),
        "snapshot_ms": round(1000 * snap_sum / snap_count, 2) if snap_count else None,
        "renders": int(render_count),
        "render_ms": round(1000 * render_sum / render_count, 2) if render_count else None,
        # Snapshots on the reactor and renderings on the exporter's thread.
        "snapshot_cpu_pct": round(snap_pct, 3),
        "cpu_per_scrape_ms": round(1000 * per_scrape, 1),
        # What the exporter costs the service: its snapshots, and one scrape every 15 s
        # (Prometheus' default interval) or every 1 s (this arm's).
        "exporter_cpu_pct_15s": round(snap_pct + 100.0 * per_scrape / 15.0, 3),
        "exporter_cpu_pct_1s": round(snap_pct + 100.0 * per_scrape, 3),
        "window_s": round(window, 1),
    }
