"""Unit tier: devices that stop taking work and devices that publish their capacity (the
QRMI devices: IQM, Pasqal, on-premises QPUs), through ``QuantumService`` on the fakes.

A PAUSED device is up but starts nothing: its queued tasks keep their place, their jobs
stay held (released after it resumes, never onto it while paused), and a new job for it
waits instead of failing. A device's published capacity bounds the tasks in flight on it
and the slot vertices up in the Fluxion graph."""

from __future__ import annotations

from service_fakes import Harness, QueueModel

from flux_quantum.protocol import events


def at_front(device: str, **more) -> dict:
    return {"device": f"local:{device}", "release_at": 1, **more}


def test_paused_device_holds_its_jobs_and_keeps_their_task_until_it_resumes():
    h = Harness({"alpha": QueueModel(3)})
    job = h.flux.submit(at_front("alpha", failover="next"))
    h.until(lambda: h.flux.decoded(job, events.TASK))
    h.vendor.pause("alpha", "calibration")
    # Unpaused, the task would reach position 1 after 20 s; paused, nothing moves.
    h.run(300)
    assert h.state(job) != "released"
    memo = h.flux.jobs[job].memo["qpu_state"]
    assert "alpha is paused (calibration)" in memo, memo
    assert h.vendor.count("cancel") == 0
    assert not h.flux.decoded(job, events.DEVICE_UNAVAILABLE)
    assert ("graph", ("alpha", False)) in h.flux.journal or "alpha" not in h.flux.graph
    h.vendor.resume("alpha")
    h.until(lambda: h.state(job) == "released")
    assert h.flux.jobs[job].release["device"] == "alpha"
    assert h.flux.last(job, events.READY).tasks[0]["why"] == "position 1 <= release_at 1"
    assert h.vendor.count("submit") == 1


def test_new_job_for_a_paused_device_waits_for_it_instead_of_failing():
    h = Harness({"alpha": QueueModel(0)})
    h.vendor.pause("alpha", "maintenance")
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.WAIT))
    assert "alpha is paused (maintenance)" in h.flux.last(job, events.WAIT).reason
    assert h.vendor.count("submit") == 0
    h.run(120)
    assert h.vendor.count("submit") == 0 and h.state(job) != "failed"
    h.vendor.resume("alpha")
    h.until(lambda: h.state(job) == "released")
    assert h.vendor.count("submit") == 1


def test_published_capacity_bounds_tasks_in_flight():
    # The catalog allows 4 in flight; the device says it runs 2 at most.
    h = Harness({"alpha": QueueModel(2, capacity=(2, 2))})
    jobs = [h.flux.submit(at_front("alpha")) for _ in range(3)]
    h.until(lambda: h.vendor.count("submit") == 2)
    h.run(2)
    assert h.vendor.count("submit") == 2
    waiting = h.flux.last(jobs[2], events.WAIT).reason
    assert "all 2 slot(s) of alpha in use" in waiting, waiting
    h.until(lambda: all(h.state(j) == "released" for j in jobs))
    assert h.vendor.count("submit") == 3


def test_no_free_slot_on_the_device_waits_and_says_so():
    h = Harness({"alpha": QueueModel(0, capacity=(0, 2))})
    job = h.flux.submit(at_front("alpha"))
    h.until(lambda: h.flux.decoded(job, events.WAIT))
    assert "no free slot of alpha (0 of 2 available)" in h.flux.last(job, events.WAIT).reason
    h.vendor.queues["alpha"].capacity = (1, 2)
    h.until(lambda: h.state(job) == "released")
