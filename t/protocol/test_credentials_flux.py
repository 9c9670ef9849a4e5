"""Flux tier: a vendor credential in a QPU job's environment, in one's own instance and
from a guest.

``flux submit`` copies the submitter's environment into the jobspec, which the instance
owner can read. In one's own instance (``flux start``, ``flux alloc``, ``flux batch``)
the owner is the submitter: the stand-in keys the emulator's env file exports are
accepted and the job runs. A guest's job carrying one is refused at submit by the
ingest validator, naming the variables and never their values, so the key never reaches
another user's KVS. The guest's submission is signed for the guest the way flux-core's
own tests sign one (security mechanism ``none``, accepted by a test instance from its
owner) and sent with ``FLUX_HANDLE_USERID``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from fluxinstance import FluxInstance
from qpu_setup import Qpu, catalog_text

from flux_quantum.protocol.request import credential_variables

pytestmark = pytest.mark.flux

GUEST = os.getuid() + 4242


@pytest.fixture(scope="module")
def inst(tmp_path_factory) -> Iterator[FluxInstance]:
    instance = FluxInstance(tmp_path_factory.mktemp("credentials"), size=2).start()
    yield instance
    assert instance.stop() == 0, instance.broker_log()


@pytest.fixture
def qpu(inst: FluxInstance) -> Iterator[Qpu]:
    catalog = inst.workdir / "backends.yaml"
    catalog.write_text(catalog_text())
    q = Qpu(inst, catalog)
    # What the emulator's env file exports: its stand-in AWS and IBM keys among them.
    q.job_env = {**q.job_env, **q.emu.env(), **q.emu.ibm.env(q.emu.url)}
    yield q
    q.close()


def test_keys_in_the_environment_are_accepted_in_ones_own_instance(qpu: Qpu) -> None:
    assert "AWS_SECRET_ACCESS_KEY" in qpu.job_env
    qpu.start_service()
    jobid = qpu.submit("--setattr=qpu.device=local:q-delta", "true")
    qpu.wait_event(jobid, "qpu-release")
    qpu.wait_event(jobid, "clean", timeout=60)
    assert qpu.inst.run(["flux", "job", "status", jobid], check=False).returncode == 0


def submit_as_guest(qpu: Qpu, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``flux submit --setattr=qpu.device=local:q-delta true`` from ``env``, by ``GUEST``."""
    return qpu.inst.submit_as(GUEST, ["--setattr=qpu.device=local:q-delta", "true"], env)


@pytest.mark.flux_security  # signs as the guest with flux.security
def test_a_guests_job_with_keys_is_refused_at_submit_naming_them(qpu: Qpu) -> None:
    env = {**qpu.inst.env, **qpu.job_env}
    res = submit_as_guest(qpu, env)
    assert res.returncode != 0, res.stdout
    message = res.stderr.strip()
    assert "the job's environment holds AWS_SECRET_ACCESS_KEY" in message, message
    assert "--env=-AWS_SECRET_ACCESS_KEY" in message, message
    for name in ("AWS_SECRET_ACCESS_KEY", "QRMI_IBM_QCS_IAM_APIKEY"):
        assert qpu.job_env[name] not in message
    # The same job without its keys is the guest's to submit.
    held = set(credential_variables({"environment": env}))
    assert {"AWS_SECRET_ACCESS_KEY", "QRMI_IBM_QCS_IAM_APIKEY"} <= held
    clean = {k: v for k, v in env.items() if k not in held}
    ok = submit_as_guest(qpu, clean)
    assert ok.returncode == 0, ok.stderr
    qpu.inst.run(["flux", "cancel", ok.stdout.strip()], check=False)
