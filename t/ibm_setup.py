"""The IBM side of the flux tier's service tests: ``Ibm``, a ``Qpu`` whose emulator
serves IBM Quantum (one backend per story, a create whose answer comes late to kill the
service in between) and whose instance's environment carries QRMI's settings, as a site
exports them for the service; the catalog of those backends, the Bell program in IBM's
gates and the job's own later task riding a session (``RIDE``). It starts nothing at
import; a test that uses it is a flux test."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path

from qpu_setup import Qpu
from vendor_world import VendorWorld

from flux_quantum.emulator import Emulator, ManualClock
from flux_quantum.emulator.ibm import IbmScenario

BELL = """OPENQASM 3.0;
include "stdgates.inc";
qubit[2] q;
bit[2] c;
h q[0];
cx q[0], q[1];
c = measure q;
"""

# One backend per story, so queues never leak between tests.
BACKENDS = [
    {"name": "ibm_held", "qubits": 5, "queue": {"depth": 3, "service_time": 10}},
    {"name": "ibm_ride", "qubits": 5, "queue": {"depth": 0, "service_time": 10}},
    {"name": "ibm_kill", "qubits": 5, "queue": {"depth": 0, "service_time": 10}},
    {"name": "ibm_down", "qubits": 5, "queue": {"depth": 0, "service_time": 10}},
    {"name": "ibm_cancel", "qubits": 5, "queue": {"depth": 2, "service_time": 10}},
    {"name": "ibm_find", "qubits": 5, "queue": {"depth": 1, "service_time": 10}},
]
FAULTS = [  # the create lands, its answer comes 20 s later: time to kill the service
    {"operation": "CreateJob", "backend": "ibm_find", "delay": 20, "after_commit": True}
]
# drain_seconds_per_task is large so that, until the emulated queue moves, the estimate
# rests on the pending counts alone (the tests move the emulator's clock by hand).
CATALOG = (
    "devices:\n"
    + "".join(
        f"  - {{name: {b['name'][4:]}, vendor: ibm, id: {b['name']}, class: qpu, qubits: 5,"
        " price: {per_minute: 96}, properties: {drain_seconds_per_task: 1000}}\n"
        for b in BACKENDS
    )
    + (
        "  - {name: local-find, vendor: local, id: ibm_find, class: qpu, qubits: 5,"
        " price: {per_minute: 96}, properties: {drain_seconds_per_task: 1000}}\n"
    )
)

# The job's own later task, riding the session through the environment that
# `flux quantum task --session-env` printed (QRMI's settings are in the environment).
RIDE = r"""
import os
from flux_quantum.catalog import load_catalog
from flux_quantum.job.consumer import current_task
from flux_quantum.vendors.ibm.settings import IbmSettings
from flux_quantum.vendors.ibm.vendor import IbmVendor

job = current_task()
catalog = load_catalog(job.catalog)
vendor = IbmVendor(IbmSettings(settle=0), devices=catalog.devices)
later = vendor.submit(catalog.get(job.device), open("bell.qasm").read(), 10,
                      f"{job.jobid}-iter-1")
print(job.task_id, later.task_id, flush=True)
"""


class Ibm(VendorWorld):
    """``Qpu`` of the service tests with an IBM emulator, and an instance whose
    environment carries QRMI's settings (what a site exports for the service)."""

    def __init__(
        self,
        workdir: Path,
        emu: Emulator | None = None,
        catalog: str = CATALOG,
        config: str | None = None,
    ) -> None:
        if emu is None:
            # Emulated time starts now, as IBM's does: find_task lists jobs created since
            # the service's own recorded time.
            scenario = IbmScenario.from_dict({"backends": BACKENDS, "faults": FAULTS})
            emu = Emulator(clock=ManualClock(epoch=datetime.now(UTC)), ibm=scenario)
        # The jobs get QRMI's settings but no key: they read their tasks through the
        # service, which has the credentials. A job that calls IBM itself (a session's
        # later task) carries the key, as it may in its owner's own instance.
        super().__init__(
            workdir,
            emu,
            ("ibm",),
            catalog,
            secret_suffixes=("_IAM_APIKEY",),
            files={"bell.qasm": BELL, "ride.py": RIDE},
            config=config,
        )

    start_service = Qpu.start_service  # the catalog's local device reaches the emulator too

    def kill_service(self) -> None:
        """kill -9 of the service process; its supervisor starts a new one."""
        pid = self.status()["pid"]
        os.kill(pid, signal.SIGKILL)
        self.until(lambda: (s := self.status()).get("running") and s["pid"] != pid)

    def closed(self, session_id: str) -> bool:
        return self.emu.ibm.session_state(session_id) == "closed"
