"""Braket's EventBridge events on the emulator: task and device state changes, sent to a queue.

Amazon Braket publishes a "Braket Task State Change" event each time a quantum task's
status changes, and device status changes too; a site's EventBridge rule sends them to
its SQS queue, at least once and possibly out of order. This module owns that for the
emulator: ``EventPublisher.publish`` looks at every task and device as the emulated time
now has them, and sends each state change not sent yet to the scenario's events queue as
EventBridge delivers it (the event's JSON as the message body: ``version``, ``id``,
``detail-type``, ``source`` ``aws.braket``, ``account``, ``time``, ``region``,
``resources`` and Braket's ``detail``), stamped with the emulated time of the change. The
scenario's ``events`` may lose an event or send it twice (the copy late), each decided by
a draw seeded by the task and state, so a run is the same however often it looks. It
must never change a task or a device, never read the wall clock, and never hold the
side's lock while waiting.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from flux_quantum.emulator.braket.devices import Devices
from flux_quantum.emulator.braket.quantum_tasks import QuantumTasks
from flux_quantum.emulator.braket.task_record import TaskRecord
from flux_quantum.emulator.braket.wire import iso8601
from flux_quantum.emulator.clock import timestamp
from flux_quantum.emulator.sqs import MessageQueue

TASK_CHANGE = "Braket Task State Change"
DEVICE_CHANGE = "Braket Device Status Change"
ENDED = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass(frozen=True)
class _Change:
    t: float
    task: TaskRecord
    status: str
    first: bool  # the task's first event (eventName INSERT)


class EventPublisher:
    """The Braket side's state changes, sent once each (faults aside) to one queue."""

    def __init__(
        self,
        tasks: QuantumTasks,
        devices: Devices,
        queue: MessageQueue,
        seed: int,
        lock: threading.Lock,
    ) -> None:
        self.scenario = devices.scenario
        self.clock = devices.clock
        self._tasks = tasks
        self._devices = devices
        self.queue = queue
        self._seed = seed
        self._lock = lock
        # What was sent, lost and sent twice, for the report (read under the lock).
        self.counts: Counter[str] = Counter()
        self._sent: set[tuple[str, str]] = set()  # (task ARN, status) already published
        self._ended: set[str] = set()  # tasks whose last event is out
        self._device_status: dict[str, str] = {}

    def publish(self) -> int:
        """Send every change up to now not sent yet, oldest first; how many were sent."""
        with self._lock:
            now = self.clock.now()
            changes = sorted(self._task_changes(now), key=lambda c: (c.t, c.task.arn))
            sent = 0
            for change in changes:
                sent += self._send_task(change, now)
            sent += self._device_changes(now)
            return sent

    # -- tasks ------------------------------------------------------------------------------

    def _task_changes(self, now: float) -> list[_Change]:
        out: list[_Change] = []
        for task in self._tasks.records():
            if task.arn in self._ended:
                continue
            queue = self._devices.queue(task.device_arn)
            progress = queue.progress(task.arn, now)
            timeline = queue.timeline(task.arn, now)
            steps = [(task.created_t, "QUEUED")]
            if timeline.started is not None:
                steps.append((timeline.started, "RUNNING"))
            if progress.status == "CANCELLING":
                steps.append((now, "CANCELLING"))
            if progress.status in ENDED:
                end = progress.ended_at if progress.ended_at is not None else now
                steps.append((end, progress.status))
                self._ended.add(task.arn)
            for t, status in steps:
                if (task.arn, status) not in self._sent:
                    self._sent.add((task.arn, status))
                    out.append(_Change(t, task, status, first=status == "QUEUED"))
        return out

    def _send_task(self, change: _Change, now: float) -> int:
        """Send one change (lost, or twice, as the scenario's draws say); messages sent."""
        spec = self.scenario.events
        draws = random.Random(f"{self._seed}:events:{change.task.arn}:{change.status}")
        lost, twice, later = draws.random(), draws.random(), draws.random()
        if lost < spec.lose:
            self.counts["events_lost"] += 1
            return 0
        body = json.dumps(self._task_event(change, now))
        visible = change.t + spec.latency
        self.queue.send(body, now, visible)
        self.counts["events_sent"] += 1
        if twice >= spec.duplicate:
            return 1
        self.queue.send(body, now, visible + later * spec.late)
        self.counts["events_duplicated"] += 1
        return 2

    def _task_event(self, change: _Change, now: float) -> dict[str, Any]:
        task = change.task
        detail: dict[str, Any] = {
            "quantumTaskArn": task.arn,
            "status": change.status,
            "deviceArn": task.device_arn,
            "shots": str(task.shots),
            "outputS3Bucket": task.bucket,
            "outputS3Directory": task.directory,
            "createdAt": iso8601(timestamp(self.clock, task.created_t)),
            "eventName": "INSERT" if change.first else "MODIFY",
        }
        if change.status in ENDED:
            detail["endedAt"] = iso8601(timestamp(self.clock, change.t))
        key = f"{task.arn}:{change.status}"
        return self._envelope(TASK_CHANGE, key, change.t, task.region, [task.arn], detail)

    # -- devices ----------------------------------------------------------------------------

    def _device_changes(self, now: float) -> int:
        """A device whose status moved since the last look (the first look only notes
        it): one event, at ``now``."""
        sent = 0
        for spec in self.scenario.devices:
            status = self._devices.queue(spec.arn).status(now).status
            before = self._device_status.get(spec.arn)
            self._device_status[spec.arn] = status
            if before is None or before == status:
                continue
            detail = {"deviceArn": spec.arn, "status": status, "previousStatus": before}
            region = spec.arn.split(":")[3] or self.scenario.region
            key = f"{spec.arn}:{status}:{now!r}"
            event = self._envelope(DEVICE_CHANGE, key, now, region, [spec.arn], detail)
            self.queue.send(json.dumps(event), now)
            self.counts["device_events_sent"] += 1
            sent += 1
        return sent

    def _envelope(
        self,
        kind: str,
        key: str,
        t: float,
        region: str,
        resources: list[str],
        detail: dict[str, Any],
    ) -> dict[str, Any]:
        """An EventBridge event (its id drawn from ``key``: the same change has the same
        id however often the emulator looks; time at second precision, as EventBridge
        writes it)."""
        moment = timestamp(self.clock, t).replace(microsecond=0)
        bits = random.Random(f"{self._seed}:event-id:{key}").getrandbits(128)
        return {
            "version": "0",
            "id": str(uuid.UUID(int=bits, version=4)),
            "detail-type": kind,
            "source": "aws.braket",
            "account": self.scenario.account,
            "time": moment.isoformat().replace("+00:00", "Z"),
            "region": region,
            "resources": resources,
            "detail": detail,
        }
