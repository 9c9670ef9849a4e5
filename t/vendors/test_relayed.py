"""Unit tier: what a released job reads through the service, and what it does itself.

The tasks the job was released with are polled and fetched through the handler service
(``qpu_handlers.task``; a service run without its module answers as
``qpu_handlers-service.task``). A task the job creates itself (a variational loop), and
every other verb, go to the job's own vendor, made only when first needed.
"""

from __future__ import annotations

import errno
from typing import Any

import pytest
from catalogs import catalog_of

from flux_quantum.catalog import Device
from flux_quantum.vendors.base import TaskRef, TaskResult, TaskSnapshot, TaskState
from flux_quantum.vendors.errors import VendorError
from flux_quantum.vendors.relayed import RelayedVendor


class Future:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        if isinstance(self.value, OSError):
            raise self.value
        return self.value


class Handle:
    """A Flux handle whose services answer from a table (topic -> reply or OSError)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def rpc(self, topic: str, payload: dict[str, Any]) -> Future:
        self.asked.append((topic, payload))
        return Future(self.answers.get(topic, OSError(errno.ENOSYS, "Function not implemented")))


class Own:
    """The job's own vendor: records what it is asked."""

    name = "local"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def poll(self, task: TaskRef) -> TaskSnapshot:
        self.asked.append(f"poll {task.task_id}")
        return TaskSnapshot(task, TaskState.QUEUED, 3)

    def submit(
        self,
        device: Device,
        program_text: str,
        shots: int,
        token: str,
        *,
        reservation: str | None = None,
    ) -> TaskRef:
        self.asked.append(f"submit {token}" + (f" in {reservation}" if reservation else ""))
        return MINE

    def result(self, task: TaskRef) -> TaskResult:
        self.asked.append(f"result {task.task_id}")
        return TaskResult(task, {"1": 1})


RELEASED = TaskRef("local", "alpha", "arn:released-1")
MINE = TaskRef("local", "alpha", "arn:mine-2")


def relayed(handle: Handle, made: list[Own]) -> RelayedVendor:
    def own() -> Own:
        made.append(Own())
        return made[-1]

    return RelayedVendor(handle, 42, "local", tasks=[RELEASED.task_id], own=own)  # type: ignore[arg-type,return-value]


def test_released_tasks_go_through_the_service_the_jobs_own_to_its_own_vendor():
    handle = Handle(
        {
            "qpu_handlers.task": {
                "state": "COMPLETED",
                "position": None,
                "counts": {"00": 3},
                "task_metadata": {"endedAt": "2026-12-02T08:00:00Z"},
            }
        }
    )
    made: list[Own] = []
    vendor = relayed(handle, made)
    assert vendor.poll(RELEASED).state is TaskState.COMPLETED
    result = vendor.result(RELEASED)
    assert result.counts == {"00": 3}
    assert result.raw == {"taskMetadata": {"endedAt": "2026-12-02T08:00:00Z"}}
    assert [payload["op"] for _, payload in handle.asked] == ["poll", "result"]
    assert {payload["id"] for _, payload in handle.asked} == {42}
    assert made == []  # no credential needed so far
    device = catalog_of("garnet").devices[0]
    assert vendor.submit(device, "OPENQASM 3.0;", 50, "42-iter-1") == MINE
    assert vendor.poll(MINE).position == 3
    assert len(made) == 1 and made[0].asked == ["submit 42-iter-1", "poll arn:mine-2"]
    assert len(handle.asked) == 2


def test_a_service_run_without_its_module_answers_under_its_own_name():
    handle = Handle({"qpu_handlers-service.task": {"state": "RUNNING"}})
    vendor = relayed(handle, [])
    assert vendor.poll(RELEASED).state is TaskState.RUNNING
    assert [topic for topic, _ in handle.asked] == [
        "qpu_handlers.task",
        "qpu_handlers-service.task",
    ]


def test_no_service_says_how_to_start_it_or_read_directly():
    vendor = relayed(Handle({}), [])
    with pytest.raises(VendorError) as raised:
        vendor.poll(RELEASED)
    text = str(raised.value)
    assert "flux quantum service start" in text and "flux quantum task --direct" in text
    assert raised.value.retryable  # a service restarting answers again in a moment
    busy = relayed(Handle({"qpu_handlers.task": OSError(errno.EAGAIN, "busy")}), [])
    with pytest.raises(VendorError) as raised:
        busy.result(RELEASED)
    assert raised.value.retryable


class Replies:
    """A Flux handle whose ``qpu_handlers.task`` answers the next of ``replies`` each time."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies

    def rpc(self, topic: str, payload: dict[str, Any]) -> Future:
        if topic != "qpu_handlers.task" or not self.replies:
            return Future(OSError(errno.ENOSYS, "Function not implemented"))
        return Future(self.replies.pop(0))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


DONE = TaskSnapshot(RELEASED, TaskState.COMPLETED, None)


def test_a_result_read_rides_out_a_service_restart_and_a_failed_download():
    """The task is paid for: its result is waited for while the service restarts (no
    service answers) or the vendor's download fails (the service says EIO), as a poll
    is (bench/faults.py saw released jobs fail on either)."""
    from flux_quantum.job.consumer import result_of

    handle = Replies(
        [
            OSError(errno.ENOSYS, "Function not implemented"),
            OSError(errno.EIO, "result of task: 1000 API internal error (injected)"),
            {"counts": {"00": 7}},
        ]
    )
    clock = Clock()
    result = result_of(relayed(handle, []), RELEASED, DONE, clock=clock, sleep=clock.sleep)
    assert result.counts == {"00": 7}
    assert 0 < clock.t < 10


def test_a_result_read_gives_up_after_the_error_time_with_the_services_words():
    from flux_quantum.errors import CommandError
    from flux_quantum.job.consumer import result_of

    handle = Replies([OSError(errno.EIO, "the vendor fails")] * 100)
    clock = Clock()
    with pytest.raises(CommandError, match="the vendor fails"):
        result_of(
            relayed(handle, []),
            RELEASED,
            DONE,
            max_error_time=60,
            clock=clock,
            sleep=clock.sleep,
        )
    assert 60 <= clock.t < 60 + 16
