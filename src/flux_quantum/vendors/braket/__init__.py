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
and ``sdk`` (the SDK's heavy modules, loaded late, and the service's warm-up).
``VENDOR`` is its descriptor, with what one program set may hold (``PROGRAM_SETS``) and
Braket Direct's reserved windows (``BRAKET_DIRECT``): this face imports nothing but the
standard library and ``flux_quantum.protocol``.
"""

from __future__ import annotations

import re

from flux_quantum.protocol.merged_tasks import PROGRAM_SET, Limits
from flux_quantum.protocol.vendors import ReservedWindows, VendorDescriptor

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
# Braket's tag values hold at most 256 characters: a program set's layout is one.
TAG_VALUE_MAX = 256


def program_sets(
    max_executables: int,
    max_total_shots: int,
    shots_per_executable: tuple[int, int],
    *,
    max_layout_chars: int = TAG_VALUE_MAX,
) -> Limits:
    """What one program set on a Braket device may hold: its action's
    ``maximumExecutables`` and ``maximumTotalShots``, and the shots an executable may run
    (the device's ``shotsRange``); every executable runs the same shots, the layout kept
    in a task tag."""
    low, high = shots_per_executable
    return Limits(
        layout=PROGRAM_SET,
        max_executables=max_executables,
        max_total_shots=max_total_shots,
        shots_per_executable=(max(1, low), high),
        max_layout_chars=max_layout_chars,
    )


# Program sets as Braket documents them for its QPUs: a device that advertises less
# refuses the set, and its jobs then go alone.
PROGRAM_SETS = program_sets(100, 100_000, (1, 100_000))
# A QPU booked for a window (Braket Direct): its tasks created with the reservation's ARN.
BRAKET_DIRECT = ReservedWindows(
    service="Braket Direct",
    devices="Braket devices",
    label="vendor braket",
    reservation=r"arn:aws[a-z-]*:braket:[a-z0-9-]+:\d{12}:reservation/[A-Za-z0-9._/-]{1,200}",
    reservation_form=(
        "a Braket Direct reservation ARN (arn:aws:braket:REGION:ACCOUNT:reservation/ID)"
    ),
)


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
    merged_tasks=PROGRAM_SETS,
    reserved_windows=BRAKET_DIRECT,
    warm_up="flux_quantum.vendors.braket.sdk:warm_up",
)
