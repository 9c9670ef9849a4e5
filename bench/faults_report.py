"""bench/faults.py's report on the arms' results: faults by kind, violations by promise,
outcomes and vendor calls, recoveries against their targets, the summary and the rows of
the CSV.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchlib import verdict
from faults_arm import ArmResult

REPO = Path(__file__).resolve().parent.parent
KILL_TARGET_S = 5.0  # back at full work after a kill -9 of the service
RESTART_TARGET_S = 30.0  # back at full work after the broker of a restarted instance is up


# --- figures ------------------------------------------------------------------------------


PROMISE_NAMES = (
    "one_task",
    "no_lost_job",
    "sessions_closed",
    "ledger_matches",
    "no_secret",
    "honest_failure",
)


def faults_by_kind(report: Mapping[str, Any] | None) -> dict[str, int]:
    """``{"braket error:ThrottlingException": n, ...}`` from the emulator's report."""
    if not report:
        return {}
    out = {}
    for vendor, kinds in sorted((report.get("faults") or {}).items()):
        for kind, n in sorted((kinds or {}).items()):
            out[f"{vendor} {kind}"] = int(n)
    return out


def violations_by_promise(findings: Mapping[str, Any] | None) -> dict[str, int | None]:
    """Every promise -> its count of violations (None: not checked)."""
    counts = dict((findings or {}).get("counts") or {})
    checked = dict((findings or {}).get("checked") or {})
    return {
        p: int(counts[p]) if counts.get(p) is not None and checked.get(p, True) else None
        for p in PROMISE_NAMES
    }


def reason_class(reason: str) -> str:
    """A failure's reason without what differs from job to job (task ids, job ids, times,
    amounts), so that equal reasons count together."""
    text = " ".join(reason.split())
    text = re.sub(r"arn:aws:braket:\S*quantum-task/[0-9a-f-]+", "<task>", text)
    text = re.sub(r"\b[a-z0-9]{20}\b", "<task>", text)
    text = re.sub(r"\b\d{6,}\b", "<job>", text)
    text = re.sub(r"\d+(\.\d+)?s\b", "<t>", text)
    text = re.sub(r"^(qpu: )+", "qpu: ", text)
    return text[:100]


def outcomes(findings: Mapping[str, Any] | None) -> dict[str, int]:
    """``{"completed": n, "failed: <reason>": n, ...}`` (reasons cut at 60 characters)."""
    tally: Counter[str] = Counter()
    jobs = (findings or {}).get("jobs")
    if not isinstance(jobs, list):
        jobs = (findings or {}).get("outcomes")
    for o in jobs if isinstance(jobs, list) else []:
        outcome = str(o.get("outcome"))
        reason = o.get("reason")
        if outcome in ("completed",) or not reason:
            tally[outcome] += 1
        else:
            tally[f"{outcome}: {reason_class(str(reason))}"] += 1
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))


def calls_by_operation(report: Mapping[str, Any] | None) -> dict[str, int]:
    """The emulator's call counts by operation, most first."""
    calls = (report or {}).get("calls") or {}
    return dict(sorted(((str(k), int(v)) for k, v in calls.items()), key=lambda kv: -kv[1]))


def recovery_line(kind: str, seconds: Sequence[float | None], target: float) -> str:
    if not seconds:
        return f"  {kind:<18} none in this run (target {target:g}s)"
    back = [s for s in seconds if s is not None]
    worst = max(back) if back else float("nan")
    ok = len(back) == len(seconds) and worst <= target
    median = statistics.median(back) if back else float("nan")
    return (
        f"  {kind:<18} n {len(seconds)}, median {median:.2f}s, max {worst:.2f}s"
        + (f", {len(seconds) - len(back)} not back" if len(back) < len(seconds) else "")
        + f" <= {target:g}s: {verdict(ok)}"
    )


def ok(result: ArmResult) -> bool:
    """The verdict: the checker ran and found no violation."""
    if result.findings is None:
        return False
    return all(not n for n in violations_by_promise(result.findings).values())


def summary(runs: Sequence[ArmResult], header: Sequence[str]) -> str:
    """The text the campaign prints and writes (faults.txt)."""
    lines = list(header)
    for r in runs:
        lines.append("")
        lines.append(
            f"arm {r.arm}: {sum(r.jobs.values())} submissions "
            f"({', '.join(f'{k} {v}' for k, v in sorted(r.jobs.items()))}), "
            f"{r.qpu_jobs} QPU jobs, {r.wall_s:.0f}s" + ("" if r.drained else ", NOT DRAINED")
        )
        faults = faults_by_kind(r.report)
        if r.report is None:
            lines.append("faults injected: (this emulator has no report)")
        else:
            lines.append(f"faults injected: {sum(faults.values())}")
            lines += [f"  {k:<40} {v:>5}" for k, v in faults.items()]
        if r.dropped:
            lines.append("faults this emulator does not know (left out):")
            lines += [f"  {d}" for d in r.dropped]
        lines.append("violations by promise (target 0 each):")
        for promise, n in violations_by_promise(r.findings).items():
            shown = "not checked" if n is None else f"{n}"
            lines.append(f"  {promise:<18} {shown:>5}  {verdict(n == 0) if n is not None else ''}")
        for v in ((r.findings or {}).get("violations") or [])[:40]:
            lines.append(f"    {v.get('promise')}: {v.get('subject')}: {v.get('detail')}"[:300])
        lines.append("jobs by outcome:")
        lines += [f"  {k:<70} {v:>5}" for k, v in outcomes(r.findings).items()]
        if r.findings:
            lines.append(
                f"bill total {r.findings.get('billed_total', 0):.2f} USD, ledger total "
                + (
                    "not checked"
                    if r.findings.get("ledger_total") is None
                    else f"{r.findings['ledger_total']:.2f} USD"
                )
            )
        kills = [x.seconds for x in r.recoveries if x.kind in ("kill", "ledger")]
        restarts = [x.seconds for x in r.recoveries if x.kind == "restart"]
        lines.append("back at full work (every held job tracked again):")
        lines.append(recovery_line("after kill -9", kills, KILL_TARGET_S))
        lines.append(recovery_line("after restart", restarts, RESTART_TARGET_S))
        for x in r.recoveries:
            if x.kind == "ledger":
                lines.append(f"  ledger writer: {x.note}")
        lines.append(f"vendor calls: {r.calls} total, {r.calls_per_job:.1f} per QPU job")
        ops = calls_by_operation(r.report)
        if ops:
            lines.append(
                "  by operation: " + ", ".join(f"{k} {v}" for k, v in list(ops.items())[:10])
            )
        if r.errors:
            lines.append(f"campaign errors: {len(r.errors)}")
            lines += [f"  {e[:200]}" for e in r.errors[:10]]
    by_arm = {r.arm: r for r in runs}
    if "faults" in by_arm and "clean" in by_arm:
        f, c = by_arm["faults"], by_arm["clean"]
        lines.append("")
        lines.append(
            f"vendor calls per QPU job: {f.calls_per_job:.1f} with faults, "
            f"{c.calls_per_job:.1f} without (x{f.calls_per_job / c.calls_per_job:.2f})"
            if c.calls_per_job
            else "vendor calls per QPU job: no clean jobs"
        )
    verdicts = [f"{r.arm} {'0 violations' if ok(r) else 'VIOLATIONS or not checked'}" for r in runs]
    lines.append("verdict: " + "; ".join(verdicts))
    return "\n".join(lines)


def rows(runs: Sequence[ArmResult]) -> list[dict[str, Any]]:
    """faults.csv: one row per (arm, figure, key)."""
    out: list[dict[str, Any]] = []
    for r in runs:

        def add(figure: str, key: str, value: Any, arm: str = r.arm) -> None:
            out.append({"arm": arm, "figure": figure, "key": key, "value": value})

        for k, v in sorted(r.jobs.items()):
            add("submissions", k, v)
        add("qpu_jobs", "", r.qpu_jobs)
        for k, v in faults_by_kind(r.report).items():
            add("faults", k, v)
        for k, v in violations_by_promise(r.findings).items():
            add("violations", k, "" if v is None else v)
        for k, v in outcomes(r.findings).items():
            add("outcomes", k, v)
        for x in r.recoveries:
            add(
                f"recovery_{x.kind}", f"{x.at:.1f}", "" if x.seconds is None else f"{x.seconds:.3f}"
            )
        add("vendor_calls", "total", r.calls)
        for k, v in calls_by_operation(r.report).items():
            add("vendor_calls", k, v)
        add("vendor_calls", "per_qpu_job", f"{r.calls_per_job:.3f}")
        add("wall_s", "", f"{r.wall_s:.1f}")
    return out


def git_commit() -> str:
    proc = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    commit = proc.stdout.strip() or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return commit + ("+dirty" if dirty else "")
