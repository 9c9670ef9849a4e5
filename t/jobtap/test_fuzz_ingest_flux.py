"""Flux tier: generated jobspecs through a real broker's ingest, as a guest.

The slow mode of the fuzz tests (t/protocol/test_request_fuzz.py is the fast one): hypothesis
draws ``attributes.system`` tables (a ``qpu`` near the grammar and far from it, and the
keys flux-quantum reserves), each is put into a ``flux submit --dry-run`` jobspec, signed
for a guest the way flux-core's own tests sign one (as t/protocol/test_credentials_flux.py does) and sent
with ``flux job submit --flags=signed`` to an instance running the ingest validator and
the quantum plugin. The instance accepts exactly the jobs the Python parser accepts
(the plugin's job.validate never refuses one it lets through), refuses the others with
the parser's one sentence, and stays up. FLUXQ_FUZZ_INGEST_EXAMPLES sets how many jobs
(default 200: a few seconds).

Also here: a finding of the memcheck run, pinned without valgrind: after a job-manager
reload a --dependency=qpu:JOBID follower is checked after the job it follows.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

hypothesis = pytest.importorskip(
    "hypothesis", reason="ingest fuzz SKIPPED: pip install '.[test]' brings hypothesis"
)
from fluxinstance import FluxInstance  # noqa: E402
from fuzzing import strategies as gen  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from flux_quantum.protocol.request import RequestError, check_jobspec_attributes  # noqa: E402

pytestmark = pytest.mark.flux

GUEST = os.getuid() + 4343
SIGN_EACH_AS = """import sys
from flux.security import SecurityContext
context = SecurityContext()
for line in sys.stdin:
    signed = context.sign_wrap_as(int(sys.argv[1]), line.strip(), mech_type="none")
    sys.stdout.write(signed.decode() + "\\n")
"""
EXAMPLES = int(os.environ.get("FLUXQ_FUZZ_INGEST_EXAMPLES", "200"))
# What a user can put in attributes.system that flux-quantum reads; Flux's own keys
# (duration, environment, ...) are left to Flux's jobspec validator.
ingest_systems = st.fixed_dictionaries(
    {}, optional={"qpu": gen.qpu_values, **{key: gen.json_values for key in gen.RESERVED}}
)


@pytest.fixture(scope="module")
def inst(tmp_path_factory) -> Iterator[FluxInstance]:
    instance = FluxInstance(tmp_path_factory.mktemp("ingest-fuzz"), size=1).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


def draw_systems(count: int) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(ingest_systems)
    def collect(system: dict[str, Any]) -> None:
        try:
            json.dumps(system, allow_nan=False)
        except ValueError:
            return
        drawn.append(system)

    collect()
    return drawn


def sign_for_guest(inst: FluxInstance, specs: list[dict[str, Any]]) -> list[str]:
    """Every jobspec signed for GUEST in one ``flux python`` (one per line), with
    security mechanism ``none``, which a test instance accepts from its owner."""
    proc = inst.run(
        ["flux", "python", "-c", SIGN_EACH_AS, str(GUEST)],
        input="".join(json.dumps(spec) + "\n" for spec in specs),
        timeout=300,
    )
    return proc.stdout.splitlines()


def flux_can_read(system: dict[str, Any]) -> bool:
    """Whether jansson reads the jobspec at all: no NUL, no lone surrogate in a string
    (Flux refuses such a jobspec before any validator sees it)."""
    try:
        text = json.dumps(system, ensure_ascii=False)
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text and "\\u0000" not in text


def python_accepts(system: dict[str, Any]) -> tuple[bool, str]:
    try:
        check_jobspec_attributes(system)
    except RequestError as exc:
        return False, str(exc)
    return True, ""


def test_the_instance_accepts_exactly_what_the_python_parser_accepts(inst) -> None:
    base = json.loads(inst.run(["flux", "submit", "--dry-run", "true"]).stdout)
    base["attributes"]["system"]["environment"] = {}
    systems = draw_systems(EXAMPLES)
    assert len(systems) >= EXAMPLES // 2
    specs = []
    for system in systems:
        spec = json.loads(json.dumps(base))
        spec["attributes"]["system"].update(system)
        specs.append(spec)
    signed = sign_for_guest(inst, specs)
    assert len(signed) == len(specs)
    path = inst.workdir / "guest.signed"
    env = {"FLUX_HANDLE_USERID": str(GUEST)}
    accepted = refused = unreadable = 0
    for system, text in zip(systems, signed, strict=True):
        path.write_text(text)
        res = inst.run(["flux", "job", "submit", "--flags=signed", str(path)], check=False, env=env)
        if not flux_can_read(system):
            assert res.returncode != 0, system
            unreadable += 1
            continue
        ok, reason = python_accepts(system)
        assert (res.returncode == 0) is ok, (system, res.stderr, reason)
        if ok:
            accepted += 1
        else:
            refused += 1
            message = res.stderr.strip()
            assert reason in message and "\n" not in message, (message, reason)
    inst.run(["flux", "cancel", "--all", "--user=all"], check=False)
    assert inst.run(["flux", "jobtap", "query", "quantum.so"]).returncode == 0
    print(f"ingest fuzz: {accepted} accepted, {refused} refused, {unreadable} not JSON to Flux")
    assert accepted > 0 and refused > 0, (accepted, refused)


def test_a_follower_is_checked_after_its_leader_at_reload(inst) -> None:
    leader = inst.submit("--setattr=qpu=braket:sv1", "true")
    inst.wait_event(leader, "dependency-add")
    follower = inst.submit(f"--dependency=qpu:{leader}", "true")
    inst.wait_event(follower, "dependency-add")
    for _ in range(2):  # the hash order of active jobs differs between reloads
        inst.restart_job_manager()
    assert "plugin_check_dependencies" not in inst.broker_log()
    assert inst.state(follower) == "DEPEND"
    subprocess.run(["flux", "cancel", leader, follower], env=inst.env, check=False)
