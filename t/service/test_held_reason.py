"""Unit tier: why a job is held is shown where users look, for as long as it holds.

A held job's memo (``flux jobs -o '{user.qpu_state}'``, ``flux quantum jobs``) and the
service's status say what the job waits for (a vendor that does not answer, a call
retried, all slots busy) and when the next try is, until the obstacle passes; the
service's counters count what its events say.
"""

from __future__ import annotations

from service_fakes import Harness

from flux_quantum.protocol import events
from flux_quantum.vendors.errors import VendorUnavailable


def _unreachable() -> VendorUnavailable:
    return VendorUnavailable(
        "EndpointConnectionError after 3 attempts", vendor="local", vendor_code="Unreachable"
    )


def test_a_vendor_that_does_not_answer_is_in_the_memo_and_status_until_it_answers():
    h = Harness()
    h.vendor.fail("probe", _unreachable(), times=6)
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.WAIT in h.flux.names(job))
    h.run(2)  # ticks after the wait was posted keep the reason
    memo = h.flux.jobs[job].memo["qpu_state"]
    assert memo.startswith("waiting: alpha did not answer")
    assert "EndpointConnectionError after 3 attempts" in memo
    assert "next try in " in memo
    status = h.service.status()
    waiting = status["units"][0]["tasks"][0]["waiting"]
    assert waiting is not None and "alpha did not answer" in waiting
    assert status["counters"]["vendor_errors"] >= 1
    # The counters count what the events say: one error per probe that failed.
    waits = h.flux.decoded(job, events.WAIT)
    assert waits and all("did not answer" in w.reason for w in waits)
    h.until(lambda: h.state(job) == "released")
    # Every probe that failed counted once, whichever part of the service probed.
    assert h.service.status()["counters"]["vendor_errors"] == 6
    assert not h.flux.jobs[job].memo["qpu_state"].startswith("waiting")


def test_a_poll_retried_says_so_and_the_reason_goes_when_a_poll_succeeds():
    h = Harness()
    job = h.flux.submit({"device": "local:alpha", "release_at": 1})
    h.until(lambda: events.TASK in h.flux.names(job))
    h.vendor.fail("poll", _unreachable(), times=3)
    h.until(lambda: h.flux.jobs[job].memo.get("qpu_state", "").startswith("waiting"))
    memo = h.flux.jobs[job].memo["qpu_state"]
    assert memo.startswith("waiting: poll failed (Unreachable: ")
    assert "next try in " in memo
    h.until(lambda: not h.flux.jobs[job].memo["qpu_state"].startswith("waiting"))
    assert h.service.status()["units"][0]["tasks"][0]["waiting"] is None
