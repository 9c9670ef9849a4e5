"""The emulated SQS side: queues a client reaches as boto3's ``sqs`` client does, under /sqs.

This module owns SQS as the client sees it: the JSON protocol of botocore's sqs
2012-11-05 model (a POST whose ``X-Amz-Target`` is ``AmazonSQS.<Operation>``, a JSON
body in ``application/x-amz-json-1.0``, JSON answers, errors with their ``__type`` and
the old query code in ``x-amzn-query-error``), the operations GetQueueUrl,
ReceiveMessage (long polling up to ``WaitTimeSeconds``, woken as messages arrive),
DeleteMessage, DeleteMessageBatch, SendMessage and GetQueueAttributes, and the queues by
name (``MessageQueue``). What publishes into a queue (the Braket side's events) is given
as ``before_receive``, run before each look at a queue, so a long poll sees what became
due while it waited. It must never wait longer than the request asked (and never past
``stop``), never hold its lock while waiting, and never answer with a shape that model
does not have.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_quantum.emulator.clock import Clock
from flux_quantum.emulator.side import Call, Refusal, VendorSide
from flux_quantum.emulator.sqs.message_queue import MessageQueue
from flux_quantum.emulator.sqs.wire import (
    PREFIX,
    SqsRefusal,
    json_answer,
    queue_name,
    sqs_error,
)
from flux_quantum.emulator.wire import Request, Response

TARGET_PREFIX = "AmazonSQS."
MAX_WAIT = 20  # seconds: SQS's bound for WaitTimeSeconds
MAX_MESSAGES = 10
# How often (real seconds) a long poll looks at its queue again while it waits.
LOOK_EVERY = 0.02
OPERATIONS = (
    "GetQueueUrl",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "SendMessage",
    "GetQueueAttributes",
)


@dataclass
class _Route:
    operation: str
    target: str | None = None  # the queue's name
    body: Mapping[str, Any] = field(default_factory=dict)


class SqsService(VendorSide[_Route, Any]):
    """The SQS side's requests answered, from any number of server threads."""

    def __init__(
        self,
        clock: Clock,
        account: str,
        seed: int = 0,
        stop: threading.Event | None = None,
        on_call: Callable[[Call], None] | None = None,
        before_receive: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(clock, seed, stop, on_call, faults=0)
        self.account = account
        self._queues: dict[str, MessageQueue] = {}
        self._before_receive = before_receive or (lambda: None)

    # -- the queues -------------------------------------------------------------------------

    def add_queue(self, name: str) -> MessageQueue:
        """The queue ``name``, made if new (thread-safe)."""
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = self._queues[name] = MessageQueue(name, self.seed)
            return queue

    def queue(self, name: str) -> MessageQueue | None:
        with self._lock:
            return self._queues.get(name)

    def remove_queue(self, name: str) -> None:
        """The queue is deleted: its readers get QueueDoesNotExist from now on."""
        with self._lock:
            self._queues.pop(name, None)

    def env(self, url: str) -> dict[str, str]:
        """Where boto3's SQS client reaches this side, the emulator serving at ``url``."""
        return {"AWS_ENDPOINT_URL_SQS": url + PREFIX}

    def queue_url(self, base: str, name: str) -> str:
        """The queue's URL on this side, the emulator answering at ``base``."""
        return f"{base.rstrip('/')}{PREFIX}/{self.account}/{name}"

    # -- dispatch ---------------------------------------------------------------------------

    def _route(self, request: Request) -> _Route:
        target = request.headers.get("x-amz-target", "")
        operation = target.removeprefix(TARGET_PREFIX)
        if request.method != "POST" or not target.startswith(TARGET_PREFIX):
            raise SqsRefusal(
                sqs_error(
                    "UnsupportedOperation",
                    f"the emulator's SQS takes POST with X-Amz-Target, not {request.method} "
                    f"{request.path}",
                )
            )
        if operation not in OPERATIONS:
            raise SqsRefusal(
                sqs_error("UnsupportedOperation", f"the emulator does not implement {operation}")
            )
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            raise SqsRefusal(sqs_error("InvalidParameterValue", "body is not JSON")) from None
        if not isinstance(body, dict):
            raise SqsRefusal(sqs_error("InvalidParameterValue", "body is not an object"))
        name = body.get("QueueName") if operation == "GetQueueUrl" else None
        if name is None:
            name = queue_name(body.get("QueueUrl"))
        return _Route(operation, name if isinstance(name, str) else None, body)

    def _refused(self, request: Request, refusal: Refusal) -> _Route:
        target = request.headers.get("x-amz-target", "")
        return _Route(target.removeprefix(TARGET_PREFIX) or "Unknown")

    def _faults_of(self) -> Sequence[Any]:
        return ()

    def _fault_device(self, route: _Route) -> str | None:
        return None

    def _internal_error(self, route: _Route, message: str) -> Response:
        return sqs_error("InternalFailure", message, status=500)

    def _fault_error(self, fault: Any, route: _Route) -> Response | None:
        return None

    def _apply(
        self, route: _Route, request: Request, faults: list[Any], created: list[str]
    ) -> Response:
        if route.operation == "GetQueueUrl":
            self._existing(route)
            base = f"http://{request.headers.get('host', '127.0.0.1')}"
            return json_answer({"QueueUrl": self.queue_url(base, str(route.target))})
        queue = self._existing(route)
        body = route.body
        match route.operation:
            case "ReceiveMessage":
                return self._receive(queue, body)
            case "DeleteMessage":
                receipt = body.get("ReceiptHandle")
                if not isinstance(receipt, str) or not queue.delete(receipt):
                    raise SqsRefusal(
                        sqs_error("ReceiptHandleIsInvalid", f"receipt {receipt!r} is not valid")
                    )
                return json_answer({})
            case "DeleteMessageBatch":
                return self._delete_batch(queue, body)
            case "SendMessage":
                text = body.get("MessageBody")
                if not isinstance(text, str) or not text:
                    raise SqsRefusal(sqs_error("MissingParameter", "MessageBody is required"))
                delay = body.get("DelaySeconds") or 0
                now = self.clock.now()
                message_id = queue.send(text, now, now + float(delay))
                return json_answer({"MessageId": message_id, "MD5OfMessageBody": _md5(text)})
            case _:  # GetQueueAttributes
                waiting = queue.waiting(self.clock.now())
                return json_answer({"Attributes": {"ApproximateNumberOfMessages": str(waiting)}})

    def _existing(self, route: _Route) -> MessageQueue:
        queue = self.queue(route.target) if route.target else None
        if queue is None:
            raise _no_queue()
        return queue

    def _receive(self, queue: MessageQueue, body: Mapping[str, Any]) -> Response:
        """ReceiveMessage: what is visible now, else wait (real seconds, at most
        ``WaitTimeSeconds``) until something is; an empty answer when nothing came."""
        limit = _bounded(body, "MaxNumberOfMessages", 1, 1, MAX_MESSAGES)
        wait = _bounded(body, "WaitTimeSeconds", 0, 0, MAX_WAIT)
        hide = body.get("VisibilityTimeout")
        visibility = float(hide) if isinstance(hide, int) and not isinstance(hide, bool) else None
        deadline = time.monotonic() + wait
        while True:
            self._before_receive()
            received = queue.receive(self.clock.now(), limit, visibility)
            if received or time.monotonic() >= deadline or self._stop.is_set():
                break
            self._stop.wait(min(LOOK_EVERY, max(0.0, deadline - time.monotonic())))
        if self.queue(queue.name) is not queue:  # deleted while we waited
            raise _no_queue()
        messages = [
            {
                "MessageId": m.message_id,
                "ReceiptHandle": m.receipt,
                "MD5OfBody": m.md5,
                "Body": m.body,
                "Attributes": {
                    "SentTimestamp": str(int(m.sent * 1000)),
                    "ApproximateReceiveCount": str(m.receives),
                },
            }
            for m in received
        ]
        return json_answer({"Messages": messages} if messages else {})

    def _delete_batch(self, queue: MessageQueue, body: Mapping[str, Any]) -> Response:
        entries = body.get("Entries")
        if not isinstance(entries, list) or not entries:
            raise SqsRefusal(
                sqs_error(
                    "EmptyBatchRequest",
                    "There should be at least one DeleteMessageBatchRequestEntry in the request.",
                    query_code="AWS.SimpleQueueService.EmptyBatchRequest",
                )
            )
        if len(entries) > MAX_MESSAGES:
            raise SqsRefusal(
                sqs_error(
                    "TooManyEntriesInBatchRequest",
                    f"Maximum number of entries per request are {MAX_MESSAGES}.",
                    query_code="AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                )
            )
        ids = [e.get("Id") if isinstance(e, Mapping) else None for e in entries]
        if len(set(map(str, ids))) != len(ids):
            raise SqsRefusal(
                sqs_error(
                    "BatchEntryIdsNotDistinct",
                    "Two or more batch entries in the request have the same Id.",
                    query_code="AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
                )
            )
        done, failed = [], []
        for entry, entry_id in zip(entries, ids, strict=True):
            receipt = entry.get("ReceiptHandle") if isinstance(entry, Mapping) else None
            if isinstance(receipt, str) and queue.delete(receipt):
                done.append({"Id": str(entry_id)})
            else:
                failed.append(
                    {
                        "Id": str(entry_id),
                        "SenderFault": True,
                        "Code": "ReceiptHandleIsInvalid",
                        "Message": f"receipt {receipt!r} is not valid",
                    }
                )
        return json_answer({"Successful": done, "Failed": failed})


def _no_queue() -> SqsRefusal:
    return SqsRefusal(
        sqs_error(
            "QueueDoesNotExist",
            "The specified queue does not exist.",
            query_code="AWS.SimpleQueueService.NonExistentQueue",
        )
    )


def _bounded(body: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SqsRefusal(
            sqs_error(
                "InvalidParameterValue",
                f"Value {value!r} for parameter {key} is invalid. Reason: must be between "
                f"{low} and {high}.",
            )
        )
    return value


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()
