"""The record of one emulated Braket quantum task: what its CreateQuantumTask fixed.

This module owns ``TaskRecord``, the immutable facts of a task (its ARN, region, device,
client token, shots, action, output location, reservation and program set sizes), and
the rule that says whether a repeated clientToken asks for the same task. It must never hold a task's progress (that is its device's
``DeviceQueue``'s) nor change once made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskRecord:
    """The facts of one quantum task fixed at creation; its progress lives in its DeviceQueue."""

    arn: str
    region: str
    device_arn: str
    client_token: str
    shots: int
    action: str
    action_type: str
    device_parameters: str
    bucket: str
    key_prefix: str
    directory: str
    created_t: float
    failure_reason: str | None = None
    associations: tuple[dict[str, str], ...] = ()
    reservation: str | None = None  # the reservation ARN among the associations
    programs: int = 0  # a program set's programs and executables (0: a single program)
    executables: int = 0
    job_arn: str | None = None  # the hybrid job whose token it rode ahead of the queue

    def same_request(self, body: dict[str, Any]) -> bool:
        """Whether a create with the same clientToken asks for the same task."""
        return (
            body.get("deviceArn") == self.device_arn
            and body.get("shots") == self.shots
            and body.get("action") == self.action
            and body.get("outputS3Bucket") == self.bucket
            and body.get("outputS3KeyPrefix") == self.key_prefix
            and list(body.get("associations") or []) == list(self.associations)
        )
