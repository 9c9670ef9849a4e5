"""Flux tier: the walkthroughs of docs/ run as written, from a fresh login shell.

The same machinery as README.md's (``test_walkthroughs_flux``): each walkthrough's
indented command blocks are read from its page and typed, in order, into a login shell
on a pseudo-terminal with a clean environment; the commands after ``flux start`` (or a
subshell's ``bash``) go to that shell until its ``exit``. The only change made to the
text is its scratch directory (``/tmp/fq`` becomes a temporary one). The checks are what
the page tells the reader to expect, and that nothing is left running or exported
afterwards.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from user_clients import qiskit_runtime_python
from walkthrough import blocks, commands, no_emulator_left, run_walkthrough

pytestmark = pytest.mark.flux

DOCS = Path(__file__).resolve().parents[2] / "docs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def walk(parts: list[str], scratch: Path, split: Callable[[str], list[str]] = commands) -> str:
    """The walkthrough's screen, without the colours Flux gives a terminal; checks that
    nothing is left exported in the login shell and that no emulator runs."""
    out = ANSI.sub("", run_walkthrough(parts, scratch, split))
    assert "\nleft: 0\n" in out, out
    assert "Traceback" not in out, out
    no_emulator_left(scratch)
    return out


def ended_cleanly(out: str, scratch: Path) -> None:
    """The walkthrough stopped its service, said no ERROR, and left nothing exported in
    the login shell and no emulator running."""
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(scratch)


HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")


def with_heredocs(text: str) -> list[str]:
    """A block's commands (``commands``), a here-document typed with its command."""
    out: list[str] = []
    delimiter = None
    for command in commands(text):
        if delimiter is not None:
            out[-1] += "\n" + command
            if command == delimiter:
                delimiter = None
            continue
        out.append(command)
        found = HEREDOC.search(command)
        delimiter = found.group(1) if found else None
    return out


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith('{"id"')]


def test_plugin_quick_start(tmp_path: Path) -> None:
    found = blocks("## Quick start: hold and release a job by hand", DOCS / "plugin.md")
    assert len(found) == 2, found
    out = walk(found, tmp_path)
    # Held in DEPEND on the dependency qpu, listed by flux quantum jobs.
    assert re.search(r"^\S+ DEPEND qpu$", out, re.M), out
    assert re.search(r"DEPEND .* braket:sv1 shots=1000 release_at=done$", out, re.M), out
    # Released: the job saw its task through the shell plugin and in its jobspec.
    example = "arn:aws:braket:us-east-1:123456789012:quantum-task/example"
    assert f"\ntask {example} on sv1\n" in out, out
    assert f'"qpu_task": "{example}"' in out, out
    # The eventlog tells the story, in that order.
    log = out[out.index("$ flux job eventlog") :]
    story = ["dependency-add", "jobspec-update", "qpu-release", "dependency-remove", "alloc"]
    positions = [log.index(f" {name} ") for name in story]
    assert positions == sorted(positions), out
    assert "priority priority=4294967295" in log, out


def test_graph_try_it(tmp_path: Path) -> None:
    found = blocks("## Try it", DOCS / "graph.md")
    assert len(found) == 3, found
    out = walk(found, tmp_path)
    # The first load adds every vertex, the second nothing.
    added = re.findall(r"qpu slots from \S+: (\d+) vertices added, (\d+) already present", out)
    assert len(added) == 2 and added[1] == ("0", added[0][0]) and added[0][1] == "0", out
    # One row per slot vertex, up and free; forte1 down, then up again.
    assert re.search(r"^forte1\s+0 up\s+free\s+braket", out, re.M), out
    assert '{"graph": {"nodes": [' in out, out
    assert re.search(r"^forte1 0 down free$", out, re.M), out
    assert "forte1: 2 vertices marked up" in out, out
    # The static graph: the instance lists the vertices with no load.
    static = out[out.rindex("DEVICE ") :]
    assert re.search(r"^sv1\s+3 up\s+free\s+braket", static, re.M), out
    assert "ERROR" not in out, out


def test_catalog_backends_and_select(tmp_path: Path) -> None:
    catalog = DOCS / "catalog.md"
    backends = blocks("## `flux quantum backends`", catalog)
    select = blocks("## `flux quantum select`: which device a request would get, and why", catalog)
    assert len(backends) == 2 and len(select) == 1, (backends, select)
    out = walk([*backends, *select], tmp_path)
    assert re.search(r"^sv1\s+braket\s+simulator\s+34 ONLINE", out, re.M), out
    assert re.search(r"^fez\s+ibm\s+qpu\s+156 ONLINE", out, re.M), out
    assert re.search(r"^oqtopus-anemone\s+oqtopus\s+qpu\s+64 ONLINE", out, re.M), out
    assert re.search(r"^ionq-aria\s+ionq\s+qpu\s+25 ONLINE", out, re.M), out
    assert re.search(r"^kobe\s+ibm-quantum-system\s+qpu\s+5 ONLINE", out, re.M), out
    assert re.search(r"^ab-cats\s+alice-bob-felis\s+simulator\s+6 ONLINE", out, re.M), out
    assert re.search(r"^local-maintenance\s+OFFLINE\s+0\s+MAINTENANCE$", out, re.M), out
    assert "UNREACHABLE" not in out, out
    assert re.search(r"^chosen: \S+$", out, re.M), out
    assert "dropped: class simulator, request asks for qpu" in out, out
    assert re.search(r"select braket:sv1\nsv1\n", out), out
    assert (
        "flux-quantum: ERROR: no device satisfies qpu request 'local-maintenance': "
        "local-maintenance offline (MAINTENANCE)" in out
    ), out


def test_emulator_start_and_point_a_client(tmp_path: Path) -> None:
    # The first block; the later indented lines are the Python example's.
    found = blocks("## Start it and point a client at it", DOCS / "emulator.md")[:1]
    assert found[0].startswith("flux quantum emulator --env-file"), found
    assert found[0].endswith("flux quantum emulator --stop --env-file /tmp/fq/emulator.env")
    out = walk(found, tmp_path)
    assert re.search(r"^export AWS_ENDPOINT_URL_BRAKET=http://127\.0\.0\.1:\d+$", out, re.M), out
    assert "flux-quantum-emulator: serving in the background (pid" in out, out
    assert "QueueDepthInfo(quantum_tasks={<QueueType.NORMAL: 'Normal'>: '40'" in out, out
    assert re.search(r"flux-quantum-emulator: pid \d+ stopped, \S+emulator\.env removed", out)


def test_consumers_try_it(tmp_path: Path) -> None:
    found = blocks("## Try it", DOCS / "consumers.md")
    assert len(found) == 4, found
    out = walk(found, tmp_path)
    # Held: no task yet.
    assert re.search(r"has no quantum task yet: it is still held \(DEPEND\)", out), out
    # Released by hand: both ranks saw the task and read its counts directly.
    ranks = re.findall(r"^rank (\d): (\S+) on local-sv1$", out, re.M)
    assert sorted(r for r, _ in ranks) == ["0", "1"] and len({t for _, t in ranks}) == 1, out
    counts = re.findall(r"^counts:\s+(.*)$", out, re.M)
    assert len(counts) >= 2, out
    for line in counts:
        assert set(re.findall(r"(\d+)=", line)) <= {"00", "11"}, out
    report = json_lines(out)[0]
    assert report["task"] == ranks[0][1] and report["tasks"][0]["state"] == "COMPLETED", out
    assert "ordinary job: no FLUX_QPU_TASK" in out, out
    # Through the service, then refused once it is stopped, and read --direct.
    service = out[out.index("$ flux quantum service start") :]
    assert len(re.findall(r"^counts:\s+", service, re.M)) >= 3, out
    assert "no handler service answers" in service and "--direct" in service, out
    direct = service[service.index("$ flux quantum task --direct") :]
    assert re.search(r"^state:\s+COMPLETED$", direct, re.M), out


def test_requests_try_it(tmp_path: Path) -> None:
    found = blocks("## Try it", DOCS / "requests.md")
    assert len(found) == 2, found
    out = walk(found, tmp_path)
    assert "[Errno 22] qpu.shots must be an integer from 1 to 100000, got 'abc'" in out, out
    assert "'str' object does not support item assignment" in out, out
    assert "qpu_shots is reserved for flux-quantum" in out and "did you mean qpu.shots?" in out
    assert "flux-submit: ERROR: --qpu-shots must be an integer from 1 to 100000" in out, out
    assert re.search(r"DEPEND braket:sv1 shots=500 release_at=done$", out, re.M), out
    assert re.search(r"DEPEND local:any policy=min-wait shots=10 release_at=running$", out, re.M)


def test_site_policy_try_it(tmp_path: Path) -> None:
    found = blocks("## Try it", DOCS / "site-policy.md")
    assert len(found) == 3, found
    out = walk(found, tmp_path, with_heredocs)
    # Refused at submit by the access rule.
    assert re.search(
        r"\[Errno 1\] qpu: .* may not use device local-forte1: \[quantum.access\] rule 1 "
        r"'qpu-otherwise' denies class qpu to everyone",
        out,
    ), out
    # The first simulator job ran; the second is over the daily task limit.
    assert re.search(r"^state:\s+COMPLETED$", out, re.M), out
    assert "[quantum.quota] limit 1 'user-daily'" in out, out
    # Usage: the one task, settled.
    assert re.search(r"^\S+\s+\S+\s+-?\s*local-sv1\s+1\s+\$", out, re.M), out
    # The figures: fidelity columns, the highest expected success chosen.
    assert re.search(r"^forte1\s+99\.98%\s+99\.50%\s+99\.40%$", out, re.M), out
    assert re.search(r"^chosen: kingston$", out, re.M), out  # compiled on its best qubits
    assert "qpu handler service 'qpu_handlers' stopped" in out, out


def test_ibm_quantum_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it on the emulator", DOCS / "vendors.md")
    assert len(found) == 2, found
    stop = "flux quantum emulator --stop --env-file /tmp/fq/emulator.env"
    assert f"then `{stop}` in your login shell" in (DOCS / "vendors.md").read_text()
    out = run_walkthrough([*found, stop], tmp_path)
    # The first job had no IBM key and printed its counts as JSON.
    reports = [json.loads(line) for line in out.splitlines() if line.startswith('{"id"')]
    assert reports and reports[0]["tasks"][0]["state"] == "COMPLETED", out
    assert sum(reports[0]["tasks"][0]["counts"].values()) > 0, out
    # The second printed the names of the session's variables, and the session closed.
    assert re.search(r"^export QRMI_\w+$", out, re.M), out
    assert '"sessions_opened": 1' in out and '"sessions_closed": 1' in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(tmp_path)


def test_a_reserved_window_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("## Try it: a window on the emulator", DOCS / "reservations.md")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # The booking printed the window's table into the instance's configuration.
    [window] = tomllib.loads((tmp_path / "conf" / "quantum.toml").read_text())["quantum"][
        "reservations"
    ]
    assert window["name"] == "demo" and window["device"] == "local-forte1", window
    assert window["cost"] == 350.0, window
    arn, start = window["arn"], window["start"].timestamp()
    # While the window was ahead: held in DEPEND, waiting for it, listed with the window.
    jobid = re.search(r"^  demo waiting: (\S+)$", out, re.M)
    assert jobid, out
    assert re.search(
        rf"^{re.escape(jobid[1])} DEPEND demo waiting for reservation demo: reservation demo "
        r"opens in \d+s",
        out,
        re.M,
    ), out
    # Its task was created with the window (no earlier than the lead before it opens)
    # and the job released then; the job saw the window's ARN and read its counts.
    submit = re.search(r"^(\d+\.\d+) qpu-submit .*reservation=\"demo\"", out, re.M)
    assert submit, out
    assert start - 15 <= float(submit[1]) <= start + 5, (submit[0], start)
    assert re.search(r"qpu-ready .*admitted: reservation demo", out), out
    assert re.search(rf"^window {re.escape(arn)}$", out, re.M), out
    assert re.search(r"^state:\s+COMPLETED$", out, re.M), out
    # The second listing: the window open, its one task's QPU time in it, its cost.
    row = re.findall(r"^demo\s+now\s.*$", out, re.M)
    assert row, out
    columns = row[-1].split()
    # NAME STATE START END DEVICE ON_END WAIT ON_NODES TASKS QPU_TIME UTIL COST WHO
    assert columns[6:8] == ["local-forte1", "on-demand"], row
    assert columns[10] == "1" and columns[11] != "0s" and columns[13] == "$350.00", row
    # The emulator recorded the window's ARN on the task.
    assert re.findall(r'^\s*"reservation": "(arn:[^"]+)",?$', out, re.M) == [arn], out
    ended_cleanly(out, tmp_path)


def test_three_jobs_one_merged_task_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("## Try it: three jobs, one task, on the emulator", DOCS / "merging.md")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # The last job's place in the one task, recorded before it was created. Places follow
    # the order the jobs joined the pool, which the service's scan need not take in
    # submission order: any of the three.
    submit = re.search(r'qpu-submit .* merge=\{"key":"(merge-\w+)","index":[012],"size":3', out)
    assert submit, out
    # One task for the three jobs, each reading its own program's counts.
    tasks = re.findall(r"^task:\s+(arn:\S+)$", out, re.M)
    assert len(tasks) == 3 and len(set(tasks)) == 1, out
    counts = re.findall(r"^counts:\s+(.*)$", out, re.M)
    assert counts == ["00=100", "11=100", "00=100"], out
    assert re.search(r"tasks created 1,", out) and "tasks merged 1, jobs merged 3" in out, out
    ended_cleanly(out, tmp_path)


def test_iqm_and_pasqal_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it: IQM and Pasqal on the emulator", DOCS / "vendors.md")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # Both vendors' devices listed ONLINE through QRMI.
    for name in ("iqm-garnet", "iqm-radiance", "pasqal-fresnel", "pasqal-fresnel-onprem"):
        assert re.search(rf"^{name}\s+(iqm|pasqal)\s+qpu\s+\d+\s+ONLINE\b", out, re.M), out
    # The two jobs completed with their counts; the wrong kind failed while held.
    results = re.findall(r"^\S+ (COMPLETED|FAILED)$", out, re.M)
    assert results == ["COMPLETED", "COMPLETED", "FAILED"], out
    assert '"device": "iqm-garnet"' in out and '"device": "pasqal-fresnel"' in out, out
    iqm = re.search(r'"counts": \{([^}]*)\}', out)
    assert iqm and set(re.findall(r'"(\d+)"', iqm[1])) <= {"00", "11"}, out
    assert '"counts": {"1": 100}' in out, out
    assert "takes Pulser sequences only (pasqal), the program is an OpenQASM circuit" in out
    # The ledger has both tasks' QPU time.
    assert re.search(r"^\S+\s+root\s+-\s+iqm-garnet\s+1\s+\$", out, re.M), out
    assert re.search(r"^\S+\s+root\s+-\s+pasqal-fresnel\s+1\s+\$", out, re.M), out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    no_emulator_left(tmp_path)


def test_ibm_quantum_system_and_felis_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("#### Try the IBM Quantum System and Felis on the emulator", DOCS / "vendors.md")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # Both vendors' devices listed ONLINE through QRMI.
    assert re.search(r"^kobe\s+ibm-quantum-system\s+qpu\s+5 ONLINE\b", out, re.M), out
    for name, kind in (("ab-boson", "qpu"), ("ab-cats", "simulator")):
        assert re.search(rf"^{name}\s+alice-bob-felis\s+{kind}\s+\d+ ONLINE\b", out, re.M), out
    # Both Bell pairs completed with their counts; the wrong kind failed while held.
    results = re.findall(r"^\S+ (COMPLETED|FAILED)$", out, re.M)
    assert results == ["COMPLETED", "COMPLETED", "FAILED"], out
    assert '"device": "kobe"' in out and '"device": "ab-cats"' in out, out
    counts = dict.fromkeys(re.findall(r'"counts": \{([^}]*)\}', out))  # each printed twice
    assert len(counts) == 2, out
    for found_counts in counts:
        pairs = dict(re.findall(r'"(\d+)": (\d+)', found_counts))
        assert set(pairs) <= {"00", "11"} and sum(map(int, pairs.values())) == 100, out
    assert "takes QIR programs only (alice-bob-felis), the program is an OpenQASM circuit" in out
    # The ledger charges each task its QPU time, read from the vendor's job.
    for device in ("kobe", "ab-cats"):
        spent = re.search(rf"^\S+\s+root\s+-\s+{device}\s+1\s+\$(\d+\.\d+)", out, re.M)
        assert spent and float(spent[1]) > 0, out
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert "ERROR" not in out, out
    no_emulator_left(tmp_path)


def test_oqtopus_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("#### Try OQTOPUS on the emulator", DOCS / "vendors.md")
    assert len(found) == 2, found
    stop = "flux quantum emulator --stop --env-file /tmp/fq/emulator.env"
    assert f"then `{stop}` in your login shell" in (DOCS / "vendors.md").read_text()
    out = run_walkthrough([*found, stop], tmp_path)
    assert re.search(r"^oqtopus-anemone\s+oqtopus\s+.*ONLINE", out, re.M), out
    assert re.search(r"^oqtopus-qulacs\s+oqtopus\s+.*ONLINE", out, re.M), out
    # The job had no OQTOPUS token and printed its counts as JSON, read through the service.
    reports = [json.loads(line) for line in out.splitlines() if line.startswith('{"id"')]
    assert reports and reports[0]["tasks"][0]["state"] == "COMPLETED", out
    assert set(reports[0]["tasks"][0]["counts"]) <= {"00", "11"}, out
    assert sum(reports[0]["tasks"][0]["counts"].values()) == 1000, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(tmp_path)


def test_ionq_on_the_emulator(tmp_path: Path) -> None:
    found = blocks("### Try it: IonQ on the emulator", DOCS / "vendors.md")
    assert len(found) == 3, found
    out = run_walkthrough(found, tmp_path)
    # The example catalog's IonQ devices listed ONLINE through ionq-core.
    for name in ("ionq-aria", "ionq-forte", "ionq-simulator", "ionq-simulator-aria"):
        assert re.search(rf"^{name}\s+ionq\s+(qpu|simulator)\s+\d+\s+ONLINE\b", out, re.M), out
    # Two jobs completed with their counts; the session job over its cost limit failed.
    results = re.findall(r"^\S+ (COMPLETED|FAILED)$", out, re.M)
    assert results == ["COMPLETED", "COMPLETED", "FAILED"], out
    aria, noisy = dict.fromkeys(re.findall(r'"counts": \{([^}]*)\}', out))  # each printed twice
    assert set(re.findall(r'"(\d+)"', aria)) == {"00", "11"}, out
    assert {"01", "10"} & set(re.findall(r'"(\d+)"', noisy)), out
    assert (
        "Session cost limit exceeded: the job would cost $3.30 and the session has $0.00 of "
        "its $1.00 limit spent." in out
    ), out
    ended_cleanly(out, tmp_path)


def test_later_iterations_with_qiskit_ibm_runtime(tmp_path: Path) -> None:
    # The user's client in its own venv, as the page makes it (skipped loudly without an
    # index to install from; the page's own commands then find it made).
    qiskit_runtime_python()
    found = blocks("### Later iterations with qiskit-ibm-runtime", DOCS / "vendors.md")
    assert len(found) == 2, found
    stop = "flux quantum emulator --stop --env-file /tmp/fq/emulator.env"
    assert f"then `{stop}` in your login shell" in (DOCS / "vendors.md").read_text()
    out = run_walkthrough([*found, stop], tmp_path, with_heredocs)
    # Both iterations rode the job's session (True) and counted what rx(theta) gives.
    iterations = re.findall(r"^iteration (\S+) (True|False) (\{.*\})$", out, re.M)
    assert [(theta, rode) for theta, rode, _ in iterations] == [
        ("0.0", "True"),
        ("3.14159", "True"),
    ], out
    assert iterations[0][2] == "{'0': 100}" and iterations[1][2] == "{'1': 100}", out
    assert '"sessions_opened": 1' in out and '"sessions_closed": 1' in out, out
    assert "ERROR" not in out, out
    assert "\nleft: 0\n" in out, out
    no_emulator_left(tmp_path)


def test_cutting_try_it(tmp_path: Path) -> None:
    found = blocks("## Try it", DOCS / "cutting.md")
    assert len(found) == 4, found
    out = walk(found, tmp_path, with_heredocs)
    assert "qpu handler service 'qpu_handlers' stopped" in out, out
    assert out.count("ERROR") == 1, out  # the refusal below, and nothing else
    # The plan: one cz cut, two fragments of 13, 20 subexperiments, overhead 9.
    assert "fragments:       q[0..11] (13 wide), q[12..23] (13 wide)" in out, out
    assert "cut gates:       cz q[11],q[12]" in out, out
    assert "subexperiments:  20 (6 terms, 2 measurement setting(s))" in out, out
    assert "shots overhead:  x9 for the same standard error" in out, out
    # Refused whole before any task, then run and recombined in the job.
    assert (
        "qpu.max_cost: the cut's 20 subexperiments may cost up to $26.00 (20 tasks of 1000 "
        "shots at up to $1.30), over qpu.max_cost $5.00; nothing was submitted"
    ) in out, out
    # sin(1.1) cos(0.75) cos(0.4) and cos(1.1) cos(0.4), as the page says.
    exact = {"I" * 11 + "X" + "I" * 12: 0.6006114, "I" * 11 + "ZZ" + "I" * 11: 0.4177897}
    lines = re.findall(r"^([IXYZ]{24})  ([-+]\d\.\d{5}) ± (\d\.\d{5})$", out, re.M)
    assert {pauli for pauli, _, _ in lines} == set(exact), out
    for pauli, value, error in lines:
        assert 0 < float(error) < 0.15, out
        assert abs(float(value) - exact[pauli]) <= 4 * float(error), out
    assert re.search(r"^20 subexperiments ran on (small-\w \d+(, )?)+$", out, re.M), out
    fragments = "[{'qubits': [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 'width': 13}"
    assert fragments in out and "'wide'" not in out, out
