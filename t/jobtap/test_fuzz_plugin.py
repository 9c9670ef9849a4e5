"""Fuzzing the jobtap plugin's C parsers under ASan and UBSan, for a bounded time.

jobtap/fuzz/fuzz_qpu (built by jobtap/fuzz/build_fuzz.py from the sources quantum.so is
built from) runs every parser the plugin applies to what a user or a handler sends:
``attributes.system`` (job.validate, --dependency=qpu:JOBID), its load configuration and
the payloads of list, release, fail, event, events and records. libFuzzer mutates the
seed corpus (jobtap/fuzz/corpus) with the parsers' dictionary for FLUXQ_FUZZ_SECONDS
(default 40) with a 5 s limit per input: no crash, no sanitizer report, no hang, and
every refusal one sentence (the harness aborts otherwise). Where clang's libFuzzer is
missing the gcc ASan/UBSan build replays the corpus and the regressions only, and says
so. Every input a fuzzer ever found lives in jobtap/fuzz/regressions and is replayed
here, and the findings are pinned below as plain cases.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fuzzing import fixtures
from fuzzing.cparsers import build_fuzz

# The session's C parsers (fixtures), built once.
fuzz_build = fixtures.fuzz_build
c_parsers = fixtures.c_parsers

SECONDS = int(os.environ.get("FLUXQ_FUZZ_SECONDS", "40"))
# One seed: a run explores the same inputs in the same order (as many as the time bound
# allows), so what it finds is found again; bench/fuzz.py's long runs draw new seeds.
SEED = int(os.environ.get("FLUXQ_FUZZ_SEED", "1"))


def inputs() -> list[str]:
    return [
        str(p)
        for folder in (build_fuzz.CORPUS, build_fuzz.REGRESSIONS)
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".")
    ]


def test_corpus_and_regressions_replay_clean(fuzz_build) -> None:
    built, _ = fuzz_build
    cmd = [str(built.fuzzer), *inputs()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR:" not in proc.stderr, proc.stderr[-3000:]


def test_the_fuzzer_finds_nothing_in_bounded_time(fuzz_build, tmp_path: Path) -> None:
    built, _ = fuzz_build
    if not built.libfuzzer:
        pytest.skip("libFuzzer run SKIPPED (the corpus was replayed): " + built.messages[0])
    corpus = tmp_path / "corpus"
    shutil.copytree(build_fuzz.CORPUS, corpus)
    proc = subprocess.run(
        [
            str(built.fuzzer),
            f"-max_total_time={SECONDS}",
            f"-seed={SEED}",
            "-timeout=5",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            f"-dict={build_fuzz.DICTIONARY}",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    found = sorted(
        p.name
        for p in tmp_path.iterdir()
        if p.name.startswith(("crash-", "timeout-", "leak-", "oom-"))
    )
    assert proc.returncode == 0 and not found, (found, proc.stderr[-3000:])
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
    assert runs and int(runs.group(1)) > 1000, proc.stderr[-2000:]


# What fuzzing found, pinned: each was a broken promise of the harness or the parsers.
FINDINGS = [
    # config: jansson clears errno on success paths; the reason, not errno, is promised.
    ("config", "[1]", False, "quantum: cannot parse plugin configuration"),
    ("config", '{"release-priority": 1e3}', False, "quantum: release-priority must be"),
    # A key the user typed is cut in the message, which stays one line.
    (
        "config",
        '{"' + "k" * 500 + '": 1}',
        False,
        "quantum: unknown configuration key '" + "k" * 64 + "'",
    ),
    # An event name with a NUL inside passes as its C prefix, a valid name.
    ("event", '{"id": 1, "name": "qpu-a\\u0000\\n"}', True, ""),
    ("event", '{"id": 1, "name": "qpu-"}', False, "event name must be 'qpu-'"),
    ("event", '{"id": 1.0, "name": "qpu-a"}', False, "job ids must be integers"),
    ("release", '{"id": 1, "ids": [2]}', False, "give exactly one of 'id' or 'ids'"),
    ("release", '{"ids": []}', False, "'ids' must be a non-empty array of job ids"),
    ("release", '{"id": 1, "task": 5}', False, "release takes {id or ids"),
    ("release", '{"id": -1}', True, ""),  # an id no job has: ENOENT at lookup
    ("fail", '{"ids": [1, "2"], "note": "x"}', False, "job ids must be integers"),
    ("records", '{"ids": [1, 2.5]}', False, "job ids must be integers"),
    ("events", '{"events": {}}', False, "'events' must be an array of events"),
    ("list", '{"generation": "x"}', False, "list takes {generation?: an integer}"),
    ("request", '{"qpu": "' + "a" * 257 + '"}', False, "qpu must be a device name"),
    ("request", '{"qpu": null}', False, "qpu must be a device name"),
    ("request", '{"qpu_info": null}', False, "attributes.system.qpu_task, qpu_device and qpu_info"),
    ("request", "[]", True, ""),  # attributes.system not an object: nothing to hold
    (
        "follow",
        '{"dependencies": [{"scheme": "qpu", "value": 5}]}',
        False,
        "--dependency=qpu:JOBID",
    ),
]


@pytest.mark.parametrize(("target", "text", "accepted", "reason"), FINDINGS)
def test_findings_stay_fixed(c_parsers, target, text, accepted, reason) -> None:
    # config's input is the configuration's text, sent as a JSON string.
    verdict = (
        c_parsers.parse(target, text) if target == "config" else c_parsers.parse_text(target, text)
    )
    assert verdict is not None
    assert verdict.accepted is accepted, verdict
    assert verdict.reason.startswith(reason), verdict.reason
    assert "\n" not in verdict.reason
