#!/usr/bin/env python3
"""Fuzzing for hours: the jobtap plugin's C parsers under libFuzzer with ASan+UBSan, and
the Python ``qpu`` parser and the two parsers' agreement under hypothesis.

This module owns the long run and its record: it builds jobtap/fuzz (build_fuzz.py),
runs ``fuzz_qpu`` for ``--seconds`` on one core from the seed corpus with the parsers'
dictionary (5 s per input is a hang), then the hypothesis properties of
t/protocol/test_request_fuzz.py with ``--examples`` examples each, and writes the count of
inputs, the crashes, hangs and sanitizer reports (target 0 each) and the property
verdicts to bench/results/fuzz.{json,txt}. It never changes the parsers: an input that
crashes is kept under the run's out directory, to become a file in
jobtap/fuzz/regressions and a case in t/jobtap/test_fuzz_plugin.py.

    python bench/fuzz.py --quick          # 60 s of libFuzzer, 2,000 examples (< 3 min)
    python bench/fuzz.py --seconds 7200   # the committed run -> bench/results/fuzz.*
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
sys.path.insert(0, str(REPO / "jobtap" / "fuzz"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_fuzz  # noqa: E402
from benchlib import revision, verdict  # noqa: E402

RESULTS = REPO / "bench" / "results"
OUT = REPO / "bench" / "out" / "fuzz"
ARTIFACTS = ("crash-", "timeout-", "leak-", "oom-", "slow-unit-")


def run_libfuzzer(fuzzer: Path, seconds: int, out: Path) -> dict[str, object]:
    corpus = out / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    shutil.copytree(build_fuzz.CORPUS, corpus)
    artifacts = out / "artifacts"
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(fuzzer),
            f"-max_total_time={seconds}",
            "-timeout=5",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            f"-dict={build_fuzz.DICTIONARY}",
            f"-artifact_prefix={artifacts}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
    )
    (out / "libfuzzer.log").write_text(proc.stderr[-200_000:])
    return libfuzzer_record(proc.stderr, out, round(time.monotonic() - started, 1))


def libfuzzer_record(stderr: str, out: Path, seconds: float | None) -> dict[str, object]:
    """The figures of a libFuzzer run from what it printed and left in OUT."""
    artifacts, corpus = out / "artifacts", out / "corpus"
    found = sorted(p.name for p in artifacts.iterdir() if p.name.startswith(ARTIFACTS))
    units = re.search(r"stat::number_of_executed_units:\s*(\d+)", stderr)
    done = re.search(r"Done \d+ runs in (\d+) second", stderr)
    cov = re.findall(r"cov: (\d+) ft: (\d+)", stderr)
    return {
        "seconds": seconds if seconds is not None else float(done.group(1)) if done else None,
        "inputs": int(units.group(1)) if units else 0,
        "exit_code": 0 if units else None,
        "crashes": sum(1 for f in found if f.startswith(("crash-", "oom-", "leak-"))),
        "hangs": sum(1 for f in found if f.startswith("timeout-")),
        "sanitizer_reports": stderr.count("ERROR: AddressSanitizer")
        + stderr.count("ERROR: LeakSanitizer")
        + stderr.count("runtime error:"),
        "artifacts": found,
        "coverage_edges": int(cov[-1][0]) if cov else 0,
        "corpus_size": len(list(corpus.iterdir())),
    }


def run_hypothesis(examples: int, build_dir: Path) -> dict[str, object]:
    started = time.monotonic()
    env = dict(
        os.environ,
        FLUXQ_FUZZ_EXAMPLES=str(examples),
        FLUXQ_FUZZ_BUILD=str(build_dir),
        PYTHONPATH=str(REPO / "src"),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "t/protocol/test_request_fuzz.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    return {
        "examples_per_property": examples,
        "seconds": round(time.monotonic() - started, 1),
        "exit_code": proc.returncode,
        "summary": summary,
    }


def report(result: dict[str, object]) -> str:
    lf = result["libfuzzer"]
    hy = result["hypothesis"]
    ok_c = lf["crashes"] == 0 and lf["hangs"] == 0 and lf["sanitizer_reports"] == 0  # type: ignore[index]
    ok_py = hy["exit_code"] == 0  # type: ignore[index]
    lines = [
        f"fuzz run of {result['revision']} ({result['fuzzer']})",
        "",
        "C parsers (jobtap/qpu_request.c, qpu_payload.c, qpu_config.c) under libFuzzer, ASan+UBSan:",
        f"  {lf['seconds']} s, {lf['inputs']:,} inputs, {lf['coverage_edges']} edges, "  # type: ignore[index]
        f"corpus {lf['corpus_size']}",  # type: ignore[index]
        f"  crashes {lf['crashes']}, hangs {lf['hangs']}, sanitizer reports "  # type: ignore[index]
        f"{lf['sanitizer_reports']}  (target 0 each: {verdict(ok_c)})",  # type: ignore[index]
        "",
        "Python parser and the C/Python agreement under hypothesis (t/protocol/test_request_fuzz.py):",
        f"  {hy['examples_per_property']:,} examples a property, {hy['seconds']} s: "  # type: ignore[index]
        f"{hy['summary']}  ({verdict(ok_py)})",  # type: ignore[index]
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 s, 2,000 examples (< 3 min)")
    parser.add_argument("--seconds", type=int, help="libFuzzer time (3600; quick 60)")
    parser.add_argument("--examples", type=int, help="hypothesis examples a property (100,000)")
    parser.add_argument("--out", type=Path, help="results directory (full run: bench/results)")
    parser.add_argument(
        "--reuse-libfuzzer",
        action="store_true",
        help="record the libFuzzer run bench/out/fuzz holds instead of running it again",
    )
    args = parser.parse_args()
    seconds = args.seconds or (60 if args.quick else 3600)
    examples = args.examples or (2000 if args.quick else 100_000)
    rev = revision(REPO, ("jobtap", "src", "t", "bench"))
    OUT.mkdir(parents=True, exist_ok=True)
    built = build_fuzz.build(OUT / "build")
    for message in built.messages:
        print(message, file=sys.stderr)
    if not built.fuzzer or not built.libfuzzer:
        print("fuzz: needs clang's libFuzzer (apt-get install clang)", file=sys.stderr)
        return 2
    result: dict[str, object] = {"revision": rev, "fuzzer": "libFuzzer, clang, ASan+UBSan"}
    if args.reuse_libfuzzer:
        log = (OUT / "libfuzzer.log").read_text(errors="replace")
        result["libfuzzer"] = libfuzzer_record(log, OUT, None)
    else:
        result["libfuzzer"] = run_libfuzzer(built.fuzzer, seconds, OUT)
    result["hypothesis"] = run_hypothesis(examples, OUT / "build")
    text = report(result)
    print(text, end="")
    results = args.out or (OUT if args.quick else RESULTS)
    results.mkdir(parents=True, exist_ok=True)
    stem = "fuzz_quick" if args.quick else "fuzz"
    (results / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (results / f"{stem}.txt").write_text(text)
    lf = result["libfuzzer"]
    failed = lf["crashes"] or lf["hangs"] or lf["sanitizer_reports"]  # type: ignore[index]
    return 1 if failed or result["hypothesis"]["exit_code"] else 0  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
