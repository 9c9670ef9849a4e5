"""Pytest fixtures for tests that talk to the vendor emulator through the real Braket SDK.

Load them in a test module with ``pytest_plugins = ["emulator_fixtures"]`` (t/ is on
sys.path through t/conftest.py); ``point_sdk_at`` can be imported. Each fixture starts a
live emulator on 127.0.0.1 driven by a ``ManualClock`` and points the unmodified SDK and
boto3 at it through the environment (``monkeypatch``, undone after the test). The SDK reads the environment when it creates a
session, so create ``AwsDevice``/``AwsQuantumTask``/clients inside the test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import flux_quantum  # noqa: F401
except ImportError:  # running from a source tree without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from flux_quantum.emulator import Emulator, ManualClock, Scenario

# Environment that could send botocore elsewhere than the emulator, or read a user's files.
_UNSET = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AMZN_BRAKET_TASK_RESULTS_S3_URI",
    "AMZN_BRAKET_DEVICE_ARN",
    # A Braket Direct reservation context (DirectReservation) the SDK would apply.
    "AMZN_BRAKET_RESERVATION_DEVICE_ARN",
    "AMZN_BRAKET_RESERVATION_TIME_WINDOW_ARN",
)


def point_sdk_at(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, max_attempts: int = 1
) -> None:
    """Set the environment so the SDK and boto3 reach ``emulator`` (undone by monkeypatch).

    ``max_attempts=1`` turns botocore retries off, so every fault is seen once and call
    counts are exact.
    """
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    for name, value in emulator.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", str(max_attempts))
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_emulator(
    monkeypatch: pytest.MonkeyPatch, manual_clock: ManualClock, emulator_tier: None
) -> Iterator[Callable[..., Emulator]]:
    """Factory: ``make_emulator(scenario_dict_or_Scenario=None, seed=0)`` -> started emulator
    with the SDK pointed at it; the shared ``manual_clock`` drives it; stopped after the test."""
    started: list[Emulator] = []

    def make(scenario: Scenario | dict[str, Any] | None = None, seed: int = 0) -> Emulator:
        if isinstance(scenario, dict):
            scenario = Scenario.from_dict(scenario)
        emu = Emulator(scenario=scenario, clock=manual_clock, seed=seed).start()
        started.append(emu)
        point_sdk_at(emu, monkeypatch)
        return emu

    yield make
    for emu in started:
        emu.stop()


@pytest.fixture
def emulator(make_emulator: Callable[..., Emulator]) -> Emulator:
    """A started emulator serving the default scenario, the SDK pointed at it."""
    return make_emulator()


@pytest.fixture
def braket_env(emulator: Emulator) -> dict[str, str]:
    """The environment of the default ``emulator`` (already applied)."""
    return emulator.env()
