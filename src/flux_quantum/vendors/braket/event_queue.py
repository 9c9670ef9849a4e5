"""``BraketEventQueue``: Braket's task and device events, read from the site's SQS queue.

Amazon Braket publishes a "Braket Task State Change" event to EventBridge each time a
quantum task's status changes (at least once, possibly out of order), and device status
changes as well; a site routes them (an EventBridge rule, source ``aws.braket``) to an
SQS queue it owns and names it in ``vendors.braket.events_queue``. This module owns
reading that queue through boto3's SQS client: the queue's URL (given, or found once by
its name with GetQueueUrl), one long poll per ``receive`` (ReceiveMessage, up to ten
messages, ``events_wait`` seconds), the acknowledgement of the previous batch
(DeleteMessageBatch, after the caller handled it) and the reading of each message body
as EventBridge delivers it (``read_event``: the event itself, its ``detail`` as Braket
fills it). It must never trust what it reads (a body is data from a queue others may
write to: it is checked and turned into plain records, never acted on here), never
retry outside the vendor's ``RetryBudget`` and never block beyond one long poll.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from flux_quantum.vendors.base import TaskState
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.task_events import DeviceEvent, EventBatch, TaskEvent

Call = Callable[[str, str, Callable[[], Any]], Any]

SOURCE = "aws.braket"
TASK_CHANGE = "Braket Task State Change"
# EventBridge's reference names the device events "Braket Device Status Change" (and
# "Braket QPU Status Change"); "Braket Device State Change" is read as the same.
DEVICE_CHANGES = (
    "Braket Device Status Change",
    "Braket Device State Change",
    "Braket QPU Status Change",
)
MAX_MESSAGES = 10  # SQS's bound for ReceiveMessage and DeleteMessageBatch


class BraketEventQueue:
    """The site's queue of Braket events, read by one caller at a time.

    ``client`` builds the boto3 SQS client (the vendor's, with its session, endpoint and
    one attempt); ``call`` runs one SQS call under the vendor's retry budget, its errors
    translated (``BraketVendor._call``)."""

    def __init__(self, settings: BraketSettings, client: Callable[[], Any], call: Call) -> None:
        if not settings.events_queue:
            raise ValueError("BraketEventQueue needs settings.events_queue")
        self.queue = settings.events_queue
        self._wait = settings.events_wait
        self._poll = settings.events_poll
        self._silence = settings.events_silence
        self._client = client
        self._call = call
        self._url: str | None = self.queue if _is_url(self.queue) else None

    @property
    def name(self) -> str:
        return f"braket events queue {self.queue}"

    @property
    def safety_poll(self) -> float:
        return self._poll

    @property
    def silence(self) -> float:
        return self._silence

    def url(self) -> str:
        """The queue's URL: as given, or found by its name (GetQueueUrl, once)."""
        if self._url is None:
            sqs = self._client()
            found = self._call(
                "GetQueueUrl", self.queue, lambda: sqs.get_queue_url(QueueName=self.queue)
            )
            self._url = str(found["QueueUrl"])
        return self._url

    def receive(self, acknowledge: Sequence[str] = ()) -> EventBatch:
        """Delete the messages of ``acknowledge`` (their receipts), then wait up to
        ``events_wait`` seconds for up to ten messages and read them."""
        url = self.url()
        sqs = self._client()
        unacknowledged = self._delete(sqs, url, acknowledge)
        answer = self._call(
            "ReceiveMessage",
            self.queue,
            functools.partial(
                sqs.receive_message,
                QueueUrl=url,
                MaxNumberOfMessages=MAX_MESSAGES,
                WaitTimeSeconds=self._wait,
            ),
        )
        tasks: list[TaskEvent] = []
        devices: list[DeviceEvent] = []
        receipts: list[str] = []
        unreadable = 0
        for message in answer.get("Messages") or []:
            if not isinstance(message, Mapping):
                continue
            receipt = message.get("ReceiptHandle")
            if isinstance(receipt, str) and receipt:
                receipts.append(receipt)
            event = read_event(message.get("Body"))
            if isinstance(event, TaskEvent):
                tasks.append(event)
            elif isinstance(event, DeviceEvent):
                devices.append(event)
            else:
                unreadable += 1
        return EventBatch(tuple(tasks), tuple(devices), tuple(receipts), unreadable, unacknowledged)

    def _delete(self, sqs: Any, url: str, receipts: Sequence[str]) -> int:
        """DeleteMessageBatch of ``receipts``, ten at a time; how many it would not take."""
        refused = 0
        for start in range(0, len(receipts), MAX_MESSAGES):
            chunk = receipts[start : start + MAX_MESSAGES]
            entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(chunk)]
            answer = self._call(
                "DeleteMessageBatch",
                self.queue,
                functools.partial(sqs.delete_message_batch, QueueUrl=url, Entries=entries),
            )
            refused += len(answer.get("Failed") or [])
        return refused


def read_event(body: Any) -> TaskEvent | DeviceEvent | None:
    """One SQS message body as EventBridge delivers a Braket event (the event's JSON:
    ``source``, ``detail-type``, ``id``, ``time``, ``detail``), or None when it is not
    one this reader knows (another source, a malformed body, an unknown status)."""
    if not isinstance(body, str):
        return None
    try:
        event = json.loads(body)
    except ValueError:
        return None
    if not isinstance(event, Mapping) or event.get("source") != SOURCE:
        return None
    detail = event.get("detail")
    event_id = event.get("id")
    if not isinstance(detail, Mapping) or not isinstance(event_id, str) or not event_id:
        return None
    kind = event.get("detail-type")
    t = _epoch(event.get("time"))
    if kind == TASK_CHANGE:
        arn, state = detail.get("quantumTaskArn"), _state(detail.get("status"))
        if not isinstance(arn, str) or not arn.startswith("arn:") or state is None:
            return None
        device = detail.get("deviceArn")
        return TaskEvent(event_id, arn, state, device if isinstance(device, str) else None, t)
    if kind in DEVICE_CHANGES:
        arn, status = detail.get("deviceArn"), detail.get("status")
        if not isinstance(arn, str) or not isinstance(status, str) or not status:
            return None
        return DeviceEvent(event_id, arn, status, t)
    return None


def _state(value: Any) -> TaskState | None:
    try:
        return TaskState(value)
    except ValueError:
        return None


def _epoch(value: Any) -> float | None:
    """EventBridge's ``time`` (ISO 8601, ``Z``) as epoch seconds, None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _is_url(queue: str) -> bool:
    return queue.startswith(("https://", "http://"))
