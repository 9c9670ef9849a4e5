"""The forecast of the wait for nodes (``flux_quantum.timing.node_wait``): pure."""

from __future__ import annotations

import pytest

from flux_quantum.timing.node_wait import (
    RELEASE_PRIORITY,
    ClusterQueue,
    PendingJob,
    RunningJob,
    finished_shares,
    forecast_node_wait,
)

T = 10_000.0


def queue(free: int, running=(), pending=(), shares=()) -> ClusterQueue:  # noqa: ANN001
    return ClusterQueue(T, 16, free, 4, tuple(running), tuple(pending), tuple(shares))


def test_free_cores_start_at_once() -> None:
    wait = forecast_node_wait(queue(8), 8, 600.0)
    assert wait.seconds == 0.0 and wait.describe() == "0s (free now)"


def test_without_finished_jobs_running_jobs_end_at_their_limits() -> None:
    # 4 free, two running jobs of 4 and 8 cores with limits ending in 100 s and 300 s
    q = queue(4, [RunningJob(4, T - 100, T + 100), RunningJob(8, T - 100, T + 300)])
    assert forecast_node_wait(q, 8, 600.0).seconds == pytest.approx(100.0)
    assert forecast_node_wait(q, 12, 600.0).seconds == pytest.approx(300.0)
    assert forecast_node_wait(q, 20, 600.0).seconds is None  # more than the cluster


def test_learned_shares_bring_the_ends_forward_given_how_long_a_job_ran() -> None:
    shares = [0.1] * 5 + [0.5] * 5 + [0.9] * 5
    # ran 200 of a 1000 s limit: of the finished jobs that ran that long (0.5, 0.9),
    # the median ran half its limit: it ends at t_run + 500
    job = RunningJob(16, T - 200, T + 800)
    q = queue(0, [job], shares=shares)
    assert forecast_node_wait(q, 4, 60.0, quantile=0.5).seconds == pytest.approx(300.0)
    # a higher quantile trusts the limit more: released earlier by it
    assert forecast_node_wait(q, 4, 60.0, quantile=1.0).seconds == pytest.approx(700.0)
    # a job that ran longer than any finished one did: its limit is all there is to say
    late = queue(0, [RunningJob(16, T - 950, T + 50)], shares=shares)
    assert forecast_node_wait(late, 4, 60.0).seconds == pytest.approx(50.0)


def test_jobs_ahead_at_the_top_priority_go_first_and_ordinary_ones_do_not() -> None:
    running = [RunningJob(12, T - 10, T + 100), RunningJob(4, T - 10, T + 400)]
    ahead = PendingJob(8, 1000.0, RELEASE_PRIORITY)
    behind = PendingJob(16, 1000.0, 16)
    q = queue(0, running, [ahead, behind])
    wait = forecast_node_wait(q, 8, 600.0)
    # the 8-core job ahead takes 8 of the 12 freed at +100; the other 4 and the 4 freed
    # at +400 make our 8
    assert wait.seconds == pytest.approx(400.0) and wait.ahead == 1
    assert "1 job ahead" in wait.describe()
    # Fluxion's reservation for the job ahead places it
    reserved = queue(0, running, [PendingJob(8, 1000.0, RELEASE_PRIORITY, T + 1000)])
    wait = forecast_node_wait(reserved, 8, 200.0)
    assert wait.seconds == pytest.approx(100.0) and wait.reserved == 1
    assert "at Fluxion's reservation" in wait.describe()


def test_a_step_giving_its_cores_back_finds_them_taken_by_the_queues_work() -> None:
    running = [RunningJob(8, T - 10, T + 100, jobid=7), RunningJob(8, T - 10, T + 900)]
    # nothing queued: the step's own 8 cores are free again at once
    assert forecast_node_wait(queue(0, running), 8, 60.0, instead_of=7).seconds == 0.0
    # a queued job of 8 cores and 300 s takes them; the other 8 free at +900
    waiting = [PendingJob(8, 300.0, 16), PendingJob(16, 60.0, 16)]
    q = queue(0, running, waiting)
    assert forecast_node_wait(q, 8, 60.0, instead_of=7).seconds == pytest.approx(300.0)
    assert forecast_node_wait(q, 12, 60.0, instead_of=7).seconds == pytest.approx(900.0)
    # without it, the step's cores free at its own end (+100)
    assert forecast_node_wait(q, 8, 60.0).seconds == pytest.approx(100.0)


def test_a_job_fits_a_hole_before_a_reservation_only_if_it_ends_in_time() -> None:
    running = [RunningJob(16, T - 10, T + 100)]
    ahead = PendingJob(16, 1000.0, RELEASE_PRIORITY, T + 500)
    q = queue(0, running, [ahead])
    assert forecast_node_wait(q, 4, 300.0).seconds == pytest.approx(100.0)
    assert forecast_node_wait(q, 4, 500.0).seconds == pytest.approx(1500.0)


def test_a_snapshot_from_flux_payloads() -> None:
    status = {
        "all": {"execution": {"R_lite": [{"rank": "0-3", "children": {"core": "0-3"}}]}},
        "allocated": {"execution": {"R_lite": [{"rank": "0-2", "children": {"core": "0-3"}}]}},
        "down": {},
    }
    running = [{"id": 9, "ncores": 12, "t_run": T - 50, "expiration": T + 50}]
    pending = [
        {
            "ncores": 4,
            "duration": 60.0,
            "priority": 16,
            "annotations": {"sched": {"t_estimate": T + 50}},
        }
    ]
    finished = [{"t_run": 1.0, "t_cleanup": 6.0, "expiration": 11.0}, {"t_run": 5.0}]
    q = ClusterQueue.from_flux(status, running, pending, finished, T)
    assert (q.total_cores, q.free_cores, q.cores_per_node) == (16, 4, 4)
    assert q.running == (RunningJob(12, T - 50, T + 50, 9),)
    assert q.pending == (PendingJob(4, 60.0, 16, T + 50),)
    assert q.shares == (0.5,) and finished_shares(finished) == [0.5]
    assert q.cores_for(2, 1) == 8 and q.cores_for(0, 3) == 3
