"""Test tiers (t/tiers.py): every test carries exactly one tier marker (``unit``,
``emulator``, ``pg``, ``flux``, ``container``), checked at collection, which fails with
one line per offending test; a running test that starts what its tier may not fails
too. The flux tier is skipped, with one loud line, where ``flux`` is not on PATH; tests
that sign as a guest (``flux_security``) where flux's Python lacks flux.security; the
PostgreSQL tests where no server can run. ``python -m pytest`` spreads the tests over
the machine's cores where pytest-xdist is installed (the ``test`` extra), one module on
one worker, the longest tiers first; ``-n 0`` runs them in one process."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiers  # noqa: E402

FLUX = shutil.which("flux")
SKIP_REASON = (
    "flux tier SKIPPED: `flux` is not on PATH (build flux-core and flux-sched, see README)"
)
GUARD = tiers.Guard().install()
TIER = pytest.StashKey[str]()


@functools.cache
def flux_security_missing() -> str | None:
    """Why tests cannot sign a job as another user here (None: they can): they sign
    with flux-security's Python bindings in flux's own Python (``flux python``)."""
    if FLUX is None:
        return None  # the flux tier's own line says it
    probe = subprocess.run(
        [FLUX, "python", "-c", "import flux.security"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return None
    why = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return (
        "flux-security tests SKIPPED: `flux python -c 'import flux.security'` failed "
        f"({why}): build flux-security and flux-core --with-flux-security"
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    import monitoring_tools

    from flux_quantum.testing import pgserver

    flux = f"flux tier: RUN with {FLUX}" if FLUX else SKIP_REASON
    return [
        flux,
        pgserver.missing() or f"PostgreSQL ledger tests: RUN with {pgserver.pg_bin()}",
        monitoring_tools.missing() or "monitoring tests (promtool, prometheus, tmux): RUN",
        flux_security_missing() or "flux-security tests: RUN",
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``python -m pytest`` runs on every core (pytest-xdist, one module a worker) unless
    told otherwise (``-n``, ``--dist``, ``-p no:xdist``); never inside the container
    cluster, whose multi-user tests share one system instance."""
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("FLUXQ_IN_CLUSTER"):
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a worker runs what it is sent
    option = config.option
    if option.numprocesses is None and option.dist == "no" and not option.collectonly:
        option.numprocesses = "auto"
        option.dist = "loadscope"
        option.loadscopereorder = False  # the collection's order: the longest tiers first


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        markers = [marker.name for marker in item.iter_markers()]
        tier, wrong = tiers.tier_of(item.path, markers, getattr(item, "fixturenames", ()))
        problems += [f"{item.nodeid} {why}" for why in wrong]
        item.stash[TIER] = tier
        if tier not in markers:
            item.add_marker(tier)
    if problems:
        raise pytest.UsageError(
            "tests without exactly the tier they need (t/tiers.py):\n" + "\n".join(problems)
        )
    _order(items, descending=bool(os.environ.get("PYTEST_XDIST_WORKER")))
    for item in items:
        if FLUX is None and item.stash[TIER] == "flux":
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
        elif item.get_closest_marker("flux_security") and flux_security_missing():
            item.add_marker(pytest.mark.skip(reason=flux_security_missing()))


def _order(items: list[pytest.Item], descending: bool) -> None:
    """Modules by the highest tier among their tests, each module's tests in their own
    order: the fast tiers first in one process (the first failure comes soon), the slow
    ones first when the modules are spread over workers (the longest start first)."""
    rank: dict[Path, int] = {}
    for item in items:
        level = tiers.TIERS.index(item.stash[TIER])
        rank[item.path] = max(rank.get(item.path, 0), level)
    first = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
    sign = -1 if descending else 1
    items.sort(key=lambda item: (sign * rank[item.path], first[item.path]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    GUARD.begin(item.nodeid, item.stash.get(TIER, "unit"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test that started, in its set-up or its body, what its tier may not fails,
    one line a breach (its fixtures' teardown is not watched: stopping is not starting,
    and a session's server stops after whichever test ran last)."""
    report = yield
    if call.when == "call":
        breaches = GUARD.end()
        if breaches and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(breaches)
        elif breaches:
            report.sections.append(("tier", "\n".join(breaches)))
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    import monitoring_tools

    from flux_quantum.testing import pgserver

    for reason in (
        None if FLUX else SKIP_REASON,
        pgserver.missing(),
        monitoring_tools.missing(),
        flux_security_missing(),
    ):
        if reason is not None:
            terminalreporter.write_line("!" * 78)
            terminalreporter.write_line(reason, red=True, bold=True)
            terminalreporter.write_line("!" * 78)


@pytest.fixture(scope="session")
def emulator_tier() -> None:
    """Asked for by every fixture that starts the project's emulator, or one of its
    sides, on loopback: a test that uses such a fixture is in the emulator tier."""


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for the session (``pgserver.PgServer``), started on
    first use and stopped at the end; skipped where it cannot run (``pgserver.missing``)."""
    from flux_quantum.testing import pgserver

    why = pgserver.missing()
    if why is not None:
        pytest.skip(why)
    server = pgserver.PgServer().start()
    try:
        yield server
    finally:
        server.remove()


def _ledger_backends() -> list[Any]:
    """SQLite always; PostgreSQL where it is installed, in the ``pg`` tier (the fixture
    asks for ``pg_server`` only as it runs, where the tier rules cannot see it)."""
    from flux_quantum.testing import pgserver

    postgresql = pytest.param("postgresql", marks=pytest.mark.pg)
    return ["sqlite"] + ([postgresql] if pgserver.missing() is None else [])


@pytest.fixture(params=_ledger_backends())
def ledger(request: pytest.FixtureRequest, tmp_path: Path):
    """A ledger on each backend: SQLite always, PostgreSQL where it is installed
    (t/site/test_ledger_pg.py says once, loudly, when it is not)."""
    from flux_quantum.site.ledger import Ledger
    from flux_quantum.testing import pgserver

    if request.param == "sqlite":
        target = tmp_path / "state" / "flux-quantum" / "ledger.db"
        with Ledger(target) as opened:
            yield opened
        return
    server = request.getfixturevalue("pg_server")
    credentials = pgserver.credentials_file(tmp_path)
    url = server.url(server.database())
    with Ledger(url, cluster="test", credentials=str(credentials)) as opened:
        yield opened


@pytest.fixture(autouse=True, scope="session")
def _private_state_home(tmp_path_factory: pytest.TempPathFactory):
    """Tests never read or write the user's own state directory (a default ledger there
    belongs to the user's instances, whatever flux-quantum they run)."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture
def clock():
    """The emulator's manual clock a test advances by hand (``ManualClock``), fresh for
    each test; a module may define its own."""
    from flux_quantum.emulator import ManualClock

    return ManualClock()
