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
client config built from them) and ``event_queue`` (``BraketEventQueue``: Braket's task
events from the site's SQS queue). The names below are the ones other modules use.
"""

from flux_quantum.vendors.braket.calibration import read_calibration
from flux_quantum.vendors.braket.errors import translate_error
from flux_quantum.vendors.braket.event_queue import BraketEventQueue, read_event
from flux_quantum.vendors.braket.parsing import (
    LAYOUT_TAG,
    PROGRAM_SET_ACTION,
    RESERVATION_ASSOCIATION,
    TAG_VALUE_MAX,
    TOKEN_TAG,
    client_token,
    decode_layout,
    device_queue_depth,
    encode_layout,
    execution_seconds,
    in_execution_window,
    parse_queue_count,
    program_set_layout,
    reservation_of,
    status_reason,
)
from flux_quantum.vendors.braket.settings import BraketSettings
from flux_quantum.vendors.braket.vendor import BraketVendor

__all__ = [
    "LAYOUT_TAG",
    "PROGRAM_SET_ACTION",
    "RESERVATION_ASSOCIATION",
    "TAG_VALUE_MAX",
    "TOKEN_TAG",
    "BraketEventQueue",
    "BraketSettings",
    "BraketVendor",
    "client_token",
    "decode_layout",
    "device_queue_depth",
    "encode_layout",
    "execution_seconds",
    "in_execution_window",
    "parse_queue_count",
    "program_set_layout",
    "read_event",
    "read_calibration",
    "reservation_of",
    "status_reason",
    "translate_error",
]
