"""The emulated SQS side: standard queues as boto3's sqs client reaches them, under /sqs.

This package owns the queues the emulator serves and SQS's JSON protocol on them:
``service`` routes and answers each request (GetQueueUrl, ReceiveMessage with long
polling, DeleteMessage, DeleteMessageBatch, SendMessage, GetQueueAttributes),
``message_queue`` holds one queue's messages, their visibility and receipts, ``wire``
has the path, the answer and error shapes. What goes into a queue is another side's:
the Braket side publishes its task and device events there, as EventBridge would for a
site's rule. It must never import a vendor side.
"""

from flux_quantum.emulator.sqs.message_queue import MessageQueue, Received
from flux_quantum.emulator.sqs.service import SqsService
from flux_quantum.emulator.sqs.wire import PREFIX

__all__ = ["PREFIX", "MessageQueue", "Received", "SqsService"]
