"""An on-premises QPU reached through QRMI in the multi-user cluster (issue 23): the
system instance's service drives the Pasqal QPU behind its warden (the emulator
container's) with QRMI's ``PasqalLocal`` resource, whose every call but the status
carries a credential made by the cluster's real munged; alice's Pulser job is held,
released and reads its own counts through the service, with no vendor setting of her
own. The image pays for the device from the site's account
(``[quantum.accounts] site = [..., "pasqal:pasqal-fresnel-onprem"]``) and points
``vendors.pasqal.warden_url`` at the warden.
"""

from __future__ import annotations

import json

from cluster import event_names, eventlog, output, run, submit, wait_event

# One atom, a pi pulse: the emulator's atoms are excited with probability
# sin^2(area / 2), so every run reads 1.
SEQUENCE = json.dumps(
    {
        "version": "1",
        "name": "a pi pulse",
        "register": [{"name": "q0", "x": 0.0, "y": 0.0}],
        "channels": {"ryd": "rydberg_global"},
        "operations": [
            {
                "op": "pulse",
                "channel": "ryd",
                "protocol": "min-delay",
                "amplitude": {"kind": "constant", "duration": 1000, "value": 3.141592653589793},
                "detuning": {"kind": "constant", "duration": 1000, "value": 0.0},
                "phase": 0.0,
                "post_phase_shift": 0.0,
            }
        ],
        "measurement": "ground-rydberg",
    }
)


def test_alices_pulser_job_on_the_onprem_pasqal_qpu_reads_its_counts():
    path = "/tmp/pi-alice.json"
    run("alice", "sh", "-c", f"umask 022; cat > {path} <<'EOF'\n{SEQUENCE}\nEOF")
    jobid = submit(
        "alice",
        "--setattr=qpu.device=pasqal-fresnel-onprem",
        f"--setattr=qpu.program={path}",
        "--setattr=qpu.shots=20",
        "flux",
        "quantum",
        "task",
        "--wait",
        "--json",
    )
    wait_event(jobid, "clean", timeout=240)
    names = event_names(jobid)
    assert "qpu-release" in names and names.index("qpu-release") < names.index("alloc"), names
    submitted = next(e for e in eventlog(jobid) if e["name"] == "qpu-submit")["context"]
    assert submitted["vendor"] == "pasqal" and submitted["device"] == "pasqal-fresnel-onprem"
    out = json.loads(output(jobid, "alice"))
    assert out["device"] == "pasqal-fresnel-onprem" and out["state"] == "COMPLETED", out
    assert out["counts"] == {"1": 20}, out
