"""The test tiers: which one each test is in (``tier_of``), and the guard that keeps a
test to what its tier may use (``Guard``). t/conftest.py applies both; it never
decides a tier itself.

A tier says what a test needs, least first: ``unit`` (no Flux, no servers), ``emulator``
(the project's loopback emulator with the vendors' real SDKs), ``pg`` (a real PostgreSQL
server), ``flux`` (real Flux instances), ``container`` (Docker). Each test carries exactly
one, as a marker: given by hand (``pytestmark = pytest.mark.emulator``, or on the test),
implied by a fixture it uses, directly or through another fixture (``FIXTURE_TIERS``:
``pg_server``, and ``emulator_tier``, which every fixture that starts an emulator asks
for), or by where it lives (t/multiuser only runs inside the container cluster); ``unit``
when nothing says otherwise. A test in a ``*_flux.py`` file must be ``flux``. The guard
watches, through Python's audit hooks, what a running test starts: a loopback server,
``flux``, PostgreSQL's programs, Docker; a test whose tier may not start it fails, naming
the tier it needs. So a flux test cannot pass as ``unit`` on a machine with Flux and
fail on one without.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIERS = ("unit", "emulator", "pg", "flux", "container")  # registered in pyproject.toml

# Fixtures whose use, by a test or by a fixture it uses, says the tier: a fixture that
# starts the emulator (or one of its sides) asks for ``emulator_tier`` (t/conftest.py).
FIXTURE_TIERS = {"pg_server": "pg", "emulator_tier": "emulator"}
MULTIUSER = Path(__file__).resolve().parent / "multiuser"

# What a running test may start, by the tiers that may start it (t/multiuser, the
# container tier, runs flux inside the cluster).
PROGRAM_TIERS = {
    "flux": frozenset({"flux", "container"}),
    "docker": frozenset({"container"}),
    "docker-compose": frozenset({"container"}),
    "initdb": frozenset({"pg", "flux"}),
    "pg_ctl": frozenset({"pg", "flux"}),
    "postgres": frozenset({"pg", "flux"}),
}
SERVER_TIERS = frozenset(TIERS) - {"unit"}


def _rank(tier: str) -> int:
    return TIERS.index(tier)


def tier_of(path: Path, markers: Iterable[str], fixtures: Iterable[str]) -> tuple[str, list[str]]:
    """The tier of a test in ``path`` carrying ``markers`` and using ``fixtures``, and
    what is wrong with it (empty when nothing is)."""
    given = list(dict.fromkeys(m for m in markers if m in TIERS))
    implied = {name: FIXTURE_TIERS[name] for name in fixtures if name in FIXTURE_TIERS}
    if path.is_relative_to(MULTIUSER):
        implied["t/multiuser"] = "container"
    problems = []
    if len(given) > 1:
        problems.append(f"carries the tiers {', '.join(given)}: give it exactly one")
    tier = max(given, key=_rank) if given else max(implied.values(), key=_rank, default="unit")
    for what, wants in implied.items():
        if _rank(wants) > _rank(tier):
            problems.append(f"is marked {tier} but uses {what}, which needs {wants}")
    if path.name.endswith("_flux.py") and tier != "flux":
        problems.append(f"lives in {path.name} but is in the {tier} tier, not flux")
    return tier, problems


def _program(args: Any) -> str | None:
    """The program a ``subprocess.Popen`` audit event starts (its base name)."""
    executable, argv = args[0], args[1]
    if executable is None and isinstance(argv, list | tuple) and argv:
        executable = argv[0]
    if isinstance(executable, bytes):
        executable = os.fsdecode(executable)
    return os.path.basename(str(executable)) if executable is not None else None


@dataclass
class Guard:
    """What the running test started that its tier may not: an audit hook (installed
    once, ``install``) notes it; ``begin`` and ``end`` bracket each test."""

    tier: str | None = None
    test: str = ""
    breaches: list[str] = field(default_factory=list)

    def install(self) -> Guard:
        sys.addaudithook(self._audit)
        return self

    def begin(self, test: str, tier: str) -> None:
        self.test, self.tier, self.breaches = test, tier, []

    def end(self) -> list[str]:
        """What the test breached, one line each; the guard then watches nothing."""
        breaches, self.tier, self.breaches = self.breaches, None, []
        return breaches

    def _audit(self, event: str, args: Any) -> None:
        if self.tier is None:
            return
        if event == "subprocess.Popen":
            program = _program(args)
            allowed = PROGRAM_TIERS.get(program or "")
            if allowed is not None and self.tier not in allowed:
                self._breach(f"starts `{program}`", allowed)
        elif event == "socket.bind":
            sock, address = args
            family = getattr(sock, "family", None)
            if family in (socket.AF_INET, socket.AF_INET6) and self.tier not in SERVER_TIERS:
                self._breach(f"binds a server socket to {address}", SERVER_TIERS)

    def _breach(self, what: str, allowed: frozenset[str]) -> None:
        needs = " or ".join(t for t in TIERS if t in allowed)
        line = f"{self.test} is in the {self.tier} tier but {what}: mark it {needs}"
        if line not in self.breaches:
            self.breaches.append(line)
