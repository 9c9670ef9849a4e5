"""Amazon Braket behind the vendor interface, on amazon-braket-sdk and boto3.

This package owns every call flux-quantum makes to Braket and its S3 results, the
defensive reading of what comes back, and the one mapping of Braket's error codes to
``flux_quantum.vendors.errors``. It never writes HTTP by hand, never blocks without a
timeout, never retries outside its ``RetryBudget`` and never changes ``os.environ``.

One module a concern: ``vendor`` (``BraketVendor``: the verbs, the clients it keeps,
idempotency by clientToken, the lookup by token tag), ``parsing`` (GetDevice and
GetQuantumTask answers, result files, program set layouts, the clientToken and tags),
``calibration`` (device capabilities as a ``Calibration``), ``errors`` (Braket's codes
as vendor errors), ``settings`` (where the settings come from, the boto3 session and
client config built from them), ``event_queue`` (``BraketEventQueue``: Braket's task
events from the site's SQS queue), ``hybrid_jobs`` (a loop's session as a hybrid job)
and ``sdk`` (the SDK's heavy modules, loaded late). ``VENDOR`` is its descriptor: this
face imports nothing but the standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

import re

from flux_quantum.protocol.vendors import VendorDescriptor

# Braket's task events through the site's SQS queue, and a loop's hybrid job (Braket's
# and the emulator's Braket: the ``local`` vendor takes them too).
EVENTS_SETTINGS = ("events_queue", "events_wait", "events_poll", "events_silence")
HYBRID_SETTINGS = (
    "hybrid_role_arn",
    "hybrid_instance",
    "hybrid_price",
    "hybrid_max_runtime",
    "hybrid_start_timeout",
)
_DEVICE_ARN = re.compile(r"^arn:aws:braket:([a-z0-9-]*):[0-9]*:device/.+$")


def arn_region(device_id: str) -> str | None:
    """The region a Braket device ARN names (None: a managed simulator's, which names
    none); ValueError when ``device_id`` is not a device ARN."""
    match = _DEVICE_ARN.match(device_id)
    if not match:
        raise ValueError(
            f"id must be a Braket device ARN (arn:aws:braket:REGION::device/...), got {device_id!r}"
        )
    return match.group(1) or None


VENDOR = VendorDescriptor(
    name="braket",
    title="Amazon Braket",
    vendor="flux_quantum.vendors.braket.vendor:BraketVendor",
    errors="flux_quantum.vendors.braket.errors:translate_error",
    settings=(
        "s3_bucket",
        "s3_prefix",
        "endpoint_url",
        "s3_endpoint_url",
        "profile",
        *EVENTS_SETTINGS,
        "sqs_endpoint_url",
        *HYBRID_SETTINGS,
    ),
    id_region=arn_region,
    credentials=("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"),
    rank=10,
)
