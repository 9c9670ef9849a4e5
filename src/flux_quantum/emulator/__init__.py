"""A local vendor emulator for tests, demos and benchmarks: real wire protocols, emulated queues.

This package owns the vendor emulator: one loopback HTTP server (``Emulator``) that
speaks Braket's rest-json and a minimal S3 (``braket/``), IBM Quantum's IAM and Qiskit
Runtime REST API (``ibm/``), the IQM Server API (``iqm/``), Pasqal Cloud's API and an
on-premises warden (``pasqal/``), an on-premises IBM Quantum System's API, IAM and S3
bucket (``ibmqs/``), Alice & Bob's Felis API (``felis/``), OQTOPUS Cloud's User API
(``oqtopus/``) and IonQ's API v0.4 (``ionq/``) well enough for the unmodified
amazon-braket-sdk, boto3, qrmi, oqtopus-client and ionq-core, once pointed at it
(``Emulator.env()``). Each vendor side is a package of the same
shape: ``service`` (its requests routed, faulted and answered), ``scenario`` (what it
serves, from YAML or a dict), ``wire`` (its paths and answer shapes) and the collaborators
its service owns. What the sides share stays here: ``side`` (route, run, log and count a
request), ``queue`` (a device's queue in emulated time), ``clock``, ``server`` (sockets),
``wire`` (request and response), ``simulate`` (circuits checked, then run on the Braket
local simulator in the worker processes of ``simulation_pool``, ``simulation_worker``),
``scenario`` (the queue, price, downtime and fault every side describes alike),
``reading`` and ``bill`` (the report). The whole state is a pure function of an injected
clock (``WallClock`` with a ``speed``, or a ``ManualClock`` tests step), a seed and the
calls made. It must never listen on anything but IPv4 loopback, never need a real
credential (any AWS key is accepted and no signature is checked), never touch a real
vendor, and never block forever.
"""

from flux_quantum.emulator.braket import DeviceSpec, Fault, ReservationSpec, Scenario
from flux_quantum.emulator.clock import Clock, ManualClock, ScaledClock, WallClock
from flux_quantum.emulator.emulator import Emulator
from flux_quantum.emulator.felis import FelisScenario
from flux_quantum.emulator.ibm import IbmScenario
from flux_quantum.emulator.ibmqs import IbmQsScenario
from flux_quantum.emulator.ionq import IonqScenario
from flux_quantum.emulator.iqm import IqmScenario
from flux_quantum.emulator.oqtopus import OqtopusScenario
from flux_quantum.emulator.pasqal import PasqalScenario
from flux_quantum.emulator.scenario import QueueSpec, ScenarioError
from flux_quantum.emulator.side import Call

__all__ = [
    "Call",
    "Clock",
    "DeviceSpec",
    "Emulator",
    "Fault",
    "FelisScenario",
    "IbmQsScenario",
    "IbmScenario",
    "IonqScenario",
    "IqmScenario",
    "ManualClock",
    "OqtopusScenario",
    "PasqalScenario",
    "QueueSpec",
    "ReservationSpec",
    "ScaledClock",
    "Scenario",
    "ScenarioError",
    "WallClock",
]
