"""Selection policies on emulated fleets (devices + snapshots): each policy, its
tie-breaks, the constraints, dropped devices with their reasons, the explanation as text
and as JSON, the error when nothing qualifies, and drain-rate learning."""

from __future__ import annotations

import json

import pytest

from flux_quantum.catalog import parse_catalog
from flux_quantum.protocol.request import parse_request
from flux_quantum.selection.policies import (
    DrainEstimator,
    NoDeviceError,
    select_device,
    static_candidates,
)
from flux_quantum.vendors.base import DeviceSnapshot, DeviceStatus

FLEET_YAML = """
devices:
  - {name: sv1, vendor: braket, id: "arn:aws:braket:::device/quantum-simulator/amazon/sv1",
     class: simulator, qubits: 34, price: {per_minute: 0.075, min_seconds: 3}, slots: 2,
     properties: {drain_seconds_per_task: 2}}
  - {name: dm1, vendor: braket, id: "arn:aws:braket:::device/quantum-simulator/amazon/dm1",
     class: simulator, qubits: 17, price: {per_minute: 0.075, min_seconds: 3}, slots: 2,
     properties: {drain_seconds_per_task: 2}}
  - {name: forte1, vendor: braket, id: "arn:aws:braket:us-east-1::device/qpu/ionq/Forte-1",
     class: qpu, qubits: 36, price: {per_task: 0.30, per_shot: 0.08},
     properties: {drain_seconds_per_task: 60}}
  - {name: garnet, vendor: braket, id: "arn:aws:braket:eu-north-1::device/qpu/iqm/Garnet",
     class: qpu, qubits: 20, price: {per_task: 0.30, per_shot: 0.00145},
     properties: {drain_seconds_per_task: 30}}
  - {name: ankaa3, vendor: braket, id: "arn:aws:braket:us-west-1::device/qpu/rigetti/Ankaa-3",
     class: qpu, qubits: 82, price: {per_task: 0.30, per_shot: 0.0009},
     properties: {drain_seconds_per_task: 30}}
  - {name: emu-qpu, vendor: local, id: "arn:aws:braket:us-east-1::device/qpu/emulator/qpu-a",
     class: qpu, qubits: 10, price: {per_task: 0.30, per_shot: 0.0009}}
"""
FLEET = parse_catalog(FLEET_YAML, "fleet.yaml")


def snap(name: str, depth: int | None = 0, status=DeviceStatus.ONLINE, **kw) -> DeviceSnapshot:
    return DeviceSnapshot(device=name, status=status, queue_depth=depth, t=100.0, **kw)


def fleet(**overrides: DeviceSnapshot) -> dict[str, DeviceSnapshot]:
    base = {
        "sv1": snap("sv1", 40),
        "dm1": snap("dm1", 10),
        "forte1": snap("forte1", 3),
        "garnet": snap("garnet", 12),
        "ankaa3": snap("ankaa3", 5),
        "emu-qpu": snap("emu-qpu", 0),
    }
    base.update(overrides)
    return base


def pick(text_or_table, snapshots=None, **kw):
    request = parse_request(text_or_table)
    return select_device(FLEET, fleet() if snapshots is None else snapshots, request, **kw)


def test_explicit_device_wins_even_when_others_are_better():
    selection = pick("braket:forte1")
    assert selection.device.name == "forte1"
    assert selection.explanation.policy == "explicit"
    assert selection.explanation.candidates[0].reason == "chosen: the requested device"
    assert selection.snapshot.queue_depth == 3


def test_min_cost_uses_request_shots():
    # At 1000 shots the simulators (minimum 3 s at $0.075/min) are cheapest; sv1 and dm1
    # cost the same, so the tie goes to the shorter expected wait: dm1 (10 x 2 s).
    assert pick({"policy": "min-cost"}).device.name == "dm1"
    # Among QPUs: Ankaa ($0.30 + 1000 x $0.0009) beats Garnet and Forte.
    chosen = pick({"policy": "min-cost", "class": "qpu", "vendor": "braket"})
    assert chosen.device.name == "ankaa3"
    costs = {c.device: c.cost for c in chosen.explanation.candidates}
    assert costs["ankaa3"] == pytest.approx(1.20)
    assert costs["garnet"] == pytest.approx(1.75)
    assert costs["forte1"] == pytest.approx(80.30)


def test_min_cost_full_tie_breaks_on_name():
    snapshots = fleet(sv1=snap("sv1", 10), dm1=snap("dm1", 10))
    explanation = pick({"policy": "min-cost", "class": "simulator"}, snapshots).explanation
    assert [c.device for c in explanation.candidates if c.eligible] == ["dm1", "sv1"]
    assert explanation.chosen == "dm1"


def test_min_queue_and_its_ties():
    assert pick({"policy": "min-queue"}).device.name == "emu-qpu"
    # Queue tie between forte1 and ankaa3: the cheaper wins.
    snapshots = fleet(**{"emu-qpu": snap("emu-qpu", 9), "forte1": snap("forte1", 5)})
    selection = pick({"policy": "min-queue", "class": "qpu"}, snapshots)
    assert selection.device.name == "ankaa3"
    assert [c.device for c in selection.explanation.candidates if c.eligible] == [
        "ankaa3",
        "forte1",
        "emu-qpu",
        "garnet",
    ]


def test_min_queue_ranks_capped_after_exact_and_unknown_last():
    snapshots = fleet(
        sv1=snap("sv1", 4000, queue_capped=True),
        dm1=snap("dm1", 4000),
        **{"emu-qpu": snap("emu-qpu", None)},
    )
    explanation = pick({"policy": "min-queue", "class": "simulator"}, snapshots).explanation
    assert [c.device for c in explanation.candidates if c.eligible] == ["dm1", "sv1"]
    explanation = pick({"policy": "min-queue", "vendor": "local"}, snapshots).explanation
    assert explanation.chosen == "emu-qpu"  # unknown depth is still eligible


def test_min_wait_weighs_queue_by_drain_time():
    # forte1: 3 x 60 s = 180 s; ankaa3: 5 x 30 s = 150 s; garnet 12 x 30 s = 360 s.
    selection = pick({"policy": "min-wait", "class": "qpu", "vendor": "braket"})
    assert selection.device.name == "ankaa3"
    waits = {c.device: c.expected_wait for c in selection.explanation.candidates}
    assert (waits["ankaa3"], waits["forte1"], waits["garnet"]) == (150.0, 180.0, 360.0)
    assert selection.explanation.candidates[0].drain.source == "catalog"


def test_min_wait_learns_from_observed_drain():
    estimator = DrainEstimator()
    # forte1 is observed draining 1 task every 10 s (catalog said 60 s).
    for t, depth in ((0.0, 30), (100.0, 20), (200.0, 10)):
        estimator.observe(DeviceSnapshot("forte1", DeviceStatus.ONLINE, queue_depth=depth, t=t))
    estimate = estimator.estimate(FLEET.get("forte1"))
    assert estimate.source == "learned"
    assert estimate.samples == 2
    assert estimate.seconds_per_task == pytest.approx(10.0)
    selection = pick(
        {"policy": "min-wait", "class": "qpu", "vendor": "braket"}, estimator=estimator
    )
    assert selection.device.name == "forte1"  # 3 x 10 s beats ankaa3's 150 s
    assert "learned from 2" in selection.explanation.candidates[0].drain.describe()
    # A depth's fall is a lower bound of the rate: never what a poller plans with.
    assert estimator.estimate(FLEET.get("forte1"), polling=True).source == "catalog"
    estimator.observe_position("forte1", "task-1", 9, 300.0)
    estimator.observe_position("forte1", "task-1", 7, 340.0)
    for polling in (True, False):  # positions win over depths, both ways
        assert estimator.estimate(FLEET.get("forte1"), polling).seconds_per_task == 20.0


def test_drain_estimator_ignores_rises_capped_and_out_of_order_and_uses_positions():
    estimator = DrainEstimator(alpha=0.5)
    device = FLEET.get("garnet")
    observe = estimator.observe
    observe(DeviceSnapshot("garnet", DeviceStatus.ONLINE, queue_depth=10, t=0.0))
    observe(DeviceSnapshot("garnet", DeviceStatus.ONLINE, queue_depth=15, t=10.0))  # arrivals
    observe(
        DeviceSnapshot("garnet", DeviceStatus.ONLINE, queue_depth=4000, queue_capped=True, t=20)
    )
    observe(DeviceSnapshot("garnet", DeviceStatus.ONLINE, queue_depth=1, t=5.0))  # out of order
    assert estimator.estimate(device).source == "catalog"
    # A task's position falls 8 places in 40 s: 5 s per task, exactly.
    estimator.observe_position("garnet", "task-1", 10, 100.0)
    estimator.observe_position("garnet", "task-1", 2, 140.0)
    assert estimator.estimate(device).seconds_per_task == pytest.approx(5.0)
    # Unchanged for a while, then 2 places in 40 s: (0.5 x 8 + 2) tasks in
    # (0.5 x 40 + 40) s with alpha 0.5, i.e. 10 s per task.
    estimator.observe_position("garnet", "task-1", 2, 160.0)
    estimator.observe_position("garnet", "task-1", 0, 180.0)
    assert estimator.estimate(device).seconds_per_task == pytest.approx(10.0)
    # Without catalog property and observations, the class prior applies.
    assert estimator.estimate(FLEET.get("emu-qpu")).source == "prior"


def test_constraints_filter_and_say_why():
    request = parse_request({"min_qubits": 30, "max_cost": 5, "class": "qpu", "policy": "min-wait"})
    selection = select_device(FLEET, fleet(), request)
    assert selection.device.name == "ankaa3"
    reasons = {c.device: c.reason for c in selection.explanation.candidates}
    assert reasons["sv1"] == "dropped: class simulator, request asks for qpu"
    assert reasons["garnet"] == "dropped: 20 qubits < min_qubits 30"
    assert reasons["forte1"] == "dropped: estimated cost $80.3000 > max_cost $5"
    assert reasons["ankaa3"] == "chosen: shortest expected wait"
    assert [d.name for d in static_candidates(FLEET, request)] == ["ankaa3"]


def test_offline_out_of_window_unreachable_and_full_devices_are_skipped():
    snapshots = fleet(
        sv1=snap("sv1", 0, DeviceStatus.OFFLINE, reason="MAINTENANCE"),
        dm1=snap("dm1", 0, in_window=False),
        garnet=snap("garnet", None, DeviceStatus.UNREACHABLE, reason="no answer within 5s"),
        ankaa3=snap("ankaa3", 0, DeviceStatus.RETIRED),
    )
    request = parse_request({"policy": "min-queue", "vendor": "braket"})
    selection = select_device(FLEET, snapshots, request, in_flight={"forte1": 0})
    assert selection.device.name == "forte1"
    reasons = {c.device: c.reason for c in selection.explanation.candidates}
    assert reasons["sv1"] == "dropped: offline (MAINTENANCE)"
    assert reasons["dm1"] == "dropped: outside its execution window"
    assert reasons["garnet"] == "dropped: unreachable (no answer within 5s)"
    assert reasons["ankaa3"] == "dropped: retired"
    # The one remaining device has its single slot taken: nothing qualifies.
    with pytest.raises(NoDeviceError) as info:
        select_device(FLEET, snapshots, request, in_flight={"forte1": 1})
    assert "forte1 all 1 slot in use" in str(info.value)


def test_all_offline_fleet_gives_one_clear_error():
    offline = {
        name: snap(name, 0, DeviceStatus.OFFLINE, reason="MAINTENANCE") for name in FLEET.names()
    }
    with pytest.raises(NoDeviceError) as info:
        pick({"policy": "min-cost", "class": "simulator"}, offline)
    assert str(info.value) == (
        "no device satisfies qpu request 'any': sv1 offline (MAINTENANCE), "
        "dm1 offline (MAINTENANCE), forte1 class qpu, request asks for simulator, "
        "garnet class qpu, request asks for simulator, "
        "ankaa3 class qpu, request asks for simulator, "
        "emu-qpu class qpu, request asks for simulator"
    )
    assert info.value.explanation.chosen is None
    assert all(not c.eligible for c in info.value.explanation.candidates)


def test_explicit_offline_and_unknown_device_errors_name_only_that_device():
    snapshots = fleet(sv1=snap("sv1", 0, DeviceStatus.OFFLINE, reason="MAINTENANCE"))
    with pytest.raises(NoDeviceError) as info:
        pick("sv1", snapshots)
    assert str(info.value) == "no device satisfies qpu request 'sv1': sv1 offline (MAINTENANCE)"
    with pytest.raises(NoDeviceError) as info:
        pick("braket:aria1")
    assert str(info.value) == (
        "no device satisfies qpu request 'braket:aria1': no catalog device is named 'aria1' "
        "(known: sv1, dm1, forte1, garnet, ankaa3, emu-qpu)"
    )


def test_max_wait_drops_devices_with_longer_expected_wait():
    selection = pick({"policy": "min-cost", "class": "qpu", "vendor": "braket", "max_wait": "160s"})
    assert selection.device.name == "ankaa3"
    reasons = {c.device: c.reason for c in selection.explanation.candidates}
    assert reasons["forte1"] == "dropped: expected wait 3m > max_wait 2m40s"
    with pytest.raises(NoDeviceError, match="garnet expected wait 6m > max_wait 60s"):
        pick({"device": "garnet", "max_wait": 60})


def test_explanation_text_and_json():
    snapshots = fleet(garnet=snap("garnet", 0, DeviceStatus.OFFLINE, reason="MAINTENANCE"))
    explanation = pick({"policy": "min-wait", "class": "qpu"}, snapshots).explanation
    text = explanation.render_text()
    lines = text.splitlines()
    assert lines[0] == (
        "policy min-wait for 'any policy=min-wait shots=1000 release_at=done class=qpu': "
        "expected wait, then estimated cost, then name"
    )
    assert lines[1].split() == [
        "DEVICE",
        "VENDOR",
        "CLASS",
        "QUBITS",
        "STATUS",
        "QUEUE",
        "COST",
        "DRAIN",
        "WAIT",
        "RESULT",
    ]
    ankaa = next(line for line in lines if line.split()[0] == "ankaa3")
    assert ankaa.split()[5:10] == ["5", "$1.2000", "30s", "catalog", "2m30s"]
    assert lines[2].split()[0] == "emu-qpu"
    assert lines[2].endswith("chosen: shortest expected wait")
    garnet = next(line for line in lines if line.split()[0] == "garnet")
    assert "OFFLINE (MAINTENANCE)" in garnet
    assert garnet.endswith("dropped: offline (MAINTENANCE)")
    assert lines[-1] == "chosen: emu-qpu"
    data = json.loads(json.dumps(explanation.to_dict()))
    assert data["chosen"] == "emu-qpu"
    assert data["policy"] == "min-wait"
    assert [c["device"] for c in data["candidates"]][:4] == ["emu-qpu", "ankaa3", "forte1", "sv1"]
    first = data["candidates"][0]
    assert first["rank"] == 1 and first["eligible"] is True
    assert first["drain_source"] == "prior" and first["expected_wait"] == 0.0
    assert data["candidates"][1]["expected_wait"] == 150.0
    assert data["candidates"][1]["cost"] == pytest.approx(1.2)


def test_a_batchs_own_tasks_wait_ahead_so_it_spreads():
    # garnet and ankaa3 drain at the same pace; ankaa3 has the shorter queue, until the
    # job's own earlier tasks placed there (a cut's subexperiments) are counted ahead.
    qpus = {"policy": "min-wait", "class": "qpu", "vendor": "braket", "min_qubits": 20}
    snapshots = fleet(garnet=snap("garnet", 4), ankaa3=snap("ankaa3", 3), forte1=snap("forte1", 9))
    assert pick(qpus, snapshots).device.name == "ankaa3"
    assert pick(qpus, snapshots, ahead={"ankaa3": 2}).device.name == "garnet"
    queue = {**qpus, "policy": "min-queue"}
    chosen = pick(queue, snapshots, ahead={"ankaa3": 2})
    assert chosen.device.name == "garnet"
    shown = {c.device: c.queue_depth for c in chosen.explanation.candidates}
    assert shown["ankaa3"] == 5 and shown["garnet"] == 4
