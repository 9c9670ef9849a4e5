"""The emulated OQTOPUS side: OQTOPUS Cloud's User API as the ``oqtopus-client`` SDK calls it, under /oqtopus.

This package owns everything the emulator answers for OQTOPUS clients: ``service`` routes
each request, checks its ``q-api-token``, injects the scenario's faults and serves devices
and sampling jobs (their OpenQASM programs uploaded through a presigned form POST, queued
on the shared queue model, run on the Braket local simulator, their results downloaded
through presigned URLs); ``scenario`` reads the scenario; ``wire`` has the side's paths,
OQTOPUS's error shape, the job statuses and the zip archives. It must never import another
vendor's side.
"""

from flux_quantum.emulator.oqtopus.scenario import (
    OqtopusDeviceSpec,
    OqtopusFault,
    OqtopusScenario,
)
from flux_quantum.emulator.oqtopus.service import OqtopusService
from flux_quantum.emulator.oqtopus.wire import PREFIX
from flux_quantum.emulator.side import SideEntry, serve

# OQTOPUS Cloud's User API (under /oqtopus), as the oqtopus-client SDK reaches it.
SIDE = SideEntry(
    "oqtopus", "oqtopus", (PREFIX,), serve(OqtopusService), OqtopusScenario, "oqtopus",
    "--oqtopus-scenario", "OQTOPUS", lambda s: len(s.devices),
)  # fmt: skip

__all__ = [
    "PREFIX", "SIDE", "OqtopusDeviceSpec", "OqtopusFault", "OqtopusScenario", "OqtopusService",
]  # fmt: skip
