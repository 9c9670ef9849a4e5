"""[quantum.compile]: defaults, and each bad key refused in one sentence."""

from __future__ import annotations

import pytest

from flux_quantum.compiler.limits import CompileLimits


def test_defaults_and_a_table():
    assert CompileLimits.from_table(None) == CompileLimits()
    limits = CompileLimits.from_table({"enabled": False, "timeout": 5, "memory_mb": 2048})
    assert not limits.enabled and limits.timeout == 5.0 and limits.memory_bytes == 2048 << 20


@pytest.mark.parametrize(
    "table, match",
    [
        ({"enabled": "yes"}, "enabled must be true or false"),
        ({"timeout": 0}, "timeout must be seconds > 0"),
        ({"memory_mb": 10}, "memory_mb must be an integer >= 512"),
        ({"workers": 0}, "workers must be an integer 1..64"),
        ({"speed": 1}, "has no key 'speed'"),
    ],
)
def test_a_bad_key_is_named(table, match):
    with pytest.raises(ValueError, match=match):
        CompileLimits.from_table(table)
