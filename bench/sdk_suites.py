#!/usr/bin/env python3
"""The vendors' own test suites and clients against the emulator, and the emulator under load.

Usage:
    python bench/sdk_suites.py --braket-sdk GIT_DIR [--qrmi GIT_DIR] [--quick] [--stem NAME]

Its parts, each run against a real ``flux quantum emulator --background`` process (the
git directories are clones, or the bare ones a mirror gives, of
amazon-braket/amazon-braket-sdk-python and qiskit-community/qrmi):

- ``load``: 16 threads x 50 tasks on dm1 (an 8-qubit GHZ program, the shape that aborted
  the emulator when its simulations ran in the request threads) and as many on SV1, all
  at once, each task read to its result through the Braket SDK: every task must
  COMPLETE and the emulator's pid must be the same at the end (``--quick``: 16 x 5).
- ``braket``: amazon-braket-sdk-python's own integration suite (``test/integ_tests``),
  taken from GIT_DIR (a clone, or the bare git directory a mirror gives) at the tag of
  the installed SDK (or the newest earlier tag the repository has, said loudly), run
  unchanged with the suite's own pytest settings against the emulator serving
  ``etc/flux-quantum/scenarios/braket-current.yaml`` (Braket's current device list).
  The only configuration given is what the suite reads: an AWS profile (a config and a
  credentials file naming the emulator's stand-in keys), its region, and the emulator's
  endpoints (``AWS_ENDPOINT_URL_*``, ``BRAKET_PRICE_OFFERS_URL``). Tests an emulator
  cannot serve (``CANNOT_SERVE``: hybrid jobs run containers on EC2 and log to
  CloudWatch; local jobs pull images from ECR; pulse programs need the device's physics)
  are deselected and listed with why; tests that only use the SDK's local simulator
  (``LOCAL_ONLY``) run but are counted apart. Target: >= 95 % of the served tests pass,
  0 emulator crashes. ``--quick`` runs a subset of the served tests (about 4 minutes).

- ``ionq``: ionq-core's own integration suite (``tests/integration`` of its sdist at the
  installed version, through pip), with what its conftest reads from the emulator's env
  file (IONQ_API_KEY, IONQ_API_URL), after two jobs of the account's history.
- ``qrmi``: QRMI's Python examples for IBM, IQM and Pasqal (``examples/qrmi/python``, at
  the installed qrmi's tag or the newest earlier one), run unchanged with the emulator's
  env file, on inputs of the formats they read that an emulator can simulate.

Results go to ``bench/results/<stem>.json`` and ``<stem>.md`` with the command, the commit
it started at and the suites' tags.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from benchlib import verdict

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CURRENT = ROOT / "etc" / "flux-quantum" / "scenarios" / "braket-current.yaml"
DM1 = "arn:aws:braket:::device/quantum-simulator/amazon/dm1"
SV1 = "arn:aws:braket:::device/quantum-simulator/amazon/sv1"
TARGET = 0.95

# Deselected, with why: nothing an emulator of the Braket API can give makes them pass.
CANNOT_SERVE = {
    "test/integ_tests/test_create_quantum_job.py": (
        "hybrid jobs run the job's container on an EC2 instance and read its logs from "
        "CloudWatch: the emulator runs no container (its jobs hold a queue slot only)"
    ),
    "test/integ_tests/test_create_local_quantum_job.py": (
        "local hybrid jobs pull the Braket job image from ECR and run it in Docker"
    ),
    "test/integ_tests/test_queue_information.py::test_job_queue_position": (
        "reads a hybrid job run to COMPLETED (a container on EC2)"
    ),
    "test/integ_tests/test_pulse.py::test_pulse_bell": (
        "compares a pulse program's counts with a gate program's: pulse-level programs "
        "need the QPU's physics, the emulator runs gate-model programs"
    ),
    "test/integ_tests/test_pulse.py::test_pulse_sequence": (
        "runs a pulse program (capture_v0 of readout frames): pulse-level programs need "
        "the QPU's physics"
    ),
}
# Tests that use only the SDK's LocalSimulator (no request reaches the emulator).
LOCAL_ONLY = (
    "test/integ_tests/test_local_braket_simulator.py",
    "test/integ_tests/test_local_noise_simulator.py",
    "test/integ_tests/test_measure.py::test_measure_on_local_sim",
    "test/integ_tests/test_measure.py::test_measure_targets",
    "test/integ_tests/test_measure.py::test_measure_with_noise",
)
QUICK = (
    "test/integ_tests/test_adjoint_gradient.py",
    "test/integ_tests/test_measure.py",
    "test/integ_tests/test_device_creation.py",
    "test/integ_tests/test_cost_tracking.py",
    "test/integ_tests/test_aws_session_s3.py",
    "test/integ_tests/test_user_agents.py",
    "test/integ_tests/test_reservation_arn.py",
    "test/integ_tests/test_queue_information.py",
    "test/integ_tests/test_density_matrix_simulator.py",
    "test/integ_tests/test_simulator_quantum_task.py::test_result_types_no_shots",
    "test/integ_tests/test_simulator_quantum_task.py::test_bell_pair_openqasm_results",
    "test/integ_tests/test_simulator_quantum_task.py::test_result_types_all_selected",
)


# -- the emulator ---------------------------------------------------------------------------


class Emulator:
    """A ``flux quantum emulator --background`` process and its environment."""

    def __init__(self, workdir: Path, scenario: Path | None, speed: float) -> None:
        self.env_file = workdir / "emulator.env"
        command = [sys.executable, "-m", "flux_quantum.cli.emulator", "--background"]
        command += ["--env-file", str(self.env_file), "--speed", f"{speed:g}"]
        if scenario is not None:
            command += ["--scenario", str(scenario)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        self.env: dict[str, str] = {}
        for line in self.env_file.read_text().splitlines():
            if line.startswith("# pid "):
                self.pid = int(line.split()[2])
            elif line.startswith("export "):
                name, _, value = line[len("export ") :].partition("=")
                self.env[name] = value.strip("'\"")

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        stat = Path(f"/proc/{self.pid}/stat")
        return not stat.exists() or stat.read_text().split(")")[-1].split()[0] != "Z"

    def stop(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "flux_quantum.cli.emulator", "--stop"]
            + ["--env-file", str(self.env_file)],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


# -- load -------------------------------------------------------------------------------------


def ghz(qubits: int) -> str:
    lines = ["OPENQASM 3.0;", f"bit[{qubits}] c;", f"qubit[{qubits}] q;", "h q[0];"]
    lines += [f"cnot q[{i}], q[{i + 1}];" for i in range(qubits - 1)]
    lines.append("c = measure q;")
    return "\n".join(lines) + "\n"


@dataclass
class LoadResult:
    tasks: int = 0
    completed: int = 0
    other: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    pid_before: int = 0
    pid_after: int | None = None
    alive: bool = False
    seconds: float = 0.0

    @property
    def met(self) -> bool:
        return (
            self.completed == self.tasks
            and not self.errors
            and self.alive
            and self.pid_before == self.pid_after
        )


def run_load(emulator: Emulator, threads: int, per_thread: int) -> LoadResult:
    """``threads`` threads per device (dm1 and SV1 at once), each creating
    ``per_thread`` tasks and reading every one to its result through the SDK."""
    os.environ.update(emulator.env)
    from braket.aws import AwsDevice, AwsQuantumTask
    from braket.ir.openqasm import Program

    result = LoadResult(pid_before=emulator.pid)
    lock = threading.Lock()
    program = Program(source=ghz(8))

    def client(arn: str) -> None:
        device = AwsDevice(arn)
        tasks: list[AwsQuantumTask] = []
        try:
            for _ in range(per_thread):
                tasks.append(device.run(program, shots=100))
            for task in tasks:
                state = task.state()
                task.result()
                state = task.state()
                with lock:
                    result.tasks += 1
                    if state == "COMPLETED":
                        result.completed += 1
                    else:
                        result.other[state] = result.other.get(state, 0) + 1
        except Exception as exc:  # a failed create or read is the figure
            with lock:
                result.errors.append(f"{arn}: {exc!r}")

    started = time.monotonic()
    workers = [
        threading.Thread(target=client, args=(arn,)) for _ in range(threads) for arn in (DM1, SV1)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    result.seconds = time.monotonic() - started
    result.alive = emulator.alive()
    result.pid_after = emulator.pid if result.alive else None
    return result


# -- the Braket SDK's integration suite -------------------------------------------------------


def suite_tag(git_dir: Path) -> tuple[str, str]:
    """(the installed SDK's tag, the tag run: itself or the newest earlier one)."""
    installed = metadata.version("amazon-braket-sdk")
    tags = subprocess.run(
        ["git", "--git-dir", str(_git_dir(git_dir)), "tag", "--list", "v*"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return f"v{installed}", newest_at_or_before(tags, f"v{installed}")


def newest_at_or_before(tags: list[str], wanted: str) -> str:
    """``wanted`` if it is a tag, else the newest release tag before it (``v`` or not)."""
    if wanted in tags:
        return wanted

    def key(tag: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", tag)[:3])

    releases = [t for t in tags if re.fullmatch(r"v?\d+\.\d+\.\d+", t) and key(t) <= key(wanted)]
    if not releases:
        raise SystemExit(f"sdk_suites: the repository has no tag at or before {wanted}")
    return max(releases, key=key)


def _git_dir(path: Path) -> Path:
    return path / ".git" if (path / ".git").exists() else path


# The one stand-in: the suite's conftest looks up two hybrid jobs (which run containers on
# EC2) for every test, autouse; only the deselected job tests read them.
JOB_FIXTURES = ("completed_quantum_job", "failed_quantum_job")
STAND_IN = (
    "test/integ_tests/conftest.py: the session fixtures completed_quantum_job and "
    "failed_quantum_job are not autouse (they look up hybrid jobs that run on EC2; only "
    "the deselected job tests use them); no test body changed"
)


def checkout(git_dir: Path, tag: str, into: Path) -> Path:
    tree = into / "amazon-braket-sdk-python"
    subprocess.run(["git", "clone", "--quiet", str(git_dir), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "--quiet", tag], check=True)
    conftest = tree / "test" / "integ_tests" / "conftest.py"
    text = conftest.read_text()
    for name in JOB_FIXTURES:
        autouse = f'@pytest.fixture(scope="session", autouse=True)\ndef {name}('
        if autouse not in text:
            raise SystemExit(
                f"sdk_suites: {conftest} has no autouse fixture {name} to stand in for"
            )
        text = text.replace(autouse, f'@pytest.fixture(scope="session")\ndef {name}(')
    conftest.write_text(text)
    return tree


def profile_env(emulator: Emulator, workdir: Path) -> dict[str, str]:
    """What the suite reads: AWS_PROFILE (a config and credentials file of its own), the
    region, and the emulator's endpoints."""
    config, credentials = workdir / "aws-config", workdir / "aws-credentials"
    region = emulator.env["AWS_DEFAULT_REGION"]
    config.write_text(f"[profile emulator]\nregion = {region}\n")
    credentials.write_text(
        "[emulator]\n"
        f"aws_access_key_id = {emulator.env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {emulator.env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AMZN_BRAKET"))}
    env.update(emulator.env)
    env.update(
        AWS_PROFILE="emulator",
        AWS_REGION=region,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(credentials),
    )
    return env


@dataclass
class SuiteResult:
    tag_installed: str
    tag_run: str
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> outcome
    messages: dict[str, str] = field(default_factory=dict)
    deselected: dict[str, str] = field(default_factory=dict)
    crashed: bool = False
    seconds: float = 0.0

    def counts(self, local: bool) -> dict[str, int]:
        counts: dict[str, int] = {}
        for test, outcome in self.outcomes.items():
            if is_local(test) == local:
                counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    @property
    def served_ratio(self) -> float:
        counts = self.counts(local=False)
        ran = sum(v for k, v in counts.items() if k != "skipped")
        return counts.get("passed", 0) / ran if ran else 0.0


def is_local(test: str) -> bool:
    return any(test == p or test.startswith(p + "::") for p in LOCAL_ONLY)


def run_braket_suite(git_dir: Path, quick: bool, workdir: Path) -> SuiteResult:
    installed, tag = suite_tag(git_dir)
    if installed != tag:
        print(
            f"sdk_suites: the repository has no tag {installed} (the installed SDK); "
            f"running {tag}, the newest earlier tag",
            file=sys.stderr,
        )
    tree = checkout(_git_dir(git_dir), tag, workdir)
    emulator = Emulator(workdir, CURRENT, speed=5)
    result = SuiteResult(installed, tag)
    junit = workdir / "braket-suite.xml"
    try:
        env = profile_env(emulator, workdir)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
        command += ["--junitxml", str(junit), "-q", "-rN"]
        for test, why in CANNOT_SERVE.items():
            command += ["--deselect", test]
            result.deselected[test] = why
        command += list(QUICK) if quick else ["test/integ_tests"]
        started = time.monotonic()
        subprocess.run(command, cwd=tree, env=env, check=False)
        result.seconds = time.monotonic() - started
        result.crashed = not emulator.alive()
    finally:
        emulator.stop()
    read_junit(junit, result)
    return result


def read_junit(path: Path, result: SuiteResult) -> None:
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test = f"{module}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = (
                    child.tag if child.tag == "error" else "failed",
                    child.get("message", ""),
                )
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message", "")
        result.outcomes[test] = outcome
        if message:
            result.messages[test] = message.splitlines()[0][:300] if message else ""


# -- ionq-core's own integration suite --------------------------------------------------------


@dataclass
class IonqResult:
    version: str
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    crashed: bool = False

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts


def run_ionq_suite(workdir: Path) -> IonqResult:
    """ionq-core's ``tests/integration`` from its sdist at the installed version (PyPI's,
    through pip), run against the emulator with what its conftest reads: IONQ_API_KEY and
    IONQ_API_URL, both in the emulator's env file."""
    version = metadata.version("ionq-core")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         "--dest", str(workdir), f"ionq-core=={version}"],
        check=True,
    )  # fmt: skip
    [sdist] = workdir.glob(f"ionq_core-{version}.tar.gz")
    subprocess.run(["tar", "xzf", str(sdist), "-C", str(workdir)], check=True)
    tree = workdir / f"ionq_core-{version}"
    emulator = Emulator(workdir, None, speed=60)
    result = IonqResult(version)
    junit = workdir / "ionq-suite.xml"
    try:
        env = {**os.environ, **emulator.env}
        history(env)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/integration"]
        # Its settings select the unit tests and measure coverage (addopts): the
        # integration tests are selected instead. Plain HTTP (the emulator) makes ionq-core
        # warn about the API key in cleartext and leaves plain sockets where the suite
        # ignores leaked SSL ones: both are ignored, the rest of its warnings stay errors.
        command += ["-o", "addopts=", "-m", "integration", "--junitxml", str(junit), "-q"]
        command += ["-W", "ignore:base_url:UserWarning"]
        command += ["-W", "ignore:Exception ignored in:pytest.PytestUnraisableExceptionWarning"]
        subprocess.run(command, cwd=tree, env=env, check=False)
        result.crashed = not emulator.alive()
    finally:
        emulator.stop()
    suite = SuiteResult("", "")
    read_junit(junit, suite)
    result.outcomes, result.messages = suite.outcomes, suite.messages
    return result


def history(env: dict[str, str]) -> None:
    """The account's past: two jobs run with ionq-core before the suite, as on any
    account the suite was written against (it lists completed jobs it did not make)."""
    script = (
        "import os, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from ionq_core import IonQClient, wait_for_job\n"
        "from ionq_core.api.default import create_job\n"
        "from ionq_core.models.circuit_job_creation_payload import CircuitJobCreationPayload\n"
        "client = IonQClient(api_key=os.environ['IONQ_API_KEY'], base_url=os.environ['IONQ_API_URL'])\n"
        "body = {'type': 'ionq.circuit.v1', 'backend': 'simulator', 'shots': 100,\n"
        "        'input': {'gateset': 'qis', 'qubits': 1, 'circuit': [{'gate': 'h', 'target': 0}]}}\n"
        "for _ in range(2):\n"
        "    job = create_job.sync(client=client, body=CircuitJobCreationPayload.from_dict(body))\n"
        "    wait_for_job(client, job.id, timeout=120)\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True)


# -- QRMI's own Python examples ---------------------------------------------------------------

# QRMI's examples for IBM, IQM and Pasqal: (directory, arguments, input file, what a
# finished run prints). Their inputs come from their vendors' SDKs (qiskit-ibm-runtime,
# iqm-client, pulser) with programs too wide to simulate (IBM's is 127 qubits): the
# runner writes inputs of the same formats that an emulator can run (see ``qrmi_inputs``).
QRMI_EXAMPLES = (
    (
        "ibm_quantum_compute_service",
        ["ibm_fez", "sampler.json", "sampler"],
        "Task ended - TaskStatus.Completed",
    ),
    ("iqm_server", ["garnet", "iqm.json", "circuit"], "Task ended - TaskStatus.Completed"),
    ("pasqal_cloud", ["FRESNEL", "pulser.json"], "Task completed"),
)


@dataclass
class QrmiResult:
    tag_installed: str
    tag_run: str
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    crashed: bool = False

    @property
    def passed(self) -> int:
        return sum(1 for run in self.runs.values() if run["ok"])


def qrmi_inputs(into: Path) -> None:
    """Inputs in the formats the examples read: a SamplerV2 job's JSON as QRMI's
    generator writes it (OpenQASM 3 of an ISA circuit, ``support_qiskit: false``), an IQM
    run request (flux-quantum's IQM program), and a Pulser sequence's abstract JSON."""
    sys.path.insert(0, str(ROOT / "src"))
    from flux_quantum.vendors.iqm.program import run_request

    bell = (
        "OPENQASM 3.0;\nqubit[2] q;\nbit[2] c;\nh q[0];\ncz q[0], q[1];\nh q[1];\nc = measure q;\n"
    )
    (into / "iqm.json").write_text(run_request(bell, 100, 20))
    isa = (
        'OPENQASM 3.0;\ninclude "stdgates.inc";\nbit[2] meas;\n'
        "rz(pi/2) $0;\nsx $0;\nrz(pi/2) $0;\nrz(pi/2) $1;\nsx $1;\nrz(pi/2) $1;\n"
        "cz $0, $1;\nrz(pi/2) $1;\nsx $1;\nrz(pi/2) $1;\n"
        "meas[0] = measure $0;\nmeas[1] = measure $1;\n"
    )
    sampler = {
        "pubs": [[isa, []]],
        "version": 2,
        "support_qiskit": False,
        "shots": 100,
        "options": {},
    }
    (into / "sampler.json").write_text(json.dumps(sampler))
    (into / "pulser.json").write_text(
        resources.files("flux_quantum.vendors.pasqal")
        .joinpath("samples/two_atoms.json")
        .read_text()
    )


def run_qrmi_examples(git_dir: Path, workdir: Path) -> QrmiResult:
    installed = metadata.version("qrmi")
    tags = subprocess.run(
        ["git", "--git-dir", str(_git_dir(git_dir)), "tag", "--list"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    run = newest_at_or_before(tags, installed)
    if run != installed:
        print(f"sdk_suites: qrmi's repository has no tag {installed} (the installed qrmi); "
              f"running {run}'s examples, the newest earlier tag", file=sys.stderr)  # fmt: skip
    tree = workdir / "qrmi"
    subprocess.run(["git", "clone", "--quiet", str(_git_dir(git_dir)), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "--quiet", run], check=True)
    qrmi_inputs(workdir)
    result = QrmiResult(installed, run)
    emulator = Emulator(workdir, None, speed=60)
    try:
        env = {**os.environ, **emulator.env}
        for example, arguments, finished in QRMI_EXAMPLES:
            args = [str(workdir / a) if a.endswith(".json") else a for a in arguments]
            script = tree / "examples" / "qrmi" / "python" / example / "example.py"
            done = subprocess.run(
                [sys.executable, str(script), *args], env=env, cwd=workdir,
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            out = (done.stdout + done.stderr).replace(str(workdir), "<workdir>")
            ok = done.returncode == 0 and finished in out
            result.runs[example] = {"ok": ok, "status": done.returncode, "tail": out[-600:]}
        result.crashed = not emulator.alive()
    finally:
        emulator.stop()
    return result


# -- the report -------------------------------------------------------------------------------


def commit() -> str:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src", "bench/sdk_suites.py"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head + (" (modified)" if dirty else "")


def shown_command() -> str:
    """The command's arguments, each git directory as GIT_DIR (not where it was)."""
    words = sys.argv[1:]
    return " ".join(
        "GIT_DIR" if i and words[i - 1] in ("--braket-sdk", "--qrmi") else word
        for i, word in enumerate(words)
    )


def report(
    args: argparse.Namespace,
    load: LoadResult | None,
    suite: SuiteResult | None,
    ionq: IonqResult | None = None,
    qrmi: QrmiResult | None = None,
) -> str:
    lines = [f"# sdk_suites{' --quick' if args.quick else ''}", ""]
    lines.append(f"command: `python bench/sdk_suites.py {shown_command()}` at {STARTED_AT}")
    lines.append("")
    if load is not None:
        lines += [
            f"## load: {args.threads} threads x {args.tasks} tasks on dm1 and on SV1 at once",
            "",
            f"- tasks read: {load.tasks}, COMPLETED: {load.completed}, other: {load.other}",
            f"- client errors: {len(load.errors)}" + (f" (first: {load.errors[0]})" if load.errors else ""),
            f"- emulator pid {load.pid_before} -> {load.pid_after} (alive: {load.alive})",
            f"- {load.seconds:.0f} s; every task completes, the pid unchanged: {verdict(load.met)}",
            "",
        ]  # fmt: skip
    if suite is not None:
        served, local = suite.counts(local=False), suite.counts(local=True)
        ran = sum(v for k, v in served.items() if k != "skipped")
        lines += [
            f"## amazon-braket-sdk-python test/integ_tests at {suite.tag_run}"
            + (f" (installed SDK {suite.tag_installed[1:]}: no such tag)" if suite.tag_installed != suite.tag_run else ""),
            "",
            f"- served by the emulator: {served} -> {served.get('passed', 0)}/{ran} = "
            f"{100 * suite.served_ratio:.1f} % pass (target >= {100 * TARGET:g} %: "
            f"{verdict(suite.served_ratio >= TARGET)})",
            f"- the SDK's local simulator only: {local}",
            f"- emulator crashes: {1 if suite.crashed else 0} ({verdict(not suite.crashed)})",
            f"- {suite.seconds:.0f} s",
            "",
            f"Stand-in: {STAND_IN}.",
            "",
            "Not served (deselected), with why:",
            "",
        ]  # fmt: skip
        lines += [f"- `{test}`: {why}" for test, why in suite.deselected.items()]
        failing = [t for t, o in suite.outcomes.items() if o in ("failed", "error")]
        if failing:
            lines += ["", "Failing:", ""]
            lines += [f"- `{t}`: {suite.messages.get(t, '')}" for t in failing]
        skipped = [t for t, o in suite.outcomes.items() if o == "skipped"]
        if skipped:
            lines += ["", "Skipped by the suite itself:", ""]
            lines += [f"- `{t}`: {suite.messages.get(t, '')}" for t in skipped]
    if ionq is not None:
        counts = ionq.counts()
        ran = sum(v for k, v in counts.items() if k != "skipped")
        lines += [
            "",
            f"## ionq-core {ionq.version} tests/integration (its sdist), against the emulator",
            "",
            f"- {counts} -> {counts.get('passed', 0)}/{ran} pass; emulator crashes: "
            f"{1 if ionq.crashed else 0}",
            "- before it, the account's history: two jobs run with ionq-core (the suite lists "
            "completed jobs it did not make)",
        ]
        for test, outcome in ionq.outcomes.items():
            if outcome != "passed":
                lines.append(f"- {outcome}: `{test}`: {ionq.messages.get(test, '')}")
    if qrmi is not None:
        lines += [
            "",
            f"## QRMI's Python examples at {qrmi.tag_run}"
            + (f" (installed qrmi {qrmi.tag_installed}: no such tag)" if qrmi.tag_installed != qrmi.tag_run else ""),
            "",
            f"- {qrmi.passed}/{len(qrmi.runs)} ran to their end; emulator crashes: {1 if qrmi.crashed else 0}",
            "- inputs of the formats they read, that an emulator can simulate (their generators'"
            " programs come from the vendors' SDKs, IBM's on 127 qubits)",
        ]  # fmt: skip
        for example, run in qrmi.runs.items():
            lines.append(f"- `examples/qrmi/python/{example}/example.py`: "
                         + ("finished" if run["ok"] else f"FAILED (exit {run['status']})"))  # fmt: skip
    return "\n".join(lines) + "\n"


STARTED_AT = ""  # the commit the run started at (set by main before anything runs)


def main() -> int:
    global STARTED_AT
    STARTED_AT = commit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--braket-sdk", type=Path, help="amazon-braket-sdk-python git dir")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=None, help="tasks per thread (50; quick 5)")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-ionq", action="store_true")
    parser.add_argument("--qrmi", type=Path, help="qiskit-community/qrmi git dir (its examples)")
    parser.add_argument("--stem", default=None)
    args = parser.parse_args()
    if args.tasks is None:
        args.tasks = 5 if args.quick else 50
    stem = args.stem or ("sdk_suites_quick" if args.quick else "sdk_suites")
    load = suite = None
    with tempfile.TemporaryDirectory(prefix="sdk-suites-") as tmp:
        workdir = Path(tmp)
        if not args.skip_load:
            emulator = Emulator(workdir, None, speed=200)
            try:
                load = run_load(emulator, args.threads, args.tasks)
            finally:
                emulator.stop()
        if args.braket_sdk is not None:
            suite = run_braket_suite(args.braket_sdk, args.quick, workdir)
        else:
            print(
                "sdk_suites: no --braket-sdk GIT_DIR: the Braket suite is SKIPPED", file=sys.stderr
            )
        ionq = None if args.skip_ionq else run_ionq_suite(workdir)
        qrmi = None if args.qrmi is None else run_qrmi_examples(args.qrmi, workdir)
    text = report(args, load, suite, ionq, qrmi)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(text)
    document: dict[str, Any] = {"command": shown_command(), "commit": STARTED_AT}
    if load is not None:
        document["load"] = {**load.__dict__, "met": load.met}
    if suite is not None:
        document["braket"] = {
            "tag_installed": suite.tag_installed,
            "tag_run": suite.tag_run,
            "served": suite.counts(local=False),
            "local_only": suite.counts(local=True),
            "served_pass_ratio": suite.served_ratio,
            "crashed": suite.crashed,
            "outcomes": suite.outcomes,
            "messages": suite.messages,
            "deselected": suite.deselected,
        }
    if ionq is not None:
        document["ionq"] = {
            "version": ionq.version,
            "counts": ionq.counts(),
            "crashed": ionq.crashed,
            "outcomes": ionq.outcomes,
            "messages": ionq.messages,
        }
    if qrmi is not None:
        document["qrmi"] = {
            "tag_installed": qrmi.tag_installed,
            "tag_run": qrmi.tag_run,
            "runs": qrmi.runs,
            "crashed": qrmi.crashed,
        }
    (RESULTS / f"{stem}.json").write_text(json.dumps(document, indent=2) + "\n")
    ok = (load is None or load.met) and (
        suite is None or (suite.served_ratio >= TARGET and not suite.crashed)
    )
    ok = ok and (ionq is None or not ionq.crashed)
    ok = ok and (qrmi is None or (qrmi.passed == len(qrmi.runs) and not qrmi.crashed))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
