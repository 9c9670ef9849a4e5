"""One emulated SQS standard queue: its messages, their visibility and receipts.

This module owns what one queue holds: each message (its id and body, when it becomes
visible) sent to it, which are in flight (received, not deleted, hidden until their
visibility timeout ends), the receipt handle of each receive, and deletion by receipt.
Times are the emulator's (emulated seconds, passed in); ids and receipts are drawn from
the seed. A message is delivered at least once, as SQS does: one received and not
deleted in time comes again. It must never read a clock, sleep or do I/O, and is safe
to call from any thread.
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid
from dataclasses import dataclass

# SQS's default visibility timeout (seconds a received message stays hidden).
VISIBILITY_TIMEOUT = 30.0


@dataclass
class _Message:
    message_id: str
    body: str
    sent: float
    visible_at: float
    receipt: str | None = None  # the latest receive's handle, while in flight
    receives: int = 0


@dataclass(frozen=True)
class Received:
    """One message as ReceiveMessage hands it out."""

    message_id: str
    receipt: str
    body: str
    sent: float
    receives: int

    @property
    def md5(self) -> str:
        """``MD5OfBody`` as SQS gives it (hex digest of the body's UTF-8)."""
        return hashlib.md5(self.body.encode(), usedforsecurity=False).hexdigest()


class MessageQueue:
    """A standard queue's messages, oldest visible first."""

    def __init__(self, name: str, seed: int, visibility: float = VISIBILITY_TIMEOUT) -> None:
        self.name = name
        self.visibility = visibility
        self._lock = threading.Lock()
        self._messages: dict[str, _Message] = {}
        self._by_receipt: dict[str, str] = {}
        self._ids = random.Random(f"{seed}:sqs:{name}")
        self.sent = 0
        self.deleted = 0

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    def send(self, body: str, now: float, visible_at: float | None = None) -> str:
        """Add a message (visible from ``visible_at``, default now); its id."""
        with self._lock:
            message_id = self._uuid()
            at = now if visible_at is None else max(now, visible_at)
            self._messages[message_id] = _Message(message_id, body, now, at)
            self.sent += 1
            return message_id

    def receive(self, now: float, limit: int, visibility: float | None = None) -> list[Received]:
        """Up to ``limit`` messages visible at ``now`` (oldest first), hidden for
        ``visibility`` seconds (default the queue's) behind a new receipt each."""
        hide = self.visibility if visibility is None else visibility
        with self._lock:
            ready = sorted(
                (m for m in self._messages.values() if m.visible_at <= now),
                key=lambda m: (m.visible_at, m.sent),
            )[:limit]
            out = []
            for message in ready:
                if message.receipt is not None:
                    self._by_receipt.pop(message.receipt, None)
                message.receipt = f"{message.message_id}#{self._uuid()}"
                message.receives += 1
                message.visible_at = now + hide
                self._by_receipt[message.receipt] = message.message_id
                out.append(
                    Received(
                        message.message_id,
                        message.receipt,
                        message.body,
                        message.sent,
                        message.receives,
                    )
                )
            return out

    def waiting(self, now: float) -> int:
        """Messages visible at ``now``."""
        with self._lock:
            return sum(1 for m in self._messages.values() if m.visible_at <= now)

    def delete(self, receipt: str) -> bool:
        """Delete the message ``receipt`` was handed out with; False if no message has
        that receipt now (a later receive replaced it, or it is gone). A receipt of a
        message already deleted is accepted, as SQS does."""
        with self._lock:
            message_id = self._by_receipt.pop(receipt, None)
            if message_id is None:
                return receipt.split("#", 1)[0] not in self._messages and "#" in receipt
            self._messages.pop(message_id, None)
            self.deleted += 1
            return True
