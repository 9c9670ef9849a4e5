"""pytest fixtures of the fuzz tests: the C parsers built once a session, skipped with
one loud line where flux-core's headers or a C compiler are missing. Import the fixture
names into a test module to use them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fuzzing import cparsers


def examples(default: int) -> int:
    """Examples per hypothesis property: FLUXQ_FUZZ_EXAMPLES, else DEFAULT (CI-bounded)."""
    return int(os.environ.get("FLUXQ_FUZZ_EXAMPLES", default))


@pytest.fixture(scope="session")
def fuzz_build(tmp_path_factory) -> Iterator[tuple]:
    built, parsers = cparsers.build(cparsers.fuzz_build_dir(tmp_path_factory))
    if parsers is None:
        pytest.skip("C parser tests SKIPPED: " + "; ".join(built.messages))
    yield built, parsers


@pytest.fixture(scope="session")
def c_parsers(fuzz_build) -> cparsers.CParsers:
    return fuzz_build[1]
