"""A local Amazon Braket for tests, demos and benchmarks: real wire protocol, emulated queues.

This package owns the vendor emulator: one loopback HTTP server that speaks enough of
Braket's rest-json protocol (botocore's braket 2019-09-01 model) for the unmodified
amazon-braket-sdk and boto3 to create, poll, cancel and search quantum tasks and read
devices, once ``AWS_ENDPOINT_URL_BRAKET`` and ``AWS_ENDPOINT_URL_S3`` point at it (see
``Emulator.env()``). Devices, queue load, availability, faults and Braket Direct
reservations come from a ``Scenario`` (reservations can also be booked while it runs); the
whole state is a pure function of an injected clock (``WallClock`` with a ``speed``, or a
``ManualClock`` tests step), a seed and the calls made. Circuits really run on the Braket
local simulator.

S3: the emulator serves a minimal in-memory, path-style S3 itself under ``/s3`` on the same
port (GetObject, HeadObject, PutObject, DeleteObject, ListObjectsV2, HeadBucket,
CreateBucket). It was chosen over moto's ThreadedMotoServer because it costs no start-up
time, needs no second port or thread, publishes a task's results.json atomically under the
same lock that decides the task COMPLETED, and keeps no process-global state (moto's backends
are global, so two emulators in one process would share buckets).

It must never listen on anything but IPv4 loopback, never need a credential (any key is
accepted and no signature is checked), never touch the real AWS, and never block forever.
"""

from flux_quantum.emulator.braket import DeviceSpec, Fault, ReservationSpec, Scenario
from flux_quantum.emulator.clock import Clock, ManualClock, ScaledClock, WallClock
from flux_quantum.emulator.emulator import Emulator
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.emulator.iqm import IqmScenario
from flux_quantum.emulator.pasqal import PasqalScenario
from flux_quantum.emulator.scenario import QueueSpec, ScenarioError
from flux_quantum.emulator.side import Call

__all__ = [
    "Call",
    "Clock",
    "DeviceSpec",
    "Emulator",
    "Fault",
    "IbmScenario",
    "IqmScenario",
    "ManualClock",
    "PasqalScenario",
    "QueueSpec",
    "ReservationSpec",
    "ScaledClock",
    "Scenario",
    "ScenarioError",
    "WallClock",
]
