"""The tags of the emulated Braket quantum tasks: ListTagsForResource, TagResource, UntagResource.

This module owns every task's tags, by task ARN, from the ``tags`` of its CreateQuantumTask
on: a resource is known once its task is added, and the three tag operations answer for it
(404 for any other ARN). It must never sleep holding the side's lock, and tag names and
values are kept as strings, as Braket keeps them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from flux_quantum.emulator.braket.wire import BraketRefusal, braket_error, invalid
from flux_quantum.emulator.wire import Response, json_response


class TaskTags:
    """Each quantum task's tags, behind the side's lock."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._tags: dict[str, dict[str, str]] = {}

    def add(self, arn: str, tags: Mapping[Any, Any] | None) -> None:
        """A new task ``arn`` and the tags it was created with (lock held)."""
        self._tags[arn] = {str(k): str(v) for k, v in (tags or {}).items()}

    def of(self, arn: str) -> dict[str, str]:
        """A copy of task ``arn``'s tags (lock held)."""
        return dict(self._tags.get(arn, {}))

    def answer(
        self, operation: str, arn: str, body: dict[str, Any], keys: Sequence[str]
    ) -> Response:
        """List, add (``body``'s ``tags``) or remove (the ``keys``) the tags of ``arn``."""
        with self._lock:
            if arn not in self._tags:
                raise BraketRefusal(
                    operation,
                    braket_error("ResourceNotFoundException", 404, f"Resource {arn} not found"),
                )
            tags = self._tags[arn]
            if operation == "ListTagsForResource":
                return json_response(200, {"tags": dict(tags)})
            if operation == "TagResource":
                new = body.get("tags")
                if not isinstance(new, dict):
                    raise invalid("tags must be a map of strings")
                tags.update({str(k): str(v) for k, v in new.items()})
            else:
                for key in keys:
                    tags.pop(key, None)
        return json_response(200, {})
