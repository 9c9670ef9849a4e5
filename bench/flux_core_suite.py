#!/usr/bin/env python3
"""flux-core's own job-manager, jobtap, job-list and submission tests with the quantum
plugin and validator loaded into every instance they start.

This module owns that run and its record. It writes the instance configuration
``flux quantum config`` prints (the jobtap plugin and the ingest validator of the
installed flux-quantum) into an out directory, puts bench/flux_core_broker.sh first on
FLUX_EXEC_PATH (FLUX_EXEC_PATH_PREPEND) as ``flux-broker`` — it starts the next
flux-broker with that configuration merged with the test's own ``-c`` — and runs the
chosen tests the way flux-core's ``make check`` runs them::

    make -C FLUX_CORE_BUILD/t check TESTS="..."

(the first run builds flux-core's C test helpers and test plugins, a minute; where
``src/common/libtap`` is not built yet it is built first). It reads each test's .trs and .log (every ``ok``/``not ok`` line) and
writes bench/results/flux_core_suite.{json,txt}: every test run, its result, its counts,
and, for each failure, the subtests that failed and why (the list KNOWN below: tests
that inspect the exact plugin list or an exact dependency set). It never edits
flux-core and never commits anything built from it.

    python bench/flux_core_suite.py --quick   # three tests (< 5 min)
    python bench/flux_core_suite.py           # the full list -> bench/results/
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import revision  # noqa: E402

RESULTS = REPO / "bench" / "results"
OUT = REPO / "bench" / "out" / "flux_core_suite"
WRAPPER = REPO / "bench" / "flux_core_broker.sh"
# A configured flux-core v0.88.0 build tree (its t/ sharness suite), named by the caller.
FLUX_CORE_BUILD = Path(os.environ.get("FLUX_CORE_BUILD", "flux-core"))

# By area: submission and ingest, the job-manager and its jobtap plugins, job-info,
# job-list, dependencies, memo and update, and the Python submit CLIs.
TESTS: tuple[str, ...] = (
    "t2100-job-ingest.t",
    "t2110-job-ingest-validator.t",
    "t2111-job-ingest-config.t",
    "t2112-job-ingest-frobnicator.t",
    "t2113-job-ingest-pipeline.t",
    "t2201-job-cmd.t",
    "t2202-job-manager.t",
    "t2203-job-manager-single.t",
    "t2204-job-manager-limited.t",
    "t2205-job-manager-unlimited.t",
    "t2206-job-manager-annotate.t",
    "t2208-job-manager-wait.t",
    "t2209-job-manager-bugs.t",
    "t2210-job-manager-events-journal.t",
    "t2211-job-manager-jobspec.t",
    "t2212-job-manager-plugins.t",
    "t2213-job-manager-hold-single.t",
    "t2214-job-manager-hold-limited.t",
    "t2215-job-manager-hold-unlimited.t",
    "t2216-job-manager-priority-order-single.t",
    "t2217-job-manager-priority-order-limited.t",
    "t2218-job-manager-priority-order-unlimited.t",
    "t2219-job-manager-restart.t",
    "t2220-job-manager-R.t",
    "t2221-job-manager-limit-duration.t",
    "t2222-job-manager-limit-job-size.t",
    "t2223-job-manager-queue-priority-order-limited.t",
    "t2224-job-manager-queue-priority-order-unlimited.t",
    "t2230-job-info-lookup.t",
    "t2231-job-info-eventlog-watch.t",
    "t2232-job-info-security.t",
    "t2233-job-info-update.t",
    "t2260-job-list.t",
    "t2261-job-list-update.t",
    "t2262-job-list-stats.t",
    "t2263-job-list-private.t",
    "t2264-job-manager-private.t",
    "t2270-job-dependencies.t",
    "t2271-job-dependency-after.t",
    "t2272-job-begin-time.t",
    "t2276-job-requires.t",
    "t2277-dependency-singleton.t",
    "t2280-job-memo.t",
    "t2290-job-update.t",
    "t2291-job-update-queue.t",
    "t2710-python-cli-submit.t",
    "t2713-python-cli-bulksubmit.t",
    "t2715-python-cli-cancel.t",
)
QUICK: tuple[str, ...] = ("t2202-job-manager.t", "t2270-job-dependencies.t", "t2260-job-list.t")

# Subtests that inspect what a loaded plugin necessarily changes, by test: why each
# fails with the quantum plugin and validator loaded, whatever the plugin does.
KNOWN: dict[str, str] = {
    "t2201-job-cmd.t": (
        "subtest 14 fails without the plugin too: it expects a job signed for root to be "
        "refused, and this machine runs the tests as root, the instance owner"
    ),
    "t2111-job-ingest-config.t": (
        "it writes its own [ingest.validator] table (conf.d/ingest.toml) into the folder "
        "that holds flux quantum config's, which sets ingest.validator.plugins too: two "
        "files defining one key make the config invalid, so every reload it checks fails "
        "(a site puts the validator into its one [ingest.validator] table)"
    ),
}


def instance_config() -> str:
    from flux_quantum.cli.plugin import instance_config as config

    return config({})


def prepare(out: Path) -> dict[str, str]:
    bindir, confdir, tmpdir = out / "bin", out / "conf", out / "tmp"
    for folder in (bindir, confdir, tmpdir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    (bindir / "flux-broker").symlink_to(WRAPPER)
    (confdir / "quantum.toml").write_text(instance_config())
    return {
        "FLUX_EXEC_PATH_PREPEND": str(bindir),
        "FLUXQ_SUITE_CONF": str(confdir),
        "FLUXQ_SUITE_TMP": str(tmpdir),
    }


def subtests(log: Path) -> tuple[int, int, int, list[str]]:
    """(passed, failed, skipped, failed subtest lines) from a TAP log."""
    text = log.read_text(errors="replace") if log.exists() else ""
    passed = failed = skipped = 0
    failures = []
    for line in text.splitlines():
        if re.match(r"^ok \d+", line):
            if "# skip" in line.lower():
                skipped += 1
            else:
                passed += 1
        elif re.match(r"^not ok \d+", line):
            if "# todo" in line.lower():
                continue
            failed += 1
            failures.append(line.strip())
    return passed, failed, skipped, failures


def run_one(test: str, env: dict[str, str]) -> dict[str, object]:
    tdir = FLUX_CORE_BUILD / "t"
    for suffix in (".log", ".trs"):
        (tdir / test).with_suffix(suffix).unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.run(
        [
            "make",
            "-C",
            str(tdir),
            "check",
            f"TESTS={test}",
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    row = collect_one(test, round(time.monotonic() - started, 1))
    row["make_exit"] = proc.returncode
    return row


def collect_one(test: str, seconds: float | None) -> dict[str, object]:
    """One test's row from the .trs and .log its run left in the build tree."""
    tdir = FLUX_CORE_BUILD / "t"
    trs = (tdir / test).with_suffix(".trs")
    result = "MISSING"
    if trs.exists():
        found = re.search(r":global-test-result: (\S+)", trs.read_text())
        result = found.group(1) if found else "MISSING"
    passed, failed, skipped, failures = subtests((tdir / test).with_suffix(".log"))
    return {
        "test": test,
        "result": result,
        "seconds": seconds,
        "subtests_passed": passed,
        "subtests_failed": failed,
        "subtests_skipped": skipped,
        "failures": failures,
        "known": KNOWN.get(test, ""),
    }


def brokers_started(env: dict[str, str]) -> int:
    log = Path(env["FLUXQ_SUITE_TMP"]) / "brokers.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def report(result: dict[str, object]) -> str:
    rows = result["tests"]  # type: ignore[assignment]
    lines = [
        f"flux-core {result['flux_core']} tests with the quantum plugin and validator loaded "
        f"(flux-quantum {result['revision']})",
        *([f"brokers started with the plugin: {result['brokers']}"] if result["brokers"] else []),
        "",
        f"{'test':50} {'result':8} {'ok':>5} {'fail':>5} {'skip':>5} {'s':>7}",
    ]
    for row in rows:  # type: ignore[attr-defined]
        lines.append(
            f"{row['test']:50} {row['result']:8} {row['subtests_passed']:5} "
            f"{row['subtests_failed']:5} {row['subtests_skipped']:5} "
            f"{'-' if row['seconds'] is None else row['seconds']:>7}"
        )
        for failure in row["failures"]:
            lines.append(f"    {failure}")
        if row["known"]:
            lines.append(f"    why: {row['known']}")
    passed = sum(1 for row in rows if row["result"] == "PASS")  # type: ignore[attr-defined]
    lines += ["", f"{passed} of {len(rows)} tests passed"]  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three tests (< 5 min)")
    parser.add_argument("tests", nargs="*", help="tests to run (default: the full list)")
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the results' JSON"
    )
    parser.add_argument(
        "--collect",
        type=Path,
        metavar="RUN_OUTPUT",
        help="write the results of the tests a run (maybe unfinished) left in the build tree; "
        "RUN_OUTPUT: what that run printed (its 'TEST: RESULT (N s)' lines give the times)",
    )
    args = parser.parse_args()
    if args.report_only:
        path = (args.out or RESULTS) / "flux_core_suite.json"
        result = json.loads(path.read_text())
        for row in result["tests"]:
            row["known"] = KNOWN.get(row["test"], "")
        path.write_text(json.dumps(result, indent=2) + "\n")
        (path.with_suffix(".txt")).write_text(report(result))
        print(report(result), end="")
        return 0
    tests = tuple(args.tests) or (QUICK if args.quick else TESTS)
    if args.collect:
        said = args.collect.read_text() if args.collect.exists() else ""
        seconds = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r"^(\S+\.t): \S+ \(([\d.]+) s\)$", said, re.MULTILINE)
        }
        tdir = FLUX_CORE_BUILD / "t"
        rows = [
            collect_one(t, seconds.get(t)) for t in tests if (tdir / t).with_suffix(".trs").exists()
        ]
        result = {
            "revision": revision(REPO, ("jobtap", "src", "bench")),
            "flux_core": "0.88.0",
            "brokers": None,  # a later run's prepare() may have emptied the count
            "tests": rows,
            "not_run": [t for t in tests if t not in {r["test"] for r in rows}],
        }
        text = report(result)
        if result["not_run"]:
            text += f"not run (the run was stopped): {' '.join(result['not_run'])}\n"
        print(text, end="")
        out = args.out or RESULTS
        (out / "flux_core_suite.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "flux_core_suite.txt").write_text(text)
        return 0
    if not (FLUX_CORE_BUILD / "t" / "Makefile").exists():
        print(
            f"flux_core_suite: no configured flux-core build tree at {FLUX_CORE_BUILD}; "
            "set FLUX_CORE_BUILD to one (flux-core v0.88.0 after ./configure && make)"
        )
        return 2
    rev = revision(REPO, ("jobtap", "src", "bench"))
    libtap = FLUX_CORE_BUILD / "src" / "common" / "libtap"
    if not (libtap / "libtap.la").exists():
        subprocess.run(["make", "-C", str(libtap), "libtap.la"], check=True, capture_output=True)
    env = prepare(OUT)
    said = subprocess.run(
        [str(FLUX_CORE_BUILD / "src" / "cmd" / "flux"), "version"], capture_output=True, text=True
    ).stdout
    found = re.search(r"commands:\s*(\S+)", said)
    version = found.group(1) if found else "?"
    rows = []
    for test in tests:
        row = run_one(test, env)
        print(f"{row['test']}: {row['result']} ({row['seconds']} s)", flush=True)
        rows.append(row)
    result = {
        "revision": rev,
        "flux_core": version.strip(),
        "brokers": brokers_started(env),
        "tests": rows,
    }
    text = report(result)
    print(text, end="")
    results = args.out or (OUT if args.quick or args.tests else RESULTS)
    results.mkdir(parents=True, exist_ok=True)
    stem = "flux_core_suite_quick" if args.quick or args.tests else "flux_core_suite"
    (results / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (results / f"{stem}.txt").write_text(text)
    unexplained = [r for r in rows if r["result"] != "PASS" and not r["known"]]
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
