"""How to reach Amazon Braket: the settings, and the boto3 session and client config built
from them.

This module owns where the settings come from (the catalog's ``vendors.braket``, else
the SDK's usual sources) and what they make: the boto3 session (a profile, or the
emulator's explicit keys), the botocore config of every client (one attempt, our
timeouts, path-style S3 for an explicit S3 endpoint, a read timeout that outlasts a
long poll of the events queue), the results bucket, the events queue (``events_*``:
the SQS queue the site routes Braket's task events to, how long one read waits, how
often a task is still polled while events come, and how long a silence may last) and a
loop's hybrid job (``hybrid_*``: its role, instance, price and bounds). It must
never call Braket or S3 (building a session or a config sends nothing), never read or
change ``os.environ`` itself (the environment is handed in) and never show a secret in a
message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from flux_quantum import __version__

# The AWS services a Braket vendor builds boto3 clients of.
BotoService = Literal["braket", "s3", "sqs"]

# SQS answers a ReceiveMessage after at most 20 s (its WaitTimeSeconds bound).
MAX_EVENTS_WAIT = 20
# How much longer than its long poll an events queue read may take before it times out.
EVENTS_READ_MARGIN = 10.0

BUCKET_VARIABLE = "AMZN_BRAKET_OUT_S3_BUCKET"  # the SDK's results bucket, as Braket jobs get it


@dataclass(frozen=True)
class BraketSettings:
    """How to reach Braket. Unset fields fall back to the SDK's usual sources.

    ``s3_bucket`` falls back to ``AMZN_BRAKET_OUT_S3_BUCKET``. ``credentials`` is an
    explicit (access key, secret) pair, used for the emulator only; real sites use the
    job owner's profile or environment.
    """

    region: str | None = None
    endpoint_url: str | None = None
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str = "flux-quantum"
    profile: str | None = None
    credentials: tuple[str, str] | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 20.0
    # Braket's task events, routed by the site to an SQS queue it owns (its URL or its
    # name; None: tasks are only polled), read with long polls of ``events_wait``
    # seconds; while they come a task is still polled every ``events_poll`` seconds,
    # and ``events_silence`` seconds without any while tasks are live mean they are lost.
    events_queue: str | None = None
    sqs_endpoint_url: str | None = None
    events_wait: int = MAX_EVENTS_WAIT
    events_poll: float = 60.0
    events_silence: float = 900.0
    # A loop's session on Braket: a hybrid job run as ``hybrid_role_arn`` (None: no
    # hybrid jobs), on a ``hybrid_instance`` billed ``hybrid_price`` dollars an hour (as
    # said to users; None: not said), at most ``hybrid_max_runtime`` seconds, waited
    # for at most ``hybrid_start_timeout`` seconds to run.
    hybrid_role_arn: str | None = None
    hybrid_instance: str = "ml.m5.large"
    hybrid_price: float | None = None
    hybrid_max_runtime: float = 28800.0
    hybrid_start_timeout: float = 900.0

    def __post_init__(self) -> None:
        if not 0 <= self.events_wait <= MAX_EVENTS_WAIT:
            raise ValueError(
                f"vendors.braket.events_wait must be 0 to {MAX_EVENTS_WAIT} seconds, "
                f"got {self.events_wait!r}"
            )
        for name in ("events_poll", "events_silence", "hybrid_max_runtime", "hybrid_start_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"vendors.braket.{name} must be seconds > 0, got {value!r}")

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str], **overrides: Any) -> BraketSettings:
        """From the catalog's ``vendors.braket`` (strings; ValueError names a bad one)."""
        known = (
            "endpoint_url",
            "s3_endpoint_url",
            "s3_bucket",
            "s3_prefix",
            "profile",
            "events_queue",
            "sqs_endpoint_url",
            "hybrid_role_arn",
            "hybrid_instance",
        )
        values: dict[str, Any] = {key: settings[key] for key in known if key in settings}
        values.update(numeric_settings(settings))
        values.update(overrides)
        return cls(**values)

    def results_bucket(self, environ: Mapping[str, str]) -> str | None:
        """The bucket results go to: the settings', else ``AMZN_BRAKET_OUT_S3_BUCKET``."""
        return self.s3_bucket or environ.get(BUCKET_VARIABLE)


# The catalog's settings that are numbers, and the type each one is read as.
NUMERIC_SETTINGS: Mapping[str, type] = {
    "events_wait": int,
    "events_poll": float,
    "events_silence": float,
    "hybrid_price": float,
    "hybrid_max_runtime": float,
    "hybrid_start_timeout": float,
}


def numeric_settings(settings: Mapping[str, str]) -> dict[str, Any]:
    """The numeric settings (``events_*``, ``hybrid_*``) of a catalog's vendor section,
    converted; ValueError names the one that is not a number."""
    out: dict[str, Any] = {}
    for key, kind in NUMERIC_SETTINGS.items():
        if key not in settings:
            continue
        try:
            out[key] = kind(settings[key])
        except ValueError:
            what = "a whole number of seconds" if kind is int else "a number of seconds"
            raise ValueError(
                f"vendors.braket.{key} must be {what}, got {settings[key]!r}"
            ) from None
    return out


def queue_region(queue: str) -> str | None:
    """The region in an SQS queue URL (``https://sqs.us-east-1.amazonaws.com/...``), or
    None (a queue name, or a URL that does not say)."""
    host = urlsplit(queue).hostname or ""
    parts = host.split(".")
    if len(parts) >= 4 and parts[0] == "sqs" and parts[2] == "amazonaws":
        return parts[1]
    return None


def boto_session(settings: BraketSettings, region: str | None = None) -> boto3.session.Session:
    """A boto3 session with the settings' profile or explicit keys (else the SDK's)."""
    key_id, secret = settings.credentials or (None, None)
    return boto3.session.Session(
        region_name=region,
        profile_name=settings.profile,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )


def client_config(settings: BraketSettings, service: BotoService) -> tuple[str | None, Config]:
    """``(endpoint, config)`` of the boto3 client of ``service`` ("braket", "s3", "sqs"): the
    settings' endpoint override (None: the SDK's resolution), one attempt (the vendor's
    ``RetryBudget`` retries) and the settings' timeouts; an explicit S3 endpoint is
    addressed path-style, as the emulator and most S3 look-alikes want."""
    read_timeout = settings.read_timeout
    if service == "sqs":
        # A long poll is an answer that takes events_wait seconds by design.
        read_timeout = max(read_timeout, settings.events_wait + EVENTS_READ_MARGIN)
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=settings.connect_timeout,
        read_timeout=read_timeout,
        user_agent_extra=f"flux-quantum/{__version__}",
    )
    if service == "sqs":
        return settings.sqs_endpoint_url, config
    if service != "s3":
        return settings.endpoint_url, config
    endpoint = settings.s3_endpoint_url
    if endpoint:
        config = config.merge(Config(s3={"addressing_style": "path"}))
    return endpoint, config
