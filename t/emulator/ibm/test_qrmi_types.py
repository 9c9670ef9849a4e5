"""The emulator facade serves the IBM Quantum System and Felis sides beside the others:
its environment reaches both through the vendors and the real qrmi client (``/ibm-qs``
is not taken for IBM's ``/ibm``), their calls are in its log and its report bills their
jobs; and so for its OQTOPUS side, through the real oqtopus-client SDK."""

from __future__ import annotations

from served_felis import FLIP

from flux_quantum.catalog import Device, PriceModel
from flux_quantum.vendors.base import DeviceStatus, TaskState
from flux_quantum.vendors.felis.vendor import FelisVendor
from flux_quantum.vendors.ibm_quantum_system.vendor import IbmQuantumSystemVendor
from flux_quantum.vendors.oqtopus.vendor import OqtopusVendor

KOBE = Device("kobe", "ibm-quantum-system", "ibm_kobe", "qpu", 5, "us-east-1", PriceModel())
CATS = Device(
    "ab-cats", "alice-bob-felis", "ab_emu_6q_physical_cats", "simulator", 6, "eu-west-3",
    PriceModel(),
)  # fmt: skip
ANEMONE = Device("oq", "oqtopus", "anemone", "qpu", 64, "ap-northeast-1", PriceModel())
# Fixtures: emulator, manual_clock (see t/emulator_fixtures.py).
pytest_plugins = ["emulator_fixtures"]

X = "OPENQASM 3.0;\nqubit[1] q;\nbit[1] c;\nx q[0];\nc[0] = measure q[0];\n"


def test_the_facade_serves_both_sides_from_its_environment(emulator, manual_clock):
    env = emulator.env()
    qs = IbmQuantumSystemVendor(devices=[KOBE], environ=env)
    felis = FelisVendor(devices=[CATS], environ=env)
    assert qs.probe(KOBE).status is DeviceStatus.ONLINE
    on_qs = qs.submit(KOBE, X, 10, "tok-qs")
    on_felis = felis.submit(CATS, FLIP, 10, "tok-ab")
    manual_clock.advance(60)
    assert qs.poll(on_qs).state is TaskState.COMPLETED
    assert qs.result(on_qs).counts == {"1": 10}
    assert felis.result(on_felis).counts == {"10": 10}
    assert emulator.call_count("CreateJob") == 2  # one on each side
    assert emulator.call_count("UploadInput") == 1
    report = emulator.report()
    billed = {row["vendor"]: row["state"] for row in report["bill"]["tasks"]}
    assert billed["ibm-quantum-system"] == "COMPLETED"
    assert billed["alice-bob-felis"] == "COMPLETED"
    assert report["calls_by_vendor"]["ibm-quantum-system"]["IamToken"] == 1


def test_the_facade_serves_oqtopus_from_its_environment(emulator, manual_clock):
    oqtopus = OqtopusVendor(devices=[ANEMONE], environ=emulator.env())
    snapshot = oqtopus.probe(ANEMONE)
    assert snapshot.status is DeviceStatus.ONLINE and snapshot.queue_depth == 2
    task = oqtopus.submit(ANEMONE, X, 10, "tok-oq")
    manual_clock.advance(60)
    assert oqtopus.poll(task).state is TaskState.COMPLETED
    assert oqtopus.result(task).counts == {"1": 10}
    assert emulator.call_count("SubmitJob") == 1
    report = emulator.report()
    billed = {row["vendor"]: row for row in report["bill"]["tasks"]}
    assert billed["oqtopus"]["state"] == "COMPLETED" and billed["oqtopus"]["token"] == "tok-oq"
    assert report["calls_by_vendor"]["oqtopus"]["RegisterJob"] == 1
