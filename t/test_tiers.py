"""t/tiers.py, which every test's tier goes through: the tier a test's markers, fixtures
and file give it, what is wrong with them, and what the guard makes of what a running
test starts."""

from __future__ import annotations

import socket
from pathlib import Path

import tiers

HERE = Path(__file__).resolve().parent
UNIT_FILE = HERE / "test_something.py"
FLUX_FILE = HERE / "test_something_flux.py"


def test_a_test_nothing_claims_is_unit() -> None:
    assert tiers.tier_of(UNIT_FILE, ["parametrize"], ["tmp_path"]) == ("unit", [])


def test_a_marker_or_a_fixture_says_the_tier() -> None:
    assert tiers.tier_of(UNIT_FILE, ["flux"], ["tmp_path"]) == ("flux", [])
    assert tiers.tier_of(UNIT_FILE, [], ["pg_server"]) == ("pg", [])
    assert tiers.tier_of(UNIT_FILE, [], ["make_emulator", "emulator_tier"]) == ("emulator", [])
    # A flux test that also uses the PostgreSQL server is a flux test.
    assert tiers.tier_of(FLUX_FILE, ["flux"], ["pg_server"]) == ("flux", [])
    assert tiers.tier_of(HERE / "multiuser" / "test_x.py", [], []) == ("container", [])


def test_what_is_wrong_is_said_in_one_line_each() -> None:
    tier, problems = tiers.tier_of(UNIT_FILE, ["unit", "flux"], [])
    assert problems == ["carries the tiers unit, flux: give it exactly one"]
    _, problems = tiers.tier_of(UNIT_FILE, ["emulator"], ["pg_server"])
    assert problems == ["is marked emulator but uses pg_server, which needs pg"]
    _, problems = tiers.tier_of(UNIT_FILE, ["unit"], ["emulator_tier"])
    assert problems == ["is marked unit but uses emulator_tier, which needs emulator"]
    _, problems = tiers.tier_of(FLUX_FILE, [], [])
    assert problems == ["lives in test_something_flux.py but is in the unit tier, not flux"]


def audit(guard: tiers.Guard, event: str, *args: object) -> None:
    guard._audit(event, args)


def test_the_guard_names_what_a_test_started_and_the_tier_it_needs() -> None:
    guard = tiers.Guard()  # not installed: the events are given to it here
    guard.begin("t/test_x.py::test_y", "unit")
    audit(guard, "subprocess.Popen", "/usr/local/bin/flux", ["flux", "start"], None, None)
    audit(guard, "subprocess.Popen", None, ["flux", "submit"], None, None)  # said once
    audit(guard, "subprocess.Popen", None, ["sh", "-c", "true"], None, None)
    with socket.socket() as server:
        audit(guard, "socket.bind", server, ("127.0.0.1", 0))
    assert guard.end() == [
        "t/test_x.py::test_y is in the unit tier but starts `flux`: mark it flux or container",
        "t/test_x.py::test_y is in the unit tier but binds a server socket to "
        "('127.0.0.1', 0): mark it emulator or pg or flux or container",
    ]
    guard.begin("t/test_x.py::test_z", "emulator")
    with socket.socket() as server:
        audit(guard, "socket.bind", server, ("127.0.0.1", 0))
    audit(guard, "subprocess.Popen", b"/usr/lib/postgresql/15/bin/initdb", [], None, None)
    assert guard.end() == [
        "t/test_x.py::test_z is in the emulator tier but starts `initdb`: mark it pg or flux"
    ]
    # Between tests (a session's server stopping after the last one) nothing is watched.
    audit(guard, "subprocess.Popen", None, ["flux", "start"], None, None)
    assert guard.end() == []
