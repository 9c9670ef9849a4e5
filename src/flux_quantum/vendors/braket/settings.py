"""How to reach Amazon Braket: the settings, and the boto3 session and client config built
from them.

This module owns where the settings come from (the catalog's ``vendors.braket``, else
the SDK's usual sources) and what they make: the boto3 session (a profile, or the
emulator's explicit keys), the botocore config of every client (one attempt, our
timeouts, path-style S3 for an explicit S3 endpoint) and the results bucket. It must
never call Braket or S3 (building a session or a config sends nothing), never read or
change ``os.environ`` itself (the environment is handed in) and never show a secret in a
message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import boto3
from botocore.config import Config

from flux_quantum import __version__

# The AWS services a Braket vendor builds boto3 clients of.
BotoService = Literal["braket", "s3"]

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

    @classmethod
    def from_catalog(cls, settings: Mapping[str, str], **overrides: Any) -> BraketSettings:
        known = ("endpoint_url", "s3_endpoint_url", "s3_bucket", "s3_prefix", "profile")
        values: dict[str, Any] = {key: settings[key] for key in known if key in settings}
        values.update(overrides)
        return cls(**values)

    def results_bucket(self, environ: Mapping[str, str]) -> str | None:
        """The bucket results go to: the settings', else ``AMZN_BRAKET_OUT_S3_BUCKET``."""
        return self.s3_bucket or environ.get(BUCKET_VARIABLE)


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
    """``(endpoint, config)`` of the boto3 client of ``service`` ("braket" or "s3"): the
    settings' endpoint override (None: the SDK's resolution), one attempt (the vendor's
    ``RetryBudget`` retries) and the settings' timeouts; an explicit S3 endpoint is
    addressed path-style, as the emulator and most S3 look-alikes want."""
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        user_agent_extra=f"flux-quantum/{__version__}",
    )
    if service != "s3":
        return settings.endpoint_url, config
    endpoint = settings.s3_endpoint_url
    if endpoint:
        config = config.merge(Config(s3={"addressing_style": "path"}))
    return endpoint, config
